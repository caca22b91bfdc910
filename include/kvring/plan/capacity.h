// kvring/plan/capacity.h: the capacity rule (docs/design.md) and the bytes of one position:
// what an owning layer must hold for a runtime, the slots its layout pads that to
// (layouts/padding.h) and what each slot costs in the layer's format.
#ifndef KVRING_PLAN_CAPACITY_H_
#define KVRING_PLAN_CAPACITY_H_

#include <algorithm>
#include <cstdint>

#include "kvring/detail/checked_math.h"
#include "kvring/formats/format.h"
#include "kvring/kinds.h"
#include "kvring/layouts/padding.h"
#include "kvring/plan/specs.h"

namespace kvring {

// Returns the slot alignment of the runtime's layout: num_slots is a multiple of it.
inline uint64_t SlotAlignment(const RuntimeSpec& runtime) {
  return SlotAlignment(runtime.backend, runtime.tile_rows);
}

// Sets *num_slots to the slots the runtime's layout stores `capacity` positions in (the
// layout's padding: tiles of tile_rows for tiled, an odd number of 32-slot tiles for flash),
// or returns false on overflow.
inline bool NumSlotsFor(const RuntimeSpec& runtime, uint64_t capacity, uint64_t* num_slots) {
  return NumSlotsFor(runtime.backend, runtime.tile_rows, capacity, num_slots);
}

namespace detail {

// The capacity rule: the positions an owner whose readers' largest window or chunk is `span`
// (0: some reader is global) must hold: the context for a global reader, else the span's
// keys before the newest plus the larger of a batch and a rollback, at most the context.
inline uint64_t CapacityFor(uint64_t span, uint64_t context, const RuntimeSpec& runtime) {
  if (span == 0) return context;
  const uint64_t needed = SaturatingAdd(span - 1, std::max(runtime.batch, runtime.rollback));
  return std::min(context, needed);
}

// Sets *k_bytes and *v_bytes to the bytes of one position of `spec` (every kv_head, in its
// format; for an accounting-only runtime element type, in that format), or returns false on
// overflow.
inline bool SlotBytes(const LayerSpec& spec, Format element_type, uint64_t* k_bytes,
                      uint64_t* v_bytes) {
  const Format format = IsAccountingOnly(element_type) ? element_type : spec.format;
  if (spec.IsLatent()) {
    *k_bytes = RowBytes(format, spec.latent_dim);  // one stream, one "kv_head"
    *v_bytes = 0;
    return true;
  }
  return CheckedMul(spec.num_kv_heads, RowBytes(format, spec.head_dim), k_bytes) &&
         CheckedMul(spec.num_kv_heads, RowBytes(format, spec.VHeadDim()), v_bytes);
}

// Returns the bytes of `spec`'s DSA indexer key per position (0 without one), in the layer's
// format or the accounting-only element type (one row: int8 adds its scale).
inline uint64_t IndexerSlotBytes(const LayerSpec& spec, Format element_type) {
  const Format format = IsAccountingOnly(element_type) ? element_type : spec.format;
  return spec.indexer_dim == 0 ? 0 : RowBytes(format, spec.indexer_dim);
}

// Sets `layer`'s state bytes (one copy of each state; rollback + 1 copies, one more with
// stage_states) from its spec and adds them to *total; false when a count overflows 64 bits.
template <typename Info>
bool PlanState(const RuntimeSpec& runtime, Info* layer, uint64_t* total) {
  const StateSpec& state = layer->spec.state;
  if (state.Empty()) return true;
  uint64_t one_copy;
  return CheckedMul(state.conv_elements, ElementBytes(state.conv_format),
                    &layer->conv_state_bytes) &&
         CheckedMul(state.recurrent_elements, ElementBytes(state.recurrent_format),
                    &layer->recurrent_state_bytes) &&
         CheckedAdd(runtime.rollback, uint64_t{runtime.stage_states ? 2u : 1u},
                    &layer->state_copies) &&
         CheckedAdd(layer->conv_state_bytes, layer->recurrent_state_bytes, &one_copy) &&
         CheckedMul(one_copy, layer->state_copies, &layer->state_bytes) &&
         CheckedAdd(*total, layer->state_bytes, total);
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_PLAN_CAPACITY_H_
