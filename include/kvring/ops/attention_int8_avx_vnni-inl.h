// kvring/ops/attention_int8_avx_vnni-inl.h: the AVX-VNNI loops of the integer-product mode
// (Products::kInt8, kvring/ops/attention_int8_products-inl.h) for the AVX2 target: the loops
// of attention_int8_vnni-inl.h, under their names, on 256-bit vpdpbusd (AVX-VNNI: Intel cores since
// Alder Lake and Sierra Forest, AMD's since Zen 5), chosen at run time where the CPU has it
// (AvxVnniUsable); AVX2 CPUs without it run the f32 loops. The same exact int32 sums as the
// AVX-512 loops: the scores are AVX3_DL's bit for bit. Internal to kvring/ops/attention-inl.h
// (namespace attention_internal).
//
// vpdpbusd takes four bytes of one operand per 32-bit lane: four dims of a slot (K) or four
// slots of a dim (V). LoadQuads builds them from four stored rows of 16 bytes with two byte
// and two word interleaves; 128-bit halves keep columns 0-3 and 8-11 in one vector, 4-7 and
// 12-15 in the other, and the sums go back to their natural order once per tile.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_INT8_AVX_VNNI_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_INT8_AVX_VNNI_INL_H_
#undef KVRING_OPS_ATTENTION_INT8_AVX_VNNI_INL_H_
#else
#define KVRING_OPS_ATTENTION_INT8_AVX_VNNI_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kvring/detail/cpu_choice.h"
#include "kvring/ops/target_vectors-inl.h"

// After highway.h: per-target helpers this file uses.
#include "kvring/ops/attention_int8_vnni-inl.h"
#include "kvring/ops/attention_scores-inl.h"

#if HWY_TARGET == HWY_AVX2
#include <cpuid.h>
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// Whether this target has AVX-VNNI loops for tiles of kTile slots (taken where the CPU runs
// them: AvxVnniUsable).
template <uint64_t kTile>
constexpr bool kAvxVnniTile =
#if HWY_TARGET == HWY_AVX2
    kTile % 16 == 0;
#else
    false;
#endif

#if HWY_TARGET == HWY_AVX2

#define KVRING_AVX_VNNI_TARGET __attribute__((target(HWY_TARGET_STR ",avxvnni")))
// Loops over register arrays are unrolled whole (KVRING_UNROLL, target_vectors-inl.h), so
// that the arrays stay in registers.

// Whether this CPU executes AVX-VNNI (CPUID leaf 7, subleaf 1: EAX bit 4; the AVX state is
// enabled, as the AVX2 target requires) and the kernels may use it (detail::AvxVnniAllowed).
static HWY_INLINE HWY_MAYBE_UNUSED bool AvxVnniUsable() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 4)) != 0;
  }();
  return has && detail::AvxVnniAllowed();
}

// Four rows of 16 bytes (row j at p + j * stride) as vpdpbusd's quads: lane i of quads[0]
// holds bytes (r0[c], r1[c], r2[c], r3[c]) of column c = i (i < 4) or i + 4 (columns 0-3,
// then 8-11), lane i of quads[1] those of column c + 4 (4-7, then 12-15).
KVRING_AVX_VNNI_TARGET HWY_INLINE void LoadQuads(const int8_t* p, size_t stride, __m256i* quads) {
  const auto load = [](const int8_t* at) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
  };
  const __m256i r02 =
      _mm256_inserti128_si256(_mm256_castsi128_si256(load(p)), load(p + 2 * stride), 1);
  const __m256i r13 =
      _mm256_inserti128_si256(_mm256_castsi128_si256(load(p + stride)), load(p + 3 * stride), 1);
  const __m256i lo = _mm256_unpacklo_epi8(r02, r13);  // (r0, r1) of columns 0-7 | (r2, r3)'s
  const __m256i hi = _mm256_unpackhi_epi8(r02, r13);  // the same of columns 8-15
  const __m256i r01 = _mm256_permute2x128_si256(lo, hi, 0x20);  // (r0, r1): 0-7 | 8-15
  const __m256i r23 = _mm256_permute2x128_si256(lo, hi, 0x31);  // (r2, r3): 0-7 | 8-15
  quads[0] = _mm256_unpacklo_epi16(r01, r23);
  quads[1] = _mm256_unpackhi_epi16(r01, r23);
}

// Sums of LoadQuads' column order (columns 0-3 and 8-11, then 4-7 and 12-15) as f32 in the
// natural order: columns 0-7 to out[0], 8-15 to out[1].
KVRING_AVX_VNNI_TARGET HWY_INLINE void NaturalF32(__m256i first, __m256i second, __m256* out) {
  out[0] = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(first, second, 0x20));
  out[1] = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(first, second, 0x31));
}

// This target's Int8TileScoresVnniTo (attention_int8_vnni-inl.h has AVX-512's):
// scores[r * kTile + s] = float(q . k) * q_scale[r] * k_scales[s] (in that order) in natural
// order, K entering vpdpbusd as k + 128 and q_bias[r] (128 * the sum of row r's query bytes)
// taken off.
template <size_t kRows, uint64_t kTile, bool kToL2>
KVRING_AVX_VNNI_TARGET HWY_NOINLINE void Int8TileScoresVnniTo(
    const int8_t* const* q, const int32_t* q_bias, const float* q_scale, const float* k_scales,
    const int8_t* k_tile, size_t dim_stride, size_t head_dim, const int8_t* v_now,
    const PrefetchShape& ps, float* scores) {
  constexpr size_t kVectors = static_cast<size_t>(kTile) / 8;
  constexpr size_t kAtOnce = AtOnce(kRows * kVectors);  // independent sums: integers, any order
  __m256i acc[kAtOnce][kRows][kVectors];
  KVRING_UNROLL
  for (size_t s = 0; s < kAtOnce; ++s) {
    KVRING_UNROLL
    for (size_t r = 0; r < kRows; ++r) {
      KVRING_UNROLL
      for (size_t i = 0; i < kVectors; ++i) acc[s][r][i] = _mm256_setzero_si256();
    }
  }
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (size_t dim0 = 0; dim0 < head_dim; dim0 += 4 * kAtOnce) {
    KVRING_UNROLL
    for (size_t s = 0; s < kAtOnce; ++s) {
      const size_t dim = dim0 + 4 * s;
      PrefetchVDims4<kToL2>(v_now, dim, ps);
      __m256i qv[kRows];
      KVRING_UNROLL
      for (size_t r = 0; r < kRows; ++r) {
        int32_t four;
        std::memcpy(&four, q[r] + dim, sizeof(four));
        qv[r] = _mm256_set1_epi32(four);
      }
      KVRING_UNROLL
      for (size_t c = 0; c < kVectors / 2; ++c) {
        __m256i quads[2];
        LoadQuads(k_tile + dim * dim_stride + 16 * c, dim_stride, quads);
        quads[0] = _mm256_xor_si256(quads[0], flip);
        quads[1] = _mm256_xor_si256(quads[1], flip);
        KVRING_UNROLL
        for (size_t r = 0; r < kRows; ++r) {
          acc[s][r][2 * c] = _mm256_dpbusd_avx_epi32(acc[s][r][2 * c], quads[0], qv[r]);
          acc[s][r][2 * c + 1] = _mm256_dpbusd_avx_epi32(acc[s][r][2 * c + 1], quads[1], qv[r]);
        }
      }
    }
  }
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    const __m256i bias = _mm256_set1_epi32(q_bias[r]);
    const __m256 row_scale = _mm256_set1_ps(q_scale[r]);
    KVRING_UNROLL
    for (size_t c = 0; c < kVectors / 2; ++c) {
      __m256i sums[2];
      KVRING_UNROLL
      for (size_t i = 0; i < 2; ++i) {
        sums[i] = acc[0][r][2 * c + i];
        KVRING_UNROLL
        for (size_t s = 1; s < kAtOnce; ++s) {
          sums[i] = _mm256_add_epi32(sums[i], acc[s][r][2 * c + i]);
        }
        sums[i] = _mm256_sub_epi32(sums[i], bias);
      }
      __m256 natural[2];
      NaturalF32(sums[0], sums[1], natural);
      KVRING_UNROLL
      for (size_t i = 0; i < 2; ++i) {
        const size_t at = 16 * c + 8 * i;
        _mm256_storeu_ps(
            scores + r * kTile + at,
            _mm256_mul_ps(_mm256_mul_ps(natural[i], row_scale), _mm256_loadu_ps(k_scales + at)));
      }
    }
  }
}

// The V pass of kRows (at most 2) rows on AVX-VNNI for 16 dims from dim0: the tile's
// positions four at a time, weighed by the high and the low bytes of their weights w[r]
// (Int8Weights), then AddTileSums(256 * high + low).
template <size_t kRows, uint64_t kTile, bool kToL2>
KVRING_AVX_VNNI_TARGET HWY_INLINE void AccumulateInt8AvxVnni(
    size_t dim0, const int8_t* v_tile, size_t v_stride, KLinePrefetch<kToL2>& fetch,
    const uint8_t* const* w, const float* w_scale, float* const* acc, const float* correction) {
  __m256i high[kRows][2], low[kRows][2];
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    KVRING_UNROLL
    for (size_t i = 0; i < 2; ++i) high[r][i] = low[r][i] = _mm256_setzero_si256();
  }
  KVRING_UNROLL
  for (size_t off = 0; off < kTile; off += 4) {
    fetch.Step();
    __m256i quads[2];
    LoadQuads(v_tile + off * v_stride + dim0, v_stride, quads);
    KVRING_UNROLL
    for (size_t r = 0; r < kRows; ++r) {
      int32_t four_high, four_low;
      std::memcpy(&four_high, w[r] + off, sizeof(four_high));
      std::memcpy(&four_low, w[r] + kTile + off, sizeof(four_low));
      const __m256i wh = _mm256_set1_epi32(four_high);
      const __m256i wl = _mm256_set1_epi32(four_low);
      KVRING_UNROLL
      for (size_t i = 0; i < 2; ++i) {
        high[r][i] = _mm256_dpbusd_avx_epi32(high[r][i], wh, quads[i]);
        low[r][i] = _mm256_dpbusd_avx_epi32(low[r][i], wl, quads[i]);
      }
    }
  }
  const hn::ScalableTag<float> df;
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    // 256 * high + low is below 2^31: exact in int32, then rounded once (as the f32 path).
    __m256i sums[2];
    KVRING_UNROLL
    for (size_t i = 0; i < 2; ++i) {
      sums[i] = _mm256_add_epi32(_mm256_slli_epi32(high[r][i], 8), low[r][i]);
    }
    __m256 natural[2];
    NaturalF32(sums[0], sums[1], natural);
    KVRING_UNROLL
    for (size_t i = 0; i < 2; ++i) {
      const hn::Vec<decltype(df)> t{natural[i]};
      AddTileSums(df, t, correction[r], w_scale[r], acc[r] + dim0 + 8 * i);
    }
  }
}

// This target's AccumulateInt8TileVnniTo: rows two at a time, dims 16 at a time. The first two
// rows' pass prefetches the next tile's K (the others read the same V).
template <size_t kRows, uint64_t kTile, bool kToL2>
KVRING_AVX_VNNI_TARGET HWY_NOINLINE void AccumulateInt8TileVnniTo(
    const int8_t* v_tile, size_t v_stride, const int8_t* k_next, const PrefetchShape& ps,
    size_t v_head_dim, const uint8_t* const* w, const float* w_scale, float* const* acc,
    const float* correction) {
  constexpr size_t kPart = kRows < 2 ? kRows : 2;
  const size_t groups = kTile / 4 * (v_head_dim / 16);
  KLinePrefetch<kToL2> fetch(k_next, ps, groups);
  for (size_t r0 = 0; r0 < kRows; r0 += kPart) {
    if (r0 != 0) fetch.k = nullptr;
    for (size_t dim0 = 0; dim0 < v_head_dim; dim0 += 16) {
      AccumulateInt8AvxVnni<kPart, kTile>(dim0, v_tile, v_stride, fetch, w + r0, w_scale + r0,
                                          acc + r0, correction + r0);
    }
  }
}

#undef KVRING_AVX_VNNI_TARGET

#endif  // HWY_TARGET == HWY_AVX2

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3_DL

// Both targets' vpdpbusd kernels (this file's and attention_int8_vnni-inl.h's) are compiled
// for each prefetch cache (attention_int8_vnni-inl.h says why); these pick one per call.

// Int8TileScoresVnniTo for the cache ps.to_l2.
template <size_t kRows, uint64_t kTile>
HWY_INLINE void Int8TileScoresVnni(const int8_t* const* q, const int32_t* q_bias,
                                   const float* q_scale, const float* k_scales,
                                   const int8_t* k_tile, size_t dim_stride, size_t head_dim,
                                   const int8_t* v_now, const PrefetchShape& ps, float* scores) {
  if (ps.to_l2) {
    Int8TileScoresVnniTo<kRows, kTile, true>(q, q_bias, q_scale, k_scales, k_tile, dim_stride,
                                             head_dim, v_now, ps, scores);
  } else {
    Int8TileScoresVnniTo<kRows, kTile, false>(q, q_bias, q_scale, k_scales, k_tile, dim_stride,
                                              head_dim, v_now, ps, scores);
  }
}

// AccumulateInt8TileVnniTo for the cache ps.to_l2.
template <size_t kRows, uint64_t kTile>
HWY_INLINE void AccumulateInt8TileVnni(const int8_t* v_tile, size_t v_stride, const int8_t* k_next,
                                       const PrefetchShape& ps, size_t v_head_dim,
                                       const uint8_t* const* w, const float* w_scale,
                                       float* const* acc, const float* correction) {
  if (ps.to_l2) {
    AccumulateInt8TileVnniTo<kRows, kTile, true>(v_tile, v_stride, k_next, ps, v_head_dim, w,
                                                 w_scale, acc, correction);
  } else {
    AccumulateInt8TileVnniTo<kRows, kTile, false>(v_tile, v_stride, k_next, ps, v_head_dim, w,
                                                  w_scale, acc, correction);
  }
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3_DL

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_INT8_AVX_VNNI_INL_H_
