// kvring/storage/ring_kv.h: RingKV<Layout>, the K/V (BF16, or int8 with scales) of one sliding or
// chunked layer as a ring of num_slots slots: position pos lives in slot pos % num_slots and
// overwrites the oldest. Use it for layers whose capacity is below the context; GlobalKV holds the
// others. Does no attention (see views.h and ops/).
#ifndef KVRING_STORAGE_RING_KV_H_
#define KVRING_STORAGE_RING_KV_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/layer_plan.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/storage/layer_storage.h"
#include "kvring/storage/owned_layer_kv.h"
#include "kvring/storage/storage_spec.h"

namespace kvring {

template <typename Layout>
class RingKV : public detail::OwnedLayerKV<Layout> {
  static_assert(IsLayout<Layout>::value, "RingKV needs a kvring layout");

 public:
  RingKV() = default;
  RingKV(RingKV&&) noexcept = default;
  RingKV& operator=(RingKV&&) noexcept = default;

  // Returns an empty ring for `spec`, or an Error naming the invalid field. Allocates
  // spec.shape.num_slots zeroed slots of K and V (64-byte aligned).
  static Expected<RingKV> Create(const StorageSpec& spec) {
    Error error = detail::ValidateStorageSpec<Layout>(spec);
    if (!error.field.empty()) return error;
    if (spec.keep >= spec.shape.num_slots) {
      return detail::FieldError("shape.num_slots", std::to_string(spec.shape.num_slots),
                                "cannot hold the " + std::to_string(spec.keep) +
                                    " positions a new token's query reads before it, and it");
    }
    RingKV ring;
    if (!ring.storage_.Allocate(spec)) {
      return detail::FieldError("shape.num_slots", std::to_string(spec.shape.num_slots),
                                "could not be allocated");
    }
    return ring;
  }
  // Returns an empty ring for owning layer `layer` of `plan`.
  static Expected<RingKV> Create(const LayerPlan& plan, size_t layer) {
    return Create(StorageSpec::Of(plan, layer));
  }

  // Appends rows k [num_tokens][kv_head][head_dim] and v [num_tokens][kv_head][v_head_dim]
  // (v null for MLA) at `pos`, in the ring's format: rounding to nearest even BF16, or encoding
  // each (pos, kv_head) row as int8 with its scale (EncodeInt8Row). Token t's rows start at
  // k + t * strides.k and v + t * strides.v (elements; 0: packed), so rows inside a fused QKV
  // buffer append without a copy. Refusals change nothing and say what was wrong with values:
  // kWrongPosition (`pos` is not EndPos()), kContextFull (past the context), kEmptyBatch,
  // kBadArgument (null rows, or a nonzero stride below the packed row). A batch larger than
  // the ring was planned for grows it first (allocates; kOutOfMemory if it cannot).
  // Cost: the bytes of the rows. A batch of 128 or more tokens into a BF16 ring writes K with
  // non-temporal stores (not left in cache; fenced before returning).
  Result AppendF32(uint64_t pos, const float* k, const float* v, uint64_t num_tokens,
                   RowStrides strides = RowStrides()) {
    return this->storage_.Append(pos, k, v, num_tokens, strides, /*may_grow=*/true,
                                 detail::kNoLayer);
  }
  // As AppendF32, from BF16 rows (copied as they are into a BF16 ring).
  Result AppendBF16(uint64_t pos, const BF16* k, const BF16* v, uint64_t num_tokens,
                    RowStrides strides = RowStrides()) {
    return this->storage_.Append(pos, k, v, num_tokens, strides, /*may_grow=*/true,
                                 detail::kNoLayer);
  }

  // Reallocates to hold `capacity` slots (rounded up to the layout's alignment), keeping
  // every held position readable and identical. A capacity at or below the current one
  // changes nothing; one past the context is kBadArgument; kOutOfMemory leaves the ring as
  // it was. Cost: allocation plus the held bytes.
  Result Grow(uint64_t capacity) { return this->storage_.GrowSlots(capacity, detail::kNoLayer); }

  // Returns an independent snapshot: it shares no memory with this ring, and writing either
  // never changes the other. Allocates; copies the held positions only.
  Expected<RingKV> Copy() const { return this->template CopyAs<RingKV>(this->NumSlots()); }

  // Returns an independent snapshot that holds `capacity` positions (never fewer slots than
  // this ring), for growing without touching this ring. Allocates; copies the held
  // positions only.
  Expected<RingKV> GrownCopy(uint64_t capacity) const {
    const uint64_t num_slots = this->storage_.SlotsFor(capacity);
    if (num_slots == 0) {
      return detail::FieldError("capacity", std::to_string(capacity),
                                "is past the context " + std::to_string(this->Index().Context()));
    }
    return this->template CopyAs<RingKV>(std::max(num_slots, this->NumSlots()));
  }
};

}  // namespace kvring

#endif  // KVRING_STORAGE_RING_KV_H_
