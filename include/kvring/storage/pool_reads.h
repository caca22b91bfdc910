// kvring/storage/pool_reads.h: what an engine reads of a KVPool's sequences: each layer's live
// range and format, its rows, the views attention takes, and the blocks and ring bytes a
// sequence holds. The read side of KVPool (storage/kv_pool.h), which derives from it; it
// changes nothing.
#ifndef KVRING_STORAGE_POOL_READS_H_
#define KVRING_STORAGE_POOL_READS_H_

#include <cstddef>
#include <cstdint>

#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/indexer_view.h"
#include "kvring/kv_view.h"
#include "kvring/status.h"
#include "kvring/storage/layer_rows.h"
#include "kvring/storage/layer_table.h"
#include "kvring/storage/sequence_table.h"

namespace kvring {
namespace detail {

// The read calls of `Pool` (KVPool<Layout>, which befriends this).
template <typename Layout, typename Pool>
class PoolReads {
 public:
  // Live range of `layer` (its owner's) in `id`: [FirstPos, EndPos). kUnknownSequence for an
  // id not live, kBadArgument for a layer past the model. O(1).
  ValueResult<uint64_t> FirstPos(SequenceId id, size_t layer) const {
    const Result known = CheckQuery(id, layer);
    if (!known.ok()) return known;
    const Pool& pool = Self();
    if (pool.IsPaged(layer)) return uint64_t{0};
    return pool.sequences_.Get(id).rings[pool.table_.OwnerEntry(layer).storage].Index().FirstPos();
  }
  ValueResult<uint64_t> EndPos(SequenceId id, size_t layer) const {
    const Result known = CheckQuery(id, layer);
    if (!known.ok()) return known;
    return Self().sequences_.Get(id).OwnerEnd(Self().table_.OwnerEntry(layer));
  }
  Format GetFormat(size_t layer) const {
    const Pool& pool = Self();
    const LayerEntry& entry = pool.table_.OwnerEntry(layer);
    return pool.IsPaged(layer) ? pool.paged_.Spec(entry.storage).format
                               : pool.rings_.Spec(entry.storage).format;
  }

  // Copies the stored BF16 row of `pos` of `layer` (its owner's) in `id`, as
  // KVCache::ReadRow does; kUnknownSequence for an id not live. Cost: one row.
  Result ReadRow(SequenceId id, size_t layer, uint64_t pos, BF16* k_out, BF16* v_out) const {
    return Read(id, layer, pos, RowRead::BF16s(k_out, v_out));
  }
  // As KVCache::ReadRowInt8.
  Result ReadRowInt8(SequenceId id, size_t layer, uint64_t pos, int8_t* k_out, float* k_scales_out,
                     int8_t* v_out, float* v_scales_out) const {
    return Read(id, layer, pos, RowRead::Int8s(k_out, k_scales_out, v_out, v_scales_out));
  }
  // As KVCache::ReadRowF32.
  Result ReadRowF32(SequenceId id, size_t layer, uint64_t pos, float* k_out, float* v_out) const {
    return Read(id, layer, pos, RowRead::F32s(k_out, v_out));
  }

  // Returns the view `layer` of `id` attends over: a ring's, or a paged layer's blocks
  // (KVView::blocks), under the layer's own visibility; kUnknownSequence for an id not live,
  // kBadArgument for a layer past the model. The view ends at the next call that writes `id`
  // (an append to any of its layers, Rollback, Clear, Resize, a Reserve that grows its rings
  // or takes blocks, Free) or at the pool's destruction; attention refuses an ended view
  // (kStaleView, naming the call) in O(1). Writes to other sequences, forks included, never
  // end it. O(1); does not allocate.
  ValueResult<KVView<Layout>> View(SequenceId id, size_t layer) const {
    const Result known = CheckQuery(id, layer);
    if (!known.ok()) return known;
    const KVView<Layout> view = StoredView(id, layer);
    return Self().table_.OwnerEntry(layer).indexer_dim != 0 ? WithoutIndexer(view) : view;
  }

  // As KVCache::IndexerKeys, of `id` (a paged layer's keys through KVView's blocks); the
  // refusals of View.
  ValueResult<IndexerKeysView> IndexerKeys(SequenceId id, size_t layer) const {
    const Result known = CheckQuery(id, layer);
    if (!known.ok()) return known;
    const Pool& pool = Self();
    if (!pool.table_.Attends(layer) || pool.table_.OwnerEntry(layer).indexer_dim == 0) {
      return IndexerKeysView();
    }
    return IndexerKeysOf(StoredView(id, layer));
  }

  // Returns the blocks `id`'s table holds (shared ones included); kUnknownSequence for an id
  // not live.
  ValueResult<uint64_t> BlocksOf(SequenceId id) const {
    const Result known = Self().sequences_.Check(id);
    if (!known.ok()) return known;
    return uint64_t{Self().sequences_.Get(id).blocks.Size()};
  }
  // Returns the bytes `id`'s rings take now; kUnknownSequence for an id not live.
  ValueResult<uint64_t> RingBytesOf(SequenceId id) const {
    const Result known = Self().sequences_.Check(id);
    if (!known.ok()) return known;
    return Self().sequences_.Get(id).ring_bytes;
  }
  // Returns the reference count of block `block` (0: free), for tests and diagnostics.
  uint32_t BlockRefCount(uint32_t block) const { return Self().paged_.Ids().RefCount(block); }

 protected:
  // Returns the storage of `layer`'s owner in live `id` under `layer`'s own visibility,
  // stamped: a DSA latent's indexer keys as its V stream (View drops them, IndexerKeys reads
  // them).
  KVView<Layout> StoredView(SequenceId id, size_t layer) const {
    const Pool& pool = Self();
    KVView<Layout> view = pool.sequences_.Get(id).View(
        pool.table_.OwnerEntry(layer), pool.table_.Entry(layer).visibility, pool.paged_);
    view.stamp = ViewStamp::Of(pool.sequences_.Epoch(id), layer, id.index, id.generation);
    return view;
  }
  // The refusals of a per-layer query: kUnknownSequence, then kBadArgument for the layer.
  Result CheckQuery(SequenceId id, size_t layer) const {
    const Result known = Self().sequences_.Check(id);
    if (!known.ok()) return known;
    return Self().table_.CheckLayer(layer);
  }

  // The one read behind ReadRow, ReadRowInt8 and ReadRowF32: of `pos` of `layer` (its
  // owner's) in `id`.
  Result Read(SequenceId id, size_t layer, uint64_t pos, const RowRead& read) const {
    const Result known = CheckQuery(id, layer);
    if (!known.ok()) return known;
    const Pool& pool = Self();
    return pool.sequences_.Get(id).Read(pool.table_.OwnerEntry(layer), layer, pos, read,
                                        pool.paged_);
  }

 private:
  const Pool& Self() const { return static_cast<const Pool&>(*this); }
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_POOL_READS_H_
