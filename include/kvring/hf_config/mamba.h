// kvring/hf_config/mamba.h: the readers of the hybrid families whose recurrent layers are
// Mamba mixers, as their transformers classes read them.
// - Mamba2 (Nemotron-H): layers_block_type (or hybrid_override_pattern) of mamba, attention, moe
//   and mlp blocks; a mamba block keeps a conv state of (conv_kernel - 1) x (mamba_num_heads x
//   mamba_head_dim + 2 x n_groups x ssm_state_size) and an SSM state of mamba_num_heads x
//   mamba_head_dim x ssm_state_size; moe and mlp blocks mix no sequence.
// - Mamba2 (Granite 4.0-H): layer_types of mamba and attention layers (default all mamba), the
//   mamba keys named mamba_n_heads, mamba_d_head ("auto": mamba_expand x hidden_size /
//   mamba_n_heads), mamba_d_state, mamba_n_groups, mamba_d_conv, the conv channels mamba_expand x
//   hidden_size + 2 x groups x state.
// - Mamba2 (Bamba): Granite 4.0-H's mamba keys and defaults; attention iff i is in
//   attn_layer_indices.
// - Mamba2 beside attention in every layer (Falcon-H1): each layer attends (full attention) and
//   keeps a Mamba2 state, its channels mamba_d_ssm (default 1024; null: mamba_expand x
//   hidden_size) + 2 x mamba_n_groups x mamba_d_state.
// - Mamba1 (Jamba): attention iff i % attn_layer_period == attn_layer_offset, else a mamba layer
//   keeping a conv state of (mamba_d_conv - 1) x intermediate and an SSM state of intermediate x
//   mamba_d_state, intermediate = mamba_expand x hidden_size.
// Conv states are counted as engines keep them (kernel - 1 columns; transformers keeps kernel).
// Zamba's and Zamba2's shared attention blocks are read in kvring/hf_config/zamba.h.
// Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_MAMBA_H_
#define KVRING_HF_CONFIG_MAMBA_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kvring/detail/checked_math.h"
#include "kvring/hf_config/hybrid.h"
#include "kvring/hf_config/layers.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// Returns a Mamba2 mixer's head dim: mamba_d_head, or "auto" (the default) width / heads. Fails
// (0 returned) as the classes refuse when the heads do not make the width, which `width_name`
// names in the message.
inline uint64_t ReadMambaHeadDim(const Scope& scope, uint64_t width, uint64_t heads,
                                 const std::string& width_name) {
  const Json* d_head = scope.Find("mamba_d_head");
  if (d_head == nullptr || *d_head == Json("auto")) {
    if (d_head == nullptr) scope.Record("mamba_d_head", "auto");
    if (width % heads == 0) return width / heads;
    scope.Fail("mamba_n_heads", std::to_string(heads) + " does not divide " + width_name + " " +
                                    std::to_string(width) + " (" + scope.ClassName() +
                                    " refuses it)");
    return 0;
  }
  const uint64_t head_dim = scope.ToUInt("mamba_d_head", *d_head, 1, kMaxDim);
  if (scope.Failed()) return 0;
  if (head_dim * heads == width) return head_dim;
  scope.Fail("mamba_d_head", std::to_string(head_dim) + " x mamba_n_heads " +
                                 std::to_string(heads) + " is not " + width_name + " " +
                                 std::to_string(width) + " (" + scope.ClassName() + " refuses it)");
  return 0;
}

// The keys a family names a Mamba2 mixer's heads, groups and state size by (for messages).
struct Mamba2Keys {
  const char* heads;
  const char* groups;
  const char* state;
};

// Returns one rank's Mamba2 state (HfReadOptions::tensor_parallel; vLLM's MambaMixer2: whole
// heads, each with its channels, and the groups split with them, or a single group given to
// every rank) of `width` channels (`heads` x head dim) with `groups` groups of `state_size` (B
// and C): a conv state of (kernel - 1) x (width + 2 x groups x state_size) BF16 elements and
// an SSM state of width x state_size in `recurrent_format`. Heads or groups that do not split
// fail at their key; so does a product that overflows 64 bits. Both sums stay below 2^62.
inline StateSpec Mamba2State(const Scope& scope, uint64_t width, uint64_t heads, uint64_t groups,
                             uint64_t state_size, uint64_t kernel, Format recurrent_format,
                             const Mamba2Keys& keys) {
  StateSpec state;
  const uint64_t ranks = scope.options().tensor_parallel;
  PerRank(scope, keys.heads, "", heads, "Mamba heads, each with its channels");
  if (scope.Failed()) return state;
  if (groups % ranks != 0 && groups != 1) {
    scope.Fail(keys.groups, std::to_string(groups) + " does not split across tensor_parallel " +
                                std::to_string(ranks) +
                                " ranks, and is not 1 (vLLM splits the groups with the heads, "
                                "or gives every rank the one group)");
    return state;
  }
  width /= ranks;  // heads divides it
  groups = groups % ranks == 0 ? groups / ranks : 1;
  const uint64_t bc = StateProduct(scope, keys.groups, {2, groups, state_size});
  if (scope.Failed()) return state;
  state.conv_elements = StateProduct(scope, keys.groups, {kernel - 1, width + bc});
  state.conv_format = Format::kBF16;
  state.recurrent_elements = StateProduct(scope, keys.state, {width, state_size});
  state.recurrent_format = recurrent_format;
  return state;
}

// Returns the value at `key`, or at its older name `alias` (NemotronHConfig renames mamba_*
// keys), or `fallback` when neither is given.
inline uint64_t ReadAliased(const Scope& scope, const char* key, const char* alias,
                            uint64_t fallback) {
  if (scope.Find(alias) != nullptr) return scope.OrDefault(alias, fallback, 1, kMaxDim);
  return scope.OrDefault(key, fallback, 1, kMaxDim);
}

// Returns a Nemotron-H Mamba2 block's state.
inline StateSpec ReadMamba2State(const Scope& scope) {
  const uint64_t heads = scope.OrDefault("mamba_num_heads", 128, 1, kMaxDim);
  const uint64_t head_dim = scope.OrDefault("mamba_head_dim", 64, 1, kMaxDim);
  const uint64_t state_size = scope.OrDefault("ssm_state_size", 128, 1, kMaxDim);
  const uint64_t groups = ReadAliased(scope, "n_groups", "mamba_n_groups", 8);
  const uint64_t kernel = ReadAliased(scope, "conv_kernel", "mamba_d_conv", 4);
  StateSpec state;
  if (scope.Failed()) return state;
  if (heads % groups != 0) {
    scope.Fail("n_groups", std::to_string(groups) + " does not divide mamba_num_heads " +
                               std::to_string(heads));
    return state;
  }
  return Mamba2State(scope, heads * head_dim, heads, groups, state_size, kernel,
                     ReadStateFormat(scope, Format::kF32),
                     {"mamba_num_heads", "n_groups", "ssm_state_size"});
}

// Returns Nemotron-H's block types: layers_block_type (or layer_types, its other name), else
// hybrid_override_pattern (M mamba, E moe, * attention, - mlp).
inline std::vector<std::string> ReadBlockTypes(const Scope& scope) {
  std::vector<std::string> types;
  for (const char* key : {"layers_block_type", "layer_types"}) {
    const Json* list = scope.Find(key);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array() || list->empty()) {
      scope.Fail(key, Mistyped(*list, "a list of block types"));
      return types;
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const Json& entry = (*list)[i];
      for (const char* name : {"mamba", "attention", "moe", "mlp"}) {
        if (entry == Json(name)) types.push_back(name);
      }
      if (types.size() != i + 1) {
        scope.Fail(std::string(key) + "[" + std::to_string(i) + "]",
                   Show(entry) + " is not mamba, attention, moe or mlp");
        return {};
      }
    }
    return types;
  }
  const Json* pattern = scope.Find("hybrid_override_pattern");
  if (pattern == nullptr || pattern->is_null()) {
    scope.Fail("layers_block_type", "is missing, and so is hybrid_override_pattern; " +
                                        scope.ClassName() +
                                        "'s default is a 4-block example, not a model");
    return types;
  }
  if (!pattern->is_string() || pattern->get<std::string>().empty()) {
    scope.Fail("hybrid_override_pattern", Mistyped(*pattern, "a string of M, E, * and -"));
    return types;
  }
  const std::string letters = pattern->get<std::string>();
  for (size_t i = 0; i < letters.size(); ++i) {
    const char c = letters[i];
    const char* name = c == 'M'   ? "mamba"
                       : c == 'E' ? "moe"
                       : c == '*' ? "attention"
                       : c == '-' ? "mlp"
                                  : nullptr;
    if (name == nullptr) {
      scope.Fail("hybrid_override_pattern",
                 Show(*pattern) + " has '" + Printable(std::string(1, c)) + "' at " +
                     std::to_string(i) + ", not M (mamba), E (moe), * (attention) or - (mlp)");
      return {};
    }
    types.push_back(name);
  }
  return types;
}

// Returns a Granite 4.0-H Mamba2 layer's state.
inline StateSpec ReadGraniteMambaState(const Scope& scope) {
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  const uint64_t heads = scope.OrDefault("mamba_n_heads", 128, 1, kMaxDim);
  const uint64_t expand = scope.OrDefault("mamba_expand", 2, 1, kMaxDim);
  const uint64_t state_size = scope.OrDefault("mamba_d_state", 256, 1, kMaxDim);
  const uint64_t groups = scope.OrDefault("mamba_n_groups", 1, 1, kMaxDim);
  const uint64_t kernel = scope.OrDefault("mamba_d_conv", 4, 1, kMaxDim);
  StateSpec state;
  if (scope.Failed()) return state;
  const uint64_t intermediate = StateProduct(scope, "mamba_expand", {expand, hidden});
  if (scope.Failed()) return state;
  ReadMambaHeadDim(scope, intermediate, heads, "mamba_expand x hidden_size");  // heads x it
  if (scope.Failed()) return state;
  return Mamba2State(scope, intermediate, heads, groups, state_size, kernel, ReadStateFormat(scope),
                     {"mamba_n_heads", "mamba_n_groups", "mamba_d_state"});
}

// Returns Granite 4.0-H's layer kinds: layer_types of "mamba" and "attention", every layer
// mamba without them.
inline std::vector<std::string> ReadGraniteLayerTypes(const Scope& scope) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  std::vector<std::string> types;
  if (scope.Failed()) return types;
  const Json* list = scope.LayerList("layer_types", num_layers);
  if (scope.Failed()) return types;
  if (list == nullptr) return std::vector<std::string>(num_layers, "mamba");
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& entry = (*list)[i];
    if (entry != Json("mamba") && entry != Json("attention")) {
      scope.Fail("layer_types[" + std::to_string(i) + "]",
                 Show(entry) + " is not mamba or attention (" + scope.ClassName() + ")");
      return {};
    }
    types.push_back(entry.get<std::string>());
  }
  return types;
}

// Returns Bamba's layer kinds: "attention" iff i is in attn_layer_indices, else "mamba" (the
// list absent, null or empty: every layer mamba; an index past the last layer, which
// transformers silently ignores, is refused). BambaConfig computes layers_block_type (and
// layer_types, its other name) from the indices and has no setter for it: a file that gives
// either is refused, as the class refuses it.
inline std::vector<std::string> ReadBambaLayerTypes(const Scope& scope) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  std::vector<std::string> types;
  if (scope.Failed()) return types;
  for (const char* key : {"layers_block_type", "layer_types"}) {
    if (scope.Find(key) == nullptr) continue;
    scope.Fail(key, "is given, but " + scope.ClassName() +
                        " computes the layer kinds from attn_layer_indices and refuses a list");
    return types;
  }
  types.assign(num_layers, "mamba");
  const std::optional<std::vector<bool>> attention =
      scope.LayerIndices("attn_layer_indices", num_layers);
  if (scope.Failed()) return {};
  for (size_t i = 0; attention && i < num_layers; ++i) {
    if ((*attention)[i]) types[i] = "attention";
  }
  return types;
}

// Reads a Mamba2 hybrid (Nemotron-H; Granite 4.0-H and Bamba, whose Mamba keys are alike) of
// `scope` into *model.
inline void ReadMamba2Hybrid(const Scope& scope, HfModel* model) {
  const std::string family = scope.family().model_type;
  const bool bamba = family == "bamba";
  const bool granite = bamba || family == "granitemoehybrid";
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  const std::vector<std::string> types = bamba     ? ReadBambaLayerTypes(scope)
                                         : granite ? ReadGraniteLayerTypes(scope)
                                                   : ReadBlockTypes(scope);
  if (scope.Failed()) return;
  if (types.size() > kMaxLayers) {
    scope.Fail("layers_block_type", "has too many blocks");
    return;
  }
  // num_hidden_layers is deprecated there: the block list decides (transformers warns).
  bool has_attention = false, has_mamba = false;
  for (const std::string& type : types) {
    has_attention |= type == "attention";
    has_mamba |= type == "mamba";
  }
  LayerSpec attention;
  if (has_attention) attention = ReadShape(scope, num_heads);
  StateSpec mamba;
  if (has_mamba) mamba = granite ? ReadGraniteMambaState(scope) : ReadMamba2State(scope);
  if (scope.Failed()) return;
  for (const std::string& type : types) {
    if (type == "attention") {
      model->layers.push_back(attention);
    } else {
      model->layers.push_back(LayerSpec::Recurrent(type == "mamba" ? mamba : StateSpec()));
    }
  }
}

// Returns a Falcon-H1 layer's Mamba2 state: intermediate = mamba_d_ssm (default 1024; null:
// mamba_expand x hidden_size), split into mamba_n_heads heads of mamba_d_head ("auto": the
// quotient), conv channels intermediate + 2 x mamba_n_groups x mamba_d_state.
inline StateSpec ReadFalconH1State(const Scope& scope) {
  const std::optional<uint64_t> d_ssm =
      scope.NullableOrDefault("mamba_d_ssm", 1024, 1, kMaxDim * kMaxDim);
  const uint64_t heads = scope.OrDefault("mamba_n_heads", 128, 1, kMaxDim);
  const uint64_t state_size = scope.OrDefault("mamba_d_state", 256, 1, kMaxDim);
  const uint64_t groups = scope.OrDefault("mamba_n_groups", 1, 1, kMaxDim);
  const uint64_t kernel = scope.OrDefault("mamba_d_conv", 4, 1, kMaxDim);
  StateSpec state;
  if (scope.Failed()) return state;
  uint64_t intermediate = d_ssm.value_or(0);
  if (!d_ssm) {  // null: mamba_expand x hidden_size
    const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
    const uint64_t expand = scope.OrDefault("mamba_expand", 2, 1, kMaxDim);
    intermediate = StateProduct(scope, "mamba_expand", {expand, hidden});
  }
  if (scope.Failed()) return state;
  ReadMambaHeadDim(scope, intermediate, heads, "the Mamba width");
  if (scope.Failed()) return state;
  return Mamba2State(scope, intermediate, heads, groups, state_size, kernel, Format::kBF16,
                     {"mamba_n_heads", "mamba_n_groups", "mamba_d_state"});
}

// Reads a Falcon-H1 model of `scope` into *model: every layer full attention beside a Mamba2
// mixer (a hybrid layer, LayerSpec::WithState).
inline void ReadFalconH1(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  if (scope.Failed()) return;
  const LayerSpec attention = ReadShape(scope, num_heads);
  const StateSpec mamba = ReadFalconH1State(scope);
  if (scope.Failed()) return;
  model->layers.assign(num_layers, attention.WithState(mamba));
}

// The keys a family names a Mamba1 mixer's expansion, SSM state size and conv kernel by (the
// class defaults are 2, 16 and 4 in every family), and the key of its width when the family's
// mixer reads one (nullptr: expand x hidden_size always).
struct Mamba1Keys {
  const char* expand;
  const char* state;
  const char* kernel;
  const char* width;
};

// Returns a Mamba1 mixer's state (Jamba's mamba layers by default; Mamba's and Falcon Mamba's
// keys are expand, state_size and conv_kernel, and their file's intermediate_size replaces
// expand x hidden_size, as transformers sets it after computing its own): a conv state of
// (kernel - 1) x width and an SSM state of width x state size, BF16.
inline StateSpec ReadMamba1State(const Scope& scope,
                                 const Mamba1Keys& keys = {"mamba_expand", "mamba_d_state",
                                                           "mamba_d_conv", nullptr}) {
  const uint64_t state_size = scope.OrDefault(keys.state, 16, 1, kMaxDim);
  const uint64_t kernel = scope.OrDefault(keys.kernel, 4, 1, kMaxDim);
  StateSpec state;
  if (scope.Failed()) return state;
  const bool given = keys.width != nullptr && scope.Find(keys.width) != nullptr;
  const char* width_key = given ? keys.width : keys.expand;
  uint64_t intermediate = 0;
  if (given) {
    intermediate = scope.Required(keys.width, 1, kMaxDim * kMaxDim);
  } else {
    const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
    const uint64_t expand = scope.OrDefault(keys.expand, 2, 1, kMaxDim);
    if (scope.Failed()) return state;
    intermediate = StateProduct(scope, keys.expand, {expand, hidden});
  }
  if (scope.Failed()) return state;
  // One rank's share (vLLM's MambaMixer: whole channels).
  intermediate = PerRank(scope, width_key,
                         given ? std::string(width_key) : std::string(width_key) + " x hidden_size",
                         intermediate, "channels");
  if (scope.Failed()) return state;
  state.conv_elements = StateProduct(scope, keys.kernel, {kernel - 1, intermediate});
  state.conv_format = Format::kBF16;
  state.recurrent_elements = StateProduct(scope, keys.state, {intermediate, state_size});
  state.recurrent_format = Format::kBF16;
  return state;
}

// Returns `offset_key` read below `period_key` (both with their class defaults), failing as
// JambaConfig does when the offset is not below the period.
inline uint64_t ReadPeriodOffset(const Scope& scope, const char* period_key,
                                 uint64_t period_default, const char* offset_key,
                                 uint64_t offset_default, uint64_t* period) {
  *period = scope.OrDefault(period_key, period_default, 1, kMaxLayers);
  const uint64_t offset = scope.OrDefault(offset_key, offset_default, 0, kMaxLayers);
  if (!scope.Failed() && offset >= *period) {
    scope.Fail(offset_key, std::to_string(offset) + " is not below " + period_key + " " +
                               std::to_string(*period) + " (" + scope.ClassName() + " refuses it)");
  }
  return offset;
}

// Reads a Jamba model of `scope` into *model.
inline void ReadJamba(const Scope& scope, HfModel* model) {
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t num_heads = ReadHeadsAndContext(scope, nullptr, model);
  uint64_t period = 1, expert_period = 1;
  const uint64_t offset =
      ReadPeriodOffset(scope, "attn_layer_period", 8, "attn_layer_offset", 4, &period);
  ReadPeriodOffset(scope, "expert_layer_period", 2, "expert_layer_offset", 1, &expert_period);
  if (scope.Failed()) return;
  bool has_attention = false, has_mamba = false;
  for (uint64_t i = 0; i < num_layers; ++i) {
    has_attention |= i % period == offset;
    has_mamba |= i % period != offset;
  }
  LayerSpec attention;
  if (has_attention) attention = ReadShape(scope, num_heads);
  StateSpec mamba;
  if (has_mamba) mamba = ReadMamba1State(scope);
  if (scope.Failed()) return;
  for (uint64_t i = 0; i < num_layers; ++i) {
    model->layers.push_back(i % period == offset ? attention : LayerSpec::Recurrent(mamba));
  }
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_MAMBA_H_
