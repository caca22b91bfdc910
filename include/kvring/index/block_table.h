// kvring/index/block_table.h: the block table of one sequence's paged layers: entry i names
// the block of a block store that holds positions [i * block_slots, (i + 1) * block_slots).
// Positions only: which block ids are free, shared or copied is the block store's
// (storage/block_store.h). Every paged layer of a sequence shares its table.
#ifndef KVRING_INDEX_BLOCK_TABLE_H_
#define KVRING_INDEX_BLOCK_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvring/base.h"
#include "kvring/index/positions.h"

namespace kvring {

class BlockTable {
 public:
  BlockTable() = default;
  // An empty table of blocks of `block_slots` positions (>= 1).
  explicit BlockTable(uint64_t block_slots) : block_slots_(block_slots) {
    KVRING_DASSERT(block_slots >= 1);
  }

  uint64_t BlockSlots() const { return block_slots_; }
  // Entries held: the table covers positions [0, Size() * BlockSlots()).
  size_t Size() const { return blocks_.size(); }
  // The entries, as KVView::blocks reads them; null when empty.
  const uint32_t* Data() const { return blocks_.empty() ? nullptr : blocks_.data(); }
  uint32_t operator[](size_t entry) const { return blocks_[entry]; }

  // Returns the entry whose block holds `pos`, and that block.
  uint64_t EntryOf(uint64_t pos) const { return BlockIndexOf(pos, block_slots_); }
  uint32_t BlockOf(uint64_t pos) const {
    KVRING_DASSERT(EntryOf(pos) < blocks_.size());
    return blocks_[EntryOf(pos)];
  }
  // Returns the slot of `pos` in its block.
  uint64_t SlotOf(uint64_t pos) const { return SlotOfPos(pos, block_slots_); }
  // Returns the entries that cover positions [0, positions).
  uint64_t EntriesFor(uint64_t positions) const { return BlocksFor(positions, block_slots_); }

  // Calls fn(block, slot, offset, count) for each run of [pos, pos + num_tokens) inside one
  // block, oldest first: `count` positions from pos + offset, from `slot` of `block`. The
  // table must cover them.
  template <typename Fn>
  void ForEachRun(uint64_t pos, uint64_t num_tokens, const Fn& fn) const {
    ForEachSlotRun(pos, num_tokens, block_slots_,
                   [&](uint64_t slot, uint64_t offset, uint64_t count) {
                     fn(BlockOf(pos + offset), slot, offset, count);
                   });
  }

  // Appends an entry for `block`; removes and returns the last entry; replaces one.
  void Push(uint32_t block) { blocks_.push_back(block); }
  uint32_t Pop() {
    KVRING_DASSERT(!blocks_.empty());
    const uint32_t block = blocks_.back();
    blocks_.pop_back();
    return block;
  }
  void Replace(size_t entry, uint32_t block) { blocks_[entry] = block; }
  const std::vector<uint32_t>& Blocks() const { return blocks_; }

 private:
  uint64_t block_slots_ = 1;
  std::vector<uint32_t> blocks_;
};

}  // namespace kvring

#endif  // KVRING_INDEX_BLOCK_TABLE_H_
