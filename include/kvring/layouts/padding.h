// kvring/layouts/padding.h: the one home of the layouts' padding rule: how many slots a
// layout stores `capacity` positions in, and what num_slots is a multiple of. FlashLayout and
// TiledLayout apply it at compile time, the plan (plan/specs.h) for a runtime's backend.
#ifndef KVRING_LAYOUTS_PADDING_H_
#define KVRING_LAYOUTS_PADDING_H_

#include <cstdint>

#include "kvring/detail/checked_math.h"
#include "kvring/kinds.h"

namespace kvring {

// Slots a flash-layout buffer is padded to: one 64-byte vector of BF16 K, so that every
// position-aligned vector of slots is whole in ring and flat storage alike.
inline constexpr uint64_t kFlashSlotAlignment = 32;

namespace detail {

// Sets *num_slots to the slots a flash-layout buffer holds `capacity` positions in, or
// returns false on overflow: capacity rounded up to a whole number of 32-slot tiles, and that
// number made odd. Flash K is [kv_head][dim][slot], so consecutive dims lie num_slots * 2
// bytes apart; an odd number of 64-byte tiles makes them fall into different cache sets.
// With an even number (a power of two, say) every dim of a tile lands in the same few sets
// and appends and attention thrash L1 (measured: 1.6x slower decode at 32768 slots).
inline bool FlashNumSlots(uint64_t capacity, uint64_t* num_slots) {
  uint64_t tiles = capacity / kFlashSlotAlignment + (capacity % kFlashSlotAlignment != 0);
  if (tiles % 2 == 0) ++tiles;
  return CheckedMul(tiles, kFlashSlotAlignment, num_slots);
}

// Sets *num_slots to the slots a tiled-layout buffer with tiles of `tile_rows` holds
// `capacity` positions in (whole tiles), or returns false on overflow.
inline bool TiledNumSlots(uint64_t capacity, uint32_t tile_rows, uint64_t* num_slots) {
  return CheckedRoundUp(capacity, tile_rows, num_slots);
}

}  // namespace detail

// Tile heights TiledLayout supports: powers of two in [kMinTileRows, kMaxTileRows].
inline constexpr uint32_t kMinTileRows = 8;
inline constexpr uint32_t kMaxTileRows = 64;

// Returns whether TiledLayout supports tiles of `tile_rows`.
constexpr bool IsTileRows(uint64_t tile_rows) {
  return tile_rows >= kMinTileRows && tile_rows <= kMaxTileRows &&
         (tile_rows & (tile_rows - 1)) == 0;
}

// Returns the slots num_slots is a multiple of for `backend` (tiled: `tile_rows`).
inline uint64_t SlotAlignment(Backend backend, uint32_t tile_rows) {
  return backend == Backend::kTiled ? tile_rows : kFlashSlotAlignment;
}

// Sets *num_slots to the slots `backend`'s layout stores `capacity` positions in (tiles of
// `tile_rows` for tiled, an odd number of 32-slot tiles for flash), or returns false on
// overflow.
inline bool NumSlotsFor(Backend backend, uint32_t tile_rows, uint64_t capacity,
                        uint64_t* num_slots) {
  if (backend == Backend::kFlash) return detail::FlashNumSlots(capacity, num_slots);
  return detail::TiledNumSlots(capacity, tile_rows, num_slots);
}

}  // namespace kvring

#endif  // KVRING_LAYOUTS_PADDING_H_
