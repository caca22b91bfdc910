// kvring/hf_config/bespoke.h: the readers of single families whose rules fit no group: JetMoE
// (its mixture of attention heads: query heads counted from its K/V heads and experts),
// ModernBERT's decoder (its global and local layers, a window derived from local_attention),
// HRM-Text (a cache slot per attention call of its recurrent stacks) and Kyutai's
// speech-to-text decoder (Mistral's sliding layers, a window that cannot be null).
// Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_BESPOKE_H_
#define KVRING_HF_CONFIG_BESPOKE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// Reads a JetMoE model of `scope` into *model: its mixture of attention heads keeps
// num_key_value_heads K/V heads (its row's rule: the class default is one checkpoint's count)
// of kv_channels elements (its row's default; head_dim, which its attribute_map aliases to it,
// wins when both are given) on every layer, and attends num_key_value_heads x
// num_experts_per_tok query heads (its class computes num_attention_heads so; a file's other
// count is refused).
inline void ReadJetMoe(const Scope& scope, HfModel* model) {
  NameFamily(scope, model);
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  model->max_context = scope.OrDefault("max_position_embeddings",
                                       scope.family().max_position_embeddings, 1, UINT64_MAX);
  // Its family row's rule (one checkpoint's count, refused when absent or null) never means
  // one K/V head per query head, so no such count is given.
  const uint64_t kv_heads = ReadKvHeadCount(scope, 0, kMaxDim);
  if (scope.Failed()) return;
  const uint64_t experts = scope.OrDefault("num_local_experts", 8, 1, kMaxDim);
  const uint64_t top_k = scope.OrDefault("num_experts_per_tok", 2, 1, kMaxDim);
  const char* dim_key = scope.Find("head_dim") != nullptr ? "head_dim" : "kv_channels";
  const uint64_t head_dim = scope.OrDefault(dim_key, scope.family().head_dim_default, 1, kMaxDim);
  if (scope.Failed()) return;
  if (top_k > experts) {
    scope.Fail("num_experts_per_tok", std::to_string(top_k) + " is more than num_local_experts " +
                                          std::to_string(experts));
    return;
  }
  const uint64_t num_heads = kv_heads * top_k;
  if (num_heads > kMaxDim) {
    scope.Fail("num_experts_per_tok", "makes num_key_value_heads x num_experts_per_tok too large");
    return;
  }
  if (scope.IsSet("num_attention_heads")) {
    const Json& stated = *scope.Find("num_attention_heads");
    if (scope.ToUInt("num_attention_heads", stated, 1, kMaxDim) != num_heads && !scope.Failed()) {
      scope.Fail("num_attention_heads", Show(stated) +
                                            " is not num_key_value_heads x num_experts_per_tok = " +
                                            std::to_string(num_heads) + ", which " +
                                            scope.ClassName() + "'s attention uses");
    }
  }
  if (scope.Failed()) return;
  model->num_attention_heads = static_cast<uint32_t>(num_heads);
  BuildFullLayers(
      scope, num_layers,
      LayerSpec::Global(static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim)), model);
}

// Reads a ModernBERT decoder (modernbert-decoder) of `scope` into *model: layer_types, or
// without it full iff i % global_attn_every_n_layers == 0 (default 3: layer 0 full); its local
// layers slide over local_attention / 2 positions (default 128 / 2), or the file's
// sliding_window, which transformers 5.12 sets after its class derives the window; a K and V
// head per query head and heads of hidden_size / num_attention_heads, whatever the file says.
inline void ReadModernBertDecoder(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  if (scope.Failed()) return;
  Kinds kinds;
  if (const auto types = ReadLayerTypes(scope, num_layers)) {
    kinds.types = *types;
    kinds.source = "layer_types";
  } else {
    if (scope.Failed()) return;
    const uint64_t period = scope.OrDefault("global_attn_every_n_layers", 3, 1, kMaxLayers);
    if (scope.Failed()) return;
    kinds.source = "i % global_attn_every_n_layers (" + std::to_string(period) + ") == 0";
    for (uint64_t i = 0; i < num_layers; ++i) {
      kinds.types.push_back(i % period == 0 ? LayerType::kFull : LayerType::kSliding);
    }
  }
  for (LayerType type : kinds.types) {
    if (type == LayerType::kChunked) {
      scope.Fail("layer_types",
                 std::string(LayerTypeName(type)) + " is not a layer kind of " + scope.ClassName());
      return;
    }
  }
  const uint64_t head_dim = HiddenOverHeads(scope, num_heads);
  if (scope.Failed()) return;
  CheckUnread(scope, "num_key_value_heads", num_heads,
              "its attention keeps " + std::to_string(num_heads) + " K/V heads");
  CheckUnread(
      scope, "head_dim", head_dim,
      "its heads are hidden_size / num_attention_heads = " + std::to_string(head_dim) + " wide");
  if (scope.Failed()) return;
  Spans spans;
  bool any_sliding = false;
  for (LayerType type : kinds.types) any_sliding = any_sliding || type == LayerType::kSliding;
  if (any_sliding && scope.Find("sliding_window") != nullptr) {
    spans.window = scope.Required("sliding_window", 1, UINT64_MAX);
  } else if (any_sliding) {
    const Json* local = scope.Find("local_attention");
    if (local != nullptr && (local->is_null() || *local == 0)) {
      scope.Fail("local_attention", Show(*local) +
                                        " leaves the sliding layers without a window "
                                        "(its class sets sliding_window to -1)");
      return;
    }
    const uint64_t width = scope.OrDefault("local_attention", 128, 2, UINT64_MAX);
    if (scope.Failed()) return;
    spans.window = width / 2;
    scope.Record("sliding_window", "local_attention / 2 (" + std::to_string(spans.window) + ")");
  }
  if (scope.Failed()) return;
  const LayerSpec spec =
      LayerSpec::Global(static_cast<uint32_t>(num_heads), static_cast<uint32_t>(head_dim));
  BuildLayers(kinds, spans, spec, spec, model);
  CheckForeignKeys(scope, kinds);
}

// Reads an HRM-Text model (hrm_text) of `scope` into *model: two stacks of
// num_layers_per_stack layers, L and H, run H_cycles (default 2) times, the L stack L_cycles
// (default 3) times before the H stack each time; every run of a layer attends with a cache of
// its own (transformers gives each a slot of its cache), so the model keeps
// num_layers_per_stack x H_cycles x (L_cycles + 1) global layers of a K and V head per query
// head (num_key_value_heads is not read) of head_dim (default 128). HrmTextConfig turns a file's
// num_hidden_layers into that product when num_layers_per_stack is absent or null, and keeps
// both as given otherwise: a file whose two disagree is refused. Its instruction prefix
// (token_type_ids, prefix_lm) attends both ways in the prompt's pass only: a causal cache.
inline void ReadHrmText(const Scope& scope, HfModel* model) {
  const uint64_t layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  HiddenOverHeads(scope, num_heads);  // the class refuses heads that do not divide hidden_size
  const uint64_t head_dim = ReadHeadDim(scope, num_heads);
  const uint64_t high = scope.OrDefault("H_cycles", 2, 1, kMaxLayers);
  const uint64_t low = scope.OrDefault("L_cycles", 3, 0, kMaxLayers);
  const std::optional<uint64_t> per_stack =
      scope.IsSet("num_layers_per_stack")
          ? std::optional<uint64_t>(scope.Required("num_layers_per_stack", 1, kMaxLayers))
          : std::nullopt;
  if (scope.Failed()) return;
  const uint64_t runs = high * (low + 1);  // both below 2^17
  const uint64_t stack = per_stack.value_or(layers);
  const uint64_t slots = stack * runs;
  if (slots > kMaxLayers) {
    scope.Fail(per_stack ? "num_layers_per_stack" : "num_hidden_layers",
               std::to_string(stack) +
                   " layers run H_cycles x (L_cycles + 1) = " + std::to_string(runs) +
                   " times: more than " + std::to_string(kMaxLayers) + " cache slots");
    return;
  }
  if (per_stack && layers != slots) {
    scope.Fail("num_hidden_layers", std::to_string(layers) + " is not num_layers_per_stack " +
                                        std::to_string(stack) +
                                        " x H_cycles x (L_cycles + 1) = " + std::to_string(slots) +
                                        ", the cache slots the model's attention calls use");
    return;
  }
  if (!per_stack) {
    scope.Record("num_layers_per_stack", "num_hidden_layers (" + std::to_string(layers) +
                                             "; the cache slots are " + std::to_string(slots) +
                                             ")");
  }
  CheckUnread(scope, "num_key_value_heads", num_heads,
              "its attention keeps " + std::to_string(num_heads) + " K/V heads");
  if (scope.Failed()) return;
  BuildFullLayers(
      scope, slots,
      LayerSpec::Global(static_cast<uint32_t>(num_heads), static_cast<uint32_t>(head_dim)), model);
}

// Reads Kyutai's speech-to-text decoder (kyutai_speech_to_text) of `scope` into *model: as
// Mistral's rows (every layer slides over sliding_window, default 375; K/V heads and head_dim
// as its row says), except that its class types sliding_window as a number, so a null window
// is refused rather than read as full attention. Its audio codec (codec_config, Mimi) keeps
// streaming state of its own, which the plan does not count (as other wrappers' towers).
inline void ReadKyutaiSpeechToText(const Scope& scope, HfModel* model) {
  const Json* window = scope.Find("sliding_window");
  if (window != nullptr && window->is_null()) {
    scope.Fail("sliding_window",
               "is null; " + scope.ClassName() + " needs a number here (every layer slides)");
    return;
  }
  ReadStandard(scope, model);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_BESPOKE_H_
