// kvring/hf_config/mimo_v2.h: the reader of MiMo-V2-Flash (mimo_v2_flash: MiMoV2FlashConfig,
// remote code; transformers 5.12 has no class of its own), as its configuration class and
// model read a file: hybrid_layer_pattern gives each layer 0 (full attention) or 1 (sliding
// window), or, without it, hybrid_block_size makes every block's last layer full; full layers
// have num_key_value_heads heads of head_dim (K) and v_head_dim (V), sliding ones
// swa_num_key_value_heads heads of swa_head_dim and swa_v_head_dim (the model reads these
// attributes, which the class leaves to the file: no defaults). The window is sliding_window
// (transformers' sliding mask reads it; the published file repeats it as sliding_window_size,
// which vLLM reads). Attention sinks (add_swa_attention_sink_bias) and attention_value_scale
// change no cache. Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_MIMO_V2_H_
#define KVRING_HF_CONFIG_MIMO_V2_H_

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

// Returns whether each layer slides: hybrid_layer_pattern (one 0 or 1 per layer), else
// hybrid_block_size (full iff (i + 1) % size == 0). Neither is refused: the model indexes the
// pattern.
inline std::vector<bool> ReadMimoSlidingLayers(const Scope& scope, uint64_t num_layers) {
  std::vector<bool> sliding(num_layers, false);
  if (const Json* list = scope.LayerList("hybrid_layer_pattern", num_layers)) {
    return scope.LayerChoices("hybrid_layer_pattern", *list, Json(1), Json(0),
                              "0 (full attention) or 1 (sliding window)");
  }
  if (scope.Failed()) return sliding;
  if (!scope.IsSet("hybrid_block_size")) {
    scope.Fail("hybrid_layer_pattern", "is missing, and so is hybrid_block_size; " +
                                           scope.ClassName() +
                                           "'s model indexes the pattern for every layer");
    return sliding;
  }
  const uint64_t block = scope.Required("hybrid_block_size", 1, kMaxLayers);
  if (scope.Failed()) return sliding;
  scope.Record("hybrid_layer_pattern",
               "full iff (i + 1) % hybrid_block_size (" + std::to_string(block) + ") == 0");
  for (size_t i = 0; i < num_layers; ++i) sliding[i] = (i + 1) % block != 0;
  return sliding;
}

// Returns the window: sliding_window, or sliding_window_size without it; both given and
// different is refused (which one is the model's?).
inline uint64_t ReadMimoWindow(const Scope& scope) {
  const bool window_set = scope.IsSet("sliding_window");
  const bool size_set = scope.IsSet("sliding_window_size");
  if (!window_set && !size_set) {
    scope.Fail("sliding_window", "is missing (and so is sliding_window_size), but " +
                                     scope.ClassName() +
                                     "'s hybrid_layer_pattern has sliding "
                                     "layers");
    return 1;
  }
  const uint64_t window = window_set ? scope.Required("sliding_window", 1, UINT64_MAX) : 0;
  const uint64_t size = size_set ? scope.Required("sliding_window_size", 1, UINT64_MAX) : 0;
  if (scope.Failed()) return 1;
  if (window_set && size_set && window != size) {
    scope.Fail("sliding_window_size", std::to_string(size) + " is not sliding_window " +
                                          std::to_string(window) +
                                          " (transformers' mask reads one, vLLM the other)");
    return 1;
  }
  return window_set ? window : size;
}

// Returns one layer kind's K/V shape from its keys (`prefix` "" for full layers, "swa_" for
// sliding ones): prefix + num_key_value_heads heads (full layers: the class's rule for
// num_key_value_heads) of prefix + head_dim (K) and prefix + v_head_dim (V), the heads dividing
// `num_heads` (prefix + num_attention_heads).
inline LayerSpec ReadMimoShape(const Scope& scope, const std::string& prefix, uint64_t num_heads) {
  uint64_t kv_heads = 0;
  if (prefix.empty()) {
    kv_heads = ReadKvHeads(scope, num_heads);
  } else {
    const std::string key = prefix + "num_key_value_heads";
    kv_heads = scope.Required(key.c_str(), 1, kMaxDim);
    if (!scope.Failed() && num_heads % kv_heads != 0) {
      scope.Fail(key, std::to_string(kv_heads) + " does not divide " + prefix +
                          "num_attention_heads " + std::to_string(num_heads));
    }
  }
  const std::string k_key = prefix + "head_dim";
  const std::string v_key = prefix + "v_head_dim";
  const uint64_t head_dim = scope.Required(k_key.c_str(), 1, kMaxDim);
  const uint64_t v_head_dim = scope.Required(v_key.c_str(), 1, kMaxDim);
  LayerSpec spec =
      LayerSpec::Global(static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim));
  spec.v_head_dim = static_cast<uint32_t>(v_head_dim);
  return spec;
}

// Reads a MiMo-V2-Flash model of `scope` into *model.
inline void ReadMimoV2(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  if (scope.Failed()) return;
  const std::vector<bool> sliding = ReadMimoSlidingLayers(scope, num_layers);
  const LayerSpec full = ReadMimoShape(scope, "", num_heads);
  if (scope.Failed()) return;
  bool any_sliding = false;
  for (bool slides : sliding) any_sliding = any_sliding || slides;
  LayerSpec local;
  if (any_sliding) {
    const uint64_t swa_heads = scope.Required("swa_num_attention_heads", 1, kMaxDim);
    if (scope.Failed()) return;
    local = ReadMimoShape(scope, "swa_", swa_heads);
    local.kind = AttentionKind::kSliding;
    local.window = ReadMimoWindow(scope);
    if (scope.Failed()) return;
  }
  for (bool slides : sliding) model->layers.push_back(slides ? local : full);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_MIMO_V2_H_
