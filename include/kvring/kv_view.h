// kvring/kv_view.h: a read-only view of one layer's stored K and V, as RingKV, GlobalKV and
// KVCache hand it to attention. Trivially copyable, never allocates; valid until the next
// write to that layer (append, rollback, grow, clear) or its destruction.
#ifndef KVRING_KV_VIEW_H_
#define KVRING_KV_VIEW_H_

#include <cstdint>
#include <type_traits>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/index/positions.h"
#include "kvring/visibility.h"

namespace kvring {

// Positions live in slot pos % num_slots (of block BlockOf(pos), for paged storage).
// num_slots is a multiple of the layout's kTileSlots, so a position's lane in its tile is
// pos % kTileSlots in ring, flat and paged storage alike, and every position-aligned tile is
// contiguous in each; flat storage never wraps.
template <typename Layout>
struct KVView {
  const BF16* k = nullptr;  // element offsets: layout.K(); format kBF16
  const BF16* v = nullptr;  // element offsets: layout.V(); nullptr when there is no V (MLA)
  // Format::kInt8 (kvring/formats/int8.h): the elements at the same offsets as int8, and one
  // f32 scale per slot and kv_head of each stream, [kv_head][slot] (ScaleOffset); k and v
  // are then null. The stored value of an element is its scale times it.
  Format format = Format::kBF16;
  const int8_t* k_int8 = nullptr;
  const int8_t* v_int8 = nullptr;  // nullptr when there is no V (MLA)
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;  // nullptr when there is no V (MLA)
  Layout layout;
  uint64_t first_pos = 0;  // the oldest position held
  uint64_t end_pos = 0;    // one past the newest position held
  Visibility visibility;   // the reading layer's rule (a shared-KV consumer's own)
  // Paged storage (KVPool's global layers); null for ring and flat storage. Positions
  // [i * NumSlots(), (i + 1) * NumSlots()) live in block blocks[i] of a block store: `layout`
  // is one block's (num_slots: the slots of a block, a multiple of the layout's tile), and
  // block b's elements start b * KBlockStride() past k (k_int8), b * VBlockStride() past v
  // (v_int8), b * ScaleBlockStride() past each stream's scales. Entries for the blocks of
  // [first_pos, end_pos) must be valid.
  const uint32_t* blocks = nullptr;

  uint64_t NumSlots() const { return layout.Shape().num_slots; }
  // Returns where the scale of `slot` of `kv_head` sits in k_scales and v_scales.
  uint64_t ScaleOffset(uint64_t slot, uint32_t kv_head) const {
    return layout.Shape().ScaleOffset(slot, kv_head);
  }
  // Returns whether the view has a V stream (MLA latents have none).
  bool HasV() const { return format == Format::kInt8 ? v_int8 != nullptr : v != nullptr; }
  bool Holds(uint64_t pos) const { return pos >= first_pos && pos < end_pos; }
  // Returns the slot of a held position (in its block, for paged storage).
  uint64_t SlotOf(uint64_t pos) const {
    KVRING_DASSERT(Holds(pos));
    return SlotOfPos(pos, NumSlots());
  }
  bool Paged() const { return blocks != nullptr; }
  // Returns the block of the store that holds the tile of `pos` (0 unless paged). `pos` may
  // lie before first_pos inside the first held tile.
  uint64_t BlockOf(uint64_t pos) const {
    return blocks != nullptr ? blocks[BlockIndexOf(pos, NumSlots())] : 0;
  }
  // Elements (and scales) between the starts of consecutive blocks of a paged store.
  uint64_t KBlockStride() const { return layout.K().RequiredSpanSize(); }
  uint64_t VBlockStride() const { return layout.V().RequiredSpanSize(); }
  uint64_t ScaleBlockStride() const {
    return layout.Shape().num_slots * layout.Shape().num_kv_heads;
  }
  // Returns whether every position a query at `q` sees is held (q itself included).
  bool CanServe(uint64_t q) const { return q < end_pos && visibility.FirstVisible(q) >= first_pos; }
};

}  // namespace kvring

#endif  // KVRING_KV_VIEW_H_
