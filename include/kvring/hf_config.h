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
#include "kvring/hf_config/bespoke.h"
#include "kvring/hf_config/families.h"
#include "kvring/hf_config/gemma4.h"
#include "kvring/hf_config/gpt.h"
#include "kvring/hf_config/hybrid.h"
#include "kvring/hf_config/kimi_linear.h"
#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/mamba.h"
#include "kvring/hf_config/mimo_v2.h"
#include "kvring/hf_config/mla.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/hf_config/ssm.h"
#include "kvring/hf_config/wrappers.h"
#include "kvring/hf_config/zamba.h"
#include "kvring/layer_plan.h"

namespace kvring {

// Returns the model_type values ParseHfConfig understands, in a stable order.
inline std::vector<std::string> KnownModelTypes() {
  std::vector<std::string> names;
  for (const detail::hf::Family& family : detail::hf::kFamilies) names.push_back(family.model_type);
  for (const detail::hf::Wrapper& wrapper : detail::hf::kWrappers) {
    // A wrapper of a family refused by name (kUnplanned) is not one kvring reads.
    if (detail::hf::FindFamily(wrapper.text_model_type) != nullptr) {
      names.push_back(wrapper.model_type);
    }
  }
  return names;
}

namespace detail {
namespace hf {

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

// Returns the object that holds `wrapper`'s text model in `root` (its text_config, or `root`
// itself for an older flat file), with its key prefix in *prefix and its family's model_type in
// *text_model_type; nullptr after a failure.
inline const Json* WrappedText(const Json& root, const Wrapper& wrapper, std::string* prefix,
                               std::string* text_model_type, Failure* failure) {
  // Where text_config sits: at the top, or in the object `outer` names (Qwen Omni's thinker).
  const Json* holder = &root;
  if (wrapper.outer != nullptr) {
    const auto outer = root.find(wrapper.outer);
    if (outer == root.end() || outer->is_null()) {
      failure->Fail(wrapper.outer, std::string("is missing; ") + wrapper.model_type +
                                       " keeps its language model's configuration in its "
                                       "text_config");
      return nullptr;
    }
    if (!outer->is_object()) {
      failure->Fail(wrapper.outer, Mistyped(*outer, "an object"));
      return nullptr;
    }
    holder = &*outer;
  }
  const std::string key =
      (wrapper.outer == nullptr ? "" : std::string(wrapper.outer) + ".") + "text_config";
  *text_model_type = wrapper.text_model_type;
  const auto it = holder->find("text_config");
  if ((it == holder->end() || it->is_null()) && wrapper.flat) return &root;  // an older file
  if (it == holder->end() || it->is_null()) {
    failure->Fail(key, std::string("is missing; ") + wrapper.model_type +
                           " keeps its language model's configuration there (its top-level keys "
                           "are not read)");
    return nullptr;
  }
  if (!it->is_object()) {
    failure->Fail(key, Mistyped(*it, "an object"));
    return nullptr;
  }
  *prefix = key + ".";
  const auto nested = it->find("model_type");
  if (wrapper.typed && (nested == it->end() || nested->is_null())) {
    failure->Fail(key + ".model_type", std::string("is missing; ") + wrapper.model_type +
                                           " has no default language model family: the file "
                                           "must name it (as transformers requires)");
    return nullptr;
  }
  if (wrapper.any_text && nested != it->end()) {
    if (!nested->is_string()) {
      failure->Fail(key + ".model_type", Mistyped(*nested, "a name"));
      return nullptr;
    }
    *text_model_type = nested->get<std::string>();
    if (const Unplanned* unplanned = FindUnplanned(*text_model_type)) {
      failure->Fail(key + ".model_type", UnplannedMessage(*unplanned));
      return nullptr;
    }
    if (FindFamily(*text_model_type) == nullptr) {
      failure->Fail(key + ".model_type", "'" + Printable(*text_model_type) + "' (in " +
                                             wrapper.model_type +
                                             ") is not a family kvring-plan reads "
                                             "(docs/configs.md)");
      return nullptr;
    }
  } else if (nested != it->end() && *nested != Json(*text_model_type)) {
    failure->Fail(key + ".model_type", Show(*nested) + " is not " + *text_model_type + ", which " +
                                           wrapper.model_type + " wraps");
    return nullptr;
  }
  return &*it;
}

// Returns the object whose keys describe the text model (the top level, or text_config of a
// multimodal wrapper), with its key prefix, family and wrapper (nullptr: none), or nullptr
// after a failure.
inline const Json* TextModel(const Json& root, std::string* prefix, const Family** family,
                             const Wrapper** found, Failure* failure) {
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
    object = WrappedText(root, wrapper, prefix, &text_model_type, failure);
    if (object == nullptr) return nullptr;
    if (object != &root) *found = &wrapper;
    break;
  }
  if (const Unplanned* unplanned = FindUnplanned(text_model_type)) {
    failure->Fail("model_type", UnplannedMessage(*unplanned));
    return nullptr;
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

// Puts `wrapper`'s own text defaults under the missing keys of *text (listed in *defaults);
// false after a failure (a missing key whose default is one checkpoint's count).
inline bool FillTextDefaults(const Wrapper& wrapper, const std::string& prefix, Json* text,
                             std::vector<HfDefault>* defaults, Failure* failure) {
  for (const TextDefault* entry = wrapper.text_defaults; entry->key != nullptr; ++entry) {
    if (text->contains(entry->key)) continue;
    const std::string value = std::to_string(entry->value);
    if (entry->count) {
      failure->Fail(prefix + entry->key, std::string("is missing; ") + wrapper.class_name +
                                             "'s default " + value +
                                             " is one checkpoint's count, not a rule (write the "
                                             "count)");
      return false;
    }
    (*text)[entry->key] = entry->value;
    defaults->push_back({prefix + entry->key, value});
  }
  return true;
}

inline void ParseText(const std::string& text, const HfReadOptions& options,
                      std::vector<HfDefault>* defaults, HfModel* out, Failure* failure) {
  if (options.tensor_parallel == 0) {
    failure->Fail("tensor_parallel", "0 is invalid: one rank at least (HfReadOptions)");
    return;
  }
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    failure->Fail("", "is empty");
    return;
  }
  Json root;
  ParseJson(text, &root, failure);
  if (failure->Failed()) return;
  std::string prefix;
  const Family* family = nullptr;
  const Wrapper* wrapper = nullptr;
  const Json* object = TextModel(root, &prefix, &family, &wrapper, failure);
  if (object == nullptr) return;
  Json filled;  // text_config with the wrapper class's own defaults under its missing keys
  if (wrapper != nullptr && wrapper->text_defaults != nullptr) {
    filled = *object;
    if (!FillTextDefaults(*wrapper, prefix, &filled, defaults, failure)) return;
    object = &filled;
  }
  const auto bidirectional = object->find("use_bidirectional_attention");
  if (wrapper != nullptr && wrapper->prefix_lm && bidirectional != object->end() &&
      (bidirectional->is_boolean() || bidirectional->is_null())) {
    if (object != &filled) filled = *object;
    filled.erase("use_bidirectional_attention");  // the class's prefix mask, not an encoder
    object = &filled;
  }
  const Scope scope(*object, prefix, *family, options, defaults, failure);
  switch (family->reader) {
    case Reader::kStandard:
      ReadStandard(scope, out);
      break;
    case Reader::kGemma4:
      ReadGemma4(scope, out);
      break;
    case Reader::kMla:
      ReadMla(scope, out);
      break;
    case Reader::kGatedDeltaNet:
      ReadGatedDeltaNetHybrid(scope, out);
      break;
    case Reader::kMamba2:
      ReadMamba2Hybrid(scope, out);
      break;
    case Reader::kShortConv:
      ReadShortConvHybrid(scope, out);
      break;
    case Reader::kJamba:
      ReadJamba(scope, out);
      break;
    case Reader::kFalconH1:
      ReadFalconH1(scope, out);
      break;
    case Reader::kLightning:
    case Reader::kLightningRemote:
      ReadLightningHybrid(scope, out);
      break;
    case Reader::kOlmoHybrid:
      ReadOlmoHybrid(scope, out);
      break;
    case Reader::kLaguna:
      ReadLaguna(scope, out);
      break;
    case Reader::kRecurrentGemma:
      ReadRecurrentGemma(scope, out);
      break;
    case Reader::kXlstm:
      ReadXlstm(scope, out);
      break;
    case Reader::kStateSpace:
      ReadStateSpace(scope, out);
      break;
    case Reader::kZamba:
      ReadZamba(scope, out);
      break;
    case Reader::kZamba2:
      ReadZamba2(scope, out);
      break;
    case Reader::kKimiLinear:
      ReadKimiLinear(scope, out);
      break;
    case Reader::kMimoV2:
      ReadMimoV2(scope, out);
      break;
    case Reader::kGpt:
      ReadGpt(scope, out);
      break;
    case Reader::kJetMoe:
      ReadJetMoe(scope, out);
      break;
    case Reader::kModernBertDecoder:
      ReadModernBertDecoder(scope, out);
      break;
    case Reader::kRwkv:
      ReadRwkv(scope, out);
      break;
    case Reader::kHrmText:
      ReadHrmText(scope, out);
      break;
    case Reader::kKyutaiSpeech:
      ReadKyutaiSpeechToText(scope, out);
      break;
    case Reader::kLongcatFlash:
      ReadLongcatFlash(scope, out);
      break;
  }
  out->tensor_parallel = options.tensor_parallel;
}

}  // namespace hf
}  // namespace detail

// Returns the model that the JSON text `json_text` describes, or an Error whose field is the
// offending key (for example "text_config.layer_types[3]", or "config" for the whole file)
// and whose message is one line: "<file_name>: <key>: <what is wrong>". `file_name` is used
// in messages only. `options`: how MLA layers are planned, and the tensor-parallel ranks whose
// share of each recurrent state the layers hold. Allocates; cost O(size of the text + layers).
inline Expected<HfModel> ParseHfConfig(const std::string& json_text, const std::string& file_name,
                                       const HfReadOptions& options = HfReadOptions()) {
  HfModel model;
  std::vector<HfDefault> defaults;
  detail::hf::Failure failure;
  detail::hf::ParseText(json_text, options, &defaults, &model, &failure);
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
inline Expected<HfModel> ReadHfConfig(const std::string& path,
                                      const HfReadOptions& options = HfReadOptions()) {
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
  return ParseHfConfig(text, path, options);
}

}  // namespace kvring

#endif  // KVRING_HF_CONFIG_H_
