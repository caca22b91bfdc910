// kvring/hf_config/mla.h: the reader of the latent-attention (MLA) families (DeepSeek V3 and
// Kimi K2, DeepSeek V2, Youtu-LLM, Mistral 4, GLM-4.7-Flash's glm4_moe_lite; Kimi Linear's full
// layers; LongCat-Flash, two latent attentions a decoder layer), as their transformers classes
// read them: every layer full, its K/V either the latent an engine stores (HfReadOptions::mla
// kLatent) or the per-head K and V transformers' own cache holds (kExpanded).
// Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_MLA_H_
#define KVRING_HF_CONFIG_MLA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// A size whose class default is None: the file must give it.
inline constexpr uint64_t kNoMlaDefault = UINT64_MAX;

// How a DSA family places its indexers (DeepSeek sparse attention).
enum class Indexers {
  kNone,           // no indexer (plain MLA)
  kEveryLayer,     // DeepSeek V3.2: every layer runs one
  kPerLayerTypes,  // GLM-5: indexer_types, "full" layers run one, "shared" reuse the last's
};

// The class defaults of an MLA family's latent and head sizes, and its indexers.
struct MlaDefaults {
  const char* model_type;
  uint64_t kv_lora_rank;
  uint64_t qk_rope_head_dim;
  uint64_t qk_nope_head_dim;
  uint64_t v_head_dim;
  Indexers indexers = Indexers::kNone;
};

inline constexpr MlaDefaults kMlaDefaults[] = {
    {"deepseek_v3", 512, 64, 128, 128},
    {"kimi_k2", 512, 64, 128, 128},
    {"deepseek_v2", 512, 64, 128, 128},
    {"youtu", 512, 64, 128, 128},
    {"mistral4", 256, 64, 64, 128},
    {"glm4_moe_lite", 512, 64, 192, 256},
    {"kimi_linear", kNoMlaDefault, kNoMlaDefault, kNoMlaDefault, kNoMlaDefault},
    {"deepseek_v32", 512, 64, 128, 128, Indexers::kEveryLayer},
    {"glm_moe_dsa", 512, 64, 192, 256, Indexers::kPerLayerTypes},
    {"longcat_flash", 512, 64, 128, 128},
    {"longcat_flash_ngram", 512, 64, 128, 128},
};

inline const MlaDefaults& FindMlaDefaults(const Family& family) {
  for (const MlaDefaults& defaults : kMlaDefaults) {
    if (std::string(defaults.model_type) == family.model_type) return defaults;
  }
  return kMlaDefaults[0];
}

// Returns the integer at `key`, or `fallback` when absent (refused when it is kNoMlaDefault);
// null refused (the classes type these keys int, or crash on None).
inline uint64_t MlaSize(const Scope& scope, const char* key, uint64_t fallback, uint64_t min) {
  const Json* value = scope.Find(key);
  if (value == nullptr && fallback == kNoMlaDefault) {
    scope.Fail(key, "is missing; " + scope.ClassName() +
                        "'s default None gives its latent attention no size");
    return 1;
  }
  if (value != nullptr && value->is_null()) {
    scope.Fail(key, "is null; " + scope.ClassName() + "'s latent attention needs a number here");
    return 1;
  }
  return scope.OrDefault(key, fallback, min, kMaxDim);
}

// Returns the K/V shape of every layer: the latent (kv_lora_rank + qk_rope_head_dim elements
// per position) or, expanded, num_attention_heads heads of K (qk_nope_head_dim +
// qk_rope_head_dim) and V (v_head_dim) elements.
inline LayerSpec ReadMlaShape(const Scope& scope, uint64_t num_heads) {
  const MlaDefaults& defaults = FindMlaDefaults(scope.family());
  const uint64_t rope = MlaSize(scope, "qk_rope_head_dim", defaults.qk_rope_head_dim, 0);
  if (scope.options().mla == MlaCache::kLatent) {
    const uint64_t rank = MlaSize(scope, "kv_lora_rank", defaults.kv_lora_rank, 1);
    if (rank + rope > kMaxDim) scope.Fail("kv_lora_rank", "makes the latent too large");
    return LayerSpec::Latent(static_cast<uint32_t>(rank + rope));
  }
  const uint64_t nope = MlaSize(scope, "qk_nope_head_dim", defaults.qk_nope_head_dim, 0);
  const uint64_t v_dim = MlaSize(scope, "v_head_dim", defaults.v_head_dim, 1);
  if (nope + rope == 0) {
    scope.Fail("qk_nope_head_dim", "and qk_rope_head_dim are both 0: the keys have no element");
    return LayerSpec();
  }
  LayerSpec spec =
      LayerSpec::Global(static_cast<uint32_t>(num_heads), static_cast<uint32_t>(nope + rope));
  spec.v_head_dim = static_cast<uint32_t>(v_dim);
  return spec;
}

// Returns which layers run a DSA indexer in GLM-5 (GlmMoeDsaConfig): indexer_types ("full"
// runs one, "shared" reuses the previous full layer's top-k), else index_topk_pattern (a
// string of F and S, or a list), else full iff max(i - index_skip_topk_offset + 1, 0) %
// index_topk_freq == 0 (defaults 2 and 1: every layer). A first layer that is "shared" has no
// full layer to reuse: refused.
inline std::vector<bool> ReadIndexerLayers(const Scope& scope, uint64_t num_layers) {
  std::vector<bool> full(num_layers, true);
  const char* key = "indexer_types";
  const Json* list = scope.LayerList(key, num_layers);
  if (list == nullptr && !scope.Failed()) {
    key = "index_topk_pattern";
    const Json* pattern = scope.Find(key);
    if (pattern != nullptr && pattern->is_string()) {
      const std::string letters = pattern->get<std::string>();
      if (letters.size() != num_layers) {
        scope.Fail(key, "has " + std::to_string(letters.size()) +
                            " letters, but num_hidden_layers is " + std::to_string(num_layers));
        return full;
      }
      for (size_t i = 0; i < num_layers; ++i) {
        if (letters[i] != 'F' && letters[i] != 'S') {
          scope.Fail(key, Show(*pattern) + " has '" + Printable(std::string(1, letters[i])) +
                              "' at " + std::to_string(i) + ", not F (full) or S (shared)");
          return full;
        }
        full[i] = letters[i] == 'F';
      }
    } else {
      list = scope.LayerList(key, num_layers);
    }
  }
  if (scope.Failed()) return full;
  if (list != nullptr) {
    full = scope.LayerChoices(key, *list, Json("full"), Json("shared"), "full or shared");
  } else if (scope.Find("index_topk_pattern") == nullptr) {
    key = "index_skip_topk_offset";  // what a shared first layer would come from
    const uint64_t freq = scope.OrDefault("index_topk_freq", 1, 1, kMaxLayers);
    const uint64_t offset = scope.OrDefault("index_skip_topk_offset", 2, 0, kMaxLayers);
    for (size_t i = 0; i < num_layers; ++i) {
      full[i] = (i + 1 > offset ? i + 1 - offset : 0) % freq == 0;
    }
  }
  if (!scope.Failed() && !full[0]) {
    scope.Fail(key,
               "makes layer 0 shared, but no earlier layer runs an indexer whose top-k it "
               "could reuse");
  }
  return full;
}

// Sets the DSA indexer key of each layer of *model that runs an indexer: index_head_dim
// elements per position (one key, whatever index_n_heads; transformers' cache keeps them in
// the model's type, engines in FP8 with a scale: plan int8 for that size).
inline void ReadIndexers(const Scope& scope, Indexers indexers, HfModel* model) {
  if (indexers == Indexers::kNone) return;
  const uint64_t dim = scope.OrDefault("index_head_dim", 128, 1, kMaxDim);
  std::vector<bool> full(model->layers.size(), true);
  if (indexers == Indexers::kPerLayerTypes) full = ReadIndexerLayers(scope, model->layers.size());
  if (scope.Failed()) return;
  for (size_t i = 0; i < model->layers.size(); ++i) {
    if (full[i]) model->layers[i].indexer_dim = static_cast<uint32_t>(dim);
  }
}

// Reads an MLA model of `scope` into *model; the first failure is in the scope's Failure.
inline void ReadMla(const Scope& scope, HfModel* model) {
  Header header;
  if (!ReadHeader(scope, CheckCausal, &header, model)) return;
  const LayerSpec shape = ReadMlaShape(scope, header.num_heads);
  if (scope.Failed()) return;
  BuildLayers(header.kinds, Spans(), shape, shape, model);
  ReadIndexers(scope, FindMlaDefaults(scope.family()).indexers, model);
  if (scope.Failed()) return;
  CheckForeignKeys(scope, header.kinds);
}

// Reads a LongCat-Flash model (longcat_flash; LongCat-Flash-Lite's longcat_flash_ngram, whose
// remote class extends LongcatFlashConfig) of `scope` into *model: num_layers decoder
// layers, each running two latent attentions, each with a cache slot of its own (transformers'
// layer_idx 2i and 2i + 1: LongcatFlashModel sets num_hidden_layers to 2 x num_layers, so a
// file's other num_hidden_layers is refused), so 2 x num_layers MLA layers in the order the
// model calls them, each of the latent shape of ReadMlaShape.
inline void ReadLongcatFlash(const Scope& scope, HfModel* model) {
  const uint64_t decoder_layers = scope.Required("num_layers", 1, kMaxLayers / 2);
  const uint64_t num_heads = ReadHeadsAndContext(scope, CheckCausal, model);
  if (scope.Failed()) return;
  const uint64_t slots = 2 * decoder_layers;
  CheckUnread(scope, "num_hidden_layers", slots,
              "the model sets it to 2 x num_layers = " + std::to_string(slots) +
                  ", a cache slot for each of a decoder layer's two latent attentions");
  const LayerSpec shape = ReadMlaShape(scope, num_heads);
  if (scope.Failed()) return;
  BuildFullLayers(scope, slots, shape, model);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_MLA_H_
