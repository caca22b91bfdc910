// kvring/kv_view.h: a read-only view of one layer's stored K and V, as RingKV, GlobalKV,
// KVCache and KVPool hand it to attention, and the stamp that lets attention refuse a view its
// storage has since changed (ViewStamp). Trivially copyable, never allocates; valid until the
// next write to its storage or the storage's destruction.
#ifndef KVRING_KV_VIEW_H_
#define KVRING_KV_VIEW_H_

#include <cstdint>
#include <type_traits>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/index/positions.h"
#include "kvring/status.h"
#include "kvring/visibility.h"

namespace kvring {

// The calls that end the views a storage handed out (they move, free or overwrite rows).
enum class ViewEnd : uint8_t {
  kNone = 0,
  kAppend,    // AppendF32 / AppendBF16 (a ring may overwrite, a block table may move)
  kRollback,  // Rollback, AbandonStep
  kClear,     // Clear
  kGrow,      // KVCache::Grow, or an append that grew the rings
  kRestore,   // a KVCache move-assignment, both sides (a snapshot restored into a cache)
  kFree,      // KVPool::Free
  kResize,    // KVPool::Resize, or a Reserve or append that resized the rings
  kReserve,   // KVPool::Reserve that took or copied blocks
  kLoad,      // LoadState (io/state_io.h) into the cache or sequence
};

// The epoch of a storage (a KVCache, or one sequence slot of a KVPool): every call that ends
// views advances it and records itself, so that a stale view can name the call that ended
// it. Lives at a fixed address for the storage's lifetime.
struct ViewEpoch {
  static constexpr uint64_t kHistory = 8;  // the calls remembered

  uint64_t count = 0;
  uint32_t generation = 0;       // a KVPool slot's: advanced when its sequence is freed
  ViewEnd calls[kHistory] = {};  // calls[c % kHistory]: the call that made count c

  void Advance(ViewEnd call) {
    ++count;
    calls[count % kHistory] = call;
  }
  // Returns the call that ended views taken at `taken` (< count), if still remembered.
  ViewEnd EndedBy(uint64_t taken) const {
    return count - taken <= kHistory ? calls[(taken + 1) % kHistory] : ViewEnd::kNone;
  }
};

// What makes a view checkable: the epoch of its storage when it was taken, and which layer (and
// pool sequence) it reads, for the refusal's message. A view whose epoch has moved on is stale:
// the checked attention entry points refuse it (kStaleView) in O(1). epoch is null for views
// that carry no stamp (RingKV, GlobalKV, views made by hand): those are not checked.
struct ViewStamp {
  const ViewEpoch* epoch = nullptr;
  uint64_t count = 0;
  uint64_t layer = 0;
  uint32_t sequence = kNoSequence;  // the KVPool sequence's index; kNoSequence for a KVCache
  uint32_t generation = 0;

  static constexpr uint32_t kNoSequence = 0xFFFFFFFFu;

  // Returns the stamp of a view of `layer` taken now from the storage of `epoch` (of pool
  // sequence `sequence` and `generation`).
  static ViewStamp Of(const ViewEpoch& epoch, uint64_t layer, uint32_t sequence = kNoSequence,
                      uint32_t generation = 0) {
    ViewStamp stamp;
    stamp.epoch = &epoch;
    stamp.count = epoch.count;
    stamp.layer = layer;
    stamp.sequence = sequence;
    stamp.generation = generation;
    return stamp;
  }

  // Returns whether the storage has not changed since the view was taken (true unstamped).
  bool Current() const { return epoch == nullptr || epoch->count == count; }
  // Returns the refusal of a stale view, naming the layer, the sequence and the call that
  // ended it; kOk when Current(). O(1); does not allocate.
  Result Check() const {
    if (Current()) return Result();
    if (sequence == kNoSequence) {
      return Result::Refused(Status::kStaleView, CacheFormat(epoch->EndedBy(count)), layer);
    }
    const ViewEnd call = epoch->generation != generation ? ViewEnd::kFree : epoch->EndedBy(count);
    return Result::Refused(Status::kStaleView, PoolFormat(call), layer, uint64_t{sequence},
                           uint64_t{generation});
  }

 private:
  static const char* CacheFormat(ViewEnd call) {
    switch (call) {
      case ViewEnd::kAppend:
        return "view of layers[%llu]: the cache was appended to after the view was taken; take "
               "views after the last write";
      case ViewEnd::kRollback:
        return "view of layers[%llu]: the cache was rolled back (Rollback or AbandonStep) after "
               "the view was taken";
      case ViewEnd::kClear:
        return "view of layers[%llu]: the cache was cleared after the view was taken";
      case ViewEnd::kGrow:
        return "view of layers[%llu]: the cache's rings grew (Grow, or an append of a larger "
               "batch) after the view was taken";
      case ViewEnd::kRestore:
        return "view of layers[%llu]: a restore moved the cache's contents (another cache was "
               "move-assigned into it, or it into another) after the view was taken";
      case ViewEnd::kLoad:
        return "view of layers[%llu]: a saved state was loaded into the cache (LoadState) after "
               "the view was taken";
      default:
        return "view of layers[%llu]: the cache changed more than 8 times after the view was "
               "taken";
    }
  }
  static const char* PoolFormat(ViewEnd call) {
    switch (call) {
      case ViewEnd::kAppend:
        return "view of layers[%llu] of sequence %llu (generation %llu): the sequence was "
               "appended to after the view was taken; take views after the last write";
      case ViewEnd::kRollback:
        return "view of layers[%llu] of sequence %llu (generation %llu): the sequence was "
               "rolled back (Rollback or AbandonStep) after the view was taken";
      case ViewEnd::kClear:
        return "view of layers[%llu] of sequence %llu (generation %llu): the sequence was "
               "cleared after the view was taken";
      case ViewEnd::kFree:
        return "view of layers[%llu] of sequence %llu (generation %llu): the sequence was "
               "freed after the view was taken";
      case ViewEnd::kResize:
        return "view of layers[%llu] of sequence %llu (generation %llu): the sequence's rings "
               "were resized (Resize, or a Reserve or append of a larger batch) after the view "
               "was taken";
      case ViewEnd::kReserve:
        return "view of layers[%llu] of sequence %llu (generation %llu): Reserve took or copied "
               "blocks of the sequence after the view was taken";
      case ViewEnd::kLoad:
        return "view of layers[%llu] of sequence %llu (generation %llu): a saved state was "
               "loaded into the sequence (LoadState) after the view was taken";
      default:
        return "view of layers[%llu] of sequence %llu (generation %llu): the sequence changed "
               "more than 8 times after the view was taken";
    }
  }
};

// Positions live in slot pos % num_slots (of block BlockOf(pos), for paged storage).
// num_slots is a multiple of the layout's kTileSlots, so a position's lane in its tile is
// pos % kTileSlots in ring, flat and paged storage alike, and every position-aligned tile is
// contiguous in each; flat storage never wraps.
template <typename Layout>
struct KVView {
  const BF16* k = nullptr;  // element offsets: layout.K(); format kBF16
  const BF16* v = nullptr;  // element offsets: layout.V(); nullptr when there is no V (MLA)
  // Format::kInt8 or kInt8Hadamard (kvring/formats/int8.h): the elements at the same offsets
  // as int8, and one f32 scale per slot and kv_head of each stream, [kv_head][slot]
  // (ScaleOffset); k and v are then null. The stored value of an element is its scale times
  // it; kInt8Hadamard's K is rotated (formats/hadamard.h), and attention rotates the queries.
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
  // What lets attention refuse the view once its storage has changed (KVCache and KVPool
  // views; unstamped views are not checked).
  ViewStamp stamp;

  uint64_t NumSlots() const { return layout.Shape().num_slots; }
  // Returns where the scale of `slot` of `kv_head` sits in k_scales and v_scales.
  uint64_t ScaleOffset(uint64_t slot, uint32_t kv_head) const {
    return layout.Shape().ScaleOffset(slot, kv_head);
  }
  // Returns whether the view has a V stream (MLA latents have none).
  bool HasV() const { return IsInt8(format) ? v_int8 != nullptr : v != nullptr; }
  bool Holds(uint64_t pos) const { return pos >= first_pos && pos < end_pos; }
  // Returns the slot of a held position (in its block, for paged storage).
  uint64_t SlotOf(uint64_t pos) const {
    KVRING_DASSERT(Holds(pos));
    return SlotOfPos(pos, NumSlots());
  }
  bool Paged() const { return blocks != nullptr; }
  // Returns the block of the store that holds the tile of `pos` (0 unless paged). `pos` may
  // lie before first_pos inside the first held tile.
  uint64_t BlockOf(uint64_t pos) const { return BlockOfPos(blocks, pos, NumSlots()); }
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
