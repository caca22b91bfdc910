// tools/hf_config.h: reads a Hugging Face config.json into kvring LayerSpecs, as the
// transformers library's configuration class of the file's model_type reads it.
// Use it for kvring-plan --config; docs/configs.md lists the families and keys understood.
// Refuses (with an error naming the file and the key) what it cannot interpret; never guesses
// an all-global model. Tool code: uses nlohmann-json inside, and is not a kvring header.
#ifndef KVRING_TOOLS_HF_CONFIG_H_
#define KVRING_TOOLS_HF_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvring/base.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace tools {

// A class default that the file left out and transformers would apply, e.g.
// {"max_position_embeddings", "131072"}.
struct HfDefault {
  std::string key;  // with its text_config. prefix when nested
  std::string value;
};

// The attention of one model read from its config.json.
struct HfModel {
  std::string model_type;            // the text model's family, e.g. "gemma3_text"
  std::string class_name;            // transformers' configuration class, e.g. "Gemma3TextConfig"
  uint64_t max_context = 0;          // max_position_embeddings (or the class default)
  uint32_t num_attention_heads = 0;  // query heads, for the tensor-parallel check
  std::vector<LayerSpec> layers;
  std::vector<HfDefault> defaults;  // class defaults applied, in the order they were read
};

// Returns the model that the JSON text `json_text` describes, or an Error whose field is the
// offending key (for example "text_config.layer_types[3]") and whose message is one line:
// "<file_name>: <key>: <what is wrong>". `file_name` is used in messages only.
// Allocates; cost O(size of the text + layers).
Expected<HfModel> ParseHfConfig(const std::string& json_text, const std::string& file_name);

// Reads the file at `path` and returns ParseHfConfig of its text, or an Error naming the file
// when it cannot be read (missing, a directory, unreadable).
Expected<HfModel> ReadHfConfig(const std::string& path);

// Returns the model_type values ParseHfConfig understands, in a stable order.
std::vector<std::string> KnownModelTypes();

}  // namespace tools
}  // namespace kvring

#endif  // KVRING_TOOLS_HF_CONFIG_H_
