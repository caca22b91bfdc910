// kvring/plan/builder.h: LayerPlan::Builder collects layer specs and a runtime, validates
// them (plan/validation.h) and computes every layer's plan (the capacity rule,
// plan/capacity.h). Cost: O(layers).
#ifndef KVRING_PLAN_BUILDER_H_
#define KVRING_PLAN_BUILDER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvring/base.h"
#include "kvring/detail/checked_math.h"
#include "kvring/formats/format.h"
#include "kvring/kinds.h"
#include "kvring/plan/capacity.h"
#include "kvring/plan/layer_plan.h"
#include "kvring/plan/specs.h"
#include "kvring/plan/validation.h"

namespace kvring {

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
  Builder& SetStageStates(bool stage_states) {
    runtime_.stage_states = stage_states;
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
  // Storage only (RuntimeSpec::huge_pages): large K/V buffers on transparent huge pages.
  Builder& SetHugePages(bool huge_pages) {
    runtime_.huge_pages = huge_pages;
    return *this;
  }
  // kInt8 (kInt8Hadamard) stores every layer in int8 (int8h), as SetFormat of it; kF16,
  // kF32, kFP8 are for accounting only (IsAccountingOnly).
  Builder& SetElementType(Format element_type) {
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
  // Returns the specs with the format rules applied and each consumer given its owner's
  // format, or the Error of the first invalid field (Build's refusals but the overflows).
  Expected<std::vector<LayerSpec>> ValidatedSpecs() const;

  std::vector<LayerSpec> specs_;
  RuntimeSpec runtime_;
  bool tile_rows_given_ = false;                   // by SetBackend(backend, tile_rows)
  std::optional<Format> format_;                   // by SetFormat(format)
  std::optional<Format> kind_formats_[kNumKinds];  // by SetFormat(kind, format)
  int bad_format_kind_ = -1;  // an AttentionKind outside the enum given to SetFormat
};

inline std::vector<LayerSpec> LayerPlan::Builder::SpecsWithFormats() const {
  // element_type kInt8 (kInt8Hadamard) stands for SetFormat of it; Build() refuses it against
  // an explicit SetFormat of another format.
  std::optional<Format> every_layer = format_;
  if (!every_layer && IsInt8(runtime_.element_type)) every_layer = runtime_.element_type;
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

inline Expected<std::vector<LayerSpec>> LayerPlan::Builder::ValidatedSpecs() const {
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
  if (IsInt8(runtime_.element_type) && format_ && *format_ != runtime_.element_type) {
    const std::string type = ToString(runtime_.element_type);
    return detail::FieldError("runtime.element_type", type,
                              "stores every layer in " + type + ", but SetFormat asks " +
                                  ToString(*format_) + " for every layer; give one");
  }
  std::vector<LayerSpec> specs = SpecsWithFormats();
  for (size_t i = 0; i < specs.size(); ++i) {
    error = detail::ValidateLayer(specs, i);
    if (!error.field.empty()) return error;
    // A consumer reads its owner's buffers, so its format is the owner's (validated above).
    if (specs[i].ReadsSharedKV()) {
      specs[i].format = specs[static_cast<size_t>(specs[i].kv_source)].format;
    }
  }
  if (IsAccountingOnly(runtime_.element_type)) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!IsInt8(specs[i].format)) continue;  // counted in the element type
      return detail::FieldError("runtime.element_type", ToString(runtime_.element_type),
                                "is for accounting only and counts no scales, but " +
                                    detail::LayerField(i, "format") + " is " +
                                    ToString(specs[i].format) +
                                    "; plan int8 layers with element type bf16 "
                                    "or int8");
    }
  }
  return specs;
}

inline Expected<LayerPlan> LayerPlan::Builder::Build() const {
  using std::to_string;
  Expected<std::vector<LayerSpec>> validated = ValidatedSpecs();
  if (!validated.ok()) return validated.error();
  const std::vector<LayerSpec>& specs = validated.value();
  LayerPlan plan;
  plan.runtime_ = runtime_;
  plan.layers_.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    LayerInfo& layer = plan.layers_[i];
    layer.index = i;
    layer.spec = specs[i];
    layer.owner = specs[i].ReadsSharedKV() ? static_cast<size_t>(specs[i].kv_source) : i;
    layer.indexer_slot_bytes = detail::IndexerSlotBytes(specs[i], runtime_.element_type);
    if (!detail::SlotBytes(specs[i], runtime_.element_type, &layer.k_slot_bytes,
                           &layer.v_slot_bytes) ||
        !detail::CheckedAdd(layer.k_slot_bytes, layer.v_slot_bytes, &layer.slot_bytes) ||
        !detail::CheckedAdd(layer.slot_bytes, layer.indexer_slot_bytes, &layer.slot_bytes)) {
      return detail::FieldError(detail::LayerField(i, "head_dim"), to_string(specs[i].head_dim),
                                "makes the bytes of one position overflow 64 bits");
    }
  }
  // The owner keeps the largest span any reader needs; a global reader needs everything.
  std::vector<bool> has_global_reader(specs.size(), false);
  for (const LayerInfo& reader : plan.layers_) {
    if (!reader.spec.attends) continue;
    LayerInfo& owner = plan.layers_[reader.owner];
    if (reader.spec.kind == AttentionKind::kGlobal) has_global_reader[owner.index] = true;
    owner.span = std::max(owner.span, reader.spec.Span());
  }

  for (LayerInfo& layer : plan.layers_) {
    if (!detail::PlanState(runtime_, &layer, &plan.state_bytes_)) {
      return detail::FieldError(detail::LayerField(layer.index, "state"),
                                to_string(layer.spec.state.recurrent_elements),
                                "makes the state bytes overflow 64 bits");
    }
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

#endif  // KVRING_PLAN_BUILDER_H_
