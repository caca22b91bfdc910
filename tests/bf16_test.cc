// Tests of kvring/bf16.h: f32 -> BF16 rounds to nearest, ties to even, against a reference
// computed in double; NaN stays NaN; overflow goes to infinity.
#include "kvring/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace kvring {
namespace {

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// The nearest BF16 to a finite `value` (ties to the even mantissa), found by comparing the
// two BF16 neighbours in double.
uint16_t ReferenceRound(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint16_t down = static_cast<uint16_t>(bits >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);  // next magnitude (may be infinity)
  const double below = static_cast<double>(FromBits(uint32_t{down} << 16));
  double above = static_cast<double>(FromBits(uint32_t{up} << 16));
  // Past the largest BF16 the next step is 2^128, which rounds to infinity.
  if (std::isinf(above)) above = std::copysign(std::ldexp(1.0, 128), above);
  const double x = static_cast<double>(value);
  const double to_below = std::fabs(x - below), to_above = std::fabs(above - x);
  if (to_below < to_above) return down;
  if (to_above < to_below) return up;
  return (down & 1) ? up : down;
}

TEST(BF16, RoundsToNearestEvenLikeADoubleReference) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    if (i % 4 == 0) bits = (bits & 0xFFFF0000u) | 0x8000u;  // exact ties
    const float value = FromBits(bits);
    if (std::isnan(value)) continue;
    if ((bits & 0x7F800000u) == 0x7F800000u) continue;  // infinities: below
    EXPECT_EQ(BF16FromF32(value).bits, ReferenceRound(value)) << std::hex << bits;
  }
}

TEST(BF16, TiesGoToEven) {
  EXPECT_EQ(BF16FromF32(FromBits(0x3F808000u)).bits, 0x3F80u);  // even stays
  EXPECT_EQ(BF16FromF32(FromBits(0x3F818000u)).bits, 0x3F82u);  // odd rounds up
  EXPECT_EQ(BF16FromF32(FromBits(0x3F808001u)).bits, 0x3F81u);  // past the tie
}

TEST(BF16, NaNStaysNaNAndOverflowIsInfinity) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), FromBits(0x7F800001u),
                        FromBits(0xFF800001u), FromBits(0x7FFFFFFFu)};
  for (float nan : nans) EXPECT_TRUE(std::isnan(BF16ToF32(BF16FromF32(nan))));
  EXPECT_TRUE(std::signbit(BF16ToF32(BF16FromF32(FromBits(0xFF800001u)))));
  EXPECT_EQ(BF16ToF32(BF16FromF32(std::numeric_limits<float>::max())),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(BF16ToF32(BF16FromF32(-std::numeric_limits<float>::infinity())),
            -std::numeric_limits<float>::infinity());
}

TEST(BF16, RoundTripOfBF16ValuesIsExact) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    if ((bits & 0x7F80u) == 0x7F80u && (bits & 0x7Fu) != 0) continue;  // NaN
    BF16 value;
    value.bits = static_cast<uint16_t>(bits);
    EXPECT_EQ(BF16FromF32(BF16ToF32(value)).bits, value.bits);
  }
}

}  // namespace
}  // namespace kvring
