// kvring/ops/attention_int8_vnni-inl.h: the AVX-512 VNNI loops of the integer-product mode
// (Products::kInt8, kvring/ops/attention_int8_products-inl.h): the scores of a register block
// of rows over one int8 tile and its V pass on vpdpbusd, exact int32 sums over the stored
// bytes; whether a target has them (kVnniTile). Internal to kvring/ops/attention-inl.h
// (namespace attention_internal).

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_INT8_VNNI_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_INT8_VNNI_INL_H_
#undef KVRING_OPS_ATTENTION_INT8_VNNI_INL_H_
#else
#define KVRING_OPS_ATTENTION_INT8_VNNI_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kvring/ops/target_vectors-inl.h"

// After highway.h: per-target helpers this file uses.
#include "kvring/ops/attention_scores-inl.h"

#if HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// Whether this target sums int8 products with vpdpbusd on tiles of kTile slots (else as f32).
template <uint64_t kTile>
constexpr bool kVnniTile =
#if HWY_TARGET == HWY_AVX3_DL
    kTile % 16 == 0;
#else
    false;
#endif

// acc = acc * correction + w_scale * t for one vector of accumulators at `acc`, t the tile's
// sums.
template <class DF>
HWY_INLINE void AddTileSums(DF df, hn::Vec<DF> tile_sums, float correction, float w_scale,
                            float* HWY_RESTRICT acc) {
  hn::StoreU(hn::MulAdd(hn::Set(df, w_scale), tile_sums,
                        hn::Mul(hn::LoadU(df, acc), hn::Set(df, correction))),
             df, acc);
}

// The loops below take the prefetches' cache (PrefetchShape::to_l2) as a template argument,
// kToL2, so that their prefetches carry no branch: g++ takes a run-time flag out of a loop
// only at -O3 (-funswitch-loops), and at -O2 the branches made the decode 5-11 %
// slower (docs/benchmarks.md). Each kernel (...To) is compiled for both caches, and the
// functions of its name without To in attention_int8_avx_vnni-inl.h pick one per call.

// Prefetches the lines of this tile's V that four scored dims from `dim` stand for.
template <bool kToL2>
HWY_INLINE void PrefetchVDims4(const int8_t* v_now, size_t dim, const PrefetchShape& ps) {
  for (size_t byte = 0; byte < 4 * ps.v_bytes_per_dim; byte += 64) {
    PrefetchLine(v_now + dim * ps.v_bytes_per_dim + byte, kToL2);
  }
}

// The next tile's K lines, prefetched a few at a time over a V pass's groups of positions
// (every line once, whatever the ratio of K lines to V lines: flash int8 has a K line per
// dim, twice its V lines), into the cache kToL2 says (PrefetchShape::to_l2).
template <bool kToL2>
struct KLinePrefetch {
  // The lines of the tile at k_next (PrefetchShape ps), spread over a V pass of `groups`
  // groups of positions.
  KLinePrefetch(const int8_t* k_next, const PrefetchShape& ps, size_t groups)
      : k(k_next),
        stride(ps.k_line_stride),
        lines(ps.k_lines),
        per_group((ps.k_lines + groups - 1) / groups) {}

  const int8_t* k = nullptr;  // null: no prefetching (a V pass's later row parts)
  size_t stride = 0;
  size_t lines = 0;
  size_t per_group = 0;
  size_t next = 0;

  HWY_INLINE void Step() {
    if (k == nullptr) return;
    for (size_t end = next + per_group < lines ? next + per_group : lines; next < end; ++next) {
      PrefetchLine(k + next * stride, kToL2);
    }
  }
};

#if HWY_TARGET == HWY_AVX3_DL

// The functions using vpdpbusd carry AVX512-VNNI on top of the target: Highway 1.0.3 requires
// it of a CPU for AVX3_DL but its target string names AVX-VNNI instead.
#define KVRING_VNNI_TARGET __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
// Loops over register arrays are unrolled whole (KVRING_UNROLL, target_vectors-inl.h), so
// that the arrays stay in registers.

// The byte permutation of four rows of 16 bytes (64 consecutive bytes) into 16 lanes of four:
// byte 4i + j takes byte 16j + i, element i of row j (K: four dims of a 16-slot tile; V: 16
// dims of four positions).
alignas(64) static constexpr uint8_t kQuadsOf4x16[64] = {
    0,  16, 32, 48, 1,  17, 33, 49, 2,  18, 34, 50, 3,  19, 35, 51, 4,  20, 36, 52, 5,  21,
    37, 53, 6,  22, 38, 54, 7,  23, 39, 55, 8,  24, 40, 56, 9,  25, 41, 57, 10, 26, 42, 58,
    11, 27, 43, 59, 12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};

// Four dims from `dim` of kTile slots of K, as vpdpbusd's unsigned operand: vector c, lane s
// holds bytes (k[dim][16c + s] .. k[dim + 3][16c + s]) + 128. Dims dim_stride bytes apart;
// a 16-slot tile's four dims are 64 consecutive bytes (dim_stride 16).
template <uint64_t kTile>
KVRING_VNNI_TARGET HWY_INLINE void LoadKQuads(const int8_t* k_tile, size_t dim, size_t dim_stride,
                                              __m512i* quads) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  if constexpr (kTile == 16) {
    const __m512i rows = _mm512_loadu_si512(k_tile + dim * 16);
    quads[0] =
        _mm512_xor_si512(_mm512_permutexvar_epi8(_mm512_load_si512(kQuadsOf4x16), rows), flip);
  } else {
    // Chunks of 32 slots: two dims' rows per vector, bytes 4s + j of the two results take
    // byte 32 (j % 2) + s (+ 16 for the second) of the pair holding dim j.
    alignas(64) static constexpr uint8_t kIndex[2][64] = {
        {0,  32, 64, 96,  1,  33, 65, 97,  2,  34, 66, 98,  3,  35, 67, 99,
         4,  36, 68, 100, 5,  37, 69, 101, 6,  38, 70, 102, 7,  39, 71, 103,
         8,  40, 72, 104, 9,  41, 73, 105, 10, 42, 74, 106, 11, 43, 75, 107,
         12, 44, 76, 108, 13, 45, 77, 109, 14, 46, 78, 110, 15, 47, 79, 111},
        {16, 48, 80, 112, 17, 49, 81, 113, 18, 50, 82, 114, 19, 51, 83, 115,
         20, 52, 84, 116, 21, 53, 85, 117, 22, 54, 86, 118, 23, 55, 87, 119,
         24, 56, 88, 120, 25, 57, 89, 121, 26, 58, 90, 122, 27, 59, 91, 123,
         28, 60, 92, 124, 29, 61, 93, 125, 30, 62, 94, 126, 31, 63, 95, 127}};
    const __m512i first = _mm512_load_si512(kIndex[0]);
    const __m512i second = _mm512_load_si512(kIndex[1]);
    const int8_t* row = k_tile + dim * dim_stride;
    for (size_t c = 0; c < kTile / 32; ++c) {
      const int8_t* at = row + 32 * c;
      const auto load = [](const int8_t* p) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      };
      const __m512i ab =
          _mm512_inserti64x4(_mm512_castsi256_si512(load(at)), load(at + dim_stride), 1);
      const __m512i cd = _mm512_inserti64x4(_mm512_castsi256_si512(load(at + 2 * dim_stride)),
                                            load(at + 3 * dim_stride), 1);
      quads[2 * c] = _mm512_xor_si512(_mm512_permutex2var_epi8(ab, first, cd), flip);
      quads[2 * c + 1] = _mm512_xor_si512(_mm512_permutex2var_epi8(ab, second, cd), flip);
    }
  }
}

// Scores of kRows rows over one tile on vpdpbusd: scores[r * kTile + s] = float(q . k) *
// q_scale[r] * k_scales[s] (in that order) in natural order. q[r]: the row's int8 query bytes;
// q_bias[r]: 128 * their sum.
template <size_t kRows, uint64_t kTile, bool kToL2>
KVRING_VNNI_TARGET HWY_NOINLINE void Int8TileScoresVnniTo(
    const int8_t* const* q, const int32_t* q_bias, const float* q_scale, const float* k_scales,
    const int8_t* k_tile, size_t dim_stride, size_t head_dim, const int8_t* v_now,
    const PrefetchShape& ps, float* scores) {
  constexpr size_t kVectors = static_cast<size_t>(kTile) / 16;
  constexpr size_t kAtOnce = AtOnce(kRows * kVectors);  // independent sums: integers, any order
  __m512i acc[kAtOnce][kRows][kVectors];
  KVRING_UNROLL
  for (size_t s = 0; s < kAtOnce; ++s) {
    KVRING_UNROLL
    for (size_t r = 0; r < kRows; ++r) {
      KVRING_UNROLL
      for (size_t i = 0; i < kVectors; ++i) acc[s][r][i] = _mm512_setzero_si512();
    }
  }
  for (size_t dim0 = 0; dim0 < head_dim; dim0 += 4 * kAtOnce) {
    KVRING_UNROLL
    for (size_t s = 0; s < kAtOnce; ++s) {
      const size_t dim = dim0 + 4 * s;
      PrefetchVDims4<kToL2>(v_now, dim, ps);
      __m512i quads[kVectors];
      LoadKQuads<kTile>(k_tile, dim, dim_stride, quads);
      KVRING_UNROLL
      for (size_t r = 0; r < kRows; ++r) {
        int32_t four;
        std::memcpy(&four, q[r] + dim, sizeof(four));
        const __m512i qv = _mm512_set1_epi32(four);
        KVRING_UNROLL
        for (size_t i = 0; i < kVectors; ++i) {
          acc[s][r][i] = _mm512_dpbusd_epi32(acc[s][r][i], quads[i], qv);
        }
      }
    }
  }
  // (Conversions take the zero-masked form: GCC 12 reports the plain one's undefined
  // pass-through as uninitialized here.)
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    const __m512i bias = _mm512_set1_epi32(q_bias[r]);
    const __m512 row_scale = _mm512_set1_ps(q_scale[r]);
    KVRING_UNROLL
    for (size_t i = 0; i < kVectors; ++i) {
      __m512i sum = acc[0][r][i];
      KVRING_UNROLL
      for (size_t s = 1; s < kAtOnce; ++s) sum = _mm512_add_epi32(sum, acc[s][r][i]);
      sum = _mm512_sub_epi32(sum, bias);
      const __m512 scaled = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, sum), row_scale);
      _mm512_storeu_ps(scores + r * kTile + 16 * i,
                       _mm512_mul_ps(scaled, _mm512_loadu_ps(k_scales + 16 * i)));
    }
  }
}

// Four V rows (positions off .. off + 3) of 64 dims from `dim0`, as vpdpbusd's signed operand:
// vector c, lane d holds bytes (v[off][dim0 + 16c + d] .. v[off + 3][dim0 + 16c + d]).
KVRING_VNNI_TARGET HWY_INLINE void LoadVQuads64(const int8_t* rows, size_t v_stride,
                                                __m512i* quads) {
  // Bytes 2i, 2i + 1 of a pair take byte i (+ 32 for the upper dims) of rows a and b; words
  // 2i, 2i + 1 of a quad take word i (+ 16) of the pairs ab and cd.
  alignas(64) static constexpr uint8_t kBytes[2][64] = {
      {0,  64, 1,  65, 2,  66, 3,  67, 4,  68, 5,  69, 6,  70, 7,  71, 8,  72, 9,  73, 10, 74,
       11, 75, 12, 76, 13, 77, 14, 78, 15, 79, 16, 80, 17, 81, 18, 82, 19, 83, 20, 84, 21, 85,
       22, 86, 23, 87, 24, 88, 25, 89, 26, 90, 27, 91, 28, 92, 29, 93, 30, 94, 31, 95},
      {32, 96,  33, 97,  34, 98,  35, 99,  36, 100, 37, 101, 38, 102, 39, 103,
       40, 104, 41, 105, 42, 106, 43, 107, 44, 108, 45, 109, 46, 110, 47, 111,
       48, 112, 49, 113, 50, 114, 51, 115, 52, 116, 53, 117, 54, 118, 55, 119,
       56, 120, 57, 121, 58, 122, 59, 123, 60, 124, 61, 125, 62, 126, 63, 127}};
  alignas(64) static constexpr uint16_t kWords[2][32] = {
      {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
       8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
      {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
       24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};
  const __m512i a = _mm512_loadu_si512(rows);
  const __m512i b = _mm512_loadu_si512(rows + v_stride);
  const __m512i c = _mm512_loadu_si512(rows + 2 * v_stride);
  const __m512i d = _mm512_loadu_si512(rows + 3 * v_stride);
  KVRING_UNROLL
  for (size_t half = 0; half < 2; ++half) {
    const __m512i bytes = _mm512_load_si512(kBytes[half]);
    const __m512i ab = _mm512_permutex2var_epi8(a, bytes, b);
    const __m512i cd = _mm512_permutex2var_epi8(c, bytes, d);
    quads[2 * half] = _mm512_permutex2var_epi16(ab, _mm512_load_si512(kWords[0]), cd);
    quads[2 * half + 1] = _mm512_permutex2var_epi16(ab, _mm512_load_si512(kWords[1]), cd);
  }
}

// LoadVQuads64 for 16 dims (the last dims of a row whose length is not a multiple of 64).
KVRING_VNNI_TARGET HWY_INLINE __m512i LoadVQuads16(const int8_t* rows, size_t v_stride) {
  const auto load = [&](size_t j) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + j * v_stride));
  };
  __m512i all = _mm512_castsi128_si512(load(0));
  all = _mm512_inserti32x4(all, load(1), 1);
  all = _mm512_inserti32x4(all, load(2), 2);
  all = _mm512_inserti32x4(all, load(3), 3);
  return _mm512_permutexvar_epi8(_mm512_load_si512(kQuadsOf4x16), all);
}

// The V pass of kRows (at most 2) rows on vpdpbusd for kVectors (4: 64 dims, or 1: 16)
// vectors of dims from dim0: the tile's positions four at a time, weighed by the high and the
// low bytes of their weights w[r] (Int8Weights), then AddTileSums(256 * high + low).
template <size_t kRows, size_t kVectors, uint64_t kTile, bool kToL2>
KVRING_VNNI_TARGET HWY_INLINE void AccumulateInt8Vnni(size_t dim0, const int8_t* v_tile,
                                                      size_t v_stride, KLinePrefetch<kToL2>& fetch,
                                                      const uint8_t* const* w, const float* w_scale,
                                                      float* const* acc, const float* correction) {
  __m512i high[kRows][kVectors], low[kRows][kVectors];
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    KVRING_UNROLL
    for (size_t i = 0; i < kVectors; ++i) high[r][i] = low[r][i] = _mm512_setzero_si512();
  }
  KVRING_UNROLL
  for (size_t off = 0; off < kTile; off += 4) {
    const int8_t* rows = v_tile + off * v_stride + dim0;
    fetch.Step();
    __m512i quads[kVectors];
    if constexpr (kVectors == 4) {
      LoadVQuads64(rows, v_stride, quads);
    } else {
      quads[0] = LoadVQuads16(rows, v_stride);
    }
    KVRING_UNROLL
    for (size_t r = 0; r < kRows; ++r) {
      int32_t four_high, four_low;
      std::memcpy(&four_high, w[r] + off, sizeof(four_high));
      std::memcpy(&four_low, w[r] + kTile + off, sizeof(four_low));
      const __m512i wh = _mm512_set1_epi32(four_high);
      const __m512i wl = _mm512_set1_epi32(four_low);
      KVRING_UNROLL
      for (size_t i = 0; i < kVectors; ++i) {
        high[r][i] = _mm512_dpbusd_epi32(high[r][i], wh, quads[i]);
        low[r][i] = _mm512_dpbusd_epi32(low[r][i], wl, quads[i]);
      }
    }
  }
  const hn::ScalableTag<float> df;
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    KVRING_UNROLL
    for (size_t i = 0; i < kVectors; ++i) {
      // 256 * high + low is below 2^31: exact in int32, then rounded once (as the f32 path).
      const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(high[r][i], 8), low[r][i]);
      const hn::Vec<decltype(df)> t{_mm512_maskz_cvtepi32_ps(0xFFFF, sum)};
      AddTileSums(df, t, correction[r], w_scale[r], acc[r] + dim0 + 16 * i);
    }
  }
}

// The V pass of kRows rows on vpdpbusd: rows two at a time, dims 64 then 16 at a time. The
// first two rows' pass prefetches the next tile's K (the others read the same V).
template <size_t kRows, uint64_t kTile, bool kToL2>
KVRING_VNNI_TARGET HWY_NOINLINE void AccumulateInt8TileVnniTo(
    const int8_t* v_tile, size_t v_stride, const int8_t* k_next, const PrefetchShape& ps,
    size_t v_head_dim, const uint8_t* const* w, const float* w_scale, float* const* acc,
    const float* correction) {
  constexpr size_t kPart = kRows < 2 ? kRows : 2;
  const size_t groups = kTile / 4 * (v_head_dim / 64 + v_head_dim % 64 / 16);
  KLinePrefetch<kToL2> fetch(k_next, ps, groups);
  for (size_t r0 = 0; r0 < kRows; r0 += kPart) {
    if (r0 != 0) fetch.k = nullptr;
    size_t dim0 = 0;
    for (; dim0 + 64 <= v_head_dim; dim0 += 64) {
      AccumulateInt8Vnni<kPart, 4, kTile>(dim0, v_tile, v_stride, fetch, w + r0, w_scale + r0,
                                          acc + r0, correction + r0);
    }
    for (; dim0 < v_head_dim; dim0 += 16) {
      AccumulateInt8Vnni<kPart, 1, kTile>(dim0, v_tile, v_stride, fetch, w + r0, w_scale + r0,
                                          acc + r0, correction + r0);
    }
  }
}

#undef KVRING_VNNI_TARGET

#endif  // HWY_TARGET == HWY_AVX3_DL

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_INT8_VNNI_INL_H_
