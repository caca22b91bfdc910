// kvring/hf_config/layers.h: the attention of a config.json's layers as its family reads them:
// KV heads, head_dim, and each layer's kind (from layer_types, or from the family's pattern),
// and the keys a family never reads but a file may contradict it with. Part of
// kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_LAYERS_H_
#define KVRING_HF_CONFIG_LAYERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvring/hf_config/families.h"
#include "kvring/hf_config/scope.h"

namespace kvring {
namespace detail {
namespace hf {

// hidden_size / num_attention_heads, which several families take as head_dim.
inline uint64_t HiddenOverHeads(const Scope& scope, uint64_t num_heads) {
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  if (hidden % num_heads != 0) {
    scope.Fail("hidden_size", std::to_string(hidden) +
                                  " is not a multiple of num_attention_heads " +
                                  std::to_string(num_heads) + ", so head_dim is undefined");
    return 1;
  }
  const uint64_t head_dim = hidden / num_heads;
  if (head_dim > kMaxDim) {
    scope.Fail("hidden_size", "makes head_dim too large");
    return 1;
  }
  return head_dim;
}

// Returns num_key_value_heads as the family's class reads it (KvHeadsRule), a count in
// [1, max]; `mha_heads` is what a rule that means one K/V head per query head gives. Checks
// nothing against the query heads (ReadKvHeads does).
inline uint64_t ReadKvHeadCount(const Scope& scope, uint64_t mha_heads, uint64_t max) {
  const Family& family = scope.family();
  const char* key = "num_key_value_heads";
  const Json* value = scope.Find(key);
  if (value == nullptr || value->is_null()) {
    switch (family.kv_heads) {
      case KvHeadsRule::kNoneMeansMha:
        scope.Record(key, "num_attention_heads (" + std::to_string(mha_heads) + ")");
        return mha_heads;
      case KvHeadsRule::kNumberNullIsMha:
        if (value != nullptr) return mha_heads;  // null: the class's "None means MHA" rule
        scope.Fail(key, "is missing; " + scope.ClassName() + "'s default " +
                            std::to_string(family.kv_heads_default) +
                            " is one checkpoint's count, not a rule (write the count, or null "
                            "for one KV head per query head)");
        return mha_heads;
      case KvHeadsRule::kNumberNoNullRule:
        scope.Fail(key, std::string(value == nullptr ? "is missing" : "is null") + "; " +
                            scope.ClassName() + "'s default " +
                            std::to_string(family.kv_heads_default) +
                            " is one checkpoint's count, not a rule (write the count)");
        return mha_heads;
      case KvHeadsRule::kRequired:
        scope.Fail(key, std::string(value == nullptr ? "is missing" : "is null") + "; " +
                            scope.ClassName() +
                            "'s default None leaves its attention without a KV head count");
        return mha_heads;
      case KvHeadsRule::kUnused:
        return 0;
    }
  }
  return scope.ToUInt(key, *value, 1, max);
}

inline uint64_t ReadKvHeads(const Scope& scope, uint64_t num_heads) {
  const char* key = "num_key_value_heads";
  const uint64_t kv_heads = ReadKvHeadCount(scope, num_heads, num_heads);
  if (scope.IsSet(key) && num_heads % kv_heads != 0) {
    scope.Fail(key, std::to_string(kv_heads) + " does not divide num_attention_heads " +
                        std::to_string(num_heads) + " (each KV head serves a whole group)");
  }
  return kv_heads;
}

inline uint64_t ReadHeadDim(const Scope& scope, uint64_t num_heads) {
  const Family& family = scope.family();
  const char* key = "head_dim";
  const Json* value = scope.Find(key);
  const bool absent = value == nullptr;
  const bool null = value != nullptr && value->is_null();
  const auto derived = [&]() {
    const uint64_t head_dim = HiddenOverHeads(scope, num_heads);
    scope.Record(key, "hidden_size / num_attention_heads (" + std::to_string(head_dim) + ")");
    return head_dim;
  };
  const auto default_dim = [&]() {
    scope.Record(key, std::to_string(family.head_dim_default));
    return family.head_dim_default;
  };
  switch (family.head_dim) {
    case HeadDimRule::kHiddenOverHeads:
      if (absent || null) return derived();
      break;
    case HeadDimRule::kAbsentIsHidden:
      if (absent) return derived();
      if (null) {
        scope.Fail(key, "is null; the model would have no head dimension");
        return 1;
      }
      break;
    case HeadDimRule::kDefaultNoNull:
      if (absent) return default_dim();
      if (null) {
        scope.Fail(key, "is null; " + scope.ClassName() + " needs a number here");
        return 1;
      }
      break;
    case HeadDimRule::kDefaultNullIsHidden:
      if (absent) return default_dim();
      if (null) return derived();
      break;
    case HeadDimRule::kAlwaysHidden: {
      const uint64_t head_dim = HiddenOverHeads(scope, num_heads);
      if (absent) {
        scope.Record(key, "hidden_size / num_attention_heads (" + std::to_string(head_dim) + ")");
      }
      if (!absent && !null && scope.ToUInt(key, *value, 1, kMaxDim) != head_dim) {
        scope.Fail(key, Show(*value) + " contradicts hidden_size / num_attention_heads = " +
                            std::to_string(head_dim) + ", which " + scope.ClassName() +
                            " always uses");
      }
      return head_dim;
    }
    case HeadDimRule::kRequired:
      if (absent || null) {
        scope.Fail(key, std::string(absent ? "is missing" : "is null") + "; " + scope.ClassName() +
                            "'s default None leaves its attention without a head dimension");
        return 1;
      }
      break;
    case HeadDimRule::kUnused:
      return 0;
  }
  return scope.ToUInt(key, *value, 1, kMaxDim);
}

// Returns the file's layer_types, or nullopt when absent or null (or after a failure).
inline std::optional<std::vector<LayerType>> ReadLayerTypes(const Scope& scope,
                                                            uint64_t num_layers) {
  const char* key = "layer_types";
  const Json* value = scope.LayerList(key, num_layers);
  if (value == nullptr) return std::nullopt;
  std::vector<LayerType> types;
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& entry = (*value)[i];
    bool found = false;
    for (LayerType type : {LayerType::kFull, LayerType::kSliding, LayerType::kChunked}) {
      if (entry.is_string() && entry.get<std::string>() == LayerTypeName(type)) {
        types.push_back(type);
        found = true;
      }
    }
    if (!found) {
      scope.Fail(std::string(key) + "[" + std::to_string(i) + "]",
                 Show(entry) +
                     " is not an attention kind kvring plans (full_attention, sliding_attention "
                     "or chunked_attention)");
      return std::nullopt;
    }
  }
  return types;
}

// The kinds of the layers and the rule that gave them, for messages.
struct Kinds {
  std::vector<LayerType> types;
  std::string source;  // "layer_types" or the class's rule
};

inline std::string KindOf(const Kinds& kinds, size_t i) {
  return "layer " + std::to_string(i) + " is " + LayerTypeName(kinds.types[i]) + " (by " +
         kinds.source + ")";
}

// Returns the pattern at `key` (sliding_window_pattern, or the _sliding_window_pattern that
// newer transformers save beside layer_types), or 0 when the file has none.
inline uint64_t ReadPattern(const Scope& scope, const char* key) {
  const Json* value = scope.Find(key);
  if (value == nullptr || value->is_null()) return 0;
  return scope.ToUInt(key, *value, 1, kMaxLayers);
}

// Returns whether a pattern the file states at `key` makes layer i local: a period (full iff
// (i + 1) % period == 0), or a string of 'L' (local) and 'G' (global) letters repeated over the
// layers (EXAONE 4's "LLLG"). nullopt when the file states none (or after a failure).
inline std::optional<std::vector<bool>> ReadStatedPattern(const Scope& scope, const char* key,
                                                          size_t num_layers) {
  const Json* value = scope.Find(key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  std::vector<bool> local(num_layers);
  if (value->is_string()) {
    const std::string letters = value->get<std::string>();
    if (letters.empty() || letters.find_first_not_of("LG") != std::string::npos) {
      scope.Fail(key, Show(*value) + " is not a period nor a string of L (local) and G (global)");
      return std::nullopt;
    }
    for (size_t i = 0; i < num_layers; ++i) local[i] = letters[i % letters.size()] == 'L';
    return local;
  }
  const uint64_t period = scope.ToUInt(key, *value, 1, kMaxLayers);
  if (scope.Failed()) return std::nullopt;
  for (size_t i = 0; i < num_layers; ++i) local[i] = (i + 1) % period != 0;
  return local;
}

// Returns the family's sliding_window: the file's, or the class default when absent (nullopt
// for a null value, or a class default of None).
inline std::optional<uint64_t> ReadWindow(const Scope& scope) {
  const uint64_t fallback = scope.family().sliding_window_default;
  if (fallback == kNullWindow && scope.Find("sliding_window") == nullptr) {
    scope.Record("sliding_window", "null");
    return std::nullopt;
  }
  return scope.NullableOrDefault("sliding_window", fallback, 1, UINT64_MAX);
}

// Returns no_rope_layers (1: the layer uses RoPE, 0: NoPE), or, without the list (absent, null
// or, for Llama 4, empty), the class's interval rule: NoPE iff (i + 1) % interval == 0.
inline std::vector<bool> ReadRopeLayers(const Scope& scope, size_t num_layers, bool empty_is_absent,
                                        std::string* source) {
  std::vector<bool> rope(num_layers, true);
  const Json* given = scope.Find("no_rope_layers");
  const bool empty = given != nullptr && given->is_array() && given->empty();
  const Json* list =
      empty && empty_is_absent ? nullptr : scope.LayerList("no_rope_layers", num_layers);
  if (scope.Failed()) return rope;
  if (list == nullptr) {
    const uint64_t interval = scope.OrDefault("no_rope_layer_interval", 4, 1, kMaxLayers);
    for (size_t i = 0; i < num_layers; ++i) rope[i] = (i + 1) % interval != 0;
    *source = "no_rope_layer_interval";
    return rope;
  }
  for (size_t i = 0; i < num_layers; ++i) {
    const std::string key = "no_rope_layers[" + std::to_string(i) + "]";
    rope[i] = scope.ToUInt(key, (*list)[i], 0, 1) == 1;
  }
  *source = "no_rope_layers";
  return rope;
}

// Returns the kinds of `num_layers` layers by the family's rule (a file without layer_types).
// `switched_window`: the window of a family whose use_sliding_window switches it (nullopt when
// switched off).
inline Kinds DeriveKinds(const Scope& scope, uint64_t num_layers,
                         const std::optional<uint64_t>& switched_window) {
  const Family& family = scope.family();
  Kinds kinds;
  kinds.source = std::string(family.class_name) + "'s rule: " + family.rule_text;
  std::vector<LayerType>& types = kinds.types;
  types.assign(num_layers, LayerType::kFull);
  switch (family.pattern) {
    case PatternRule::kAllFull:
      break;
    case PatternRule::kAllSliding:
      if (ReadWindow(scope)) types.assign(num_layers, LayerType::kSliding);
      break;
    case PatternRule::kAllSlidingSwitched:
      if (switched_window) types.assign(num_layers, LayerType::kSliding);
      break;
    case PatternRule::kEvenSliding:
      for (size_t i = 0; i < num_layers; i += 2) types[i] = LayerType::kSliding;
      break;
    case PatternRule::kSlidingPattern: {
      // Only the pattern key derives layer_types; _sliding_window_pattern is checked against
      // the result (CheckForeignKeys), like any pattern the file states.
      const char* key = family.pattern_key;
      const Json* value = scope.Find(key);
      if (value != nullptr && !value->is_number_integer()) {
        scope.Fail(key, Mistyped(*value, "a number") + "; " + scope.ClassName() +
                            " derives layer_types from a number (or write layer_types)");
        break;
      }
      uint64_t pattern = ReadPattern(scope, key);
      if (pattern == 0) {
        pattern = family.pattern_default;
        scope.Record(key, std::to_string(pattern));
      }
      for (size_t i = 0; i < num_layers; ++i) {
        if ((i + 1) % pattern != 0) types[i] = LayerType::kSliding;
      }
      break;
    }
    case PatternRule::kPrefixDense: {
      // Cohere 2 MoE: its dense prefix by a period of its own (default 1: all full), then the
      // pattern counted again from the first layer after it. A prefix longer than the model
      // makes more layer_types than layers (refused).
      const uint64_t prefix = scope.OrDefault("first_k_dense_replace", 0, 0, num_layers);
      const uint64_t prefix_period =
          scope.OrDefault("prefix_dense_sliding_window_pattern", 1, 1, kMaxLayers);
      const uint64_t period =
          scope.OrDefault(family.pattern_key, family.pattern_default, 1, kMaxLayers);
      if (scope.Failed()) break;
      for (size_t i = 0; i < num_layers; ++i) {
        const bool full =
            i < prefix ? (i + 1) % prefix_period == 0 : (i - prefix + 1) % period == 0;
        if (!full) types[i] = LayerType::kSliding;
      }
      break;
    }
    case PatternRule::kEveryNthFull:
    case PatternRule::kFirstOfEveryNth: {
      // Gemma 3n and 4 and OLMo 3 make the last layer of each period full; CWM the first.
      const size_t shift = family.pattern == PatternRule::kEveryNthFull ? 1 : 0;
      for (size_t i = 0; i < num_layers; ++i) {
        if ((i + shift) % family.pattern_default != 0) types[i] = LayerType::kSliding;
      }
      break;
    }
    case PatternRule::kEvenBelowWindowLayers: {
      // Qwen2-MoE: the even layers below max_window_layers, when use_sliding_window is true.
      if (!switched_window) break;
      const uint64_t below =
          scope.OrDefault("max_window_layers", family.pattern_default, 0, UINT64_MAX);
      for (size_t i = 0; i < num_layers && i < below; i += 2) types[i] = LayerType::kSliding;
      break;
    }
    case PatternRule::kMaxWindowLayers:
    case PatternRule::kWindowFromLayer: {
      // Qwen 2 and 3 switch the window by use_sliding_window; dots1 by the window itself.
      const bool windowed = family.pattern == PatternRule::kMaxWindowLayers
                                ? switched_window.has_value()
                                : ReadWindow(scope).has_value();
      if (!windowed) break;
      const uint64_t first_sliding =
          scope.OrDefault("max_window_layers", family.pattern_default, 0, UINT64_MAX);
      for (size_t i = first_sliding < num_layers ? first_sliding : num_layers; i < num_layers;
           ++i) {
        types[i] = LayerType::kSliding;
      }
      break;
    }
    case PatternRule::kNoRopeLayers: {
      // Llama 4: chunked iff the layer uses RoPE; an empty list counts as absent.
      std::string source;
      const std::vector<bool> rope = ReadRopeLayers(scope, num_layers, true, &source);
      for (size_t i = 0; i < num_layers; ++i) {
        if (rope[i]) types[i] = LayerType::kChunked;
      }
      if (source == "no_rope_layer_interval") {
        kinds.source = std::string(family.class_name) +
                       "'s rule: chunked unless (i + 1) % no_rope_layer_interval == 0";
      }
      break;
    }
    case PatternRule::kNoRopeSliding: {
      // SmolLM3: the NoPE layers slide, when use_sliding_window and a sliding_window are set.
      std::string source;
      const std::vector<bool> rope = ReadRopeLayers(scope, num_layers, false, &source);
      if (!switched_window) break;
      for (size_t i = 0; i < num_layers; ++i) {
        if (!rope[i]) types[i] = LayerType::kSliding;
      }
      break;
    }
  }
  return kinds;
}

// Refuses a file's `key` (num_key_value_heads, head_dim) that the class never reads when it is
// not `kept`, what the attention keeps instead (`kept_text` saying so).
inline void CheckUnread(const Scope& scope, const char* key, uint64_t kept,
                        const std::string& kept_text) {
  if (!scope.IsSet(key) || scope.Failed()) return;
  const Json& value = *scope.Find(key);
  if (value.is_number_unsigned() && value.get<uint64_t>() == kept) return;
  scope.Fail(key,
             Show(value) + " is set, but " + scope.ClassName() + " does not read it: " + kept_text);
}

// Refuses attention keys this family never reads when their values would change the plan:
// transformers ignores them, but a file that states them contradicts its own model_type.
inline void CheckForeignKeys(const Scope& scope, const Kinds& kinds) {
  const Family& family = scope.family();
  const std::string tail = ", so the file contradicts its model_type";
  const auto foreign = [&](const char* key, bool read, const char* lacks) {
    if (read || !scope.IsSet(key)) return;
    scope.Fail(key, Show(*scope.Find(key)) + " is set, but " + scope.ClassName() + lacks + tail);
  };
  foreign("sliding_window", family.sliding_window_default != 0, " has no sliding window");
  foreign("attention_chunk_size", family.reads_chunk, " has no chunked attention");
  if (!family.shares_kv && scope.IsSet("num_kv_shared_layers") &&
      *scope.Find("num_kv_shared_layers") != 0) {
    scope.Fail("num_kv_shared_layers", Show(*scope.Find("num_kv_shared_layers")) + " is set, but " +
                                           scope.ClassName() + " shares no KV between layers" +
                                           tail);
  }
  foreign("kv_lora_rank", family.mla, " has no latent attention (MLA)");
  if (!family.reads_layer_types) {
    if (const auto types = ReadLayerTypes(scope, kinds.types.size())) {
      for (size_t i = 0; i < types->size(); ++i) {
        if ((*types)[i] != kinds.types[i]) {
          scope.Fail("layer_types[" + std::to_string(i) + "]",
                     std::string(LayerTypeName((*types)[i])) + ", but " + KindOf(kinds, i) +
                         ", and " + scope.ClassName() + " does not read layer_types");
          return;
        }
      }
    }
  }
  // A pattern the file states (beside explicit layer_types, in a family that never reads it,
  // or as the _sliding_window_pattern that transformers does not read) must describe the
  // same layers; Cohere 2 MoE's counts after its dense prefix (DeriveKinds) instead.
  if (family.pattern == PatternRule::kPrefixDense) return;
  for (const char* key :
       {family.pattern_key, "sliding_window_pattern", "_sliding_window_pattern"}) {
    const auto local = ReadStatedPattern(scope, key, kinds.types.size());
    if (!local) continue;
    for (size_t i = 0; i < kinds.types.size(); ++i) {
      if ((*local)[i] != (kinds.types[i] != LayerType::kFull)) {
        scope.Fail(key, Show(*scope.Find(key)) + " makes layer " + std::to_string(i) +
                            ((*local)[i] ? " sliding_attention" : " full_attention") + ", but " +
                            KindOf(kinds, i));
        return;
      }
    }
  }
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_LAYERS_H_
