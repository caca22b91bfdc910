// tests/reference/attention_wrappers-inl.h: per-target wrappers around
// kvring::HWY_NAMESPACE::Attention for the layouts the attention benchmark runs (FlashLayout,
// TiledLayout<16>; the tests call kvring::kernels' instead), as plain functions HWY_EXPORT can
// name, on the calling thread, a kvring::ThreadPool or threads started per call through a
// TaskRunner of the benchmark's own (what an engine with its own pool does). Include after
// hwy/foreach_target.h; call kvring_testing::DispatchAttention (defined at the end, once per
// translation unit).

// Per-target include guard (the toggle pattern of kvring/ops/attention-inl.h).
#if defined(KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_
#undef KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_
#else
#define KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_
#endif

#include <cstdint>
#include <cstdio>

#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/ops/attention-inl.h"
#include "kvring/status.h"
#include "kvring/task_runner.h"
#include "kvring/thread_pool.h"
#include "reference/started_threads.h"

HWY_BEFORE_NAMESPACE();
namespace kvring_testing {
namespace HWY_NAMESPACE {

// Runs attention on `pool` when it is set, else on `num_threads` threads started per call, in
// `workspace` (a fresh one when null). Returns the call's Result.
// Inline, so that two translation units of one program may both include this header.
template <class Layout>
inline kvring::Result AttentionOn(const kvring::KVView<Layout>& kv,
                                  const kvring::AttentionBatch& batch,
                                  const kvring::AttentionOptions& options, uint32_t num_threads,
                                  kvring::ThreadPool* pool, kvring::AttentionWorkspace* workspace) {
  kvring::AttentionWorkspace local;
  kvring::AttentionWorkspace& ws = workspace != nullptr ? *workspace : local;
  if (pool != nullptr) {
    return kvring::HWY_NAMESPACE::Attention(kv, batch, options, ws, pool->Runner());
  }
  if (num_threads > 1) {
    return kvring::HWY_NAMESPACE::Attention(kv, batch, options, ws, StartedThreads(&num_threads));
  }
  return kvring::HWY_NAMESPACE::Attention(kv, batch, options, ws);
}
inline kvring::Result FlashAttention(const kvring::KVView<kvring::FlashLayout>& kv,
                                     const kvring::AttentionBatch& batch,
                                     const kvring::AttentionOptions& options, uint32_t num_threads,
                                     kvring::ThreadPool* pool,
                                     kvring::AttentionWorkspace* workspace) {
  return AttentionOn(kv, batch, options, num_threads, pool, workspace);
}
inline kvring::Result TiledAttention(const kvring::KVView<kvring::TiledLayout<16>>& kv,
                                     const kvring::AttentionBatch& batch,
                                     const kvring::AttentionOptions& options, uint32_t num_threads,
                                     kvring::ThreadPool* pool,
                                     kvring::AttentionWorkspace* workspace) {
  return AttentionOn(kv, batch, options, num_threads, pool, workspace);
}
#ifdef KVRING_TESTING_TILED32
// TiledLayout<32> too, for a unit that defines KVRING_TESTING_TILED32 (the attention
// benchmark): another set of kernels, which the tests do not compile.
inline kvring::Result Tiled32Attention(const kvring::KVView<kvring::TiledLayout<32>>& kv,
                                       const kvring::AttentionBatch& batch,
                                       const kvring::AttentionOptions& options,
                                       uint32_t num_threads, kvring::ThreadPool* pool,
                                       kvring::AttentionWorkspace* workspace) {
  return AttentionOn(kv, batch, options, num_threads, pool, workspace);
}
#endif
#ifdef KVRING_TESTING_TILED64
// TiledLayout<64> too, for a unit that defines KVRING_TESTING_TILED64 (the attention
// benchmark): a third set of kernels, which the tests do not compile.
inline kvring::Result Tiled64Attention(const kvring::KVView<kvring::TiledLayout<64>>& kv,
                                       const kvring::AttentionBatch& batch,
                                       const kvring::AttentionOptions& options,
                                       uint32_t num_threads, kvring::ThreadPool* pool,
                                       kvring::AttentionWorkspace* workspace) {
  return AttentionOn(kv, batch, options, num_threads, pool, workspace);
}
#endif

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

// Runs attention on `num_threads` threads started per call, or on `pool` when it is set, in
// `workspace` when it is set; aborts if the call is refused (CheckedAttention returns it).
[[maybe_unused]] static kvring::Result CheckedAttention(
    const kvring::KVView<kvring::FlashLayout>& kv, const kvring::AttentionBatch& batch,
    const kvring::AttentionOptions& options, uint32_t num_threads,
    kvring::ThreadPool* pool = nullptr, kvring::AttentionWorkspace* workspace = nullptr) {
  return HWY_DYNAMIC_DISPATCH(FlashAttention)(kv, batch, options, num_threads, pool, workspace);
}
[[maybe_unused]] static kvring::Result CheckedAttention(
    const kvring::KVView<kvring::TiledLayout<16>>& kv, const kvring::AttentionBatch& batch,
    const kvring::AttentionOptions& options, uint32_t num_threads,
    kvring::ThreadPool* pool = nullptr, kvring::AttentionWorkspace* workspace = nullptr) {
  return HWY_DYNAMIC_DISPATCH(TiledAttention)(kv, batch, options, num_threads, pool, workspace);
}
#ifdef KVRING_TESTING_TILED32
HWY_EXPORT(Tiled32Attention);
[[maybe_unused]] static kvring::Result CheckedAttention(
    const kvring::KVView<kvring::TiledLayout<32>>& kv, const kvring::AttentionBatch& batch,
    const kvring::AttentionOptions& options, uint32_t num_threads,
    kvring::ThreadPool* pool = nullptr, kvring::AttentionWorkspace* workspace = nullptr) {
  return HWY_DYNAMIC_DISPATCH(Tiled32Attention)(kv, batch, options, num_threads, pool, workspace);
}
#endif
#ifdef KVRING_TESTING_TILED64
HWY_EXPORT(Tiled64Attention);
[[maybe_unused]] static kvring::Result CheckedAttention(
    const kvring::KVView<kvring::TiledLayout<64>>& kv, const kvring::AttentionBatch& batch,
    const kvring::AttentionOptions& options, uint32_t num_threads,
    kvring::ThreadPool* pool = nullptr, kvring::AttentionWorkspace* workspace = nullptr) {
  return HWY_DYNAMIC_DISPATCH(Tiled64Attention)(kv, batch, options, num_threads, pool, workspace);
}
#endif
template <class Layout>
[[maybe_unused]] static void DispatchAttention(const kvring::KVView<Layout>& kv,
                                               const kvring::AttentionBatch& batch,
                                               const kvring::AttentionOptions& options,
                                               uint32_t num_threads,
                                               kvring::ThreadPool* pool = nullptr,
                                               kvring::AttentionWorkspace* workspace = nullptr) {
  ExpectAttended(CheckedAttention(kv, batch, options, num_threads, pool, workspace));
}
}  // namespace kvring_testing
#endif  // HWY_ONCE

#endif  // KVRING_TESTS_REFERENCE_ATTENTION_WRAPPERS_INL_H_
