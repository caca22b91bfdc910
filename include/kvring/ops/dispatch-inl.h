// kvring/ops/dispatch-inl.h: the per-target functions behind kvring/dispatch.h, one per layout:
// plain functions (HWY_EXPORT cannot name templates or overloads) that call the per-target
// Attention. Included once per target by kvring/ops/dispatch_unit.h; not for direct use.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_DISPATCH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_DISPATCH_INL_H_
#undef KVRING_OPS_DISPATCH_INL_H_
#else
#define KVRING_OPS_DISPATCH_INL_H_
#endif

#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/ops/attention-inl.h"
#include "kvring/status.h"
#include "kvring/task_runner.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {

#define KVRING_DISPATCH_TARGET_FUNCTION(name, Layout)                                       \
  Result name(const KVView<Layout>& kv, const AttentionBatch& batch,                        \
              const AttentionOptions& options, AttentionWorkspace& workspace,               \
              const TaskRunner& runner) {                                                   \
    return ::kvring::HWY_NAMESPACE::Attention(kv, batch, options, workspace, runner);       \
  }                                                                                         \
  Result name##Many(const AttentionEntry<Layout>* entries, size_t num_entries,              \
                    const AttentionOptions& options, AttentionWorkspace& workspace,         \
                    const TaskRunner& runner) {                                             \
    return ::kvring::HWY_NAMESPACE::AttentionMany(entries, num_entries, options, workspace, \
                                                  runner);                                  \
  }

KVRING_DISPATCH_TARGET_FUNCTION(DispatchFlash, FlashLayout)
KVRING_DISPATCH_TARGET_FUNCTION(DispatchTiled16, TiledLayout<16>)
#ifdef KVRING_DISPATCH_TILED_8
KVRING_DISPATCH_TARGET_FUNCTION(DispatchTiled8, TiledLayout<8>)
#endif
#ifdef KVRING_DISPATCH_TILED_32
KVRING_DISPATCH_TARGET_FUNCTION(DispatchTiled32, TiledLayout<32>)
#endif
#ifdef KVRING_DISPATCH_TILED_64
KVRING_DISPATCH_TARGET_FUNCTION(DispatchTiled64, TiledLayout<64>)
#endif
#undef KVRING_DISPATCH_TARGET_FUNCTION

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_DISPATCH_INL_H_
