// kvring/ops/attention-inl.h: Highway kernels for exact attention over a KVView, flash
// (FlashLayout) and tiled (TiledLayout) backends, decode and prefill, with the checked entry
// points (Attention). Per-target code: include and call (static dispatch), or use dynamic
// dispatch through kvring/dispatch.h (kvring/ops/dispatch_unit.h or kvring::kernels).
//
// Numerics (docs/attention.md): q . k in f32 from BF16 K, online softmax in f32, V
// accumulated in f32. Every item walks position-aligned tiles of Layout::kTileSlots positions
// in chronological order with a fixed in-tile order, and masks invisible lanes by selection
// (scores to -inf, invisible V rows never read into an accumulator), so ring and flat storage
// of the same history give bit-identical outputs (property 1, docs/design.md).

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_INL_H_
#undef KVRING_OPS_ATTENTION_INL_H_
#else
#define KVRING_OPS_ATTENTION_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/bf16.h"
#include "kvring/detail/transpose.h"
#include "kvring/kv_view.h"
#include "kvring/status.h"
#include "kvring/task_runner.h"
#include "kvring/views.h"

// After highway.h: per-target helpers this file uses.
#include "hwy/contrib/math/math-inl.h"
#include "kvring/ops/append-inl.h"

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
  using DK = hn::CappedTag<float, static_cast<size_t>(kTile / 2)>;
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

// Loads 2 * Lanes(df) consecutive BF16 at `p` as two f32 vectors: elements 0, 2, 4, ... in
// `even` and 1, 3, 5, ... in `odd`. A shift and a mask: cheaper than PromoteTo, which
// crosses lanes. BF16 -> f32 is exact.
template <class DF>
HWY_INLINE void LoadPairs(DF df, const BF16* HWY_RESTRICT p, hn::Vec<DF>& even, hn::Vec<DF>& odd) {
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  even = hn::BitCast(df, hn::ShiftLeft<16>(bits));
  odd = hn::BitCast(df, hn::And(bits, hn::Set(du, 0xFFFF0000u)));
}

// The accumulators of a row hold V's dims permuted: each chunk of 2 * Lanes dims stores its
// even dims, then its odd dims (what LoadPairs yields). Chunks are 2 * Lanes(ScalableTag)
// dims, then (only on AVX-512 for dims that are 16 mod 32) 2 * Lanes(CappedTag<float, 8>).
using DV = hn::ScalableTag<float>;
using DVTail = hn::CappedTag<float, 8>;

// Returns where dim `dim` of a row of `num_dims` sits in the permuted accumulators.
HWY_INLINE size_t PermutedIndex(size_t dim, size_t num_dims) {
  const size_t lanes = hn::Lanes(DV());
  const size_t main_dims = num_dims / (2 * lanes) * (2 * lanes);
  const size_t chunk_lanes = dim < main_dims ? lanes : hn::Lanes(DVTail());
  const size_t chunk_begin =
      dim < main_dims ? dim / (2 * lanes) * (2 * lanes)
                      : main_dims + (dim - main_dims) / (2 * chunk_lanes) * (2 * chunk_lanes);
  const size_t in_chunk = dim - chunk_begin;
  return chunk_begin + (in_chunk % 2) * chunk_lanes + in_chunk / 2;
}

// Where a row's query and state live while an item runs.
struct Row {
  const float* q = nullptr;  // [head_dim], pre-scaled
  float* acc = nullptr;      // [v_head_dim], permuted
  uint64_t lo = 0;           // first visible position (inclusive)
  uint64_t hi = 0;           // one past the last visible position
  float m = 0.0f;            // running max
  float l = 0.0f;            // running sum
};

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

// One tile's K lines and V bytes, to spread the prefetch of one over the loop reading the
// other. K line j of a tile: k + j * k_line_stride (flash: one line per dim row, rows
// dim_stride apart; tiled: contiguous).
struct PrefetchShape {
  size_t k_line_stride = 0;    // elements between a tile's K lines
  size_t k_lines = 0;          // a tile's K lines
  size_t v_bytes_per_dim = 0;  // V bytes per scored dim (a tile's V bytes / head_dim, down)

  PrefetchShape(size_t tile, size_t dim_stride, size_t head_dim, size_t v_head_dim)
      : k_line_stride(dim_stride == tile ? 32 : dim_stride),
        k_lines(tile * head_dim / 32),
        v_bytes_per_dim(tile * v_head_dim * sizeof(BF16) / head_dim) {}
};

// Prefetches the line of this tile's V that scored dim `dim` stands for.
HWY_INLINE void PrefetchV(const BF16* v_now, size_t dim, const PrefetchShape& ps) {
  hwy::Prefetch(reinterpret_cast<const char*>(v_now) + dim * ps.v_bytes_per_dim);
}
// Prefetches the line of the next tile's K that V element `element` of this tile (slot-major
// index in the tile's V block) stands for: line element / 32, if the K has that many lines
// (a V wider than K leaves its last lines to the demand loads).
HWY_INLINE void PrefetchK(const BF16* k_next, size_t element, const PrefetchShape& ps) {
  const size_t line = element / 32;
  if (line < ps.k_lines) hwy::Prefetch(k_next + line * ps.k_line_stride);
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
    TileShape<kTile>::kPairs == 1 && 2 * TileShape<kTile>::kLanes <= hn::MaxLanes(DV());
#else
    false;
#endif

#if HWY_TARGET != HWY_SCALAR

// TileScores for kTiles tiles whose dims are kTile BF16 apart (the tiled layout) and
// kPairDims: one full vector holds a tile's K of dims d and d + 1, multiplied by q[d] in its
// lower half and q[d + 1] in its upper half; each partial sum (kDimSplit) folds its halves
// before the partial sums add. Half the FMAs of half-width vectors. Building that q vector
// costs two broadcasts and a shuffle per row and dim pair: two tiles at once share it (each
// tile's bits are the same as alone). Tile t's scores go to scores[t]; v_now[t] is its V, to
// prefetch meanwhile (see PrefetchShape).
template <size_t kRows, size_t kTiles, uint64_t kTile>
HWY_INLINE void TileScoresPaired(const float* const* HWY_RESTRICT q,
                                 const BF16* const* HWY_RESTRICT k_tiles, size_t head_dim,
                                 const BF16* const* v_now, const PrefetchShape& ps,
                                 float* const* HWY_RESTRICT scores) {
  using Shape = TileShape<kTile>;
  const typename Shape::DK dh;
  const hn::Twice<typename Shape::DK> df;
  using V = hn::Vec<decltype(df)>;
  constexpr size_t kAtOnce = AtOnce(kRows * kTiles * 2);
  for (size_t s0 = 0; s0 < kDimSplit; s0 += kAtOnce) {
    V acc[kAtOnce][kRows][kTiles][2];
    for (size_t s = 0; s < kAtOnce; ++s) {
      for (size_t r = 0; r < kRows; ++r) {
        for (size_t t = 0; t < kTiles; ++t) acc[s][r][t][0] = acc[s][r][t][1] = hn::Zero(df);
      }
    }
    for (size_t dim0 = 0; dim0 < head_dim; dim0 += 2 * kDimSplit) {
      for (size_t s = 0; s < kAtOnce; ++s) {
        const size_t dim = dim0 + 2 * (s0 + s);
        V even[kTiles], odd[kTiles];
        for (size_t t = 0; t < kTiles; ++t) {
          if (v_now[t] != nullptr) {
            PrefetchV(v_now[t], dim, ps);
            PrefetchV(v_now[t], dim + 1, ps);
          }
          LoadPairs(df, k_tiles[t] + dim * kTile, even[t], odd[t]);
        }
        for (size_t r = 0; r < kRows; ++r) {
          const V qd = hn::Combine(df, hn::Set(dh, q[r][dim + 1]), hn::Set(dh, q[r][dim]));
          for (size_t t = 0; t < kTiles; ++t) {
            acc[s][r][t][0] = hn::MulAdd(qd, even[t], acc[s][r][t][0]);
            acc[s][r][t][1] = hn::MulAdd(qd, odd[t], acc[s][r][t][1]);
          }
        }
      }
    }
    // Each partial sum folds its halves, then adds to the total in order.
    for (size_t t = 0; t < kTiles; ++t) {
      for (size_t r = 0; r < kRows; ++r) {
        for (size_t e = 0; e < 2; ++e) {
          float* HWY_RESTRICT out = scores[t] + r * kTile + e * Shape::kLanes;
          auto sum =
              hn::Add(hn::LowerHalf(dh, acc[0][r][t][e]), hn::UpperHalf(dh, acc[0][r][t][e]));
          if (s0 != 0) sum = hn::Add(hn::LoadU(dh, out), sum);
          for (size_t s = 1; s < kAtOnce; ++s) {
            sum = hn::Add(sum, hn::Add(hn::LowerHalf(dh, acc[s][r][t][e]),
                                       hn::UpperHalf(dh, acc[s][r][t][e])));
          }
          hn::StoreU(sum, dh, out);
        }
      }
    }
  }
}

// Scores of two tiles for kRows rows (TileScoresPaired), in register blocks of at most four
// rows so that the accumulators of both tiles stay in registers.
template <size_t kRows, uint64_t kTile>
HWY_INLINE void TwoTileScoresPaired(const float* const* HWY_RESTRICT q,
                                    const BF16* const* HWY_RESTRICT k_tiles, size_t head_dim,
                                    const BF16* const* v_now, const PrefetchShape& ps,
                                    float* const* HWY_RESTRICT scores) {
  constexpr size_t kPart = kRows < 4 ? kRows : 4;
  const BF16* const none[2] = {nullptr, nullptr};
  for (size_t r0 = 0; r0 < kRows; r0 += kPart) {
    float* part_scores[2] = {scores[0] + r0 * kTile, scores[1] + r0 * kTile};
    // (The first part prefetches; the others read the same K.)
    TileScoresPaired<kPart, 2, kTile>(q + r0, k_tiles, head_dim, r0 == 0 ? v_now : none, ps,
                                      part_scores);
  }
}
#endif  // HWY_TARGET != HWY_SCALAR

// Computes raw scores q . k of kRows rows for one tile: scores[r * kTile + i] for the lane
// order of TileShape (vector 2p + e, lane j: position 2 * kLanes * p + 2 * j + e), the dims
// summed as kDimSplit says: a fixed order, the same for every tile wherever it sits in the
// buffers and for every block a row is in.
template <size_t kRows, uint64_t kTile>
HWY_INLINE void TileScores(const float* const* HWY_RESTRICT q, const BF16* HWY_RESTRICT k_tile,
                           size_t dim_stride, size_t head_dim, const BF16* v_now,
                           const PrefetchShape& ps, float* HWY_RESTRICT scores) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kPairDims<kTile>) {
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
  using V = hn::Vec<decltype(dk)>;
  constexpr size_t kAtOnce = AtOnce(kRows * Shape::kVectors);
  for (size_t s0 = 0; s0 < kDimSplit; s0 += kAtOnce) {
    V acc[kAtOnce][kRows][Shape::kVectors];
    for (size_t s = 0; s < kAtOnce; ++s) {
      for (size_t r = 0; r < kRows; ++r) {
        for (size_t i = 0; i < Shape::kVectors; ++i) acc[s][r][i] = hn::Zero(dk);
      }
    }
    for (size_t dim0 = 0; dim0 < head_dim; dim0 += kDimSplit) {
      for (size_t s = 0; s < kAtOnce; ++s) {
        const size_t dim = dim0 + s0 + s;
        const BF16* HWY_RESTRICT row = k_tile + dim * dim_stride;
        PrefetchV(v_now, dim, ps);  // see PrefetchShape
        V even[Shape::kPairs], odd[Shape::kPairs];
        for (size_t p = 0; p < Shape::kPairs; ++p) {
          LoadPairs(dk, row + p * 2 * Shape::kLanes, even[p], odd[p]);
        }
        for (size_t r = 0; r < kRows; ++r) {
          const V qd = hn::Set(dk, q[r][dim]);
          for (size_t p = 0; p < Shape::kPairs; ++p) {
            acc[s][r][2 * p] = hn::MulAdd(qd, even[p], acc[s][r][2 * p]);
            acc[s][r][2 * p + 1] = hn::MulAdd(qd, odd[p], acc[s][r][2 * p + 1]);
          }
        }
      }
    }
    for (size_t r = 0; r < kRows; ++r) {
      for (size_t i = 0; i < Shape::kVectors; ++i) {
        float* HWY_RESTRICT out = scores + r * kTile + i * Shape::kLanes;
        V sum = acc[0][r][i];
        if (s0 != 0) sum = hn::Add(hn::LoadU(dk, out), sum);
        for (size_t s = 1; s < kAtOnce; ++s) sum = hn::Add(sum, acc[s][r][i]);
        hn::StoreU(sum, dk, out);
      }
    }
  }
}

// Turns one row's raw scores of a tile into probabilities in place and updates the row's
// running max and sum; returns the factor the row's accumulators must be multiplied by.
// Lanes outside [lo_off, hi_off] (offsets in the tile) are invisible: their score becomes
// -inf by selection, whatever the slot holds, so they contribute exactly 0. A NaN score of a
// visible lane stays NaN (Exp would flush it to 0) so that NaN in K reaches the output.
template <uint64_t kTile>
HWY_INLINE float SoftmaxRow(float* HWY_RESTRICT s, const int32_t* HWY_RESTRICT lane_offsets,
                            int32_t lo_off, int32_t hi_off, float soft_cap, Row& row) {
  // The row's kTile scores in the widest vectors a tile fills (the softmax does not care
  // which position a lane holds: the lane order of TileShape only numbers them).
  const hn::CappedTag<float, static_cast<size_t>(kTile)> dk;
  constexpr size_t kLanes = hn::MaxLanes(decltype(dk)());
  constexpr size_t kVectors = static_cast<size_t>(kTile) / kLanes;
  const hn::RebindToSigned<decltype(dk)> di;
  using V = hn::Vec<decltype(dk)>;
  const V neg_inf = hn::Set(dk, -std::numeric_limits<float>::infinity());
  const auto lo = hn::Set(di, lo_off - 1);
  const auto hi = hn::Set(di, hi_off + 1);
  const bool full = lo_off == 0 && hi_off == static_cast<int32_t>(kTile) - 1;  // no masking
  V max = neg_inf;
  for (size_t i = 0; i < kVectors; ++i) {
    V x = hn::LoadU(dk, s + i * kLanes);
    if (soft_cap > 0.0f) {
      x = hn::Mul(hn::Set(dk, soft_cap), hn::Tanh(dk, hn::Mul(x, hn::Set(dk, 1.0f / soft_cap))));
    }
    if (!full) {
      const auto offsets = hn::LoadU(di, lane_offsets + i * kLanes);
      const auto visible = hn::RebindMask(dk, hn::And(hn::Gt(offsets, lo), hn::Lt(offsets, hi)));
      x = hn::IfThenElse(visible, x, neg_inf);
    }
    hn::StoreU(x, dk, s + i * kLanes);
    max = hn::Max(max, x);
  }
  const float tile_max = hn::GetLane(hn::MaxOfLanes(dk, max));
  const float m_new = tile_max > row.m ? tile_max : row.m;
  // (exp(0) is exactly 1: most tiles leave the max where it was and skip the call.)
  const float correction = row.m == -std::numeric_limits<float>::infinity() ? 0.0f
                           : m_new == row.m                                 ? 1.0f
                                            : std::exp(row.m - m_new);
  const V vm = hn::Set(dk, m_new);
  V sum = hn::Zero(dk);
  for (size_t i = 0; i < kVectors; ++i) {
    const V x = hn::Sub(hn::LoadU(dk, s + i * kLanes), vm);
    const V p = hn::IfThenElse(hn::Eq(x, x), hn::Exp(dk, x), x);
    hn::StoreU(p, dk, s + i * kLanes);
    sum = hn::Add(sum, p);
  }
  row.l = row.l * correction + hn::GetLane(hn::SumOfLanes(dk, sum));
  row.m = m_new;
  return correction;
}

// acc[r] = acc[r] * correction[r] + sum over the tile's positions of p[r][pos] * V[pos] for
// kChunks consecutive chunks of 2 * Lanes(df) dims starting at `dim0`. Positions run in
// chronological order; each dim's sum has the same order whatever kChunks is (more chunks at
// once only give blocks of few rows more independent FMA chains).
// kMasked: one row, positions outside [lo_off, hi_off] skipped (never read: a slot outside
// the visible range may hold anything, NaN included, and NaN * 0 is NaN). `k_next`: the K of
// the next tile, to prefetch meanwhile (PrefetchShape); v_stride is v_head_dim.
template <size_t kRows, size_t kChunks, bool kMasked, uint64_t kTile, class DF>
HWY_INLINE void AccumulateChunks(DF df, size_t dim0, const BF16* HWY_RESTRICT v_tile,
                                 size_t v_stride, const BF16* k_next, const PrefetchShape& ps,
                                 const float* const* p, const int32_t* HWY_RESTRICT index_of_offset,
                                 float* const* acc, const float* correction, int32_t lo_off,
                                 int32_t hi_off) {
  using V = hn::Vec<DF>;
  const size_t lanes = hn::Lanes(df);
  V even_acc[kChunks][kRows], odd_acc[kChunks][kRows];
  for (size_t r = 0; r < kRows; ++r) {
    const V c = hn::Set(df, correction[r]);
    for (size_t ch = 0; ch < kChunks; ++ch) {
      const size_t d = dim0 + ch * 2 * lanes;
      even_acc[ch][r] = hn::Mul(hn::LoadU(df, acc[r] + d), c);
      odd_acc[ch][r] = hn::Mul(hn::LoadU(df, acc[r] + d + lanes), c);
    }
  }
  const int32_t first = kMasked ? lo_off : 0;
  const int32_t last = kMasked ? hi_off : static_cast<int32_t>(kTile) - 1;
  for (int32_t off = first; off <= last; ++off) {
    const BF16* HWY_RESTRICT v_row = v_tile + static_cast<size_t>(off) * v_stride + dim0;
    const size_t index = static_cast<size_t>(index_of_offset[off]);
    for (size_t ch = 0; ch < kChunks; ++ch) {
      PrefetchK(k_next, static_cast<size_t>(off) * v_stride + dim0 + ch * 2 * lanes, ps);
    }
    V pr[kRows];
    for (size_t r = 0; r < kRows; ++r) pr[r] = hn::Set(df, p[r][index]);
    for (size_t ch = 0; ch < kChunks; ++ch) {
      V even, odd;
      LoadPairs(df, v_row + ch * 2 * lanes, even, odd);
      for (size_t r = 0; r < kRows; ++r) {
        even_acc[ch][r] = hn::MulAdd(pr[r], even, even_acc[ch][r]);
        odd_acc[ch][r] = hn::MulAdd(pr[r], odd, odd_acc[ch][r]);
      }
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t ch = 0; ch < kChunks; ++ch) {
      const size_t d = dim0 + ch * 2 * lanes;
      hn::StoreU(even_acc[ch][r], df, acc[r] + d);
      hn::StoreU(odd_acc[ch][r], df, acc[r] + d + lanes);
    }
  }
}

template <size_t kRows, bool kMasked, uint64_t kTile>
HWY_INLINE void AccumulateTile(const BF16* HWY_RESTRICT v_tile, size_t v_stride, const BF16* k_next,
                               const PrefetchShape& ps, size_t v_head_dim, const float* const* p,
                               const int32_t* HWY_RESTRICT index_of_offset, float* const* acc,
                               const float* correction, int32_t lo_off, int32_t hi_off) {
  // Chunks at once: enough FMA chains (2 per row and chunk), within the registers; blocks of
  // one or two rows take all the registers allow, so that each position's p is broadcast
  // once per wider pass (measured: decode GQA 2 0.96-0.99 of the time with AtOnce's chunks).
  constexpr size_t kMaxChunks = kScoreRegisters >= 20 ? 4 : 2;
  constexpr size_t kWide =
      kRows <= 2 || AtOnce(2 * kRows) >= kMaxChunks ? kMaxChunks : AtOnce(2 * kRows);
  const DV dv;
  const size_t chunk = 2 * hn::Lanes(dv);
  size_t dim0 = 0;
  for (; dim0 + kWide * chunk <= v_head_dim; dim0 += kWide * chunk) {
    AccumulateChunks<kRows, kWide, kMasked, kTile>(dv, dim0, v_tile, v_stride, k_next, ps, p,
                                                   index_of_offset, acc, correction, lo_off,
                                                   hi_off);
  }
  for (; dim0 + chunk <= v_head_dim; dim0 += chunk) {
    AccumulateChunks<kRows, 1, kMasked, kTile>(dv, dim0, v_tile, v_stride, k_next, ps, p,
                                               index_of_offset, acc, correction, lo_off, hi_off);
  }
  const DVTail dt;
  const size_t tail_chunk = 2 * hn::Lanes(dt);
  for (; dim0 + tail_chunk <= v_head_dim; dim0 += tail_chunk) {
    AccumulateChunks<kRows, 1, kMasked, kTile>(dt, dim0, v_tile, v_stride, k_next, ps, p,
                                               index_of_offset, acc, correction, lo_off, hi_off);
  }
}

// Scores, softmax and V accumulation of one register block of kRows rows over one tile.
// `rows` has kRows entries; entries past num_real are padding (they repeat a real row's
// query and write to a scratch accumulator nobody reads). `scored`: `scores` already holds
// the tile's raw scores (TwoTileScoresPaired).
template <size_t kRows, uint64_t kTile>
HWY_INLINE void BlockTile(Row* rows, size_t num_real, uint64_t tile_pos,
                          const BF16* HWY_RESTRICT k_tile, size_t dim_stride, const BF16* k_next,
                          const PrefetchShape& ps, const BF16* HWY_RESTRICT v_tile, size_t v_stride,
                          size_t head_dim, size_t v_head_dim, float soft_cap,
                          const int32_t* lane_offsets, const int32_t* index_of_offset,
                          float* HWY_RESTRICT scores, bool scored = false) {
  const float* q[kRows];
  const float* p[kRows];
  float* acc[kRows];
  float correction[kRows];
  int32_t lo_off[kRows], hi_off[kRows];
  bool active[kRows];
  bool all_full = true, any_active = false;
  for (size_t r = 0; r < kRows; ++r) {
    q[r] = rows[r].q;
    p[r] = scores + r * kTile;
    acc[r] = rows[r].acc;
    correction[r] = 0.0f;
    const uint64_t lo = rows[r].lo > tile_pos ? rows[r].lo : tile_pos;
    const uint64_t hi = rows[r].hi < tile_pos + kTile ? rows[r].hi : tile_pos + kTile;
    active[r] = r < num_real && lo < hi;
    lo_off[r] = active[r] ? static_cast<int32_t>(lo - tile_pos) : 0;
    hi_off[r] = active[r] ? static_cast<int32_t>(hi - 1 - tile_pos) : -1;
    if (r < num_real) {
      any_active |= active[r];
      all_full &= active[r] && lo_off[r] == 0 && hi_off[r] == static_cast<int32_t>(kTile) - 1;
    }
  }
  if (!any_active) return;
  if (!scored) TileScores<kRows, kTile>(q, k_tile, dim_stride, head_dim, v_tile, ps, scores);
  for (size_t r = 0; r < num_real; ++r) {
    if (!active[r]) continue;
    correction[r] = SoftmaxRow<kTile>(scores + r * kTile, lane_offsets, lo_off[r], hi_off[r],
                                      soft_cap, rows[r]);
  }
  if (all_full) {
    AccumulateTile<kRows, false, kTile>(v_tile, v_stride, k_next, ps, v_head_dim, p,
                                        index_of_offset, acc, correction, 0, 0);
    return;
  }
  // A partly visible tile: each row reads only the V rows it sees, so that an invisible slot
  // never enters its accumulator (the order over the visible ones is the full path's).
  for (size_t r = 0; r < num_real; ++r) {
    if (!active[r]) continue;
    AccumulateTile<1, true, kTile>(v_tile, v_stride, k_next, ps, v_head_dim, &p[r], index_of_offset,
                                   &acc[r], &correction[r], lo_off[r], hi_off[r]);
  }
}

// Calls fn(std::integral_constant<size_t, kRows>(), block) with the num_real (1 to 8) rows
// at `rows` as a register block of kRows rows, num_real rounded up to a power of two: `block`
// is `rows` itself, or `padded` (8 entries) whose extra rows repeat the last real query and
// accumulate into `dummy_acc`; the real rows' states are copied back afterwards.
template <class Fn>
HWY_INLINE void WithRegisterBlock(Row* rows, size_t num_real, Row* padded, float* dummy_acc,
                                  const Fn& fn) {
  size_t k_rows = 1;
  while (k_rows < num_real) k_rows *= 2;
  Row* block = rows;
  if (k_rows != num_real) {
    for (size_t r = 0; r < k_rows; ++r) {
      padded[r] = r < num_real ? rows[r] : rows[num_real - 1];
      if (r >= num_real) padded[r].acc = dummy_acc;
    }
    block = padded;
  }
  switch (k_rows) {
    case 1:
      fn(std::integral_constant<size_t, 1>(), block);
      break;
    case 2:
      fn(std::integral_constant<size_t, 2>(), block);
      break;
    case 4:
      fn(std::integral_constant<size_t, 4>(), block);
      break;
    default:
      fn(std::integral_constant<size_t, 8>(), block);
      break;
  }
  if (block == padded) {
    for (size_t r = 0; r < num_real; ++r) rows[r] = padded[r];
  }
}

// The K and V of one tile of an item, its first position, and the K to prefetch while its V
// is accumulated (PrefetchShape).
struct TileRefs {
  uint64_t pos = 0;
  const BF16* k = nullptr;
  const BF16* v = nullptr;
  const BF16* k_next = nullptr;
};

// Calls fn(tile_pos, slot) for the position-aligned tiles of a flash view, oldest first.
template <uint64_t kTile, class Fn>
HWY_INLINE void ForEachTile(const FlashView& view, const Fn& fn) {
  for (uint32_t run = 0; run < view.num_runs; ++run) {
    const SlotRun& r = view.runs[run];
    const uint64_t end = r.first_pos + r.num_positions;
    uint64_t tile_pos = r.first_pos - r.first_pos % kTile;
    uint64_t slot = r.first_slot - (r.first_pos - tile_pos);
    for (; tile_pos < end; tile_pos += kTile, slot += kTile) fn(tile_pos, slot);
  }
}
template <uint64_t kTile, class Layout, class Fn>
HWY_INLINE void ForEachTile(const TiledView<Layout>& view, const Fn& fn) {
  for (uint64_t i = 0; i < view.num_tiles; ++i) {
    const TileRef tile = view.Tile(i);
    fn(tile.first_pos, tile.slot);
  }
}

// The values of one tile of a latent view (MLA: no V stream, AttentionOptions::latent_v_dims):
// dims [0, v_dims) of the tile's K, which both layouts store [dim][slot] (dims dim_stride
// apart), transposed into dst[slot * v_dims + dim], the [slot][dim] rows AccumulateTile reads.
// Exact (a copy), every slot of the tile: the V pass still reads only the visible rows.
template <uint64_t kTile>
HWY_INLINE void LatentValues(const BF16* HWY_RESTRICT k_tile, size_t dim_stride, size_t v_dims,
                             BF16* HWY_RESTRICT dst) {
  static_assert(kTile % 8 == 0, "tiles are whole 8 x 8 blocks");
  const uint16_t* src = reinterpret_cast<const uint16_t*>(k_tile);
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  for (size_t d0 = 0; d0 < v_dims; d0 += 8) {
    for (size_t s0 = 0; s0 < kTile; s0 += 8) {
      detail::Transpose8x8(src + d0 * dim_stride + s0, dim_stride, out + s0 * v_dims + d0, v_dims);
    }
  }
}

// Returns a 64-byte aligned pointer at or after `p`.
HWY_INLINE float* Align64(float* p) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<float*>((bits + 63) & ~uintptr_t{63});
}

// Writes one output row from a row's merged state (max m, sum l, permuted acc): divides by the
// softmax denominator, after adding the sink's exp(sink - max) to it when there is one.
HWY_INLINE void FinalizeRow(float m, float l, const float* acc, const float* sink,
                            size_t v_head_dim, float* tmp, float* out_f32, BF16* out_bf16) {
  float factor = 1.0f;
  if (sink != nullptr) {
    const float m_new = *sink > m ? *sink : m;
    factor = m == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m - m_new);
    l = l * factor + std::exp(*sink - m_new);
  }
  const float scale = l != 0.0f ? factor / l : 0.0f;
  float* dst = out_f32 != nullptr ? out_f32 : tmp;
  for (size_t dim = 0; dim < v_head_dim; ++dim) {
    dst[dim] = acc[PermutedIndex(dim, v_head_dim)] * scale;
  }
  if (out_bf16 != nullptr) F32ToBF16(tmp, out_bf16, v_head_dim);
}

template <class Layout>
using ViewOf = typename std::conditional<Layout::kBackend == Backend::kFlash, FlashView,
                                         TiledView<Layout>>::type;

}  // namespace attention_internal

// Runs item `item_index` of `work` (AttentionWork::Plan of the same kv, batch and options):
// the rows of one query block that share one kv_head, over one KV split. Writes the block's
// output rows, or, when work.Splits(), the item's partial states into `partial`
// (work.PartialFloats() floats), for MergeAttention. `scratch`: work.ScratchFloats() floats
// owned by the calling thread. Does not allocate; reads each visible K/V tile of its kv_head
// once from memory for all the block's rows.
template <class Layout>
HWY_INLINE void RunAttentionItem(const KVView<Layout>& kv, const AttentionBatch& batch,
                                 const AttentionOptions& options, const AttentionWork& work,
                                 uint64_t item_index, float* HWY_RESTRICT scratch,
                                 float* HWY_RESTRICT partial) {
  namespace ai = attention_internal;
  constexpr uint64_t kTile = Layout::kTileSlots;
  using Shape = ai::TileShape<kTile>;
  const AttentionItem item = work.Item(item_index);
  const size_t head_dim = work.HeadDim();
  const size_t v_head_dim = work.VHeadDim();
  const size_t group = work.Group();
  const size_t num_rows = size_t{item.num_queries} * group;
  const float scale = AttentionScale(options, work.HeadDim());
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // Scratch: lane tables, scores of one register block, a dummy accumulator, then per row
  // its scaled query and its accumulators.
  const size_t q_stride = (head_dim + 15) / 16 * 16;
  const size_t acc_stride = (v_head_dim + 15) / 16 * 16;
  float* cursor = ai::Align64(scratch);
  int32_t* lane_offsets = reinterpret_cast<int32_t*>(cursor);
  int32_t* index_of_offset = lane_offsets + kTile;
  cursor += (2 * kTile + 15) / 16 * 16;
  float* scores = cursor;  // two tiles' (TwoTileScoresPaired)
  cursor += 2 * Shape::kMaxRegRows * kTile;
  float* dummy_acc = cursor;
  cursor += acc_stride;
  float* q_rows = cursor;
  cursor += num_rows * q_stride;
  float* acc_rows = cursor;
  cursor += num_rows * acc_stride;
  // A latent view (no V stream): two tiles' values transposed from K (LatentValues), the
  // second for the tile a pair holds.
  BF16* latent_values = nullptr;
  if (work.Latent()) {
    latent_values = reinterpret_cast<BF16*>(cursor);
    cursor += kTile * acc_stride;  // 2 tiles x kTile slots x acc_stride BF16
  }
  KVRING_DASSERT(static_cast<uint64_t>(cursor - scratch) <= work.ScratchFloats());

  for (size_t v = 0; v < Shape::kVectors; ++v) {
    for (size_t j = 0; j < Shape::kLanes; ++j) {
      const size_t offset = (v / 2) * 2 * Shape::kLanes + 2 * j + v % 2;
      lane_offsets[v * Shape::kLanes + j] = static_cast<int32_t>(offset);
      index_of_offset[offset] = static_cast<int32_t>(v * Shape::kLanes + j);
    }
  }

  ai::Row rows[AttentionWork::kTargetRows > 64 ? AttentionWork::kTargetRows : 64];
  ai::Row padded[8];
  // Rows: query-major, then the q heads of the kv_head's group.
  const size_t max_rows_here = sizeof(rows) / sizeof(rows[0]);
  for (size_t row0 = 0; row0 < num_rows; row0 += max_rows_here) {
    const size_t rows_here = num_rows - row0 < max_rows_here ? num_rows - row0 : max_rows_here;
    uint64_t pos_begin = item.pos_end, pos_end = item.pos_begin;
    for (size_t r = 0; r < rows_here; ++r) {
      const size_t row = row0 + r;
      const size_t query = item.first_query + row / group;
      const size_t q_head = size_t{item.kv_head} * group + row % group;
      const uint64_t q_pos = batch.first_q_pos + query;
      ai::Row& state = rows[r];
      float* q = q_rows + row * q_stride;
      const size_t src = static_cast<size_t>(query * work.QRowStride()) + q_head * head_dim;
      if (batch.queries_f32 != nullptr) {
        for (size_t dim = 0; dim < head_dim; ++dim) q[dim] = batch.queries_f32[src + dim] * scale;
      } else {
        for (size_t dim = 0; dim < head_dim; ++dim) {
          q[dim] = BF16ToF32(batch.queries_bf16[src + dim]) * scale;
        }
      }
      state.q = q;
      state.acc = acc_rows + row * acc_stride;
      std::memset(state.acc, 0, acc_stride * sizeof(float));
      const uint64_t first = kv.visibility.FirstVisible(q_pos);
      state.lo = first > item.pos_begin ? first : item.pos_begin;
      state.hi = q_pos + 1 < item.pos_end ? q_pos + 1 : item.pos_end;
      if (state.hi < state.lo) state.hi = state.lo;
      state.m = neg_inf;
      state.l = 0.0f;
      if (state.lo < state.hi) {
        if (state.lo < pos_begin) pos_begin = state.lo;
        if (state.hi > pos_end) pos_end = state.hi;
      }
    }
    if (pos_begin < pos_end) {
      const ai::ViewOf<Layout> view = ai::ViewOf<Layout>::OfPositions(kv, pos_begin, pos_end);
      const auto k_mapping = kv.layout.K();
      const auto v_mapping = kv.layout.V();
      const size_t dim_stride = static_cast<size_t>(k_mapping.DimStride());
      const size_t v_stride =
          work.Latent() ? v_head_dim : static_cast<size_t>(v_mapping.SlotStride());
      const uint64_t num_slots = kv.NumSlots();
      const ai::PrefetchShape prefetch_shape(kTile, dim_stride, head_dim, v_head_dim);
      // The K of the tile `tiles` tiles after the one at `slot` (slots wrap), to prefetch.
      const auto k_after = [&](uint64_t slot, uint64_t tiles) {
        return kv.k + k_mapping((slot + tiles * kTile) % num_slots, item.kv_head, 0);
      };
      uint64_t latent_tiles = 0;  // tiles transposed so far: alternates the two buffers
      const auto tile_at = [&](uint64_t tile_pos, uint64_t slot) {
        ai::TileRefs tile;
        tile.pos = tile_pos;
        tile.k = kv.k + k_mapping(slot, item.kv_head, 0);
        if (latent_values != nullptr) {
          BF16* values = latent_values + (latent_tiles++ % 2) * kTile * v_head_dim;
          ai::LatentValues<kTile>(tile.k, dim_stride, v_head_dim, values);
          tile.v = values;
        } else {
          tile.v = kv.v + v_mapping(slot, item.kv_head, 0);
        }
        tile.k_next = k_after(slot, 1);
        return tile;
      };
      // Runs fn(k_rows, block, num_real) for each register block of the rows.
      const auto for_each_block = [&](const auto& fn) {
        for (size_t r0 = 0; r0 < rows_here; r0 += Shape::kMaxRegRows) {
          const size_t num_real =
              rows_here - r0 < Shape::kMaxRegRows ? rows_here - r0 : Shape::kMaxRegRows;
          ai::WithRegisterBlock(rows + r0, num_real, padded, dummy_acc,
                                [&](auto k_rows, ai::Row* block) { fn(k_rows, block, num_real); });
        }
      };
      const auto one_tile = [&](const ai::TileRefs& tile, float* tile_scores, bool scored) {
        return [&, tile_scores, scored](auto k_rows, ai::Row* block, size_t num_real) {
          ai::BlockTile<decltype(k_rows)::value, kTile>(
              block, num_real, tile.pos, tile.k, dim_stride, tile.k_next, prefetch_shape, tile.v,
              v_stride, head_dim, v_head_dim, options.soft_cap, lane_offsets, index_of_offset,
              tile_scores, scored);
        };
      };
      // Tiles whose scores pair dims (TileScoresPaired) go two at a time, the second
      // buffered here; each row still takes tile after tile, as alone.
      const bool two_tiles = ai::kPairDims<kTile> && dim_stride == kTile;
      ai::TileRefs held;
      bool holding = false;
      ai::ForEachTile<kTile>(view, [&](uint64_t tile_pos, uint64_t slot) {
        ai::TileRefs tile = tile_at(tile_pos, slot);
        if (!two_tiles) {
          for_each_block(one_tile(tile, scores, false));
          return;
        }
        if (!holding) {
          held = tile;
          holding = true;
          return;
        }
        holding = false;
        // The pair prefetches the next pair: each tile's V pass the K of the tile two after it.
        held.k_next = k_after(slot, 1);
        tile.k_next = k_after(slot, 2);
#if HWY_TARGET != HWY_SCALAR
        if constexpr (ai::kPairDims<kTile>) {
          float* second = scores + Shape::kMaxRegRows * kTile;
          for_each_block([&](auto k_rows, ai::Row* block, size_t num_real) {
            constexpr size_t kRows = decltype(k_rows)::value;
            const float* q[kRows];
            for (size_t r = 0; r < kRows; ++r) q[r] = block[r].q;
            const BF16* k_tiles[2] = {held.k, tile.k};
            const BF16* v_now[2] = {held.v, tile.v};
            float* out[2] = {scores, second};
            ai::TwoTileScoresPaired<kRows, kTile>(q, k_tiles, head_dim, v_now, prefetch_shape, out);
            one_tile(held, scores, true)(k_rows, block, num_real);
            one_tile(tile, second, true)(k_rows, block, num_real);
          });
        }
#endif
      });
      if (holding) for_each_block(one_tile(held, scores, false));
    }
    for (size_t r = 0; r < rows_here; ++r) {
      const size_t row = row0 + r;
      const ai::Row& state = rows[r];
      if (work.Splits()) {
        float* dst = partial + (item_index * work.MaxItemRows() + row) * work.PartialRowFloats();
        dst[0] = state.m;
        dst[1] = state.l;
        std::memcpy(dst + 2, state.acc, v_head_dim * sizeof(float));
        continue;
      }
      const size_t query = item.first_query + row / group;
      const size_t q_head = size_t{item.kv_head} * group + row % group;
      const size_t dst = static_cast<size_t>(query * work.OutRowStride()) + q_head * v_head_dim;
      ai::FinalizeRow(state.m, state.l, state.acc,
                      options.sinks != nullptr ? options.sinks + q_head : nullptr, v_head_dim,
                      dummy_acc, batch.out_f32 != nullptr ? batch.out_f32 + dst : nullptr,
                      batch.out_bf16 != nullptr ? batch.out_bf16 + dst : nullptr);
    }
  }
}

// Combines the partial states of merge `merge_index` (< work.NumMerges()) in chronological
// order and writes its output rows. Run after every item of the call. `scratch` and
// `partial` as for RunAttentionItem. Does not allocate.
HWY_INLINE void MergeAttention(const AttentionBatch& batch, const AttentionOptions& options,
                               const AttentionWork& work, uint64_t merge_index,
                               float* HWY_RESTRICT scratch, const float* HWY_RESTRICT partial) {
  const uint64_t first_item = work.MergeFirstItem(merge_index);
  const AttentionItem item = work.Item(first_item);
  const size_t group = work.Group();
  const size_t v_head_dim = work.VHeadDim();
  const size_t num_rows = size_t{item.num_queries} * group;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* acc = attention_internal::Align64(scratch);
  float* tmp = acc + (v_head_dim + 15) / 16 * 16;
  for (size_t row = 0; row < num_rows; ++row) {
    float m = neg_inf;
    for (uint32_t split = 0; split < work.NumSplits(); ++split) {
      const float* src =
          partial + ((first_item + split) * work.MaxItemRows() + row) * work.PartialRowFloats();
      if (src[0] > m) m = src[0];
    }
    float l = 0.0f;
    for (size_t dim = 0; dim < v_head_dim; ++dim) acc[dim] = 0.0f;
    for (uint32_t split = 0; split < work.NumSplits(); ++split) {
      const float* src =
          partial + ((first_item + split) * work.MaxItemRows() + row) * work.PartialRowFloats();
      if (src[0] == neg_inf) continue;  // the split holds nothing this row sees
      const float factor = std::exp(src[0] - m);
      l += src[1] * factor;
      for (size_t dim = 0; dim < v_head_dim; ++dim) acc[dim] += src[2 + dim] * factor;
    }
    const size_t query = item.first_query + row / group;
    const size_t q_head = size_t{item.kv_head} * group + row % group;
    const size_t dst = static_cast<size_t>(query * work.OutRowStride()) + q_head * v_head_dim;
    attention_internal::FinalizeRow(
        m, l, acc, options.sinks != nullptr ? options.sinks + q_head : nullptr, v_head_dim, tmp,
        batch.out_f32 != nullptr ? batch.out_f32 + dst : nullptr,
        batch.out_bf16 != nullptr ? batch.out_bf16 + dst : nullptr);
  }
}

namespace attention_internal {

// Runs the items, then the merges, of `work` (the plan of attending `batch` over `kv` with
// `options`) through `runner`, in `workspace`: work.PartialFloats() floats of partial states,
// then work.ScratchFloats() per thread. Not inlined: every entry point of one layout shares
// this one copy of the kernels (a dispatch unit compiles them once per target and layout).
template <class Layout>
HWY_NOINLINE void RunAttentionWork(const KVView<Layout>& kv, const AttentionBatch& batch,
                                   const AttentionOptions& options, const AttentionWork& work,
                                   float* HWY_RESTRICT workspace, const TaskRunner& runner) {
  const size_t scratch_floats = static_cast<size_t>(work.ScratchFloats());
  float* partial = workspace;
  float* scratch = workspace + work.PartialFloats();
  runner.Run(work.NumItems(), [&](uint64_t item, uint32_t thread) {
    KVRING_DASSERT(thread < runner.NumThreads());
    RunAttentionItem(kv, batch, options, work, item, scratch + thread * scratch_floats, partial);
  });
  runner.Run(work.NumMerges(), [&](uint64_t merge, uint32_t thread) {
    KVRING_DASSERT(thread < runner.NumThreads());
    MergeAttention(batch, options, work, merge, scratch + thread * scratch_floats, partial);
  });
}

}  // namespace attention_internal

// Computes attention of `batch` over `kv` with `options`, its work items run by `runner` (the
// calling thread, ThreadPool::Runner(), or the engine's own pool) in `workspace`, which grows
// when this call needs more than it holds. Checks the arguments first (CheckAttention) and
// returns its refusal without writing anything. Otherwise returns kOk, or kOutOfMemory if the
// workspace could not grow. Allocates only when the workspace grows; the output is
// bit-identical for every runner and thread count.
template <class Layout>
HWY_INLINE Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                            const AttentionOptions& options, AttentionWorkspace& workspace,
                            const TaskRunner& runner) {
  const Result check = CheckAttention(kv, batch, options);
  if (!check.ok()) return check;
  const AttentionWork work = AttentionWork::Plan(kv, batch, options);
  if (work.NumItems() == 0) return Result();
  // A call of one item runs on the calling thread (TaskRunner::Run), which needs one scratch.
  const uint32_t num_threads = work.NumItems() == 1 ? 1 : runner.NumThreads();
  const uint64_t floats = work.WorkspaceFloats(num_threads);
  if (!workspace.Reserve(floats)) {
    return Result::Refused(Status::kOutOfMemory,
                           "workspace: %llu floats for %llu threads could not be allocated", floats,
                           num_threads);
  }
  attention_internal::RunAttentionWork(kv, batch, options, work, workspace.Data(), runner);
  return Result();
}

// As above, on the calling thread.
template <class Layout>
HWY_INLINE Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                            const AttentionOptions& options, AttentionWorkspace& workspace) {
  return Attention(kv, batch, options, workspace, TaskRunner::Inline());
}

// As above, in a workspace of its own: allocates it on every call. For a loop of calls, keep an
// AttentionWorkspace and pass it.
template <class Layout>
HWY_INLINE Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                            const AttentionOptions& options) {
  AttentionWorkspace workspace;
  return Attention(kv, batch, options, workspace, TaskRunner::Inline());
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_INL_H_
