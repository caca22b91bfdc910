// kvring/layer_plan.h: the per-layer capacity plan and memory accounting of a KV cache.
// Describe each layer (LayerSpec) and the runtime (RuntimeSpec), then LayerPlan::Builder
// computes what every layer must hold (docs/design.md, the capacity rule) and what it costs.
// Plans only: allocates no K/V (see kv_cache.h) and uses no vector code.
#ifndef KVRING_LAYER_PLAN_H_
#define KVRING_LAYER_PLAN_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/detail/checked_math.h"
#include "kvring/formats/format.h"

namespace kvring {

// How a layer's queries see earlier positions (docs/design.md, visibility rules).
enum class AttentionKind : uint8_t {
  kGlobal,   // every pos <= q
  kSliding,  // q - window < pos <= q
  kChunked,  // pos <= q and pos / chunk == q / chunk
};

// Returns "global", "sliding" or "chunked" ("invalid" for a value outside the enum).
inline const char* ToString(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kGlobal:
      return "global";
    case AttentionKind::kSliding:
      return "sliding";
    case AttentionKind::kChunked:
      return "chunked";
  }
  return "invalid";
}

// The attention backend whose layout the storage uses.
enum class Backend : uint8_t {
  kFlash,  // FlashLayout: K [kv_head][dim][slot], V [kv_head][slot][dim]
  kTiled,  // TiledLayout<kTileRows>: tiles of rows
};

inline const char* ToString(Backend backend) {
  switch (backend) {
    case Backend::kFlash:
      return "flash";
    case Backend::kTiled:
      return "tiled";
  }
  return "invalid";
}

// The runtime's element type. kBF16 counts every layer in its own format (LayerSpec::format);
// kInt8 stores every layer as int8 with its scales, as LayerPlan::Builder::SetFormat(
// Format::kInt8) does. kF16, kF32 and kFP8 are for what-if accounting only: every element
// counted at ElementBytes(type), no scales; KVCache refuses them.
enum class ElementType : uint8_t { kBF16, kF16, kF32, kFP8, kInt8 };

inline const char* ToString(ElementType type) {
  switch (type) {
    case ElementType::kBF16:
      return "bf16";
    case ElementType::kF16:
      return "f16";
    case ElementType::kF32:
      return "f32";
    case ElementType::kFP8:
      return "fp8";
    case ElementType::kInt8:
      return "int8";
  }
  return "invalid";
}

// Returns the bytes of one element of `type` (int8: 1, its scales aside), or 0 for a value
// outside the enum.
inline uint64_t ElementBytes(ElementType type) {
  switch (type) {
    case ElementType::kBF16:
    case ElementType::kF16:
      return 2;
    case ElementType::kF32:
      return 4;
    case ElementType::kFP8:
    case ElementType::kInt8:
      return 1;
  }
  return 0;
}

// Slots a flash-layout buffer is padded to: one 64-byte vector of BF16 K, so that every
// position-aligned vector of slots is whole in ring and flat storage alike.
inline constexpr uint64_t kFlashSlotAlignment = 32;

namespace detail {

// Sets *num_slots to the slots a flash-layout buffer holds `capacity` positions in, or
// returns false on overflow: capacity rounded up to a whole number of 32-slot tiles, and that
// number made odd. Flash K is [kv_head][dim][slot], so consecutive dims lie num_slots * 2
// bytes apart; an odd number of 64-byte tiles makes them fall into different cache sets.
// With an even number (a power of two, say) every dim of a tile lands in the same few sets
// and appends and attention thrash L1 (measured: 1.6x slower decode at 32768 slots).
inline bool FlashNumSlots(uint64_t capacity, uint64_t* num_slots) {
  uint64_t tiles = capacity / kFlashSlotAlignment + (capacity % kFlashSlotAlignment != 0);
  if (tiles % 2 == 0) ++tiles;
  return CheckedMul(tiles, kFlashSlotAlignment, num_slots);
}

}  // namespace detail
// Largest head_dim, v_head_dim and MLA latent_dim the attention kernels take (DeepSeek's MLA
// latent is 576). A plan refuses larger ones.
inline constexpr uint32_t kMaxAttentionHeadDim = 576;
// head_dim, v_head_dim and latent_dim must be multiples of this (the kernels split a head
// into 16-element pieces). A plan refuses others.
inline constexpr uint32_t kAttentionDimMultiple = 16;

// Returns whether the attention kernels serve a head dimension of `dim` elements: a positive
// multiple of kAttentionDimMultiple, at most kMaxAttentionHeadDim.
inline bool IsAttentionDim(uint64_t dim) {
  return dim != 0 && dim % kAttentionDimMultiple == 0 && dim <= kMaxAttentionHeadDim;
}

// Tile heights TiledLayout supports: powers of two in [kMinTileRows, kMaxTileRows].
inline constexpr uint32_t kMinTileRows = 8;
inline constexpr uint32_t kMaxTileRows = 64;

// Marks a layer that owns its K/V (LayerSpec::kv_source).
inline constexpr int32_t kOwnsKV = -1;

// One layer's attention as the model defines it.
struct LayerSpec {
  AttentionKind kind = AttentionKind::kGlobal;
  uint64_t window = 0;  // kSliding only: keys a query sees, itself included (>= 1)
  uint64_t chunk = 0;   // kChunked only: block length (>= 1)
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;    // K elements per kv_head
  uint32_t v_head_dim = 0;  // V elements per kv_head; 0 means head_dim
  // MLA (DeepSeek): one stream of latent_dim elements per position and no separate V.
  // Then num_kv_heads, head_dim and v_head_dim stay 0.
  uint32_t latent_dim = 0;
  // kOwnsKV, or the index of an earlier owning layer whose K/V this layer reads.
  int32_t kv_source = kOwnsKV;
  // How the layer's K and V elements are stored (kvring/formats/format.h). A consumer reads
  // its owner's, whatever it says here: a built plan's consumers carry their owner's format.
  // LayerPlan::Builder::SetFormat and RuntimeSpec::element_type kInt8 replace it.
  Format format = Format::kBF16;

  // Returns a full-attention layer.
  static LayerSpec Global(uint32_t num_kv_heads, uint32_t head_dim) {
    LayerSpec spec;
    spec.num_kv_heads = num_kv_heads;
    spec.head_dim = head_dim;
    return spec;
  }
  // Returns a sliding-window layer whose queries see `window` keys, their own included.
  static LayerSpec Sliding(uint64_t window, uint32_t num_kv_heads, uint32_t head_dim) {
    LayerSpec spec = Global(num_kv_heads, head_dim);
    spec.kind = AttentionKind::kSliding;
    spec.window = window;
    return spec;
  }
  // Returns a chunked layer (Llama 4): queries see their own block of `chunk` positions.
  static LayerSpec Chunked(uint64_t chunk, uint32_t num_kv_heads, uint32_t head_dim) {
    LayerSpec spec = Global(num_kv_heads, head_dim);
    spec.kind = AttentionKind::kChunked;
    spec.chunk = chunk;
    return spec;
  }
  // Returns a global MLA layer storing `latent_dim` elements per position.
  static LayerSpec Latent(uint32_t latent_dim) {
    LayerSpec spec;
    spec.latent_dim = latent_dim;
    return spec;
  }
  // Returns this layer reading the K/V of layer `source` instead of owning its own.
  LayerSpec SharedFrom(int32_t source) const {
    LayerSpec spec = *this;
    spec.kv_source = source;
    return spec;
  }

  bool IsLatent() const { return latent_dim != 0; }
  bool OwnsKV() const { return kv_source == kOwnsKV; }
  // Keys a query may see at most: window, chunk, or 0 for unbounded (global).
  uint64_t Span() const {
    switch (kind) {
      case AttentionKind::kSliding:
        return window;
      case AttentionKind::kChunked:
        return chunk;
      case AttentionKind::kGlobal:
        break;
    }
    return 0;
  }
  // V elements per kv_head.
  uint32_t VHeadDim() const { return v_head_dim != 0 ? v_head_dim : head_dim; }
  // K elements stored per position.
  uint64_t KElementsPerSlot() const {
    return IsLatent() ? latent_dim : uint64_t{num_kv_heads} * head_dim;
  }
  // V elements stored per position (0 for MLA).
  uint64_t VElementsPerSlot() const {
    if (IsLatent()) return 0;
    return uint64_t{num_kv_heads} * VHeadDim();
  }
};

// What the engine will do with the cache.
struct RuntimeSpec {
  uint64_t context = 0;   // T: the logical limit of positions in one sequence
  uint64_t batch = 1;     // B: most positions appended before attention reads them
  uint64_t rollback = 0;  // R: most newest positions one rollback discards
  Backend backend = Backend::kFlash;
  uint32_t tile_rows = 16;  // kTiled only: TiledLayout<kTileRows>
  uint64_t num_sequences = 1;
  // kBF16: the layers' formats; kInt8: every layer int8; kF16, kF32, kFP8: accounting only.
  ElementType element_type = ElementType::kBF16;
};

// Returns whether `type` is for what-if accounting only (kF16, kF32, kFP8): no layer format
// stores it, and KVCache refuses a plan of it.
inline bool IsAccountingOnly(ElementType type) {
  return type == ElementType::kF16 || type == ElementType::kF32 || type == ElementType::kFP8;
}

// Returns the slot alignment of the runtime's layout: num_slots is a multiple of it.
inline uint64_t SlotAlignment(const RuntimeSpec& runtime) {
  return runtime.backend == Backend::kTiled ? runtime.tile_rows : kFlashSlotAlignment;
}

// Sets *num_slots to the slots the runtime's layout stores `capacity` positions in (the
// layout's padding: tiles of tile_rows for tiled, an odd number of 32-slot tiles for flash),
// or returns false on overflow.
inline bool NumSlotsFor(const RuntimeSpec& runtime, uint64_t capacity, uint64_t* num_slots) {
  if (runtime.backend == Backend::kFlash) return detail::FlashNumSlots(capacity, num_slots);
  return detail::CheckedRoundUp(capacity, SlotAlignment(runtime), num_slots);
}

// The plan of one layer.
struct LayerInfo {
  size_t index = 0;
  LayerSpec spec;
  size_t owner = 0;        // the layer whose buffers this layer reads (itself if it owns)
  uint64_t span = 0;       // owners: largest window/chunk among it and its consumers; 0 if
                           // some reader is global
  uint64_t capacity = 0;   // logical slots it must hold; 0 for consumers
  uint64_t num_slots = 0;  // capacity plus the layout's padding (NumSlotsFor); 0 for consumers
  // Bytes of one position, every kv_head, in the layer's format (spec.format; a consumer's is
  // its owner's): K is num_kv_heads * RowBytes(format, head_dim) (MLA: RowBytes(format,
  // latent_dim), one stream), V num_kv_heads * RowBytes(format, v_head_dim) (MLA: 0). An int8
  // row counts its 4-byte scale. With an accounting-only element type, elements *
  // ElementBytes(type) instead.
  uint64_t k_slot_bytes = 0;
  uint64_t v_slot_bytes = 0;
  uint64_t slot_bytes = 0;     // k_slot_bytes + v_slot_bytes
  uint64_t bytes = 0;          // num_slots * slot_bytes; 0 for consumers
  uint64_t padding_bytes = 0;  // bytes of the padding slots: (num_slots - capacity) * slot_bytes

  bool OwnsKV() const { return owner == index; }
};

// Device memory available to an engine, for LayerPlan::Capacity.
struct MemoryBudget {
  uint64_t device_bytes = 0;
  uint64_t weight_bytes = 0;
  uint64_t workspace_bytes = 0;  // activations, scratch
  uint64_t margin_bytes = 0;     // kept free
};

// How much a budget holds, for a plan's model and runtime.
struct CapacityReport {
  uint64_t usable_bytes = 0;        // device - weights - workspace - margin (0 if negative)
  uint64_t bytes_per_sequence = 0;  // one sequence at the plan's context
  uint64_t max_sequences = 0;       // sequences of the plan's context that fit
  uint64_t max_tokens = 0;          // max_sequences * context
  // Largest context (<= the limit given) at which the plan's num_sequences fit; 0 if none.
  uint64_t max_context = 0;
};

// The capacity and bytes of every layer of one model under one runtime.
// Immutable; copy it freely. Build one with LayerPlan::Builder.
class LayerPlan {
 public:
  class Builder;

  LayerPlan() = default;

  const RuntimeSpec& Runtime() const { return runtime_; }
  size_t NumLayers() const { return layers_.size(); }
  const LayerInfo& Layer(size_t index) const {
    KVRING_CHECK(index < layers_.size());
    return layers_[index];
  }
  const std::vector<LayerInfo>& Layers() const { return layers_; }
  size_t NumOwningLayers() const {
    return static_cast<size_t>(std::count_if(layers_.begin(), layers_.end(),
                                             [](const LayerInfo& l) { return l.OwnsKV(); }));
  }
  // Slots every owning layer's num_slots is a multiple of.
  uint64_t SlotAlignment() const { return kvring::SlotAlignment(runtime_); }
  // Bytes of one element of the runtime's element type (scales aside); a layer's bytes come
  // from its format (LayerInfo::slot_bytes).
  uint64_t ElementBytes() const { return kvring::ElementBytes(runtime_.element_type); }

  // Bytes of one sequence: the sum of every owning layer's bytes, padding included.
  uint64_t TotalBytes() const { return total_bytes_; }
  // Bytes of Runtime().num_sequences sequences.
  uint64_t TotalBytesAllSequences() const { return total_bytes_all_sequences_; }
  // Bytes of TotalBytes() that are layout padding beyond every layer's capacity.
  uint64_t PaddingBytes() const { return padding_bytes_; }
  // Bytes of one sequence if every owning layer kept the whole context (with padding).
  uint64_t FlatBytes() const { return flat_bytes_; }
  // Bytes one more token of context adds to one sequence (padding aside): the slot bytes
  // of every owning layer whose capacity is the context.
  uint64_t ContextTokenBytes() const { return context_token_bytes_; }

  // Returns the bytes of one sequence if the context were `context` (all else the same),
  // or kMaxU64 if that count does not fit 64 bits. Does not allocate. Cost: O(layers).
  uint64_t BytesAtContext(uint64_t context) const {
    uint64_t total = 0;
    for (const LayerInfo& layer : layers_) {
      if (!layer.OwnsKV()) continue;
      const uint64_t capacity = CapacityOf(layer.span, context, runtime_);
      uint64_t num_slots, bytes;
      if (!NumSlotsFor(runtime_, capacity, &num_slots) ||
          !detail::CheckedMul(num_slots, layer.slot_bytes, &bytes)) {
        return detail::kMaxU64;
      }
      total = detail::SaturatingAdd(total, bytes);
    }
    return total;
  }

  // Returns what `budget` holds for this plan; the largest context searched is
  // `context_limit` (for example the model's maximum). Cost: O(layers * 64).
  CapacityReport Capacity(const MemoryBudget& budget, uint64_t context_limit) const {
    CapacityReport report;
    uint64_t reserved = detail::SaturatingAdd(
        detail::SaturatingAdd(budget.weight_bytes, budget.workspace_bytes), budget.margin_bytes);
    report.usable_bytes = budget.device_bytes > reserved ? budget.device_bytes - reserved : 0;
    report.bytes_per_sequence = total_bytes_;
    report.max_sequences = total_bytes_ == 0 ? 0 : report.usable_bytes / total_bytes_;
    report.max_tokens = detail::SaturatingMul(report.max_sequences, runtime_.context);
    // BytesAtContext is non-decreasing in the context: binary search the last that fits.
    const auto fits = [&](uint64_t context) {
      const uint64_t per_sequence = BytesAtContext(context);
      uint64_t all;
      return detail::CheckedMul(per_sequence, runtime_.num_sequences, &all) &&
             all <= report.usable_bytes;
    };
    uint64_t lo = 0, hi = context_limit;  // invariant: lo fits (or is 0), hi+1 does not
    if (hi != 0 && fits(hi)) {
      lo = hi;
    } else {
      while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (fits(mid)) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
    }
    report.max_context = lo;
    return report;
  }

  // Returns the plan of the same layers under another runtime (for example a larger batch),
  // or the error that runtime has.
  Expected<LayerPlan> WithRuntime(const RuntimeSpec& runtime) const;

  // Returns the capacity rule (docs/design.md) for an owner whose readers' largest
  // window or chunk is `span` (0: some reader is global).
  static uint64_t CapacityOf(uint64_t span, uint64_t context, const RuntimeSpec& runtime) {
    if (span == 0) return context;
    const uint64_t needed =
        detail::SaturatingAdd(span - 1, std::max(runtime.batch, runtime.rollback));
    return std::min(context, needed);
  }

 private:
  RuntimeSpec runtime_;
  std::vector<LayerInfo> layers_;
  uint64_t total_bytes_ = 0;
  uint64_t padding_bytes_ = 0;
  uint64_t total_bytes_all_sequences_ = 0;
  uint64_t flat_bytes_ = 0;
  uint64_t context_token_bytes_ = 0;
};

// Collects layer specs and a runtime, validates them, and builds the LayerPlan.
class LayerPlan::Builder {
 public:
  // Appends one layer; its index is the number of layers added before it.
  Builder& AddLayer(const LayerSpec& spec) {
    specs_.push_back(spec);
    return *this;
  }
  // Appends `count` copies of `spec`.
  Builder& AddLayers(size_t count, const LayerSpec& spec) {
    specs_.insert(specs_.end(), count, spec);
    return *this;
  }
  // Replaces the whole runtime, its backend and tile_rows included.
  Builder& SetRuntime(const RuntimeSpec& runtime) {
    runtime_ = runtime;
    tile_rows_given_ = false;
    return *this;
  }
  Builder& SetContext(uint64_t context) {
    runtime_.context = context;
    return *this;
  }
  Builder& SetBatch(uint64_t batch) {
    runtime_.batch = batch;
    return *this;
  }
  Builder& SetRollback(uint64_t rollback) {
    runtime_.rollback = rollback;
    return *this;
  }
  // Chooses the backend and tile height of `Layout` (FlashLayout or TiledLayout<kTileRows>),
  // the layout the cache is then created with: KVCache<Layout>::Create(plan). Reads only
  // Layout::kBackend and, for the tiled backend, Layout::kRows, so that this header needs no
  // layout header.
  template <typename Layout>
  Builder& SetLayout() {
    runtime_.backend = Layout::kBackend;
    runtime_.tile_rows = RuntimeSpec().tile_rows;
    if constexpr (Layout::kBackend == Backend::kTiled) runtime_.tile_rows = Layout::kRows;
    tile_rows_given_ = false;
    return *this;
  }
  // Chooses the backend; the tiled backend gets tiles of 16 rows.
  Builder& SetBackend(Backend backend) {
    runtime_.backend = backend;
    runtime_.tile_rows = RuntimeSpec().tile_rows;
    tile_rows_given_ = false;
    return *this;
  }
  // Chooses the tiled backend with tiles of `tile_rows` (a power of two from kMinTileRows to
  // kMaxTileRows). Build() refuses a tile height given with the flash backend, which has none.
  Builder& SetBackend(Backend backend, uint32_t tile_rows) {
    runtime_.backend = backend;
    runtime_.tile_rows = tile_rows;
    tile_rows_given_ = true;
    return *this;
  }
  Builder& SetNumSequences(uint64_t num_sequences) {
    runtime_.num_sequences = num_sequences;
    return *this;
  }
  // kInt8 stores every layer in int8, as SetFormat(Format::kInt8); kF16, kF32, kFP8 are for
  // accounting only (see ElementType).
  Builder& SetElementType(ElementType element_type) {
    runtime_.element_type = element_type;
    return *this;
  }
  // Sets the format of every layer, replacing each LayerSpec::format, and those of layers
  // added later too: Build() applies it, so it may come before or after AddLayer. A per-kind
  // SetFormat(kind, format) wins over it for that kind, whatever the order of the calls; a
  // second call replaces the first. A consumer still reads its owner's format.
  Builder& SetFormat(Format format) {
    format_ = format;
    return *this;
  }
  // Sets the format of every layer of `kind` (for example int8 globals and BF16 sliding
  // layers), replacing their LayerSpec::format, at Build() as SetFormat(format). Layers of
  // other kinds keep theirs. A consumer reads its owner's format, so the rule for the owner's
  // kind is the one that counts for it.
  Builder& SetFormat(AttentionKind kind, Format format) {
    const size_t index = static_cast<size_t>(kind);
    if (index < kNumKinds) {
      kind_formats_[index] = format;
    } else {
      bad_format_kind_ = static_cast<int>(kind);
    }
    return *this;
  }

  // The specs as added: the SetFormat rules apply at Build().
  const std::vector<LayerSpec>& Specs() const { return specs_; }
  const RuntimeSpec& Runtime() const { return runtime_; }

  // Returns the plan, or an Error naming the first invalid field and its value.
  // Allocates the plan's layer table only. Cost: O(layers).
  Expected<LayerPlan> Build() const;

 private:
  static constexpr size_t kNumKinds = 3;  // AttentionKind's values

  // Returns the layer specs with the format rules applied (consumers not yet normalised).
  std::vector<LayerSpec> SpecsWithFormats() const;

  std::vector<LayerSpec> specs_;
  RuntimeSpec runtime_;
  bool tile_rows_given_ = false;                   // by SetBackend(backend, tile_rows)
  std::optional<Format> format_;                   // by SetFormat(format)
  std::optional<Format> kind_formats_[kNumKinds];  // by SetFormat(kind, format)
  int bad_format_kind_ = -1;  // an AttentionKind outside the enum given to SetFormat
};

namespace detail {

inline Error FieldError(std::string field, const std::string& value, const std::string& why) {
  std::string message = field + ": " + value + " " + why;
  return Error{std::move(field), std::move(message)};
}

inline std::string LayerField(size_t index, const char* name) {
  return "layers[" + std::to_string(index) + "]." + name;
}

// Returns an Error for a head dimension (`field`, nonzero) the attention kernels cannot
// serve (IsAttentionDim), or an empty field.
inline Error ValidateAttentionDim(std::string field, uint32_t dim) {
  const std::string rule = "(the attention kernels need head dims in multiples of " +
                           std::to_string(kAttentionDimMultiple) + ", at most " +
                           std::to_string(kMaxAttentionHeadDim) + ")";
  if (dim % kAttentionDimMultiple != 0) {
    return FieldError(std::move(field), std::to_string(dim),
                      "is not a multiple of " + std::to_string(kAttentionDimMultiple) + " " + rule);
  }
  if (dim > kMaxAttentionHeadDim) {
    return FieldError(std::move(field), std::to_string(dim),
                      "is above " + std::to_string(kMaxAttentionHeadDim) + " " + rule);
  }
  return Error{};
}

// Returns an Error for the first invalid runtime field, or an empty field if all are valid.
inline Error ValidateRuntime(const RuntimeSpec& runtime) {
  using std::to_string;
  if (runtime.context == 0) {
    return FieldError("runtime.context", "0", "is invalid: the context must be at least 1");
  }
  if (runtime.batch == 0) {
    return FieldError("runtime.batch", "0", "is invalid: the batch must be at least 1");
  }
  if (runtime.batch > runtime.context) {
    return FieldError("runtime.batch", to_string(runtime.batch),
                      "is invalid: it exceeds runtime.context " + to_string(runtime.context));
  }
  if (runtime.rollback > runtime.context) {
    return FieldError("runtime.rollback", to_string(runtime.rollback),
                      "is invalid: it exceeds runtime.context " + to_string(runtime.context));
  }
  if (runtime.num_sequences == 0) {
    return FieldError("runtime.num_sequences", "0",
                      "is invalid: the number of sequences must be at least 1");
  }
  if (runtime.backend != Backend::kFlash && runtime.backend != Backend::kTiled) {
    return FieldError("runtime.backend", to_string(static_cast<int>(runtime.backend)),
                      "is not a kvring::Backend");
  }
  if (runtime.backend == Backend::kTiled &&
      (runtime.tile_rows < kMinTileRows || runtime.tile_rows > kMaxTileRows ||
       (runtime.tile_rows & (runtime.tile_rows - 1)) != 0)) {
    return FieldError("runtime.tile_rows", to_string(runtime.tile_rows),
                      "is invalid: tiles hold a power of two from " + to_string(kMinTileRows) +
                          " to " + to_string(kMaxTileRows) + " rows");
  }
  if (kvring::ElementBytes(runtime.element_type) == 0) {
    return FieldError("runtime.element_type", to_string(static_cast<int>(runtime.element_type)),
                      "is not a kvring::ElementType");
  }
  return Error{};
}

// Returns an Error for the first invalid field of layer `index` (whose predecessors are
// valid), or an empty field.
inline Error ValidateLayer(const std::vector<LayerSpec>& specs, size_t index) {
  using std::to_string;
  const LayerSpec& spec = specs[index];
  switch (spec.kind) {
    case AttentionKind::kGlobal:
    case AttentionKind::kSliding:
    case AttentionKind::kChunked:
      break;
    default:
      return FieldError(LayerField(index, "kind"), to_string(static_cast<int>(spec.kind)),
                        "is not a kvring::AttentionKind");
  }
  if (RowBytes(spec.format, 1) == 0) {
    return FieldError(LayerField(index, "format"), to_string(static_cast<int>(spec.format)),
                      "is not a kvring::Format");
  }
  if (spec.kind == AttentionKind::kSliding && spec.window == 0) {
    return FieldError(LayerField(index, "window"), "0",
                      "is invalid: a sliding layer's window must be at least 1");
  }
  if (spec.kind != AttentionKind::kSliding && spec.window != 0) {
    return FieldError(LayerField(index, "window"), to_string(spec.window),
                      "is set on a " + std::string(ToString(spec.kind)) +
                          " layer; only sliding layers have a window");
  }
  if (spec.kind == AttentionKind::kChunked && spec.chunk == 0) {
    return FieldError(LayerField(index, "chunk"), "0",
                      "is invalid: a chunked layer's chunk must be at least 1");
  }
  if (spec.kind != AttentionKind::kChunked && spec.chunk != 0) {
    return FieldError(LayerField(index, "chunk"), to_string(spec.chunk),
                      "is set on a " + std::string(ToString(spec.kind)) +
                          " layer; only chunked layers have a chunk");
  }
  if (spec.IsLatent()) {
    if (spec.num_kv_heads != 0 || spec.head_dim != 0 || spec.v_head_dim != 0) {
      return FieldError(LayerField(index, "latent_dim"), to_string(spec.latent_dim),
                        "is set together with num_kv_heads/head_dim/v_head_dim; an MLA "
                        "layer stores only its latent");
    }
  } else {
    if (spec.num_kv_heads == 0) {
      return FieldError(LayerField(index, "num_kv_heads"), "0",
                        "is invalid: a layer needs at least one KV head");
    }
    if (spec.head_dim == 0) {
      return FieldError(LayerField(index, "head_dim"), "0",
                        "is invalid: the head dimension must be at least 1");
    }
  }
  // A dim of 0 is absent here: MLA has no heads, v_head_dim 0 means head_dim.
  const std::pair<const char*, uint32_t> dims[] = {{"head_dim", spec.head_dim},
                                                   {"v_head_dim", spec.v_head_dim},
                                                   {"latent_dim", spec.latent_dim}};
  for (const auto& [name, dim] : dims) {
    if (dim == 0) continue;
    Error error = ValidateAttentionDim(LayerField(index, name), dim);
    if (!error.field.empty()) return error;
  }
  if (spec.kv_source != kOwnsKV) {
    const std::string field = LayerField(index, "kv_source");
    const int32_t source = spec.kv_source;
    if (source < 0 || static_cast<size_t>(source) >= index) {
      return FieldError(field, to_string(source),
                        "is invalid: a KV source must be an earlier layer (0 to " +
                            (index == 0 ? std::string("none") : to_string(index - 1)) + ")");
    }
    const LayerSpec& owner = specs[static_cast<size_t>(source)];
    if (!owner.OwnsKV()) {
      return FieldError(field, to_string(source),
                        "is invalid: layer " + to_string(source) + " reads the KV of layer " +
                            to_string(owner.kv_source) + " itself; name the owner instead");
    }
    if (owner.IsLatent() != spec.IsLatent() || owner.latent_dim != spec.latent_dim) {
      return FieldError(field, to_string(source),
                        "is invalid: its latent_dim " + to_string(owner.latent_dim) +
                            " differs from this layer's " + to_string(spec.latent_dim));
    }
    if (owner.num_kv_heads != spec.num_kv_heads) {
      return FieldError(field, to_string(source),
                        "is invalid: its num_kv_heads " + to_string(owner.num_kv_heads) +
                            " differs from this layer's " + to_string(spec.num_kv_heads));
    }
    if (owner.head_dim != spec.head_dim || owner.VHeadDim() != spec.VHeadDim()) {
      return FieldError(field, to_string(source),
                        "is invalid: its head_dim/v_head_dim " + to_string(owner.head_dim) + "/" +
                            to_string(owner.VHeadDim()) + " differ from this layer's " +
                            to_string(spec.head_dim) + "/" + to_string(spec.VHeadDim()));
    }
  }
  return Error{};
}

// Sets *k_bytes and *v_bytes to the bytes of one position of `spec` (every kv_head, in its
// format; for an accounting-only `type`, at ElementBytes(type) an element), or returns false
// on overflow.
inline bool SlotBytes(const LayerSpec& spec, ElementType type, uint64_t* k_bytes,
                      uint64_t* v_bytes) {
  if (IsAccountingOnly(type)) {
    return CheckedMul(spec.KElementsPerSlot(), kvring::ElementBytes(type), k_bytes) &&
           CheckedMul(spec.VElementsPerSlot(), kvring::ElementBytes(type), v_bytes);
  }
  if (spec.IsLatent()) {
    *k_bytes = RowBytes(spec.format, spec.latent_dim);  // one stream, one "kv_head"
    *v_bytes = 0;
    return true;
  }
  return CheckedMul(spec.num_kv_heads, RowBytes(spec.format, spec.head_dim), k_bytes) &&
         CheckedMul(spec.num_kv_heads, RowBytes(spec.format, spec.VHeadDim()), v_bytes);
}

}  // namespace detail

inline std::vector<LayerSpec> LayerPlan::Builder::SpecsWithFormats() const {
  // element_type kInt8 stands for SetFormat(Format::kInt8); Build() refuses it against an
  // explicit SetFormat of another format.
  std::optional<Format> every_layer = format_;
  if (!every_layer && runtime_.element_type == ElementType::kInt8) every_layer = Format::kInt8;
  std::vector<LayerSpec> specs = specs_;
  for (LayerSpec& spec : specs) {
    const size_t kind = static_cast<size_t>(spec.kind);
    if (kind < kNumKinds && kind_formats_[kind]) {
      spec.format = *kind_formats_[kind];
    } else if (every_layer) {
      spec.format = *every_layer;
    }
  }
  return specs;
}

inline Expected<LayerPlan> LayerPlan::Builder::Build() const {
  using std::to_string;
  if (specs_.empty()) {
    return detail::FieldError("layers", "[]", "is invalid: a plan needs at least one layer");
  }
  if (specs_.size() > static_cast<size_t>(INT32_MAX)) {
    return detail::FieldError("layers", to_string(specs_.size()), "are too many layers");
  }
  Error error = detail::ValidateRuntime(runtime_);
  if (!error.field.empty()) return error;
  if (runtime_.backend == Backend::kFlash && tile_rows_given_) {
    return detail::FieldError("runtime.tile_rows", to_string(runtime_.tile_rows),
                              "is ignored by the flash backend; use SetLayout<FlashLayout>() or "
                              "SetBackend(Backend::kFlash)");
  }
  if (bad_format_kind_ >= 0) {
    return detail::FieldError("format.kind", to_string(bad_format_kind_),
                              "is not a kvring::AttentionKind (given to SetFormat)");
  }
  if (runtime_.element_type == ElementType::kInt8 && format_ && *format_ != Format::kInt8) {
    return detail::FieldError("runtime.element_type", "int8",
                              std::string("stores every layer in int8, but SetFormat asks ") +
                                  ToString(*format_) + " for every layer; give one");
  }
  std::vector<LayerSpec> specs = SpecsWithFormats();
  for (size_t i = 0; i < specs.size(); ++i) {
    error = detail::ValidateLayer(specs, i);
    if (!error.field.empty()) return error;
    // A consumer reads its owner's buffers, so its format is the owner's (validated above).
    if (!specs[i].OwnsKV()) specs[i].format = specs[static_cast<size_t>(specs[i].kv_source)].format;
  }
  if (IsAccountingOnly(runtime_.element_type)) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].format == Format::kBF16) continue;
      return detail::FieldError("runtime.element_type", ToString(runtime_.element_type),
                                "is for accounting only and counts no scales, but " +
                                    detail::LayerField(i, "format") + " is " +
                                    ToString(specs[i].format) +
                                    "; plan int8 layers with element type bf16 "
                                    "or int8");
    }
  }

  LayerPlan plan;
  plan.runtime_ = runtime_;
  plan.layers_.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    LayerInfo& layer = plan.layers_[i];
    layer.index = i;
    layer.spec = specs[i];
    layer.owner = specs[i].OwnsKV() ? i : static_cast<size_t>(specs[i].kv_source);
    if (!detail::SlotBytes(specs[i], runtime_.element_type, &layer.k_slot_bytes,
                           &layer.v_slot_bytes) ||
        !detail::CheckedAdd(layer.k_slot_bytes, layer.v_slot_bytes, &layer.slot_bytes)) {
      return detail::FieldError(detail::LayerField(i, "head_dim"), to_string(specs[i].head_dim),
                                "makes the bytes of one position overflow 64 bits");
    }
  }
  // The owner keeps the largest span any reader needs; a global reader needs everything.
  std::vector<bool> has_global_reader(specs.size(), false);
  for (const LayerInfo& reader : plan.layers_) {
    LayerInfo& owner = plan.layers_[reader.owner];
    if (reader.spec.kind == AttentionKind::kGlobal) has_global_reader[owner.index] = true;
    owner.span = std::max(owner.span, reader.spec.Span());
  }

  for (LayerInfo& layer : plan.layers_) {
    if (!layer.OwnsKV()) {
      layer.span = 0;
      continue;
    }
    if (has_global_reader[layer.index]) layer.span = 0;
    layer.capacity = CapacityOf(layer.span, runtime_.context, runtime_);
    uint64_t flat_slots, flat_bytes;
    if (!NumSlotsFor(runtime_, layer.capacity, &layer.num_slots) ||
        !detail::CheckedMul(layer.num_slots, layer.slot_bytes, &layer.bytes) ||
        !detail::CheckedAdd(plan.total_bytes_, layer.bytes, &plan.total_bytes_) ||
        !NumSlotsFor(runtime_, runtime_.context, &flat_slots) ||
        !detail::CheckedMul(flat_slots, layer.slot_bytes, &flat_bytes) ||
        !detail::CheckedAdd(plan.flat_bytes_, flat_bytes, &plan.flat_bytes_)) {
      return detail::FieldError(
          "runtime.context", to_string(runtime_.context),
          "makes the bytes of layer " + to_string(layer.index) + " overflow 64 bits");
    }
    // Both below bytes, which did not overflow.
    layer.padding_bytes = (layer.num_slots - layer.capacity) * layer.slot_bytes;
    plan.padding_bytes_ += layer.padding_bytes;
    if (layer.capacity == runtime_.context) plan.context_token_bytes_ += layer.slot_bytes;
  }
  if (!detail::CheckedMul(plan.total_bytes_, runtime_.num_sequences,
                          &plan.total_bytes_all_sequences_)) {
    return detail::FieldError("runtime.num_sequences", to_string(runtime_.num_sequences),
                              "makes the total bytes overflow 64 bits");
  }
  return plan;
}

inline Expected<LayerPlan> LayerPlan::WithRuntime(const RuntimeSpec& runtime) const {
  Builder builder;
  for (const LayerInfo& layer : layers_) builder.AddLayer(layer.spec);
  return builder.SetRuntime(runtime).Build();
}

}  // namespace kvring

#endif  // KVRING_LAYER_PLAN_H_
