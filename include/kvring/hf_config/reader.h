// kvring/hf_config/reader.h: the model a config.json describes (HfModel), the steps every
// family group's reader shares (the header keys, the layer kinds, windows and chunks, the K/V
// shape, KV sharing, building the layers), and the reader of the families whose rules are the
// data in families.h. Family groups with rules of their own have their own reader
// (gemma4.h). Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_READER_H_
#define KVRING_HF_CONFIG_READER_H_

#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvring/hf_config/families.h"
#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {

// The attention of one model read from its config.json.
struct HfModel {
  std::string model_type;    // the text model's family, e.g. "gemma3_text"
  std::string class_name;    // transformers' configuration class, e.g. "Gemma3TextConfig"
  uint64_t max_context = 0;  // max_position_embeddings (or the class default); 0: the family
                             // names none (ReadStatedContext: Mamba, xLSTM, RecurrentGemma)
  uint32_t num_attention_heads = 0;  // query heads
  // The ranks whose share of each recurrent state `layers` hold (HfReadOptions::
  // tensor_parallel); their attention layers are whole.
  uint64_t tensor_parallel = 1;
  std::vector<LayerSpec> layers;
  std::vector<HfDefault> defaults;  // class defaults applied, in the order they were read

  // Returns a builder with the model's layers and max_context as the context (when 0, set one):
  // set the batch, rollback, formats and layout, then Build(). Allocates.
  LayerPlan::Builder PlanBuilder() const {
    LayerPlan::Builder builder;
    for (const LayerSpec& spec : layers) builder.AddLayer(spec);
    builder.SetContext(max_context);
    return builder;
  }
};

namespace detail {
namespace hf {

// What every reader reads first: the sizes, the context and the layer kinds.
struct Header {
  uint64_t num_layers = 0;
  uint64_t num_heads = 0;
  Kinds kinds;
  // The window of a family whose use_sliding_window switches it (SwitchesWindow): set
  // exactly when use_sliding_window is true (a null one is refused).
  std::optional<uint64_t> switched_window;
};

// Refuses use_bidirectional_attention: true (an encoder keeps no causal KV cache).
inline void CheckCausal(const Scope& scope) {
  if (scope.IsSet("use_bidirectional_attention") &&
      scope.Bool("use_bidirectional_attention", false)) {
    scope.Fail("use_bidirectional_attention",
               "is true: every token attends to later tokens too (an encoder), so there is no "
               "causal KV cache to plan");
  }
}

// Names the family in *model.
inline void NameFamily(const Scope& scope, HfModel* model) {
  model->model_type = scope.family().model_type;
  model->class_name = scope.family().class_name;
}

// Returns the key a size is read from: the usual name when the file has it (a class whose
// attribute_map aliases it sets its own key from it, last), else the class's own.
inline const char* SizeKey(const Scope& scope, const char* usual, const char* own) {
  return scope.Find(usual) != nullptr ? usual : own;
}

// Reads the context of a family whose class names none (its memory stops growing past a window,
// or never grows): the file's max_position_embeddings when it states one, else none
// (HfModel::max_context 0, recorded with `why`).
inline void ReadStatedContext(const Scope& scope, const char* why, HfModel* model) {
  if (scope.Find("max_position_embeddings") == nullptr) {
    scope.Record("max_position_embeddings", std::string("none (") + why + "; give the context)");
    return;
  }
  model->max_context = scope.Required("max_position_embeddings", 1, UINT64_MAX);
}

// Names the family in *model and reads num_attention_heads into it. Returns the head count (1
// after a failure).
inline uint64_t ReadHeads(const Scope& scope, HfModel* model) {
  NameFamily(scope, model);
  const uint64_t num_heads = scope.Required("num_attention_heads", 1, kMaxDim);
  model->num_attention_heads = static_cast<uint32_t>(num_heads);
  return num_heads;
}

// ReadHeads, then max_position_embeddings into *model, checking between the two that the model
// is causal (`check_causal`, the family's rule; nullptr: none). Returns the head count (1 after
// a failure). Every reader starts here (Kimi Linear, whose context has another key, with
// ReadHeads).
inline uint64_t ReadHeadsAndContext(const Scope& scope, void (*check_causal)(const Scope&),
                                    HfModel* model) {
  const Family& family = scope.family();
  const uint64_t num_heads = ReadHeads(scope, model);
  if (check_causal != nullptr) check_causal(scope);
  model->max_context =
      scope.OrDefault("max_position_embeddings", family.max_position_embeddings, 1, UINT64_MAX);
  return num_heads;
}

// Reads the sizes, max_position_embeddings and the layer kinds (layer_types when the family
// reads them, else the family's rule) into *header and *model, checking after the sizes that
// the model is causal (`check_causal`: the family's rule); false after a failure.
inline bool ReadHeader(const Scope& scope, void (*check_causal)(const Scope&), Header* header,
                       HfModel* model) {
  const Family& family = scope.family();
  header->num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  header->num_heads = ReadHeadsAndContext(scope, check_causal, model);
  // Qwen 2, 3 and 2-MoE and SmolLM3 drop sliding_window unless use_sliding_window is true.
  bool switched = false;
  if (SwitchesWindow(family.pattern)) {
    switched = scope.Bool("use_sliding_window", false);
    if (switched) {
      header->switched_window = ReadWindow(scope);
      if (!header->switched_window) {
        const bool absent = scope.Find("sliding_window") == nullptr;
        scope.Fail("sliding_window", std::string(absent ? "is missing" : "is null") +
                                         ", but use_sliding_window is true; " + scope.ClassName() +
                                         " would silently make every layer full_attention");
      }
    }
  }
  if (scope.Failed()) return false;
  std::optional<std::vector<LayerType>> listed;
  if (family.reads_layer_types) listed = ReadLayerTypes(scope, header->num_layers);
  if (listed) {
    header->kinds.types = std::move(*listed);
    header->kinds.source = "layer_types";
  } else {
    header->kinds = DeriveKinds(scope, header->num_layers, header->switched_window);
  }
  return !scope.Failed();
}

// The window and chunk of the model's sliding and chunked layers (0: none), or a failure.
struct Spans {
  uint64_t window = 0;
  uint64_t chunk = 0;
};

inline Spans ReadSpans(const Scope& scope, const Header& header) {
  const Family& family = scope.family();
  const Kinds& kinds = header.kinds;
  Spans spans;
  for (size_t i = 0; i < kinds.types.size() && !scope.Failed(); ++i) {
    const std::string layer_key = "layer_types[" + std::to_string(i) + "]";
    if (kinds.types[i] == LayerType::kSliding && spans.window == 0) {
      if (family.sliding_window_default == 0) {
        scope.Fail(layer_key,
                   "is sliding_attention, but " + scope.ClassName() + " has no sliding_window");
      } else if (SwitchesWindow(family.pattern)) {
        if (!header.switched_window) {
          scope.Fail(layer_key, "is sliding_attention, but use_sliding_window is false, so " +
                                    scope.ClassName() + " drops sliding_window");
        } else {
          spans.window = *header.switched_window;
        }
      } else {
        const std::optional<uint64_t> value = ReadWindow(scope);
        if (!value) {
          const bool absent = scope.Find("sliding_window") == nullptr;
          scope.Fail("sliding_window",
                     std::string(absent ? "is missing (the class default is null)" : "is null") +
                         ", but " + KindOf(kinds, i));
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

// The last num_kv_shared_layers layers read the KV of the last earlier layer of their own kind
// (Gemma 3n, Gemma 4).
inline void ReadSharedKV(const Scope& scope, const Kinds& kinds, HfModel* model) {
  const char* key = "num_kv_shared_layers";
  const uint64_t num_layers = kinds.types.size();
  const uint64_t num_shared = scope.OrDefault(key, scope.family().shared_default, 0, UINT64_MAX);
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
  const uint64_t kv_heads = ReadKvHeads(scope, num_heads);
  const uint64_t head_dim = ReadHeadDim(scope, num_heads);
  return LayerSpec::Global(static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim));
}

// Appends one layer per kind: sliding and chunked layers of shape `local` with the spans, full
// layers of shape `full`.
inline void BuildLayers(const Kinds& kinds, const Spans& spans, const LayerSpec& local,
                        const LayerSpec& full, HfModel* model) {
  for (LayerType type : kinds.types) {
    LayerSpec spec = type == LayerType::kFull ? full : local;
    if (type == LayerType::kSliding) {
      spec.kind = AttentionKind::kSliding;
      spec.window = spans.window;
    } else if (type == LayerType::kChunked) {
      spec.kind = AttentionKind::kChunked;
      spec.chunk = spans.chunk;
    }
    model->layers.push_back(spec);
  }
}

// Builds `count` full layers of `spec` into *model by the family's rule (its row's rule_text),
// then refuses the attention keys the family does not read (CheckForeignKeys): the end of the
// readers whose every layer, or cache slot, attends fully (the GPT-style families but GPT-Neo,
// JetMoE, HRM-Text, LongCat-Flash).
inline void BuildFullLayers(const Scope& scope, uint64_t count, const LayerSpec& spec,
                            HfModel* model) {
  Kinds kinds;
  kinds.source = scope.family().rule_text;
  kinds.types.assign(count, LayerType::kFull);
  BuildLayers(kinds, Spans(), spec, spec, model);
  CheckForeignKeys(scope, kinds);
}

// The reader of the families whose rules are the data in families.h: one K/V shape for every
// layer. Reads the model of `scope` into *model; the first failure is in the scope's Failure.
inline void ReadStandard(const Scope& scope, HfModel* model) {
  Header header;
  if (!ReadHeader(scope, CheckCausal, &header, model)) return;
  const Spans spans = ReadSpans(scope, header);
  const LayerSpec shape = ReadShape(scope, header.num_heads);
  if (scope.Failed()) return;
  BuildLayers(header.kinds, spans, shape, shape, model);
  if (scope.family().shares_kv) ReadSharedKV(scope, header.kinds, model);
  if (scope.Failed()) return;
  CheckForeignKeys(scope, header.kinds);
}

// Reads a Laguna model of `scope` into *model: the standard reader's layers, then
// num_attention_heads_per_layer (default num_attention_heads for every layer), each layer's
// query heads, which must be whole groups of num_key_value_heads and split across
// HfReadOptions::tensor_parallel ranks. HfModel::num_attention_heads becomes the largest count
// dividing every layer's, so that ranks that divide it split every layer's heads.
inline void ReadLaguna(const Scope& scope, HfModel* model) {
  ReadStandard(scope, model);
  if (scope.Failed()) return;
  const char* key = "num_attention_heads_per_layer";
  const Json* list = scope.LayerList(key, model->layers.size());
  if (scope.Failed() || list == nullptr) return;
  const uint64_t kv_heads = model->layers.front().num_kv_heads;
  uint64_t common = 0;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = std::string(key) + "[" + std::to_string(i) + "]";
    const uint64_t heads = scope.ToUInt(at, (*list)[i], 1, kMaxDim);
    if (scope.Failed()) return;
    if (heads % kv_heads != 0) {
      scope.Fail(at, std::to_string(heads) + " is not a multiple of num_key_value_heads " +
                         std::to_string(kv_heads) + " (each KV head serves a whole group)");
      return;
    }
    const uint64_t ranks = scope.options().tensor_parallel;
    if (ranks != 0 && heads % ranks != 0) {
      scope.Fail(at, std::to_string(heads) + " does not split across tensor_parallel " +
                         std::to_string(ranks) + " ranks (every rank needs whole query heads)");
      return;
    }
    common = std::gcd(common, heads);
  }
  model->num_attention_heads = static_cast<uint32_t>(common);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_READER_H_
