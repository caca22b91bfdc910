// kvring/views.h: what a range of queries sees, as the attention kernels walk it: the
// position-aligned tiles of a range (ForEachTile) and where each tile lives (TileAt, the one
// home of tile addresses for ring, flat and paged storage); and, for engines with kernels of
// their own, FlashView (at most two chronological runs of contiguous slots; a ring splits at
// its wrap) and TiledView (the chronological sequence of tiles). Built from a KVView;
// trivially copyable, never allocate, valid as long as the KVView is.
// Shared-KV consumers pass their own Visibility in the KVView. No vector code.
#ifndef KVRING_VIEWS_H_
#define KVRING_VIEWS_H_

#include <cstdint>
#include <type_traits>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/index/positions.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/visibility.h"

namespace kvring {

// Returns the positions [begin, end) that some query in [q_first, q_last] sees under `kv`'s
// visibility. Every rule's first visible position grows with q, so the union is one range.
// Requires kv.CanServe(q_first) and q_last < kv.end_pos (checked in debug builds).
template <typename Layout>
inline void VisibleRange(const KVView<Layout>& kv, uint64_t q_first, uint64_t q_last,
                         uint64_t* begin, uint64_t* end) {
  KVRING_DASSERT(q_first <= q_last);
  KVRING_DASSERT(kv.CanServe(q_first) && q_last < kv.end_pos);
  *begin = kv.visibility.FirstVisible(q_first);
  *end = q_last + 1;
}

// Where one position-aligned tile of one kv_head lives in a view's storage, as offsets from
// its bases: K elements from kv.k (kv.k_int8), V elements from kv.v (kv.v_int8), and the
// tile's first scale in each stream's scales (int8). Its slots (and their scales) are
// consecutive.
struct TileOffsets {
  uint64_t k = 0;
  uint64_t v = 0;
  uint64_t scales = 0;
};

// The one home of tile addresses, for ring, flat and paged storage alike: where the tiles of
// one kv_head of a view live. A tile's slot is its position's (SlotOfPos, in its block for
// paged storage), and a paged view's block starts BlockOf(tile_pos) block strides in. Built
// once per walk (the strides are computed here), then O(1) per tile. Trivially copyable.
template <typename Layout>
class TileAddresser {
 public:
  TileAddresser(const KVView<Layout>& kv, uint32_t kv_head)
      : k_(kv.layout.K()),
        v_(kv.layout.V()),
        shape_(kv.layout.Shape()),
        blocks_(kv.blocks),
        k_block_(kv.KBlockStride()),
        v_block_(kv.VBlockStride()),
        scale_block_(kv.ScaleBlockStride()),
        kv_head_(kv_head) {}

  // Returns where the tile of `tile_pos` (a multiple of Layout::kTileSlots; it may start
  // before the view's first position) lives.
  TileOffsets operator()(uint64_t tile_pos) const {
    const uint64_t slot = SlotOfPos(tile_pos, shape_.num_slots);
    const uint64_t block = BlockOfPos(blocks_, tile_pos, shape_.num_slots);
    TileOffsets at;
    at.k = block * k_block_ + k_(slot, kv_head_, 0);
    at.v = block * v_block_ + v_(slot, kv_head_, 0);
    at.scales = block * scale_block_ + shape_.ScaleOffset(slot, kv_head_);
    return at;
  }

 private:
  typename Layout::KMapping k_;
  typename Layout::VMapping v_;
  KVShape shape_;
  const uint32_t* blocks_;
  uint64_t k_block_, v_block_, scale_block_;
  uint32_t kv_head_;
};

// Returns where the tile of `tile_pos` of `kv_head` lives (TileAddresser, for one tile).
template <typename Layout>
inline TileOffsets TileAt(const KVView<Layout>& kv, uint64_t tile_pos, uint32_t kv_head) {
  return TileAddresser<Layout>(kv, kv_head)(tile_pos);
}

// Calls fn(tile_pos) for the position-aligned tiles of kTileSlots that hold [pos_begin,
// pos_end), oldest first: in a ring the slots wrap at a multiple of the tile, so every tile
// lies in one run of slots (and in one block of paged storage).
template <uint64_t kTileSlots, typename Fn>
inline void ForEachTile(uint64_t pos_begin, uint64_t pos_end, const Fn& fn) {
  if (pos_begin >= pos_end) return;
  for (uint64_t tile_pos = TileStart(pos_begin, kTileSlots); tile_pos < pos_end;
       tile_pos += kTileSlots) {
    fn(tile_pos);
  }
}

// A chronological run of positions stored in consecutive slots (of a ring or a flat layer; a
// paged layer's run crosses blocks at multiples of the block's slots).
struct SlotRun {
  uint64_t first_pos = 0;
  uint64_t first_slot = 0;
  uint64_t num_positions = 0;
};

// The positions [pos_begin, pos_end) of one flash-layout layer as at most two runs of
// contiguous slots, oldest first. A ring splits where its slots wrap to 0; that point is a
// multiple of num_slots and so of FlashLayout::kTileSlots, so every position-aligned tile of
// kTileSlots positions lies inside one run (kernels walk whole tiles and mask the lanes
// outside [pos_begin, pos_end)). A paged layer (KVView::blocks) is one run: its tiles each lie
// inside one block, which KVView::BlockOf names.
struct FlashView {
  FlashLayout layout;  // K: [kv_head][dim][slot], V: [kv_head][slot][dim]
  uint64_t pos_begin = 0;
  uint64_t pos_end = 0;
  SlotRun runs[2];
  uint32_t num_runs = 0;

  // Returns the view of the held positions [pos_begin, pos_end) of `kv` (both in
  // [kv.first_pos, kv.end_pos]). O(1), does not allocate.
  static FlashView OfPositions(const KVView<FlashLayout>& kv, uint64_t pos_begin,
                               uint64_t pos_end) {
    KVRING_DASSERT(pos_begin <= pos_end);
    KVRING_DASSERT(pos_begin >= kv.first_pos && pos_end <= kv.end_pos);
    FlashView view;
    view.layout = kv.layout;
    view.pos_begin = pos_begin;
    view.pos_end = pos_end;
    if (pos_begin == pos_end) return view;
    const uint64_t num_slots = kv.NumSlots();
    const uint64_t first_slot = SlotOfPos(pos_begin, num_slots);
    const uint64_t count = pos_end - pos_begin;
    if (kv.Paged()) {
      // Blocks hold whole tiles: one run of positions, whose tiles sit in the blocks of
      // kv.blocks (first_slot is the first position's slot in its block).
      view.runs[0] = SlotRun{pos_begin, first_slot, count};
      view.num_runs = 1;
      return view;
    }
    const uint64_t until_wrap = num_slots - first_slot;
    view.runs[0] = SlotRun{pos_begin, first_slot, count < until_wrap ? count : until_wrap};
    view.num_runs = 1;
    if (count > until_wrap) {
      view.runs[1] = SlotRun{pos_begin + until_wrap, 0, count - until_wrap};
      view.num_runs = 2;
    }
    return view;
  }
  // Returns the view of what the queries [q_first, q_last] see.
  static FlashView Of(const KVView<FlashLayout>& kv, uint64_t q_first, uint64_t q_last) {
    uint64_t begin, end;
    VisibleRange(kv, q_first, q_last, &begin, &end);
    return OfPositions(kv, begin, end);
  }
  uint64_t NumPositions() const { return pos_end - pos_begin; }
};
static_assert(std::is_trivially_copyable<FlashView>::value, "FlashView must be trivially copyable");

// One position-aligned tile: positions [first_pos, first_pos + kTileSlots) in consecutive slots
// from `slot` (the lanes outside the view's range belong to other history and are masked).
struct TileRef {
  uint64_t first_pos = 0;
  uint64_t slot = 0;
};

// The positions [pos_begin, pos_end) of one layer as the chronological sequence of the
// position-aligned tiles of Layout::kTileSlots that hold them (for TiledLayout a tile is one
// contiguous K block of kTileRows x head_dim per kv_head).
template <typename Layout>
struct TiledView {
  static constexpr uint64_t kTileSlots = Layout::kTileSlots;

  Layout layout;
  uint64_t pos_begin = 0;
  uint64_t pos_end = 0;
  uint64_t first_tile_pos = 0;  // pos_begin rounded down to a multiple of kTileSlots
  uint64_t num_tiles = 0;

  // Returns the view of the held positions [pos_begin, pos_end) of `kv`. O(1), no allocation.
  static TiledView OfPositions(const KVView<Layout>& kv, uint64_t pos_begin, uint64_t pos_end) {
    KVRING_DASSERT(pos_begin <= pos_end);
    KVRING_DASSERT(pos_begin >= kv.first_pos && pos_end <= kv.end_pos);
    KVRING_DASSERT(kv.NumSlots() % kTileSlots == 0);
    TiledView view;
    view.layout = kv.layout;
    view.pos_begin = pos_begin;
    view.pos_end = pos_end;
    view.first_tile_pos = TileStart(pos_begin, kTileSlots);
    view.num_tiles =
        pos_begin == pos_end ? 0 : (pos_end - view.first_tile_pos + kTileSlots - 1) / kTileSlots;
    return view;
  }
  // Returns the view of what the queries [q_first, q_last] see.
  static TiledView Of(const KVView<Layout>& kv, uint64_t q_first, uint64_t q_last) {
    uint64_t begin, end;
    VisibleRange(kv, q_first, q_last, &begin, &end);
    return OfPositions(kv, begin, end);
  }
  // Returns tile `i` (0 is the oldest).
  TileRef Tile(uint64_t i) const {
    KVRING_DASSERT(i < num_tiles);
    const uint64_t first_pos = first_tile_pos + i * kTileSlots;
    return TileRef{first_pos, SlotOfPos(first_pos, layout.Shape().num_slots)};
  }
  uint64_t NumPositions() const { return pos_end - pos_begin; }
};
static_assert(std::is_trivially_copyable<TiledView<TiledLayout<16>>>::value,
              "TiledView must be trivially copyable");

}  // namespace kvring

#endif  // KVRING_VIEWS_H_
