// tests/reference/random_test_scale.h: how much of a long random-operation test to run.
// KVRING_RANDOM_TEST_DIVISOR=n (the sanitizer presets set it: every step is many times slower
// there) runs 1/n of a test's steps, never fewer than the test's floor; unset, all of them.
#ifndef KVRING_TESTS_REFERENCE_RANDOM_TEST_SCALE_H_
#define KVRING_TESTS_REFERENCE_RANDOM_TEST_SCALE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace kvring {
namespace testing {

// Returns `steps` divided by KVRING_RANDOM_TEST_DIVISOR, at least `floor` (and never more than
// `steps`). A divisor that is not a positive number fails the calling test and runs every step.
inline uint64_t RandomTestSteps(uint64_t steps, uint64_t floor) {
  const char* divisor = std::getenv("KVRING_RANDOM_TEST_DIVISOR");
  if (divisor == nullptr) return steps;
  char* end = nullptr;
  const uint64_t n = std::strtoull(divisor, &end, 10);
  const bool valid = n > 0 && end != divisor && *end == '\0';
  EXPECT_TRUE(valid) << "KVRING_RANDOM_TEST_DIVISOR='" << divisor << "' is not a positive number";
  if (!valid) return steps;
  return std::min(steps, std::max(floor, steps / n));
}

}  // namespace testing
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_RANDOM_TEST_SCALE_H_
