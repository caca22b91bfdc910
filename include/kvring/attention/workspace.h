// kvring/attention/workspace.h: the caller-owned memory attention calls run in
// (AttentionWorkspace), and the entries and plan of a many-sequence call (AttentionEntry,
// AttentionManyWork).
#ifndef KVRING_ATTENTION_WORKSPACE_H_
#define KVRING_ATTENTION_WORKSPACE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include "kvring/attention/check.h"
#include "kvring/attention/options.h"
#include "kvring/attention/work.h"
#include "kvring/base.h"
#include "kvring/detail/checked_math.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"

namespace kvring {

// The memory one attention call works in, owned by the caller and reused from call to call:
// each thread's scratch and the partial states of a call that splits its KV. Entry points
// grow it when a call needs more than any call before it (Reserve), so a decode loop
// allocates only on its first step, or never after the engine reserves its largest call's
// WorkspaceFloats up front. Move-only; one call at a time per workspace.
class AttentionWorkspace {
 public:
  AttentionWorkspace() = default;
  AttentionWorkspace(AttentionWorkspace&& other) noexcept { *this = std::move(other); }
  AttentionWorkspace& operator=(AttentionWorkspace&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = other.data_;
      num_floats_ = other.num_floats_;
      other.data_ = nullptr;
      other.num_floats_ = 0;
    }
    return *this;
  }
  AttentionWorkspace(const AttentionWorkspace&) = delete;
  AttentionWorkspace& operator=(const AttentionWorkspace&) = delete;
  ~AttentionWorkspace() { Release(); }

  // Makes room for `num_floats` floats (64-byte aligned), keeping nothing of the old
  // contents. Allocates only when num_floats exceeds NumFloats(); returns false (and keeps
  // the old buffer) if that allocation fails.
  bool Reserve(uint64_t num_floats) {
    if (num_floats <= num_floats_) return true;
    if (num_floats > std::numeric_limits<size_t>::max() / sizeof(float)) return false;
    void* data = ::operator new (static_cast<size_t>(num_floats) * sizeof(float),
                                 std::align_val_t{kAlignment}, std::nothrow);
    if (data == nullptr) return false;
    Release();
    data_ = static_cast<float*>(data);
    num_floats_ = num_floats;
    return true;
  }
  float* Data() { return data_; }
  uint64_t NumFloats() const { return num_floats_; }

 private:
  static constexpr size_t kAlignment = 64;
  void Release() {
    if (data_ != nullptr) ::operator delete (data_, std::align_val_t{kAlignment});
    data_ = nullptr;
    num_floats_ = 0;
  }

  float* data_ = nullptr;
  uint64_t num_floats_ = 0;
};

// One sequence's part of a many-sequence attention call (AttentionMany in
// kvring/ops/attention-inl.h and kvring/dispatch.h): a view and the queries attending it.
// Every entry of one call shares the call's options (one layer of many sequences).
template <typename Layout>
struct AttentionEntry {
  KVView<Layout> kv;
  AttentionBatch batch;
};

// The plan of a many-sequence call: each entry's AttentionWork (exactly the plan of a call
// of that entry alone) and where its items, merges and partial states start in the call's
// one list of work items (sequence x query block x kv_head x KV split). Lives at the start
// of the call's workspace; built by Init in memory of HeaderFloats(num_entries) floats.
class AttentionManyWork {
 public:
  static_assert(std::is_trivially_copyable<AttentionWork>::value,
                "plans live in a workspace's floats");
  // Floats of the header (plans and offsets) for `num_entries` entries, a multiple of 16.
  static uint64_t HeaderFloats(uint64_t num_entries) {
    const uint64_t bytes =
        num_entries * sizeof(AttentionWork) + 3 * (num_entries + 1) * sizeof(uint64_t);
    return (bytes + 63) / 64 * 16;
  }
  // Plans `num_entries` entries (each passing CheckAttention) with `options` into `header`
  // (HeaderFloats(num_entries) floats, 64-byte aligned). O(num_entries); no allocation.
  template <typename Layout>
  static AttentionManyWork Init(const AttentionEntry<Layout>* entries, uint64_t num_entries,
                                const AttentionOptions& options, float* header) {
    AttentionManyWork many;
    many.num_entries_ = num_entries;
    many.plans_ = reinterpret_cast<AttentionWork*>(header);
    many.item_begin_ = reinterpret_cast<uint64_t*>(many.plans_ + num_entries);
    many.merge_begin_ = many.item_begin_ + num_entries + 1;
    many.partial_begin_ = many.merge_begin_ + num_entries + 1;
    many.item_begin_[0] = many.merge_begin_[0] = many.partial_begin_[0] = 0;
    for (uint64_t e = 0; e < num_entries; ++e) {
      AttentionWork* work = new (many.plans_ + e)
          AttentionWork(AttentionWork::Plan(entries[e].kv, entries[e].batch, options));
      many.item_begin_[e + 1] = many.item_begin_[e] + work->NumItems();
      many.merge_begin_[e + 1] = many.merge_begin_[e] + work->NumMerges();
      many.partial_begin_[e + 1] = many.partial_begin_[e] + work->PartialFloats();
      if (work->ScratchFloats() > many.scratch_floats_) {
        many.scratch_floats_ = work->ScratchFloats();
      }
    }
    return many;
  }
  uint64_t NumEntries() const { return num_entries_; }
  const AttentionWork& Plan(uint64_t entry) const { return plans_[entry]; }
  uint64_t NumItems() const { return item_begin_[num_entries_]; }
  uint64_t NumMerges() const { return merge_begin_[num_entries_]; }
  uint64_t PartialFloats() const { return partial_begin_[num_entries_]; }
  uint64_t PartialBegin(uint64_t entry) const { return partial_begin_[entry]; }
  // The most scratch one entry's items need: every thread's share.
  uint64_t ScratchFloats() const { return scratch_floats_; }
  // Returns the entry of call-wide item `item` and sets *local to its index in that entry's
  // plan. O(log entries).
  uint64_t ItemEntry(uint64_t item, uint64_t* local) const {
    return Find(item_begin_, item, local);
  }
  uint64_t MergeEntry(uint64_t merge, uint64_t* local) const {
    return Find(merge_begin_, merge, local);
  }

 private:
  uint64_t Find(const uint64_t* begin, uint64_t index, uint64_t* local) const {
    KVRING_DASSERT(index < begin[num_entries_]);
    // The last entry whose begin is <= index (entries without items share a begin).
    uint64_t lo = 0, hi = num_entries_;
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (begin[mid] <= index) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    *local = index - begin[lo];
    return lo;
  }

  uint64_t num_entries_ = 0;
  AttentionWork* plans_ = nullptr;
  uint64_t* item_begin_ = nullptr;
  uint64_t* merge_begin_ = nullptr;
  uint64_t* partial_begin_ = nullptr;
  uint64_t scratch_floats_ = 0;
};

// The largest attention calls an engine will make over views of one shape: what
// AttentionWorkspaceFloats bounds.
struct AttentionBound {
  uint32_t num_q_heads = 0;  // q heads of every entry
  uint32_t max_queries = 1;  // queries of one entry at most (1 for decode)
  uint64_t context = 0;      // every query's position is below it
  uint64_t max_entries = 1;  // entries of one AttentionMany at most (sequences of a step)
  uint32_t num_threads = 1;  // the runner's NumThreads() (0: 1)
};

// Returns the floats of workspace in which every AttentionMany of up to bound.max_entries
// entries, and every Attention call, runs without growing it: views of `shape` (ring, flat
// or paged storage of Layout), up to bound.max_queries queries of bound.num_q_heads heads
// each below bound.context, with `options`, on up to bound.num_threads threads. Reserve it
// once (AttentionWorkspace::Reserve) and no step of a decode loop allocates. Exact for a call
// of max_entries entries of max_queries queries each at the context's end (splits and rows
// grow with positions and queries). Refuses (kBadArgument) a shape, options or bound no call
// could take, with CheckAttention's message. O(1); does not allocate.
template <typename Layout>
ValueResult<uint64_t> AttentionWorkspaceFloats(const KVShape& shape,
                                               const AttentionOptions& options,
                                               const AttentionBound& bound) {
  if (bound.max_queries == 0 || bound.max_entries == 0 || bound.max_entries > (1ull << 32) ||
      bound.context < bound.max_queries) {
    return Result::Refused(Status::kBadArgument,
                           "bound: max_queries %llu and max_entries %llu must be positive (entries "
                           "at most 2^32), and the context %llu at least max_queries",
                           uint64_t{bound.max_queries}, bound.max_entries, bound.context);
  }
  // The worst entry: a global view of every position, its queries at the context's end. Its
  // stream pointers are never read (planning reads shapes and positions only).
  static const BF16 kUnread[1] = {};
  KVShape worst_shape = shape;
  worst_shape.num_slots =
      (bound.context + Layout::kTileSlots - 1) / Layout::kTileSlots * Layout::kTileSlots;
  KVView<Layout> kv;
  kv.layout = Layout(worst_shape);
  kv.k = kUnread;
  kv.v = shape.v_head_dim != 0 ? kUnread : nullptr;
  kv.end_pos = bound.context;
  const float unread_query[1] = {};
  float unread_out[1] = {};
  AttentionBatch batch;
  batch.queries_f32 = unread_query;
  batch.out_f32 = unread_out;
  batch.num_q_heads = bound.num_q_heads;
  batch.head_dim = shape.head_dim;
  // Partial states peak at the most queries that still split, scratch at the most queries.
  batch.num_queries = std::min(bound.max_queries, options.max_split_queries);
  if (batch.num_queries == 0) batch.num_queries = 1;
  batch.first_q_pos = bound.context - batch.num_queries;
  const Result check = CheckAttention(kv, batch, options);
  if (!check.ok()) return check;
  const uint64_t partial = AttentionWork::Plan(kv, batch, options).PartialFloats();
  batch.num_queries = bound.max_queries;
  batch.first_q_pos = bound.context - batch.num_queries;
  const uint64_t scratch = AttentionWork::Plan(kv, batch, options).ScratchFloats();
  const uint64_t threads = bound.num_threads == 0 ? 1 : bound.num_threads;
  return detail::SaturatingAdd(
      AttentionManyWork::HeaderFloats(bound.max_entries),
      detail::SaturatingAdd(detail::SaturatingMul(bound.max_entries, partial),
                            detail::SaturatingMul(scratch, threads)));
}

}  // namespace kvring

#endif  // KVRING_ATTENTION_WORKSPACE_H_
