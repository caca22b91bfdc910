// tools/hf_config.cc: the reading of Hugging Face config.json files (see hf_config.h and
// docs/configs.md). Each family's rules restate what its transformers configuration class
// does with the keys (its defaults, and the __post_init__ that fills layer_types); nothing
// here is taken from transformers' code.
#include "hf_config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace kvring {
namespace tools {
namespace {

using Json = nlohmann::json;

// Thrown inside this file only and caught by ParseHfConfig, which turns it into an Error:
// the reader stops at the first key it cannot interpret, from any depth of the checks.
struct ConfigError {
  std::string key;  // empty for errors of the whole file
  std::string what;
};

[[noreturn]] void Fail(std::string key, std::string what) {
  throw ConfigError{std::move(key), std::move(what)};
}

constexpr uint64_t kMaxLayers = 100000;
constexpr uint64_t kMaxDim = uint64_t{1} << 20;
constexpr uint64_t kMaxFileBytes = uint64_t{64} << 20;

// A layer's attention as transformers' layer_types names it.
enum class LayerType { kFull, kSliding, kChunked };

const char* LayerTypeName(LayerType type) {
  switch (type) {
    case LayerType::kFull:
      return "full_attention";
    case LayerType::kSliding:
      return "sliding_attention";
    case LayerType::kChunked:
      return "chunked_attention";
  }
  return "invalid";
}

// What a family's configuration class does when num_key_value_heads is absent or null.
enum class KvHeadsRule {
  kNoneMeansMha,      // class default None, then num_attention_heads: absent or null is MHA
  kNumberNullIsMha,   // class default is one checkpoint's count (refused); null is MHA
  kNumberNoNullRule,  // class default is one checkpoint's count (refused); null refused
  kUnused,            // MLA: the latent replaces per-head K and V
};

// What a family does when head_dim is absent or null.
enum class HeadDimRule {
  kHiddenOverHeads,      // absent or null: hidden_size / num_attention_heads
  kDefaultNullIsHidden,  // absent: the class default; null: hidden_size / num_attention_heads
  kAbsentIsHidden,       // absent: hidden_size / num_attention_heads (the model's getattr); null
                         // refused
  kDefaultNoNull,        // absent: the class default; null refused
  kAlwaysHidden,         // always hidden_size / num_attention_heads, whatever the file says
  kUnused,               // MLA
};

// How a family fills layer_types when the file has none (or when it never reads them).
enum class PatternRule {
  kAllFull,          // no local attention
  kAllSliding,       // every layer slides when sliding_window is not null (Mistral)
  kEvenSliding,      // sliding on even layers (Gemma 2, GPT-OSS)
  kSlidingPattern,   // full iff (i + 1) % sliding_window_pattern == 0 (Gemma 3, Cohere 2)
  kEveryFifthFull,   // full iff (i + 1) % 5 == 0 (Gemma 3n)
  kMaxWindowLayers,  // sliding iff use_sliding_window and i >= max_window_layers (Qwen 2, 3)
  kNoRopeLayers,     // chunked iff no_rope_layers[i] == 1 (Llama 4)
};

struct Family {
  const char* model_type;
  const char* class_name;
  uint64_t max_position_embeddings;  // the class default
  KvHeadsRule kv_heads;
  uint64_t kv_heads_default;  // the class default, quoted in messages
  HeadDimRule head_dim;
  uint64_t head_dim_default;
  PatternRule pattern;
  uint64_t sliding_window_default;  // 0: the family has no sliding window
  uint64_t pattern_default;         // kSlidingPattern: sliding_window_pattern's default
  bool reads_layer_types;
  bool reads_chunk;       // attention_chunk_size (default 8192)
  bool shares_kv;         // num_kv_shared_layers (default 15)
  bool mla;               // kv_lora_rank (512) + qk_rope_head_dim (64)
  const char* rule_text;  // the derived pattern, for messages
};

constexpr Family kFamilies[] = {
    {"llama", "LlamaConfig", 2048, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kHiddenOverHeads, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"mistral", "MistralConfig", 131072, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kHiddenOverHeads, 0, PatternRule::kAllSliding, 4096, 0, false, false, false,
     false, "every layer slides when sliding_window is set"},
    {"qwen2", "Qwen2Config", 32768, KvHeadsRule::kNumberNullIsMha, 32, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kMaxWindowLayers, 4096, 0, true, false, false, false,
     "sliding iff use_sliding_window and i >= max_window_layers"},
    {"qwen3", "Qwen3Config", 32768, KvHeadsRule::kNumberNullIsMha, 32, HeadDimRule::kDefaultNoNull,
     128, PatternRule::kMaxWindowLayers, 4096, 0, true, false, false, false,
     "sliding iff use_sliding_window and i >= max_window_layers"},
    {"gemma2", "Gemma2Config", 8192, KvHeadsRule::kNumberNoNullRule, 4, HeadDimRule::kDefaultNoNull,
     256, PatternRule::kEvenSliding, 4096, 0, true, false, false, false,
     "sliding on even layers, full on odd"},
    {"gemma3_text", "Gemma3TextConfig", 131072, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kSlidingPattern, 4096, 6, true, false, false,
     false, "full iff (i + 1) % sliding_window_pattern == 0"},
    {"gemma3n_text", "Gemma3nTextConfig", 32768, KvHeadsRule::kNumberNoNullRule, 2,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kEveryFifthFull, 512, 0, true, false, true,
     false, "full iff (i + 1) % 5 == 0"},
    {"llama4_text", "Llama4TextConfig", 131072, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kDefaultNullIsHidden, 128, PatternRule::kNoRopeLayers, 0, 0, true, true, false,
     false, "chunked iff no_rope_layers[i] == 1"},
    {"gpt_oss", "GptOssConfig", 131072, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kDefaultNullIsHidden, 64, PatternRule::kEvenSliding, 128, 0, true, false, false,
     false, "sliding on even layers, full on odd"},
    {"cohere2", "Cohere2Config", 8192, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAlwaysHidden, 0,
     PatternRule::kSlidingPattern, 4096, 4, true, false, false, false,
     "full iff (i + 1) % sliding_window_pattern == 0"},
    {"deepseek_v3", "DeepseekV3Config", 4096, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, true, "every layer full_attention (MLA)"},
};

// Multimodal checkpoints whose language model is configured under text_config.
struct Wrapper {
  const char* model_type;
  const char* text_model_type;
};
constexpr Wrapper kWrappers[] = {
    {"gemma3", "gemma3_text"}, {"gemma3n", "gemma3n_text"}, {"llama4", "llama4_text"}};

const Family* FindFamily(const std::string& model_type) {
  for (const Family& family : kFamilies) {
    if (model_type == family.model_type) return &family;
  }
  return nullptr;
}

// Returns a short JSON rendering of `value` for messages (escaped, so always one line).
std::string Show(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 48) text = text.substr(0, 45) + "...";
  return text;
}

std::string TypeName(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number with a fraction or exponent";
  return std::string(value.is_array() || value.is_object() ? "an " : "a ") + value.type_name();
}

// Returns "<value> is <its type>, not <wanted>" (or "is null, not <wanted>").
std::string Mistyped(const Json& value, const std::string& wanted) {
  if (value.is_null()) return "is null, not " + wanted;
  return Show(value) + " is " + TypeName(value) + ", not " + wanted;
}

// One JSON object of the file (the top level, or text_config) and what was read from it.
class Scope {
 public:
  Scope(const Json& object, std::string prefix, const Family& family,
        std::vector<HfDefault>* defaults)
      : object_(object), prefix_(std::move(prefix)), family_(family), defaults_(defaults) {}

  const Family& family() const { return family_; }
  std::string Key(const std::string& key) const { return prefix_ + key; }
  std::string ClassName() const { return family_.class_name; }

  // Returns the value at `key`, or nullptr when the key is absent.
  const Json* Find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  bool IsSet(const char* key) const {
    const Json* value = Find(key);
    return value != nullptr && !value->is_null();
  }

  // Returns `value` (found at `key`) as an integer in [min, max].
  uint64_t ToUInt(const std::string& key, const Json& value, uint64_t min, uint64_t max) const {
    if (!value.is_number_integer()) {
      Fail(Key(key), Mistyped(value, "an integer"));
    }
    if (value.is_number_integer() && !value.is_number_unsigned()) {
      Fail(Key(key), Show(value) + " is negative");
    }
    const uint64_t number = value.get<uint64_t>();
    if (number < min) {
      Fail(Key(key), Show(value) + " is invalid: it must be at least " + std::to_string(min));
    }
    if (number > max) {
      Fail(Key(key), Show(value) + " is too large (at most " + std::to_string(max) + ")");
    }
    return number;
  }

  // Returns the integer at `key`; absent or null is refused ("missing head counts").
  uint64_t Required(const char* key, uint64_t min, uint64_t max) const {
    const Json* value = Find(key);
    if (value == nullptr) {
      Fail(Key(key), "is missing; kvring-plan does not guess a model's size (" + ClassName() +
                         "'s default describes one checkpoint only)");
    }
    if (value->is_null()) Fail(Key(key), "is null; the model needs a number");
    return ToUInt(key, *value, min, max);
  }

  // Returns the integer at `key`, or the class default `fallback` when the key is absent
  // (and records it); null is refused.
  uint64_t OrDefault(const char* key, uint64_t fallback, uint64_t min, uint64_t max) const {
    const Json* value = Find(key);
    if (value == nullptr) {
      Record(key, std::to_string(fallback));
      return fallback;
    }
    if (value->is_null()) {
      Fail(Key(key), "is null; " + ClassName() + " needs a number here");
    }
    return ToUInt(key, *value, min, max);
  }

  // As OrDefault, but null is a value of its own (returned as nullopt).
  std::optional<uint64_t> NullableOrDefault(const char* key, uint64_t fallback, uint64_t min,
                                            uint64_t max) const {
    const Json* value = Find(key);
    if (value == nullptr) {
      Record(key, std::to_string(fallback));
      return fallback;
    }
    if (value->is_null()) return std::nullopt;
    return ToUInt(key, *value, min, max);
  }

  // Returns the boolean at `key`, or `fallback` when it is absent.
  bool Bool(const char* key, bool fallback) const {
    const Json* value = Find(key);
    if (value == nullptr) {
      Record(key, fallback ? "true" : "false");
      return fallback;
    }
    if (!value->is_boolean()) {
      Fail(Key(key), Mistyped(*value, "true or false"));
    }
    return value->get<bool>();
  }

  // Notes a class default the file left out (once per key).
  void Record(const std::string& key, const std::string& value) const {
    for (const HfDefault& recorded : *defaults_) {
      if (recorded.key == Key(key)) return;
    }
    defaults_->push_back({Key(key), value});
  }

 private:
  const Json& object_;
  std::string prefix_;
  const Family& family_;
  std::vector<HfDefault>* defaults_;
};

// hidden_size / num_attention_heads, which several families take as head_dim.
uint64_t HiddenOverHeads(const Scope& scope, uint64_t num_heads) {
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  if (hidden % num_heads != 0) {
    Fail(scope.Key("hidden_size"), std::to_string(hidden) +
                                       " is not a multiple of num_attention_heads " +
                                       std::to_string(num_heads) + ", so head_dim is undefined");
  }
  const uint64_t head_dim = hidden / num_heads;
  if (head_dim > kMaxDim) Fail(scope.Key("hidden_size"), "makes head_dim too large");
  return head_dim;
}

uint64_t ReadKvHeads(const Scope& scope, uint64_t num_heads) {
  const Family& family = scope.family();
  const char* key = "num_key_value_heads";
  const Json* value = scope.Find(key);
  if (value == nullptr || value->is_null()) {
    switch (family.kv_heads) {
      case KvHeadsRule::kNoneMeansMha:
        scope.Record(key, "num_attention_heads (" + std::to_string(num_heads) + ")");
        return num_heads;
      case KvHeadsRule::kNumberNullIsMha:
        if (value != nullptr) return num_heads;  // null: the class's "None means MHA" rule
        Fail(scope.Key(key), "is missing; " + scope.ClassName() + "'s default " +
                                 std::to_string(family.kv_heads_default) +
                                 " is one checkpoint's count, not a rule (write the count, or "
                                 "null for one KV head per query head)");
      case KvHeadsRule::kNumberNoNullRule:
        Fail(scope.Key(key), std::string(value == nullptr ? "is missing" : "is null") + "; " +
                                 scope.ClassName() + "'s default " +
                                 std::to_string(family.kv_heads_default) +
                                 " is one checkpoint's count, not a rule (write the count)");
      case KvHeadsRule::kUnused:
        return 0;
    }
  }
  const uint64_t kv_heads = scope.ToUInt(key, *value, 1, num_heads);
  if (num_heads % kv_heads != 0) {
    Fail(scope.Key(key), std::to_string(kv_heads) + " does not divide num_attention_heads " +
                             std::to_string(num_heads) + " (each KV head serves a whole group)");
  }
  return kv_heads;
}

uint64_t ReadHeadDim(const Scope& scope, uint64_t num_heads) {
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
  switch (family.head_dim) {
    case HeadDimRule::kHiddenOverHeads:
      if (absent || null) return derived();
      break;
    case HeadDimRule::kDefaultNullIsHidden:
      if (null) return derived();
      if (absent) {
        scope.Record(key, std::to_string(family.head_dim_default));
        return family.head_dim_default;
      }
      break;
    case HeadDimRule::kAbsentIsHidden:
      if (absent) return derived();
      if (null) Fail(scope.Key(key), "is null; the model would have no head dimension");
      break;
    case HeadDimRule::kDefaultNoNull:
      if (absent) {
        scope.Record(key, std::to_string(family.head_dim_default));
        return family.head_dim_default;
      }
      if (null) {
        Fail(scope.Key(key), "is null; " + scope.ClassName() + " needs a number here");
      }
      break;
    case HeadDimRule::kAlwaysHidden: {
      const uint64_t head_dim = HiddenOverHeads(scope, num_heads);
      if (absent)
        scope.Record(key, "hidden_size / num_attention_heads (" + std::to_string(head_dim) + ")");
      if (!absent && !null && scope.ToUInt(key, *value, 1, kMaxDim) != head_dim) {
        Fail(scope.Key(key), Show(*value) + " contradicts hidden_size / num_attention_heads = " +
                                 std::to_string(head_dim) + ", which " + scope.ClassName() +
                                 " always uses");
      }
      return head_dim;
    }
    case HeadDimRule::kUnused:
      return 0;
  }
  return scope.ToUInt(key, *value, 1, kMaxDim);
}

// Returns the file's layer_types at `key`, or nullopt when absent or null.
std::optional<std::vector<LayerType>> ReadLayerTypes(const Scope& scope, uint64_t num_layers) {
  const char* key = "layer_types";
  const Json* value = scope.Find(key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (!value->is_array()) {
    Fail(scope.Key(key), Mistyped(*value, "a list"));
  }
  if (value->size() != num_layers) {
    Fail(scope.Key(key), "has " + std::to_string(value->size()) +
                             " entries, but num_hidden_layers is " + std::to_string(num_layers));
  }
  std::vector<LayerType> types;
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& entry = (*value)[i];
    const std::string entry_key = std::string(key) + "[" + std::to_string(i) + "]";
    bool found = false;
    for (LayerType type : {LayerType::kFull, LayerType::kSliding, LayerType::kChunked}) {
      if (entry.is_string() && entry.get<std::string>() == LayerTypeName(type)) {
        types.push_back(type);
        found = true;
      }
    }
    if (!found) {
      Fail(scope.Key(entry_key), Show(entry) +
                                     " is not an attention kind kvring plans (full_attention, "
                                     "sliding_attention or chunked_attention)");
    }
  }
  return types;
}

// The rule that gave the layers their kinds, for messages.
struct Kinds {
  std::vector<LayerType> types;
  std::string source;  // "layer_types" or the class's rule
};

std::string KindOf(const Kinds& kinds, size_t i) {
  return "layer " + std::to_string(i) + " is " + LayerTypeName(kinds.types[i]) + " (by " +
         kinds.source + ")";
}

// Returns the pattern at `key` (sliding_window_pattern, or the _sliding_window_pattern that
// newer transformers save beside layer_types), or 0 when the file has none.
uint64_t ReadPattern(const Scope& scope, const char* key) {
  const Json* value = scope.Find(key);
  if (value == nullptr || value->is_null()) return 0;
  return scope.ToUInt(key, *value, 1, kMaxLayers);
}

Kinds DeriveKinds(const Scope& scope, uint64_t num_layers, bool qwen_sliding) {
  const Family& family = scope.family();
  Kinds kinds;
  kinds.source = std::string(family.class_name) + "'s rule: " + family.rule_text;
  std::vector<LayerType>& types = kinds.types;
  types.assign(num_layers, LayerType::kFull);
  switch (family.pattern) {
    case PatternRule::kAllFull:
      break;
    case PatternRule::kAllSliding:
      if (scope.NullableOrDefault("sliding_window", family.sliding_window_default, 1, UINT64_MAX)) {
        types.assign(num_layers, LayerType::kSliding);
      }
      break;
    case PatternRule::kEvenSliding:
      for (size_t i = 0; i < num_layers; i += 2) types[i] = LayerType::kSliding;
      break;
    case PatternRule::kSlidingPattern: {
      // Only sliding_window_pattern derives layer_types; _sliding_window_pattern is checked
      // against the result below, like any pattern the file states.
      const Json* value = scope.Find("sliding_window_pattern");
      if (value != nullptr && value->is_null()) {
        Fail(scope.Key("sliding_window_pattern"),
             "is null; " + scope.ClassName() + " derives layer_types from a number");
      }
      uint64_t pattern = ReadPattern(scope, "sliding_window_pattern");
      if (pattern == 0) {
        pattern = family.pattern_default;
        scope.Record("sliding_window_pattern", std::to_string(pattern));
      }
      for (size_t i = 0; i < num_layers; ++i) {
        if ((i + 1) % pattern != 0) types[i] = LayerType::kSliding;
      }
      break;
    }
    case PatternRule::kEveryFifthFull:
      for (size_t i = 0; i < num_layers; ++i) {
        if ((i + 1) % 5 != 0) types[i] = LayerType::kSliding;
      }
      break;
    case PatternRule::kMaxWindowLayers: {
      if (!qwen_sliding) break;
      const uint64_t first_sliding = scope.OrDefault("max_window_layers", 28, 0, UINT64_MAX);
      for (size_t i = first_sliding < num_layers ? first_sliding : num_layers; i < num_layers;
           ++i) {
        types[i] = LayerType::kSliding;
      }
      break;
    }
    case PatternRule::kNoRopeLayers: {
      const Json* list = scope.Find("no_rope_layers");
      if (list != nullptr && !list->is_null() && !list->is_array()) {
        Fail(scope.Key("no_rope_layers"), Mistyped(*list, "a list"));
      }
      if (list == nullptr || list->is_null() || list->empty()) {
        // Llama4TextConfig treats an empty list as absent: a NoPE (full) layer every interval.
        const uint64_t interval = scope.OrDefault("no_rope_layer_interval", 4, 1, kMaxLayers);
        for (size_t i = 0; i < num_layers; ++i) {
          if ((i + 1) % interval != 0) types[i] = LayerType::kChunked;
        }
        kinds.source = std::string(family.class_name) +
                       "'s rule: chunked unless (i + 1) % no_rope_layer_interval == 0";
        break;
      }
      if (list->size() != num_layers) {
        Fail(scope.Key("no_rope_layers"), "has " + std::to_string(list->size()) +
                                              " entries, but num_hidden_layers is " +
                                              std::to_string(num_layers));
      }
      for (size_t i = 0; i < num_layers; ++i) {
        const std::string key = "no_rope_layers[" + std::to_string(i) + "]";
        if (scope.ToUInt(key, (*list)[i], 0, 1) == 1) types[i] = LayerType::kChunked;
      }
      break;
    }
  }
  return kinds;
}

// Refuses attention keys this family never reads when their values would change the plan:
// transformers ignores them, but a file that states them contradicts its own model_type.
void CheckForeignKeys(const Scope& scope, const Kinds& kinds) {
  const Family& family = scope.family();
  const std::string tail = ", so the file contradicts its model_type";
  if (family.sliding_window_default == 0 && scope.IsSet("sliding_window")) {
    Fail(scope.Key("sliding_window"), Show(*scope.Find("sliding_window")) + " is set, but " +
                                          scope.ClassName() + " has no sliding window" + tail);
  }
  if (!family.reads_chunk && scope.IsSet("attention_chunk_size")) {
    Fail(scope.Key("attention_chunk_size"), Show(*scope.Find("attention_chunk_size")) +
                                                " is set, but " + scope.ClassName() +
                                                " has no chunked attention" + tail);
  }
  if (!family.shares_kv && scope.IsSet("num_kv_shared_layers") &&
      *scope.Find("num_kv_shared_layers") != 0) {
    Fail(scope.Key("num_kv_shared_layers"), Show(*scope.Find("num_kv_shared_layers")) +
                                                " is set, but " + scope.ClassName() +
                                                " shares no KV between layers" + tail);
  }
  if (!family.mla && scope.IsSet("kv_lora_rank")) {
    Fail(scope.Key("kv_lora_rank"), Show(*scope.Find("kv_lora_rank")) + " is set, but " +
                                        scope.ClassName() + " has no latent attention (MLA)" +
                                        tail);
  }
  if (!family.reads_layer_types) {
    if (const auto types = ReadLayerTypes(scope, kinds.types.size())) {
      for (size_t i = 0; i < types->size(); ++i) {
        if ((*types)[i] != kinds.types[i]) {
          Fail(scope.Key("layer_types[" + std::to_string(i) + "]"),
               std::string(LayerTypeName((*types)[i])) + ", but " + KindOf(kinds, i) + ", and " +
                   scope.ClassName() + " does not read layer_types");
        }
      }
    }
  }
  // A pattern the file states (beside explicit layer_types, in a family that never reads it,
  // or as the _sliding_window_pattern that transformers does not read) must describe the
  // same layers.
  for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"}) {
    const uint64_t pattern = ReadPattern(scope, key);
    if (pattern == 0) continue;
    for (size_t i = 0; i < kinds.types.size(); ++i) {
      const bool pattern_local = (i + 1) % pattern != 0;
      if (pattern_local != (kinds.types[i] != LayerType::kFull)) {
        Fail(scope.Key(key), std::to_string(pattern) + " makes layer " + std::to_string(i) +
                                 (pattern_local ? " sliding_attention" : " full_attention") +
                                 ", but " + KindOf(kinds, i));
      }
    }
  }
}

HfModel Interpret(const Scope& scope) {
  const Family& family = scope.family();
  HfModel model;
  model.model_type = family.model_type;
  model.class_name = family.class_name;
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = scope.Required("num_attention_heads", 1, kMaxDim);
  model.num_attention_heads = static_cast<uint32_t>(num_heads);
  if (scope.IsSet("use_bidirectional_attention") &&
      scope.Bool("use_bidirectional_attention", false)) {
    Fail(scope.Key("use_bidirectional_attention"),
         "is true: every token attends to later tokens too (an encoder), so there is no causal "
         "KV cache to plan");
  }
  model.max_context =
      scope.OrDefault("max_position_embeddings", family.max_position_embeddings, 1, UINT64_MAX);

  // Qwen 2 and 3 drop sliding_window unless use_sliding_window is true.
  bool qwen_sliding = false;
  std::optional<uint64_t> qwen_window;
  if (family.pattern == PatternRule::kMaxWindowLayers) {
    qwen_sliding = scope.Bool("use_sliding_window", false);
    if (qwen_sliding) {
      qwen_window =
          scope.NullableOrDefault("sliding_window", family.sliding_window_default, 1, UINT64_MAX);
      if (!qwen_window) {
        Fail(scope.Key("sliding_window"), "is null, but use_sliding_window is true; " +
                                              scope.ClassName() +
                                              " would silently make every layer full_attention");
      }
    }
  }

  Kinds kinds;
  std::optional<std::vector<LayerType>> listed;
  if (family.reads_layer_types) listed = ReadLayerTypes(scope, num_layers);
  if (listed) {
    kinds.types = std::move(*listed);
    kinds.source = "layer_types";
  } else {
    kinds = DeriveKinds(scope, num_layers, qwen_sliding);
  }

  uint64_t window = 0, chunk = 0;
  for (size_t i = 0; i < num_layers; ++i) {
    const std::string layer_key = "layer_types[" + std::to_string(i) + "]";
    if (kinds.types[i] == LayerType::kSliding && window == 0) {
      if (family.sliding_window_default == 0) {
        Fail(scope.Key(layer_key),
             "is sliding_attention, but " + scope.ClassName() + " has no sliding_window");
      }
      if (family.pattern == PatternRule::kMaxWindowLayers) {
        if (!qwen_sliding) {
          Fail(scope.Key(layer_key), "is sliding_attention, but use_sliding_window is false, so " +
                                         scope.ClassName() + " drops sliding_window");
        }
        window = *qwen_window;
        continue;
      }
      const std::optional<uint64_t> value =
          scope.NullableOrDefault("sliding_window", family.sliding_window_default, 1, UINT64_MAX);
      if (!value) {
        Fail(scope.Key("sliding_window"), "is null, but " + KindOf(kinds, i));
      }
      window = *value;
    }
    if (kinds.types[i] == LayerType::kChunked && chunk == 0) {
      if (!family.reads_chunk) {
        Fail(scope.Key(layer_key),
             "is chunked_attention, but " + scope.ClassName() + " has no attention_chunk_size");
      }
      const std::optional<uint64_t> value =
          scope.NullableOrDefault("attention_chunk_size", 8192, 1, UINT64_MAX);
      if (!value) {
        Fail(scope.Key("attention_chunk_size"), "is null, but " + KindOf(kinds, i));
      }
      chunk = *value;
    }
  }

  LayerSpec global;
  if (family.mla) {
    const std::optional<uint64_t> rank = scope.NullableOrDefault("kv_lora_rank", 512, 1, kMaxDim);
    if (!rank)
      Fail(scope.Key("kv_lora_rank"), "is null; an MLA model caches a latent of this rank");
    const uint64_t rope = scope.OrDefault("qk_rope_head_dim", 64, 0, kMaxDim);
    global = LayerSpec::Latent(static_cast<uint32_t>(*rank + rope));
  } else {
    const uint64_t kv_heads = ReadKvHeads(scope, num_heads);
    const uint64_t head_dim = ReadHeadDim(scope, num_heads);
    global = LayerSpec::Global(static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim));
  }
  for (LayerType type : kinds.types) {
    LayerSpec spec = global;
    if (type == LayerType::kSliding) {
      spec.kind = AttentionKind::kSliding;
      spec.window = window;
    } else if (type == LayerType::kChunked) {
      spec.kind = AttentionKind::kChunked;
      spec.chunk = chunk;
    }
    model.layers.push_back(spec);
  }

  if (family.shares_kv) {
    // Gemma 3n: the last num_kv_shared_layers layers read the KV of the last earlier layer of
    // their own kind.
    const char* key = "num_kv_shared_layers";
    const uint64_t num_shared = scope.OrDefault(key, 15, 0, UINT64_MAX);
    if (num_shared >= num_layers) {
      Fail(scope.Key(key), std::to_string(num_shared) + " leaves no layer of the " +
                               std::to_string(num_layers) + " to own the shared KV");
    }
    const size_t first_shared = num_layers - num_shared;
    for (size_t i = first_shared; i < num_layers; ++i) {
      size_t j = first_shared;
      while (j > 0 && kinds.types[j - 1] != kinds.types[i]) --j;
      if (j == 0) {
        Fail(scope.Key(key), std::to_string(num_shared) + " makes layer " + std::to_string(i) +
                                 " (" + LayerTypeName(kinds.types[i]) +
                                 ") read shared KV, but no earlier layer of that kind owns any");
      }
      model.layers[i].kv_source = static_cast<int32_t>(j - 1);
    }
  }
  CheckForeignKeys(scope, kinds);
  return model;
}

void ParseText(const std::string& text, std::vector<HfDefault>* defaults, HfModel* out) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) Fail("", "is empty");
  // Two values for one key are a contradiction that Python's json (and so transformers)
  // would settle silently by keeping the last; refuse them instead.
  struct Level {
    std::set<std::string> keys;
    std::string key;
  };
  std::vector<Level> levels;
  const Json::parser_callback_t callback = [&levels](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        levels.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!levels.empty()) levels.pop_back();
        break;
      case Json::parse_event_t::key: {
        const std::string name = parsed.get<std::string>();
        if (!levels.empty()) {
          levels.back().key = name;
          if (!levels.back().keys.insert(name).second) {
            std::string path;
            for (size_t i = 0; i + 1 < levels.size(); ++i) path += levels[i].key + ".";
            Fail(path + name, "appears twice in one object; which value is meant?");
          }
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  Json root;
  try {
    root = Json::parse(text, callback);
  } catch (const Json::parse_error& error) {
    std::string what = error.what();
    const size_t start = what.find("parse error");
    if (start != std::string::npos) what = what.substr(start);
    // The excerpt of the input ("last read: ...") may hold control or invalid bytes: keep the
    // message one printable line.
    for (char& c : what) {
      const unsigned char byte = static_cast<unsigned char>(c);
      if (byte < 0x20 || byte >= 0x7f) c = '?';
    }
    Fail("", "malformed JSON: " + what);
  }
  if (!root.is_object()) Fail("", "the top level is " + TypeName(root) + ", not a JSON object");
  const auto model_type_it = root.find("model_type");
  if (model_type_it == root.end()) {
    Fail("model_type", "is missing; it names the transformers family that reads the file");
  }
  if (!model_type_it->is_string()) {
    Fail("model_type", Mistyped(*model_type_it, "a name"));
  }
  const std::string model_type = model_type_it->get<std::string>();
  const Json* object = &root;
  std::string prefix;
  std::string text_model_type = model_type;
  for (const Wrapper& wrapper : kWrappers) {
    if (model_type != wrapper.model_type) continue;
    const auto it = root.find("text_config");
    if (it == root.end() || it->is_null()) {
      Fail("text_config", std::string("is missing; ") + wrapper.model_type +
                              " keeps its language model's configuration there (its top-level "
                              "keys are not read)");
    }
    if (!it->is_object()) {
      Fail("text_config", Mistyped(*it, "an object"));
    }
    object = &*it;
    prefix = "text_config.";
    text_model_type = wrapper.text_model_type;
    const auto nested = it->find("model_type");
    if (nested != it->end() && *nested != Json(text_model_type)) {
      Fail("text_config.model_type",
           Show(*nested) + " is not " + text_model_type + ", which " + model_type + " wraps");
    }
  }
  const Family* family = FindFamily(text_model_type);
  if (family == nullptr) {
    std::string known;
    for (const std::string& name : KnownModelTypes()) known += (known.empty() ? "" : ", ") + name;
    Fail("model_type", "'" + model_type + "' is not a family kvring-plan reads (known: " + known +
                           "; docs/configs.md)");
  }
  *out = Interpret(Scope(*object, prefix, *family, defaults));
}

}  // namespace

std::vector<std::string> KnownModelTypes() {
  std::vector<std::string> names;
  for (const Family& family : kFamilies) names.push_back(family.model_type);
  for (const Wrapper& wrapper : kWrappers) names.push_back(wrapper.model_type);
  return names;
}

Expected<HfModel> ParseHfConfig(const std::string& json_text, const std::string& file_name) {
  HfModel model;
  std::vector<HfDefault> defaults;
  try {
    ParseText(json_text, &defaults, &model);
  } catch (const ConfigError& error) {
    return Error{error.key.empty() ? "config" : error.key,
                 file_name + ": " + (error.key.empty() ? "" : error.key + ": ") + error.what};
  }
  model.defaults = std::move(defaults);
  return model;
}

Expected<HfModel> ReadHfConfig(const std::string& path) {
  const auto fail = [&](const std::string& what) { return Error{"config", path + ": " + what}; };
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return fail(std::string("cannot open: ") + std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) return fail("is a directory, not a config.json file");
  if (!S_ISREG(info.st_mode)) return fail("is not a regular file");
  if (static_cast<uint64_t>(info.st_size) > kMaxFileBytes) {
    return fail("is larger than 64 MiB; a config.json holds a few KiB");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) return fail(std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return fail("cannot be read");
  return ParseHfConfig(text.str(), path);
}

}  // namespace tools
}  // namespace kvring
