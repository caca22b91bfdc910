// tests/reference/best_target_share.h: which cases of a test that runs on the best target only
// (the thread-count test; the layer shapes through kvring::kernels, which dispatches the best)
// run in this process. The aarch64 preset's runs on emulated CPUs of three vector lengths, each
// with a best target of its own, set KVRING_BEST_TARGET_SHARE to 0/3, 1/3 and 2/3: a run takes
// the cases whose index is i mod n, so that together the runs check every case, each on one of
// their best targets. Unset: every case.
#ifndef KVRING_TESTS_REFERENCE_BEST_TARGET_SHARE_H_
#define KVRING_TESTS_REFERENCE_BEST_TARGET_SHARE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace kvring {
namespace testing {

// Whether case `index` runs here. A value that is not "i/n" with i < n fails the calling test
// and runs every case.
inline bool BestTargetCaseRunsHere(uint32_t index) {
  const char* share = std::getenv("KVRING_BEST_TARGET_SHARE");
  if (share == nullptr) return true;
  unsigned part = 0, parts = 0;
  char extra = 0;
  const bool valid =
      std::sscanf(share, "%u/%u%c", &part, &parts, &extra) == 2 && parts > 0 && part < parts;
  EXPECT_TRUE(valid) << "KVRING_BEST_TARGET_SHARE='" << share << "' is not i/n with i < n";
  return !valid || index % parts == part;
}

}  // namespace testing
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_BEST_TARGET_SHARE_H_
