// kvring/ops/attention_amx-inl.h: the BF16-product mode (Products::kBF16) on AMX tiles
// (tdpbf16ps, Intel Sapphire Rapids and later, where Linux grants the process the tile state):
// a register block of 16 rows over one tile of 16, 32 or 64 slots takes its scores and its
// p . V as tile products, unless it sees the tile only partly and a V element some row sees is
// not finite; the softmax between them, those blocks and the last rows of an item stay on
// vdpbf16ps. Internal to kvring/ops/attention-inl.h (namespace attention_internal).
//
// tdpbf16ps adds to a 16 x 16 f32 tile the products of a 16 x 32 BF16 tile A and a tile B of
// 16 rows of 16 pairs: C[i][j] += sum over k of A[i][k] * B[k / 2][2j + k % 2].
// - q . k: A is 16 query rows of 32 dims (WriteQueryRow's pairs are the rows' BF16 as they
//   are); B's row i pairs dims (2i, 2i + 1) of the chunk, at the even positions of 32 slots
//   for one tile and the odd positions for another: the scores come out in the lane order of
//   TileShape (vector 2h + e, lane j: position 32h + 2j + e), as vdpbf16ps's do.
// - p . v: A is 16 rows of 32 probabilities (PackProbabilityPairs' pairs); B's row i pairs
//   positions (2i, 2i + 1) at the even dims of a 32-dim chunk for one tile and the odd dims for
//   another: the accumulators in the exact mode's permuted order, read and written as tiles.
// Both B come from one pass over the tile's K and V (two loads, two shifts, two blends and two
// stores per pair of rows), shared by every 16-row block of the item. The instructions are
// written in assembly: compilers need no AMX flags, and targets without AMX never run them.

// Whether the OS and architecture have the AMX kernels (Linux on x86-64); the AVX3_DL target
// builds them there (KVRING_AMX_OS && HWY_TARGET == HWY_AVX3_DL).
#ifndef KVRING_AMX_OS
#if defined(__linux__) && defined(__x86_64__)
#define KVRING_AMX_OS 1
#else
#define KVRING_AMX_OS 0
#endif
#endif

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_AMX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_AMX_INL_H_
#undef KVRING_OPS_ATTENTION_AMX_INL_H_
#else
#define KVRING_OPS_ATTENTION_AMX_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "hwy/highway.h"
#include "kvring/bf16.h"
#include "kvring/detail/cpu_choice.h"

// After highway.h: the softmax and the probability pairs the AMX blocks share with the others.
#include "kvring/ops/attention_products-inl.h"
#include "kvring/ops/attention_softmax-inl.h"

#if HWY_TARGET == HWY_AVX3_DL && KVRING_AMX_OS
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

#if HWY_TARGET == HWY_AVX3_DL && KVRING_AMX_OS

// Tiles of kTile slots that the AMX blocks serve: 16 (tiled 16, whose dims are 16 slots
// apart) and multiples of 32 (flash, tiled 32 and 64), in halves of 32 slots.
template <uint64_t kTile>
constexpr bool kAmxTile = kTile == 16 || kTile % 32 == 0;
// Slots of one half: 32, or the whole 16-slot tile.
template <uint64_t kTile>
constexpr size_t kAmxHalf = kTile == 16 ? 16 : 32;

// Whether this process may run AMX-BF16: the CPU has AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits
// 24 and 22), Linux granted the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once),
// and the kernels may use it (detail::AmxAllowed).
static HWY_INLINE HWY_MAYBE_UNUSED bool AmxUsable() {
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    if ((d & (1u << 24)) == 0 || (d & (1u << 22)) == 0) return false;
    constexpr long kReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kXtileData = 18;         // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return usable && detail::AmxAllowed();
}

// Loads the tile configuration at `config` (64 bytes, 64-byte aligned): palette 1; tiles 0-4
// of 16 rows of 64 bytes; for 16-slot tiles' p . V, tile 5 of 16 rows of 32 bytes (16
// probabilities) and tiles 6 and 7 of 8 rows of 64 bytes (8 position pairs). The calling
// thread's tiles stay configured until AmxEnd.
HWY_INLINE void AmxStart(float* config) {
  uint8_t bytes[64] = {};
  bytes[0] = 1;
  for (size_t t = 0; t < 8; ++t) {
    const uint16_t row_bytes = t == 5 ? 32 : 64;
    std::memcpy(bytes + 16 + 2 * t, &row_bytes, sizeof(row_bytes));
    bytes[48 + t] = t >= 6 ? 8 : 16;
  }
  std::memcpy(config, bytes, sizeof(bytes));
  asm volatile("ldtilecfg (%0)" ::"r"(config) : "memory");
}
// Releases the calling thread's tiles.
HWY_INLINE void AmxEnd() { asm volatile("tilerelease" ::: "memory"); }

// Stores the pairs of two rows a and b of 32 BF16 (PairRows512) at even_out and odd_out.
HWY_INLINE void StorePairs(__m512i a, __m512i b, uint16_t* even_out, uint16_t* odd_out) {
  __m512i even, odd;
  PairRows512(a, b, even, odd);
  _mm512_storeu_si512(even_out, even);
  _mm512_storeu_si512(odd_out, odd);
}

// The B tiles of one tile's K: for each half h of 32 slots and chunk c of 32 dims, the even
// positions' tile then the odd positions' (512 BF16 each), at k_pairs + ((h * chunks + c) * 2
// + e) * 512. K dims are dim_stride apart. A 16-slot tile (dims 16 apart, two in one vector)
// has one B tile per chunk whose columns are its 8 even positions, then its 8 odd ones (one
// permutation per pair of dims), at k_pairs + c * 512.
template <uint64_t kTile>
HWY_INLINE void AmxKPairs(const BF16* k_tile, size_t dim_stride, size_t head_dim,
                          uint16_t* k_pairs) {
  const uint16_t* k = reinterpret_cast<const uint16_t*>(k_tile);
  const size_t chunks = head_dim / 32;
  if constexpr (kTile == 16) {
    // Word 2c + e of the output: dim d + e at position 2c (c < 8) or 2(c - 8) + 1.
    alignas(64) static constexpr uint16_t kOrder[32] = {0,  16, 2,  18, 4,  20, 6,  22, 8,  24, 10,
                                                        26, 12, 28, 14, 30, 1,  17, 3,  19, 5,  21,
                                                        7,  23, 9,  25, 11, 27, 13, 29, 15, 31};
    const __m512i order = _mm512_load_si512(kOrder);
    for (size_t c = 0; c < chunks; ++c) {
      for (size_t i = 0; i < 16; ++i) {
        const __m512i dims = _mm512_loadu_si512(k + (c * 32 + 2 * i) * 16);
        _mm512_storeu_si512(k_pairs + c * 512 + i * 32, _mm512_permutexvar_epi16(order, dims));
      }
    }
    static_cast<void>(dim_stride);
    return;
  }
  for (size_t h = 0; h < kTile / 32; ++h) {
    for (size_t c = 0; c < chunks; ++c) {
      uint16_t* even = k_pairs + (h * chunks + c) * 2 * 512;
      for (size_t i = 0; i < 16; ++i) {
        const uint16_t* a = k + (c * 32 + 2 * i) * dim_stride + h * 32;
        StorePairs(_mm512_loadu_si512(a), _mm512_loadu_si512(a + dim_stride), even + i * 32,
                   even + 512 + i * 32);
      }
    }
  }
}

// The B tiles of one tile's V: for each half h and chunk c of 32 dims, the even dims' tile then
// the odd dims' (kAmxHalf / 2 rows of 32 BF16 each), at v_pairs + ((h * chunks + c) * 2 + e) *
// kAmxHalf * 16. V rows are v_stride apart. Only the slots [seen.first, seen.second] are read
// (some row sees them); the others are zero (a slot nobody sees may hold anything). Returns
// whether every element read is finite.
template <uint64_t kTile>
HWY_INLINE bool AmxVPairs(const BF16* v_tile, size_t v_stride, size_t v_head_dim,
                          std::pair<int32_t, int32_t> seen, uint16_t* v_pairs) {
  const uint16_t* v = reinterpret_cast<const uint16_t*>(v_tile);
  const size_t chunks = v_head_dim / 32;
  constexpr size_t kHalf = kAmxHalf<kTile>, kB = kHalf * 16;  // BF16 of one B tile
  const __m512i exponent = _mm512_set1_epi16(0x7F80);
  __mmask32 non_finite = 0;
  const auto row = [&](int32_t slot, size_t c) {
    if (slot < seen.first || slot > seen.second) return _mm512_setzero_si512();
    const __m512i x = _mm512_loadu_si512(v + static_cast<size_t>(slot) * v_stride + c * 32);
    non_finite |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, exponent), exponent);
    return x;
  };
  for (size_t h = 0; h < kTile / kHalf; ++h) {
    for (size_t c = 0; c < chunks; ++c) {
      uint16_t* even = v_pairs + (h * chunks + c) * 2 * kB;
      for (size_t i = 0; i < kHalf / 2; ++i) {
        const int32_t slot = static_cast<int32_t>(h * kHalf + 2 * i);
        StorePairs(row(slot, c), row(slot + 1, c), even + i * 32, even + kB + i * 32);
      }
    }
  }
  return non_finite == 0;
}

// Tiles 0 and 1 += the products of A (16 rows of 64 bytes, a_bytes apart) with B_even and with
// B_odd (16 rows of 64 bytes each, contiguous), through tiles 2, 3 and 4.
HWY_INLINE void AddTwoProducts(const void* a, size_t a_bytes, const uint16_t* b_even,
                               const uint16_t* b_odd) {
  const size_t b_bytes = 64;
  asm volatile(
      "tileloadd (%0,%1,1), %%tmm2\n\t"
      "tileloadd (%2,%3,1), %%tmm3\n\t"
      "tileloadd (%4,%3,1), %%tmm4\n\t"
      "tdpbf16ps %%tmm3, %%tmm2, %%tmm0\n\t"
      "tdpbf16ps %%tmm4, %%tmm2, %%tmm1" ::"r"(a),
      "r"(a_bytes), "r"(b_even), "r"(b_bytes), "r"(b_odd)
      : "memory");
}
// Stores tiles 0 and 1 (16 rows of 16 floats) at `first` and `second`, rows `bytes` apart.
HWY_INLINE void StoreTwoTiles(float* first, float* second, size_t bytes) {
  asm volatile(
      "tilestored %%tmm0, (%0,%1,1)\n\t"
      "tilestored %%tmm1, (%2,%1,1)" ::"r"(first),
      "r"(bytes), "r"(second)
      : "memory");
}

// Raw scores of 16 rows over one tile, in the lane order of TileShape: row r's at
// scores + r * kTile. q: the first row's BF16 pairs (WriteQueryRow), rows q_bytes apart.
template <uint64_t kTile>
HWY_INLINE void AmxScores(const float* q, size_t q_bytes, size_t head_dim, const uint16_t* k_pairs,
                          float* scores) {
  const size_t chunks = head_dim / 32;
  const size_t pair_bytes = 64, score_bytes = kTile * sizeof(float);
  if constexpr (kTile == 16) {
    asm volatile("tilezero %%tmm0" ::: "memory");
    for (size_t c = 0; c < chunks; ++c) {
      asm volatile(
          "tileloadd (%0,%1,1), %%tmm2\n\t"
          "tileloadd (%2,%3,1), %%tmm3\n\t"
          "tdpbf16ps %%tmm3, %%tmm2, %%tmm0" ::"r"(q + c * 16),
          "r"(q_bytes), "r"(k_pairs + c * 512), "r"(pair_bytes)
          : "memory");
    }
    asm volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(scores), "r"(score_bytes) : "memory");
    return;
  }
  for (size_t h = 0; h < kTile / 32; ++h) {
    asm volatile("tilezero %%tmm0\n\ttilezero %%tmm1" ::: "memory");
    for (size_t c = 0; c < chunks; ++c) {
      const uint16_t* even = k_pairs + (h * chunks + c) * 2 * 512;
      AddTwoProducts(q + c * 16, q_bytes, even, even + 512);
    }
    float* out = scores + 2 * h * 16;
    StoreTwoTiles(out, out + 16, score_bytes);
  }
}

// acc[r] += p[r] . V for 16 rows over one tile: p the rows' probability pairs
// (PackProbabilityPairs), row r's at p + r * kTile; acc the first row's accumulators
// (permuted order, chunks of 32 dims), rows acc_bytes apart. The caller has applied the
// rows' corrections.
template <uint64_t kTile>
HWY_INLINE void AmxAccumulate(const float* p, const uint16_t* v_pairs, size_t v_head_dim,
                              float* acc, size_t acc_bytes) {
  const size_t chunks = v_head_dim / 32;
  const size_t pair_bytes = 64, p_bytes = kTile * sizeof(float);
  for (size_t c = 0; c < chunks; ++c) {
    float* even_acc = acc + c * 32;
    asm volatile(
        "tileloadd (%0,%1,1), %%tmm0\n\t"
        "tileloadd (%2,%1,1), %%tmm1" ::"r"(even_acc),
        "r"(acc_bytes), "r"(even_acc + 16)
        : "memory");
    if constexpr (kTile == 16) {
      const uint16_t* even = v_pairs + c * 2 * 256;
      asm volatile(
          "tileloadd (%0,%1,1), %%tmm5\n\t"
          "tileloadd (%2,%3,1), %%tmm6\n\t"
          "tileloadd (%4,%3,1), %%tmm7\n\t"
          "tdpbf16ps %%tmm6, %%tmm5, %%tmm0\n\t"
          "tdpbf16ps %%tmm7, %%tmm5, %%tmm1" ::"r"(p),
          "r"(p_bytes), "r"(even), "r"(pair_bytes), "r"(even + 256)
          : "memory");
    }
    for (size_t h = 0; kTile != 16 && h < kTile / 32; ++h) {
      const uint16_t* even = v_pairs + (h * chunks + c) * 2 * 512;
      AddTwoProducts(p + h * 16, p_bytes, even, even + 512);
    }
    StoreTwoTiles(even_acc, even_acc + 16, acc_bytes);
  }
}

// One register block of 16 rows over one tile: scores (AmxScores), each row's softmax over the
// slots [lo_off[r], hi_off[r]] it sees and the rounding of its probabilities to BF16 pairs (as
// the vdpbf16ps blocks do; a row that sees none of the tile, !active[r], takes probabilities
// 0 and keeps its state), its correction applied to its accumulators, then p . V
// (AmxAccumulate, over V pairs whose every element is finite unless all 16 rows see the whole
// tile). rows[r].q and rows[r].acc are q_bytes and acc_bytes apart from row to row; `scores`
// holds 16 rows of kTile.
template <uint64_t kTile>
HWY_INLINE void AmxBlockTile(Row* rows, const bool* active, const int32_t* lo_off,
                             const int32_t* hi_off, size_t q_bytes, size_t acc_bytes,
                             size_t head_dim, size_t v_head_dim, const uint16_t* k_pairs,
                             const uint16_t* v_pairs, const int32_t* lane_offsets, float soft_cap,
                             float* scores) {
  AmxScores<kTile>(rows[0].q, q_bytes, head_dim, k_pairs, scores);
  const DV dv;
  for (size_t r = 0; r < 16; ++r) {
    float* p = scores + r * kTile;
    if (!active[r]) {
      std::memset(p, 0, kTile * sizeof(float));
      continue;
    }
    const float correction =
        SoftmaxRow<kTile>(p, lane_offsets, lo_off[r], hi_off[r], soft_cap, rows[r]);
    PackProbabilityPairs<kTile>(p);
    if (correction != 1.0f) {
      const hn::Vec<DV> c = hn::Set(dv, correction);
      for (size_t d = 0; d < v_head_dim; d += hn::Lanes(dv)) {
        hn::StoreU(hn::Mul(hn::LoadU(dv, rows[r].acc + d), c), dv, rows[r].acc + d);
      }
    }
  }
  AmxAccumulate<kTile>(scores, v_pairs, v_head_dim, rows[0].acc, acc_bytes);
}

#else  // no AMX on this target

template <uint64_t kTile>
constexpr bool kAmxTile = false;
static HWY_INLINE HWY_MAYBE_UNUSED bool AmxUsable() { return false; }

#endif

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_AMX_INL_H_
