// kvring/index/positions.h: the one home of position arithmetic. A position lives in slot
// pos % num_slots of its storage: a ring wraps there, flat storage never reaches it, and a
// paged layer's block of num_slots slots holds the positions of one table entry,
// pos / num_slots. Every level asks these: the indexes, the storage's writes and reads, the
// views and the kernels' tile addresses.
#ifndef KVRING_INDEX_POSITIONS_H_
#define KVRING_INDEX_POSITIONS_H_

#include <cstdint>

namespace kvring {

// Returns the slot of `pos` in storage (or a block) of `num_slots` slots.
constexpr uint64_t SlotOfPos(uint64_t pos, uint64_t num_slots) { return pos % num_slots; }

// Returns the entry of a block table whose block holds `pos` (blocks of `block_slots`).
constexpr uint64_t BlockIndexOf(uint64_t pos, uint64_t block_slots) { return pos / block_slots; }

// Returns the block that holds `pos` in the block table `blocks` (blocks of `block_slots`), or
// 0 for storage that is not paged (`blocks` null: one run of slots).
inline uint64_t BlockOfPos(const uint32_t* blocks, uint64_t pos, uint64_t block_slots) {
  return blocks != nullptr ? blocks[BlockIndexOf(pos, block_slots)] : 0;
}

// Returns the blocks of `block_slots` that hold positions [0, positions).
constexpr uint64_t BlocksFor(uint64_t positions, uint64_t block_slots) {
  return positions / block_slots + (positions % block_slots != 0);
}

// Returns the first position of the position-aligned tile of `tile_slots` that holds `pos`.
constexpr uint64_t TileStart(uint64_t pos, uint64_t tile_slots) { return pos - pos % tile_slots; }

// Calls fn(slot, offset, count) for each run of consecutive slots that positions
// [pos, pos + num_tokens) occupy in storage (or blocks) of `num_slots` slots, oldest first:
// `count` positions from pos + offset, stored from `slot` on. A run ends where the slots
// wrap (or the block ends: the block of pos + offset is BlockIndexOf(pos + offset, num_slots)).
template <typename Fn>
inline void ForEachSlotRun(uint64_t pos, uint64_t num_tokens, uint64_t num_slots, const Fn& fn) {
  for (uint64_t offset = 0; offset < num_tokens;) {
    const uint64_t slot = SlotOfPos(pos + offset, num_slots);
    const uint64_t room = num_slots - slot;
    const uint64_t count = num_tokens - offset < room ? num_tokens - offset : room;
    fn(slot, offset, count);
    offset += count;
  }
}

}  // namespace kvring

#endif  // KVRING_INDEX_POSITIONS_H_
