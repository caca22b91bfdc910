// kvring/bf16.h: the BF16 element kvring stores K and V in, and portable scalar conversions.
// Use BF16FromF32 to write K/V from f32 rows (round to nearest even, NaN stays NaN); the
// vectorised conversion lives in kvring/ops/. No vector code here.
#ifndef KVRING_BF16_H_
#define KVRING_BF16_H_

#include <cstdint>
#include <cstring>

#include "hwy/base.h"

namespace kvring {

// The stored element: Highway's bfloat16_t (16 bits: sign, 8 exponent, 7 mantissa bits).
using BF16 = hwy::bfloat16_t;

// Returns `value` rounded to the nearest BF16, ties to even. NaN stays NaN (quieted), and
// values past the largest BF16 round to infinity. Cost: a few integer operations.
inline BF16 BF16FromF32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  BF16 result;
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: keep the sign and the top payload bits, and set the quiet bit so that truncation
    // of a payload living only in the low bits cannot turn it into infinity.
    result.bits = static_cast<uint16_t>((bits >> 16) | 0x0040u);
    return result;
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  result.bits = static_cast<uint16_t>((bits + rounding) >> 16);
  return result;
}

// Returns the f32 that `value` stands for (exact). (Named apart from hwy::BF16ToF32,
// which argument-dependent lookup would also find.)
inline float BF16ToF32(BF16 value) {
  const uint32_t bits = static_cast<uint32_t>(value.bits) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

}  // namespace kvring

#endif  // KVRING_BF16_H_
