// kvring/ops/attention-inl.h: Highway kernels for exact attention over a KVView, flash
// (FlashLayout) and tiled (TiledLayout) backends, decode and prefill, with the checked entry
// points (Attention). Per-target code: include and call (static dispatch), or use dynamic
// dispatch through kvring/dispatch.h (kvring/ops/dispatch_unit.h or kvring::kernels).
//
// Numerics (docs/attention.md): q . k in f32 from BF16 K, online softmax in f32, V
// accumulated in f32. Every item walks position-aligned tiles of Layout::kTileSlots positions
// in chronological order with a fixed in-tile order, and masks invisible lanes by selection
// (scores to -inf, invisible V rows never read into an accumulator), so ring and flat storage
// of the same history give bit-identical outputs (property 1, docs/design.md).

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_INL_H_
#undef KVRING_OPS_ATTENTION_INL_H_
#else
#define KVRING_OPS_ATTENTION_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/kv_view.h"
#include "kvring/status.h"
#include "kvring/task_runner.h"

// After highway.h: the kernels, in parts by concern (each includes the parts it uses):
// attention_scores-inl.h (tile scoring), attention_softmax-inl.h (the online-softmax state and
// V accumulation), attention_item-inl.h (the item runner and the merges).
#include "kvring/ops/attention_item-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {

namespace attention_internal {

// Runs the items, then the merges, of `work` (the plan of attending `batch` over `kv` with
// `options`) through `runner`, in `workspace`: work.PartialFloats() floats of partial states,
// then work.ScratchFloats() per thread. Not inlined: every entry point of one layout shares
// this one copy of the kernels (a dispatch unit compiles them once per target and layout).
template <class Layout>
HWY_NOINLINE void RunAttentionWork(const KVView<Layout>& kv, const AttentionBatch& batch,
                                   const AttentionOptions& options, const AttentionWork& work,
                                   float* HWY_RESTRICT workspace, const TaskRunner& runner) {
  const size_t scratch_floats = static_cast<size_t>(work.ScratchFloats());
  float* partial = workspace;
  float* scratch = workspace + work.PartialFloats();
  runner.Run(work.NumItems(), [&](uint64_t item, uint32_t thread) {
    KVRING_DASSERT(thread < runner.NumThreads());
    RunAttentionItem(kv, batch, options, work, item, scratch + thread * scratch_floats, partial);
  });
  runner.Run(work.NumMerges(), [&](uint64_t merge, uint32_t thread) {
    KVRING_DASSERT(thread < runner.NumThreads());
    MergeAttention(batch, options, work, merge, scratch + thread * scratch_floats, partial);
  });
}

}  // namespace attention_internal

// Computes attention of `batch` over `kv` with `options`, its work items run by `runner` (the
// calling thread, ThreadPool::Runner(), or the engine's own pool) in `workspace`, which grows
// when this call needs more than it holds. Checks the arguments first (CheckAttention) and
// returns its refusal without writing anything. Otherwise returns kOk, or kOutOfMemory if the
// workspace could not grow. Allocates only when the workspace grows; the output is
// bit-identical for every runner and thread count.
template <class Layout>
HWY_INLINE Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                            const AttentionOptions& options, AttentionWorkspace& workspace,
                            const TaskRunner& runner) {
  const Result check = CheckAttention(kv, batch, options);
  if (!check.ok()) return check;
#if defined(KVRING_ATTENTION_NO_INT8)
  if (kv.format == Format::kInt8) {
    return Result::Refused(Status::kBadArgument,
                           "view.format: int8, but these kernels were compiled without int8 "
                           "(KVRING_ATTENTION_NO_INT8)");
  }
#endif
  const AttentionWork work = AttentionWork::Plan(kv, batch, options);
  if (work.NumItems() == 0) return Result();
  // A call of one item runs on the calling thread (TaskRunner::Run), which needs one scratch.
  const uint32_t num_threads = work.NumItems() == 1 ? 1 : runner.NumThreads();
  const uint64_t floats = work.WorkspaceFloats(num_threads);
  if (!workspace.Reserve(floats)) {
    return Result::Refused(Status::kOutOfMemory,
                           "workspace: %llu floats for %llu threads could not be allocated", floats,
                           num_threads);
  }
  attention_internal::RunAttentionWork(kv, batch, options, work, workspace.Data(), runner);
  return Result();
}

// As above, on the calling thread.
template <class Layout>
HWY_INLINE Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                            const AttentionOptions& options, AttentionWorkspace& workspace) {
  return Attention(kv, batch, options, workspace, TaskRunner::Inline());
}

// As above, in a workspace of its own: allocates it on every call. For a loop of calls, keep an
// AttentionWorkspace and pass it.
template <class Layout>
HWY_INLINE Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                            const AttentionOptions& options) {
  AttentionWorkspace workspace;
  return Attention(kv, batch, options, workspace, TaskRunner::Inline());
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_INL_H_
