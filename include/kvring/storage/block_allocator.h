// kvring/storage/block_allocator.h: the block ids of a KVPool's paged layers, with reference
// counts: which blocks are free, which one or more sequences hold, and how many are shared.
// Internal to kvring's storage; no K/V, no allocation after construction.
#ifndef KVRING_STORAGE_BLOCK_ALLOCATOR_H_
#define KVRING_STORAGE_BLOCK_ALLOCATOR_H_

#include <cstdint>
#include <vector>

#include "kvring/base.h"

namespace kvring {
namespace detail {

class BlockAllocator {
 public:
  BlockAllocator() = default;
  // num_blocks ids, all free; the lowest ids are handed out first (a small pool touches
  // the start of its stores only).
  explicit BlockAllocator(uint32_t num_blocks) : refs_(num_blocks, 0) {
    free_.reserve(num_blocks);
    for (uint32_t id = num_blocks; id > 0; --id) free_.push_back(id - 1);
  }

  uint64_t NumBlocks() const { return refs_.size(); }
  uint64_t NumFree() const { return free_.size(); }
  uint64_t NumInUse() const { return refs_.size() - free_.size(); }
  // Blocks held by more than one sequence.
  uint64_t NumShared() const { return shared_; }
  uint32_t RefCount(uint32_t id) const {
    KVRING_DASSERT(id < refs_.size());
    return refs_[id];
  }

  // Takes a free block (reference count 1). Requires NumFree() > 0.
  uint32_t Take() {
    KVRING_CHECK(!free_.empty());
    const uint32_t id = free_.back();
    free_.pop_back();
    KVRING_DASSERT(refs_[id] == 0);
    refs_[id] = 1;
    return id;
  }
  // Adds a holder to a block in use.
  void Share(uint32_t id) {
    KVRING_DASSERT(id < refs_.size() && refs_[id] > 0);
    if (refs_[id] == 1) ++shared_;
    ++refs_[id];
  }
  // Drops a holder; the last one frees the block.
  void Release(uint32_t id) {
    KVRING_CHECK(id < refs_.size() && refs_[id] > 0);  // a double free corrupts every holder
    --refs_[id];
    if (refs_[id] == 1) --shared_;
    if (refs_[id] == 0) free_.push_back(id);
  }

 private:
  std::vector<uint32_t> refs_;
  std::vector<uint32_t> free_;  // a stack: the most recently freed (warmest) block goes first
  uint64_t shared_ = 0;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_BLOCK_ALLOCATOR_H_
