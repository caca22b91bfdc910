// kvring/ops/dispatch_unit.h: the definitions of kvring/dispatch.h. Include it in exactly one
// translation unit of a program, before any other Highway header of that unit; that one line
// is the whole unit:
//   #include "kvring/ops/dispatch_unit.h"
// It compiles kvring's kernels once per Highway target (foreach_target), and the functions of
// kvring/dispatch.h call the best one the CPU supports. Choices, as macros defined before the
// include (or on the command line):
// - KVRING_DISPATCH_TILED_8 / _32 / _64 add those tile heights to FlashLayout and
//   TiledLayout<16>, which are always compiled (each layout costs about as much as the first).
// - KVRING_DISPATCH_AVX3_DL also compiles Highway's AVX3_DL target (AVX-512 with VNNI/BF16),
//   which Highway 1.0.3 compiles only when HWY_WANT_AVX3_DL is defined: its kernels run the
//   BF16-product mode (Products::kBF16) on vdpbf16ps where the CPU has AVX512-BF16, and the
//   integer-product mode (Products::kInt8) on vpdpbusd. Without it such CPUs run the AVX3
//   target, whose BF16-product mode widens and whose integer-product mode runs f32 loops (the
//   exact mode is the same instructions on both). kvring::kernels defines it
//   (KVRING_KERNELS_AVX3_DL).
// - KVRING_DISPATCH_SSSE3 also compiles the SSSE3 target; without it, CPUs without SSE4.1
//   (before 2008) run the SCALAR target. With both left out the unit compiles in 0.61 of the
//   time with every target (docs/attention.md). A user's own HWY_DISABLED_TARGETS replaces
//   this choice.
// - KVRING_ATTENTION_NO_INT8 compiles the BF16 kernels alone (int8 views are then refused):
//   the int8 format's kernels double the unit's compile time.
// Linking the CMake target kvring::kernels gives the same without compiling this file.
#ifndef KVRING_OPS_DISPATCH_UNIT_H_
#define KVRING_OPS_DISPATCH_UNIT_H_

#if defined(KVRING_DISPATCH_AVX3_DL) && !defined(HWY_WANT_AVX3_DL)
#define HWY_WANT_AVX3_DL
#endif
#if !defined(KVRING_DISPATCH_SSSE3) && !defined(HWY_DISABLED_TARGETS)
#define HWY_DISABLED_TARGETS HWY_SSSE3
#endif

// foreach_target re-includes kvring's own per-target file (on every user's include path, as
// kvring's headers are), not the user's translation unit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvring/ops/dispatch-inl.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/targets.h"
#include "kvring/dispatch.h"
#include "kvring/ops/dispatch-inl.h"

#if HWY_ONCE
namespace kvring {

// The tables of every target's function, static to this translation unit.
HWY_EXPORT(DispatchFlash);
HWY_EXPORT(DispatchTiled16);

#define KVRING_DISPATCH_DEFINE(Layout, name)                                                   \
  HWY_EXPORT(name##Many);                                                                      \
  Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,                      \
                   const AttentionOptions& options, AttentionWorkspace& workspace,             \
                   const TaskRunner& runner) {                                                 \
    return HWY_DYNAMIC_DISPATCH(name)(kv, batch, options, workspace, runner);                  \
  }                                                                                            \
  Result AttentionMany(const AttentionEntry<Layout>* entries, size_t num_entries,              \
                       const AttentionOptions& options, AttentionWorkspace& workspace,         \
                       const TaskRunner& runner) {                                             \
    return HWY_DYNAMIC_DISPATCH(name##Many)(entries, num_entries, options, workspace, runner); \
  }

KVRING_DISPATCH_DEFINE(FlashLayout, DispatchFlash)
KVRING_DISPATCH_DEFINE(TiledLayout<16>, DispatchTiled16)
#ifdef KVRING_DISPATCH_TILED_8
HWY_EXPORT(DispatchTiled8);
KVRING_DISPATCH_DEFINE(TiledLayout<8>, DispatchTiled8)
#endif
#ifdef KVRING_DISPATCH_TILED_32
HWY_EXPORT(DispatchTiled32);
KVRING_DISPATCH_DEFINE(TiledLayout<32>, DispatchTiled32)
#endif
#ifdef KVRING_DISPATCH_TILED_64
HWY_EXPORT(DispatchTiled64);
KVRING_DISPATCH_DEFINE(TiledLayout<64>, DispatchTiled64)
#endif
#undef KVRING_DISPATCH_DEFINE

const char* DispatchedTargetName() {
  return hwy::TargetName(hwy::SupportedAndGeneratedTargets()[0]);
}

int64_t CompiledTargets() { return HWY_TARGETS; }

}  // namespace kvring
#endif  // HWY_ONCE

#endif  // KVRING_OPS_DISPATCH_UNIT_H_
