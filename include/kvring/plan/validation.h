// kvring/plan/validation.h: the rules a runtime and each layer spec must keep for a plan to
// be built (LayerPlan::Builder::Build), each refusal an Error naming the field and its value.
#ifndef KVRING_PLAN_VALIDATION_H_
#define KVRING_PLAN_VALIDATION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/formats/format.h"
#include "kvring/kernel_limits.h"
#include "kvring/kinds.h"
#include "kvring/layouts/padding.h"
#include "kvring/plan/specs.h"

namespace kvring {
namespace detail {

// Returns "layers[<index>].<name>", the field of layer `index` an Error names.
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
  if (runtime.backend == Backend::kTiled && !IsTileRows(runtime.tile_rows)) {
    return FieldError("runtime.tile_rows", to_string(runtime.tile_rows),
                      "is invalid: tiles hold a power of two from " + to_string(kMinTileRows) +
                          " to " + to_string(kMaxTileRows) + " rows");
  }
  if (kvring::ElementBytes(runtime.element_type) == 0) {
    return FieldError("runtime.element_type", to_string(static_cast<int>(runtime.element_type)),
                      "is not a kvring::Format");
  }
  return Error{};
}

// Returns an Error if the kv_source of layer `index` (a consumer) does not name an earlier
// owning layer of the same shape, or an empty field.
inline Error ValidateKVSource(const std::vector<LayerSpec>& specs, size_t index) {
  using std::to_string;
  const LayerSpec& spec = specs[index];
  const std::string field = LayerField(index, "kv_source");
  const int32_t source = spec.kv_source;
  if (source < 0 || static_cast<size_t>(source) >= index) {
    return FieldError(field, to_string(source),
                      "is invalid: a KV source must be an earlier layer (0 to " +
                          (index == 0 ? std::string("none") : to_string(index - 1)) + ")");
  }
  const LayerSpec& owner = specs[static_cast<size_t>(source)];
  if (!owner.attends) {
    return FieldError(
        field, to_string(source),
        "is invalid: layer " + to_string(source) + " has no attention, so no K/V to read");
  }
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
  return Error{};
}

// Returns an Error for the first invalid field of layer `index` (whose predecessors are
// valid), or an empty field.
// Refuses a recurrent state kept in another format than BF16 or F32, and attention fields on a
// layer without attention.
inline Error ValidateState(const LayerSpec& spec, size_t index) {
  using std::to_string;
  const std::pair<const char*, Format> formats[] = {
      {"state.conv_format", spec.state.conv_format},
      {"state.recurrent_format", spec.state.recurrent_format}};
  for (const auto& [name, format] : formats) {
    if (format == Format::kBF16 || format == Format::kF32) continue;
    return FieldError(LayerField(index, name),
                      RowBytes(format, 1) == 0 ? to_string(static_cast<int>(format))
                                               : std::string(ToString(format)),
                      "is not bf16 or f32: a recurrent state is kept in one of those");
  }
  if (spec.attends) return Error{};
  const std::pair<const char*, uint64_t> fields[] = {{"window", spec.window},
                                                     {"chunk", spec.chunk},
                                                     {"num_kv_heads", spec.num_kv_heads},
                                                     {"head_dim", spec.head_dim},
                                                     {"v_head_dim", spec.v_head_dim},
                                                     {"latent_dim", spec.latent_dim},
                                                     {"indexer_dim", spec.indexer_dim}};
  for (const auto& [name, value] : fields) {
    if (value == 0) continue;
    return FieldError(LayerField(index, name), to_string(value),
                      "is set on a layer without attention (attends is false), which holds no "
                      "K/V");
  }
  if (spec.kv_source != kOwnsKV) {
    return FieldError(LayerField(index, "kv_source"), to_string(spec.kv_source),
                      "is set on a layer without attention (attends is false), which reads no "
                      "K/V");
  }
  return Error{};
}

inline Error ValidateLayer(const std::vector<LayerSpec>& specs, size_t index) {
  using std::to_string;
  const LayerSpec& spec = specs[index];
  if (spec.HasState() || !spec.attends) {
    Error error = ValidateState(spec, index);
    if (!error.field.empty() || !spec.attends) return error;
  }
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
    if (RotatesK(spec.format)) {
      return FieldError(LayerField(index, "format"), ToString(spec.format),
                        "is invalid for an MLA layer, whose values are its latent: int8h "
                        "rotates K; use int8");
    }
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
                                                   {"latent_dim", spec.latent_dim},
                                                   {"indexer_dim", spec.indexer_dim}};
  for (const auto& [name, dim] : dims) {
    if (dim == 0) continue;
    Error error = ValidateAttentionDim(LayerField(index, name), dim);
    if (!error.field.empty()) return error;
  }
  if (spec.kv_source != kOwnsKV && spec.indexer_dim != 0) {
    return FieldError(LayerField(index, "indexer_dim"), to_string(spec.indexer_dim),
                      "is set on a layer that reads layer " + to_string(spec.kv_source) +
                          "'s K/V: an indexer key is kept by the layer that owns its K/V");
  }
  if (spec.kv_source != kOwnsKV) return ValidateKVSource(specs, index);
  return Error{};
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_PLAN_VALIDATION_H_
