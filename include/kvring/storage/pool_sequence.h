// kvring/storage/pool_sequence.h: one sequence of a KVPool: its rings, the end of each paged
// owner, the block table its paged owners share, its recurrent states and its step; where an
// owner's end is, how far it may roll back, and clearing and rolling back all of it at once. The
// pool decides what is allowed (budget, ids); this is what one sequence holds.
#ifndef KVRING_STORAGE_POOL_SEQUENCE_H_
#define KVRING_STORAGE_POOL_SEQUENCE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvring/base.h"
#include "kvring/index/block_table.h"
#include "kvring/kv_view.h"
#include "kvring/status.h"
#include "kvring/storage/block_store.h"
#include "kvring/storage/layer_rows.h"
#include "kvring/storage/layer_storage.h"
#include "kvring/storage/layer_table.h"
#include "kvring/storage/recurrent_states.h"
#include "kvring/storage/ring_set.h"
#include "kvring/storage/step_rule.h"
#include "kvring/visibility.h"

namespace kvring {
namespace detail {

template <typename Layout>
struct PoolSequence {
  uint64_t batch = 0;                       // the batch its rings hold
  uint64_t ring_bytes = 0;                  // what its rings take of the budget
  std::vector<LayerStorage<Layout>> rings;  // per ring owner (LayerTable::RingOwners() order)
  std::vector<uint64_t> paged_end;          // per paged owner
  BlockTable blocks;                        // shared by every paged owner
  RecurrentStates states;                   // of the layers with a recurrent state
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
  // Makes `fork` hold what this holds: a copy of the rings, of the recurrent states and of
  // the block table (whose blocks the caller then shares). kOutOfMemory when a copy cannot
  // allocate.
  Result ForkInto(PoolSequence* fork) const {
    const Result copied = RingSet<Layout>::Copied(rings, &fork->rings);
    if (!copied.ok()) return copied;
    if (!states.CopyTo(&fork->states)) {
      return Result::Refused(Status::kOutOfMemory,
                             "Fork: the recurrent states' copy (%llu bytes) could not allocate",
                             states.PlannedBytes());
    }
    fork->batch = batch;
    fork->ring_bytes = ring_bytes;
    fork->paged_end = paged_end;
    fork->blocks = blocks;
    fork->step = step;
    return Status::kOk;
  }
  // Returns the view of the owner `entry` describes under `visibility` (unstamped).
  KVView<Layout> View(const LayerEntry& entry, const Visibility& visibility,
                      const BlockStore<Layout>& store) const {
    if (entry.residence != Residence::kPaged) return rings[entry.storage].View(visibility);
    KVView<Layout> view;
    store.FillView(entry.storage, blocks, paged_end[entry.storage], &view);
    view.visibility = visibility;
    return view;
  }
  // Reads `pos` of the owner `entry` describes (`layer` names it in a refusal).
  Result Read(const LayerEntry& entry, uint64_t layer, uint64_t pos, const RowRead& read,
              const BlockStore<Layout>& store) const {
    if (entry.residence != Residence::kPaged) return rings[entry.storage].Read(pos, read, layer);
    const Result check = CheckRowRead(store.Spec(entry.storage).format, read, pos, 0,
                                      paged_end[entry.storage], layer);
    if (!check.ok()) return check;
    uint64_t slot = 0;
    store.RowsOf(entry.storage, blocks, pos, &slot).Read(slot, read);
    return Status::kOk;
  }
  // Returns the refusals of an append to `layer` (of `entry`) at `pos` that the rows and the
  // layer allowed: not at the owner's end (kWrongPosition), past the context (kContextFull),
  // against the step rule (kWrongPosition). O(1) unless refused.
  Result CheckAppendAt(const LayerEntry& entry, size_t layer, uint64_t pos, uint64_t num_tokens,
                       uint64_t context, const LayerTable& table) const {
    const uint64_t end = OwnerEnd(entry);
    if (pos != end) {
      return Result::Refused(Status::kWrongPosition,
                             "layers[%llu]: append at %llu, but its next position is %llu",
                             uint64_t{layer}, pos, end);
    }
    if (num_tokens > context - pos) {
      return Result::Refused(Status::kContextFull,
                             "layers[%llu]: append at %llu of %llu tokens passes the context of "
                             "%llu positions",
                             uint64_t{layer}, pos, num_tokens, context);
    }
    return step.CheckAppend(layer, pos, num_tokens, [&] { return Ends(table); });
  }
  // Returns kWrongPosition naming the owners behind and ahead, for a call refused in a step.
  Result MidStep(const LayerTable& table) const {
    return StepRule::MidStep(Ends(table),
                             "layers[%llu] is at %llu and layers[%llu] at %llu; append every "
                             "owning layer to the same position first");
  }

  // Returns the most newest positions a rollback may discard now, between steps: the
  // `planned` headroom and what is held (paged owners hold every position), each ring's limit
  // and the recurrent states held; sets *bound to the layer that sets it.
  uint64_t RollbackLimit(uint64_t planned, const LayerTable& table, size_t* bound) const {
    const uint64_t limit = RingRollbackLimit(planned, table, bound);
    return states.HeldBack(step.HighEnd(), limit, bound);
  }
  // As RollbackLimit, without the states: *bound is the first paged owner, else the first ring,
  // unless a ring is lower.
  uint64_t RingRollbackLimit(uint64_t planned, const LayerTable& table, size_t* bound) const {
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
  // Returns kOk when a rollback of `num_tokens` positions is allowed now; else kWrongPosition
  // inside a step, or kRollbackTooFar naming the layer that bounds it and the limit (or a
  // layer that holds no state after the new end).
  Result CheckRollback(uint64_t num_tokens, uint64_t planned, const LayerTable& table) const {
    if (step.InStep()) return MidStep(table);
    size_t bound = 0;
    const uint64_t limit = RingRollbackLimit(planned, table, &bound);
    if (num_tokens <= limit) {
      // The recurrent states after the new end must be held too.
      return num_tokens == 0 ? Result(Status::kOk) : states.CheckHeld(step.HighEnd() - num_tokens);
    }
    return Result::Refused(Status::kRollbackTooFar,
                           "layers[%llu]: rollback of %llu positions, but at most %llu are "
                           "allowed now (planned headroom %llu; the next query's window stays "
                           "held)",
                           uint64_t{bound}, num_tokens, limit, planned);
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
    if (num_tokens != 0) {  // Rollback(0) changes nothing
      states.ForgetAfter(end);
      step.Reset(end);
    }
  }
  // Moves every owner ahead of `end` (where StepRule::AbandonTarget takes the step) back to
  // it, abandoning the step, and releases the blocks the table no longer reaches. O(layers).
  void AbandonStep(BlockStore<Layout>* store, uint64_t end) {
    KVRING_DASSERT(end >= step.StepStart());
    for (LayerStorage<Layout>& ring : rings) {
      if (ring.Index().EndPos() > end) ring.DiscardTo(end);
    }
    for (uint64_t& paged : paged_end) paged = std::min(paged, end);
    store->ReleaseFrom(&blocks, blocks.EntriesFor(end));
    states.ForgetAfter(end);
    step.Reset(end);
  }
  // Forgets every position and state, keeping the rings and releasing every block.
  void Clear(BlockStore<Layout>* store) {
    for (LayerStorage<Layout>& ring : rings) ring.Clear();
    states.Clear();
    std::fill(paged_end.begin(), paged_end.end(), 0);
    store->ReleaseFrom(&blocks, 0);
    step.Reset(0);
  }
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_POOL_SEQUENCE_H_
