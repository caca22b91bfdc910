// Prints the HWY_DISABLED_TARGETS value for a build on this machine: the x86 targets Highway
// compiles for dynamic dispatch that this machine cannot run (0 elsewhere). Run at configure
// time by cmake/KvringHostTargets.cmake.
#include <cstdint>
#include <cstdio>

#include "hwy/targets.h"

int main() {
  const int64_t compiled_x86 = HWY_AVX3_DL | HWY_AVX3 | HWY_AVX2 | HWY_SSE4 | HWY_SSSE3;
  const int64_t runnable = HWY_ARCH_X86 ? compiled_x86 & hwy::SupportedTargets() : 0;
  const int64_t unrunnable = HWY_ARCH_X86 ? compiled_x86 & ~runnable : 0;
  std::printf("%lld", static_cast<long long>(unrunnable));
  return 0;
}
