// kvring/storage/owned_layer_kv.h: the read, rollback and clear API that RingKV and GlobalKV
// share, over one LayerStorage. Internal.
#ifndef KVRING_STORAGE_OWNED_LAYER_KV_H_
#define KVRING_STORAGE_OWNED_LAYER_KV_H_

#include <cstdint>
#include <string>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/index/ring_index.h"
#include "kvring/kv_view.h"
#include "kvring/status.h"
#include "kvring/storage/layer_storage.h"
#include "kvring/storage/storage_spec.h"
#include "kvring/visibility.h"

namespace kvring {

template <typename Layout>
class KVCache;

namespace detail {

template <typename Layout>
class OwnedLayerKV {
 public:
  // Returns the oldest held position and one past the newest: live range [first, end).
  uint64_t FirstPos() const { return storage_.Index().FirstPos(); }
  uint64_t EndPos() const { return storage_.Index().EndPos(); }
  // Returns the physical slots allocated (capacity plus padding).
  uint64_t NumSlots() const { return storage_.Index().NumSlots(); }
  const RingIndex& Index() const { return storage_.Index(); }
  const Layout& GetLayout() const { return storage_.GetLayout(); }
  // Returns the bytes of the K and V buffers (and of the scales of an int8 layer).
  uint64_t AllocatedBytes() const { return storage_.AllocatedBytes(); }

  // Returns kOk if AppendF32/AppendBF16(pos, k, v, num_tokens, strides) would be accepted
  // as the storage is now; kBatchTooLarge if only growth is missing (a RingKV grows by
  // itself). Changes nothing. O(1).
  Result CheckAppend(uint64_t pos, const void* k, const void* v, uint64_t num_tokens,
                     RowStrides strides = RowStrides()) const {
    return storage_.CheckAppend(pos, k, v, num_tokens, strides, kNoLayer);
  }

  // Returns how the elements are stored (StorageSpec::format).
  Format GetFormat() const { return storage_.GetFormat(); }

  // Copies the BF16 row of held position `pos` into k_out [kv_head][head_dim] and, if not
  // null, v_out [kv_head][v_head_dim], exactly as stored. kNotLive (saying the live range) if
  // `pos` is not held; kBadArgument for a null k_out, or for an int8 layer (use ReadRowInt8 or
  // ReadRowF32). Does not allocate. Cost: one row.
  Result ReadRow(uint64_t pos, BF16* k_out, BF16* v_out) const {
    return storage_.Read(pos, RowRead::BF16s(k_out, v_out), kNoLayer);
  }

  // Copies the int8 row of held position `pos` exactly as stored: k_out [kv_head][head_dim]
  // and k_scales_out [kv_head]; if not null, v_out [kv_head][v_head_dim] and v_scales_out
  // [kv_head] (each element's value is its scale times it, DecodeInt8). kNotLive if `pos` is
  // not held; kBadArgument for a null k_out or k_scales_out, or for a BF16 layer. Does not
  // allocate. Cost: one row.
  Result ReadRowInt8(uint64_t pos, int8_t* k_out, float* k_scales_out, int8_t* v_out,
                     float* v_scales_out) const {
    return storage_.Read(pos, RowRead::Int8s(k_out, k_scales_out, v_out, v_scales_out), kNoLayer);
  }

  // Copies the stored values of held position `pos` as f32 into k_out [kv_head][head_dim]
  // and, if not null, v_out [kv_head][v_head_dim]: BF16 widened exactly, int8 decoded as
  // DecodeInt8(scale, q), the values attention computes with. kNotLive if `pos` is not held;
  // kBadArgument for a null k_out. Does not allocate. Cost: one row.
  Result ReadRowF32(uint64_t pos, float* k_out, float* v_out) const {
    return storage_.Read(pos, RowRead::F32s(k_out, v_out), kNoLayer);
  }

  // Discards the newest `num_tokens` positions: at most the planned rollback headroom, and
  // only while the window before the new end is still held; otherwise kRollbackTooFar (saying
  // how many may be discarded now) and nothing changes. The result carries EndPos() after the
  // call. O(1).
  RollbackResult Rollback(uint64_t num_tokens) {
    const Result result = storage_.Rollback(num_tokens, kNoLayer);
    return RollbackResult(result, EndPos());
  }

  // Forgets every position, for a new sequence; keeps the buffers. Later reads see only
  // what is appended afterwards. O(1).
  void Clear() { storage_.Clear(); }

  // Returns a view of the held positions under `visibility` (the reading layer's rule).
  KVView<Layout> View(const Visibility& visibility) const { return storage_.View(visibility); }

 protected:
  // Returns an independent copy as a Derived over `num_slots` slots, holding the same
  // positions, or an Error if it could not be allocated.
  template <typename Derived>
  Expected<Derived> CopyAs(uint64_t num_slots) const {
    Derived copy;
    copy.storage_ = storage_.CopyWithSlots(num_slots);
    if (copy.storage_.Failed()) {
      return FieldError("shape.num_slots", std::to_string(num_slots),
                        "could not be allocated for a copy");
    }
    return copy;
  }

  LayerStorage<Layout> storage_;

 private:
  friend class KVCache<Layout>;  // appends, reads and rolls back with messages naming the layer
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_OWNED_LAYER_KV_H_
