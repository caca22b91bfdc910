// kvring/hf_config.h: reads a Hugging Face config.json into kvring LayerSpecs, as the
// transformers configuration class of the file's model_type reads it, so that an engine gets
// the plan of any family kvring-plan reads (docs/configs.md lists them and the keys). Refuses,
// with an error naming the file and the key, what it cannot interpret; never guesses an
// all-global model. Optional: needs nlohmann-json (3.10 or later), and is not part of
// kvring/kvring.h. Throws nothing; builds with -fno-exceptions.
#ifndef KVRING_HF_CONFIG_H_
#define KVRING_HF_CONFIG_H_

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/hf_config/families.h"
#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {

// The attention of one model read from its config.json.
struct HfModel {
  std::string model_type;            // the text model's family, e.g. "gemma3_text"
  std::string class_name;            // transformers' configuration class, e.g. "Gemma3TextConfig"
  uint64_t max_context = 0;          // max_position_embeddings (or the class default)
  uint32_t num_attention_heads = 0;  // query heads
  std::vector<LayerSpec> layers;
  std::vector<HfDefault> defaults;  // class defaults applied, in the order they were read

  // Returns a builder with the model's layers and max_context as the context: set the batch,
  // rollback, formats and layout, then Build(). Allocates.
  LayerPlan::Builder PlanBuilder() const {
    LayerPlan::Builder builder;
    for (const LayerSpec& spec : layers) builder.AddLayer(spec);
    builder.SetContext(max_context);
    return builder;
  }
};

// Returns the model_type values ParseHfConfig understands, in a stable order.
inline std::vector<std::string> KnownModelTypes() {
  std::vector<std::string> names;
  for (const detail::hf::Family& family : detail::hf::kFamilies) names.push_back(family.model_type);
  for (const detail::hf::Wrapper& wrapper : detail::hf::kWrappers) {
    names.push_back(wrapper.model_type);
  }
  return names;
}

namespace detail {
namespace hf {

// The window and chunk of the model's sliding and chunked layers (0: none), or a failure.
struct Spans {
  uint64_t window = 0;
  uint64_t chunk = 0;
};

// `qwen_window`: for a family of PatternRule::kMaxWindowLayers, its sliding_window, set
// exactly when use_sliding_window is true (the caller refuses a null one before this).
inline Spans ReadSpans(const Scope& scope, const Kinds& kinds,
                       const std::optional<uint64_t>& qwen_window) {
  const Family& family = scope.family();
  Spans spans;
  for (size_t i = 0; i < kinds.types.size() && !scope.Failed(); ++i) {
    const std::string layer_key = "layer_types[" + std::to_string(i) + "]";
    if (kinds.types[i] == LayerType::kSliding && spans.window == 0) {
      if (family.sliding_window_default == 0) {
        scope.Fail(layer_key,
                   "is sliding_attention, but " + scope.ClassName() + " has no sliding_window");
      } else if (family.pattern == PatternRule::kMaxWindowLayers) {
        if (!qwen_window) {
          scope.Fail(layer_key, "is sliding_attention, but use_sliding_window is false, so " +
                                    scope.ClassName() + " drops sliding_window");
        } else {
          spans.window = *qwen_window;
        }
      } else {
        const std::optional<uint64_t> value =
            scope.NullableOrDefault("sliding_window", family.sliding_window_default, 1, UINT64_MAX);
        if (!value) {
          scope.Fail("sliding_window", "is null, but " + KindOf(kinds, i));
        } else {
          spans.window = *value;
        }
      }
      continue;
    }
    if (kinds.types[i] == LayerType::kChunked && spans.chunk == 0) {
      if (!family.reads_chunk) {
        scope.Fail(layer_key, "is chunked_attention, but " + scope.ClassName() +
                                  " has no attention_chunk_size");
        continue;
      }
      const std::optional<uint64_t> value =
          scope.NullableOrDefault("attention_chunk_size", 8192, 1, UINT64_MAX);
      if (!value) {
        scope.Fail("attention_chunk_size", "is null, but " + KindOf(kinds, i));
      } else {
        spans.chunk = *value;
      }
    }
  }
  return spans;
}

// Gemma 3n: the last num_kv_shared_layers layers read the KV of the last earlier layer of
// their own kind.
inline void ReadSharedKV(const Scope& scope, const Kinds& kinds, HfModel* model) {
  const char* key = "num_kv_shared_layers";
  const uint64_t num_layers = kinds.types.size();
  const uint64_t num_shared = scope.OrDefault(key, 15, 0, UINT64_MAX);
  if (num_shared >= num_layers) {
    scope.Fail(key, std::to_string(num_shared) + " leaves no layer of the " +
                        std::to_string(num_layers) + " to own the shared KV");
    return;
  }
  const size_t first_shared = num_layers - num_shared;
  for (size_t i = first_shared; i < num_layers; ++i) {
    size_t j = first_shared;
    while (j > 0 && kinds.types[j - 1] != kinds.types[i]) --j;
    if (j == 0) {
      scope.Fail(key, std::to_string(num_shared) + " makes layer " + std::to_string(i) + " (" +
                          LayerTypeName(kinds.types[i]) +
                          ") read shared KV, but no earlier layer of that kind owns any");
      return;
    }
    model->layers[i].kv_source = static_cast<int32_t>(j - 1);
  }
}

// Returns the spec every layer of the model starts from (its K/V shape), a global one.
inline LayerSpec ReadShape(const Scope& scope, uint64_t num_heads) {
  if (scope.family().mla) {
    const std::optional<uint64_t> rank = scope.NullableOrDefault("kv_lora_rank", 512, 1, kMaxDim);
    if (!rank) {
      scope.Fail("kv_lora_rank", "is null; an MLA model caches a latent of this rank");
      return LayerSpec();
    }
    const uint64_t rope = scope.OrDefault("qk_rope_head_dim", 64, 0, kMaxDim);
    return LayerSpec::Latent(static_cast<uint32_t>(*rank + rope));
  }
  const uint64_t kv_heads = ReadKvHeads(scope, num_heads);
  const uint64_t head_dim = ReadHeadDim(scope, num_heads);
  return LayerSpec::Global(static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim));
}

// Reads the model of `scope` into *model; the first failure is in the scope's Failure.
inline void Interpret(const Scope& scope, HfModel* model) {
  const Family& family = scope.family();
  model->model_type = family.model_type;
  model->class_name = family.class_name;
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = scope.Required("num_attention_heads", 1, kMaxDim);
  model->num_attention_heads = static_cast<uint32_t>(num_heads);
  if (scope.IsSet("use_bidirectional_attention") &&
      scope.Bool("use_bidirectional_attention", false)) {
    scope.Fail("use_bidirectional_attention",
               "is true: every token attends to later tokens too (an encoder), so there is no "
               "causal KV cache to plan");
  }
  model->max_context =
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
        scope.Fail("sliding_window", "is null, but use_sliding_window is true; " +
                                         scope.ClassName() +
                                         " would silently make every layer full_attention");
      }
    }
  }
  if (scope.Failed()) return;
  Kinds kinds;
  std::optional<std::vector<LayerType>> listed;
  if (family.reads_layer_types) listed = ReadLayerTypes(scope, num_layers);
  if (listed) {
    kinds.types = std::move(*listed);
    kinds.source = "layer_types";
  } else {
    kinds = DeriveKinds(scope, num_layers, qwen_sliding);
  }
  if (scope.Failed()) return;
  const Spans spans = ReadSpans(scope, kinds, qwen_window);
  const LayerSpec shape = ReadShape(scope, num_heads);
  if (scope.Failed()) return;
  for (LayerType type : kinds.types) {
    LayerSpec spec = shape;
    if (type == LayerType::kSliding) {
      spec.kind = AttentionKind::kSliding;
      spec.window = spans.window;
    } else if (type == LayerType::kChunked) {
      spec.kind = AttentionKind::kChunked;
      spec.chunk = spans.chunk;
    }
    model->layers.push_back(spec);
  }
  if (family.shares_kv) ReadSharedKV(scope, kinds, model);
  if (scope.Failed()) return;
  CheckForeignKeys(scope, kinds);
}

// nlohmann-json's DOM parser, keeping a syntax error's message instead of throwing it.
class DomParser : public nlohmann::detail::json_sax_dom_callback_parser<Json> {
 public:
  DomParser(Json& result, Json::parser_callback_t on_event)
      : json_sax_dom_callback_parser(result, std::move(on_event), /*allow_exceptions_=*/false) {}
  template <class Exception>
  bool parse_error(std::size_t at, const std::string& token, const Exception& exception) {
    if (message_.empty()) message_ = exception.what();
    return json_sax_dom_callback_parser::parse_error(at, token, exception);
  }
  const std::string& Message() const { return message_; }

 private:
  std::string message_;
};

// Parses `text` into *root, refusing duplicate keys (Python's json, and so transformers,
// would keep the last silently); records the first error in *failure.
inline void ParseJson(const std::string& text, Json* root, Failure* failure) {
  struct Level {
    std::set<std::string> keys;
    std::string key;
  };
  std::vector<Level> levels;
  const Json::parser_callback_t callback = [&levels, failure](int, Json::parse_event_t event,
                                                              Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      levels.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!levels.empty()) levels.pop_back();
    } else if (event == Json::parse_event_t::key && !levels.empty()) {
      const std::string name = parsed.get<std::string>();
      levels.back().key = name;
      if (!levels.back().keys.insert(name).second) {
        std::string path;
        for (size_t i = 0; i + 1 < levels.size(); ++i) path += Printable(levels[i].key) + ".";
        failure->Fail(path + Printable(name), "appears twice in one object; which value is meant?");
      }
    }
    return true;
  };
  DomParser parser(*root, callback);
  (void)Json::sax_parse(text, &parser);
  if (parser.Message().empty()) return;
  std::string what = parser.Message();
  const size_t start = what.find("parse error");
  if (start != std::string::npos) what = what.substr(start);
  // The excerpt of the input ("last read: ...") may hold control or invalid bytes: keep the
  // message one printable line.
  for (char& c : what) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) c = '?';
  }
  failure->Fail("", "malformed JSON: " + what);
}

// Returns the object whose keys describe the text model (the top level, or text_config of a
// multimodal wrapper), with its key prefix and family, or nullptr after a failure.
inline const Json* TextModel(const Json& root, std::string* prefix, const Family** family,
                             Failure* failure) {
  if (!root.is_object()) {
    failure->Fail("", "the top level is " + TypeName(root) + ", not a JSON object");
    return nullptr;
  }
  const auto model_type_it = root.find("model_type");
  if (model_type_it == root.end()) {
    failure->Fail("model_type", "is missing; it names the transformers family that reads the file");
    return nullptr;
  }
  if (!model_type_it->is_string()) {
    failure->Fail("model_type", Mistyped(*model_type_it, "a name"));
    return nullptr;
  }
  const std::string model_type = model_type_it->get<std::string>();
  const Json* object = &root;
  std::string text_model_type = model_type;
  for (const Wrapper& wrapper : kWrappers) {
    if (model_type != wrapper.model_type) continue;
    const auto it = root.find("text_config");
    if (it == root.end() || it->is_null()) {
      failure->Fail("text_config", std::string("is missing; ") + wrapper.model_type +
                                       " keeps its language model's configuration there (its "
                                       "top-level keys are not read)");
      return nullptr;
    }
    if (!it->is_object()) {
      failure->Fail("text_config", Mistyped(*it, "an object"));
      return nullptr;
    }
    object = &*it;
    *prefix = "text_config.";
    text_model_type = wrapper.text_model_type;
    const auto nested = it->find("model_type");
    if (nested != it->end() && *nested != Json(text_model_type)) {
      failure->Fail("text_config.model_type", Show(*nested) + " is not " + text_model_type +
                                                  ", which " + model_type + " wraps");
      return nullptr;
    }
  }
  *family = FindFamily(text_model_type);
  if (*family == nullptr) {
    std::string known;
    for (const std::string& name : KnownModelTypes()) known += (known.empty() ? "" : ", ") + name;
    failure->Fail("model_type", "'" + Printable(model_type) +
                                    "' is not a family kvring-plan reads (known: " + known +
                                    "; docs/configs.md)");
    return nullptr;
  }
  return object;
}

inline void ParseText(const std::string& text, std::vector<HfDefault>* defaults, HfModel* out,
                      Failure* failure) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    failure->Fail("", "is empty");
    return;
  }
  Json root;
  ParseJson(text, &root, failure);
  if (failure->Failed()) return;
  std::string prefix;
  const Family* family = nullptr;
  const Json* object = TextModel(root, &prefix, &family, failure);
  if (object == nullptr) return;
  Interpret(Scope(*object, prefix, *family, defaults, failure), out);
}

}  // namespace hf
}  // namespace detail

// Returns the model that the JSON text `json_text` describes, or an Error whose field is the
// offending key (for example "text_config.layer_types[3]", or "config" for the whole file)
// and whose message is one line: "<file_name>: <key>: <what is wrong>". `file_name` is used
// in messages only. Allocates; cost O(size of the text + layers).
inline Expected<HfModel> ParseHfConfig(const std::string& json_text, const std::string& file_name) {
  HfModel model;
  std::vector<HfDefault> defaults;
  detail::hf::Failure failure;
  detail::hf::ParseText(json_text, &defaults, &model, &failure);
  if (failure.Failed()) {
    const std::string& key = failure.Key();
    return Error{key.empty() ? "config" : key,
                 file_name + ": " + (key.empty() ? "" : key + ": ") + failure.What()};
  }
  model.defaults = std::move(defaults);
  return model;
}

// Reads the file at `path` (at most 64 MiB) and returns ParseHfConfig of its text, or an Error
// naming the file when it cannot be read (missing, a directory, unreadable).
inline Expected<HfModel> ReadHfConfig(const std::string& path) {
  const auto fail = [&](const std::string& what) { return Error{"config", path + ": " + what}; };
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return fail(std::string("cannot open: ") + std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) return fail("is a directory, not a config.json file");
  if (!S_ISREG(info.st_mode)) return fail("is not a regular file");
  if (static_cast<uint64_t>(info.st_size) > detail::hf::kMaxFileBytes) {
    return fail("is larger than 64 MiB; a config.json holds a few KiB");
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return fail(std::string("cannot open: ") + std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    text.append(buffer, read);
    if (text.size() > detail::hf::kMaxFileBytes) break;
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return fail("cannot be read");
  if (text.size() > detail::hf::kMaxFileBytes) {
    return fail("is larger than 64 MiB; a config.json holds a few KiB");
  }
  return ParseHfConfig(text, path);
}

}  // namespace kvring

#endif  // KVRING_HF_CONFIG_H_
