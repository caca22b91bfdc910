// kvring/storage/global_kv.h: GlobalKV<Layout>, the flat K/V (BF16, or int8 with scales) of one
// layer that keeps every position of the context (global layers, and sliding layers whose window
// reaches the context). Position pos lives in slot pos; it never wraps and refuses appends past the
// context. Does no attention (see views.h and ops/).
#ifndef KVRING_STORAGE_GLOBAL_KV_H_
#define KVRING_STORAGE_GLOBAL_KV_H_

#include <cstdint>
#include <string>

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
class GlobalKV : public detail::OwnedLayerKV<Layout> {
  static_assert(IsLayout<Layout>::value, "GlobalKV needs a kvring layout");

 public:
  GlobalKV() = default;
  GlobalKV(GlobalKV&&) noexcept = default;
  GlobalKV& operator=(GlobalKV&&) noexcept = default;

  // Returns an empty flat cache for `spec` (num_slots at least the context), or an Error
  // naming the invalid field. Allocates num_slots zeroed slots; pages are touched only
  // when written.
  static Expected<GlobalKV> Create(const StorageSpec& spec) {
    Error error = detail::ValidateStorageSpec<Layout>(spec);
    if (!error.field.empty()) return error;
    if (spec.shape.num_slots < spec.context) {
      return detail::FieldError("shape.num_slots", std::to_string(spec.shape.num_slots),
                                "is below the context " + std::to_string(spec.context) +
                                    "; a flat cache holds every position (use RingKV)");
    }
    GlobalKV flat;
    if (!flat.storage_.Allocate(spec)) {
      return detail::FieldError("shape.num_slots", std::to_string(spec.shape.num_slots),
                                "could not be allocated");
    }
    return flat;
  }
  // Returns an empty flat cache for owning layer `layer` of `plan`.
  static Expected<GlobalKV> Create(const LayerPlan& plan, size_t layer) {
    return Create(StorageSpec::Of(plan, layer));
  }

  // Appends rows as RingKV::AppendF32 does, row strides included; past the context it is
  // refused with kContextFull and nothing changes. Never allocates.
  Result AppendF32(uint64_t pos, const float* k, const float* v, uint64_t num_tokens,
                   RowStrides strides = RowStrides()) {
    return this->storage_.Append(pos, k, v, num_tokens, strides, /*may_grow=*/false,
                                 detail::kNoLayer);
  }
  // As AppendF32, from BF16 rows (copied as they are into a BF16 layer).
  Result AppendBF16(uint64_t pos, const BF16* k, const BF16* v, uint64_t num_tokens,
                    RowStrides strides = RowStrides()) {
    return this->storage_.Append(pos, k, v, num_tokens, strides, /*may_grow=*/false,
                                 detail::kNoLayer);
  }

  // Returns an independent snapshot (property 3, docs/design.md). Allocates the context's slots but
  // writes only the held positions.
  Expected<GlobalKV> Copy() const { return this->template CopyAs<GlobalKV>(this->NumSlots()); }
};

}  // namespace kvring

#endif  // KVRING_STORAGE_GLOBAL_KV_H_
