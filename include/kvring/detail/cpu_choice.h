// kvring/detail/cpu_choice.h: switches of the kernels' run-time choices of CPU features
// within one Highway target, so that tests run on one machine the path another CPU of the
// same target takes. Internal to kvring's kernels.
#ifndef KVRING_DETAIL_CPU_CHOICE_H_
#define KVRING_DETAIL_CPU_CHOICE_H_

namespace kvring {
namespace detail {

// Whether the AVX2 kernels' integer-product mode (Products::kInt8) may sum on AVX-VNNI where
// the CPU has it: tests turn it off to run the f32 loops of AVX2 CPUs without it. Not
// thread-safe to change.
inline bool& AvxVnniAllowed() {
  static bool allowed = true;
  return allowed;
}

// Whether the AVX3_DL kernels' BF16-product mode (Products::kBF16) may run its 16-row blocks
// on AMX tiles where the CPU and the OS allow them: tests turn it off to run the vdpbf16ps
// blocks of CPUs without AMX. Not thread-safe to change.
inline bool& AmxAllowed() {
  static bool allowed = true;
  return allowed;
}

// Where the attention kernels' software prefetches put the lines they fetch ahead on x86:
// kAuto, L2 only (PREFETCHT1) on Intel CPUs, where that measured faster, and L1 as well on the
// others (docs/attention.md, "Kernels"); benchmarks force either to time both on one machine.
// Not thread-safe to change.
enum class PrefetchCache { kAuto, kL1, kL2 };
inline PrefetchCache& PrefetchChoice() {
  static PrefetchCache choice = PrefetchCache::kAuto;
  return choice;
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_DETAIL_CPU_CHOICE_H_
