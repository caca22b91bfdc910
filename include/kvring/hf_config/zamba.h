// kvring/hf_config/zamba.h: the readers of Zyphra's Zamba families, whose layers are Mamba
// mixers with one shared attention block run in some of them, as their transformers classes
// read them.
// - Zamba: blocks mamba, mamba, hybrid, then hybrid iff (i - 3) % attn_layer_period ==
//   attn_layer_offset; every block keeps a multi-head Mamba1 state (a conv state of
//   (mamba_d_conv - 1) x intermediate and an SSM state of intermediate x mamba_d_state,
//   intermediate = mamba_expand x hidden_size in n_mamba_heads heads), a hybrid block also
//   attends (K/V of its own per layer).
// - Zamba2: layers_block_type of mamba and hybrid blocks; every block keeps a Mamba2 state, a
//   hybrid block also attends.
// Conv states are counted as engines keep them (kernel - 1 columns; transformers keeps kernel).
// Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_ZAMBA_H_
#define KVRING_HF_CONFIG_ZAMBA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvring/hf_config/mamba.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// Returns the head dim of Zamba's and Zamba2's shared attention block, which reads the hidden
// state and the embeddings side by side: head_dim and attention_head_dim name it (the class's
// attribute map), `first` of the two winning when a file gives both; else 2 x hidden_size /
// num_attention_heads. `second_or`: the second key's null and 0 also derive it (ZambaConfig's
// `attention_head_dim or ...`); any other null or 0 is refused (the block would have no head
// dim). 0 after a failure.
inline uint64_t ReadSharedHeadDim(const Scope& scope, uint64_t hidden, uint64_t num_heads,
                                  const char* first, const char* second, bool second_or) {
  if (scope.Find(first) != nullptr) return scope.Required(first, 1, kMaxDim);
  const Json* value = scope.Find(second);
  const bool unset = value == nullptr || (second_or && (value->is_null() || *value == Json(0)));
  if (!unset) return scope.Required(second, 1, kMaxDim);
  const uint64_t head_dim = 2 * hidden / num_heads;
  if (head_dim == 0 || head_dim > kMaxDim) {
    scope.Fail("num_attention_heads", std::to_string(num_heads) + " leaves 2 x hidden_size " +
                                          std::to_string(2 * hidden) + " no head dim");
    return 0;
  }
  scope.Record(second, "2 x hidden_size / num_attention_heads (" + std::to_string(head_dim) + ")");
  return head_dim;
}

// Reads a Zamba family's block list into *hybrid (true: a hybrid block): layers_block_type, or
// layer_types (its other name), of "mamba" and "hybrid" (other names transformers allows would
// make a mamba block silently: refused). False when the file lists none (or after a failure).
inline bool ReadListedBlocks(const Scope& scope, uint64_t num_layers, std::vector<bool>* hybrid) {
  for (const char* key : {"layers_block_type", "layer_types"}) {
    const Json* list = scope.LayerList(key, num_layers);
    if (scope.Failed()) return false;
    if (list == nullptr) continue;
    *hybrid = scope.LayerChoices(key, *list, Json("hybrid"), Json("mamba"),
                                 "mamba or hybrid (" + scope.ClassName() + ")");
    return !scope.Failed();
  }
  return false;
}

// Returns a Zamba block's multi-head Mamba1 state: mamba_expand x hidden_size channels in
// n_mamba_heads heads (ZambaConfig refuses heads that do not divide them), a conv state of
// (mamba_d_conv - 1) x channels and an SSM state of channels x mamba_d_state, BF16. One rank
// of HfReadOptions::tensor_parallel keeps whole heads (vLLM has no Zamba; its Mamba1 mixer
// splits the channels).
inline StateSpec ReadZambaState(const Scope& scope, uint64_t hidden) {
  const uint64_t expand = scope.OrDefault("mamba_expand", 2, 1, kMaxDim);
  const uint64_t heads = scope.OrDefault("n_mamba_heads", 2, 1, kMaxDim);
  const uint64_t state_size = scope.OrDefault("mamba_d_state", 16, 1, kMaxDim);
  const uint64_t kernel = scope.OrDefault("mamba_d_conv", 4, 1, kMaxDim);
  StateSpec state;
  if (scope.Failed()) return state;
  uint64_t channels = StateProduct(scope, "mamba_expand", {expand, hidden});
  if (!scope.Failed() && channels % heads != 0) {
    scope.Fail("n_mamba_heads", std::to_string(heads) + " does not divide mamba_expand x " +
                                    "hidden_size " + std::to_string(channels) + " (" +
                                    scope.ClassName() + " refuses it)");
  }
  if (scope.Failed()) return state;
  channels = channels / heads * PerRank(scope, "n_mamba_heads", "", heads, "Mamba heads");
  if (scope.Failed()) return state;
  state.conv_elements = StateProduct(scope, "mamba_d_conv", {kernel - 1, channels});
  state.conv_format = Format::kBF16;
  state.recurrent_elements = StateProduct(scope, "mamba_d_state", {channels, state_size});
  state.recurrent_format = Format::kBF16;
  return state;
}

// Reads a Zamba model of `scope` into *model. Its blocks: the file's list (ReadListedBlocks),
// else ZambaConfig's: mamba, mamba, hybrid, then hybrid iff (i - 3) % attn_layer_period ==
// attn_layer_offset, 3 blocks below 3 layers (which the class then refuses). A hybrid block runs
// the shared attention block (num_key_value_heads of ReadSharedHeadDim) before its Mamba mixer,
// so it keeps both.
inline void ReadZamba(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  const uint64_t period = scope.OrDefault("attn_layer_period", 6, 1, kMaxLayers);
  const uint64_t offset = scope.OrDefault("attn_layer_offset", 4, 0, kMaxLayers);
  if (scope.Failed()) return;
  std::vector<bool> hybrid(num_layers, false);
  const bool listed = ReadListedBlocks(scope, num_layers, &hybrid);
  if (scope.Failed()) return;
  if (!listed && num_layers < 3) {
    scope.Fail("num_hidden_layers", std::to_string(num_layers) +
                                        " is below 3: " + scope.ClassName() +
                                        "'s block list always starts mamba, mamba, hybrid (3 "
                                        "blocks), and it refuses the count");
    return;
  }
  const uint64_t kv_heads = ReadKvHeads(scope, num_heads);
  const uint64_t head_dim =
      ReadSharedHeadDim(scope, hidden, num_heads, "head_dim", "attention_head_dim", true);
  const StateSpec mamba = ReadZambaState(scope, hidden);
  if (scope.Failed()) return;
  const LayerSpec attention =
      LayerSpec::Global(static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim));
  if (!listed) {
    for (uint64_t i = 2; i < num_layers; ++i) hybrid[i] = i == 2 || (i - 3) % period == offset;
  }
  for (bool is_hybrid : hybrid) {
    model->layers.push_back(is_hybrid ? attention.WithState(mamba) : LayerSpec::Recurrent(mamba));
  }
}

// Returns a Zamba2 Mamba2 state: n_mamba_heads heads of mamba_expand x hidden_size / heads,
// conv channels mamba_expand x hidden_size + 2 x mamba_ngroups x mamba_d_state.
inline StateSpec ReadZamba2State(const Scope& scope, uint64_t hidden) {
  const uint64_t expand = scope.OrDefault("mamba_expand", 2, 1, kMaxDim);
  const uint64_t heads = scope.OrDefault("n_mamba_heads", 8, 1, kMaxDim);
  const uint64_t state_size = scope.OrDefault("mamba_d_state", 64, 1, kMaxDim);
  const uint64_t groups = scope.OrDefault("mamba_ngroups", 1, 1, kMaxDim);
  const uint64_t kernel = scope.OrDefault("mamba_d_conv", 4, 1, kMaxDim);
  StateSpec state;
  if (scope.Failed()) return state;
  const uint64_t intermediate = StateProduct(scope, "mamba_expand", {expand, hidden});
  if (!scope.Failed() && intermediate % heads != 0) {
    scope.Fail("n_mamba_heads", std::to_string(heads) + " does not divide mamba_expand x " +
                                    "hidden_size " + std::to_string(intermediate) +
                                    " (the Mamba head dim would be cut)");
  }
  if (scope.Failed()) return state;
  return Mamba2State(scope, intermediate, heads, groups, state_size, kernel, Format::kBF16,
                     {"n_mamba_heads", "mamba_ngroups", "mamba_d_state"});
}

// Returns Zamba2's block types (true: hybrid): the file's list, else the class default, the 54
// blocks of Zamba2-2.7B (refused for another num_hidden_layers).
inline std::vector<bool> ReadZamba2Hybrid(const Scope& scope, uint64_t num_layers) {
  std::vector<bool> hybrid(num_layers, false);
  if (ReadListedBlocks(scope, num_layers, &hybrid) || scope.Failed()) return hybrid;
  if (num_layers != 54) {
    scope.Fail("layers_block_type", "is missing; " + scope.ClassName() +
                                        "'s default lists the 54 blocks of Zamba2-2.7B, but "
                                        "num_hidden_layers is " +
                                        std::to_string(num_layers));
    return hybrid;
  }
  scope.Record("layers_block_type", "Zamba2-2.7B's 54 blocks");
  // mamba, then 7 x (5 mamba, hybrid), 4 mamba, hybrid, 3 mamba, hybrid, 2 mamba.
  for (size_t i = 0; i < 7; ++i) hybrid[6 + 6 * i] = true;
  hybrid[47] = true;
  hybrid[51] = true;
  return hybrid;
}

// Reads a Zamba2 model of `scope` into *model: mamba blocks keep a Mamba2 state; a hybrid block
// runs the shared attention block (K/V of its own per layer, heads of head_dim, whose class
// value is 2 x hidden_size / num_attention_heads: the block reads the hidden state and the
// embeddings side by side) before its Mamba2 mixer, so it keeps both.
inline void ReadZamba2(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  // use_long_context replaces max_position_embeddings, the file's too, with 16384.
  const Json* long_context = scope.Find("use_long_context");
  const bool long_16k = long_context != nullptr && *long_context == Json(true);
  if (long_16k) scope.Record("max_position_embeddings", "16384 (use_long_context)");
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  if (scope.Failed()) return;
  if (long_16k) model->max_context = 16384;
  const std::vector<bool> hybrid = ReadZamba2Hybrid(scope, num_layers);
  const uint64_t kv_heads = ReadKvHeads(scope, num_heads);
  const StateSpec mamba = ReadZamba2State(scope, hidden);
  if (scope.Failed()) return;
  const uint64_t head_dim =
      ReadSharedHeadDim(scope, hidden, num_heads, "attention_head_dim", "head_dim", false);
  if (scope.Failed()) return;
  const LayerSpec attention =
      LayerSpec::Global(static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim));
  for (bool is_hybrid : hybrid) {
    model->layers.push_back(is_hybrid ? attention.WithState(mamba) : LayerSpec::Recurrent(mamba));
  }
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_ZAMBA_H_
