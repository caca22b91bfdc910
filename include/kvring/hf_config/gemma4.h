// kvring/hf_config/gemma4.h: the reader of Gemma 4 (gemma4_text, and gemma4's text_config), as
// transformers' Gemma4TextConfig and Gemma4TextAttention read it: full layers of another shape
// than the sliding ones (global_head_dim, and num_global_key_value_heads when
// attention_k_eq_v), the last layer always full, the last num_kv_shared_layers layers reading
// the KV of the last earlier layer of their own kind. Part of kvring/hf_config.h; needs
// nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_GEMMA4_H_
#define KVRING_HF_CONFIG_GEMMA4_H_

#include <cstdint>
#include <string>

#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// use_bidirectional_attention is null, "vision" (image tokens see each other; text stays
// causal, so the cache is planned as usual) or "all" (an encoder: refused).
inline void CheckGemma4Causal(const Scope& scope) {
  const char* key = "use_bidirectional_attention";
  const Json* value = scope.Find(key);
  if (value == nullptr || value->is_null() || *value == Json("vision")) return;
  if (*value == Json("all")) {
    scope.Fail(key,
               "is \"all\": every token attends to later tokens too (an encoder), so there "
               "is no causal KV cache to plan");
    return;
  }
  scope.Fail(key, Show(*value) + " is not \"all\", \"vision\" or null");
}

// Returns the K/V shape of Gemma 4's full layers: head dim global_head_dim (0: head_dim, as the
// attention's truthiness test), and with attention_k_eq_v the num_global_key_value_heads KV
// heads (K is V there; both are still cached), else the sliding layers' count.
inline LayerSpec ReadGemma4Full(const Scope& scope, const LayerSpec& local, uint64_t num_heads) {
  LayerSpec full = local;
  const uint64_t head_dim = scope.OrDefault("global_head_dim", 512, 0, kMaxDim);
  if (head_dim != 0) full.head_dim = static_cast<uint32_t>(head_dim);
  if (!scope.Bool("attention_k_eq_v", false)) return full;
  const char* key = "num_global_key_value_heads";
  const Json* value = scope.Find(key);
  if (value == nullptr || value->is_null()) {
    scope.Fail(key, std::string(value == nullptr ? "is missing" : "is null") +
                        ", but attention_k_eq_v is true, so " + scope.ClassName() +
                        "'s full layers take their KV head count from it");
    return full;
  }
  const uint64_t kv_heads = scope.ToUInt(key, *value, 1, num_heads);
  if (num_heads % kv_heads != 0) {
    scope.Fail(key, std::to_string(kv_heads) + " does not divide num_attention_heads " +
                        std::to_string(num_heads) + " (each KV head serves a whole group)");
  }
  full.num_kv_heads = static_cast<uint32_t>(kv_heads);
  return full;
}

// Reads a Gemma 4 model of `scope` into *model; the first failure is in the scope's Failure.
inline void ReadGemma4(const Scope& scope, HfModel* model) {
  Header header;
  if (!ReadHeader(scope, CheckGemma4Causal, &header, model)) return;
  Kinds& kinds = header.kinds;
  const size_t last = kinds.types.size() - 1;
  if (kinds.types[last] != LayerType::kFull) {
    // Gemma4TextConfig forces the last layer to full_attention (with a warning).
    kinds.types[last] = LayerType::kFull;
    scope.Record("layer_types[" + std::to_string(last) + "]",
                 "full_attention (" + scope.ClassName() + " makes the last layer full)");
  }
  const Spans spans = ReadSpans(scope, header);
  const LayerSpec local = ReadShape(scope, header.num_heads);
  if (scope.Failed()) return;
  const LayerSpec full = ReadGemma4Full(scope, local, header.num_heads);
  if (scope.Failed()) return;
  BuildLayers(kinds, spans, local, full, model);
  ReadSharedKV(scope, kinds, model);
  if (scope.Failed()) return;
  CheckForeignKeys(scope, kinds);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_GEMMA4_H_
