// kvring/hf_config/hybrid.h: the readers of the hybrid families, whose recurrent layers keep a
// fixed state instead of K/V, as their transformers classes read them (the Mamba families in
// kvring/hf_config/mamba.h), and the state element type they share.
// - Gated DeltaNet (Qwen3-Next, Qwen3.5, Qwen3.5-MoE): layer_types of "linear_attention" and
//   "full_attention" (or a full layer every full_attention_interval); each recurrent layer keeps
//   a conv state of (linear_conv_kernel_dim - 1) x conv channels, as engines keep it
//   (transformers keeps kernel columns), and a recurrent state of linear_num_value_heads x
//   linear_key_head_dim x linear_value_head_dim.
// - Gated DeltaNet with q, k and v convolutions of their own (OLMo hybrid): the same state.
// - Lightning attention (MiniMax): layer_types of "linear_attention" and "full_attention" (or,
//   in MiniMax-M1's remote code, attn_type_list); a linear layer keeps num_attention_heads x
//   head_dim x head_dim elements.
// - RG-LRU (RecurrentGemma): block_types of recurrent and attention blocks, repeated; a
//   recurrent block keeps a conv state and its lru_width-wide F32 state, attention slides.
// - Short convolutions (LFM2): layer_types of conv and full_attention (or full_attn_idxs,
//   default every layer); a conv layer keeps (conv_L_cache - 1) x hidden_size elements.
// Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_HYBRID_H_
#define KVRING_HF_CONFIG_HYBRID_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvring/detail/checked_math.h"
#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// Returns the element type the file asks for the recurrent state (mamba_ssm_dtype or
// mamba_ssm_cache_dtype: "float32" keeps it in F32), else `fallback` (the class default:
// Nemotron-H's mamba_ssm_cache_dtype is "float32"; otherwise the model's type, BF16).
inline Format ReadStateFormat(const Scope& scope, Format fallback = Format::kBF16) {
  for (const char* key : {"mamba_ssm_cache_dtype", "mamba_ssm_dtype"}) {
    const Json* value = scope.Find(key);
    if (value == nullptr || value->is_null()) continue;
    if (*value == Json("float32")) return Format::kF32;
    if (*value == Json("bfloat16") || *value == Json("float16")) return Format::kBF16;
    scope.Fail(key, Show(*value) + " is not \"float32\", \"bfloat16\" or \"float16\"");
    return Format::kBF16;
  }
  if (fallback == Format::kF32) {
    scope.Record("mamba_ssm_cache_dtype", "float32");
  } else {
    scope.Record("mamba_ssm_dtype", "bfloat16 (the model's type)");
  }
  return fallback;
}

// Returns the product of `factors`, or fails at `key` (0 returned) when it overflows 64 bits.
inline uint64_t StateProduct(const Scope& scope, const char* key,
                             std::initializer_list<uint64_t> factors) {
  uint64_t product = 1;
  for (uint64_t factor : factors) {
    if (!CheckedMul(product, factor, &product)) {
      scope.Fail(key, "makes a layer's state elements overflow 64 bits");
      return 0;
    }
  }
  return product;
}

// Returns `count` (read at `key`; `shown` before it in the message, e.g. the product it is)
// divided among the HfReadOptions::tensor_parallel ranks, or fails at `key` (0 returned) when
// they do not divide it: vLLM gives each rank whole `units`.
inline uint64_t PerRank(const Scope& scope, const std::string& key, const std::string& shown,
                        uint64_t count, const char* units) {
  const uint64_t ranks = scope.options().tensor_parallel;
  if (ranks != 0 && count % ranks == 0) return count / ranks;
  scope.Fail(key, shown + (shown.empty() ? "" : " ") + std::to_string(count) +
                      " does not split across tensor_parallel " + std::to_string(ranks) +
                      " ranks (vLLM gives each rank whole " + units + ")");
  return 0;
}

// Returns the state of a Gated DeltaNet layer of `kernel` conv columns, k_heads key heads of
// k_dim and v_heads value heads of v_dim: a conv state over the q, k and v channels and a
// recurrent state per value head; a value head count that is not a multiple of the key heads
// fails.
inline StateSpec GatedDeltaNetState(const Scope& scope, uint64_t kernel, uint64_t k_heads,
                                    uint64_t v_heads, uint64_t k_dim, uint64_t v_dim) {
  StateSpec state;
  if (scope.Failed()) return state;
  if (v_heads % k_heads != 0) {
    scope.Fail("linear_num_value_heads",
               std::to_string(v_heads) + " is not a multiple of linear_num_key_heads " +
                   std::to_string(k_heads) + " (each key head serves a whole group)");
    return state;
  }
  // One rank's share: whole key heads, each with its value heads.
  const uint64_t ranks = scope.options().tensor_parallel;
  k_heads = PerRank(scope, "linear_num_key_heads", "", k_heads, "key heads, each with its values");
  if (scope.Failed()) return state;
  v_heads /= ranks;
  const uint64_t qk = StateProduct(scope, "linear_key_head_dim", {2, k_heads, k_dim});
  const uint64_t v = StateProduct(scope, "linear_value_head_dim", {v_heads, v_dim});
  if (scope.Failed()) return state;
  // (Both terms are below 2^42: the sum does not overflow.)
  state.conv_elements = StateProduct(scope, "linear_conv_kernel_dim", {kernel - 1, qk + v});
  state.conv_format = Format::kBF16;
  state.recurrent_elements = StateProduct(scope, "linear_value_head_dim", {v_heads, k_dim, v_dim});
  state.recurrent_format = ReadStateFormat(scope);
  return state;
}

// Returns the state of a Gated DeltaNet layer (Qwen3-Next's defaults).
inline StateSpec ReadGatedDeltaNetState(const Scope& scope) {
  const uint64_t kernel = scope.OrDefault("linear_conv_kernel_dim", 4, 1, kMaxDim);
  const uint64_t k_heads = scope.OrDefault("linear_num_key_heads", 16, 1, kMaxDim);
  const uint64_t v_heads = scope.OrDefault("linear_num_value_heads", 32, 1, kMaxDim);
  const uint64_t k_dim = scope.OrDefault("linear_key_head_dim", 128, 1, kMaxDim);
  const uint64_t v_dim = scope.OrDefault("linear_value_head_dim", 128, 1, kMaxDim);
  return GatedDeltaNetState(scope, kernel, k_heads, v_heads, k_dim, v_dim);
}

// Returns whether each layer is recurrent (true) or full attention: layer_types of
// "linear_attention" and "full_attention", or, without them, fallback(i).
template <class Fallback>
inline std::vector<bool> ReadLinearLayers(const Scope& scope, uint64_t num_layers,
                                          const Fallback& fallback) {
  std::vector<bool> linear(num_layers, false);
  const Json* list = scope.LayerList("layer_types", num_layers);
  if (scope.Failed()) return linear;
  if (list == nullptr) {
    for (size_t i = 0; i < num_layers; ++i) linear[i] = fallback(i);
    return linear;
  }
  return scope.LayerChoices("layer_types", *list, Json("linear_attention"), Json("full_attention"),
                            "linear_attention or full_attention (" + scope.ClassName() + ")");
}

// Gated DeltaNet's layers: without layer_types, full iff (i + 1) % full_attention_interval == 0
// (default 4).
inline std::vector<bool> ReadLinearLayers(const Scope& scope, uint64_t num_layers) {
  bool read = false;
  uint64_t interval = 4;
  return ReadLinearLayers(scope, num_layers, [&](size_t i) {
    if (!read) interval = scope.OrDefault("full_attention_interval", 4, 1, kMaxLayers);
    read = true;
    return !scope.Failed() && (i + 1) % interval != 0;
  });
}

// Reads a Gated DeltaNet hybrid model of `scope` into *model; the first failure is in the
// scope's Failure.
inline void ReadGatedDeltaNetHybrid(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  if (scope.Failed()) return;
  const std::vector<bool> linear = ReadLinearLayers(scope, num_layers);
  const LayerSpec full = ReadShape(scope, num_heads);
  const StateSpec state = ReadGatedDeltaNetState(scope);
  if (scope.Failed()) return;
  for (bool recurrent : linear) {
    model->layers.push_back(recurrent ? LayerSpec::Recurrent(state) : full);
  }
  for (const char* key : {"attention_chunk_size", "kv_lora_rank"}) {
    if (scope.IsSet(key)) {
      scope.Fail(key, Show(*scope.Find(key)) + " is set, but " + scope.ClassName() +
                          " reads no such key, so the file contradicts its model_type");
      return;
    }
  }
}

// Returns `key`, or `fallback` when it is absent or null (a class default of None filled in by
// __post_init__).
inline uint64_t OrDerived(const Scope& scope, const char* key, uint64_t fallback) {
  return scope.NullableOrDefault(key, fallback, 1, kMaxDim).value_or(fallback);
}

// Reads an OLMo hybrid model of `scope` into *model: Gated DeltaNet layers (separate q, k and v
// convolutions, the same state) and full attention layers; without layer_types full iff
// i % 4 == 3 (the last layer when that leaves none). The linear keys default to the attention
// heads (num_attention_heads key and value heads of int(0.75 x hidden_size / key heads), value
// heads twice that). Both kinds must be present, as the class requires.
inline void ReadOlmoHybrid(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  if (scope.Failed()) return;
  bool derived = false;
  std::vector<bool> linear = ReadLinearLayers(scope, num_layers, [&](size_t i) {
    derived = true;
    return i % 4 != 3;
  });
  if (scope.Failed()) return;
  size_t num_linear = 0;
  for (bool recurrent : linear) num_linear += recurrent ? 1 : 0;
  if (derived && num_linear == num_layers) {
    linear.back() = false;
    num_linear -= 1;
  }
  if (num_linear == 0 || num_linear == num_layers) {
    scope.Fail("layer_types", std::string(num_linear == 0 ? "has no linear_attention layer"
                                                          : "has no attention layer") +
                                  "; " + scope.ClassName() + " expects at least one");
    return;
  }
  const LayerSpec full = ReadShape(scope, num_heads);
  const uint64_t kernel = scope.OrDefault("linear_conv_kernel_dim", 4, 1, kMaxDim);
  const uint64_t k_heads = OrDerived(scope, "linear_num_key_heads", num_heads);
  const uint64_t v_heads = OrDerived(scope, "linear_num_value_heads", num_heads);
  if (scope.Failed()) return;
  const uint64_t derived_k_dim = 3 * hidden / (4 * k_heads);  // int(0.75 x hidden / heads)
  const bool k_dim_given = scope.IsSet("linear_key_head_dim");
  if (!k_dim_given && (derived_k_dim == 0 || derived_k_dim > kMaxDim)) {
    scope.Fail("linear_key_head_dim",
               "is not given, and int(0.75 x hidden_size / linear_num_key_heads) = " +
                   std::to_string(derived_k_dim) + " is no head dim (give one)");
    return;
  }
  const uint64_t k_dim = OrDerived(scope, "linear_key_head_dim", derived_k_dim);
  const uint64_t v_dim = OrDerived(scope, "linear_value_head_dim", 2 * k_dim);
  const StateSpec state = GatedDeltaNetState(scope, kernel, k_heads, v_heads, k_dim, v_dim);
  if (scope.Failed()) return;
  for (bool recurrent : linear) {
    model->layers.push_back(recurrent ? LayerSpec::Recurrent(state) : full);
  }
}

// Returns attn_type_list, MiniMax's remote-code list of every layer's mixer (0: lightning
// attention, true here; 1: softmax attention), or nullopt when it is absent or null; a list
// that is not one 0 or 1 per layer fails (nullopt).
inline std::optional<std::vector<bool>> ReadAttnTypeList(const Scope& scope, uint64_t num_layers) {
  const Json* list = scope.LayerList("attn_type_list", num_layers);
  if (list == nullptr) return std::nullopt;
  std::vector<bool> lightning =
      scope.LayerChoices("attn_type_list", *list, Json(0), Json(1),
                         "0 (lightning attention) or 1 (softmax attention)");
  if (scope.Failed()) return std::nullopt;
  return lightning;
}

// Refuses MiniMax's remote-code key attn_type_list when it disagrees with the layers
// MiniMaxConfig builds, which never read it: a file with only that list would be planned with
// the class's alternating default, not the model's layers.
inline void CheckAttnTypeList(const Scope& scope, const std::vector<bool>& linear) {
  const std::optional<std::vector<bool>> listed = ReadAttnTypeList(scope, linear.size());
  if (!listed) return;
  for (size_t i = 0; i < linear.size(); ++i) {
    if ((*listed)[i] == linear[i]) continue;
    scope.Fail("attn_type_list[" + std::to_string(i) + "]",
               Show(Json(linear[i] ? 1 : 0)) + ", but " + scope.ClassName() +
                   " reads layer_types, which make layer " + std::to_string(i) +
                   (linear[i] ? " linear_attention" : " full_attention") +
                   " (give layer_types that agree)");
    return;
  }
}

// Reads a MiniMax model (lightning attention) of `scope` into *model: layer_types of
// "linear_attention" and "full_attention" (default: full on even layers, linear on odd). A
// lightning layer keeps a state of num_attention_heads x head_dim x head_dim elements in the
// model's type (its K^T V sum; no conv state); the attention layers slide when sliding_window is
// set (the model's mask then slides for every softmax layer). MiniMax-M1's remote code
// (Reader::kLightningRemote) reads attn_type_list instead, keeps the lightning state in F32 (it
// starts it as float32 and adds each position's K^T V into it), and slides only on its
// flash-attention path: a sliding_window is refused there.
inline void ReadLightningHybrid(const Scope& scope, HfModel* model) {
  const bool remote = scope.family().reader == Reader::kLightningRemote;
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  if (scope.Failed()) return;
  std::vector<bool> linear;
  if (remote) {
    // MiniMaxM1Model indexes the list for every layer: the class has no default for it.
    std::optional<std::vector<bool>> listed = ReadAttnTypeList(scope, num_layers);
    if (!listed && !scope.Failed()) {
      scope.Fail("attn_type_list", "is missing; " + scope.ClassName() +
                                       "'s model reads one 0 (lightning) or 1 (softmax "
                                       "attention) per layer from it");
    }
    if (listed) linear = std::move(*listed);
    if (!scope.Failed() && scope.IsSet("sliding_window")) {
      scope.Fail("sliding_window",
                 Show(*scope.Find("sliding_window")) + " is set, but " + scope.ClassName() +
                     "'s eager attention attends every position and only its flash-attention "
                     "path slides: the window depends on the attention implementation");
    }
  } else {
    linear = ReadLinearLayers(scope, num_layers, [](size_t i) { return (i + 1) % 2 == 0; });
    CheckAttnTypeList(scope, linear);
  }
  if (scope.Failed()) return;
  LayerSpec full = ReadShape(scope, num_heads);
  if (scope.Failed()) return;
  const uint64_t rank_heads =
      PerRank(scope, "num_attention_heads", "", num_heads, "lightning attention heads");
  if (scope.Failed()) return;
  StateSpec state;
  state.recurrent_elements = rank_heads * full.head_dim * full.head_dim;
  state.recurrent_format = remote ? Format::kF32 : Format::kBF16;
  const std::optional<uint64_t> window = ReadWindow(scope);  // the class default: None
  if (scope.Failed()) return;
  if (window) full = LayerSpec::Sliding(*window, full.num_kv_heads, full.head_dim);
  for (bool recurrent : linear) {
    model->layers.push_back(recurrent ? LayerSpec::Recurrent(state) : full);
  }
}

// Returns LFM2's layer kinds (true: a conv layer): layer_types of "conv" and "full_attention",
// else full iff i is in full_attn_idxs (default every layer; an index past the last layer,
// which transformers would silently ignore, is refused). LFM2 MoE reads layer_types only.
inline std::vector<bool> ReadConvLayers(const Scope& scope, uint64_t num_layers) {
  std::vector<bool> conv(num_layers, false);
  if (const Json* list = scope.LayerList("layer_types", num_layers)) {
    return scope.LayerChoices("layer_types", *list, Json("conv"), Json("full_attention"),
                              "conv or full_attention (" + scope.ClassName() + ")");
  }
  if (!scope.Failed() && std::string(scope.family().model_type) == "lfm2_moe") {
    scope.Fail("layer_types",
               std::string(scope.Find("layer_types") == nullptr ? "is missing" : "is null") + "; " +
                   scope.ClassName() + " derives none (its model indexes the list)");
    return conv;
  }
  if (scope.Failed()) return conv;
  const std::optional<std::vector<bool>> full = scope.LayerIndices("full_attn_idxs", num_layers);
  if (!full) return conv;
  for (size_t i = 0; i < num_layers; ++i) conv[i] = !(*full)[i];
  return conv;
}

// Reads an LFM2 model of `scope` into *model.
inline void ReadShortConvHybrid(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  const uint64_t kernel = scope.OrDefault("conv_L_cache", 3, 1, kMaxDim);
  if (scope.Failed()) return;
  const std::vector<bool> conv = ReadConvLayers(scope, num_layers);
  const LayerSpec full = ReadShape(scope, num_heads);
  if (scope.Failed()) return;
  const uint64_t channels = PerRank(scope, "hidden_size", "", hidden, "conv channels");
  if (scope.Failed()) return;
  StateSpec state;
  state.conv_elements = (kernel - 1) * channels;
  state.conv_format = Format::kBF16;
  for (bool is_conv : conv) model->layers.push_back(is_conv ? LayerSpec::Recurrent(state) : full);
}

// Reads a RecurrentGemma (Griffin) model of `scope` into *model: block_types (default
// recurrent, recurrent, attention) repeated over the layers; an attention block slides over
// attention_window_size (sliding_window is its other name; default 2048) with
// num_key_value_heads (None: MHA) of the file's head_dim, else hidden_size /
// num_attention_heads; a recurrent block keeps a conv state of (conv1d_width - 1) x lru_width
// (None: hidden_size) BF16 elements and its RG-LRU state, lru_width F32 elements (the model
// keeps it in float32). One rank keeps whole RG-LRU blocks (lru_width / num_attention_heads
// wide). The class names no context (no layer attends past its window): HfModel::max_context
// is 0 unless the file gives max_position_embeddings.
inline void ReadRecurrentGemma(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeads(scope, model);
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  if (scope.Failed()) return;
  ReadStatedContext(scope, "every attention block slides", model);
  std::vector<bool> recurrent = {true, true, false};
  const Json* blocks = scope.Find("block_types");
  if (blocks == nullptr) {
    scope.Record("block_types", "recurrent, recurrent, attention");
  } else if (!blocks->is_array() || blocks->empty()) {
    scope.Fail("block_types", Mistyped(*blocks, "a list of recurrent and attention"));
    return;
  } else {
    recurrent = scope.LayerChoices("block_types", *blocks, Json("recurrent"), Json("attention"),
                                   "recurrent or attention (" + scope.ClassName() + ")");
    if (scope.Failed()) return;
  }
  if (num_layers > 100 * recurrent.size()) {
    scope.Fail("num_hidden_layers", std::to_string(num_layers) + " is more than 100 repeats of " +
                                        "block_types' " + std::to_string(recurrent.size()) + " (" +
                                        scope.ClassName() + " lists no more blocks)");
    return;
  }
  const char* window_key =
      scope.Find("sliding_window") != nullptr ? "sliding_window" : "attention_window_size";
  const uint64_t window = scope.OrDefault(window_key, 2048, 1, UINT64_MAX);
  const uint64_t kv_heads = ReadKvHeads(scope, num_heads);
  const uint64_t head_dim = ReadHeadDim(scope, num_heads);
  const std::optional<uint64_t> lru = scope.NullableOrDefault("lru_width", hidden, 1, kMaxDim);
  const uint64_t kernel = scope.OrDefault("conv1d_width", 4, 1, kMaxDim);
  if (scope.Failed()) return;
  uint64_t width = lru.value_or(hidden);
  if (width % num_heads != 0) {
    scope.Fail("lru_width", std::to_string(width) + " is not a multiple of num_attention_heads " +
                                std::to_string(num_heads) + " (the RG-LRU gates are blocks)");
    return;
  }
  width = width / num_heads * PerRank(scope, "num_attention_heads", "", num_heads, "RG-LRU blocks");
  if (scope.Failed()) return;
  StateSpec state;
  state.conv_elements = StateProduct(scope, "conv1d_width", {kernel - 1, width});
  state.conv_format = Format::kBF16;
  state.recurrent_elements = width;
  state.recurrent_format = Format::kF32;
  const LayerSpec attention =
      LayerSpec::Sliding(window, static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim));
  for (uint64_t i = 0; i < num_layers; ++i) {
    const bool is_recurrent = recurrent[i % recurrent.size()];
    model->layers.push_back(is_recurrent ? LayerSpec::Recurrent(state) : attention);
  }
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_HYBRID_H_
