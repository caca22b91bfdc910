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
// V accumulation), attention_item-inl.h (the item runner), attention_item_paths-inl.h (an item
// by format and product path) and attention_merge-inl.h (the merges).
#include "kvring/ops/attention_item_paths-inl.h"

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

// Runs the items, then the merges, of every entry of `many` through `runner`: one list of
// work items for the whole call, each running exactly as in a call of its entry alone.
// `partial`: many.PartialFloats() floats; `scratch`: many.ScratchFloats() per thread.
template <class Layout>
HWY_NOINLINE void RunAttentionMany(const AttentionEntry<Layout>* entries,
                                   const AttentionOptions& options, const AttentionManyWork& many,
                                   float* HWY_RESTRICT partial, float* HWY_RESTRICT scratch,
                                   const TaskRunner& runner) {
  const size_t scratch_floats = static_cast<size_t>(many.ScratchFloats());
  runner.Run(many.NumItems(), [&](uint64_t item, uint32_t thread) {
    KVRING_DASSERT(thread < runner.NumThreads());
    uint64_t local;
    const uint64_t e = many.ItemEntry(item, &local);
    RunAttentionItem(entries[e].kv, entries[e].batch, options, many.Plan(e), local,
                     scratch + thread * scratch_floats, partial + many.PartialBegin(e));
  });
  runner.Run(many.NumMerges(), [&](uint64_t merge, uint32_t thread) {
    KVRING_DASSERT(thread < runner.NumThreads());
    uint64_t local;
    const uint64_t e = many.MergeEntry(merge, &local);
    MergeAttention(entries[e].batch, options, many.Plan(e), local,
                   scratch + thread * scratch_floats, partial + many.PartialBegin(e));
  });
}

}  // namespace attention_internal

// Computes attention of `batch` over `kv` with `options`, its work items run by `runner` (the
// calling thread, ThreadPool::Runner(), or the engine's own pool) in `workspace`, which grows
// when this call needs more than it holds. Checks the arguments first (CheckAttention) and
// returns its refusal without writing anything. Otherwise returns kOk, or kOutOfMemory if the
// workspace could not grow. Allocates only when the workspace grows; the output is
// bit-identical for every runner and thread count.
// The entry points are plain inline, not HWY_INLINE (always inlined): static dispatch calls
// them from code outside Highway's target attributes, which may not inline a function of a
// target with more (aarch64's NEON adds +crypto to the baseline).
template <class Layout>
inline Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                        const AttentionOptions& options, AttentionWorkspace& workspace,
                        const TaskRunner& runner) {
  const Result check = CheckAttention(kv, batch, options);
  if (!check.ok()) return check;
#if defined(KVRING_ATTENTION_NO_INT8)
  if (IsInt8(kv.format)) {
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
inline Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                        const AttentionOptions& options, AttentionWorkspace& workspace) {
  return Attention(kv, batch, options, workspace, TaskRunner::Inline());
}

// As above, in a workspace of its own: allocates it on every call. For a loop of calls, keep an
// AttentionWorkspace and pass it.
template <class Layout>
inline Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                        const AttentionOptions& options) {
  AttentionWorkspace workspace;
  return Attention(kv, batch, options, workspace, TaskRunner::Inline());
}

// Computes attention for `num_entries` sequences in one call: entry e's queries over its view
// (for example one decode query for each of 64 sequences of a KVPool, each at its own
// position), with one set of options. Plans every entry as a call of it alone would
// (AttentionWork::Plan), runs all their work items as one list on `runner` (so that short
// and long sequences share the threads), and gives each entry's output bit-identical to
// Attention(entries[e].kv, entries[e].batch, options, ...). Checks every entry first
// (CheckAttention) and returns the first refusal, naming its entry (Result::Entry(), and
// "entries[e]: " in the message), without writing anything; kOutOfMemory if the workspace
// could not grow. Allocates only when the workspace grows: never once it holds
// AttentionWorkspaceFloats of a bound these entries keep.
template <class Layout>
inline Result AttentionMany(const AttentionEntry<Layout>* entries, size_t num_entries,
                            const AttentionOptions& options, AttentionWorkspace& workspace,
                            const TaskRunner& runner) {
  if (entries == nullptr && num_entries != 0) {
    return Result::Refused(Status::kBadArgument, "entries: null with %llu entries",
                           uint64_t{num_entries});
  }
  for (size_t e = 0; e < num_entries; ++e) {
    const Result check = CheckAttention(entries[e].kv, entries[e].batch, options);
    if (!check.ok()) return check.OfEntry(e);
#if defined(KVRING_ATTENTION_NO_INT8)
    if (IsInt8(entries[e].kv.format)) {
      return Result::Refused(Status::kBadArgument,
                             "entries[%llu].kv.format: int8, but these kernels were compiled "
                             "without int8 (KVRING_ATTENTION_NO_INT8)",
                             uint64_t{e});
    }
#endif
  }
  if (num_entries == 0) return Result();
  // The header first (plans and offsets), to learn the items, partials and scratch.
  const uint64_t header = AttentionManyWork::HeaderFloats(num_entries);
  if (!workspace.Reserve(header)) {
    return Result::Refused(Status::kOutOfMemory,
                           "workspace: %llu floats of plans could not be allocated", header);
  }
  AttentionManyWork many = AttentionManyWork::Init(entries, num_entries, options, workspace.Data());
  if (many.NumItems() == 0) return Result();
  const uint32_t num_threads = many.NumItems() == 1 ? 1 : runner.NumThreads();
  const uint64_t floats = header + many.PartialFloats() + many.ScratchFloats() * num_threads;
  if (floats > workspace.NumFloats()) {
    // Grow, then plan again in the new buffer (growing keeps nothing).
    if (!workspace.Reserve(floats)) {
      return Result::Refused(Status::kOutOfMemory,
                             "workspace: %llu floats for %llu entries could not be allocated",
                             floats, uint64_t{num_entries});
    }
    many = AttentionManyWork::Init(entries, num_entries, options, workspace.Data());
  }
  float* partial = workspace.Data() + header;
  attention_internal::RunAttentionMany(entries, options, many, partial,
                                       partial + many.PartialFloats(), runner);
  return Result();
}

// As above, on the calling thread.
template <class Layout>
inline Result AttentionMany(const AttentionEntry<Layout>* entries, size_t num_entries,
                            const AttentionOptions& options, AttentionWorkspace& workspace) {
  return AttentionMany(entries, num_entries, options, workspace, TaskRunner::Inline());
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_INL_H_
