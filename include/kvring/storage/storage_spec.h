// kvring/storage/storage_spec.h: what one layer's storage (RingKV or GlobalKV) must hold: its shape
// and the bookkeeping limits from the plan; and the row strides of an append. Plain data; no
// allocation.
#ifndef KVRING_STORAGE_STORAGE_SPEC_H_
#define KVRING_STORAGE_STORAGE_SPEC_H_

#include <cstdint>

#include "kvring/layer_plan.h"
#include "kvring/layouts/kv_shape.h"

namespace kvring {

// Elements between the rows of consecutive tokens in an append's k and v (0: packed, the
// row's own length). Within a token the kv_heads stay contiguous, [kv_head][head_dim], so a
// fused QKV buffer [token][q heads | k heads | v heads] appends without a copy:
// AppendF32(layer, pos, qkv + q_dim, qkv + q_dim + k_dim, num_tokens, {qkv_dim, qkv_dim}).
struct RowStrides {
  uint64_t k = 0;
  uint64_t v = 0;  // ignored when the layer stores no V (MLA)
};

struct StorageSpec {
  // shape.num_slots: slots to allocate, a multiple of the layout's slot alignment. Use
  // Layout::NumSlotsFor(capacity) (as the plan does): for the flash layout it also makes the
  // number of tiles odd, which any other aligned count works without but runs slower.
  KVShape shape;
  uint64_t keep = 0;              // positions before a new batch its queries read (span - 1)
  uint64_t max_rollback = 0;      // rollback headroom
  uint64_t context = 0;           // the logical limit of positions
  Format format = Format::kBF16;  // of every K and V element
  bool huge_pages = false;        // RuntimeSpec::huge_pages

  // Returns the spec of owning layer `layer` of `plan`.
  static StorageSpec Of(const LayerPlan& plan, size_t layer) {
    const LayerInfo& info = plan.Layer(layer);
    StorageSpec spec;
    spec.shape = KVShape::Of(info.spec, info.num_slots);
    spec.context = plan.Runtime().context;
    spec.keep = info.span == 0 ? spec.context : info.span - 1;
    spec.max_rollback = plan.Runtime().rollback;
    spec.format = info.spec.format;
    spec.huge_pages = plan.Runtime().huge_pages;
    return spec;
  }
};

}  // namespace kvring

#endif  // KVRING_STORAGE_STORAGE_SPEC_H_
