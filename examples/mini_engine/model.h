// The mini engine's model, shared by the examples that run it (mini_engine.cc: one sequence on
// a KVCache; serve/serve.cc: many sequences in a KVPool): its configuration, its layers as
// kvring describes them, seeded random weights, and the forward pass of a step, whose
// per-layer K/V writes and attention call the caller makes on its own storage (Forward's
// `attend`). Every piece computes a token's row from that token's row alone, adding in a fixed
// order (MatMul: kernels.h), so a token's logits are the same bits whichever tokens, of its
// own sequence or of others, share its step.
#ifndef KVRING_EXAMPLES_MINI_ENGINE_MODEL_H_
#define KVRING_EXAMPLES_MINI_ENGINE_MODEL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kvring/kvring.h"
#include "mini_engine/kernels.h"
#include "mini_engine/options.h"

namespace mini_engine {

// The model's shape and weights' seed.
struct ModelConfig {
  uint32_t vocab = 384;
  uint32_t hidden = 256;
  uint32_t mlp = 512;
  uint32_t num_q_heads = 4;
  uint32_t num_kv_heads = 2;  // GQA: two q heads per kv_head
  uint32_t head_dim = 64;     // kvring's kernels take multiples of 16
  uint64_t window = 64;       // sliding layers' window
  uint32_t seed = 1;
  uint64_t k_outliers = 0;  // > 1: four K channels of each kv_head this many times larger
                            // (and the queries' same channels as many times smaller)
  // The global layers' own shape, as Gemma 4 gives them (31B: head dim 512 on 4 kv_heads,
  // against 256 on 16 for its sliding layers); 0: the sliding layers' head_dim, num_kv_heads.
  uint32_t global_head_dim = 0;
  uint32_t global_kv_heads = 0;
  // A hybrid model: layers 1-3 are recurrent (IsRecurrent), as Qwen3.5's 3 linear : 1 full.
  bool hybrid = false;
};

// --hidden and --mlp, the model's widths, multiples of 16 (what MatMul takes): a narrower
// model runs the same cache checks in less time (the examples' tests under emulation, where
// the model's products took most of it).
inline void AddWidthOptions(Options* options, ModelConfig* c) {
  options->Number("hidden", &c->hidden, "model width (256), a multiple of 16", 16, 4096, 16);
  options->Number("mlp", &c->mlp, "MLP width (512), a multiple of 16", 16, 16384, 16);
}

// ---------------------------------------------------------------------------------------------
// The layers: Gemma 3n's pattern in ten layers. Layers 0-5 own their K/V (sliding, sliding,
// sliding, sliding, global, sliding); layers 6-9 compute queries only and read the K/V of the
// last owner of their kind (6-8 sliding read layer 5, 9 global reads layer 4), as Gemma 3n's
// last num_kv_shared_layers do.

constexpr size_t kNumLayers = 10;
constexpr int32_t kSharedSource[kNumLayers] = {-1, -1, -1, -1, -1, -1, 5, 5, 5, 4};
constexpr bool kGlobal[kNumLayers] = {false, false, false, false, true,
                                      false, false, false, false, true};

// The global owner, whose shape every global layer has (layer 9 reads it).
constexpr size_t kGlobalOwner = 4;
static_assert(kGlobal[kGlobalOwner] && kSharedSource[kGlobalOwner] < 0, "a global owner");

inline bool OwnsKV(size_t layer) { return kSharedSource[layer] < 0; }

// The hybrid variant's recurrent layers: sliding owners no consumer reads. Each keeps a state
// instead of K/V: a short convolution over its input (the last kConvTaps - 1 inputs) and a
// gated linear recurrence (Recur).
inline bool IsRecurrent(const ModelConfig& c, size_t layer) {
  return c.hybrid && layer >= 1 && layer <= 3;
}
constexpr size_t kConvTaps = 3;

// The head dim and kv_heads of `layer` (a consumer has its owner's kind, so its shape).
inline uint32_t HeadDimOf(const ModelConfig& c, size_t layer) {
  return kGlobal[layer] && c.global_head_dim != 0 ? c.global_head_dim : c.head_dim;
}
inline uint32_t KVHeadsOf(const ModelConfig& c, size_t layer) {
  return kGlobal[layer] && c.global_kv_heads != 0 ? c.global_kv_heads : c.num_kv_heads;
}

// Returns the model's attention layers as kvring describes them.
inline std::vector<kvring::LayerSpec> LayerSpecs(const ModelConfig& c) {
  std::vector<kvring::LayerSpec> specs;
  for (size_t layer = 0; layer < kNumLayers; ++layer) {
    const uint32_t kv_heads = KVHeadsOf(c, layer), head_dim = HeadDimOf(c, layer);
    kvring::LayerSpec spec = kGlobal[layer]
                                 ? kvring::LayerSpec::Global(kv_heads, head_dim)
                                 : kvring::LayerSpec::Sliding(c.window, kv_heads, head_dim);
    if (kSharedSource[layer] >= 0) spec = spec.SharedFrom(kSharedSource[layer]);
    if (IsRecurrent(c, layer)) {
      // A recurrent layer's per-sequence memory: its conv window and its state, in F32.
      const uint64_t dim = uint64_t{c.num_q_heads} * head_dim;
      kvring::StateSpec state;
      state.conv_elements = (kConvTaps - 1) * dim;
      state.conv_format = kvring::Format::kF32;
      state.recurrent_elements = dim;
      state.recurrent_format = kvring::Format::kF32;
      spec = kvring::LayerSpec::Recurrent(state);
    }
    specs.push_back(spec);
  }
  return specs;
}

// ---------------------------------------------------------------------------------------------
// Weights

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> wq;         // [hidden][num_q_heads * head_dim]
  std::vector<float> wk, wv;     // [hidden][num_kv_heads * head_dim]; empty for consumers
  std::vector<float> wo;         // [num_q_heads * head_dim][hidden]
  std::vector<float> mlp_norm;   // [hidden]
  std::vector<float> w_up;       // [hidden][mlp]
  std::vector<float> w_down;     // [mlp][hidden]
};

struct Model {
  ModelConfig config;
  std::vector<float> embed;  // [vocab][hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;                       // [hidden]
  std::vector<float> lm_head;                          // [hidden][vocab]
  std::vector<float> inv_freq_local, inv_freq_global;  // RoPE, [head_dim / 2] of each kind

  // A token's q (and attention output) and K (or V) elements in `layer`.
  uint32_t QDim(size_t layer) const { return config.num_q_heads * HeadDimOf(config, layer); }
  uint32_t KVDim(size_t layer) const { return KVHeadsOf(config, layer) * HeadDimOf(config, layer); }
  // The largest of each over the layers (activations hold any layer's).
  uint32_t MaxQDim() const {
    uint32_t dim = 0;
    for (size_t layer = 0; layer < kNumLayers; ++layer) dim = std::max(dim, QDim(layer));
    return dim;
  }
  uint32_t MaxKVDim() const {
    uint32_t dim = 0;
    for (size_t layer = 0; layer < kNumLayers; ++layer) dim = std::max(dim, KVDim(layer));
    return dim;
  }
};

inline std::vector<float> RandomMatrix(std::mt19937* rng, size_t rows, size_t cols) {
  // Uniform with variance 1 / rows: activations keep their scale through a product.
  const float bound = std::sqrt(3.0f / static_cast<float>(rows));
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> m(rows * cols);
  for (float& x : m) x = dist(*rng);
  return m;
}

inline std::vector<float> RandomNorm(std::mt19937* rng, size_t n) {
  std::uniform_real_distribution<float> dist(0.8f, 1.2f);
  std::vector<float> w(n);
  for (float& x : w) x = dist(*rng);
  return w;
}

inline std::vector<float> InvFreq(uint32_t head_dim, double base) {
  std::vector<float> inv(head_dim / 2);
  for (uint32_t i = 0; i < head_dim / 2; ++i) {
    inv[i] = static_cast<float>(1.0 / std::pow(base, 2.0 * i / head_dim));
  }
  return inv;
}

// Multiplies by `factor` the outlier channels of every head of `layer` in the weight matrix
// *w ([hidden][cols], heads of the layer's head dim side by side): dims 3 and 17 of each head
// and their RoPE partners (Rope rotates dim i with dim i + head_dim / 2), four channels.
inline void ScaleOutlierChannels(const ModelConfig& c, size_t layer, size_t cols, float factor,
                                 std::vector<float>* w) {
  const size_t head_dim = HeadDimOf(c, layer), half = head_dim / 2;
  for (size_t head = 0; head < cols / head_dim; ++head) {
    for (size_t dim : {size_t{3} % half, size_t{17} % half}) {
      for (size_t channel : {dim, dim + half}) {
        const size_t col = head * head_dim + channel;
        for (size_t row = 0; row < c.hidden; ++row) (*w)[row * cols + col] *= factor;
      }
    }
  }
}

inline Model MakeModel(const ModelConfig& c) {
  Model model;
  model.config = c;
  std::mt19937 rng(c.seed);
  model.embed = RandomMatrix(&rng, 1, size_t{c.vocab} * c.hidden);  // unit variance
  for (size_t layer = 0; layer < kNumLayers; ++layer) {
    LayerWeights w;
    w.attn_norm = RandomNorm(&rng, c.hidden);
    const uint32_t kv_dim = model.KVDim(layer);
    w.wq = RandomMatrix(&rng, c.hidden, model.QDim(layer));
    if (OwnsKV(layer)) {
      w.wk = RandomMatrix(&rng, c.hidden, kv_dim);
      w.wv = RandomMatrix(&rng, c.hidden, kv_dim);
      // Outlier channels, the shape real K caches have: two RoPE pairs of dims of each kv_head
      // (four channels) k_outliers times the others. As in a trained model, the queries are
      // small where K is large (their columns divided by as much, below), so that the
      // logits, and with them the model, stay what they were: only K's values change.
      if (c.k_outliers > 1) {
        ScaleOutlierChannels(c, layer, kv_dim, static_cast<float>(c.k_outliers), &w.wk);
      }
    }
    if (c.k_outliers > 1 && !IsRecurrent(c, layer)) {
      // The queries of every layer reading this K (an owner, or a consumer of its owner).
      ScaleOutlierChannels(c, layer, model.QDim(layer), 1.0f / static_cast<float>(c.k_outliers),
                           &w.wq);
    }
    w.wo = RandomMatrix(&rng, model.QDim(layer), c.hidden);
    w.mlp_norm = RandomNorm(&rng, c.hidden);
    w.w_up = RandomMatrix(&rng, c.hidden, c.mlp);
    w.w_down = RandomMatrix(&rng, c.mlp, c.hidden);
    model.layers.push_back(std::move(w));
  }
  model.final_norm = RandomNorm(&rng, c.hidden);
  model.lm_head = RandomMatrix(&rng, c.hidden, c.vocab);
  // Gemma 3: local layers rotate with base 10k, global layers with 1M.
  model.inv_freq_local = InvFreq(c.head_dim, 10000.0);
  model.inv_freq_global =
      InvFreq(c.global_head_dim != 0 ? c.global_head_dim : c.head_dim, 1000000.0);
  return model;
}

inline std::vector<int32_t> RandomTokens(uint32_t seed, uint64_t count, uint32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> tokens(count);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

// ---------------------------------------------------------------------------------------------
// Forward pieces

inline void RMSNorm(const float* x, const float* weight, size_t num_tokens, size_t dim,
                    float* out) {
  for (size_t t = 0; t < num_tokens; ++t) {
    const float* row = x + t * dim;
    float sum = 0.0f;
    for (size_t i = 0; i < dim; ++i) sum += row[i] * row[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(dim) + 1e-6f);
    for (size_t i = 0; i < dim; ++i) out[t * dim + i] = row[i] * scale * weight[i];
  }
}

// Rotates rows [num_tokens][num_heads][head_dim] at positions first_pos, first_pos + 1, ...
// (the half-split rotation of Llama and Gemma).
inline void Rope(float* rows, size_t num_tokens, size_t num_heads, size_t head_dim,
                 uint64_t first_pos, const std::vector<float>& inv_freq) {
  const size_t half = head_dim / 2;
  for (size_t t = 0; t < num_tokens; ++t) {
    const float pos = static_cast<float>(first_pos + t);
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      const float cos = std::cos(angle), sin = std::sin(angle);
      for (size_t head = 0; head < num_heads; ++head) {
        float* x = rows + (t * num_heads + head) * head_dim;
        const float a = x[i], b = x[i + half];
        x[i] = a * cos - b * sin;
        x[i + half] = a * sin + b * cos;
      }
    }
  }
}

inline float Gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

// The hybrid variant's recurrence of layer `layer` over n tokens' inputs u ([n][dim]): a short
// convolution y = u_t + u_{t-1} / 2 + u_{t-2} / 4 over `conv` (the last two inputs, newest
// first), then state = a * state + (1 - a) * y with a fixed gate a in (0.05, 0.95) per
// channel; out_t = state. Calls after(t) once token t's conv and state are updated (to store
// them). Fixed order of operations: the same bits however tokens are batched.
template <class After>
void Recur(size_t layer, const float* u, size_t n, size_t dim, float* conv, float* state,
           float* out, After&& after) {
  for (size_t t = 0; t < n; ++t) {
    const float* x = u + t * dim;
    for (size_t i = 0; i < dim; ++i) {
      const float y = x[i] + 0.5f * conv[i] + 0.25f * conv[dim + i];
      conv[dim + i] = conv[i];
      conv[i] = x[i];
      const float a =
          0.5f + 0.45f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(layer));
      state[i] = a * state[i] + (1.0f - a) * y;
      out[t * dim + i] = state[i];
    }
    after(t);
  }
}

// A recurrent layer's step of n tokens from position `pos` over any storage of its states (a
// KVCache's, a KVPool sequence's): continues from current() (the state after `pos`
// positions) and stores the state after each position in after(pos + t + 1) (both return
// kvring::Expected<kvring::StateSlot>), so that a rollback of rejected drafts finds its
// state. `conv` and `state` are scratch. kBadArgument (after printing why) if a slot is
// refused.
template <class Current, class After>
kvring::Status RecurStep(const Model& model, size_t layer, const float* u, uint64_t n, uint64_t pos,
                         float* out, const Current& current, const After& after,
                         std::vector<float>* conv, std::vector<float>* state) {
  const kvring::Expected<kvring::StateSlot> now = current();
  if (!now.ok()) {
    std::fprintf(stderr, "recurrent layer %zu: %s\n", layer, now.error().message.c_str());
    return kvring::Status::kBadArgument;
  }
  const size_t dim = model.QDim(layer);
  const float* conv_in = reinterpret_cast<const float*>(now->conv);
  const float* state_in = reinterpret_cast<const float*>(now->recurrent);
  conv->assign(conv_in, conv_in + (kConvTaps - 1) * dim);
  state->assign(state_in, state_in + dim);
  kvring::Status status = kvring::Status::kOk;
  Recur(layer, u, n, dim, conv->data(), state->data(), out, [&](size_t t) {
    const kvring::Expected<kvring::StateSlot> slot = after(pos + t + 1);
    if (!slot.ok()) {
      std::fprintf(stderr, "recurrent layer %zu: %s\n", layer, slot.error().message.c_str());
      status = kvring::Status::kBadArgument;
      return;
    }
    std::memcpy(slot->conv, conv->data(), slot->conv_bytes);
    std::memcpy(slot->recurrent, state->data(), slot->recurrent_bytes);
  });
  return status;
}

inline int32_t ArgMax(const float* logits, size_t vocab) {
  return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
}

// One sequence's tokens in a step: consecutive positions first_pos, first_pos + 1, ... A
// step's spans lie one after the other in its rows (the first span's tokens first).
struct Span {
  uint64_t first_pos = 0;
  uint64_t num_tokens = 0;
};

// A step's activations, [num_tokens][...] each, kept by the caller so that a step no larger
// than an earlier one allocates nothing.
struct Activations {
  std::vector<float> x, h, q, k, v, attn, proj, up;

  void Resize(const Model& model, size_t num_tokens) {
    const ModelConfig& c = model.config;
    x.resize(num_tokens * c.hidden);
    h.resize(num_tokens * c.hidden);
    q.resize(num_tokens * model.MaxQDim());
    k.resize(num_tokens * model.MaxKVDim());
    v.resize(num_tokens * model.MaxKVDim());
    attn.resize(num_tokens * model.MaxQDim());
    proj.resize(num_tokens * c.hidden);
    up.resize(num_tokens * c.mlp);
  }
};

// Returns the attention call of one span's queries in `layer`, rows [row, row +
// span.num_tokens) of a step's q ([num_tokens][num_q_heads][head_dim]), writing the same rows
// of attn. The view and options are the caller's: one Attention call per span, or one
// AttentionMany entry.
inline kvring::AttentionBatch SpanQueries(const Model& model, size_t layer, const float* q,
                                          float* attn, size_t row, const Span& span) {
  kvring::AttentionBatch batch;
  batch.queries_f32 = q + row * model.QDim(layer);
  batch.out_f32 = attn + row * model.QDim(layer);
  batch.first_q_pos = span.first_pos;
  batch.num_queries = static_cast<uint32_t>(span.num_tokens);
  batch.num_q_heads = model.config.num_q_heads;
  batch.head_dim = HeadDimOf(model.config, layer);
  return batch;
}

// Runs one step: `tokens` are the spans' tokens, in order. For every layer, after the
// queries (and, for owning layers, the new K/V) of every token are computed and rotated,
// calls attend(layer, q, k, v, attn): it stores k and v ([num_tokens][kv_head][head_dim]; null
// for a consumer layer, which reads its owner's) at each span's positions, and writes attn
// ([num_tokens][num_q_heads][head_dim]) from q, one attention call per span or one for all,
// returning kOk or the first refusal (which ends the step). A recurrent layer (IsRecurrent)
// gets its inputs unrotated in q, k and v null, and writes its outputs (Recur) to attn.
// Writes logits [num_tokens][vocab].
template <class Attend>
kvring::Status Forward(const Model& model, const int32_t* tokens, const Span* spans,
                       size_t num_spans, Attend&& attend, Activations* a,
                       std::vector<float>* logits) {
  const ModelConfig& c = model.config;
  size_t n = 0;
  for (size_t s = 0; s < num_spans; ++s) n += spans[s].num_tokens;
  const size_t hidden = c.hidden;
  a->Resize(model, n);
  for (size_t t = 0; t < n; ++t) {
    std::copy_n(model.embed.data() + static_cast<size_t>(tokens[t]) * hidden, hidden,
                a->x.data() + t * hidden);
  }
  // RoPE of each span at its own positions.
  const auto rope = [&](float* rows, size_t num_heads, size_t head_dim,
                        const std::vector<float>& inv_freq) {
    size_t row = 0;
    for (size_t s = 0; s < num_spans; ++s) {
      Rope(rows + row * num_heads * head_dim, spans[s].num_tokens, num_heads, head_dim,
           spans[s].first_pos, inv_freq);
      row += spans[s].num_tokens;
    }
  };
  for (size_t layer = 0; layer < kNumLayers; ++layer) {
    const LayerWeights& w = model.layers[layer];
    const std::vector<float>& inv_freq =
        kGlobal[layer] ? model.inv_freq_global : model.inv_freq_local;
    const size_t q_dim = model.QDim(layer), kv_dim = model.KVDim(layer);
    const size_t head_dim = HeadDimOf(c, layer);
    RMSNorm(a->x.data(), w.attn_norm.data(), n, hidden, a->h.data());
    MatMul(a->h.data(), n, hidden, w.wq.data(), q_dim, a->q.data());
    const bool recurrent = IsRecurrent(c, layer);
    if (!recurrent) rope(a->q.data(), c.num_q_heads, head_dim, inv_freq);
    const bool owner = OwnsKV(layer) && !recurrent;
    if (owner) {
      // K/V of this layer's new positions: kvring rounds them to the layer's format when
      // they are stored.
      MatMul(a->h.data(), n, hidden, w.wk.data(), kv_dim, a->k.data());
      MatMul(a->h.data(), n, hidden, w.wv.data(), kv_dim, a->v.data());
      rope(a->k.data(), KVHeadsOf(c, layer), head_dim, inv_freq);
    }
    const kvring::Status status = attend(layer, a->q.data(), owner ? a->k.data() : nullptr,
                                         owner ? a->v.data() : nullptr, a->attn.data());
    if (status != kvring::Status::kOk) return status;
    MatMul(a->attn.data(), n, q_dim, w.wo.data(), hidden, a->proj.data());
    for (size_t i = 0; i < n * hidden; ++i) a->x[i] += a->proj[i];
    RMSNorm(a->x.data(), w.mlp_norm.data(), n, hidden, a->h.data());
    MatMul(a->h.data(), n, hidden, w.w_up.data(), c.mlp, a->up.data());
    for (float& u : a->up) u = Gelu(u);
    MatMul(a->up.data(), n, c.mlp, w.w_down.data(), hidden, a->proj.data());
    for (size_t i = 0; i < n * hidden; ++i) a->x[i] += a->proj[i];
  }
  RMSNorm(a->x.data(), model.final_norm.data(), n, hidden, a->h.data());
  logits->resize(n * c.vocab);
  MatMul(a->h.data(), n, hidden, model.lm_head.data(), c.vocab, logits->data());
  return kvring::Status::kOk;
}

}  // namespace mini_engine

#endif  // KVRING_EXAMPLES_MINI_ENGINE_MODEL_H_
