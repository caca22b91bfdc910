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

// KVRING_BENCH_PREFETCH_L1=1: the attention kernels prefetch into L1 on Intel CPUs too
// (detail::PrefetchToL2Allowed), to time both choices on one machine. Call at the start of main.
inline void ApplyPrefetchSwitch() {
  if (!EnvFlag("KVRING_BENCH_PREFETCH_L1")) return;
  kvring::detail::PrefetchToL2Allowed() = false;
  std::fprintf(stderr, "KVRING_BENCH_PREFETCH_L1=1: attention prefetches into L1\n");
}

}  // namespace kvring_bench

#endif  // KVRING_BENCH_ENV_H_
