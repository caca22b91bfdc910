// kvring/storage/ring_set.h: the ring owners of a KVPool, whose rings every sequence has its
// own of: their storage specs, the slots a ring needs for a batch (the capacity rule of that
// batch, padded by the layout), and making, resizing and copying one sequence's rings. A
// failed allocation leaves the rings it was given as they were.
#ifndef KVRING_STORAGE_RING_SET_H_
#define KVRING_STORAGE_RING_SET_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kvring/detail/checked_math.h"
#include "kvring/layer_plan.h"
#include "kvring/status.h"
#include "kvring/storage/layer_storage.h"
#include "kvring/storage/storage_spec.h"

namespace kvring {
namespace detail {

template <typename Layout>
class RingSet {
 public:
  using Rings = std::vector<LayerStorage<Layout>>;

  RingSet() = default;
  explicit RingSet(const RuntimeSpec& runtime) : runtime_(runtime) {}

  // Adds ring owner `info` of a plan, stored as `spec` (shape.num_slots: the plan's).
  void Add(const LayerInfo& info, const StorageSpec& spec) {
    rings_.push_back(Ring{info.index, info.span, info.slot_bytes, spec});
  }
  size_t Size() const { return rings_.size(); }
  // The storage spec (with the plan's num_slots) of ring `ring`.
  const StorageSpec& Spec(size_t ring) const { return rings_[ring].spec; }

  // Returns the slots ring `ring` needs for batches of `batch` tokens (window - 1 +
  // max(batch, rollback) positions, padded, capped by the context); kMaxU64 on overflow.
  uint64_t SlotsFor(size_t ring, uint64_t batch) const {
    RuntimeSpec runtime = runtime_;
    runtime.batch = batch;
    const uint64_t capacity = LayerPlan::CapacityOf(rings_[ring].span, runtime.context, runtime);
    uint64_t num_slots = 0;
    if (!Layout::NumSlotsFor(capacity, &num_slots)) return std::numeric_limits<uint64_t>::max();
    return num_slots;
  }
  // Returns the bytes of one sequence's rings for batches of `batch` tokens (saturating).
  uint64_t BytesFor(uint64_t batch) const {
    uint64_t bytes = 0;
    for (size_t i = 0; i < rings_.size(); ++i) {
      bytes = SaturatingAdd(bytes, SaturatingMul(SlotsFor(i, batch), rings_[i].slot_bytes));
    }
    return bytes;
  }

  // Sets *rings to new empty rings for batches of `batch` tokens; kOutOfMemory naming the ring.
  Result Make(uint64_t batch, Rings* rings) const {
    Rings made;
    made.reserve(rings_.size());
    for (size_t i = 0; i < rings_.size(); ++i) {
      StorageSpec spec = rings_[i].spec;
      spec.shape.num_slots = SlotsFor(i, batch);
      LayerStorage<Layout> ring;
      if (!ring.Allocate(spec)) {
        return Result::Refused(Status::kOutOfMemory,
                               "layers[%llu]: a ring of %llu slots could not be allocated",
                               uint64_t{rings_[i].layer}, spec.shape.num_slots);
      }
      made.push_back(std::move(ring));
    }
    *rings = std::move(made);
    return Status::kOk;
  }
  // Sets *out to copies of `rings` resized for batches of `batch` tokens (a shrink keeps the
  // newest positions); kOutOfMemory naming the ring.
  Result Resized(const Rings& rings, uint64_t batch, Rings* out) const {
    Rings resized;
    resized.reserve(rings.size());
    for (size_t i = 0; i < rings.size(); ++i) {
      resized.push_back(rings[i].CopyWithSlots(SlotsFor(i, batch)));
      if (resized.back().Failed()) {
        return Result::Refused(Status::kOutOfMemory,
                               "Resize: the ring of layers[%llu] could not be allocated",
                               uint64_t{rings_[i].layer});
      }
    }
    *out = std::move(resized);
    return Status::kOk;
  }
  // Sets *out to copies of `rings` (a fork's); kOutOfMemory.
  static Result Copied(const Rings& rings, Rings* out) {
    Rings copies;
    copies.reserve(rings.size());
    for (const LayerStorage<Layout>& ring : rings) {
      copies.push_back(ring.CopyWithSlots(ring.Index().NumSlots()));
      if (copies.back().Failed()) {
        return Result::Refused(Status::kOutOfMemory, "Fork: %llu rings could not be allocated",
                               uint64_t{rings.size()});
      }
    }
    *out = std::move(copies);
    return Status::kOk;
  }

 private:
  struct Ring {
    size_t layer = 0;
    uint64_t span = 0;        // the largest window or chunk of its readers
    uint64_t slot_bytes = 0;  // K and V of one position
    StorageSpec spec;
  };

  RuntimeSpec runtime_;
  std::vector<Ring> rings_;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_RING_SET_H_
