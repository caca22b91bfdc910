// kvring/detail/transpose.h: blocked transposition of 16-bit elements, for writing token rows
// [token][dim] into the slot-major K of the flash and tiled layouts ([dim][slot]). Uses SSE2
// (the x86-64 baseline, no per-target code) where the compiler offers it, plain C++ elsewhere.
// Internal to kvring's storage.
#ifndef KVRING_DETAIL_TRANSPOSE_H_
#define KVRING_DETAIL_TRANSPOSE_H_

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvring {
namespace detail {

// Writes dst[d * dst_stride + t] = src[t * src_stride + d] for t, d < 8 (uint16_t elements).
inline void Transpose8x8(const uint16_t* src, uint64_t src_stride, uint16_t* dst,
                         uint64_t dst_stride) {
#if defined(__SSE2__)
  __m128i r[8];
  for (uint64_t t = 0; t < 8; ++t) {
    r[t] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + t * src_stride));
  }
  // Interleave pairs of rows three times (16-, 32-, then 64-bit): row t's element d ends up
  // in lane t of output d.
  __m128i a[8], b[8];
  for (uint64_t i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (uint64_t base = 0; base < 8; base += 4) {
    b[base + 0] = _mm_unpacklo_epi32(a[base + 0], a[base + 2]);
    b[base + 1] = _mm_unpackhi_epi32(a[base + 0], a[base + 2]);
    b[base + 2] = _mm_unpacklo_epi32(a[base + 1], a[base + 3]);
    b[base + 3] = _mm_unpackhi_epi32(a[base + 1], a[base + 3]);
  }
  for (uint64_t i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * i) * dst_stride),
                     _mm_unpacklo_epi64(b[i], b[i + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * i + 1) * dst_stride),
                     _mm_unpackhi_epi64(b[i], b[i + 4]));
  }
#else
  for (uint64_t d = 0; d < 8; ++d) {
    for (uint64_t t = 0; t < 8; ++t) dst[d * dst_stride + t] = src[t * src_stride + d];
  }
#endif
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_DETAIL_TRANSPOSE_H_
