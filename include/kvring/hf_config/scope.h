// kvring/hf_config/scope.h: one JSON object of a config.json being read (the top level, or
// text_config) with the family that reads it: typed reads of its keys, the class defaults
// applied, and the first error met. Part of kvring/hf_config.h; needs nlohmann-json. Throws
// nothing: a read that fails records the first error and returns a harmless value, and the
// reader stops at its next check.
#ifndef KVRING_HF_CONFIG_SCOPE_H_
#define KVRING_HF_CONFIG_SCOPE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvring/hf_config/families.h"

namespace kvring {

// A class default that the file left out and transformers would apply, e.g.
// {"max_position_embeddings", "131072"}.
struct HfDefault {
  std::string key;  // with its text_config. prefix when nested
  std::string value;
};

// How MLA layers are planned (kvring-plan --mla). kLatent: what serving engines store (vLLM,
// SGLang, llama.cpp), one latent of kv_lora_rank + qk_rope_head_dim elements per position.
// kExpanded: what transformers' own cache holds, per query head a K of qk_nope_head_dim +
// qk_rope_head_dim and a V of v_head_dim elements per position.
enum class MlaCache { kLatent, kExpanded };

// How ParseHfConfig / ReadHfConfig read a file.
struct HfReadOptions {
  MlaCache mla = MlaCache::kLatent;
  // The ranks a tensor-parallel engine splits the model across: each recurrent layer's state
  // is one rank's share, split as vLLM splits the layer (heads and conv channels; a Mamba2
  // layer's single group replicated on every rank), and a file whose heads or channels do not
  // split refused naming the key. Attention layers are read whole (kvring-plan splits their
  // KV heads: --tensor-parallel).
  uint64_t tensor_parallel = 1;
};

namespace detail {
namespace hf {

using Json = nlohmann::json;

// The first error of a reading: the key (with its prefix; empty for the whole file) and what is
// wrong. Later errors are not recorded: they may follow from the first.
class Failure {
 public:
  void Fail(std::string key, std::string what) {
    if (failed_) return;
    failed_ = true;
    key_ = std::move(key);
    what_ = std::move(what);
  }
  bool Failed() const { return failed_; }
  const std::string& Key() const { return key_; }
  const std::string& What() const { return what_; }

 private:
  bool failed_ = false;
  std::string key_;
  std::string what_;
};

// Returns a short JSON rendering of `value` for messages (escaped, so always one line).
inline std::string Show(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 48) text = text.substr(0, 45) + "...";
  return text;
}

// Returns `text` (a key or name read from the file) as one printable line: JSON's escapes for
// control characters (a key may hold "\n"), without the quotes.
inline std::string Printable(const std::string& text) {
  const std::string quoted = Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string printable;
  for (size_t i = 1; i + 1 < quoted.size(); ++i) {
    printable += quoted[i] == '\x7f' ? std::string("\\u007f") : std::string(1, quoted[i]);
  }
  return printable;
}

inline std::string TypeName(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number with a fraction or exponent";
  return std::string(value.is_array() || value.is_object() ? "an " : "a ") + value.type_name();
}

// Returns "<value> is <its type>, not <wanted>" (or "is null, not <wanted>").
inline std::string Mistyped(const Json& value, const std::string& wanted) {
  if (value.is_null()) return "is null, not " + wanted;
  return Show(value) + " is " + TypeName(value) + ", not " + wanted;
}

// One JSON object of the file and what was read from it.
class Scope {
 public:
  Scope(const Json& object, std::string prefix, const Family& family, const HfReadOptions& options,
        std::vector<HfDefault>* defaults, Failure* failure)
      : object_(object),
        prefix_(std::move(prefix)),
        family_(family),
        options_(options),
        defaults_(defaults),
        failure_(failure) {}

  // Returns the scope of `object`, the value at `key` of this one (a nested object such as
  // Kimi Linear's linear_attn_config), read by the same family into the same defaults and
  // failure.
  Scope Nested(const Json& object, const std::string& key) const {
    return Scope(object, Key(key) + ".", family_, options_, defaults_, failure_);
  }

  const Family& family() const { return family_; }
  const HfReadOptions& options() const { return options_; }
  std::string Key(const std::string& key) const { return prefix_ + key; }
  std::string ClassName() const { return family_.class_name; }

  // Records that `key` (without the prefix) is wrong, unless an error came first.
  void Fail(const std::string& key, std::string what) const {
    failure_->Fail(Key(key), std::move(what));
  }
  bool Failed() const { return failure_->Failed(); }

  // Returns the value at `key`, or nullptr when the key is absent.
  const Json* Find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  bool IsSet(const char* key) const {
    const Json* value = Find(key);
    return value != nullptr && !value->is_null();
  }

  // Returns `value` (found at `key`) as an integer in [min, max]; `min` after a failure.
  uint64_t ToUInt(const std::string& key, const Json& value, uint64_t min, uint64_t max) const {
    if (!value.is_number_integer()) {
      Fail(key, Mistyped(value, "an integer"));
      return min;
    }
    if (!value.is_number_unsigned()) {
      Fail(key, Show(value) + " is negative");
      return min;
    }
    const uint64_t number = value.get<uint64_t>();
    if (number < min) {
      Fail(key, Show(value) + " is invalid: it must be at least " + std::to_string(min));
      return min;
    }
    if (number > max) {
      Fail(key, Show(value) + " is too large (at most " + std::to_string(max) + ")");
      return min;
    }
    return number;
  }

  // Returns the integer at `key`; absent or null is refused ("missing head counts").
  uint64_t Required(const char* key, uint64_t min, uint64_t max) const {
    const Json* value = Find(key);
    if (value == nullptr) {
      Fail(key, "is missing; kvring-plan does not guess a model's size (" + ClassName() +
                    "'s default describes one checkpoint only)");
      return min;
    }
    if (value->is_null()) {
      Fail(key, "is null; the model needs a number");
      return min;
    }
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
      Fail(key, "is null; " + ClassName() + " needs a number here");
      return min;
    }
    return ToUInt(key, *value, min, max);
  }

  // Returns the number (integer or not) at `key`, in (0, max], or the class default `fallback`
  // when the key is absent (and records it); null is refused.
  double PositiveOrDefault(const char* key, double fallback, double max) const {
    const Json* value = Find(key);
    if (value == nullptr) {
      Record(key, Show(Json(fallback)));
      return fallback;
    }
    if (!value->is_number()) {
      Fail(key, Mistyped(*value, "a number"));
      return fallback;
    }
    const double number = value->get<double>();
    if (!(number > 0 && number <= max)) {
      Fail(key, Show(*value) + " is out of range (above 0, at most " + Show(Json(max)) + ")");
      return fallback;
    }
    return number;
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

  // Returns the list at `key` when it holds one entry per layer, nullptr when the key is
  // absent or null; a value that is not a list, or of another length, fails (nullptr too).
  const Json* LayerList(const char* key, uint64_t num_layers) const {
    const Json* value = Find(key);
    if (value == nullptr || value->is_null()) return nullptr;
    if (!value->is_array()) {
      Fail(key, Mistyped(*value, "a list"));
      return nullptr;
    }
    if (value->size() != num_layers) {
      Fail(key, "has " + std::to_string(value->size()) + " entries, but num_hidden_layers is " +
                    std::to_string(num_layers));
      return nullptr;
    }
    return value;
  }

  // Returns, for each of `num_layers` layers, whether the list of 0-based layer indices at `key`
  // names it; nullopt when the key is absent or null, or after a failure. An entry that is not
  // the index of a layer fails at key[i]: one past the last layer too, which transformers would
  // silently ignore.
  std::optional<std::vector<bool>> LayerIndices(const char* key, uint64_t num_layers) const {
    const Json* list = Find(key);
    if (list == nullptr || list->is_null()) return std::nullopt;
    if (!list->is_array()) {
      Fail(key, Mistyped(*list, "a list of layer indices"));
      return std::nullopt;
    }
    std::vector<bool> named(num_layers, false);
    for (size_t i = 0; i < list->size(); ++i) {
      const uint64_t index =
          ToUInt(std::string(key) + "[" + std::to_string(i) + "]", (*list)[i], 0, num_layers - 1);
      if (Failed()) return std::nullopt;
      named[index] = true;
    }
    return named;
  }

  // Returns, for each entry of `list` (the per-layer list found at `key`), whether it is `yes`;
  // an entry that is neither `yes` nor `no` fails at key[i], "<entry> is not <choices>" (the
  // entries after it stay false).
  std::vector<bool> LayerChoices(const std::string& key, const Json& list, const Json& yes,
                                 const Json& no, const std::string& choices) const {
    std::vector<bool> chosen(list.size(), false);
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& entry = list[i];
      chosen[i] = entry == yes;
      if (!chosen[i] && entry != no) {
        Fail(key + "[" + std::to_string(i) + "]", Show(entry) + " is not " + choices);
        return chosen;
      }
    }
    return chosen;
  }

  // Returns the boolean at `key`, or `fallback` when it is absent.
  bool Bool(const char* key, bool fallback) const {
    const Json* value = Find(key);
    if (value == nullptr) {
      Record(key, fallback ? "true" : "false");
      return fallback;
    }
    if (!value->is_boolean()) {
      Fail(key, Mistyped(*value, "true or false"));
      return fallback;
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
  const HfReadOptions& options_;
  std::vector<HfDefault>* defaults_;
  Failure* failure_;
};

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_SCOPE_H_
