// kvring/storage/pool_sequence.h: one sequence of a KVPool: its rings, the end of each paged
// owner, the block table its paged owners share and its step; where an owner's end is, how
// far it may roll back, and clearing and rolling back all of it at once. The pool decides
// what is allowed (budget, ids); this is what one sequence holds.
#ifndef KVRING_STORAGE_POOL_SEQUENCE_H_
#define KVRING_STORAGE_POOL_SEQUENCE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvring/base.h"
#include "kvring/index/block_table.h"
#include "kvring/status.h"
#include "kvring/storage/block_store.h"
#include "kvring/storage/layer_storage.h"
#include "kvring/storage/layer_table.h"
#include "kvring/storage/step_rule.h"

namespace kvring {
namespace detail {

template <typename Layout>
struct PoolSequence {
  uint64_t batch = 0;                       // the batch its rings hold
  uint64_t ring_bytes = 0;                  // what its rings take of the budget
  std::vector<LayerStorage<Layout>> rings;  // per ring owner (LayerTable::RingOwners() order)
  std::vector<uint64_t> paged_end;          // per paged owner
  BlockTable blocks;                        // shared by every paged owner
  StepRule step;

  // Returns the end of the owner `entry` describes.
  uint64_t OwnerEnd(const LayerEntry& entry) const {
    return entry.residence == Residence::kPaged ? paged_end[entry.storage]
                                                : rings[entry.storage].Index().EndPos();
  }
  // Returns the owners at the lowest and highest ends. O(layers).
  StepEnds Ends(const LayerTable& table) const {
    return ScanStep(table.Owners(), [&](size_t owner) { return OwnerEnd(table.Entry(owner)); });
  }
  // Returns the position every owner has reached. O(1) between steps, O(layers) inside one.
  uint64_t EndPos(const LayerTable& table) const {
    return step.InStep() ? Ends(table).low_end : step.HighEnd();
  }
  // Returns kWrongPosition naming the owners behind and ahead, for a call refused in a step.
  Result MidStep(const LayerTable& table) const {
    return StepRule::MidStep(Ends(table),
                             "layers[%llu] is at %llu and layers[%llu] at %llu; append every "
                             "owning layer to the same position first");
  }

  // Returns the most newest positions a rollback may discard now, between steps: the
  // `planned` headroom and what is held (paged owners hold every position), and each ring's
  // limit; sets *bound to the layer that sets it (the first paged owner, else the first ring,
  // unless a ring is lower).
  uint64_t RollbackLimit(uint64_t planned, const LayerTable& table, size_t* bound) const {
    uint64_t limit = std::min(step.HighEnd(), planned);
    const std::vector<size_t>& ring_layers = table.RingOwners();
    *bound = table.FullOwners().empty() ? ring_layers.front() : table.FullOwners().front();
    for (size_t i = 0; i < rings.size(); ++i) {
      const uint64_t ring_limit = rings[i].Index().RollbackLimit();
      if (ring_limit < limit) {
        limit = ring_limit;
        *bound = ring_layers[i];
      }
    }
    return limit;
  }
  // Discards the newest `num_tokens` positions of every owner (RollbackLimit allowed them)
  // and releases the blocks the table no longer reaches.
  void Rollback(uint64_t num_tokens, const LayerTable& table, BlockStore<Layout>* store) {
    const uint64_t end = step.HighEnd() - num_tokens;
    for (size_t i = 0; i < rings.size(); ++i) {
      const Result result = rings[i].Rollback(num_tokens, table.RingOwners()[i]);
      KVRING_DASSERT(result.ok());
      (void)result;
    }
    for (uint64_t& paged : paged_end) paged -= num_tokens;
    store->ReleaseFrom(&blocks, blocks.EntriesFor(end));
    step.Reset(end);
  }
  // Forgets every position, keeping the rings and releasing every block.
  void Clear(BlockStore<Layout>* store) {
    for (LayerStorage<Layout>& ring : rings) ring.Clear();
    std::fill(paged_end.begin(), paged_end.end(), 0);
    store->ReleaseFrom(&blocks, 0);
    step.Reset(0);
  }
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_POOL_SEQUENCE_H_
