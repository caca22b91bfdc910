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
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/ring_index.h"
#include "kvring/status.h"
#include "kvring/storage/storage_spec.h"

namespace kvring {
namespace detail {

inline BF16 ToBF16(float value) { return BF16FromF32(value); }
inline BF16 ToBF16(BF16 value) { return value; }

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
  if (spec.format != Format::kBF16 && spec.format != Format::kInt8) {
    return FieldError("format", to_string(static_cast<int>(spec.format)),
                      "is invalid: storage holds bf16 or int8");
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

// Marks a storage used on its own (a RingKV or GlobalKV outside a KVCache): its refusals name
// no layer.
inline constexpr uint64_t kNoLayer = ~uint64_t{0};

// Returns the refusal Result::Refused(status, format, ...) whose message starts with
// "layers[<layer>]: " unless `layer` is kNoLayer. `format` is a string literal with up to three
// %llu conversions, and at least one value follows it.
#define KVRING_DETAIL_REFUSED(layer, status, format, ...)         \
  ((layer) == ::kvring::detail::kNoLayer                          \
       ? ::kvring::Result::Refused((status), format, __VA_ARGS__) \
       : ::kvring::Result::Refused((status), "layers[%llu]: " format, (layer), __VA_ARGS__))

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
    layout_ = Layout(spec.shape);
    index_ = RingIndex(spec.shape.num_slots, spec.keep, spec.max_rollback, spec.context);
    format_ = spec.format;
    return AllocateBuffers();
  }

  const Layout& GetLayout() const { return layout_; }
  const RingIndex& Index() const { return index_; }
  Format GetFormat() const { return format_; }
  // Returns the bytes of the element and scale buffers: num_slots x num_kv_heads x
  // (RowBytes(format, head_dim) + RowBytes(format, v_head_dim)), the V term 0 without V.
  uint64_t AllocatedBytes() const {
    return (k_.size() + v_.size()) * sizeof(BF16) + k_int8_.size() + v_int8_.size() +
           (k_scales_.size() + v_scales_.size()) * sizeof(float);
  }

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
    const KVShape& shape = layout_.Shape();
    const uint64_t k_stride = strides.k != 0 ? strides.k : shape.KRowElements();
    const uint64_t v_stride = strides.v != 0 ? strides.v : shape.VRowElements();
    if (format_ == Format::kInt8) {
      for (uint64_t i = 0; i < num_tokens;) {
        const uint64_t slot = (pos + i) % shape.num_slots;
        const uint64_t len = std::min(num_tokens - i, shape.num_slots - slot);
        WriteKInt8(slot, k + i * k_stride, k_stride, len);
        if (v != nullptr) WriteVInt8(slot, v + i * v_stride, v_stride, len);
        i += len;
      }
      index_.Append(num_tokens);
      return Status::kOk;
    }
    // A batch of kStreamTokens or more into a ring writes whole K lines with non-temporal
    // stores where it can: by the time a ring comes round to a slot again its lines are long
    // out of cache, and a normal store first reads the line it overwrites. Measured (A/B
    // interleaved, 512 tokens, memcpy ratio): rings flash 0.65-0.72 -> 0.79-0.84, tiled16
    // 0.67-0.80 -> 0.98-1.05, tiled32 0.74-0.76 -> 0.83-0.88. Not for flat storage (flash
    // 0.82-0.87 -> 0.70-0.73: fresh rows far apart) nor for V (slower in every case). The
    // attention over the batch then reads those K lines from memory, as it reads the rest of
    // a long window.
    const bool stream = num_tokens >= kStreamTokens && index_.Wraps();
    // Rows go to slots pos % num_slots: split the batch where the ring wraps.
    for (uint64_t i = 0; i < num_tokens;) {
      const uint64_t slot = (pos + i) % shape.num_slots;
      const uint64_t len = std::min(num_tokens - i, shape.num_slots - slot);
      WriteK(slot, k + i * k_stride, k_stride, len, stream);
      if (v != nullptr) WriteV(slot, v + i * v_stride, v_stride, len);
      i += len;
    }
    if (stream) StoreFence();  // a release after the append publishes the streamed lines too
    index_.Append(num_tokens);
    return Status::kOk;
  }

  // Returns kOk if rows k and v (v null exactly when there is no V stream) of `num_tokens`
  // positions with row strides `strides` may be appended at `pos` as the slots are; else the
  // first reason why not, in words that name `layer` (kBatchTooLarge: only growth is missing).
  Result CheckAppend(uint64_t pos, const void* k, const void* v, uint64_t num_tokens,
                     RowStrides strides, uint64_t layer) const {
    const KVShape& shape = layout_.Shape();
    if (num_tokens == 0) {
      return KVRING_DETAIL_REFUSED(layer, Status::kEmptyBatch,
                                   "append at %llu of no tokens: a batch holds at least one", pos);
    }
    if (k == nullptr) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument, "append at %llu: k is null", pos);
    }
    if (v == nullptr && shape.v_head_dim != 0) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                   "append at %llu: v is null, but the layer stores V rows of "
                                   "%llu elements",
                                   pos, shape.VRowElements());
    }
    if (v != nullptr && shape.v_head_dim == 0) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                   "append at %llu: v is not null, but the layer stores no V "
                                   "(an MLA latent)",
                                   pos);
    }
    if (strides.k != 0 && strides.k < shape.KRowElements()) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                   "append at %llu: k row stride %llu is below the %llu elements "
                                   "of a K row (kv_heads x head_dim)",
                                   pos, strides.k, shape.KRowElements());
    }
    if (shape.v_head_dim != 0 && strides.v != 0 && strides.v < shape.VRowElements()) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                   "append at %llu: v row stride %llu is below the %llu elements "
                                   "of a V row (kv_heads x v_head_dim)",
                                   pos, strides.v, shape.VRowElements());
    }
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

  // Copies the stored row of `pos` into k_out [kv_head][head_dim] and v_out
  // [kv_head][v_head_dim] (v_out may be null). Exact: BF16 as stored. An int8 layer refuses it
  // (kBadArgument): read it with ReadRowInt8 or ReadRowF32. Refusals name `layer`.
  Result ReadRow(uint64_t pos, BF16* k_out, BF16* v_out, uint64_t layer) const {
    if (format_ != Format::kBF16) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                   "BF16 read of %llu, but the layer stores int8; read it with "
                                   "ReadRowInt8 (stored bytes and scales) or ReadRowF32 (decoded)",
                                   pos);
    }
    const Result check = CheckRead(pos, k_out, layer);
    if (!check.ok()) return check;
    const KVShape& shape = layout_.Shape();
    const uint64_t slot = index_.SlotOf(pos);
    const auto k_map = layout_.K();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
        *k_out++ = k_.data()[k_map(slot, kv_head, dim)];
      }
    }
    if (v_out != nullptr && shape.v_head_dim != 0) {
      const auto v_map = layout_.V();
      for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
        std::memcpy(v_out + uint64_t{kv_head} * shape.v_head_dim,
                    v_.data() + v_map(slot, kv_head, 0), shape.v_head_dim * sizeof(BF16));
      }
    }
    return Status::kOk;
  }

  // Copies the stored int8 row of `pos` exactly: k_out [kv_head][head_dim] and k_scales_out
  // [kv_head]; if not null, v_out [kv_head][v_head_dim] and v_scales_out [kv_head]. A BF16
  // layer refuses it (kBadArgument). Refusals name `layer`.
  Result ReadRowInt8(uint64_t pos, int8_t* k_out, float* k_scales_out, int8_t* v_out,
                     float* v_scales_out, uint64_t layer) const {
    if (format_ != Format::kInt8) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                   "int8 read of %llu, but the layer stores bf16; read it with "
                                   "ReadRow (stored) or ReadRowF32 (widened)",
                                   pos);
    }
    Result result = CheckRead(pos, k_out, layer);
    if (!result.ok()) return result;
    if (k_scales_out == nullptr) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                   "read of %llu: k_scales_out is null", pos);
    }
    const KVShape& shape = layout_.Shape();
    const uint64_t slot = index_.SlotOf(pos);
    const auto k_map = layout_.K();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
        *k_out++ = k_int8_.data()[k_map(slot, kv_head, dim)];
      }
      k_scales_out[kv_head] = k_scales_.data()[ScaleOffset(slot, kv_head)];
    }
    if (shape.v_head_dim == 0) return Status::kOk;
    const auto v_map = layout_.V();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      if (v_out != nullptr) {
        std::memcpy(v_out + uint64_t{kv_head} * shape.v_head_dim,
                    v_int8_.data() + v_map(slot, kv_head, 0), shape.v_head_dim);
      }
      if (v_scales_out != nullptr) {
        v_scales_out[kv_head] = v_scales_.data()[ScaleOffset(slot, kv_head)];
      }
    }
    return Status::kOk;
  }

  // Copies the stored values of `pos` as f32 into k_out [kv_head][head_dim] and, if not null,
  // v_out [kv_head][v_head_dim]: BF16 widened exactly, int8 decoded as DecodeInt8(scale, q).
  // Refusals name `layer`.
  Result ReadRowF32(uint64_t pos, float* k_out, float* v_out, uint64_t layer) const {
    Result result = CheckRead(pos, k_out, layer);
    if (!result.ok()) return result;
    const KVShape& shape = layout_.Shape();
    const uint64_t slot = index_.SlotOf(pos);
    const auto k_map = layout_.K();
    const auto v_map = layout_.V();
    const bool int8 = format_ == Format::kInt8;
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      const float k_scale = int8 ? k_scales_.data()[ScaleOffset(slot, kv_head)] : 0.0f;
      for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
        const uint64_t offset = k_map(slot, kv_head, dim);
        *k_out++ =
            int8 ? DecodeInt8(k_scale, k_int8_.data()[offset]) : BF16ToF32(k_.data()[offset]);
      }
    }
    if (v_out == nullptr || shape.v_head_dim == 0) return Status::kOk;
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      const float v_scale = int8 ? v_scales_.data()[ScaleOffset(slot, kv_head)] : 0.0f;
      const uint64_t offset = v_map(slot, kv_head, 0);
      for (uint32_t dim = 0; dim < shape.v_head_dim; ++dim) {
        *v_out++ = int8 ? DecodeInt8(v_scale, v_int8_.data()[offset + dim])
                        : BF16ToF32(v_.data()[offset + dim]);
      }
    }
    return Status::kOk;
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

  void Clear() { index_.Clear(); }

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

  // Returns an independent copy over `num_slots` slots (>= NumSlots(), a multiple of the
  // slot alignment) holding the same positions; Failed() if allocation failed. Copies the
  // held positions only.
  LayerStorage CopyWithSlots(uint64_t num_slots) const {
    KVRING_DASSERT(num_slots >= index_.NumSlots() && num_slots % Layout::kSlotAlignment == 0);
    LayerStorage copy;
    KVShape shape = layout_.Shape();
    shape.num_slots = num_slots;
    copy.layout_ = Layout(shape);
    copy.index_ = index_.Resized(num_slots);
    copy.format_ = format_;
    if (copy.AllocateBuffers()) {
      CopyHeldTo(&copy);
    } else {
      copy.k_ = AlignedBuffer<BF16>::Failure();
    }
    return copy;
  }
  bool Failed() const {
    return k_.Failed() || v_.Failed() || k_int8_.Failed() || v_int8_.Failed() ||
           k_scales_.Failed() || v_scales_.Failed();
  }

  KVView<Layout> View(const Visibility& visibility) const {
    KVView<Layout> view;
    view.format = format_;
    if (format_ == Format::kInt8) {
      const bool has_v = v_int8_.size() != 0;
      view.k_int8 = k_int8_.data();
      view.v_int8 = has_v ? v_int8_.data() : nullptr;
      view.k_scales = k_scales_.data();
      view.v_scales = has_v ? v_scales_.data() : nullptr;
    } else {
      view.k = k_.data();
      view.v = v_.size() != 0 ? v_.data() : nullptr;
    }
    view.layout = layout_;
    view.first_pos = index_.FirstPos();
    view.end_pos = index_.EndPos();
    view.visibility = visibility;
    return view;
  }

 private:
  // Allocates the buffers of format_ only (the others stay empty).
  bool AllocateBuffers() {
    const KVShape& shape = layout_.Shape();
    const size_t k_size = static_cast<size_t>(layout_.K().RequiredSpanSize());
    const size_t v_size = static_cast<size_t>(layout_.V().RequiredSpanSize());
    if (format_ == Format::kInt8) {
      // Scales: [kv_head][slot] for each stream (KVShape::ScaleOffset); none without V.
      const size_t num_scales = static_cast<size_t>(shape.num_slots * shape.num_kv_heads);
      k_int8_ = AlignedBuffer<int8_t>::Zeroed(k_size);
      v_int8_ = AlignedBuffer<int8_t>::Zeroed(v_size);
      k_scales_ = AlignedBuffer<float>::Zeroed(num_scales);
      v_scales_ = AlignedBuffer<float>::Zeroed(shape.v_head_dim != 0 ? num_scales : 0);
      return !Failed() && k_int8_.size() != 0 && k_scales_.size() != 0 &&
             (shape.v_head_dim == 0 || (v_int8_.size() != 0 && v_scales_.size() != 0));
    }
    k_ = AlignedBuffer<BF16>::Zeroed(k_size);
    v_ = AlignedBuffer<BF16>::Zeroed(v_size);
    return !k_.Failed() && !v_.Failed() && k_.size() != 0 &&
           (shape.v_head_dim == 0 || v_.size() != 0);
    // (An empty K can only come from a zero shape, which ValidateStorageSpec rejects.)
  }

  uint64_t ScaleOffset(uint64_t slot, uint32_t kv_head) const {
    return layout_.Shape().ScaleOffset(slot, kv_head);
  }

  // Returns kNotLive for a position not held, kBadArgument for a null k_out, else kOk.
  Result CheckRead(uint64_t pos, const void* k_out, uint64_t layer) const {
    if (!index_.Holds(pos)) {
      return KVRING_DETAIL_REFUSED(layer, Status::kNotLive,
                                   "read of %llu, but the held positions are [%llu, %llu)", pos,
                                   index_.FirstPos(), index_.EndPos());
    }
    if (k_out == nullptr) {
      return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument, "read of %llu: k_out is null", pos);
    }
    return Status::kOk;
  }

  // Encodes `len` K rows, `row_stride` elements apart, into slots [slot, slot + len), which
  // do not wrap, and their scales. Each (token, kv_head) row is encoded into a staging block
  // [token][dim] first, then 16 tokens x 16 dims at a time transposed into K, which is
  // slot-major per dim in both layouts.
  template <typename T>
  void WriteKInt8(uint64_t slot, const T* rows, uint64_t row_stride, uint64_t len) {
    constexpr uint64_t kBlock = 16;
    const KVShape& shape = layout_.Shape();
    const auto map = layout_.K();
    const uint64_t head_dim = shape.head_dim;
    alignas(64) int8_t stage[kBlock * kMaxAttentionHeadDim];
    KVRING_DASSERT(head_dim <= kMaxAttentionHeadDim);
    for (uint64_t i = 0; i < len;) {
      const uint64_t run = std::min({len - i, map.ContiguousSlotsFrom(slot + i), kBlock});
      for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
        EncodeRows(rows + i * row_stride + uint64_t{kv_head} * head_dim, row_stride, head_dim, run,
                   stage, head_dim, k_scales_.data() + ScaleOffset(slot + i, kv_head));
        const uint8_t* from = reinterpret_cast<const uint8_t*>(stage);
        uint8_t* to = reinterpret_cast<uint8_t*>(k_int8_.data() + map(slot + i, kv_head, 0));
        const uint64_t dim_stride = map.DimStride();
        uint64_t dim = 0;
        if (run == kBlock) {
          // head_dim is a multiple of 16 (ValidateAttentionDim).
          for (; dim + kBlock <= head_dim; dim += kBlock) {
            Transpose16x16Bytes(from + dim, head_dim, to + dim * dim_stride, dim_stride);
          }
        }
        for (; dim < head_dim; ++dim) {
          for (uint64_t t = 0; t < run; ++t) to[dim * dim_stride + t] = from[t * head_dim + dim];
        }
      }
      i += run;
    }
  }

  // Encodes `len` V rows, `row_stride` elements apart, into slots [slot, slot + len) and
  // their scales; V is [kv_head][slot][dim], so each row is encoded in place.
  template <typename T>
  void WriteVInt8(uint64_t slot, const T* rows, uint64_t row_stride, uint64_t len) {
    const KVShape& shape = layout_.Shape();
    const auto map = layout_.V();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      EncodeRows(rows + uint64_t{kv_head} * shape.v_head_dim, row_stride, shape.v_head_dim, len,
                 v_int8_.data() + map(slot, kv_head, 0), map.SlotStride(),
                 v_scales_.data() + ScaleOffset(slot, kv_head));
    }
  }

  // Encodes `num_rows` rows of `n` elements, `src_stride` apart, with EncodeInt8Row into q
  // (rows `q_stride` apart) and scales[0, num_rows).
  template <typename T>
  static void EncodeRowsScalar(const T* src, uint64_t src_stride, uint64_t n, uint64_t num_rows,
                               int8_t* q, uint64_t q_stride, float* scales) {
    for (uint64_t r = 0; r < num_rows; ++r) {
      scales[r] = EncodeInt8Row(src + r * src_stride, n, q + r * q_stride);
    }
  }
#if KVRING_TRANSPOSE_AVX2
  // The same, compiled for AVX2: EncodeInt8Row inlines here and its loops vectorise 8 lanes
  // wide (twice SSE2's divisions per cycle). Bit-identical: each lane does the same IEEE
  // operations, and without the fma target no multiply-add is contracted.
  template <typename T>
  __attribute__((target("avx2"))) static void EncodeRowsAvx2(const T* src, uint64_t src_stride,
                                                             uint64_t n, uint64_t num_rows,
                                                             int8_t* q, uint64_t q_stride,
                                                             float* scales) {
    for (uint64_t r = 0; r < num_rows; ++r) {
      scales[r] = EncodeInt8Row(src + r * src_stride, n, q + r * q_stride);
    }
  }
#endif
  template <typename T>
  static void EncodeRows(const T* src, uint64_t src_stride, uint64_t n, uint64_t num_rows,
                         int8_t* q, uint64_t q_stride, float* scales) {
#if KVRING_TRANSPOSE_AVX2
    if (CpuHasAvx2()) {
      EncodeRowsAvx2(src, src_stride, n, num_rows, q, q_stride, scales);
      return;
    }
#endif
    EncodeRowsScalar(src, src_stride, n, num_rows, q, q_stride, scales);
  }

  // Writes `len` K rows, `row_stride` elements apart, into slots [slot, slot + len), which do
  // not wrap. K is slot-major per dim in both layouts, so rows are transposed in blocks
  // (TransposeRows, transpose.h).
  template <typename T>
  void WriteK(uint64_t slot, const T* rows, uint64_t row_stride, uint64_t len, bool stream) {
    const KVShape& shape = layout_.Shape();
    const auto map = layout_.K();
    for (uint64_t i = 0; i < len;) {
      // Slots stay adjacent up to the end of a tile (tiled) or of the buffer (flash).
      const uint64_t run = std::min(len - i, map.ContiguousSlotsFrom(slot + i));
      for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
        TransposeRows(rows + i * row_stride + uint64_t{kv_head} * shape.head_dim, row_stride,
                      k_.data() + map(slot + i, kv_head, 0), map.DimStride(), run, shape.head_dim,
                      stream);
      }
      i += run;
    }
  }

  // Writes dst[dim * dst_stride + t] = src[t * src_stride + dim] as BF16, for t < num_tokens
  // and dim < num_dims. `stream`: whole 64-byte lines may go out with non-temporal stores
  // (the caller fences).
  template <typename T>
  static void TransposeRows(const T* src, uint64_t src_stride, BF16* dst, uint64_t dst_stride,
                            uint64_t num_tokens, uint64_t num_dims, bool stream = false) {
    static_assert(sizeof(BF16) == sizeof(uint16_t), "BF16 is 16 bits");
    uint16_t* out = reinterpret_cast<uint16_t*>(dst);
    // Scalar transposition of tokens [t_begin, t_end) x dims [d_begin, num_dims).
    const auto scalar = [&](uint64_t t_begin, uint64_t t_end, uint64_t d_begin) {
      for (uint64_t d = d_begin; d < num_dims; ++d) {
        for (uint64_t t = t_begin; t < t_end; ++t) {
          out[d * dst_stride + t] = ToBF16(src[t * src_stride + d]).bits;
        }
      }
    };
    // Returns the 16-bit source block of kRows tokens x kRows dims at (t0, d0) and its row
    // stride: the rows themselves for BF16, else `block` after rounding them.
    const auto source = [&](auto rows, uint64_t t0, uint64_t d0, uint16_t* block,
                            uint64_t* stride) -> const uint16_t* {
      constexpr uint64_t kRows = decltype(rows)::value;
      if constexpr (std::is_same<T, BF16>::value) {
        *stride = src_stride;
        return reinterpret_cast<const uint16_t*>(src + t0 * src_stride + d0);
      } else {
        for (uint64_t t = 0; t < kRows; ++t) {
          for (uint64_t d = 0; d < kRows; ++d) {
            block[t * kRows + d] = ToBF16(src[(t0 + t) * src_stride + d0 + d]).bits;
          }
        }
        *stride = kRows;
        return block;
      }
    };
    // Flash K rows are num_slots apart: a batch writes one stream per (kv_head, dim), too many
    // for the hardware prefetcher, and each store would wait for its line. Once per 32
    // tokens (a 64-byte line of a row), fetch for writing the line kPrefetchTokens ahead in
    // each row of the block (measured, interleaved A/B: 512-token flash appends 0.59 -> 0.67-0.75
    // of memcpy into a ring, 0.60-0.79 -> 0.81-0.94 into flat storage).
    // Tiled runs end at their tile, shorter than that: their rows are contiguous.
    constexpr uint64_t kPrefetchTokens = 64;
    const auto prefetch_ahead = [&](uint64_t t, uint64_t d0, uint64_t rows) {
      if (t % 32 != 0 || t + kPrefetchTokens >= num_tokens) return;
      for (uint64_t r = 0; r < rows; ++r) {
        PrefetchForWrite(out + (d0 + r) * dst_stride + t + kPrefetchTokens);
      }
    };
    uint64_t t0 = 0;
#if KVRING_TRANSPOSE_AVX2
    const uintptr_t address = reinterpret_cast<uintptr_t>(out);
    if (stream && CpuHasAvx2() && dst_stride == 16 && num_tokens == 16 && address % 64 == 0) {
      // A whole TiledLayout<16> tile: each 16 x 16 block is 512 contiguous bytes.
      uint64_t d0 = 0;
      for (; d0 + 16 <= num_dims; d0 += 16) {
        uint16_t block[256];
        uint64_t stride;
        const uint16_t* in = source(std::integral_constant<uint64_t, 16>(), 0, d0, block, &stride);
        Transpose16x16Avx2<true>(in, stride, out + d0 * dst_stride, dst_stride);
      }
      scalar(0, 16, d0);
      return;
    }
    if (stream && CpuHasAvx2() && dst_stride % 32 == 0 && num_tokens >= 32) {
      // Flash rows (num_slots apart) and TiledLayout<32> tiles: 32 tokens fill a row's line.
      // Tokens before the first 64-byte boundary of a row go the cached way.
      const uint64_t lead = (64 - address % 64) % 64 / 2;
      if (lead > 0) TransposeRows(src, src_stride, dst, dst_stride, lead, num_dims);
      for (t0 = lead; t0 + 32 <= num_tokens; t0 += 32) {
        uint64_t d0 = 0;
        for (; d0 + 16 <= num_dims; d0 += 16) {
          // Tokens t0..t0+31 of dims d0..d0+15 (from f32 rows: rounded into `block`, 16
          // tokens per call of source, one after the other).
          uint16_t block[512];
          uint64_t stride;
          const uint16_t* in =
              source(std::integral_constant<uint64_t, 16>(), t0, d0, block, &stride);
          if constexpr (!std::is_same<T, BF16>::value) {
            source(std::integral_constant<uint64_t, 16>(), t0 + 16, d0, block + 256, &stride);
          }
          Transpose32x16StreamAvx2(in, stride, out + d0 * dst_stride + t0, dst_stride);
        }
        scalar(t0, t0 + 32, d0);
      }
    }
    if (CpuHasAvx2()) {
      // 16 x 16 blocks: 32-byte loads and stores, half the shuffles of 8 x 8.
      for (; t0 + 16 <= num_tokens; t0 += 16) {
        uint64_t d0 = 0;
        for (; d0 + 16 <= num_dims; d0 += 16) {
          uint16_t block[256];
          uint64_t stride;
          const uint16_t* in =
              source(std::integral_constant<uint64_t, 16>(), t0, d0, block, &stride);
          prefetch_ahead(t0, d0, 16);
          Transpose16x16Avx2<false>(in, stride, out + d0 * dst_stride + t0, dst_stride);
        }
        scalar(t0, t0 + 16, d0);
      }
    }
#endif
    for (; t0 + 8 <= num_tokens; t0 += 8) {
      uint64_t d0 = 0;
      for (; d0 + 8 <= num_dims; d0 += 8) {
        uint16_t block[64];
        uint64_t stride;
        const uint16_t* in = source(std::integral_constant<uint64_t, 8>(), t0, d0, block, &stride);
        prefetch_ahead(t0, d0, 8);
        Transpose8x8(in, stride, out + d0 * dst_stride + t0, dst_stride);
      }
      scalar(t0, t0 + 8, d0);
    }
    scalar(t0, num_tokens, 0);
  }

  // Copies `count` BF16 from `from` to `to` (not overlapping) in 16-byte pieces: rows are a
  // few hundred bytes, too short to amortise a call to memcpy per row.
  static void CopyRow(const BF16* from, BF16* to, uint64_t count) {
    uint64_t i = 0;
    for (; i + 8 <= count; i += 8) std::memcpy(to + i, from + i, 8 * sizeof(BF16));
    for (; i < count; ++i) to[i] = from[i];
  }

  // Writes `len` V rows, `row_stride` elements apart, into slots [slot, slot + len); V is
  // [kv_head][slot][dim].
  template <typename T>
  void WriteV(uint64_t slot, const T* rows, uint64_t row_stride, uint64_t len) {
    const KVShape& shape = layout_.Shape();
    const auto map = layout_.V();
    for (uint64_t t = 0; t < len; ++t) {
      for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
        BF16* dst = v_.data() + map(slot + t, kv_head, 0);
        const T* src = rows + t * row_stride + uint64_t{kv_head} * shape.v_head_dim;
        if constexpr (std::is_same<T, BF16>::value) {
          CopyRow(src, dst, shape.v_head_dim);
        } else {
          for (uint32_t dim = 0; dim < shape.v_head_dim; ++dim) dst[dim] = ToBF16(src[dim]);
        }
      }
    }
  }

  // Copies every held position into `to` (same heads and dims, any num_slots).
  void CopyHeldTo(LayerStorage* to) const {
    const uint64_t from_slots = layout_.Shape().num_slots;
    const uint64_t to_slots = to->layout_.Shape().num_slots;
    for (uint64_t pos = index_.FirstPos(); pos < index_.EndPos();) {
      const uint64_t from_slot = pos % from_slots, to_slot = pos % to_slots;
      const uint64_t len =
          std::min({index_.EndPos() - pos, from_slots - from_slot, to_slots - to_slot});
      CopySlots(from_slot, to, to_slot, len);
      pos += len;
    }
  }

  // Copies slots [from_slot, +len) to `to`'s [to_slot, +len); neither range wraps, and
  // both start at the same position, so they share their offset inside a tile.
  void CopySlots(uint64_t from_slot, LayerStorage* to, uint64_t to_slot, uint64_t len) const {
    if (format_ == Format::kBF16) {
      CopyElements(k_.data(), v_.data(), from_slot, to->layout_, to->k_.data(), to->v_.data(),
                   to_slot, len);
      return;
    }
    CopyElements(k_int8_.data(), v_int8_.data(), from_slot, to->layout_, to->k_int8_.data(),
                 to->v_int8_.data(), to_slot, len);
    const KVShape& shape = layout_.Shape();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      std::memcpy(to->k_scales_.data() + to->ScaleOffset(to_slot, kv_head),
                  k_scales_.data() + ScaleOffset(from_slot, kv_head), len * sizeof(float));
      if (shape.v_head_dim != 0) {
        std::memcpy(to->v_scales_.data() + to->ScaleOffset(to_slot, kv_head),
                    v_scales_.data() + ScaleOffset(from_slot, kv_head), len * sizeof(float));
      }
    }
  }

  // Copies the K and V elements (BF16 or int8) of CopySlots from this layout's buffers `k`,
  // `v` to `to_layout`'s `to_k`, `to_v`.
  template <typename T>
  void CopyElements(const T* k, const T* v, uint64_t from_slot, const Layout& to_layout, T* to_k,
                    T* to_v, uint64_t to_slot, uint64_t len) const {
    const KVShape& shape = layout_.Shape();
    const auto from_k = layout_.K();
    const auto to_k_map = to_layout.K();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (uint64_t i = 0; i < len;) {
        const uint64_t run = std::min({len - i, from_k.ContiguousSlotsFrom(from_slot + i),
                                       to_k_map.ContiguousSlotsFrom(to_slot + i)});
        const T* src = k + from_k(from_slot + i, kv_head, 0);
        T* dst = to_k + to_k_map(to_slot + i, kv_head, 0);
        if (run == from_k.DimStride() && run == to_k_map.DimStride()) {
          // Whole rows of every dim: one block (a full tile, or a whole flash ring).
          std::memcpy(dst, src, run * shape.head_dim * sizeof(T));
        } else {
          for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
            std::memcpy(dst + dim * to_k_map.DimStride(), src + dim * from_k.DimStride(),
                        run * sizeof(T));
          }
        }
        i += run;
      }
      if (shape.v_head_dim != 0) {
        std::memcpy(to_v + to_layout.V()(to_slot, kv_head, 0),
                    v + layout_.V()(from_slot, kv_head, 0), len * shape.v_head_dim * sizeof(T));
      }
    }
  }

  Layout layout_;
  RingIndex index_;
  Format format_ = Format::kBF16;
  // Format::kBF16: the elements at the layout's offsets (V empty without V).
  AlignedBuffer<BF16> k_;
  AlignedBuffer<BF16> v_;
  // Format::kInt8: the elements at the same offsets, and the scales [kv_head][slot].
  AlignedBuffer<int8_t> k_int8_;
  AlignedBuffer<int8_t> v_int8_;
  AlignedBuffer<float> k_scales_;
  AlignedBuffer<float> v_scales_;
};

}  // namespace detail
}  // namespace kvring

#undef KVRING_DETAIL_REFUSED

#endif  // KVRING_STORAGE_LAYER_STORAGE_H_
