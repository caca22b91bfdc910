// kvring/attention/work.h: the plan of one attention call as independent work items (query
// blocks x kv_heads x KV splits), the merges of split items, and the scratch they need.
#ifndef KVRING_ATTENTION_WORK_H_
#define KVRING_ATTENTION_WORK_H_

#include <cstdint>
#include <type_traits>

#include "kvring/attention/check.h"
#include "kvring/attention/options.h"
#include "kvring/base.h"
#include "kvring/kernel_limits.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/visibility.h"

namespace kvring {

namespace detail {
// Returns n rounded up to a multiple of 16 floats (64 bytes): every part of an item's scratch
// and of a partial state starts on a cache line.
inline constexpr uint64_t RoundUp16(uint64_t n) { return (n + 15) / 16 * 16; }
}  // namespace detail

// The most rows of one register block of the kernels (their TileShape never exceeds it).
inline constexpr uint64_t kMaxRegisterRows = 8;

// Where one thread's scratch holds what an item or a merge needs: offsets in floats from a
// 64-byte aligned start (the kernels align the scratch they are given; ScratchFloats() adds
// the 16 floats that may take). The one layout the kernels and ScratchFloats() share.
struct ItemScratchLayout {
  uint64_t q_stride = 0;     // floats of one row's scaled query: head_dim, padded to 16
  uint64_t acc_stride = 0;   // floats of one row's accumulators: v_head_dim, padded to 16
  uint64_t lane_tables = 0;  // int32 lane offsets and their inverse: 2 x tile slots
  uint64_t scores = 0;       // two tiles' scores of one register block
  uint64_t dummy_acc = 0;    // the accumulators of a register block's padding rows
  uint64_t q_rows = 0;       // per row, its scaled query
  uint64_t acc_rows = 0;     // per row, its accumulators
  uint64_t latent = 0;       // a latent view's values of two tiles ([slot][dim] BF16/int8)
  // The BF16-product mode's AMX blocks (items of 16 rows or more over tiles of 16 or a multiple
  // of 32 slots; amx_blocks says whether the layout has them): the tile configuration (16
  // floats), one tile's K pairs (tile slots x q_stride BF16) and its V pairs (tile slots x
  // acc_stride BF16).
  bool amx_blocks = false;
  uint64_t amx = 0;
  uint64_t amx_k_pairs = 0;
  uint64_t amx_v_pairs = 0;
  uint64_t end = 0;  // floats an item uses
  // A merge (run after the items, in the same scratch): one row's combined accumulators and
  // its output before a BF16 conversion.
  uint64_t merge_acc = 0;
  uint64_t merge_out = 0;
  uint64_t merge_end = 0;  // floats a merge uses

  // Returns the layout for tiles of `tile_slots` positions and items of up to `max_rows`
  // rows; `latent`: the view has no V stream (its values are transposed from K).
  static ItemScratchLayout Of(uint64_t tile_slots, uint64_t head_dim, uint64_t v_head_dim,
                              uint64_t max_rows, bool latent) {
    ItemScratchLayout layout;
    layout.q_stride = detail::RoundUp16(head_dim);
    layout.acc_stride = detail::RoundUp16(v_head_dim);
    uint64_t at = 0;
    const auto take = [&at](uint64_t floats) {
      const uint64_t offset = at;
      at += floats;
      return offset;
    };
    layout.lane_tables = take(detail::RoundUp16(2 * tile_slots));
    layout.scores = take(2 * kMaxRegisterRows * tile_slots);
    layout.dummy_acc = take(layout.acc_stride);
    layout.q_rows = take(max_rows * layout.q_stride);
    layout.acc_rows = take(max_rows * layout.acc_stride);
    // Two tiles x tile_slots slots x acc_stride BF16 (or int8): tile_slots x acc_stride floats.
    layout.latent = take(latent ? tile_slots * layout.acc_stride : 0);
    layout.amx_blocks = max_rows >= 16 && (tile_slots == 16 || tile_slots % 32 == 0);
    const uint64_t amx = layout.amx_blocks ? 1 : 0;
    layout.amx = take(amx * 16);
    layout.amx_k_pairs = take(amx * tile_slots * layout.q_stride / 2);
    layout.amx_v_pairs = take(amx * tile_slots * layout.acc_stride / 2);
    layout.end = at;
    at = 0;
    layout.merge_acc = take(layout.acc_stride);
    layout.merge_out = take(layout.acc_stride);
    layout.merge_end = at;
    return layout;
  }
};

// One work item: the rows (query, q head) of one query block that share one kv_head, over the
// positions [pos_begin, pos_end) (one KV split, or everything when the call does not split).
struct AttentionItem {
  uint64_t first_q_pos = 0;
  uint32_t first_query = 0;  // index into the batch
  uint32_t num_queries = 0;
  uint32_t kv_head = 0;
  uint32_t split = 0;  // index among the item's siblings (same block and kv_head)
  uint64_t pos_begin = 0;
  uint64_t pos_end = 0;
};

// The partition of one attention call into independent items. Items write disjoint memory:
// the output rows of their block (no splits), or their slice of a partial-state buffer that
// the merges then combine, in chronological order, into the output (splits). The partition
// depends on the shapes, positions and options only, so the result is the same for any
// thread count and any order of running the items. Cheap to build; never allocates.
class AttentionWork {
 public:
  // Rows (query, q head) an item aims for: enough to reuse each K/V tile from L1 for several
  // register blocks (64: prefill on Intel AVX-512 0.44 -> 0.53 of the FMA twin with flash
  // tiles, 0.39 -> 0.43 tiled, against 16; decode, one query per block, is unchanged).
  static constexpr uint32_t kTargetRows = 64;

  // Returns the plan of attending `batch` over `kv` with `options`, which must pass
  // CheckAttention (checked in debug builds; the entry points check it in every build).
  template <typename Layout>
  static AttentionWork Plan(const KVView<Layout>& kv, const AttentionBatch& batch,
                            const AttentionOptions& options) {
    const KVShape& shape = kv.layout.Shape();
    AttentionWork work;
    work.visibility_ = kv.visibility;
    work.tile_slots_ = Layout::kTileSlots;
    work.num_kv_heads_ = shape.num_kv_heads;
    work.head_dim_ = shape.head_dim;
    work.latent_ = !kv.HasV();
    work.format_ = kv.format;
    work.v_head_dim_ = work.latent_ ? options.latent_v_dims : shape.v_head_dim;
    work.num_q_heads_ = batch.num_q_heads;
    work.num_queries_ = batch.num_queries;
    work.first_q_pos_ = batch.first_q_pos;
    work.q_row_stride_ =
        batch.q_row_stride != 0 ? batch.q_row_stride : uint64_t{batch.num_q_heads} * shape.head_dim;
    work.out_row_stride_ = batch.out_row_stride != 0
                               ? batch.out_row_stride
                               : uint64_t{batch.num_q_heads} * work.v_head_dim_;
    KVRING_DASSERT(IsInt8(kv.format) ? kv.k_int8 != nullptr : kv.k != nullptr);
    KVRING_DASSERT(kv.HasV() ? options.latent_v_dims == 0
                             : shape.v_head_dim == 0 && options.latent_v_dims <= shape.head_dim);
    KVRING_DASSERT(shape.num_kv_heads != 0 && batch.num_q_heads % shape.num_kv_heads == 0);
    KVRING_DASSERT(IsAttentionDim(shape.head_dim));
    KVRING_DASSERT(IsAttentionDim(work.v_head_dim_));
    KVRING_DASSERT((batch.queries_f32 == nullptr) != (batch.queries_bf16 == nullptr));
    KVRING_DASSERT((batch.out_f32 == nullptr) != (batch.out_bf16 == nullptr));
    KVRING_DASSERT(batch.num_queries == 0 || (kv.CanServe(batch.first_q_pos) &&
                                              batch.first_q_pos + batch.num_queries <= kv.end_pos));
    if (batch.num_queries == 0 || shape.num_kv_heads == 0) return work;
    work.group_ = batch.num_q_heads / shape.num_kv_heads;
    work.queries_per_block_ = work.group_ >= kTargetRows ? 1 : kTargetRows / work.group_;
    if (work.queries_per_block_ > batch.num_queries) work.queries_per_block_ = batch.num_queries;
    work.num_blocks_ = (batch.num_queries + work.queries_per_block_ - 1) / work.queries_per_block_;
    work.num_splits_ = 1;
    work.split_positions_ = 0;
    if (batch.num_queries <= options.max_split_queries && options.split_positions != 0) {
      const uint64_t tile = Layout::kTileSlots;
      work.split_positions_ = (options.split_positions + tile - 1) / tile * tile;
      const uint64_t q_last = batch.first_q_pos + batch.num_queries - 1;
      const uint64_t first = kv.visibility.FirstVisible(batch.first_q_pos);
      work.first_split_ = first / work.split_positions_;
      work.num_splits_ =
          static_cast<uint32_t>(q_last / work.split_positions_ - work.first_split_ + 1);
      if (work.num_splits_ == 1) work.split_positions_ = 0;  // nothing to merge
    }
    return work;
  }

  // Returns the plan of attending `batch` over `kv` with `options`, or an Error whose message
  // is CheckAttention's (field and values): for engines that run the items themselves
  // (RunAttentionItem, MergeAttention). O(1); allocates only the message of a refusal.
  template <typename Layout>
  static Expected<AttentionWork> Checked(const KVView<Layout>& kv, const AttentionBatch& batch,
                                         const AttentionOptions& options) {
    const Result check = CheckAttention(kv, batch, options);
    if (!check.ok()) return Error{"attention", check.Message()};
    return Plan(kv, batch, options);
  }

  // Returns the number of items; run each once, in any order, on any thread.
  uint64_t NumItems() const { return uint64_t{num_blocks_} * num_kv_heads_ * num_splits_; }
  // Returns whether items write partial states that MergeAttention must combine afterwards.
  bool Splits() const { return split_positions_ != 0; }
  // Returns the number of merges (0 without splits); run them after every item.
  uint64_t NumMerges() const { return Splits() ? uint64_t{num_blocks_} * num_kv_heads_ : 0; }

  // Returns item `index` (< NumItems()). Items are numbered kv_head by kv_head, then query
  // block, then split: consecutive items read the same kv_head's K/V, which stays in L2 from
  // one to the next (a window of each kv_head in turn would not).
  AttentionItem Item(uint64_t index) const {
    KVRING_DASSERT(index < NumItems());
    AttentionItem item;
    item.split = static_cast<uint32_t>(index % num_splits_);
    const uint64_t block_head = index / num_splits_;
    item.kv_head = static_cast<uint32_t>(block_head / num_blocks_);
    const uint32_t block = static_cast<uint32_t>(block_head % num_blocks_);
    item.first_query = block * queries_per_block_;
    item.num_queries = queries_per_block_;
    if (item.first_query + item.num_queries > num_queries_) {
      item.num_queries = num_queries_ - item.first_query;
    }
    item.first_q_pos = first_q_pos_ + item.first_query;
    const uint64_t q_last = item.first_q_pos + item.num_queries - 1;
    uint64_t begin = visibility_.FirstVisible(item.first_q_pos);
    uint64_t end = q_last + 1;
    if (Splits()) {
      const uint64_t split_begin = (first_split_ + item.split) * split_positions_;
      const uint64_t split_end = split_begin + split_positions_;
      if (begin < split_begin) begin = split_begin;
      if (end > split_end) end = split_end;
      if (end < begin) end = begin;
    }
    item.pos_begin = begin;
    item.pos_end = end;
    return item;
  }
  // Returns the first item of merge `index` (< NumMerges()); its NumSplits() items follow.
  uint64_t MergeFirstItem(uint64_t index) const { return index * num_splits_; }

  // Rows (query, q head) of an item at most.
  uint32_t MaxItemRows() const { return queries_per_block_ * group_; }
  // Returns the floats of scratch one thread needs to run items and merges (any alignment:
  // the kernels align it to 64 bytes themselves).
  uint64_t ScratchFloats() const {
    const ItemScratchLayout layout = ScratchLayout();
    // + the alignment the kernels take.
    return 16 + (layout.end > layout.merge_end ? layout.end : layout.merge_end);
  }
  // Returns where an item's scratch holds what (ItemScratchLayout).
  ItemScratchLayout ScratchLayout() const {
    return ItemScratchLayout::Of(tile_slots_, head_dim_, v_head_dim_, MaxItemRows(), latent_);
  }
  // Floats of one row's partial state: running max, running sum, then v_head_dim accumulators.
  uint64_t PartialRowFloats() const { return detail::RoundUp16(v_head_dim_ + 2); }
  // Returns where the partial state of row `row` of item `item_index` starts in the
  // partial-state buffer (floats; PartialRowFloats() of them).
  uint64_t PartialOffset(uint64_t item_index, uint64_t row) const {
    return (item_index * MaxItemRows() + row) * PartialRowFloats();
  }
  // Returns the floats of the partial-state buffer of a splitting plan (0 otherwise).
  uint64_t PartialFloats() const {
    return Splits() ? NumItems() * MaxItemRows() * PartialRowFloats() : 0;
  }
  // Returns the floats of the workspace a call of this plan needs on `num_threads` threads:
  // the partial states, then ScratchFloats() per thread (AttentionWorkspace lays them out).
  uint64_t WorkspaceFloats(uint32_t num_threads) const {
    return PartialFloats() + ScratchFloats() * (num_threads == 0 ? 1 : num_threads);
  }
  // Elements from one query's row (output row) to the next: the batch's strides, resolved.
  uint64_t QRowStride() const { return q_row_stride_; }
  uint64_t OutRowStride() const { return out_row_stride_; }

  uint32_t Group() const { return group_; }
  uint32_t NumSplits() const { return num_splits_; }
  uint32_t HeadDim() const { return head_dim_; }
  // Value elements per q head: the view's v_head_dim, or latent_v_dims for a latent view.
  uint32_t VHeadDim() const { return v_head_dim_; }
  // Whether the view has no V stream, its values read from K (AttentionOptions::latent_v_dims).
  bool Latent() const { return latent_; }
  // The format of the view's elements (the kernels' accumulators differ by format).
  Format ElementFormat() const { return format_; }
  uint32_t NumQHeads() const { return num_q_heads_; }
  const Visibility& GetVisibility() const { return visibility_; }

 private:
  Visibility visibility_;
  uint64_t tile_slots_ = 0;
  uint64_t first_q_pos_ = 0;
  uint64_t split_positions_ = 0;  // 0: no splits
  uint64_t first_split_ = 0;
  uint64_t q_row_stride_ = 0;
  uint64_t out_row_stride_ = 0;
  uint32_t num_kv_heads_ = 0;
  uint32_t head_dim_ = 0;
  uint32_t v_head_dim_ = 0;
  uint32_t num_q_heads_ = 0;
  uint32_t num_queries_ = 0;
  uint32_t group_ = 1;
  uint32_t queries_per_block_ = 1;
  uint32_t num_blocks_ = 0;
  uint32_t num_splits_ = 1;
  bool latent_ = false;
  Format format_ = Format::kBF16;
};
static_assert(std::is_trivially_copyable<AttentionWork>::value,
              "AttentionWork must be trivially copyable");

}  // namespace kvring

#endif  // KVRING_ATTENTION_WORK_H_
