// kvring/formats/int8.h: the int8 format's exact rule, for one row of one kv_head (head_dim
// elements of K, or v_head_dim of V): scale = max|x| / 127 (0 for an all-zero row), q =
// round_half_even(x / scale) clamped to [-127, 127]; the stored value of element i is
// exactly scale * q[i] in f32, and kernels compute with that value. A row holding NaN or
// infinity stores scale NaN (and q = 0), so that exactly the outputs of queries that see its
// position become NaN, as a NaN in a BF16 row makes them. Portable scalar code that compilers
// vectorise; no Highway.
#ifndef KVRING_FORMATS_INT8_H_
#define KVRING_FORMATS_INT8_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kvring/bf16.h"

namespace kvring {

// Largest magnitude of a stored int8 element.
inline constexpr int kInt8Max = 127;

// Returns x rounded to the nearest integer, ties to even, for |x| <= 2^22: adding and
// subtracting 1.5 * 2^23 leaves the rounding to the f32 addition, which rounds to nearest
// even. No library call, so loops over rows vectorise with baseline SSE2.
// (Compilers keep the pair: without -ffast-math they do not reassociate f32 additions.)
inline float RoundHalfEven(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
}

namespace detail {
inline float ToF32(float value) { return value; }
inline float ToF32(BF16 value) { return BF16ToF32(value); }

// Returns the largest magnitude of x[0, n) as f32: infinity or NaN if any element is not
// finite. From the bits: without its sign bit, a value's bits order as its magnitude does,
// infinity and NaN above every finite value. An integer max reduces in any order, so these
// loops vectorise (a float max does not: the compiler must keep the order NaN imposes), and
// the dependent max of each element no longer bounds the row's time.
inline float MaxAbs(const float* x, size_t n) {
  int32_t max_bits = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    const int32_t magnitude = static_cast<int32_t>(bits & 0x7FFFFFFFu);
    max_bits = magnitude > max_bits ? magnitude : max_bits;
  }
  float max_abs;
  std::memcpy(&max_abs, &max_bits, sizeof(max_abs));
  return max_abs;
}
inline float MaxAbs(const BF16* x, size_t n) {
  int16_t max_bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int16_t magnitude = static_cast<int16_t>(x[i].bits & 0x7FFF);
    max_bits = magnitude > max_bits ? magnitude : max_bits;
  }
  BF16 max_abs;
  max_abs.bits = static_cast<uint16_t>(max_bits);
  return BF16ToF32(max_abs);
}
}  // namespace detail

// Returns the scale of a row whose largest magnitude is `max_abs`: max_abs / 127, 0 for an
// all-zero row, NaN when the row held NaN or infinity (max_abs not finite).
inline float Int8Scale(float max_abs) {
  if (!(max_abs <= std::numeric_limits<float>::max())) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  return max_abs / static_cast<float>(kInt8Max);
}

// Encodes `n` elements of `x` (f32 or BF16) into q[0, n) and returns their scale. Exact and
// deterministic: the same row always gives the same bytes. Does not allocate.
template <typename T>
inline float EncodeInt8Row(const T* x, size_t n, int8_t* q) {
  const float max_abs = detail::MaxAbs(x, n);
  if (!(max_abs <= std::numeric_limits<float>::max())) {  // NaN or infinity
    std::memset(q, 0, n);
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = Int8Scale(max_abs);
  if (scale == 0.0f) {
    std::memset(q, 0, n);
    return 0.0f;
  }
  for (size_t i = 0; i < n; ++i) {
    // Rounded, the quotient is a whole number of magnitude about 127 at most (|x| <= max_abs),
    // so it converts to int32 exactly and clamping it as an integer is clamping the float: the
    // integer min and max vectorise into a few instructions where float selects do not.
    int32_t r = static_cast<int32_t>(RoundHalfEven(detail::ToF32(x[i]) / scale));
    r = r > kInt8Max ? kInt8Max : r;
    r = r < -kInt8Max ? -kInt8Max : r;
    q[i] = static_cast<int8_t>(r);
  }
  return scale;
}

// Returns the stored value of an int8 element: scale * q, exactly as the kernels use it.
inline float DecodeInt8(float scale, int8_t q) { return scale * static_cast<float>(q); }

}  // namespace kvring

#endif  // KVRING_FORMATS_INT8_H_
