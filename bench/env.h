// bench/env.h: the environment switches the benchmarks share. No vector code.
#ifndef KVRING_BENCH_ENV_H_
#define KVRING_BENCH_ENV_H_

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kvring/detail/cpu_choice.h"

namespace kvring_bench {

// Whether environment variable `name` is "1".
inline bool EnvFlag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// KVRING_BENCH_HUGE_PAGES=1: the benchmarks' kvring storage on transparent huge pages
// (RuntimeSpec::huge_pages); the twins' buffers stay as they are.
inline bool HugePages() { return EnvFlag("KVRING_BENCH_HUGE_PAGES"); }

// KVRING_BENCH_PREFETCH=l1 or l2: where the attention kernels' prefetches put their lines on
// x86 whatever the CPU (detail::PrefetchChoice; unset: L2 on Intel, L1 on others), to time both
// choices on one machine. Call at the start of main; any other value is refused (returns false).
inline bool ApplyPrefetchSwitch() {
  const char* value = std::getenv("KVRING_BENCH_PREFETCH");
  if (value == nullptr) return true;
  if (std::strcmp(value, "l1") == 0) {
    kvring::detail::PrefetchChoice() = kvring::detail::PrefetchCache::kL1;
  } else if (std::strcmp(value, "l2") == 0) {
    kvring::detail::PrefetchChoice() = kvring::detail::PrefetchCache::kL2;
  } else {
    std::fprintf(stderr, "KVRING_BENCH_PREFETCH='%s': expected l1 or l2\n", value);
    return false;
  }
  std::fprintf(stderr, "KVRING_BENCH_PREFETCH=%s: attention prefetches into %s\n", value,
               value[1] == '1' ? "L1" : "L2 only");
  return true;
}

}  // namespace kvring_bench

#endif  // KVRING_BENCH_ENV_H_
