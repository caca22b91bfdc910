// kvring/storage/pool_budget.h: the byte budget of a KVPool: the bytes every live sequence's
// rings and recurrent states take and the blocks in use, against budget_bytes; whether a call may
// take more, what a step would cost a sequence, and the accounting a caller reads (PoolUsage).
#ifndef KVRING_STORAGE_POOL_BUDGET_H_
#define KVRING_STORAGE_POOL_BUDGET_H_

#include <cstdint>

#include "kvring/detail/checked_math.h"
#include "kvring/index/block_table.h"
#include "kvring/status.h"
#include "kvring/storage/block_store.h"
#include "kvring/storage/pool_sequence.h"
#include "kvring/storage/pool_spec.h"
#include "kvring/storage/ring_set.h"

namespace kvring {
namespace detail {

template <typename Layout>
class PoolBudget {
 public:
  PoolBudget() = default;
  explicit PoolBudget(uint64_t budget_bytes) : budget_bytes_(budget_bytes) {}

  // The bytes of every live sequence's rings; a sequence's rings change from `from` to `to`
  // bytes (0 when it has none: added or freed).
  uint64_t RingBytes() const { return ring_bytes_; }
  void ChargeRings(uint64_t from, uint64_t to) { ring_bytes_ = ring_bytes_ - from + to; }
  // The bytes of every live sequence's recurrent states (the plan's StateBytes() each).
  uint64_t StateBytes() const { return state_bytes_; }
  void ChargeStates(uint64_t from, uint64_t to) { state_bytes_ = state_bytes_ - from + to; }

  // kPoolExhausted unless the budget holds `ring_bytes` more bytes of rings (or states) and
  // `blocks` more blocks of `store` (and the store has them free).
  Result CheckRoom(uint64_t ring_bytes, uint64_t blocks, const BlockStore<Layout>& store) const {
    const uint64_t block_bytes = store.BlockBytes();
    const uint64_t in_use = ring_bytes_ + state_bytes_ + store.Ids().NumInUse() * block_bytes;
    const uint64_t wanted = SaturatingAdd(ring_bytes, blocks * block_bytes);
    if (blocks > store.Ids().NumFree() || wanted > budget_bytes_ - in_use) {
      return Result::Refused(Status::kPoolExhausted,
                             "the budget of %llu bytes has %llu in use and cannot give %llu more; "
                             "free, preempt or wait for a sequence",
                             budget_bytes_, in_use, wanted);
    }
    return Status::kOk;
  }

  // Makes `table` cover [pos, pos + num_tokens) with blocks of its own: takes the blocks it
  // lacks from `store` and copies a block it shares with another sequence (only the last
  // block of a table can be partly filled, so at most one). kPoolExhausted, changing nothing,
  // when the budget cannot give them; the refusal names `layer` (kNoLayer: none).
  Result TakeBlocks(BlockStore<Layout>* store, BlockTable* table, uint64_t pos, uint64_t num_tokens,
                    uint64_t layer) const {
    const uint64_t blocks = store->BlocksToTake(*table, pos, num_tokens);
    if (blocks == 0) return Status::kOk;
    if (!CheckRoom(0, blocks, *store).ok()) {
      return KVRING_DETAIL_REFUSED(layer, Status::kPoolExhausted,
                                   "%llu tokens at %llu need %llu more blocks than the budget "
                                   "can give; free, preempt or wait",
                                   num_tokens, pos, blocks);
    }
    store->Cover(table, pos, num_tokens);
    return Status::kOk;
  }

  // Sets what a step of `num_tokens` from `end` costs `sequence`: the bytes its rings grow by
  // and the blocks it takes (new ones, and copies of shared ones it writes into).
  static void StepCost(const PoolSequence<Layout>& sequence, const RingSet<Layout>& rings,
                       const BlockStore<Layout>& store, uint64_t end, uint64_t num_tokens,
                       uint64_t* ring_growth, uint64_t* blocks) {
    *ring_growth = 0;
    if (num_tokens > sequence.batch) {
      const uint64_t grown = rings.BytesFor(num_tokens);
      if (grown > sequence.ring_bytes) *ring_growth = grown - sequence.ring_bytes;
    }
    *blocks = store.Empty() ? 0 : store.BlocksToTake(sequence.blocks, end, num_tokens);
  }

  // Returns the accounting now, for `live` sequences. O(1).
  PoolUsage Usage(const BlockStore<Layout>& store, uint64_t live) const {
    PoolUsage usage;
    usage.budget_bytes = budget_bytes_;
    usage.ring_bytes = ring_bytes_;
    usage.state_bytes = state_bytes_;
    usage.block_bytes = store.BlockBytes();
    usage.num_blocks = store.Ids().NumBlocks();
    usage.blocks_in_use = store.Ids().NumInUse();
    usage.free_blocks = store.Ids().NumFree();
    usage.shared_blocks = store.Ids().NumShared();
    usage.bytes_in_use = ring_bytes_ + state_bytes_ + usage.blocks_in_use * usage.block_bytes;
    usage.live_sequences = live;
    return usage;
  }

 private:
  uint64_t budget_bytes_ = 0;
  uint64_t ring_bytes_ = 0;
  uint64_t state_bytes_ = 0;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_POOL_BUDGET_H_
