// kvring/detail/checked_math.h: overflow-checked and saturating uint64_t arithmetic for the
// planner's byte counts. Internal; engines use LayerPlan's results instead.
#ifndef KVRING_DETAIL_CHECKED_MATH_H_
#define KVRING_DETAIL_CHECKED_MATH_H_

#include <cstdint>
#include <limits>

namespace kvring {
namespace detail {

inline constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

// Sets *out = a * b and returns true, or returns false on overflow (*out unspecified).
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// Sets *out = a + b and returns true, or returns false on overflow.
inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

// Returns a + b, or kMaxU64 on overflow.
inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  uint64_t sum;
  return CheckedAdd(a, b, &sum) ? sum : kMaxU64;
}

// Returns a * b, or kMaxU64 on overflow.
inline uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t product;
  return CheckedMul(a, b, &product) ? product : kMaxU64;
}

// Sets *out to value rounded up to a multiple of `alignment` (>= 1); false on overflow.
inline bool CheckedRoundUp(uint64_t value, uint64_t alignment, uint64_t* out) {
  const uint64_t remainder = value % alignment;
  if (remainder == 0) {
    *out = value;
    return true;
  }
  return CheckedAdd(value, alignment - remainder, out);
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_DETAIL_CHECKED_MATH_H_
