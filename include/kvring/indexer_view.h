// kvring/indexer_view.h: IndexerKeysView, a read-only view of the DSA indexer keys (DeepSeek
// V3.2, GLM-5) that a KVCache or KVPool keeps beside an MLA latent, as KVCache::IndexerKeys and
// KVPool::IndexerKeys hand it to the engine's indexer (its top-k is the engine's kernel). Plain
// data, trivially copyable, never allocates; valid as long as a KVView of the same storage.
#ifndef KVRING_INDEXER_VIEW_H_
#define KVRING_INDEXER_VIEW_H_

#include <cstdint>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/index/positions.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/visibility.h"

namespace kvring {

// One key of `dim` elements per held position, in the layer's format: BF16 (keys), or int8
// (keys_int8) with one f32 scale per position (scales; the stored value of an element is its
// scale times it). Position pos's key is a contiguous row in every layout and residence: in
// slot pos % NumSlots() of a ring or flat buffer, or of block BlockOf(pos) for paged storage
// (blocks not null), Row(pos) elements past keys (keys_int8).
struct IndexerKeysView {
  Format format = Format::kBF16;
  const BF16* keys = nullptr;         // BF16 layers
  const int8_t* keys_int8 = nullptr;  // int8 layers
  const float* scales = nullptr;      // int8 layers: [block][slot]
  uint32_t dim = 0;                   // elements of one key; 0: the layer keeps no indexer key
  uint64_t num_slots = 0;             // of the buffer, or of one block when paged
  const uint32_t* blocks = nullptr;   // paged storage: the block of each num_slots positions
  uint64_t first_pos = 0;             // the oldest position held
  uint64_t end_pos = 0;               // one past the newest position held
  Visibility visibility;              // the reading layer's rule
  // Taken with the keys: stamp.Check() refuses them once the storage has changed
  // (kStaleView, naming the call), as attention refuses a stale KVView.
  ViewStamp stamp;

  bool Holds(uint64_t pos) const { return pos >= first_pos && pos < end_pos; }
  // Returns where pos's key starts in keys (keys_int8), and its scale in scales. `pos` must
  // be held.
  uint64_t RowOffset(uint64_t pos) const { return ScaleOffset(pos) * dim; }
  uint64_t ScaleOffset(uint64_t pos) const {
    KVRING_DASSERT(Holds(pos));
    return BlockOfPos(blocks, pos, num_slots) * num_slots + SlotOfPos(pos, num_slots);
  }
  // Returns pos's key (BF16 layers, else null) and pos's int8 key and scale (int8 layers).
  const BF16* Row(uint64_t pos) const { return keys == nullptr ? nullptr : keys + RowOffset(pos); }
  const int8_t* RowInt8(uint64_t pos) const {
    return keys_int8 == nullptr ? nullptr : keys_int8 + RowOffset(pos);
  }
  float Scale(uint64_t pos) const { return scales == nullptr ? 1.0f : scales[ScaleOffset(pos)]; }
};

namespace detail {

// Returns the indexer keys of a DSA latent's storage view `view`, whose V stream holds them
// (one "kv_head" of `dim` elements: [block][slot][dim] in both layouts).
template <typename Layout>
IndexerKeysView IndexerKeysOf(const KVView<Layout>& view) {
  IndexerKeysView keys;
  keys.format = view.format;
  keys.keys = view.v;
  keys.keys_int8 = view.v_int8;
  keys.scales = view.v_scales;
  keys.dim = view.layout.Shape().v_head_dim;
  keys.num_slots = view.NumSlots();
  keys.blocks = view.blocks;
  keys.first_pos = view.first_pos;
  keys.end_pos = view.end_pos;
  keys.visibility = view.visibility;
  keys.stamp = view.stamp;
  return keys;
}

// Returns a DSA latent's storage view `view` as attention reads it: the latent alone, without
// the V stream that holds the indexer keys.
template <typename Layout>
KVView<Layout> WithoutIndexer(KVView<Layout> view) {
  KVShape shape = view.layout.Shape();
  shape.v_head_dim = 0;
  view.layout = Layout(shape);
  view.v = nullptr;
  view.v_int8 = nullptr;
  view.v_scales = nullptr;
  return view;
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_INDEXER_VIEW_H_
