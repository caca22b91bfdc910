// kvring/hf_config/hybrid.h: the readers of the hybrid families, whose recurrent layers keep a
// fixed state instead of K/V, as their transformers classes read them. Gated DeltaNet
// (Qwen3-Next, Qwen3.5, Qwen3.5-MoE): layer_types of "linear_attention" and "full_attention"
// (or a full layer every full_attention_interval); each recurrent layer keeps a conv state of
// (linear_conv_kernel_dim - 1) x conv channels, as engines keep it (transformers keeps kernel
// columns), and a recurrent state of linear_num_value_heads x linear_key_head_dim x
// linear_value_head_dim. Mamba2 (Nemotron-H): layers_block_type (or hybrid_override_pattern)
// of mamba, attention, moe and mlp blocks; a mamba block keeps a conv state of
// (conv_kernel - 1) x (mamba_num_heads x mamba_head_dim + 2 x n_groups x ssm_state_size) and
// an SSM state of mamba_num_heads x mamba_head_dim x ssm_state_size; moe and mlp blocks mix
// no sequence. Mamba2 (Granite 4.0-H): layer_types of mamba and attention layers (default all
// mamba), the mamba keys named mamba_n_heads, mamba_d_head ("auto": mamba_expand x hidden_size
// / mamba_n_heads), mamba_d_state, mamba_n_groups, mamba_d_conv, the conv channels mamba_expand
// x hidden_size + 2 x groups x state. Short convolutions (LFM2): layer_types of conv and
// full_attention (or full_attn_idxs, default every layer); a conv layer keeps (conv_L_cache - 1)
// x hidden_size elements. Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing
// (scope.h).
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
// mamba_ssm_cache_dtype: "float32" keeps it in F32), else `fallback` (the class default:
// Nemotron-H's mamba_ssm_cache_dtype is "float32"; otherwise the model's type, BF16).
inline Format ReadStateFormat(const Scope& scope, Format fallback = Format::kBF16) {
  for (const char* key : {"mamba_ssm_cache_dtype", "mamba_ssm_dtype"}) {
    const Json* value = scope.Find(key);
    if (value == nullptr || value->is_null()) continue;
    if (*value == Json("float32")) return Format::kF32;
    if (*value == Json("bfloat16") || *value == Json("float16")) return Format::kBF16;
    scope.Fail(key, Show(*value) + " is not \"float32\", \"bfloat16\" or \"float16\"");
    return Format::kBF16;
  }
  if (fallback == Format::kF32) {
    scope.Record("mamba_ssm_cache_dtype", "float32");
  } else {
    scope.Record("mamba_ssm_dtype", "bfloat16 (the model's type)");
  }
  return fallback;
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
  const Json* list = scope.LayerList("layer_types", num_layers);
  if (scope.Failed()) return linear;
  if (list == nullptr) {
    const uint64_t interval = scope.OrDefault("full_attention_interval", 4, 1, kMaxLayers);
    for (size_t i = 0; i < num_layers; ++i) linear[i] = (i + 1) % interval != 0;
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
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
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

// Returns the value at `key`, or at its older name `alias` (NemotronHConfig renames mamba_*
// keys), or `fallback` when neither is given.
inline uint64_t ReadAliased(const Scope& scope, const char* key, const char* alias,
                            uint64_t fallback) {
  if (scope.Find(alias) != nullptr) return scope.OrDefault(alias, fallback, 1, kMaxDim);
  return scope.OrDefault(key, fallback, 1, kMaxDim);
}

// Returns a Nemotron-H Mamba2 block's state.
inline StateSpec ReadMamba2State(const Scope& scope) {
  const uint64_t heads = scope.OrDefault("mamba_num_heads", 128, 1, kMaxDim);
  const uint64_t head_dim = scope.OrDefault("mamba_head_dim", 64, 1, kMaxDim);
  const uint64_t state_size = scope.OrDefault("ssm_state_size", 128, 1, kMaxDim);
  const uint64_t groups = ReadAliased(scope, "n_groups", "mamba_n_groups", 8);
  const uint64_t kernel = ReadAliased(scope, "conv_kernel", "mamba_d_conv", 4);
  StateSpec state;
  if (scope.Failed()) return state;
  if (heads % groups != 0) {
    scope.Fail("n_groups", std::to_string(groups) + " does not divide mamba_num_heads " +
                               std::to_string(heads));
    return state;
  }
  state.conv_elements = (kernel - 1) * (heads * head_dim + 2 * groups * state_size);
  state.conv_format = Format::kBF16;
  state.recurrent_elements = heads * head_dim * state_size;
  state.recurrent_format = ReadStateFormat(scope, Format::kF32);
  return state;
}

// Returns Nemotron-H's block types: layers_block_type (or layer_types, its other name), else
// hybrid_override_pattern (M mamba, E moe, * attention, - mlp).
inline std::vector<std::string> ReadBlockTypes(const Scope& scope) {
  std::vector<std::string> types;
  for (const char* key : {"layers_block_type", "layer_types"}) {
    const Json* list = scope.Find(key);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array() || list->empty()) {
      scope.Fail(key, Mistyped(*list, "a list of block types"));
      return types;
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const Json& entry = (*list)[i];
      for (const char* name : {"mamba", "attention", "moe", "mlp"}) {
        if (entry == Json(name)) types.push_back(name);
      }
      if (types.size() != i + 1) {
        scope.Fail(std::string(key) + "[" + std::to_string(i) + "]",
                   Show(entry) + " is not mamba, attention, moe or mlp");
        return {};
      }
    }
    return types;
  }
  const Json* pattern = scope.Find("hybrid_override_pattern");
  if (pattern == nullptr || pattern->is_null()) {
    scope.Fail("layers_block_type", "is missing, and so is hybrid_override_pattern; " +
                                        scope.ClassName() +
                                        "'s default is a 4-block example, not a model");
    return types;
  }
  if (!pattern->is_string() || pattern->get<std::string>().empty()) {
    scope.Fail("hybrid_override_pattern", Mistyped(*pattern, "a string of M, E, * and -"));
    return types;
  }
  const std::string letters = pattern->get<std::string>();
  for (size_t i = 0; i < letters.size(); ++i) {
    const char c = letters[i];
    const char* name = c == 'M'   ? "mamba"
                       : c == 'E' ? "moe"
                       : c == '*' ? "attention"
                       : c == '-' ? "mlp"
                                  : nullptr;
    if (name == nullptr) {
      scope.Fail("hybrid_override_pattern",
                 Show(*pattern) + " has '" + Printable(std::string(1, c)) + "' at " +
                     std::to_string(i) + ", not M (mamba), E (moe), * (attention) or - (mlp)");
      return {};
    }
    types.push_back(name);
  }
  return types;
}

// Returns a Granite 4.0-H Mamba2 layer's state.
inline StateSpec ReadGraniteMambaState(const Scope& scope) {
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  const uint64_t heads = scope.OrDefault("mamba_n_heads", 128, 1, kMaxDim);
  const uint64_t expand = scope.OrDefault("mamba_expand", 2, 1, kMaxDim);
  const uint64_t state_size = scope.OrDefault("mamba_d_state", 256, 1, kMaxDim);
  const uint64_t groups = scope.OrDefault("mamba_n_groups", 1, 1, kMaxDim);
  const uint64_t kernel = scope.OrDefault("mamba_d_conv", 4, 1, kMaxDim);
  StateSpec state;
  if (scope.Failed()) return state;
  const uint64_t intermediate = expand * hidden;
  uint64_t head_dim = 0;
  const Json* d_head = scope.Find("mamba_d_head");
  if (d_head == nullptr || *d_head == Json("auto")) {
    if (d_head == nullptr) scope.Record("mamba_d_head", "auto");
    head_dim = intermediate / heads;
  } else {
    head_dim = scope.ToUInt("mamba_d_head", *d_head, 1, kMaxDim);
  }
  if (scope.Failed()) return state;
  if (head_dim * heads != intermediate) {
    scope.Fail("mamba_d_head", std::to_string(head_dim) + " x mamba_n_heads " +
                                   std::to_string(heads) + " is not mamba_expand x hidden_size " +
                                   std::to_string(intermediate) + " (" + scope.ClassName() +
                                   " refuses it)");
    return state;
  }
  state.conv_elements = (kernel - 1) * (intermediate + 2 * groups * state_size);
  state.conv_format = Format::kBF16;
  state.recurrent_elements = heads * head_dim * state_size;
  state.recurrent_format = ReadStateFormat(scope);
  return state;
}

// Returns Granite 4.0-H's layer kinds: layer_types of "mamba" and "attention", every layer
// mamba without them.
inline std::vector<std::string> ReadGraniteLayerTypes(const Scope& scope) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  std::vector<std::string> types;
  if (scope.Failed()) return types;
  const Json* list = scope.LayerList("layer_types", num_layers);
  if (scope.Failed()) return types;
  if (list == nullptr) return std::vector<std::string>(num_layers, "mamba");
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& entry = (*list)[i];
    if (entry != Json("mamba") && entry != Json("attention")) {
      scope.Fail("layer_types[" + std::to_string(i) + "]",
                 Show(entry) + " is not mamba or attention (" + scope.ClassName() + ")");
      return {};
    }
    types.push_back(entry.get<std::string>());
  }
  return types;
}

// Reads a Mamba2 hybrid (Nemotron-H, Granite 4.0-H) of `scope` into *model.
inline void ReadMamba2Hybrid(const Scope& scope, HfModel* model) {
  const bool granite = std::string(scope.family().model_type) == "granitemoehybrid";
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  const std::vector<std::string> types =
      granite ? ReadGraniteLayerTypes(scope) : ReadBlockTypes(scope);
  if (scope.Failed()) return;
  if (types.size() > kMaxLayers) {
    scope.Fail("layers_block_type", "has too many blocks");
    return;
  }
  // num_hidden_layers is deprecated there: the block list decides (transformers warns).
  bool has_attention = false, has_mamba = false;
  for (const std::string& type : types) {
    has_attention |= type == "attention";
    has_mamba |= type == "mamba";
  }
  LayerSpec attention;
  if (has_attention) attention = ReadShape(scope, num_heads);
  StateSpec mamba;
  if (has_mamba) mamba = granite ? ReadGraniteMambaState(scope) : ReadMamba2State(scope);
  if (scope.Failed()) return;
  for (const std::string& type : types) {
    if (type == "attention") {
      model->layers.push_back(attention);
    } else {
      model->layers.push_back(LayerSpec::Recurrent(type == "mamba" ? mamba : StateSpec()));
    }
  }
}

// Returns LFM2's layer kinds (true: a conv layer): layer_types of "conv" and "full_attention",
// else full iff i is in full_attn_idxs (default every layer; an index past the last layer,
// which transformers would silently ignore, is refused).
inline std::vector<bool> ReadConvLayers(const Scope& scope, uint64_t num_layers) {
  std::vector<bool> conv(num_layers, false);
  if (const Json* list = scope.LayerList("layer_types", num_layers)) {
    for (size_t i = 0; i < num_layers; ++i) {
      const Json& entry = (*list)[i];
      conv[i] = entry == Json("conv");
      if (!conv[i] && entry != Json("full_attention")) {
        scope.Fail("layer_types[" + std::to_string(i) + "]",
                   Show(entry) + " is not conv or full_attention (" + scope.ClassName() + ")");
        return conv;
      }
    }
    return conv;
  }
  const Json* indices = scope.Find("full_attn_idxs");
  if (scope.Failed() || indices == nullptr || indices->is_null()) return conv;
  if (!indices->is_array()) {
    scope.Fail("full_attn_idxs", Mistyped(*indices, "a list of layer indices"));
    return conv;
  }
  conv.assign(num_layers, true);
  for (size_t i = 0; i < indices->size(); ++i) {
    const uint64_t index =
        scope.ToUInt("full_attn_idxs[" + std::to_string(i) + "]", (*indices)[i], 0, num_layers - 1);
    if (scope.Failed()) return conv;
    conv[index] = false;
  }
  return conv;
}

// Reads an LFM2 model of `scope` into *model.
inline void ReadShortConvHybrid(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  const uint64_t kernel = scope.OrDefault("conv_L_cache", 3, 1, kMaxDim);
  if (scope.Failed()) return;
  const std::vector<bool> conv = ReadConvLayers(scope, num_layers);
  const LayerSpec full = ReadShape(scope, num_heads);
  if (scope.Failed()) return;
  StateSpec state;
  state.conv_elements = (kernel - 1) * hidden;
  state.conv_format = Format::kBF16;
  for (bool is_conv : conv) model->layers.push_back(is_conv ? LayerSpec::Recurrent(state) : full);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_HYBRID_H_
