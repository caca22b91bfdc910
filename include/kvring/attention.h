// kvring/attention.h: what attention over a KVView computes and how the work is split, without
// vector code: options (scale, soft-cap, sinks), the batch of queries (with row strides), the
// checks every entry point makes, the plan of independent work items (query blocks x kv_heads x
// KV splits) and the caller-owned workspace they run in. The kernels are in
// kvring/ops/attention-inl.h (static dispatch) and behind kvring/dispatch.h (dynamic dispatch).
#ifndef KVRING_ATTENTION_H_
#define KVRING_ATTENTION_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/kernel_limits.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/task_runner.h"
#include "kvring/thread_pool.h"
#include "kvring/visibility.h"

namespace kvring {

// Numeric options of one attention call (docs/attention.md).
// The products of an attention call (AttentionOptions::products).
// - kF32: q . k and p . v multiply f32 queries and probabilities by the stored values widened
//   to f32 (the default; exact products, f32 sums).
// - kBF16: BF16 x BF16 products with f32 sums, as GPU flash attention and ggml's CPU kernels
//   compute: each pre-scaled query (q * scale) is rounded to BF16 once per call, and each
//   probability to BF16 before the V pass (the softmax denominator sums the f32 ones). About
//   2e-3 normwise from the exact mode (docs/attention.md); on CPUs with AVX512-BF16 it runs on
//   vdpbf16ps at up to twice the exact mode's arithmetic rate, elsewhere on the widening
//   path with the same roundings (its last bits may differ from vdpbf16ps's). Ring == flat
//   and thread counts stay bit-identical within the mode. Int8 layers compute kF32 in
//   either mode (their products are int8 x f32; docs/attention.md).
enum class Products : uint8_t { kF32 = 0, kBF16 = 1 };

struct AttentionOptions {
  // Multiplies q . k; 0 means 1 / sqrt(head_dim).
  float scale = 0.0f;
  // When > 0, scores become soft_cap * tanh(score / soft_cap) (Gemma 2); 0 means off.
  float soft_cap = 0.0f;
  // Learned sink logits (GPT-OSS), [num_q_heads], added to each softmax denominator as
  // exp(sink); not scaled or capped. nullptr: no sinks. Must stay valid during the call.
  const float* sinks = nullptr;
  // KV split length, in positions, for calls with few queries (decode): a query's visible
  // range is cut at multiples of split_positions into independent items whose partial softmax
  // states are merged in chronological order. Split points depend on positions only, never on
  // the thread count. Rounded up to a multiple of the layout's tile.
  uint64_t split_positions = 2048;
  // Calls with at most this many queries use KV splits; larger calls (prefill) split by query
  // blocks only. 0 turns splitting off.
  uint32_t max_split_queries = 4;
  // For a view without a V stream (MLA, KVView::v == nullptr; LayerSpec::Latent): the value
  // of a position is the first latent_v_dims elements of its K (DeepSeek: kv_lora_rank 512 of
  // the 576-element latent; the queries carry the absorbed projection), and the output has
  // latent_v_dims elements per q head. A multiple of 16, at most head_dim. Must be 0 for a
  // view with V.
  uint32_t latent_v_dims = 0;
  // Products::kF32 (exact, the default) or Products::kBF16 (see Products).
  Products products = Products::kF32;
};

// The queries of one call and where their output goes. Queries sit at the consecutive
// positions [first_q_pos, first_q_pos + num_queries), whose K/V the view already holds.
// Exactly one of queries_f32 / queries_bf16 and one of out_f32 / out_bf16 is set. Query i's
// row starts q_row_stride elements after query i - 1's and holds its q heads one after the
// other ([num_q_heads][head_dim]); likewise the output rows. A stride of 0 means packed rows,
// so fused QKV buffers ([token][q heads | k heads | v heads]) are read in place by setting
// q_row_stride to the fused row's length.
struct AttentionBatch {
  const float* queries_f32 = nullptr;  // [num_queries: q_row_stride][num_q_heads][head_dim]
  const BF16* queries_bf16 = nullptr;  // [num_queries: q_row_stride][num_q_heads][head_dim]
  float* out_f32 = nullptr;            // [num_queries: out_row_stride][num_q_heads][v_head_dim]
  BF16* out_bf16 = nullptr;            // the same, rounded to nearest even
  uint64_t first_q_pos = 0;
  uint32_t num_queries = 0;
  uint32_t num_q_heads = 0;     // a multiple of the view's num_kv_heads (MHA, GQA, MQA)
  uint64_t q_row_stride = 0;    // elements; 0: num_q_heads * head_dim
  uint64_t out_row_stride = 0;  // elements; 0: num_q_heads * v_head_dim (the output's)
};

// Returns kOk when attending `batch` over `kv` with `options` is well defined, else a
// kBadArgument (shapes, head ratio, dims, pointers, strides, options) or kNotLive (a query
// whose K/V the view does not hold, or whose visible positions it no longer holds) whose
// message names the field and the values. O(1); every attention entry point calls it first
// and changes nothing when it refuses. Does not allocate.
template <typename Layout>
Result CheckAttention(const KVView<Layout>& kv, const AttentionBatch& batch,
                      const AttentionOptions& options) {
  const KVShape& shape = kv.layout.Shape();
  const uint64_t head_dim = shape.head_dim;
  if (kv.format == Format::kInt8) {
    if (kv.k_int8 == nullptr || kv.k_scales == nullptr) {
      return Result::Refused(Status::kBadArgument,
                             "view: an int8 view needs k_int8 and k_scales (one is null)");
    }
    if ((kv.v_int8 == nullptr) != (kv.v_scales == nullptr)) {
      return Result::Refused(Status::kBadArgument,
                             "view: an int8 view's v_int8 and v_scales are both set or both null");
    }
  } else if (kv.format != Format::kBF16) {
    return Result::Refused(Status::kBadArgument, "view.format: %llu is not a kvring::Format",
                           static_cast<uint64_t>(kv.format));
  } else if (kv.k == nullptr) {
    return Result::Refused(Status::kBadArgument, "view.k: is null");
  }
  if (shape.num_kv_heads == 0) {
    return Result::Refused(Status::kBadArgument, "view: has 0 kv_heads");
  }
  if (!IsAttentionDim(head_dim)) {
    return Result::Refused(Status::kBadArgument,
                           "view head_dim: %llu is not a multiple of %llu from %llu to %llu "
                           "(the kernels' head dims)",
                           head_dim, kAttentionDimMultiple, kAttentionDimMultiple,
                           kMaxAttentionHeadDim);
  }
  uint64_t v_head_dim = shape.v_head_dim;
  if (!kv.HasV()) {
    if (shape.v_head_dim != 0) {
      return Result::Refused(Status::kBadArgument,
                             "view.v: is null, but the view's v_head_dim is %llu",
                             shape.v_head_dim);
    }
    v_head_dim = options.latent_v_dims;
    if (!IsAttentionDim(v_head_dim) || v_head_dim > head_dim) {
      return Result::Refused(Status::kBadArgument,
                             "options.latent_v_dims: %llu is not a multiple of %llu from %llu "
                             "to the head_dim %llu (a view without V reads its values from K)",
                             v_head_dim, kAttentionDimMultiple, kAttentionDimMultiple, head_dim);
    }
  } else {
    if (options.latent_v_dims != 0) {
      return Result::Refused(Status::kBadArgument,
                             "options.latent_v_dims: %llu must be 0 for a view with V",
                             options.latent_v_dims);
    }
    if (!IsAttentionDim(v_head_dim)) {
      return Result::Refused(
          Status::kBadArgument, "view v_head_dim: %llu is not a multiple of %llu from %llu to %llu",
          v_head_dim, kAttentionDimMultiple, kAttentionDimMultiple, kMaxAttentionHeadDim);
    }
  }
  if (kv.NumSlots() == 0 || kv.NumSlots() % Layout::kTileSlots != 0) {
    return Result::Refused(Status::kBadArgument,
                           "view num_slots: %llu is not a positive multiple of the layout's "
                           "tile of %llu slots",
                           kv.NumSlots(), Layout::kTileSlots);
  }
  if (kv.first_pos > kv.end_pos || (!kv.Paged() && kv.end_pos - kv.first_pos > kv.NumSlots())) {
    return Result::Refused(Status::kBadArgument,
                           "view: holds [%llu, %llu), more than its %llu slots", kv.first_pos,
                           kv.end_pos, kv.NumSlots());
  }
  if (!(options.soft_cap >= 0.0f) || !std::isfinite(options.soft_cap) ||
      !std::isfinite(options.scale)) {
    return Result::Refused(Status::kBadArgument,
                           "options: soft_cap and scale must be finite and soft_cap >= 0");
  }
  if (options.products != Products::kF32 && options.products != Products::kBF16) {
    return Result::Refused(Status::kBadArgument,
                           "options.products: %llu is neither Products::kF32 (0) nor kBF16 (1)",
                           static_cast<uint64_t>(options.products));
  }
  if (batch.num_q_heads == 0 || batch.num_q_heads % shape.num_kv_heads != 0) {
    return Result::Refused(Status::kBadArgument,
                           "batch.num_q_heads: %llu is not a positive multiple of the view's "
                           "%llu kv_heads",
                           batch.num_q_heads, shape.num_kv_heads);
  }
  if ((batch.queries_f32 == nullptr) == (batch.queries_bf16 == nullptr)) {
    return Result::Refused(Status::kBadArgument,
                           "batch: exactly one of queries_f32 and queries_bf16 must be set");
  }
  if ((batch.out_f32 == nullptr) == (batch.out_bf16 == nullptr)) {
    return Result::Refused(Status::kBadArgument,
                           "batch: exactly one of out_f32 and out_bf16 must be set");
  }
  const uint64_t q_row = uint64_t{batch.num_q_heads} * head_dim;
  if (batch.q_row_stride != 0 && batch.q_row_stride < q_row) {
    return Result::Refused(Status::kBadArgument,
                           "batch.q_row_stride: %llu is below a query row's %llu elements "
                           "(%llu q heads x %llu)",
                           batch.q_row_stride, q_row, batch.num_q_heads, head_dim);
  }
  const uint64_t out_row = uint64_t{batch.num_q_heads} * v_head_dim;
  if (batch.out_row_stride != 0 && batch.out_row_stride < out_row) {
    return Result::Refused(Status::kBadArgument,
                           "batch.out_row_stride: %llu is below an output row's %llu elements "
                           "(%llu q heads x %llu)",
                           batch.out_row_stride, out_row, batch.num_q_heads, v_head_dim);
  }
  if (batch.num_queries == 0) return Result();
  if (batch.first_q_pos > std::numeric_limits<uint64_t>::max() - batch.num_queries ||
      batch.first_q_pos + batch.num_queries > kv.end_pos) {
    return Result::Refused(Status::kNotLive,
                           "batch: queries at [%llu, %llu + %llu) are past the view's end %llu "
                           "(append their K/V first)",
                           batch.first_q_pos, batch.first_q_pos, batch.num_queries, kv.end_pos);
  }
  // Every rule's first visible position grows with the query, so the first query decides.
  const uint64_t first_visible = kv.visibility.FirstVisible(batch.first_q_pos);
  if (first_visible < kv.first_pos) {
    return Result::Refused(Status::kNotLive,
                           "batch.first_q_pos: a query at %llu sees positions from %llu, but "
                           "the view holds only [%llu, %llu)",
                           batch.first_q_pos, first_visible, kv.first_pos, kv.end_pos);
  }
  return Result();
}

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
  // Rows (query, q head) an item aims for: enough to reuse each K/V tile from L1 for a few
  // register blocks.
  static constexpr uint32_t kTargetRows = 16;

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
    KVRING_DASSERT(kv.format == Format::kInt8 ? kv.k_int8 != nullptr : kv.k != nullptr);
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

  // Returns item `index` (< NumItems()).
  AttentionItem Item(uint64_t index) const {
    KVRING_DASSERT(index < NumItems());
    AttentionItem item;
    item.split = static_cast<uint32_t>(index % num_splits_);
    const uint64_t block_head = index / num_splits_;
    item.kv_head = static_cast<uint32_t>(block_head % num_kv_heads_);
    const uint32_t block = static_cast<uint32_t>(block_head / num_kv_heads_);
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
    const uint64_t tile = RoundUp16(tile_slots_);
    const uint64_t acc = RoundUp16(v_head_dim_);
    // A latent view's values: two tiles of [slot][dim] BF16 (LatentValues), one float per two.
    const uint64_t latent = latent_ ? tile * acc : 0;
    // (+ tile: an int8 tile's K scales in lane order.)
    const uint64_t item = 16 + 2 * tile + 16 * tile + acc + tile + latent +
                          uint64_t{MaxItemRows()} * (RoundUp16(head_dim_) + acc);
    const uint64_t merge = 16 + 2 * acc;
    return item > merge ? item : merge;
  }
  // Floats of one row's partial state: running max, running sum, then v_head_dim accumulators.
  uint64_t PartialRowFloats() const { return RoundUp16(v_head_dim_ + 2); }
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
  static uint64_t RoundUp16(uint64_t n) { return (n + 15) / 16 * 16; }

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

// Returns the score scale `options` asks for: options.scale, or 1/sqrt(head_dim) when 0.
inline float AttentionScale(const AttentionOptions& options, uint32_t head_dim) {
  return options.scale != 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace kvring

#endif  // KVRING_ATTENTION_H_
