// kvring/dispatch.h: attention by dynamic dispatch, as plain functions: each call runs the
// best kernel the CPU supports among the compiled Highway targets. Declarations only, with no
// vector code; the definitions come from one translation unit of the program that includes
// kvring/ops/dispatch_unit.h, or from linking the compiled CMake target kvring::kernels (one
// or the other, not both). For static dispatch, call kvring/ops/attention-inl.h directly.
#ifndef KVRING_DISPATCH_H_
#define KVRING_DISPATCH_H_

#include <cstddef>
#include <cstdint>

#include "kvring/attention.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/status.h"
#include "kvring/task_runner.h"

namespace kvring {

// Computes attention of `batch` over `kv` with `options` on the best compiled target, its
// work items run by `runner` in `workspace`: the contract of the per-target Attention of
// kvring/ops/attention-inl.h (checks every argument first and returns the refusal, changing
// nothing; allocates only when the workspace grows; bit-identical for every runner).
// The dispatch unit defines FlashLayout and TiledLayout<16> always, and TiledLayout<8>, <32>
// and <64> when built with KVRING_DISPATCH_TILED_8, _32, _64 (kvring::kernels: the CMake
// option KVRING_KERNELS_TILE_ROWS); calling one it lacks fails to link, naming it.
Result Attention(const KVView<FlashLayout>& kv, const AttentionBatch& batch,
                 const AttentionOptions& options, AttentionWorkspace& workspace,
                 const TaskRunner& runner);
Result Attention(const KVView<TiledLayout<8>>& kv, const AttentionBatch& batch,
                 const AttentionOptions& options, AttentionWorkspace& workspace,
                 const TaskRunner& runner);
Result Attention(const KVView<TiledLayout<16>>& kv, const AttentionBatch& batch,
                 const AttentionOptions& options, AttentionWorkspace& workspace,
                 const TaskRunner& runner);
Result Attention(const KVView<TiledLayout<32>>& kv, const AttentionBatch& batch,
                 const AttentionOptions& options, AttentionWorkspace& workspace,
                 const TaskRunner& runner);
Result Attention(const KVView<TiledLayout<64>>& kv, const AttentionBatch& batch,
                 const AttentionOptions& options, AttentionWorkspace& workspace,
                 const TaskRunner& runner);

// Computes attention for many sequences in one call, on the best compiled target: the
// contract of the per-target AttentionMany of kvring/ops/attention-inl.h (each entry's output
// bit-identical to a call of it alone; the first refused entry's refusal, changing nothing).
// Defined for the layouts Attention is.
Result AttentionMany(const AttentionEntry<FlashLayout>* entries, size_t num_entries,
                     const AttentionOptions& options, AttentionWorkspace& workspace,
                     const TaskRunner& runner);
Result AttentionMany(const AttentionEntry<TiledLayout<8>>* entries, size_t num_entries,
                     const AttentionOptions& options, AttentionWorkspace& workspace,
                     const TaskRunner& runner);
Result AttentionMany(const AttentionEntry<TiledLayout<16>>* entries, size_t num_entries,
                     const AttentionOptions& options, AttentionWorkspace& workspace,
                     const TaskRunner& runner);
Result AttentionMany(const AttentionEntry<TiledLayout<32>>* entries, size_t num_entries,
                     const AttentionOptions& options, AttentionWorkspace& workspace,
                     const TaskRunner& runner);
Result AttentionMany(const AttentionEntry<TiledLayout<64>>* entries, size_t num_entries,
                     const AttentionOptions& options, AttentionWorkspace& workspace,
                     const TaskRunner& runner);

// As above, on the calling thread.
template <typename Layout>
Result Attention(const KVView<Layout>& kv, const AttentionBatch& batch,
                 const AttentionOptions& options, AttentionWorkspace& workspace) {
  return Attention(kv, batch, options, workspace, TaskRunner::Inline());
}
template <typename Layout>
Result AttentionMany(const AttentionEntry<Layout>* entries, size_t num_entries,
                     const AttentionOptions& options, AttentionWorkspace& workspace) {
  return AttentionMany(entries, num_entries, options, workspace, TaskRunner::Inline());
}

// Returns the name of the Highway target the calls above run on ("AVX3_DL", "AVX2", ...).
const char* DispatchedTargetName();

// Returns the Highway targets the dispatch unit compiled, as a mask of HWY_* target bits
// (hwy::TargetName names each): the calls above run the best of them the CPU supports.
int64_t CompiledTargets();

}  // namespace kvring

#endif  // KVRING_DISPATCH_H_
