// kvring/storage/sequence_table.h: the sequences of a KVPool by id: which slots are live,
// which are free, and the generation that makes an id of a freed sequence stale even after
// its slot serves a new one, and the epoch of each slot that ends the views of its sequence
// (ViewStamp). Holds the pool's per-sequence state (`Sequence`) without
// knowing what is in it.
#ifndef KVRING_STORAGE_SEQUENCE_TABLE_H_
#define KVRING_STORAGE_SEQUENCE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kvring/base.h"
#include "kvring/kv_view.h"
#include "kvring/status.h"

namespace kvring {

// A sequence of a KVPool. Ids of freed sequences are refused (kUnknownSequence), even after
// their slot serves a new sequence.
struct SequenceId {
  uint32_t index = std::numeric_limits<uint32_t>::max();
  uint32_t generation = 0;
};
inline bool operator==(SequenceId a, SequenceId b) {
  return a.index == b.index && a.generation == b.generation;
}
inline bool operator!=(SequenceId a, SequenceId b) { return !(a == b); }

namespace detail {

// Sequence: default-constructible and movable; a freed slot is reset to Sequence().
template <typename Sequence>
class SequenceTable {
 public:
  SequenceTable() = default;
  // A table of `capacity` slots, all free (< 2^32 - 1).
  explicit SequenceTable(uint32_t capacity) : slots_(capacity) {
    for (uint32_t index = capacity; index > 0; --index) free_.push_back(index - 1);
  }

  uint64_t NumLive() const { return slots_.size() - free_.size(); }
  bool Full() const { return free_.empty(); }

  // Returns kOk for the id of a live sequence, else kUnknownSequence naming it.
  Result Check(SequenceId id) const {
    if (id.index >= slots_.size() || !slots_[id.index].live ||
        slots_[id.index].epoch.generation != id.generation) {
      return Result::Refused(Status::kUnknownSequence,
                             "sequence %llu (generation %llu) is not live in this pool",
                             uint64_t{id.index}, uint64_t{id.generation});
    }
    return Status::kOk;
  }
  // Returns the sequence of an id Check() allowed (checked in debug builds only).
  const Sequence& Get(SequenceId id) const {
    KVRING_DASSERT(Check(id).ok());
    return slots_[id.index].sequence;
  }
  Sequence& Get(SequenceId id) {
    KVRING_DASSERT(Check(id).ok());
    return slots_[id.index].sequence;
  }
  // Returns the view epoch of live `id`'s slot (fixed address while the table lives).
  const ViewEpoch& Epoch(SequenceId id) const {
    KVRING_DASSERT(Check(id).ok());
    return slots_[id.index].epoch;
  }
  // Ends the views of live `id` taken so far, naming `call` as what ended them.
  void EndViews(SequenceId id, ViewEnd call) {
    KVRING_DASSERT(Check(id).ok());
    slots_[id.index].epoch.Advance(call);
  }

  // Makes `sequence` live in a free slot and returns its id. Requires !Full().
  SequenceId Add(Sequence sequence) {
    KVRING_CHECK(!free_.empty());
    const uint32_t index = free_.back();
    free_.pop_back();
    Slot& slot = slots_[index];
    slot.live = true;
    slot.sequence = std::move(sequence);
    return SequenceId{index, slot.epoch.generation};
  }
  // Frees live `id`: its slot's sequence is reset, its id refused from now on and its views
  // stale (ViewEnd::kFree), even after the slot serves a new sequence.
  void Free(SequenceId id) {
    KVRING_CHECK(Check(id).ok());
    Slot& slot = slots_[id.index];
    slot.live = false;
    slot.sequence = Sequence();
    slot.epoch.Advance(ViewEnd::kFree);
    ++slot.epoch.generation;
    free_.push_back(id.index);
  }

 private:
  struct Slot {
    bool live = false;
    ViewEpoch epoch;  // the slot's generation too; never reset, so views of freed ones stay stale
    Sequence sequence;
  };

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;  // a stack: the most recently freed slot is used first
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_SEQUENCE_TABLE_H_
