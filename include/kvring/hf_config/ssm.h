// kvring/hf_config/ssm.h: the readers of the families whose every layer is recurrent (a Mamba
// mixer, an mLSTM) and none attends, as their transformers classes read them.
// - Mamba1 (mamba, falcon_mamba): each layer keeps a conv state of (conv_kernel - 1) x
//   intermediate and an SSM state of intermediate x state_size, intermediate = the file's
//   intermediate_size, else expand x hidden_size (Falcon Mamba 7B's file says expand 16 and
//   intermediate_size 8192 over hidden 4096: the model is 8192 wide).
// - mLSTM (xlstm): each block keeps a matrix memory per head (ReadXlstm).
// - Mamba2 (mamba2): each layer keeps Mamba2's state of num_heads x head_dim channels (which
//   must be expand x hidden_size) in n_groups groups of state_size.
// - RWKV (rwkv, RWKV-4): each layer keeps the previous position's input of its time mix and its
//   channel mix (a token shift: a conv of one column over 2 x hidden_size channels) and its
//   WKV state, a numerator, a denominator and a running maximum per channel, in F32 (ReadRwkv).
// The classes but RWKV's name no context length (no layer attends, so the states do not grow
// with it): HfModel::max_context is 0 unless the file gives max_position_embeddings. The Mamba
// classes compute layer_types ("mamba" for every layer) and cannot set it: a file that gives it is
// refused, as the classes refuse it.
// Part of kvring/hf_config.h; needs nlohmann-json. Throws nothing (scope.h).
#ifndef KVRING_HF_CONFIG_SSM_H_
#define KVRING_HF_CONFIG_SSM_H_

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "kvring/hf_config/hybrid.h"
#include "kvring/hf_config/mamba.h"
#include "kvring/hf_config/reader.h"
#include "kvring/hf_config/scope.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace detail {
namespace hf {

// Returns a Mamba2 model's layer state: num_heads (default 128) heads of head_dim (64), which
// the class requires to make expand (2) x hidden_size, in n_groups (8) groups of state_size
// (128), conv_kernel (4) columns, both states in the model's type (BF16). Groups that do not divide
// the heads are refused (the mixer repeats each group's B and C over num_heads / n_groups heads).
inline StateSpec ReadMamba2OnlyState(const Scope& scope) {
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  const uint64_t expand = scope.OrDefault("expand", 2, 1, kMaxDim);
  const uint64_t heads = scope.OrDefault("num_heads", 128, 1, kMaxDim);
  const uint64_t head_dim = scope.OrDefault("head_dim", 64, 1, kMaxDim);
  const uint64_t state_size = scope.OrDefault("state_size", 128, 1, kMaxDim);
  const uint64_t groups = scope.OrDefault("n_groups", 8, 1, kMaxDim);
  const uint64_t kernel = scope.OrDefault("conv_kernel", 4, 1, kMaxDim);
  StateSpec state;
  if (scope.Failed()) return state;
  const uint64_t width = StateProduct(scope, "expand", {expand, hidden});
  if (scope.Failed()) return state;
  if (heads * head_dim != width) {  // both below 2^20
    scope.Fail("num_heads", std::to_string(heads) + " x head_dim " + std::to_string(head_dim) +
                                " is not expand x hidden_size " + std::to_string(width) + " (" +
                                scope.ClassName() + " refuses it)");
    return state;
  }
  if (heads % groups != 0) {
    scope.Fail("n_groups",
               std::to_string(groups) + " does not divide num_heads " + std::to_string(heads));
    return state;
  }
  return Mamba2State(scope, width, heads, groups, state_size, kernel, Format::kBF16,
                     {"num_heads", "n_groups", "state_size"});
}

// Reads a Mamba, Falcon Mamba or Mamba2 model of `scope` into *model: every layer a state, no
// attention (num_attention_heads is not read; a file's, which the classes ignore, neither).
inline void ReadStateSpace(const Scope& scope, HfModel* model) {
  NameFamily(scope, model);
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  if (scope.Failed()) return;
  if (scope.Find("layer_types") != nullptr) {
    scope.Fail("layer_types", "is given, but " + scope.ClassName() +
                                  " makes every layer mamba and refuses a list");
    return;
  }
  ReadStatedContext(scope, "no layer attends", model);
  const bool mamba2 = std::string(scope.family().model_type) == "mamba2";
  const StateSpec state =
      mamba2 ? ReadMamba2OnlyState(scope)
             : ReadMamba1State(scope, {"expand", "state_size", "conv_kernel", "intermediate_size"});
  if (scope.Failed()) return;
  model->layers.assign(num_layers, LayerSpec::Recurrent(state));
}

// Returns Python's round_up_to_next_multiple_of(x, 64) of xLSTMConfig: int(((x + 63) // 64) *
// 64) of a float x.
inline uint64_t RoundUpTo64(double x) {
  return static_cast<uint64_t>(std::floor((x + 63) / 64) * 64);
}

// Reads an xLSTM model of `scope` into *model: num_blocks (else num_hidden_layers) mLSTM blocks,
// each keeping, per head of num_heads (default 8), a matrix memory of qk_head_dim x v_head_dim,
// a normalizer of qk_head_dim and a stabilizer, in inference_state_dtype (default "float32":
// F32; "bfloat16" BF16); the layer's qk_dim = int(hidden_size x qk_dim_factor) (default 0.5)
// and v_dim = int(hidden_size x v_dim_factor) (1.0), split over the heads. xLSTMCache sizes the
// states by the same products rounded up to multiples of 64: a file where the two differ, or
// whose dims the heads do not divide, builds a model that fails on its first token (refused).
// No conv state, no attention, no context named (as Mamba's).
inline void ReadXlstm(const Scope& scope, HfModel* model) {
  NameFamily(scope, model);
  // The model builds num_blocks blocks (None: num_hidden_layers), its cache num_hidden_layers
  // states: both given must agree.
  const char* blocks_key = scope.IsSet("num_blocks") ? "num_blocks" : "num_hidden_layers";
  const uint64_t num_blocks = scope.Required(blocks_key, 1, kMaxLayers);
  if (!scope.Failed() && scope.IsSet("num_blocks") && scope.IsSet("num_hidden_layers")) {
    const uint64_t layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
    if (!scope.Failed() && layers != num_blocks) {
      scope.Fail("num_blocks", std::to_string(num_blocks) + " is not num_hidden_layers " +
                                   std::to_string(layers) + " (the model builds num_blocks " +
                                   "blocks, its cache num_hidden_layers states)");
    }
  }
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim);
  const uint64_t heads = scope.OrDefault("num_heads", 8, 1, kMaxDim);
  const double qk_factor = scope.PositiveOrDefault("qk_dim_factor", 0.5, 64);
  const double v_factor = scope.PositiveOrDefault("v_dim_factor", 1.0, 64);
  if (scope.Failed()) return;
  ReadStatedContext(scope, "no layer attends", model);
  Format format = Format::kF32;
  if (const Json* dtype = scope.Find("inference_state_dtype")) {
    if (*dtype == Json("bfloat16") || *dtype == Json("float16")) {
      format = Format::kBF16;
    } else if (*dtype != Json("float32")) {
      scope.Fail("inference_state_dtype",
                 Show(*dtype) + " is not \"float32\", \"bfloat16\" or \"float16\"");
      return;
    }
  } else {
    scope.Record("inference_state_dtype", "float32");
  }
  uint64_t dims[2] = {0, 0};  // qk_dim, v_dim
  const char* factor_keys[2] = {"qk_dim_factor", "v_dim_factor"};
  const double factors[2] = {qk_factor, v_factor};
  for (int d = 0; d < 2; ++d) {
    const double product = static_cast<double>(hidden) * factors[d];
    dims[d] = static_cast<uint64_t>(product);  // Python's int(): toward zero
    if (dims[d] == 0 || dims[d] != RoundUpTo64(product) || dims[d] % heads != 0) {
      scope.Fail(factor_keys[d], "makes hidden_size x it " + std::to_string(dims[d]) +
                                     ", which is not a multiple of 64 (xLSTMCache rounds it up) "
                                     "split whole across num_heads " +
                                     std::to_string(heads));
      return;
    }
  }
  const uint64_t qk_head_dim = dims[0] / heads;
  const uint64_t v_head_dim = dims[1] / heads;
  const uint64_t rank_heads = PerRank(scope, "num_heads", "", heads, "mLSTM heads");
  if (scope.Failed()) return;
  StateSpec state;
  state.conv_format = Format::kBF16;
  state.recurrent_elements =
      StateProduct(scope, "num_heads", {rank_heads, qk_head_dim * v_head_dim + qk_head_dim + 1});
  state.recurrent_format = format;
  if (scope.Failed()) return;
  model->layers.assign(num_blocks, LayerSpec::Recurrent(state));
}

// Reads an RWKV model (RWKV-4) of `scope` into *model: num_hidden_layers blocks, none attending.
// Each keeps 2 x hidden_size inputs of the previous position (its time mix's and its channel
// mix's token shift) in the model's type (BF16) as its conv state, and 3 x hidden_size WKV
// state values (numerator, denominator and running maximum) in F32, as RwkvModel allocates
// them. RwkvModel keeps the WKV state in hidden_size columns whatever attention_hidden_size
// (default hidden_size) says: a file where the two differ builds a model whose cached forward
// fails (refused). The context is RwkvConfig's context_length (default 1024;
// max_position_embeddings is its alias), which no layer's memory grows with. Under tensor
// parallelism each rank keeps its share of the WKV channels and the shifted inputs whole (every
// rank mixes the whole input).
inline void ReadRwkv(const Scope& scope, HfModel* model) {
  NameFamily(scope, model);
  const uint64_t num_layers = scope.Required("num_hidden_layers", 1, kMaxLayers);
  const uint64_t hidden = scope.Required("hidden_size", 1, kMaxDim * kMaxDim);
  const char* context_key = SizeKey(scope, "max_position_embeddings", "context_length");
  model->max_context =
      scope.OrDefault(context_key, scope.family().max_position_embeddings, 1, UINT64_MAX);
  const std::optional<uint64_t> attention =
      scope.NullableOrDefault("attention_hidden_size", hidden, 1, kMaxDim * kMaxDim);
  if (scope.Failed()) return;
  if (attention.value_or(hidden) != hidden) {
    scope.Fail("attention_hidden_size",
               std::to_string(*attention) + " is not hidden_size " + std::to_string(hidden) +
                   " (RwkvModel keeps the WKV state in hidden_size columns: its cached forward "
                   "fails)");
    return;
  }
  const uint64_t rank_channels = PerRank(scope, "hidden_size", "", hidden, "WKV channels");
  if (scope.Failed()) return;
  StateSpec state;
  state.conv_elements = StateProduct(scope, "hidden_size", {2, hidden});
  state.conv_format = Format::kBF16;
  state.recurrent_elements = StateProduct(scope, "hidden_size", {3, rank_channels});
  state.recurrent_format = Format::kF32;
  if (scope.Failed()) return;
  model->layers.assign(num_layers, LayerSpec::Recurrent(state));
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_SSM_H_
