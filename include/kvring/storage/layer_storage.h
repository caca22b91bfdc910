// kvring/storage/layer_storage.h: the buffers and bookkeeping that RingKV and GlobalKV share, in
// the layer's format (BF16, or int8 with f32 scales): writes of token rows into a layout,
// reads, copies of the held positions, growth. Internal; engines use RingKV, GlobalKV or
// KVCache.
#ifndef KVRING_STORAGE_LAYER_STORAGE_H_
#define KVRING_STORAGE_LAYER_STORAGE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/detail/aligned_buffer.h"
#include "kvring/detail/checked_math.h"
#include "kvring/detail/transpose.h"
#include "kvring/formats/format.h"
#include "kvring/formats/int8.h"
#include "kvring/index/positions.h"
#include "kvring/index/ring_index.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/storage/layer_buffers.h"
#include "kvring/storage/layer_rows.h"
#include "kvring/storage/storage_spec.h"

namespace kvring {
namespace detail {

// Returns an Error for a spec no storage can hold, or an empty field.
template <typename Layout>
Error ValidateStorageSpec(const StorageSpec& spec) {
  using std::to_string;
  const KVShape& shape = spec.shape;
  if (shape.num_kv_heads == 0) {
    return FieldError("shape.num_kv_heads", "0", "is invalid: storage needs a KV head");
  }
  if (shape.head_dim == 0) {
    return FieldError("shape.head_dim", "0", "is invalid: storage needs a head dimension");
  }
  Error error = ValidateAttentionDim("shape.head_dim", shape.head_dim);
  if (!error.field.empty()) return error;
  if (shape.v_head_dim != 0) {  // 0: no V stream (MLA)
    error = ValidateAttentionDim("shape.v_head_dim", shape.v_head_dim);
    if (!error.field.empty()) return error;
  }
  if (spec.context == 0) {
    return FieldError("context", "0", "is invalid: the context must be at least 1");
  }
  if (IsAccountingOnly(spec.format)) {
    return FieldError("format", ToString(spec.format),
                      "is for accounting only: storage holds bf16, int8 or int8h");
  }
  if (spec.format != Format::kBF16 && !IsInt8(spec.format)) {
    return FieldError("format", to_string(static_cast<int>(spec.format)),
                      "is invalid: storage holds bf16, int8 or int8h");
  }
  if (RotatesK(spec.format) && shape.v_head_dim == 0) {
    return FieldError("format", ToString(spec.format),
                      "is invalid for a layer without V (an MLA latent, whose values are its "
                      "K): int8h rotates K; use int8");
  }
  if (shape.num_slots == 0 || shape.num_slots % Layout::kSlotAlignment != 0) {
    return FieldError("shape.num_slots", to_string(shape.num_slots),
                      "is invalid: it must be a positive multiple of the layout's slot "
                      "alignment " +
                          to_string(Layout::kSlotAlignment));
  }
  uint64_t elements;
  if (!CheckedMul(shape.num_slots, SaturatingAdd(shape.KRowElements(), shape.VRowElements()),
                  &elements) ||
      elements > SIZE_MAX / sizeof(BF16)) {
    return FieldError("shape.num_slots", to_string(shape.num_slots),
                      "makes the buffers larger than this machine can address");
  }
  return Error{};
}

// Returns an Error unless `plan` can be stored in `Layout` by a KVCache or KVPool (`what`:
// "cache" or "pool", for the message): a plan with layers, for this layout's backend and tile,
// whose element type and layers' formats are stored (not accounting-only), with attention
// layers only (recurrent states are planned, not stored yet); else an empty field.
template <typename Layout>
Error ValidatePlanFor(const LayerPlan& plan, const char* what, bool holds_states = false) {
  const RuntimeSpec& runtime = plan.Runtime();
  if (plan.NumLayers() == 0) {
    return Error{"plan", "plan: is empty; build it with LayerPlan::Builder"};
  }
  if (runtime.backend != Layout::kBackend) {
    return FieldError("runtime.backend", ToString(runtime.backend),
                      std::string("does not match the ") + what + "'s layout, which serves " +
                          ToString(Layout::kBackend));
  }
  if (IsAccountingOnly(runtime.element_type)) {
    return FieldError("runtime.element_type", ToString(runtime.element_type),
                      std::string("is not stored: a kvring ") + what +
                          " holds BF16 or int8 (other element types are for what-if accounting "
                          "only)");
  }
  if (SlotAlignment(runtime) != Layout::kSlotAlignment) {
    return FieldError(
        "runtime.tile_rows", std::to_string(runtime.tile_rows),
        "does not match the layout's tile of " + std::to_string(Layout::kSlotAlignment) + " rows");
  }
  if (holds_states && plan.NumOwningLayers() == 0) {
    return FieldError("layers", "[no attention]",
                      std::string("hold no attention layer: a kvring ") + what +
                          " counts positions by its attention layers' appends");
  }
  for (size_t i = 0; i < plan.NumLayers() && !holds_states; ++i) {
    const LayerSpec& spec = plan.Layer(i).spec;
    if (!spec.attends || spec.HasState()) {
      return FieldError(LayerField(i, "state"),
                        LayerKindName(spec.kind, spec.attends, spec.HasState()),
                        std::string("is a layer with a recurrent state or without attention: ") +
                            "a kvring " + what +
                            " holds attention K/V and no recurrent state yet (a KVCache holds "
                            "both; docs/planning.md)");
    }
  }
  for (size_t i = 0; i < plan.NumLayers(); ++i) {
    const LayerSpec& spec = plan.Layer(i).spec;
    if (spec.indexer_dim != 0 && !spec.IsLatent()) {
      return FieldError(LayerField(i, "indexer_dim"), std::to_string(spec.indexer_dim),
                        std::string("is a DSA indexer key beside per-head K/V: a kvring ") + what +
                            " keeps it beside an MLA latent only (plan the latent: "
                            "LayerSpec::Latent, kvring-plan --mla latent)");
    }
    const Format format = spec.format;
    if (IsAccountingOnly(format)) {
      return FieldError(
          LayerField(i, "format"), ToString(format),
          std::string("is for accounting only: a kvring ") + what + " holds bf16 or int8");
    }
  }
  return Error{};
}

template <typename Layout>
class LayerStorage {
 public:
  // Batches of at least this many tokens into a ring write K with non-temporal stores (see
  // Append).
  static constexpr uint64_t kStreamTokens = 128;

  LayerStorage() = default;
  LayerStorage(LayerStorage&&) noexcept = default;
  LayerStorage& operator=(LayerStorage&&) noexcept = default;

  // Allocates zeroed buffers for `spec` (validated by the caller) over num_slots slots.
  // Returns false if the allocation failed.
  bool Allocate(const StorageSpec& spec) {
    index_ = RingIndex(spec.shape.num_slots, spec.keep, spec.max_rollback, spec.context);
    return buffers_.Allocate(spec.shape, spec.format, 1, spec.huge_pages);
  }

  const Layout& GetLayout() const { return buffers_.BlockLayout(); }
  const RingIndex& Index() const { return index_; }
  Format GetFormat() const { return buffers_.GetFormat(); }
  // Returns the bytes of the element and scale buffers: num_slots x num_kv_heads x
  // (RowBytes(format, head_dim) + RowBytes(format, v_head_dim)), the V term 0 without V.
  uint64_t AllocatedBytes() const { return buffers_.AllocatedBytes(); }

  // Appends rows k [num_tokens][kv_head][head_dim] and v [num_tokens][kv_head][v_head_dim]
  // (v null when there is no V stream) at position `pos`; token t's rows start at
  // k + t * strides.k and v + t * strides.v (0: packed). BF16 layers round each element to
  // nearest even; int8 layers encode each (pos, kv_head) row with EncodeInt8Row. `may_grow`: a
  // batch too large for the slots reallocates first (rings); otherwise it is refused. Refusals
  // name `layer` (kNoLayer: none).
  template <typename T>
  Result Append(uint64_t pos, const T* k, const T* v, uint64_t num_tokens, RowStrides strides,
                bool may_grow, uint64_t layer) {
    Result result = CheckAppend(pos, k, v, num_tokens, strides, layer);
    if (result == Status::kBatchTooLarge && may_grow) {
      result = GrowSlots(index_.SlotsNeededFor(num_tokens), layer);
      if (!result.ok()) return result;
      result = CheckAppend(pos, k, v, num_tokens, strides, layer);
    }
    if (!result.ok()) return result;
    const KVShape& shape = GetLayout().Shape();
    const uint64_t k_stride = strides.k != 0 ? strides.k : shape.KRowElements();
    const uint64_t v_stride = strides.v != 0 ? strides.v : shape.VRowElements();
    // A batch of kStreamTokens or more into a BF16 ring writes whole K lines with
    // non-temporal stores where it can: by the time a ring comes round to a slot again its
    // lines are long out of cache, and a normal store first reads the line it overwrites.
    // Measured (A/B interleaved, 512 tokens, memcpy ratio): rings flash 0.65-0.72 ->
    // 0.79-0.84, tiled16 0.67-0.80 -> 0.98-1.05, tiled32 0.74-0.76 -> 0.83-0.88. Not for flat
    // storage (flash 0.82-0.87 -> 0.70-0.73: fresh rows far apart) nor for V (slower in every
    // case). The attention over the batch then reads those K lines from memory, as it reads
    // the rest of a long window.
    const bool stream =
        GetFormat() == Format::kBF16 && num_tokens >= kStreamTokens && index_.Wraps();
    const LayerRows<Layout> rows = buffers_.Rows();
    // Rows go to slots pos % num_slots: split the batch where the ring wraps.
    ForEachSlotRun(
        pos, num_tokens, shape.num_slots, [&](uint64_t slot, uint64_t offset, uint64_t count) {
          rows.Write(slot, k + offset * k_stride, v != nullptr ? v + offset * v_stride : v,
                     k_stride, v_stride, count, stream);
        });
    if (stream) StoreFence();  // a release after the append publishes the streamed lines too
    index_.Append(num_tokens);
    return Status::kOk;
  }

  // Returns kOk if rows k and v (v null exactly when there is no V stream) of `num_tokens`
  // positions with row strides `strides` may be appended at `pos` as the slots are; else the
  // first reason why not, in words that name `layer` (kBatchTooLarge: only growth is missing).
  Result CheckAppend(uint64_t pos, const void* k, const void* v, uint64_t num_tokens,
                     RowStrides strides, uint64_t layer) const {
    const Result rows = CheckAppendRows(GetLayout().Shape(), pos, k, v, num_tokens, strides, layer);
    if (!rows.ok()) return rows;
    switch (index_.CheckAppend(pos, num_tokens)) {
      case Status::kOk:
        return Status::kOk;
      case Status::kWrongPosition:
        return KVRING_DETAIL_REFUSED(layer, Status::kWrongPosition,
                                     "append at %llu, but its next position is %llu", pos,
                                     index_.EndPos());
      case Status::kContextFull:
        return KVRING_DETAIL_REFUSED(layer, Status::kContextFull,
                                     "append at %llu of %llu tokens passes the context of %llu "
                                     "positions",
                                     pos, num_tokens, index_.Context());
      case Status::kBatchTooLarge:
        return KVRING_DETAIL_REFUSED(layer, Status::kBatchTooLarge,
                                     "a batch of %llu tokens needs %llu slots, but %llu are "
                                     "allocated; grow first",
                                     num_tokens, index_.SlotsNeededFor(num_tokens),
                                     index_.NumSlots());
      default:
        break;
    }
    KVRING_DASSERT(false && "RingIndex::CheckAppend returned an unexpected status");
    return Status::kBadArgument;
  }

  // Copies the row of `pos` as `read` asks (RowRead: the stored BF16 row, the stored int8
  // row and scales, or the values as f32); refusals (CheckRowRead) name `layer`. Cost: one row.
  Result Read(uint64_t pos, const RowRead& read, uint64_t layer) const {
    const Result check =
        CheckRowRead(GetFormat(), read, pos, index_.FirstPos(), index_.EndPos(), layer);
    if (check.ok()) buffers_.Rows().Read(index_.SlotOf(pos), read);
    return check;
  }

  // Returns kOk if the newest `num_tokens` positions may be discarded, else kRollbackTooFar
  // saying how far a rollback may go now, naming `layer`.
  Result CheckRollback(uint64_t num_tokens, uint64_t layer) const {
    if (index_.CheckRollback(num_tokens) == Status::kOk) return Status::kOk;
    return KVRING_DETAIL_REFUSED(layer, Status::kRollbackTooFar,
                                 "rollback of %llu positions, but at most %llu are allowed now "
                                 "(planned headroom %llu; the next query's window stays held)",
                                 num_tokens, index_.RollbackLimit(), index_.MaxRollback());
  }

  Result Rollback(uint64_t num_tokens, uint64_t layer) {
    Result result = CheckRollback(num_tokens, layer);
    if (result.ok()) index_.Rollback(num_tokens);
    return result;
  }

  // Moves the end back to `end`, discarding this layer's part of an unfinished step (the
  // owners' AbandonStep): always allowed, as the step's appends kept what queries before it
  // read (checked in debug builds).
  void DiscardTo(uint64_t end) {
    KVRING_DASSERT(end <= index_.EndPos());
    KVRING_DASSERT(index_.CheckDiscard(index_.EndPos() - end) == Status::kOk);
    index_.Rollback(index_.EndPos() - end);
  }

  void Clear() { index_.Clear(); }

  // Makes the newest positions of [first, end) that the slots hold the held ones, for rows
  // about to be written into their slots (a saved state being loaded); returns the first of
  // them. Requires end <= the context.
  uint64_t RestoreRange(uint64_t first, uint64_t end) {
    const uint64_t from = std::max(first, end - std::min(end, index_.NumSlots()));
    index_.Restore(from, end);
    return from;
  }

  // Returns the slots that hold `capacity` positions in this layout, or 0 if `capacity` is
  // past the context.
  uint64_t SlotsFor(uint64_t capacity) const {
    uint64_t num_slots = 0;
    if (capacity > index_.Context() || !Layout::NumSlotsFor(capacity, &num_slots)) return 0;
    return num_slots;
  }

  // Reallocates to hold `capacity` positions, keeping every held position. A capacity at or
  // below the current one changes nothing; one past the context is kBadArgument; on
  // kOutOfMemory nothing changes. Refusals name `layer`.
  Result GrowSlots(uint64_t capacity, uint64_t layer) {
    const uint64_t num_slots = SlotsFor(capacity);
    if (num_slots == 0) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                   "capacity %llu is past the context %llu", capacity,
                                   index_.Context());
    }
    if (num_slots <= index_.NumSlots()) return Status::kOk;
    LayerStorage grown = CopyWithSlots(num_slots);
    if (grown.Failed()) {
      return KVRING_DETAIL_REFUSED(layer, Status::kOutOfMemory,
                                   "growing to %llu slots could not allocate", num_slots);
    }
    *this = std::move(grown);
    return Status::kOk;
  }

  // Returns an independent copy over `num_slots` slots (a multiple of the slot alignment)
  // holding the same positions, or the newest num_slots of them when that is fewer
  // (RingIndex::Resized); Failed() if allocation failed. Copies what the copy holds only.
  LayerStorage CopyWithSlots(uint64_t num_slots) const {
    KVRING_DASSERT(num_slots != 0 && num_slots % Layout::kSlotAlignment == 0);
    LayerStorage copy;
    KVShape shape = GetLayout().Shape();
    shape.num_slots = num_slots;
    copy.index_ = index_.Resized(num_slots);
    if (copy.buffers_.Allocate(shape, GetFormat(), 1, buffers_.HugePagesAsked())) {
      CopyHeldTo(&copy);
    } else {
      copy.failed_ = true;
    }
    return copy;
  }
  bool Failed() const { return failed_ || buffers_.Failed(); }

  // Returns the rows of the buffers (slot = Index().SlotOf(pos)).
  LayerRows<Layout> Rows() const { return buffers_.Rows(); }

  KVView<Layout> View(const Visibility& visibility) const {
    KVView<Layout> view;
    buffers_.Rows().FillView(&view);
    view.first_pos = index_.FirstPos();
    view.end_pos = index_.EndPos();
    view.visibility = visibility;
    return view;
  }

 private:
  // Copies the positions `to` holds (a subrange of this one's; same heads and dims, any
  // num_slots) into it.
  void CopyHeldTo(LayerStorage* to) const {
    const uint64_t from_slots = GetLayout().Shape().num_slots;
    const uint64_t to_slots = to->GetLayout().Shape().num_slots;
    const LayerRows<Layout> from_rows = buffers_.Rows();
    const LayerRows<Layout> to_rows = to->buffers_.Rows();
    KVRING_DASSERT(to->index_.FirstPos() >= index_.FirstPos() &&
                   to->index_.EndPos() == index_.EndPos());
    for (uint64_t pos = to->index_.FirstPos(); pos < index_.EndPos();) {
      const uint64_t from_slot = pos % from_slots, to_slot = pos % to_slots;
      const uint64_t len =
          std::min({index_.EndPos() - pos, from_slots - from_slot, to_slots - to_slot});
      from_rows.CopySlotsTo(from_slot, to_rows, to_slot, len);
      pos += len;
    }
  }

  RingIndex index_;
  LayerBuffers<Layout> buffers_;  // one block of index_.NumSlots() slots
  bool failed_ = false;           // a CopyWithSlots whose allocation failed
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_LAYER_STORAGE_H_
