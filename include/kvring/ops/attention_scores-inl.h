// kvring/ops/attention_scores-inl.h: the tile scoring of kvring's attention kernels: raw
// q . k scores of a register block of rows over one position-aligned tile (or two, paired on
// the tiled layout), in a fixed order of dims, with the prefetch of the tile's V; and the
// per-target basics the other parts share (register budget, tile shapes, FMA chains). Internal to
// kvring/ops/attention-inl.h (namespace attention_internal).

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_SCORES_INL_H_
#undef KVRING_OPS_ATTENTION_SCORES_INL_H_
#else
#define KVRING_OPS_ATTENTION_SCORES_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kvring/bf16.h"
#include "kvring/detail/cpu_choice.h"
#include "kvring/kernel_limits.h"

// After highway.h: the formats' traits, what a target's vectors allow.
#include "kvring/ops/attention_format-inl.h"
#include "kvring/ops/target_vectors-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// Registers for score accumulators of one register block: AVX-512 has 32 vector registers,
// the others 16 (and SCALAR spills regardless).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
static constexpr size_t kScoreRegisters = 20;
#else
static constexpr size_t kScoreRegisters = 10;
#endif

// Shapes of one tile of kTile positions.
template <uint64_t kTile>
struct TileShape {
  // f32 lanes of one K vector: a vector of 2 * kLanes BF16 K values of one dim covers
  // 2 * kLanes consecutive positions, split into even and odd positions.
  using DK = SureF32<static_cast<size_t>(kTile / 2)>;
  static constexpr size_t kLanes = hn::MaxLanes(DK());
  static constexpr size_t kPairs = static_cast<size_t>(kTile) / (2 * kLanes);
  static constexpr size_t kVectors = 2 * kPairs;  // f32 score vectors per row
  static_assert(kPairs * 2 * kLanes == kTile, "tile must be a whole number of BF16 vectors");
  static constexpr size_t kRowsByRegisters = kScoreRegisters / kVectors;
  // Rows of one register block: a power of two from 1 to 8.
  static constexpr size_t kMaxRegRows = kRowsByRegisters >= 8   ? 8
                                        : kRowsByRegisters >= 4 ? 4
                                        : kRowsByRegisters >= 2 ? 2
                                                                : 1;
};

// Full f32 vectors of the target (V accumulators, and the halves paired scoring fills).
using DV = hn::ScalableTag<float>;

// Prefetch: what the kernel fetches while working on a tile. Decode does little work per byte, and
// flash K rows of one dim are num_slots apart, too many streams for the hardware prefetcher, so the
// kernel prefetches in software, half a tile ahead: while a tile's K is scored, the lines of the
// same tile's V, one per scored dim; while its V is accumulated, the lines of the next tile's
// K, one per 32 V elements. Each phase fetches what the other reads next, and L1 holds the
// tile being read plus half a tile. Measured against prefetching each phase's own lines of
// the next tile (a whole tile ahead: 32 KiB at D256 with its 32 KiB being read overflows the
// 48 KiB L1), GQA 2 decode: 0.86-0.98 of the time from memory, 0.7-0.8 at D256 from the L3,
// 1.05-1.23 at D128 from the L3 in four of five runs (the next tile's K has only the V pass to
// arrive). Further ahead, in bursts, or with more arithmetic per prefetch ran slower: the
// loops issue about as many instructions as the core takes.

// Into which cache (detail::PrefetchChoice): on Intel CPUs L2 only (PREFETCHT1). A line
// prefetched into L1 holds one of its few fill buffers until it arrives, and a stream of such
// prefetches stalls the loop issuing them. Measured on the Intel Xeon host (docs/benchmarks.md):
// BF16 decode 4-20% faster on AVX3_DL (4096 and 32768 positions, flash and tiled, ring and
// flat), 0-5% on the AVX2 kernels; flash int8 integer products 10-20% faster at 32768;
// tiled int8 (contiguous tiles, prefetched whole tiles ahead) 2-4% slower: tiled int8 keeps
// L1. AMD CPUs keep L1, not measured here: AMD documents PREFETCHT1 as filling L2 only from
// Zen 4 on (before, it fills L1 as PREFETCHT0 does), and Zen 4 is reported to drop some of
// them.
HWY_INLINE bool PrefetchAheadToL2() {
#if HWY_ARCH_X86 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
  static const bool intel = __builtin_cpu_is("intel");
  const detail::PrefetchCache choice = detail::PrefetchChoice();
  return choice == detail::PrefetchCache::kAuto ? intel : choice == detail::PrefetchCache::kL2;
#else
  return false;
#endif
}

// Prefetches the line at p for a read: into L2 only when to_l2 (PrefetchAheadToL2), else into
// L1 as well.
HWY_INLINE void PrefetchLine(const void* p, bool to_l2) {
#if HWY_ARCH_X86 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
  if (to_l2) {
    __builtin_prefetch(p, 0, 2);
    return;
  }
#endif
  static_cast<void>(to_l2);
  hwy::Prefetch(p);
}

// One tile's K lines and V bytes, to spread the prefetch of one over the loop reading the
// other. K line j of a tile: k + j * k_line_stride (flash: one line per dim row, rows
// dim_stride apart; tiled: contiguous).
struct PrefetchShape {
  size_t k_line_stride = 0;    // elements between a tile's K lines
  size_t k_lines = 0;          // a tile's K lines
  size_t v_bytes_per_dim = 0;  // V bytes per scored dim (a tile's V bytes / head_dim, down)
  // K lines a line of the tile's V stands for in a V pass (AccumulateChunks): 2 for int8 whose
  // K has at least twice the V's lines (flash int8: a K line per dim, half of it the tile's;
  // with one, the V pass left half of the next tile's K to demand loads), else 1.
  size_t k_per_v_line = 1;
  bool to_l2 = false;  // PrefetchLine's cache (int8 tiled tiles: L1)

  // element_bytes: 2 for BF16, 1 for int8 (a 64-byte line holds 64 / element_bytes).
  PrefetchShape(size_t tile, size_t dim_stride, size_t head_dim, size_t v_head_dim,
                size_t element_bytes = sizeof(BF16))
      : k_line_stride(dim_stride == tile ? 64 / element_bytes : dim_stride),
        // (Flash: a line per dim row, whose tile slice is at most a line.)
        k_lines(dim_stride == tile ? tile * head_dim * element_bytes / 64
                                   : head_dim * ((tile * element_bytes + 63) / 64)),
        v_bytes_per_dim(tile * v_head_dim * element_bytes / head_dim),
        to_l2(PrefetchAheadToL2() && (element_bytes != 1 || dim_stride != tile)) {
    const size_t v_lines = tile * ((v_head_dim * element_bytes + 63) / 64);
    k_per_v_line = element_bytes == 1 && k_lines >= 2 * v_lines ? 2 : 1;
  }
};

// Prefetches the lines of this tile's V that scored dim `dim` stands for: one, or two where a
// dim stands for more than 64 bytes (TiledLayout<64> BF16: 128 bytes; fetching one left every
// other line to the demand loads, docs/benchmarks.md). Only a V wider than K at that tile
// height stands for more; its further lines are left to the demand loads: a loop over the
// lines here took 1.6-1.9x the warm time of flash and tiled32 decode (Zen 5, 2026-12-06).
template <typename T>
HWY_INLINE void PrefetchV(const T* v_now, size_t dim, const PrefetchShape& ps) {
  const char* line = reinterpret_cast<const char*>(v_now) + dim * ps.v_bytes_per_dim;
  PrefetchLine(line, ps.to_l2);
  if (ps.v_bytes_per_dim > 64) PrefetchLine(line + 64, ps.to_l2);
}
// Prefetches the line of the next tile's K that V element `element` of this tile (slot-major
// index in the tile's V block) stands for: line element / (elements a line holds), if the K
// has that many lines (a V wider than K leaves its last lines to the demand loads).
template <typename T>
HWY_INLINE void PrefetchK(const T* k_next, size_t element, const PrefetchShape& ps) {
  const size_t line = element / (64 / sizeof(T));
  if (line < ps.k_lines) PrefetchLine(k_next + line * ps.k_line_stride, ps.to_l2);
}

// FMA chains in flight that hide the FMA latency (two pipes, about four cycles each): blocks
// of few rows split their work into independent accumulators until they have this many.
// Twice the latency cover where the registers allow it (AVX-512's 32): the loads feeding the
// chains come from L3 in decode (measured, in-process A/B: decode GQA 2 0.96-0.98 of the time
// with 8, tiled 0.93; GQA 8 and prefill unchanged).
static constexpr size_t kWantedChains = kScoreRegisters >= 20 ? 16 : 8;

// Scores sum the dims (TileScoresPaired: the dim pairs) in kDimSplit interleaved partial
// sums (dim % kDimSplit), each from zero, then add them in order. A row's bits therefore do
// not depend on the block it is in: blocks of few rows compute several partial sums at once
// (AtOnce of them: more FMA chains), larger blocks one after another, adding each into
// `scores`. (A verify batch of 1 + draft tokens then scores its first row as plain decode.)
static constexpr size_t kDimSplit = 4;
static_assert(kAttentionDimMultiple % (2 * kDimSplit) == 0, "head_dim must split evenly");
constexpr size_t AtOnce(size_t chains) {
  return chains >= kWantedChains ? 1 : 2 * chains >= kWantedChains ? 2 : 4;
}

// Whether a tile's K vectors fill at most half a full vector (TiledLayout<16> and <8> on
// AVX-512): then TileScoresPaired scores two dims per full vector. (SCALAR has no halves.)
template <uint64_t kTile>
constexpr bool kPairDims =
#if HWY_TARGET != HWY_SCALAR
    TileShape<kTile>::kPairs == 1 && 2 * TileShape<kTile>::kLanes <= kSureLanesF32;
#else
    false;
#endif

#if HWY_TARGET != HWY_SCALAR

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Which BF16 of a 16-position tile's dims d and d + 1 (d's 16 positions, then d + 1's) each
// f32 lane of LoadDimPair's vectors takes, in the upper half of the lane (the even 16-bit
// words are zeroed): lane j < 8 position 2j, lane j >= 8 position 2(j - 8) + 1.
// clang-format off
alignas(64) static constexpr uint16_t kDimPairFirst[32] = {
    0, 0,  0, 2,  0, 4,  0, 6,  0, 8,  0, 10, 0, 12, 0, 14,
    0, 1,  0, 3,  0, 5,  0, 7,  0, 9,  0, 11, 0, 13, 0, 15};
alignas(64) static constexpr uint16_t kDimPairSecond[32] = {
    0, 16, 0, 18, 0, 20, 0, 22, 0, 24, 0, 26, 0, 28, 0, 30,
    0, 17, 0, 19, 0, 21, 0, 23, 0, 25, 0, 27, 0, 29, 0, 31};
// clang-format on

// The K of a 16-position tile's dims d and d + 1 at `p` as one f32 vector per dim, the
// positions in the lanes where LoadPairs puts them (even positions, then odd): dim d's in
// `first`, d + 1's in `second`. One zero-masked vpermw each, from one load: GCC otherwise
// folds the load into both vpermw as their memory operands, reading the line twice (a load
// more per dim pair in a loop bound by its loads: two rows per kv_head, D128, 4096 positions
// warm on Zen 5, 0.95 of the time with one load).
HWY_INLINE void LoadDimPair(const BF16* HWY_RESTRICT p, hn::Vec512<float>& first,
                            hn::Vec512<float>& second) {
  __m512i bits = _mm512_loadu_si512(p);
#if HWY_COMPILER_GCC || HWY_COMPILER_CLANG
  asm("" : "+v"(bits));  // the loaded register, not the memory, goes to both vpermw
#endif
  constexpr __mmask32 kUpperWords = 0xAAAAAAAAu;
  first.raw = _mm512_castsi512_ps(
      _mm512_maskz_permutexvar_epi16(kUpperWords, _mm512_load_si512(kDimPairFirst), bits));
  second.raw = _mm512_castsi512_ps(
      _mm512_maskz_permutexvar_epi16(kUpperWords, _mm512_load_si512(kDimPairSecond), bits));
}
#endif

// Whether TileScoresPaired multiplies one dim per vector (LoadDimPair, 16-lane AVX-512
// vectors) rather than a dim pair per vector (LoadPairs).
template <class DF>
constexpr bool kScoreByDim =
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    hn::MaxLanes(DF()) == 16;
#else
    false;
#endif

// TileScores for kTiles tiles whose dims are kTile BF16 apart (the tiled layout) and
// kPairDims: a full vector covers a tile's K of dims d and d + 1. Two forms, the same bits:
// on AVX-512 with 16-position tiles, one vector per dim (LoadDimPair), multiplied by the
// broadcast q[d] and q[d + 1]; elsewhere one vector of both dims per half of the positions
// (LoadPairs), multiplied by a q vector of q[d] in its lower half and q[d + 1] in its upper
// half, which costs two broadcasts and a shuffle per row and dim pair (on Intel AVX-512 the
// shuffle takes an FMA port: tiled decode GQA 16/2 took 1.13x the time it takes by dim with one
// V prefetch per dim pair, docs/benchmarks.md). Either way a lane adds the same products in the
// same order: each partial sum (kDimSplit) sums dim d's and dim d + 1's products apart, in the
// order of the dims, then adds the two; the partial sums add in order. Tile t's scores go to
// scores[t] (each tile's bits the same as alone); v_now[t] is its V, to prefetch meanwhile (see
// PrefetchShape).
template <size_t kRows, size_t kTiles, uint64_t kTile>
HWY_INLINE void TileScoresPaired(const float* const* HWY_RESTRICT q,
                                 const BF16* const* HWY_RESTRICT k_tiles, size_t head_dim,
                                 const BF16* const* v_now, const PrefetchShape& ps,
                                 float* const* HWY_RESTRICT scores) {
  using Shape = TileShape<kTile>;
  const typename Shape::DK dh;
  const hn::Twice<typename Shape::DK> df;
  using V = hn::Vec<decltype(df)>;
  constexpr bool kByDim = kScoreByDim<decltype(df)>;
  const size_t v_bytes = ps.v_bytes_per_dim;  // (locals: the loop reloaded them from `ps`)
  const bool to_l2 = ps.to_l2;
  constexpr size_t kAtOnce = AtOnce(kRows * kTiles * 2);
  // acc: partial sum s, row r, tile t, half e (even/odd positions; by dim: dims d, d + 1) at
  // ((s * kRows + r) * kTiles + t) * 2 + e.
  const auto at = [](size_t s, size_t r, size_t t, size_t e) {
    return ((s * kRows + r) * kTiles + t) * 2 + e;
  };
  for (size_t s0 = 0; s0 < kDimSplit; s0 += kAtOnce) {
    VecArray<decltype(df), kAtOnce * kRows * kTiles * 2> acc;
    acc.SetAll(df, hn::Zero(df));
    // (A do-while: head_dim is a positive multiple of kAttentionDimMultiple, and a loop that
    // might not run made GCC keep acc in memory as well, zeroing its 1 KiB each tile.)
    size_t dim0 = 0;
    do {
      KVRING_UNROLL
      for (size_t s = 0; s < kAtOnce; ++s) {
        const size_t dim = dim0 + 2 * (s0 + s);
        VecArray<decltype(df), kTiles> even, odd;
        KVRING_UNROLL
        for (size_t t = 0; t < kTiles; ++t) {
          if (v_now[t] != nullptr) {
            // (Where a dim stands for half a line or less, the even dims' lines, at most a
            // line apart, cover the V lines.)
            const char* v_line = reinterpret_cast<const char*>(v_now[t]) + dim * v_bytes;
            PrefetchLine(v_line, to_l2);
            if (v_bytes > 32) PrefetchLine(v_line + v_bytes, to_l2);
          }
          V e, o;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
          if constexpr (kByDim) {
            LoadDimPair(k_tiles[t] + dim * kTile, e, o);
          } else {
            LoadPairs(df, k_tiles[t] + dim * kTile, e, o);
          }
#else
          LoadPairs(df, k_tiles[t] + dim * kTile, e, o);
#endif
          even.Set(df, t, e);
          odd.Set(df, t, o);
        }
        KVRING_UNROLL
        for (size_t r = 0; r < kRows; ++r) {
          // By dim: even, odd = dims d, d + 1. Else halves of both dims: one q vector.
          const V q0 = kByDim ? hn::Set(df, q[r][dim])
                              : hn::Combine(df, hn::Set(dh, q[r][dim + 1]), hn::Set(dh, q[r][dim]));
          const V q1 = kByDim ? hn::Set(df, q[r][dim + 1]) : q0;
          KVRING_UNROLL
          for (size_t t = 0; t < kTiles; ++t) {
            acc.Set(df, at(s, r, t, 0),
                    hn::MulAdd(q0, even.Get(df, t), acc.Get(df, at(s, r, t, 0))));
            acc.Set(df, at(s, r, t, 1),
                    hn::MulAdd(q1, odd.Get(df, t), acc.Get(df, at(s, r, t, 1))));
          }
        }
      }
      dim0 += 2 * kDimSplit;
    } while (dim0 < head_dim);
    // Each partial sum adds its dim d and d + 1 sums (by dim: its two vectors, whose lanes
    // hold the tile's positions in the scores' order; else each vector's halves), then adds
    // to the total in order.
    KVRING_UNROLL
    for (size_t t = 0; t < kTiles; ++t) {
      KVRING_UNROLL
      for (size_t r = 0; r < kRows; ++r) {
        if constexpr (kByDim) {
          float* HWY_RESTRICT out = scores[t] + r * kTile;
          const auto folded = [&](size_t s) {
            return hn::Add(acc.Get(df, at(s, r, t, 0)), acc.Get(df, at(s, r, t, 1)));
          };
          V sum = folded(0);
          if (s0 != 0) sum = hn::Add(hn::LoadU(df, out), sum);
          KVRING_UNROLL
          for (size_t s = 1; s < kAtOnce; ++s) sum = hn::Add(sum, folded(s));
          hn::StoreU(sum, df, out);
        } else {
          KVRING_UNROLL
          for (size_t e = 0; e < 2; ++e) {
            float* HWY_RESTRICT out = scores[t] + r * kTile + e * Shape::kLanes;
            const auto folded = [&](size_t s) {
              const V v = acc.Get(df, at(s, r, t, e));
              return hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v));
            };
            auto sum = folded(0);
            if (s0 != 0) sum = hn::Add(hn::LoadU(dh, out), sum);
            KVRING_UNROLL
            for (size_t s = 1; s < kAtOnce; ++s) sum = hn::Add(sum, folded(s));
            hn::StoreU(sum, dh, out);
          }
        }
      }
    }
  }
}

// Scores of two tiles for kRows rows (TileScoresPaired). By dim (kScoreByDim), blocks of
// one, two or eight rows tile after tile, so that each K vector serves every row (measured on
// Intel AVX-512, 8 rows over L1-resident tiles: 0.65 of the FMA twin, against 0.51 for the pair
// form's two tiles at once in blocks of four rows, and 0.35 by dim in that shape); blocks of
// four rows (three or four rows per kv_head: decode at GQA 3-4, AttentionMany's GQA 8/2) take
// both tiles at once, so that each broadcast query element serves 32 positions (tile after
// tile, four rows load more than their FMAs take cycles: on Zen 5, D128 decode over 4096
// positions warm, 0.87-0.90 of the time; two rows stay tile after tile: both tiles at once,
// their dims in two passes, read K from memory more slowly). Else in register blocks of at
// most four rows so that the accumulators of both tiles stay in registers.
template <size_t kRows, uint64_t kTile>
HWY_INLINE void TwoTileScoresPaired(const float* const* HWY_RESTRICT q,
                                    const BF16* const* HWY_RESTRICT k_tiles, size_t head_dim,
                                    const BF16* const* v_now, const PrefetchShape& ps,
                                    float* const* HWY_RESTRICT scores) {
  if constexpr (kScoreByDim<hn::Twice<typename TileShape<kTile>::DK>>) {
    if constexpr (kRows == 4) {
      TileScoresPaired<kRows, 2, kTile>(q, k_tiles, head_dim, v_now, ps, scores);
      return;
    }
    TileScoresPaired<kRows, 1, kTile>(q, k_tiles, head_dim, v_now, ps, scores);
    TileScoresPaired<kRows, 1, kTile>(q, k_tiles + 1, head_dim, v_now + 1, ps, scores + 1);
    return;
  }
  constexpr size_t kPart = kRows < 4 ? kRows : 4;
  const BF16* const none[2] = {nullptr, nullptr};
  KVRING_UNROLL
  for (size_t r0 = 0; r0 < kRows; r0 += kPart) {
    float* part_scores[2] = {scores[0] + r0 * kTile, scores[1] + r0 * kTile};
    // (The first part prefetches; the others read the same K.)
    TileScoresPaired<kPart, 2, kTile>(q + r0, k_tiles, head_dim, r0 == 0 ? v_now : none, ps,
                                      part_scores);
  }
}
#endif  // HWY_TARGET != HWY_SCALAR

// The dim sums of TileScores: for kRows rows, kVectors score vectors of descriptor D per row
// (lanes kLanes apart in scores[r * kTile + ...]), the dims summed as kDimSplit says.
// load_dim(dim, k) sets k's kVectors vectors to the tile's K of `dim` (and prefetches).
template <size_t kRows, size_t kVectors, uint64_t kTile, class D, class LoadDim>
HWY_INLINE void SumTileDims(D d, const float* const* HWY_RESTRICT q, size_t head_dim,
                            const LoadDim& load_dim, float* HWY_RESTRICT scores) {
  using V = hn::Vec<D>;
  constexpr size_t kLanes = hn::MaxLanes(D());
  static_assert(kVectors * kLanes == kTile, "tile must be a whole number of vectors");
  constexpr size_t kAtOnce = AtOnce(kRows * kVectors);
  // acc: partial sum s, row r, score vector i at (s * kRows + r) * kVectors + i.
  for (size_t s0 = 0; s0 < kDimSplit; s0 += kAtOnce) {
    VecArray<D, kAtOnce * kRows * kVectors> acc;
    acc.SetAll(d, hn::Zero(d));
    size_t dim0 = 0;  // (a do-while, as in TileScoresPaired)
    do {
      KVRING_UNROLL
      for (size_t s = 0; s < kAtOnce; ++s) {
        const size_t dim = dim0 + s0 + s;
        VecArray<D, kVectors> k;
        load_dim(dim, k);
        KVRING_UNROLL
        for (size_t r = 0; r < kRows; ++r) {
          const V qd = hn::Set(d, q[r][dim]);
          const size_t base = (s * kRows + r) * kVectors;
          KVRING_UNROLL
          for (size_t i = 0; i < kVectors; ++i) {
            acc.Set(d, base + i, hn::MulAdd(qd, k.Get(d, i), acc.Get(d, base + i)));
          }
        }
      }
      dim0 += kDimSplit;
    } while (dim0 < head_dim);
    KVRING_UNROLL
    for (size_t r = 0; r < kRows; ++r) {
      KVRING_UNROLL
      for (size_t i = 0; i < kVectors; ++i) {
        float* HWY_RESTRICT out = scores + r * kTile + i * kLanes;
        V sum = acc.Get(d, r * kVectors + i);
        if (s0 != 0) sum = hn::Add(hn::LoadU(d, out), sum);
        KVRING_UNROLL
        for (size_t s = 1; s < kAtOnce; ++s) {
          sum = hn::Add(sum, acc.Get(d, (s * kRows + r) * kVectors + i));
        }
        hn::StoreU(sum, d, out);
      }
    }
  }
}

// Computes raw scores q . k of kRows rows for one tile: scores[r * kTile + i] for the lane
// order of the element type (BF16: TileShape's, vector 2p + e, lane j: position 2 * kLanes * p
// + 2 * j + e; int8: natural), the dims summed as kDimSplit says: a fixed order, the same for
// every tile wherever it sits in the buffers and for every block a row is in. T: the stored
// element, BF16 or int8 (then the scores are q . q_int8, which the caller multiplies by the
// positions' K scales). Int8 tiles take vectors as wide as the tile fills, up to the target's
// full width (a TiledLayout<16> tile one AVX-512 vector per dim, not two halves: 10-15 %
// faster, docs/benchmarks.md); each lane adds the same products in the same order whatever
// the width, so the bits do not depend on it.
template <size_t kRows, uint64_t kTile, typename T>
HWY_INLINE void TileScores(const float* const* HWY_RESTRICT q, const T* HWY_RESTRICT k_tile,
                           size_t dim_stride, size_t head_dim, const T* v_now,
                           const PrefetchShape& ps, float* HWY_RESTRICT scores) {
  if constexpr (std::is_same<T, int8_t>::value) {
    const SureF32<static_cast<size_t>(kTile)> dw;
    const hn::Rebind<int8_t, decltype(dw)> d8;
    const hn::Rebind<int32_t, decltype(dw)> d32;
    constexpr size_t kLanes = hn::MaxLanes(decltype(dw)());
    constexpr size_t kVectors = static_cast<size_t>(kTile) / kLanes;
    SumTileDims<kRows, kVectors, kTile>(
        dw, q, head_dim,
        [&](size_t dim, auto& k) {
          const int8_t* HWY_RESTRICT row = k_tile + dim * dim_stride;
          PrefetchV(v_now, dim, ps);  // see PrefetchShape
          KVRING_UNROLL
          for (size_t i = 0; i < kVectors; ++i) {
            k.Set(dw, i, hn::ConvertTo(dw, hn::PromoteTo(d32, hn::LoadU(d8, row + i * kLanes))));
          }
        },
        scores);
  } else {
#if HWY_TARGET != HWY_SCALAR
    if constexpr (kPairDims<kTile> && ElementKernel<T>::kPairedScores) {
      if (dim_stride == kTile) {
        const BF16* const tiles[1] = {k_tile};
        const BF16* const v_tiles[1] = {v_now};
        float* const out[1] = {scores};
        TileScoresPaired<kRows, 1, kTile>(q, tiles, head_dim, v_tiles, ps, out);
        return;
      }
    }
#endif
    using Shape = TileShape<kTile>;
    const typename Shape::DK dk;
    SumTileDims<kRows, Shape::kVectors, kTile>(
        dk, q, head_dim,
        [&](size_t dim, auto& k) {  // pair p: 2p even, 2p + 1 odd
          const T* HWY_RESTRICT row = k_tile + dim * dim_stride;
          PrefetchV(v_now, dim, ps);  // see PrefetchShape
          KVRING_UNROLL
          for (size_t p = 0; p < Shape::kPairs; ++p) {
            hn::Vec<decltype(dk)> even, odd;
            ElementKernel<T>::Load(dk, row + p * 2 * Shape::kLanes, even, odd);
            k.Set(dk, 2 * p, even);
            k.Set(dk, 2 * p + 1, odd);
          }
        },
        scores);
  }
}

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_SCORES_INL_H_
