// kvring/storage/block_store.h: the paged layers of a KVPool: one store of equal blocks per
// paged owner, one set of block ids (with reference counts) that every paged owner shares,
// and what a sequence's block table does with them: take the blocks a step reaches, share
// them with a fork, copy a shared block before the first write into it, release them, write
// and locate rows and fill a paged view. The budget (how many blocks a caller may take) is
// the pool's; this is where a prefix cache or an offloader finds the blocks.
#ifndef KVRING_STORAGE_BLOCK_STORE_H_
#define KVRING_STORAGE_BLOCK_STORE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/index/block_table.h"
#include "kvring/kv_view.h"
#include "kvring/storage/block_allocator.h"
#include "kvring/storage/layer_buffers.h"
#include "kvring/storage/layer_rows.h"
#include "kvring/storage/storage_spec.h"

namespace kvring {
namespace detail {

template <typename Layout>
class BlockStore {
 public:
  BlockStore() = default;
  explicit BlockStore(uint64_t block_slots) : block_slots_(block_slots) {}

  // Adds paged owner `layer`, whose rows `spec` describes (shape.num_slots: a block's slots)
  // and whose block of every position costs `block_bytes`.
  void AddLayer(size_t layer, const StorageSpec& spec, uint64_t block_bytes) {
    Paged paged;
    paged.layer = layer;
    paged.spec = spec;
    layers_.push_back(std::move(paged));
    block_bytes_ += block_bytes;
  }
  // Reserves `num_blocks` blocks of every paged owner (zeroed with calloc: pages are committed
  // as blocks are first written), all free. Returns false, setting *failed to the layer whose
  // store could not be allocated.
  bool Allocate(uint32_t num_blocks, size_t* failed) {
    for (Paged& paged : layers_) {
      if (!paged.store.Allocate(paged.spec.shape, paged.spec.format, num_blocks,
                                paged.spec.huge_pages)) {
        *failed = paged.layer;
        return false;
      }
    }
    blocks_ = BlockAllocator(num_blocks);
    return true;
  }

  uint64_t BlockSlots() const { return block_slots_; }
  // Bytes of one block of every paged owner: what one block id costs the budget.
  uint64_t BlockBytes() const { return block_bytes_; }
  size_t NumLayers() const { return layers_.size(); }
  bool Empty() const { return layers_.empty(); }
  // The spec of paged owner `paged` (index among the paged owners).
  const StorageSpec& Spec(size_t paged) const { return layers_[paged].spec; }
  const BlockAllocator& Ids() const { return blocks_; }
  // Returns the bytes every store reserved.
  uint64_t AllocatedBytes() const {
    uint64_t bytes = 0;
    for (const Paged& paged : layers_) bytes += paged.store.AllocatedBytes();
    return bytes;
  }

  // Returns the blocks making `table` cover [pos, pos + num_tokens) with blocks of its own
  // takes: the entries it lacks, and a copy of each shared block it writes into (only a
  // table's last block can be partly filled, so at most one).
  uint64_t BlocksToTake(const BlockTable& table, uint64_t pos, uint64_t num_tokens) const {
    const uint64_t needed = table.EntriesFor(pos + num_tokens);
    const uint64_t held = table.Size();
    uint64_t blocks = needed > held ? needed - held : 0;
    for (uint64_t i = table.EntryOf(pos); i < std::min(needed, held); ++i) {
      blocks += blocks_.RefCount(table[i]) > 1;
    }
    return blocks;
  }
  // Makes `table` cover [pos, pos + num_tokens) with blocks of its own: copies the shared
  // blocks it writes into and takes the entries it lacks. The caller checked that
  // BlocksToTake(...) blocks are free and allowed.
  void Cover(BlockTable* table, uint64_t pos, uint64_t num_tokens) {
    KVRING_DASSERT(BlocksToTake(*table, pos, num_tokens) <= blocks_.NumFree());
    const uint64_t needed = table->EntriesFor(pos + num_tokens);
    const uint64_t last = std::min<uint64_t>(needed, table->Size());
    for (uint64_t i = table->EntryOf(pos); i < last; ++i) {
      if (blocks_.RefCount((*table)[i]) > 1) CopyOnWrite(table, i);
    }
    while (table->Size() < needed) table->Push(blocks_.Take());
  }
  // Adds a holder to every block of `table` (a fork's copy of it).
  void Share(const BlockTable& table) {
    for (uint32_t block : table.Blocks()) blocks_.Share(block);
  }
  // Drops `table`'s hold on its entries from `first` on (blocks no other table holds become
  // free).
  void ReleaseFrom(BlockTable* table, uint64_t first) {
    while (table->Size() > first) blocks_.Release(table->Pop());
  }

  // Writes rows k and v (row strides in elements) of [pos, pos + num_tokens) of paged owner
  // `paged` into the blocks of `table`, which covers them with blocks of its own.
  template <typename T>
  void Write(size_t paged, const BlockTable& table, uint64_t pos, const T* k, const T* v,
             uint64_t num_tokens, uint64_t k_stride, uint64_t v_stride) const {
    const LayerBuffers<Layout>& store = layers_[paged].store;
    table.ForEachRun(pos, num_tokens,
                     [&](uint32_t block, uint64_t slot, uint64_t offset, uint64_t count) {
                       store.Rows(block).Write(slot, k + offset * k_stride,
                                               v != nullptr ? v + offset * v_stride : v, k_stride,
                                               v_stride, count, /*stream=*/false);
                     });
  }
  // Returns the rows of the block of `table` that holds `pos` of paged owner `paged`, and sets
  // *slot to the position's slot in it.
  LayerRows<Layout> RowsOf(size_t paged, const BlockTable& table, uint64_t pos,
                           uint64_t* slot) const {
    *slot = table.SlotOf(pos);
    return layers_[paged].store.Rows(table.BlockOf(pos));
  }
  // Fills `view` with paged owner `paged`'s blocks of `table`, holding [0, end) (nothing
  // while the table is empty).
  void FillView(size_t paged, const BlockTable& table, uint64_t end, KVView<Layout>* view) const {
    layers_[paged].store.Rows(0).FillView(view);
    view->first_pos = 0;
    view->blocks = table.Data();
    view->end_pos = view->blocks == nullptr ? 0 : end;
  }

  // Makes entry `entry` of `table` name `block` (held by another table) instead of its own
  // block when every paged owner's rows of the two are equal byte for byte, releasing its own;
  // returns whether the entry names `block` now.
  bool ShareIfEqual(BlockTable* table, uint64_t entry, uint32_t block) {
    const uint32_t own = (*table)[entry];
    if (own == block) return true;
    for (const Paged& paged : layers_) {
      if (!paged.store.SameBlocks(own, block)) return false;
    }
    blocks_.Share(block);
    blocks_.Release(own);
    table->Replace(entry, block);
    return true;
  }

 private:
  struct Paged {
    size_t layer = 0;
    StorageSpec spec;  // shape.num_slots: one block's
    LayerBuffers<Layout> store;
  };

  // Gives `table` its own copy of entry `entry` (a block another table holds): takes a free
  // block and copies every paged owner's rows of the shared one into it.
  void CopyOnWrite(BlockTable* table, uint64_t entry) {
    const uint32_t shared = (*table)[entry];
    const uint32_t own = blocks_.Take();
    for (const Paged& paged : layers_) {
      paged.store.Rows(shared).CopySlotsTo(0, paged.store.Rows(own), 0, block_slots_);
    }
    blocks_.Release(shared);
    table->Replace(entry, own);
  }

  uint64_t block_slots_ = 0;
  uint64_t block_bytes_ = 0;
  std::vector<Paged> layers_;
  BlockAllocator blocks_;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_BLOCK_STORE_H_
