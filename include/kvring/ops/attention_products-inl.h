// kvring/ops/attention_products-inl.h: the BF16-product mode of kvring's attention kernels
// (Products::kBF16): the rounding of queries and probabilities to BF16, and on CPUs with
// AVX512-BF16 the vdpbf16ps tile scoring and V accumulation. Internal to
// kvring/ops/attention-inl.h (namespace attention_internal).
//
// vdpbf16ps multiplies pairs of BF16 along the reduction and adds both products into one f32
// lane. The pairs are built from the stored layouts as they are, in registers:
// - q . k: the pairs are dims (d, d + 1). A flash or tall tiled tile holds each dim's slots
//   consecutively, so two dims' rows interleave into the even slots' pairs and the odd slots'
//   pairs (a shift and a blend each): the scores come out in the lane order of TileShape, and
//   the softmax, the masks and the lane tables are the exact mode's. A 16-row tiled tile holds
//   both dims in one vector: one permutation gives the same order.
// - p . v: the pairs are positions (s, s + 1): two V rows interleave the same way into even
//   dims' and odd dims' pairs, the permuted accumulator order of the exact mode.
// The blends cost two instructions per dim pair (or position pair) and chunk, shared by all
// the rows of a register block; the stored layouts stay those of the exact mode
// (docs/design.md).

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_PRODUCTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_PRODUCTS_INL_H_
#undef KVRING_OPS_ATTENTION_PRODUCTS_INL_H_
#else
#define KVRING_OPS_ATTENTION_PRODUCTS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/bf16.h"
#include "kvring/ops/target_vectors-inl.h"

// After highway.h: per-target helpers this file uses.
#include "kvring/ops/attention_scores-inl.h"
#include "kvring/ops/bf16_convert-inl.h"

#if HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// How an item computes its products: kF32 the exact mode; kBF16Widened the BF16-product
// mode on the widening path (queries and probabilities rounded, then the exact mode's code);
// kBF16Native the mode on vdpbf16ps (AVX3_DL on a CPU with AVX512-BF16, BF16 tiles of 16 or
// a multiple of 32 slots); kInt8 the integer-product mode of int8 layers
// (attention_int8_products-inl.h), kInt8AvxVnni that mode on AVX-VNNI (the AVX2 target on a
// CPU that has it).
enum class ProductPath : uint8_t { kF32, kBF16Widened, kBF16Native, kInt8, kInt8AvxVnni };

// Writes row `q` of head_dim elements, times `scale`, as the path reads it: f32 (kF32), f32
// rounded to BF16 (kBF16Widened), or for kBF16Native the BF16 pairs (q[2j], q[2j + 1]), low
// half first, as the bit patterns of q[0, head_dim / 2). `get(dim)` returns the unscaled
// element.
template <class Get>
HWY_INLINE void WriteQueryRow(ProductPath path, const Get& get, float scale, size_t head_dim,
                              float* HWY_RESTRICT q) {
  if (path == ProductPath::kF32) {
    for (size_t dim = 0; dim < head_dim; ++dim) q[dim] = get(dim) * scale;
  } else if (path == ProductPath::kBF16Widened) {
    for (size_t dim = 0; dim < head_dim; ++dim) q[dim] = BF16ToF32(BF16FromF32(get(dim) * scale));
  } else {
    for (size_t j = 0; j < head_dim / 2; ++j) {
      const uint32_t pair = uint32_t{BF16FromF32(get(2 * j) * scale).bits} |
                            uint32_t{BF16FromF32(get(2 * j + 1) * scale).bits} << 16;
      std::memcpy(q + j, &pair, sizeof(pair));
    }
  }
}

#if HWY_TARGET != HWY_SCALAR
// Replaces a row's kTile probabilities (the lane order of TileShape: vector 2p + e, lane j
// is position 2 * kLanes * p + 2 * j + e) by their BF16 pairs (position 2i, 2i + 1), low
// half first, as the bit patterns of p[0, kTile / 2): pair i is at index i. In place.
template <uint64_t kTile>
HWY_INLINE void PackProbabilityPairs(float* HWY_RESTRICT p) {
  using Shape = TileShape<kTile>;
  const hn::RebindToUnsigned<typename Shape::DK> du;
  uint32_t* bits = reinterpret_cast<uint32_t*>(p);
  KVRING_UNROLL
  for (size_t pair = 0; pair < Shape::kPairs; ++pair) {
    const auto even = RoundedToBF16Bits(du, hn::LoadU(du, bits + 2 * pair * Shape::kLanes));
    const auto odd = RoundedToBF16Bits(du, hn::LoadU(du, bits + (2 * pair + 1) * Shape::kLanes));
    hn::StoreU(hn::Or(hn::ShiftRight<16>(even), odd), du, bits + pair * Shape::kLanes);
  }
}
#endif

#if HWY_TARGET == HWY_AVX3_DL

// The functions using vdpbf16ps carry AVX512-BF16 on top of the target (Highway 1.0.3's
// AVX3_DL does not include it) and are called, not inlined, from the target's code.
#define KVRING_BF16_PRODUCTS_TARGET __attribute__((target(HWY_TARGET_STR ",avx512bf16")))

// Whether this CPU executes vdpbf16ps (AVX3_DL CPUs before Sapphire Rapids and Zen 4, such as
// Ice Lake, do not).
static HWY_INLINE HWY_MAYBE_UNUSED bool HasBF16Products() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

// Whether tiles of kTile slots have a vdpbf16ps path: multiples of 32 (flash, tiled 32 and
// 64) and 16 (tiled 16, whose dims are 16 elements apart).
template <uint64_t kTile>
constexpr bool kNativeTile = kTile % 32 == 0 || kTile == 16;

// Pairs of two rows a and b of 32 BF16: lane j of *even is (a[2j], b[2j]), of *odd
// (a[2j + 1], b[2j + 1]), low half first.
static HWY_INLINE HWY_MAYBE_UNUSED void PairRows512(__m512i a, __m512i b, __m512i& even,
                                                    __m512i& odd) {
  even = _mm512_mask_blend_epi16(0xAAAAAAAAu, a, _mm512_slli_epi32(b, 16));
  odd = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(a, 16), b);
}

static HWY_INLINE HWY_MAYBE_UNUSED __m512bh AsBH(__m512i v) { return (__m512bh)v; }
static HWY_INLINE HWY_MAYBE_UNUSED __m256bh AsBH(__m256i v) { return (__m256bh)v; }

// TileScoresNative of a 16-slot tile (TiledLayout<16>: dims dim_stride == 16 apart).
template <size_t kRows>
static KVRING_BF16_PRODUCTS_TARGET HWY_INLINE void TileScoresNative16(
    const float* const* q, const BF16* k_tile, size_t head_dim, const BF16* v_now,
    const PrefetchShape& ps, float* scores) {
  const uint16_t* k = reinterpret_cast<const uint16_t*>(k_tile);
  const size_t pairs = head_dim / 2;
  // Dims d and d + 1 of a 16-slot tile fill one vector: slot s of dim d at s, of d + 1 at
  // 16 + s. Lane j < 8 takes even slot 2j, lane 8 + j odd slot 2j + 1 (TileShape<16>).
  // (Element 2L of the permutation takes slot s of dim d, element 2L + 1 slot s of d + 1.)
  alignas(64) static constexpr uint16_t kIndex[32] = {0,  16, 2,  18, 4,  20, 6,  22, 8,  24, 10,
                                                      26, 12, 28, 14, 30, 1,  17, 3,  19, 5,  21,
                                                      7,  23, 9,  25, 11, 27, 13, 29, 15, 31};
  const __m512i perm = _mm512_load_si512(kIndex);
  constexpr size_t kAtOnce = AtOnce(kRows);
  for (size_t s0 = 0; s0 < kDimSplit; s0 += kAtOnce) {
    __m512 acc[kAtOnce][kRows];
    KVRING_UNROLL
    for (size_t s = 0; s < kAtOnce; ++s) {
      KVRING_UNROLL
      for (size_t r = 0; r < kRows; ++r) acc[s][r] = _mm512_setzero_ps();
    }
    for (size_t pair0 = 0; pair0 < pairs; pair0 += kDimSplit) {
      KVRING_UNROLL
      for (size_t s = 0; s < kAtOnce; ++s) {
        const size_t pair = pair0 + s0 + s;
        PrefetchV(v_now, 2 * pair, ps);
        PrefetchV(v_now, 2 * pair + 1, ps);
        const __m512i kv = _mm512_permutexvar_epi16(perm, _mm512_loadu_si512(k + pair * 32));
        KVRING_UNROLL
        for (size_t r = 0; r < kRows; ++r) {
          const __m512i qp = _mm512_castps_si512(_mm512_set1_ps(q[r][pair]));
          acc[s][r] = _mm512_dpbf16_ps(acc[s][r], AsBH(kv), AsBH(qp));
        }
      }
    }
    KVRING_UNROLL
    for (size_t r = 0; r < kRows; ++r) {
      float* out = scores + r * 16;
      __m512 sum = acc[0][r];
      if (s0 != 0) sum = _mm512_add_ps(_mm512_loadu_ps(out), sum);
      KVRING_UNROLL
      for (size_t s = 1; s < kAtOnce; ++s) sum = _mm512_add_ps(sum, acc[s][r]);
      _mm512_storeu_ps(out, sum);
    }
  }
}

// TileScoresNative of a tile of kTile >= 32 slots (flash, TiledLayout<32> and <64>).
template <size_t kRows, uint64_t kTile>
static KVRING_BF16_PRODUCTS_TARGET HWY_INLINE void TileScoresNativeWide(
    const float* const* q, const BF16* k_tile, size_t dim_stride, size_t head_dim,
    const BF16* v_now, const PrefetchShape& ps, float* scores) {
  const uint16_t* k = reinterpret_cast<const uint16_t*>(k_tile);
  const size_t pairs = head_dim / 2;
  // Each 32 slots of dims d and d + 1 give the even slots' and the odd slots' pairs.
  constexpr size_t kChunks = static_cast<size_t>(kTile) / 32;
  constexpr size_t kAtOnce = AtOnce(kRows * 2 * kChunks);
  for (size_t s0 = 0; s0 < kDimSplit; s0 += kAtOnce) {
    __m512 acc[kAtOnce][kRows][2 * kChunks];
    KVRING_UNROLL
    for (size_t s = 0; s < kAtOnce; ++s) {
      KVRING_UNROLL
      for (size_t r = 0; r < kRows; ++r) {
        KVRING_UNROLL
        for (size_t i = 0; i < 2 * kChunks; ++i) acc[s][r][i] = _mm512_setzero_ps();
      }
    }
    for (size_t pair0 = 0; pair0 < pairs; pair0 += kDimSplit) {
      KVRING_UNROLL
      for (size_t s = 0; s < kAtOnce; ++s) {
        const size_t pair = pair0 + s0 + s;
        const uint16_t* row = k + 2 * pair * dim_stride;
        PrefetchV(v_now, 2 * pair, ps);
        PrefetchV(v_now, 2 * pair + 1, ps);
        __m512i even[kChunks], odd[kChunks];
        KVRING_UNROLL
        for (size_t c = 0; c < kChunks; ++c) {
          const __m512i a = _mm512_loadu_si512(row + 32 * c);
          const __m512i b = _mm512_loadu_si512(row + dim_stride + 32 * c);
          PairRows512(a, b, even[c], odd[c]);
        }
        KVRING_UNROLL
        for (size_t r = 0; r < kRows; ++r) {
          const __m512i qp = _mm512_castps_si512(_mm512_set1_ps(q[r][pair]));
          KVRING_UNROLL
          for (size_t c = 0; c < kChunks; ++c) {
            acc[s][r][2 * c] = _mm512_dpbf16_ps(acc[s][r][2 * c], AsBH(even[c]), AsBH(qp));
            acc[s][r][2 * c + 1] = _mm512_dpbf16_ps(acc[s][r][2 * c + 1], AsBH(odd[c]), AsBH(qp));
          }
        }
      }
    }
    KVRING_UNROLL
    for (size_t r = 0; r < kRows; ++r) {
      KVRING_UNROLL
      for (size_t i = 0; i < 2 * kChunks; ++i) {
        float* out = scores + r * kTile + i * 16;
        __m512 sum = acc[0][r][i];
        if (s0 != 0) sum = _mm512_add_ps(_mm512_loadu_ps(out), sum);
        KVRING_UNROLL
        for (size_t s = 1; s < kAtOnce; ++s) sum = _mm512_add_ps(sum, acc[s][r][i]);
        _mm512_storeu_ps(out, sum);
      }
    }
  }
}

// TileScores on vdpbf16ps: raw scores of kRows rows for one tile, in the lane order of
// TileShape. q[r]: the row's BF16 pairs (WriteQueryRow). The dim pairs sum in kDimSplit
// interleaved partial sums (pair % kDimSplit), each from zero, added in order: a row's bits do
// not depend on its block.
template <size_t kRows, uint64_t kTile>
static KVRING_BF16_PRODUCTS_TARGET HWY_NOINLINE void TileScoresNative(
    const float* const* q, const BF16* k_tile, size_t dim_stride, size_t head_dim,
    const BF16* v_now, const PrefetchShape& ps, float* scores) {
  if constexpr (kTile == 16) {
    TileScoresNative16<kRows>(q, k_tile, head_dim, v_now, ps, scores);  // dims 16 apart
  } else {
    TileScoresNativeWide<kRows, kTile>(q, k_tile, dim_stride, head_dim, v_now, ps, scores);
  }
}

// AccumulateChunks on vdpbf16ps: acc[r] = acc[r] * correction[r] + the tile's p . V for
// kChunks chunks of 32 dims from dim0 (kTail: one chunk of 16 dims), positions taken in pairs
// (2i, 2i + 1) in chronological order. pp[r]: the row's probability pairs
// (PackProbabilityPairs). kMasked: one row; positions outside [lo_off, hi_off] are never
// read (their half of a pair is zero, as is their probability).
template <size_t kRows, size_t kChunks, bool kTail, bool kMasked>
static KVRING_BF16_PRODUCTS_TARGET HWY_INLINE void AccumulatePairsNative(
    size_t dim0, const uint16_t* v, size_t v_stride, const BF16* k_next, const PrefetchShape& ps,
    const float* const* pp, float* const* acc, const float* correction, int32_t first,
    int32_t last) {
  using VF = typename std::conditional<kTail, __m256, __m512>::type;
  using VI = typename std::conditional<kTail, __m256i, __m512i>::type;
  constexpr size_t kLanes = kTail ? 8 : 16;
  VF even_acc[kChunks][kRows], odd_acc[kChunks][kRows];
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    KVRING_UNROLL
    for (size_t ch = 0; ch < kChunks; ++ch) {
      const float* a = acc[r] + dim0 + ch * 2 * kLanes;
      if constexpr (kTail) {
        const __m256 c = _mm256_set1_ps(correction[r]);
        even_acc[ch][r] = _mm256_mul_ps(_mm256_loadu_ps(a), c);
        odd_acc[ch][r] = _mm256_mul_ps(_mm256_loadu_ps(a + kLanes), c);
      } else {
        const __m512 c = _mm512_set1_ps(correction[r]);
        even_acc[ch][r] = _mm512_mul_ps(_mm512_loadu_ps(a), c);
        odd_acc[ch][r] = _mm512_mul_ps(_mm512_loadu_ps(a + kLanes), c);
      }
    }
  }
  for (int32_t off = first & ~1; off <= last; off += 2) {
    // (A whole tile reads every row: the tests are for a masked row's edges only.)
    const bool has_a = !kMasked || off >= first, has_b = !kMasked || off + 1 <= last;
    const uint16_t* row_a = v + static_cast<size_t>(off) * v_stride + dim0;
    const uint16_t* row_b = row_a + v_stride;
    KVRING_UNROLL
    for (size_t ch = 0; ch < kChunks; ++ch) {
      PrefetchK(k_next, static_cast<size_t>(off) * v_stride + dim0 + ch * 2 * kLanes, ps);
      PrefetchK(k_next, static_cast<size_t>(off + 1) * v_stride + dim0 + ch * 2 * kLanes, ps);
    }
    KVRING_UNROLL
    for (size_t ch = 0; ch < kChunks; ++ch) {
      VI a, b, even, odd;
      if constexpr (kTail) {
        a = has_a ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_a + ch * 16))
                  : _mm256_setzero_si256();
        b = has_b ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_b + ch * 16))
                  : _mm256_setzero_si256();
        even = _mm256_mask_blend_epi16(0xAAAAu, a, _mm256_slli_epi32(b, 16));
        odd = _mm256_mask_blend_epi16(0xAAAAu, _mm256_srli_epi32(a, 16), b);
      } else {
        a = has_a ? _mm512_loadu_si512(row_a + ch * 32) : _mm512_setzero_si512();
        b = has_b ? _mm512_loadu_si512(row_b + ch * 32) : _mm512_setzero_si512();
        PairRows512(a, b, even, odd);
      }
      KVRING_UNROLL
      for (size_t r = 0; r < kRows; ++r) {
        if constexpr (kTail) {
          const __m256i pr = _mm256_castps_si256(_mm256_set1_ps(pp[r][off / 2]));
          even_acc[ch][r] = _mm256_dpbf16_ps(even_acc[ch][r], AsBH(even), AsBH(pr));
          odd_acc[ch][r] = _mm256_dpbf16_ps(odd_acc[ch][r], AsBH(odd), AsBH(pr));
        } else {
          const __m512i pr = _mm512_castps_si512(_mm512_set1_ps(pp[r][off / 2]));
          even_acc[ch][r] = _mm512_dpbf16_ps(even_acc[ch][r], AsBH(even), AsBH(pr));
          odd_acc[ch][r] = _mm512_dpbf16_ps(odd_acc[ch][r], AsBH(odd), AsBH(pr));
        }
      }
    }
  }
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    KVRING_UNROLL
    for (size_t ch = 0; ch < kChunks; ++ch) {
      float* a = acc[r] + dim0 + ch * 2 * kLanes;
      if constexpr (kTail) {
        _mm256_storeu_ps(a, even_acc[ch][r]);
        _mm256_storeu_ps(a + kLanes, odd_acc[ch][r]);
      } else {
        _mm512_storeu_ps(a, even_acc[ch][r]);
        _mm512_storeu_ps(a + kLanes, odd_acc[ch][r]);
      }
    }
  }
}

// AccumulateTile on vdpbf16ps (see AccumulatePairsNative): the chunking of AccumulateTile,
// so that the accumulators keep the exact mode's permuted order.
template <size_t kRows, bool kMasked, uint64_t kTile>
static KVRING_BF16_PRODUCTS_TARGET HWY_NOINLINE void AccumulateTileNative(
    const BF16* v_tile, size_t v_stride, const BF16* k_next, const PrefetchShape& ps,
    size_t v_head_dim, const float* const* pp, float* const* acc, const float* correction,
    int32_t lo_off, int32_t hi_off) {
  constexpr size_t kMaxChunks = 4;
  constexpr size_t kWide =
      kRows <= 2 || AtOnce(2 * kRows) >= kMaxChunks ? kMaxChunks : AtOnce(2 * kRows);
  const uint16_t* v = reinterpret_cast<const uint16_t*>(v_tile);
  const int32_t first = kMasked ? lo_off : 0;
  const int32_t last = kMasked ? hi_off : static_cast<int32_t>(kTile) - 1;
  size_t dim0 = 0;
  for (; dim0 + kWide * 32 <= v_head_dim; dim0 += kWide * 32) {
    AccumulatePairsNative<kRows, kWide, false, kMasked>(dim0, v, v_stride, k_next, ps, pp, acc,
                                                        correction, first, last);
  }
  for (; dim0 + 32 <= v_head_dim; dim0 += 32) {
    AccumulatePairsNative<kRows, 1, false, kMasked>(dim0, v, v_stride, k_next, ps, pp, acc,
                                                    correction, first, last);
  }
  for (; dim0 + 16 <= v_head_dim; dim0 += 16) {
    AccumulatePairsNative<kRows, 1, true, kMasked>(dim0, v, v_stride, k_next, ps, pp, acc,
                                                   correction, first, last);
  }
}

#undef KVRING_BF16_PRODUCTS_TARGET

#else  // HWY_TARGET != HWY_AVX3_DL

static HWY_INLINE HWY_MAYBE_UNUSED bool HasBF16Products() { return false; }
template <uint64_t kTile>
constexpr bool kNativeTile = false;

#endif  // HWY_TARGET == HWY_AVX3_DL

// Returns the path an item of `products` over stored elements T in tiles of kTile slots (K
// dims dim_stride apart) takes on this target and CPU.
template <typename T, uint64_t kTile>
HWY_INLINE ProductPath PathOf(Products products, size_t dim_stride) {
  if (products != Products::kBF16 || !ElementKernel<T>::kBF16Products) return ProductPath::kF32;
  const bool native_shape = kNativeTile<kTile> && (kTile != 16 || dim_stride == 16);
  return native_shape && HasBF16Products() ? ProductPath::kBF16Native : ProductPath::kBF16Widened;
}

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_PRODUCTS_INL_H_
