// tests/reference/attention_wrappers-inl.h: per-target wrappers around
// kvring::HWY_NAMESPACE::AttentionOnThreads (started threads or a ThreadPool) for the two layouts
// the attention tests and benchmarks run (FlashLayout, TiledLayout<16>), as plain functions
// HWY_EXPORT can name. Include after hwy/foreach_target.h; call kvring_testing::DispatchAttention
// (defined at the end, once per translation unit).

// Per-target include guard (the toggle pattern of kvring/ops/attention-inl.h).
#if defined(KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_
#undef KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_
#else
#define KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/ops/attention-inl.h"
#include "kvring/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace kvring_testing {
namespace HWY_NAMESPACE {

// Runs attention on `pool` when it is set, else on `num_threads` started threads (allocates
// their scratch); see AttentionOnThreads.
// Inline, so that two translation units of one program may both include this header.
template <class Layout>
inline void AttentionOn(const kvring::KVView<Layout>& kv, const kvring::AttentionBatch& batch,
                        const kvring::AttentionOptions& options, uint32_t num_threads,
                        kvring::ThreadPool* pool) {
  if (pool != nullptr) {
    kvring::HWY_NAMESPACE::AttentionOnThreads(kv, batch, options, *pool);
  } else {
    kvring::HWY_NAMESPACE::AttentionOnThreads(kv, batch, options,
                                              kvring::AttentionThreads{num_threads});
  }
}
inline void FlashAttention(const kvring::KVView<kvring::FlashLayout>& kv,
                           const kvring::AttentionBatch& batch,
                           const kvring::AttentionOptions& options, uint32_t num_threads,
                           kvring::ThreadPool* pool) {
  AttentionOn(kv, batch, options, num_threads, pool);
}
inline void TiledAttention(const kvring::KVView<kvring::TiledLayout<16>>& kv,
                           const kvring::AttentionBatch& batch,
                           const kvring::AttentionOptions& options, uint32_t num_threads,
                           kvring::ThreadPool* pool) {
  AttentionOn(kv, batch, options, num_threads, pool);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring_testing
HWY_AFTER_NAMESPACE();

// Once per translation unit, after the last target: the dispatch tables (HWY_EXPORT names
// them without a namespace, so they live here, static to the including file) and
// DispatchAttention (static too), which runs the wrapper of the target dispatch chooses (or
// that a test pins with hwy::SetSupportedTargetsForTest).
#if HWY_ONCE
namespace kvring_testing {
HWY_EXPORT(FlashAttention);
HWY_EXPORT(TiledAttention);

// Runs attention on `num_threads` started threads, or on `pool` when it is set.
[[maybe_unused]] static void DispatchAttention(const kvring::KVView<kvring::FlashLayout>& kv,
                                               const kvring::AttentionBatch& batch,
                                               const kvring::AttentionOptions& options,
                                               uint32_t num_threads,
                                               kvring::ThreadPool* pool = nullptr) {
  HWY_DYNAMIC_DISPATCH(FlashAttention)(kv, batch, options, num_threads, pool);
}
[[maybe_unused]] static void DispatchAttention(const kvring::KVView<kvring::TiledLayout<16>>& kv,
                                               const kvring::AttentionBatch& batch,
                                               const kvring::AttentionOptions& options,
                                               uint32_t num_threads,
                                               kvring::ThreadPool* pool = nullptr) {
  HWY_DYNAMIC_DISPATCH(TiledAttention)(kv, batch, options, num_threads, pool);
}
}  // namespace kvring_testing
#endif  // HWY_ONCE

#endif  // KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_
