// kvring/hf_config/mla.h: the reader of the latent-attention (MLA) families (DeepSeek V3 and
// Kimi K2, Mistral 4, GLM-4.7-Flash's glm4_moe_lite; Kimi Linear's full layers), as their
// transformers classes read them: every layer full, its K/V either the latent an engine stores
// (HfReadOptions::mla kLatent) or the per-head K and V transformers' own cache holds (kExpanded).
// Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_MLA_H_
#define KVRING_HF_CONFIG_MLA_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// A size whose class default is None: the file must give it.
inline constexpr uint64_t kNoMlaDefault = UINT64_MAX;

// The class defaults of an MLA family's latent and head sizes.
struct MlaDefaults {
  const char* model_type;
  uint64_t kv_lora_rank;
  uint64_t qk_rope_head_dim;
  uint64_t qk_nope_head_dim;
  uint64_t v_head_dim;
};

inline constexpr MlaDefaults kMlaDefaults[] = {
    {"deepseek_v3", 512, 64, 128, 128},
    {"kimi_k2", 512, 64, 128, 128},
    {"mistral4", 256, 64, 64, 128},
    {"glm4_moe_lite", 512, 64, 192, 256},
    {"kimi_linear", kNoMlaDefault, kNoMlaDefault, kNoMlaDefault, kNoMlaDefault},
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

// Reads an MLA model of `scope` into *model; the first failure is in the scope's Failure.
inline void ReadMla(const Scope& scope, HfModel* model) {
  Header header;
  if (!ReadHeader(scope, CheckCausal, &header, model)) return;
  const LayerSpec shape = ReadMlaShape(scope, header.num_heads);
  if (scope.Failed()) return;
  BuildLayers(header.kinds, Spans(), shape, shape, model);
  CheckForeignKeys(scope, header.kinds);
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_MLA_H_
