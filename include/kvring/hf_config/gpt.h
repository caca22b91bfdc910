// kvring/hf_config/gpt.h: the reader of the GPT-style families, whose configuration classes
// name their sizes by keys of their own (GPT-2's n_layer, n_head, n_embd and n_positions,
// GPT-Neo's num_layers and num_heads), which attribute_map aliases to the usual names (a file
// giving both is read by the usual name, as transformers 5.12 sets it last), and whose
// attention keeps K/V by a rule of its own, never by num_key_value_heads: a K and V head per
// query head (GPT-2, GPT-J, CodeGen, GPT-Neo, GPT-NeoX, OPT), one when multi_query (GPT
// BigCode, StarCoder's), or Falcon's (multi_query, or num_kv_heads under
// new_decoder_architecture), or DBRX's (attn_config.kv_n_heads). head_dim is always hidden /
// heads. GPT-Neo's attention_types
// makes each layer global or local (a window of window_size positions). Part of
// kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_GPT_H_
#define KVRING_HF_CONFIG_GPT_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// How a GPT-style family's attention keeps K/V heads.
enum class GptKv {
  kPerHead,     // one K and one V head per query head
  kMultiQuery,  // multi_query (default true): one; else one per query head (GPT BigCode)
  kFalcon,      // Falcon: new_decoder_architecture's num_kv_heads, else multi_query's one
  kDbrx,        // DBRX: attn_config.kv_n_heads (default 1)
};

// A GPT-style family: its class's own keys for the usual num_hidden_layers,
// num_attention_heads, hidden_size and max_position_embeddings (the usual names where the
// class uses them), and its K/V rule.
struct GptFamily {
  const char* model_type;
  const char* layers;
  const char* heads;
  const char* hidden;
  const char* positions;
  GptKv kv;
  bool local_layers = false;  // attention_types and window_size (GPT-Neo)
};

inline constexpr GptFamily kGptFamilies[] = {
    {"gpt2", "n_layer", "n_head", "n_embd", "n_positions", GptKv::kPerHead},
    {"gptj", "n_layer", "n_head", "n_embd", "n_positions", GptKv::kPerHead},
    {"codegen", "n_layer", "n_head", "n_embd", "n_positions", GptKv::kPerHead},
    {"gpt_bigcode", "n_layer", "n_head", "n_embd", "n_positions", GptKv::kMultiQuery},
    {"gpt_neo", "num_layers", "num_heads", "hidden_size", "max_position_embeddings",
     GptKv::kPerHead, true},
    {"gpt_neox", "num_hidden_layers", "num_attention_heads", "hidden_size",
     "max_position_embeddings", GptKv::kPerHead},
    {"opt", "num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings",
     GptKv::kPerHead},
    {"falcon", "num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings",
     GptKv::kFalcon},
    {"gpt-sw3", "n_layer", "n_head", "n_embd", "n_positions", GptKv::kPerHead},
    {"openai-gpt", "n_layer", "n_head", "n_embd", "n_positions", GptKv::kPerHead},
    {"xglm", "num_layers", "attention_heads", "d_model", "max_position_embeddings",
     GptKv::kPerHead},
    {"persimmon", "num_hidden_layers", "num_attention_heads", "hidden_size",
     "max_position_embeddings", GptKv::kPerHead},
    {"biogpt", "num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings",
     GptKv::kPerHead},
    {"gpt_neox_japanese", "num_hidden_layers", "num_attention_heads", "hidden_size",
     "max_position_embeddings", GptKv::kPerHead},
    {"dbrx", "n_layers", "n_heads", "d_model", "max_seq_len", GptKv::kDbrx},
};

inline const GptFamily& FindGptFamily(const Scope& scope) {
  for (const GptFamily& family : kGptFamilies) {
    if (std::strcmp(family.model_type, scope.family().model_type) == 0) return family;
  }
  return kGptFamilies[0];  // not reached: every kGpt row of families.h has an entry
}

// Returns DBRX's K/V heads: attn_config.kv_n_heads (default 1; attn_config absent or null is
// its class's defaults), dividing the `num_heads` query heads.
inline uint64_t ReadDbrxKvHeads(const Scope& scope, uint64_t num_heads) {
  const Json* config = scope.Find("attn_config");
  const Json empty = Json::object();
  if (config != nullptr && !config->is_null() && !config->is_object()) {
    scope.Fail("attn_config", Mistyped(*config, "an object"));
    return 1;
  }
  const Scope attention =
      scope.Nested(config == nullptr || config->is_null() ? empty : *config, "attn_config");
  const uint64_t kv_heads = attention.OrDefault("kv_n_heads", 1, 1, num_heads);
  if (!scope.Failed() && num_heads % kv_heads != 0) {
    attention.Fail("kv_n_heads", std::to_string(kv_heads) + " does not divide n_heads " +
                                     std::to_string(num_heads) +
                                     " (each KV head serves a whole group)");
  }
  return kv_heads;
}

// Returns the K/V heads of a family whose attention keeps `kv` heads per `num_heads` query
// heads by GptKv; 1 after a failure.
inline uint64_t ReadGptKvHeads(const Scope& scope, GptKv kv, uint64_t num_heads) {
  if (kv == GptKv::kPerHead) return num_heads;
  if (kv == GptKv::kMultiQuery) return scope.Bool("multi_query", true) ? 1 : num_heads;
  if (kv == GptKv::kDbrx) return ReadDbrxKvHeads(scope, num_heads);
  if (scope.Bool("alibi", false)) {
    scope.Fail("alibi", "is true: " + scope.ClassName() +
                            "'s attention adds ALiBi position biases (Falcon-RW), which kvring's "
                            "attention does not apply yet");
    return 1;
  }
  const bool new_architecture = scope.Bool("new_decoder_architecture", false);
  if (!new_architecture && scope.Bool("multi_query", true)) return 1;  // num_kv_heads unread
  uint64_t kv_heads = num_heads;
  if (scope.IsSet("num_kv_heads")) {
    kv_heads = scope.Required("num_kv_heads", 1, num_heads);
  } else {
    scope.Record("num_kv_heads", "num_attention_heads (" + std::to_string(num_heads) + ")");
  }
  if (scope.Failed()) return 1;
  if (new_architecture && num_heads % kv_heads != 0) {
    scope.Fail("num_kv_heads", std::to_string(kv_heads) + " does not divide num_attention_heads " +
                                   std::to_string(num_heads) +
                                   " (each KV head serves a whole group)");
    return 1;
  }
  if (!new_architecture && kv_heads != num_heads) {
    scope.Fail("num_kv_heads", std::to_string(kv_heads) + " is not num_attention_heads " +
                                   std::to_string(num_heads) + ", but " + scope.ClassName() +
                                   " without new_decoder_architecture or multi_query keeps a K "
                                   "and V head per query head");
    return 1;
  }
  return kv_heads;
}

// Returns GPT-Neo's layer kinds from attention_types (default [[["global", "local"], 12]]):
// each entry a list of "global" (full) or "local" (sliding) blocks and a repeat count, the
// whole one kind per layer of the `num_layers`.
inline Kinds ReadGptNeoKinds(const Scope& scope, uint64_t num_layers) {
  Kinds kinds;
  kinds.source = "attention_types";
  const char* key = "attention_types";
  Json fallback = Json::array({Json::array({Json::array({"global", "local"}), 12})});
  const Json* types = scope.Find(key);
  if (types == nullptr || types->is_null()) {
    scope.Record(key, fallback.dump());
    types = &fallback;
  }
  if (!types->is_array()) {
    scope.Fail(key, Mistyped(*types, "a list of [blocks, count] pairs"));
    return kinds;
  }
  for (size_t i = 0; i < types->size(); ++i) {
    const std::string at = std::string(key) + "[" + std::to_string(i) + "]";
    const Json& entry = (*types)[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_array()) {
      scope.Fail(at, Mistyped(entry, "a [blocks, count] pair"));
      return kinds;
    }
    const uint64_t count = scope.ToUInt(at + "[1]", entry[1], 0, kMaxLayers);
    std::vector<LayerType> block;
    for (size_t j = 0; j < entry[0].size() && !scope.Failed(); ++j) {
      const Json& name = entry[0][j];
      if (name != "global" && name != "local") {
        scope.Fail(at + "[0][" + std::to_string(j) + "]",
                   Show(name) + " is not \"global\" or \"local\"");
      }
      block.push_back(name == "local" ? LayerType::kSliding : LayerType::kFull);
    }
    if (scope.Failed()) return kinds;
    for (uint64_t r = 0; r < count && kinds.types.size() <= num_layers; ++r) {
      kinds.types.insert(kinds.types.end(), block.begin(), block.end());
    }
    if (kinds.types.size() > num_layers) break;
  }
  if (kinds.types.size() != num_layers) {
    scope.Fail(key, "gives " + std::string(kinds.types.size() > num_layers ? "more than " : "") +
                        std::to_string(kinds.types.size()) + " layers, but num_layers is " +
                        std::to_string(num_layers));
  }
  return kinds;
}

// Reads a GPT-style model of `scope` into *model.
inline void ReadGpt(const Scope& scope, HfModel* model) {
  const GptFamily& gpt = FindGptFamily(scope);
  NameFamily(scope, model);
  const uint64_t num_layers =
      scope.Required(SizeKey(scope, "num_hidden_layers", gpt.layers), 1, kMaxLayers);
  const char* heads_key = SizeKey(scope, "num_attention_heads", gpt.heads);
  const uint64_t num_heads = scope.Required(heads_key, 1, kMaxDim);
  // Falcon's n_embed, when set, replaces hidden_size (its __post_init__).
  const char* hidden_key = gpt.kv == GptKv::kFalcon && scope.IsSet("n_embed")
                               ? "n_embed"
                               : SizeKey(scope, "hidden_size", gpt.hidden);
  const uint64_t hidden = scope.Required(hidden_key, 1, kMaxDim * kMaxDim);
  const char* positions_key = SizeKey(scope, "max_position_embeddings", gpt.positions);
  model->max_context =
      scope.OrDefault(positions_key, scope.family().max_position_embeddings, 1, UINT64_MAX);
  if (scope.Failed()) return;
  model->num_attention_heads = static_cast<uint32_t>(num_heads);
  if (hidden % num_heads != 0) {
    scope.Fail(hidden_key, std::to_string(hidden) + " is not a multiple of " + heads_key + " " +
                               std::to_string(num_heads) + ", so head_dim is undefined");
    return;
  }
  const uint64_t head_dim = hidden / num_heads;
  if (head_dim > kMaxDim) {
    scope.Fail(hidden_key, "makes head_dim too large");
    return;
  }
  const uint64_t kv_heads = ReadGptKvHeads(scope, gpt.kv, num_heads);
  CheckUnread(scope, "num_key_value_heads", kv_heads,
              "its attention keeps " + std::to_string(kv_heads) + " K/V heads");
  CheckUnread(scope, "head_dim", head_dim,
              std::string("its heads are ") + hidden_key + " / " + heads_key + " = " +
                  std::to_string(head_dim) + " wide");
  if (scope.Failed()) return;
  const LayerSpec full =
      LayerSpec::Global(static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim));
  if (!gpt.local_layers) {
    BuildFullLayers(scope, num_layers, full, model);
    return;
  }
  const Kinds kinds = ReadGptNeoKinds(scope, num_layers);
  if (scope.Failed()) return;
  Spans spans;
  spans.window = scope.OrDefault("window_size", 256, 1, UINT64_MAX);
  if (scope.Failed()) return;
  BuildLayers(kinds, spans, full, full, model);
  CheckForeignKeys(scope, kinds);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_GPT_H_
