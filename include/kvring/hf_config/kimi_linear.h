// kvring/hf_config/kimi_linear.h: the reader of Kimi Linear (kimi_linear: KimiLinearConfig,
// remote code; transformers 5.12 has no class of its own), as its configuration class and
// model read a file: linear_attn_config names every layer in one of two lists of 1-indexed
// layer numbers, kda_layers (Kimi Delta Attention, a recurrent layer) and full_attn_layers
// (latent attention, MLA: kvring/hf_config/mla.h; Kimi Linear's rotates nothing but keeps the
// qk_rope_head_dim slice beside the latent). A KDA layer keeps a conv state of
// (short_conv_kernel_size - 1) x 3 x num_heads x head_dim elements (its q, k and v
// convolutions) in the model's type, and a recurrent state of num_heads x head_dim x head_dim
// in F32, as vLLM keeps them (kda_state_shape, kda_state_dtype). The context is
// model_max_length. Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_KIMI_LINEAR_H_
#define KVRING_HF_CONFIG_KIMI_LINEAR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvring/hf_config/hybrid.h"
#include "kvring/hf_config/mla.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// Returns whether each of the `num_layers` layers is a KDA layer, from `config` (the scope of
// linear_attn_config): kda_layers and full_attn_layers must both be lists (KimiLinearConfig
// asserts them) that together name every layer once. The model builds its layers from
// kda_layers alone, so a file whose lists disagree (a layer in both, in neither, twice) is
// refused rather than read one way.
inline std::vector<bool> ReadKdaLayers(const Scope& config, uint64_t num_layers) {
  enum Listed : uint8_t { kNone, kKda, kFull };
  std::vector<Listed> listed(num_layers, kNone);
  std::vector<bool> kda(num_layers, false);
  for (const Listed list_kind : {kKda, kFull}) {
    const std::string key = list_kind == kKda ? "kda_layers" : "full_attn_layers";
    const Json* list = config.Find(key.c_str());
    if (list == nullptr || list->is_null()) {
      config.Fail(key, std::string(list == nullptr ? "is missing" : "is null") + "; " +
                           config.ClassName() +
                           " asserts both layer lists (1-indexed layer numbers)");
      return kda;
    }
    if (!list->is_array()) {
      config.Fail(key, Mistyped(*list, "a list of layer numbers"));
      return kda;
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string entry_key = key + "[" + std::to_string(i) + "]";
      const Json& entry = (*list)[i];
      if (entry == Json(0)) {
        config.Fail(entry_key, "0 is no layer number: the lists count layers from 1");
        return kda;
      }
      const uint64_t number = config.ToUInt(entry_key, entry, 1, num_layers);
      if (config.Failed()) return kda;
      Listed& seen = listed[number - 1];
      if (seen != kNone) {
        config.Fail(entry_key, std::to_string(number) +
                                   (seen == list_kind ? " appears twice in " + key
                                                      : " is in kda_layers and full_attn_layers") +
                                   " (layer " + std::to_string(number - 1) + ")");
        return kda;
      }
      seen = list_kind;
      kda[number - 1] = list_kind == kKda;
    }
  }
  for (size_t i = 0; i < num_layers; ++i) {
    if (listed[i] != kNone) continue;
    config.Fail("full_attn_layers", "names neither layer number " + std::to_string(i + 1) +
                                        " (layer " + std::to_string(i) +
                                        ") nor does kda_layers: the lists name every layer");
    return kda;
  }
  return kda;
}

// Returns one rank's state of a KDA layer (HfReadOptions::tensor_parallel: whole heads) read
// from `config`, the scope of linear_attn_config, whose keys the model indexes (no defaults).
inline StateSpec ReadKdaState(const Scope& config) {
  const uint64_t heads = config.Required("num_heads", 1, kMaxDim);
  const uint64_t head_dim = config.Required("head_dim", 1, kMaxDim);
  const uint64_t kernel = config.Required("short_conv_kernel_size", 1, kMaxDim);
  StateSpec state;
  if (config.Failed()) return state;
  const uint64_t rank_heads = PerRank(config, "num_heads", "", heads, "KDA heads");
  if (config.Failed()) return state;
  state.conv_elements = StateProduct(config, "head_dim", {kernel - 1, 3, rank_heads, head_dim});
  state.conv_format = Format::kBF16;
  state.recurrent_elements = StateProduct(config, "head_dim", {rank_heads, head_dim, head_dim});
  state.recurrent_format = Format::kF32;
  return state;
}

// Reads a Kimi Linear model of `scope` into *model. Without linear_attn_config every layer is
// latent attention (the class's is_kda_layer is then false for all).
inline void ReadKimiLinear(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeads(scope, model);
  if (scope.Failed()) return;
  // The context: model_max_length (the class has no max_position_embeddings).
  const char* context_key = "model_max_length";
  if (!scope.IsSet(context_key)) {
    scope.Fail(context_key,
               std::string(scope.Find(context_key) == nullptr ? "is missing" : "is null") + "; " +
                   scope.ClassName() + "'s default None gives the model no context length");
    return;
  }
  model->max_context = scope.Required(context_key, 1, UINT64_MAX);
  const LayerSpec latent = ReadMlaShape(scope, num_heads);
  if (scope.Failed()) return;
  const Json* linear = scope.Find("linear_attn_config");
  if (linear == nullptr || linear->is_null()) {
    scope.Record("linear_attn_config", "None (no KDA layer)");
    model->layers.assign(num_layers, latent);
    return;
  }
  if (!linear->is_object()) {
    scope.Fail("linear_attn_config", Mistyped(*linear, "an object"));
    return;
  }
  const Scope config = scope.Nested(*linear, "linear_attn_config");
  const std::vector<bool> kda = ReadKdaLayers(config, num_layers);
  if (scope.Failed()) return;
  const StateSpec state = ReadKdaState(config);
  if (scope.Failed()) return;
  for (bool recurrent : kda)
    model->layers.push_back(recurrent ? LayerSpec::Recurrent(state) : latent);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_KIMI_LINEAR_H_
