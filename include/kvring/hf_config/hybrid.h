// kvring/hf_config/hybrid.h: the reader of the hybrid families whose recurrent layers are
// Gated DeltaNet (Qwen3-Next, Qwen3.5 and Qwen3.5-MoE), as their transformers classes read
// them: layer_types of "linear_attention" and "full_attention" (or a full layer every
// full_attention_interval), full layers of num_key_value_heads x head_dim, and each
// recurrent layer's state: a conv state of (linear_conv_kernel_dim - 1) x conv channels, as
// engines keep it (transformers keeps kernel columns), and a recurrent state of
// linear_num_value_heads x linear_key_head_dim x linear_value_head_dim. Part of
// kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_HYBRID_H_
#define KVRING_HF_CONFIG_HYBRID_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// Returns the element type the file asks for the recurrent state (mamba_ssm_dtype or
// mamba_ssm_cache_dtype: "float32" keeps it in F32), BF16 otherwise (the model's type).
inline Format ReadStateFormat(const Scope& scope) {
  for (const char* key : {"mamba_ssm_cache_dtype", "mamba_ssm_dtype"}) {
    const Json* value = scope.Find(key);
    if (value == nullptr || value->is_null()) continue;
    if (*value == Json("float32")) return Format::kF32;
    if (*value == Json("bfloat16") || *value == Json("float16")) return Format::kBF16;
    scope.Fail(key, Show(*value) + " is not \"float32\", \"bfloat16\" or \"float16\"");
    return Format::kBF16;
  }
  scope.Record("mamba_ssm_dtype", "bfloat16 (the model's type)");
  return Format::kBF16;
}

// Returns the state of a Gated DeltaNet layer.
inline StateSpec ReadGatedDeltaNetState(const Scope& scope) {
  const uint64_t kernel = scope.OrDefault("linear_conv_kernel_dim", 4, 1, kMaxDim);
  const uint64_t k_heads = scope.OrDefault("linear_num_key_heads", 16, 1, kMaxDim);
  const uint64_t v_heads = scope.OrDefault("linear_num_value_heads", 32, 1, kMaxDim);
  const uint64_t k_dim = scope.OrDefault("linear_key_head_dim", 128, 1, kMaxDim);
  const uint64_t v_dim = scope.OrDefault("linear_value_head_dim", 128, 1, kMaxDim);
  StateSpec state;
  if (scope.Failed()) return state;
  if (v_heads % k_heads != 0) {
    scope.Fail("linear_num_value_heads",
               std::to_string(v_heads) + " is not a multiple of linear_num_key_heads " +
                   std::to_string(k_heads) + " (each key head serves a whole group)");
    return state;
  }
  state.conv_elements = (kernel - 1) * (2 * k_heads * k_dim + v_heads * v_dim);
  state.conv_format = Format::kBF16;
  state.recurrent_elements = v_heads * k_dim * v_dim;
  state.recurrent_format = ReadStateFormat(scope);
  return state;
}

// Returns whether each layer is recurrent (true) or full attention: layer_types, or, without
// them, full iff (i + 1) % full_attention_interval == 0 (default 4).
inline std::vector<bool> ReadLinearLayers(const Scope& scope, uint64_t num_layers) {
  std::vector<bool> linear(num_layers, false);
  const Json* list = scope.Find("layer_types");
  if (list == nullptr || list->is_null()) {
    const uint64_t interval = scope.OrDefault("full_attention_interval", 4, 1, kMaxLayers);
    for (size_t i = 0; i < num_layers; ++i) linear[i] = (i + 1) % interval != 0;
    return linear;
  }
  if (!list->is_array()) {
    scope.Fail("layer_types", Mistyped(*list, "a list"));
    return linear;
  }
  if (list->size() != num_layers) {
    scope.Fail("layer_types", "has " + std::to_string(list->size()) +
                                  " entries, but num_hidden_layers is " +
                                  std::to_string(num_layers));
    return linear;
  }
  for (size_t i = 0; i < num_layers; ++i) {
    const Json& entry = (*list)[i];
    if (entry == Json("linear_attention")) {
      linear[i] = true;
    } else if (entry != Json("full_attention")) {
      scope.Fail(
          "layer_types[" + std::to_string(i) + "]",
          Show(entry) + " is not linear_attention or full_attention (" + scope.ClassName() + ")");
      return linear;
    }
  }
  return linear;
}

// Reads a Gated DeltaNet hybrid model of `scope` into *model; the first failure is in the
// scope's Failure.
inline void ReadGatedDeltaNetHybrid(const Scope& scope, HfModel* model) {
  const Family& family = scope.family();
  model->model_type = family.model_type;
  model->class_name = family.class_name;
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = scope.Required("num_attention_heads", 1, kMaxDim);
  model->num_attention_heads = static_cast<uint32_t>(num_heads);
  model->max_context =
      scope.OrDefault("max_position_embeddings", family.max_position_embeddings, 1, UINT64_MAX);
  if (scope.Failed()) return;
  const std::vector<bool> linear = ReadLinearLayers(scope, num_layers);
  const LayerSpec full = ReadShape(scope, num_heads);
  const StateSpec state = ReadGatedDeltaNetState(scope);
  if (scope.Failed()) return;
  for (bool recurrent : linear) {
    model->layers.push_back(recurrent ? LayerSpec::Recurrent(state) : full);
  }
  for (const char* key : {"attention_chunk_size", "kv_lora_rank"}) {
    if (scope.IsSet(key)) {
      scope.Fail(key, Show(*scope.Find(key)) + " is set, but " + scope.ClassName() +
                          " reads no such key, so the file contradicts its model_type");
      return;
    }
  }
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_HYBRID_H_
