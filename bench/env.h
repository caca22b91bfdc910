// bench/env.h: the environment switches the benchmarks share. No vector code.
#ifndef KVRING_BENCH_ENV_H_
#define KVRING_BENCH_ENV_H_

#include <cstdlib>
#include <cstring>

namespace kvring_bench {

// Whether environment variable `name` is "1".
inline bool EnvFlag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// KVRING_BENCH_HUGE_PAGES=1: the benchmarks' kvring storage on transparent huge pages
// (RuntimeSpec::huge_pages); the twins' buffers stay as they are.
inline bool HugePages() { return EnvFlag("KVRING_BENCH_HUGE_PAGES"); }

}  // namespace kvring_bench

#endif  // KVRING_BENCH_ENV_H_
