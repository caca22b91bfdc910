// kvring/index/ring_index.h: the pos <-> slot bookkeeping of one layer's storage: which positions
// are held, where they live, and which appends and rollbacks keep every position a later
// query needs. Owns no K/V; RingKV and GlobalKV (and any engine's own storage) use it.
#ifndef KVRING_INDEX_RING_INDEX_H_
#define KVRING_INDEX_RING_INDEX_H_

#include <algorithm>
#include <cstdint>

#include "kvring/base.h"
#include "kvring/index/positions.h"
#include "kvring/status.h"

namespace kvring {

// Positions [FirstPos(), EndPos()) are held; position pos lives in slot pos % NumSlots().
// A flat index (NumSlots() >= context) never wraps. Trivially copyable.
class RingIndex {
 public:
  RingIndex() = default;
  // num_slots: physical slots (>= 1). keep: positions before a new batch that queries still
  // read (the largest window or chunk minus one). max_rollback: the planned rollback
  // headroom of one rollback call. context: end positions never pass it.
  RingIndex(uint64_t num_slots, uint64_t keep, uint64_t max_rollback, uint64_t context)
      : num_slots_(num_slots), keep_(keep), max_rollback_(max_rollback), context_(context) {
    KVRING_DASSERT(num_slots >= 1);
  }

  uint64_t FirstPos() const { return first_pos_; }
  uint64_t EndPos() const { return end_pos_; }
  uint64_t NumHeld() const { return end_pos_ - first_pos_; }
  uint64_t NumSlots() const { return num_slots_; }
  uint64_t Keep() const { return keep_; }
  uint64_t MaxRollback() const { return max_rollback_; }
  uint64_t Context() const { return context_; }
  // Whether positions ever share a slot (a ring), as opposed to flat storage.
  bool Wraps() const { return num_slots_ < context_; }
  bool Holds(uint64_t pos) const { return pos >= first_pos_ && pos < end_pos_; }

  // Returns the slot of a held position.
  uint64_t SlotOf(uint64_t pos) const {
    KVRING_DASSERT(Holds(pos));
    return SlotOfPos(pos, num_slots_);
  }

  // Returns the slots this index would need so that a batch of `num_tokens` does not
  // overwrite the `keep` positions before it (at most the context).
  uint64_t SlotsNeededFor(uint64_t num_tokens) const {
    return std::min(context_, keep_ + num_tokens);
  }

  // Returns kOk if `num_tokens` positions may be appended at `pos` into NumSlots() slots;
  // otherwise why not (kBatchTooLarge: the batch would overwrite positions its first query
  // reads; grow first).
  Status CheckAppend(uint64_t pos, uint64_t num_tokens) const {
    if (num_tokens == 0) return Status::kEmptyBatch;
    if (pos != end_pos_) return Status::kWrongPosition;
    if (num_tokens > context_ - end_pos_) return Status::kContextFull;
    if (SlotsNeededFor(num_tokens) > num_slots_) return Status::kBatchTooLarge;
    return Status::kOk;
  }
  // Records an append that CheckAppend allowed.
  void Append(uint64_t num_tokens) {
    KVRING_DASSERT(CheckAppend(end_pos_, num_tokens) == Status::kOk);
    end_pos_ += num_tokens;
    first_pos_ = std::max(first_pos_, end_pos_ - std::min(end_pos_, num_slots_));
  }

  // Returns kOk if the newest `num_tokens` positions may be discarded: at most the planned
  // headroom, at most what is held, and the `keep` positions before the new end still held.
  Status CheckRollback(uint64_t num_tokens) const {
    if (num_tokens > max_rollback_) return Status::kRollbackTooFar;
    return CheckDiscard(num_tokens);
  }
  // Returns kOk if the newest `num_tokens` positions may be discarded whatever the headroom:
  // at most what is held, and the `keep` positions before the new end still held. Discarding
  // the positions of an unfinished step always passes (its appends kept `keep` before it).
  Status CheckDiscard(uint64_t num_tokens) const {
    if (num_tokens > NumHeld()) return Status::kRollbackTooFar;
    const uint64_t new_end = end_pos_ - num_tokens;
    if (new_end - std::min(new_end, keep_) < first_pos_) return Status::kRollbackTooFar;
    return Status::kOk;
  }
  // Returns the most newest positions CheckRollback allows discarding now.
  uint64_t RollbackLimit() const {
    uint64_t limit = std::min(max_rollback_, NumHeld());
    // Once the oldest positions are overwritten, the new end must keep `keep` before it.
    if (first_pos_ > 0) limit = std::min(limit, NumHeld() - std::min(NumHeld(), keep_));
    return limit;
  }
  // Records a rollback that CheckRollback allowed, or a discard CheckDiscard allowed.
  void Rollback(uint64_t num_tokens) {
    KVRING_DASSERT(CheckDiscard(num_tokens) == Status::kOk);
    end_pos_ -= num_tokens;
  }

  // Forgets every position; the next append starts at 0.
  void Clear() { first_pos_ = end_pos_ = 0; }

  // Makes [first_pos, end_pos) the held positions (a saved state loaded into the slots they
  // map to). Requires first_pos <= end_pos <= Context() and at most NumSlots() of them.
  void Restore(uint64_t first_pos, uint64_t end_pos) {
    KVRING_DASSERT(first_pos <= end_pos && end_pos <= context_ &&
                   end_pos - first_pos <= num_slots_);
    first_pos_ = first_pos;
    end_pos_ = end_pos;
  }

  // Returns this index over `num_slots` slots (>= 1): holding the same positions when it
  // grows, the newest num_slots of them when it shrinks below NumHeld().
  RingIndex Resized(uint64_t num_slots) const {
    KVRING_DASSERT(num_slots >= 1);
    RingIndex resized = *this;
    resized.num_slots_ = num_slots;
    resized.first_pos_ = std::max(first_pos_, end_pos_ - std::min(end_pos_, num_slots));
    return resized;
  }

 private:
  uint64_t num_slots_ = 1;
  uint64_t keep_ = 0;
  uint64_t max_rollback_ = 0;
  uint64_t context_ = 0;
  uint64_t first_pos_ = 0;
  uint64_t end_pos_ = 0;
};

}  // namespace kvring

#endif  // KVRING_INDEX_RING_INDEX_H_
