// kvring/model_presets.h: the attention layout of well-known models, as LayerSpec lists.
// Use it to plan a known model without writing its layers by hand (kvring-plan does).
// Holds attention facts only (from the models' published configurations): no weights.
#ifndef KVRING_MODEL_PRESETS_H_
#define KVRING_MODEL_PRESETS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/layer_plan.h"

namespace kvring {

// One model's layers and maximum context.
struct ModelPreset {
  std::string name;
  uint64_t max_context = 0;
  std::vector<LayerSpec> layers;
  std::string notes;  // attention facts that do not change the plan (for example sinks)
};

namespace detail {

// Sliding layers except every `period`-th (1-based), which is global; Gemma 3 style.
inline std::vector<LayerSpec> EveryNthGlobal(size_t num_layers, size_t period,
                                             const LayerSpec& local, const LayerSpec& global) {
  std::vector<LayerSpec> layers;
  for (size_t i = 0; i < num_layers; ++i) {
    layers.push_back((i + 1) % period == 0 ? global : local);
  }
  return layers;
}

// Makes the last `num_shared` layers consumers (Gemma 3n): each reads the last
// non-consumer layer of its own kind.
inline void ShareLastLayers(size_t num_shared, std::vector<LayerSpec>* layers) {
  const size_t first_shared = layers->size() - num_shared;
  for (size_t i = first_shared; i < layers->size(); ++i) {
    LayerSpec& spec = (*layers)[i];
    for (size_t j = first_shared; j-- > 0;) {
      if ((*layers)[j].kind == spec.kind) {
        spec.kv_source = static_cast<int32_t>(j);
        break;
      }
    }
  }
}

inline ModelPreset Gemma2(const char* name, size_t num_layers, uint32_t num_kv_heads,
                          uint32_t head_dim) {
  // Even layers slide over 4096 keys, odd layers are global (period 2, 1-based).
  return {name, 8192,
          EveryNthGlobal(num_layers, 2, LayerSpec::Sliding(4096, num_kv_heads, head_dim),
                         LayerSpec::Global(num_kv_heads, head_dim)),
          ""};
}

inline ModelPreset Gemma3(const char* name, size_t num_layers, uint32_t num_kv_heads,
                          uint32_t head_dim, uint64_t window, uint64_t max_context) {
  return {name, max_context,
          EveryNthGlobal(num_layers, 6, LayerSpec::Sliding(window, num_kv_heads, head_dim),
                         LayerSpec::Global(num_kv_heads, head_dim)),
          ""};
}

inline ModelPreset Gemma3n(const char* name, size_t num_layers, size_t num_shared) {
  ModelPreset preset{
      name, 32768,
      EveryNthGlobal(num_layers, 5, LayerSpec::Sliding(512, 2, 256), LayerSpec::Global(2, 256)),
      "the last " + std::to_string(num_shared) + " layers read shared KV"};
  ShareLastLayers(num_shared, &preset.layers);
  return preset;
}

// Gemma 4: sliding layers of head dim 256, every `period`-th layer (and the last) global with
// head dim 512 and `global_kv_heads` (attention_k_eq_v: K and V are one projection, both
// cached); the last `num_shared` layers read shared KV.
inline ModelPreset Gemma4(const char* name, size_t num_layers, size_t period, uint64_t window,
                          uint32_t num_kv_heads, uint32_t global_kv_heads, size_t num_shared,
                          uint64_t max_context) {
  ModelPreset preset{
      name, max_context,
      EveryNthGlobal(num_layers, period, LayerSpec::Sliding(window, num_kv_heads, 256),
                     LayerSpec::Global(global_kv_heads, 512)),
      "global layers: head dim 512, " + std::to_string(global_kv_heads) + " KV heads"};
  preset.layers.back() = LayerSpec::Global(global_kv_heads, 512);  // the last layer is global
  if (num_shared > 0) {
    preset.notes += "; the last " + std::to_string(num_shared) + " layers read shared KV";
    ShareLastLayers(num_shared, &preset.layers);
  } else {
    preset.notes += " (attention_k_eq_v: V is K, both cached)";
  }
  return preset;
}

inline ModelPreset AllGlobal(const char* name, size_t num_layers, uint32_t num_kv_heads,
                             uint32_t head_dim, uint64_t max_context) {
  return {name, max_context,
          std::vector<LayerSpec>(num_layers, LayerSpec::Global(num_kv_heads, head_dim)), ""};
}

inline ModelPreset GptOss(const char* name, size_t num_layers) {
  return {name, 131072,
          EveryNthGlobal(num_layers, 2, LayerSpec::Sliding(128, 8, 64), LayerSpec::Global(8, 64)),
          "learned attention sinks: one logit per query head, no KV"};
}

// Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5 and 3.6): every 4th layer full (2 KV heads of
// 256), the others linear, each keeping a conv state of 3 x (2 x 16 x 128 + 32 x 128) BF16
// elements and a recurrent state of 32 x 128 x 128 in `recurrent` (the file's mamba_ssm_dtype:
// F32 in Qwen3.6's; Qwen3-Next's names none, so BF16).
inline ModelPreset GatedDeltaNet(const char* name, size_t num_layers, Format recurrent) {
  const StateSpec gdn{3 * (2 * 16 * 128 + 32 * 128), Format::kBF16, 32 * 128 * 128, recurrent};
  return {name, 262144,
          EveryNthGlobal(num_layers, 4, LayerSpec::Recurrent(gdn), LayerSpec::Global(2, 256)),
          std::string("linear layers: Gated DeltaNet states (conv 24576 BF16 and recurrent "
                      "524288 ") +
              (recurrent == Format::kF32 ? "F32" : "BF16") + " elements), no K/V"};
}

// MiMo-V2-Flash: layer 0 and every 6th layer full (4 KV heads), the others sliding over 128
// keys (8 KV heads), K 192 and V 128 everywhere.
inline ModelPreset MimoV2Flash() {
  LayerSpec sliding = LayerSpec::Sliding(128, 8, 192);
  sliding.v_head_dim = 128;
  LayerSpec full = LayerSpec::Global(4, 192);
  full.v_head_dim = 128;
  ModelPreset preset{"mimo-v2-flash", 262144, EveryNthGlobal(48, 6, sliding, full),
                     "K head dim 192, V 128; attention sinks on sliding layers"};
  preset.layers.front() = full;
  return preset;
}

// GLM-5.3 (glm_moe_dsa): 78 latent layers of 512 + 64. Layers 0, 1, 2 and every 4th from 6
// (indexer_types "full") run a DSA indexer and keep its 128-element key; the others reuse the
// last one's selection and keep none.
inline ModelPreset Glm53() {
  std::vector<LayerSpec> layers(78, LayerSpec::Latent(576));
  for (size_t i = 0; i < layers.size(); ++i) {
    if ((i > 2 ? i - 2 : 0) % 4 == 0) layers[i] = LayerSpec::Latent(576).WithIndexer(128);
  }
  return {"glm-5.3", 1048576, std::move(layers),
          "MLA with DSA: 21 of the 78 layers keep a 128-element indexer key per position"};
}

// Kimi-Linear-48B-A3B: Kimi Delta Attention layers with layer numbers 4, 8, ..., 24 and 27
// (1-indexed) latent attention of 512 + 64; each KDA layer keeps a conv state of 3 x 3 x 32 x
// 128 BF16 elements and a recurrent state of 32 x 128 x 128 F32 elements.
inline ModelPreset KimiLinear48B() {
  const StateSpec kda{3 * 3 * 32 * 128, Format::kBF16, 32 * 128 * 128, Format::kF32};
  ModelPreset preset{"kimi-linear-48b-a3b", 1048576,
                     EveryNthGlobal(27, 4, LayerSpec::Recurrent(kda), LayerSpec::Latent(576)),
                     "KDA layers: conv 36864 BF16 and recurrent 524288 F32 elements; MLA without "
                     "rotary (the rope slice stays in the latent)"};
  preset.layers.back() = LayerSpec::Latent(576);
  return preset;
}

// Nemotron-H-8B-Base-8K: hybrid_override_pattern "M-M-M-M*-..." of 52 layers: 24 Mamba2
// layers ('M'), 4 full layers of 8 KV heads of 128 ('*'), 24 MLP blocks without a sequence
// mixer ('-'). A Mamba2 layer keeps a conv state of 3 x (128 x 64 + 2 x 8 x 128) BF16 elements
// and a recurrent state of 128 x 64 x 128 F32 elements (the class's mamba_ssm_cache_dtype).
inline ModelPreset NemotronH8B() {
  const StateSpec mamba2{3 * (128 * 64 + 2 * 8 * 128), Format::kBF16, 128 * 64 * 128, Format::kF32};
  const char* pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
  ModelPreset preset{"nemotron-h-8b",
                     8192,
                     {},
                     "Mamba2 layers: conv 30720 BF16 and recurrent 1048576 F32 elements; MLP "
                     "blocks hold nothing"};
  for (const char* c = pattern; *c != '\0'; ++c) {
    preset.layers.push_back(*c == '*'   ? LayerSpec::Global(8, 128)
                            : *c == 'M' ? LayerSpec::Recurrent(mamba2)
                                        : LayerSpec::Recurrent(StateSpec{}));
  }
  return preset;
}

// AI21-Jamba-1.5-Mini: 32 layers, full attention (8 KV heads of 128) where i % 8 == 4
// (attn_layer_offset 4, attn_layer_period 8), Mamba (1) layers elsewhere, each keeping a conv
// state of 3 x 8192 and a recurrent state of 8192 x 16 BF16 elements.
inline ModelPreset Jamba15Mini() {
  const StateSpec mamba{3 * 8192, Format::kBF16, 8192 * 16, Format::kBF16};
  ModelPreset preset{
      "jamba-1.5-mini", 262144, {}, "Mamba layers: conv 24576 and recurrent 131072 BF16 elements"};
  for (size_t i = 0; i < 32; ++i) {
    preset.layers.push_back(i % 8 == 4 ? LayerSpec::Global(8, 128) : LayerSpec::Recurrent(mamba));
  }
  return preset;
}

// LFM2-1.2B: 16 layers, full attention (8 KV heads of 64) at full_attn_idxs 2, 5, 8, 10, 12
// and 14, short-convolution layers elsewhere, each keeping a conv state of (conv_L_cache 3 - 1)
// x 2048 BF16 elements and no recurrent state.
inline ModelPreset Lfm2_1_2B() {
  const StateSpec conv{2 * 2048, Format::kBF16, 0, Format::kBF16};
  ModelPreset preset{"lfm2-1.2b", 128000, std::vector<LayerSpec>(16, LayerSpec::Recurrent(conv)),
                     "conv layers: 4096 BF16 elements of conv state, no recurrent state"};
  constexpr size_t kFullLayers[] = {2, 5, 8, 10, 12, 14};
  for (size_t i : kFullLayers) preset.layers[i] = LayerSpec::Global(8, 64);
  return preset;
}

// Falcon-H1-7B: 44 layers, each full attention (2 KV heads of 128) beside a Mamba2 mixer of
// 24 heads of 128 that keeps a conv state of 3 x (3072 + 2 x 256) and a recurrent state of
// 3072 x 256 BF16 elements.
inline ModelPreset FalconH1_7B() {
  const StateSpec mamba2{3 * (3072 + 2 * 256), Format::kBF16, 3072 * 256, Format::kBF16};
  return {"falcon-h1-7b", 262144,
          std::vector<LayerSpec>(44, LayerSpec::Global(2, 128).WithState(mamba2)),
          "every layer also keeps a Mamba2 state (conv 10752 and recurrent 786432 BF16 "
          "elements)"};
}

// Granite-4.0-H-1B: 40 layers, full attention (4 KV heads of 128) at layers 5, 15, 25 and 35,
// Mamba2 layers elsewhere, each keeping a conv state of 3 x (2 x 1536 + 2 x 128) and a
// recurrent state of 48 x 64 x 128 BF16 elements (the file names no mamba_ssm_dtype).
inline ModelPreset Granite4H1B() {
  const StateSpec mamba2{3 * (2 * 1536 + 2 * 128), Format::kBF16, 48 * 64 * 128, Format::kBF16};
  ModelPreset preset{"granite-4.0-h-1b", 131072,
                     std::vector<LayerSpec>(40, LayerSpec::Recurrent(mamba2)),
                     "Mamba2 layers: conv 9984 and recurrent 393216 BF16 elements"};
  constexpr size_t kFullLayers[] = {5, 15, 25, 35};
  for (size_t i : kFullLayers) preset.layers[i] = LayerSpec::Global(4, 128);
  return preset;
}

// Zamba2-2.7B-Instruct-v2: 54 Mamba2 blocks, each keeping a conv state of 3 x (5120 + 2 x 64)
// and a recurrent state of 80 x 64 x 64 BF16 elements; the 9 hybrid ones (6, 12, ..., 42, 47,
// 51) also run the shared attention block, K/V of their own: 32 KV heads of 160.
inline ModelPreset Zamba2_2_7B() {
  const StateSpec mamba2{3 * (5120 + 2 * 64), Format::kBF16, 80 * 64 * 64, Format::kBF16};
  ModelPreset preset{"zamba2-2.7b-instruct-v2", 4096,
                     std::vector<LayerSpec>(54, LayerSpec::Recurrent(mamba2)),
                     "Mamba2 blocks: conv 15744 and recurrent 327680 BF16 elements; the hybrid "
                     "blocks' attention reads the hidden state and the embeddings side by side"};
  constexpr size_t kHybridBlocks[] = {6, 12, 18, 24, 30, 36, 42, 47, 51};
  for (size_t i : kHybridBlocks) preset.layers[i] = LayerSpec::Global(32, 160).WithState(mamba2);
  return preset;
}

// Bamba-9B: 32 layers, attention at 9, 18 and 27 (8 KV heads of 128); the 29 others Mamba2
// layers of 128 heads of 64 (8192 channels) and one group of 128: a conv state of 3 x (8192 +
// 2 x 128) and a recurrent state of 8192 x 128 BF16 elements. The file names no context:
// BambaConfig's 262144 (transformers' documentation gives the model 4096).
inline ModelPreset Bamba9B() {
  const StateSpec mamba2{3 * (8192 + 2 * 128), Format::kBF16, 8192 * 128, Format::kBF16};
  ModelPreset preset{"bamba-9b", 262144, std::vector<LayerSpec>(32, LayerSpec::Recurrent(mamba2)),
                     "Mamba2 layers: conv 25344 and recurrent 1048576 BF16 elements; the context "
                     "is BambaConfig's default (the model was trained at 4096)"};
  constexpr size_t kAttentionLayers[] = {9, 18, 27};
  for (size_t i : kAttentionLayers) preset.layers[i] = LayerSpec::Global(8, 128);
  return preset;
}

// Zamba-7B-v1: 76 blocks, each keeping a Mamba1 state in 2 heads (2 x 3712 = 7424 channels): a
// conv state of 3 x 7424 and a recurrent state of 7424 x 16 BF16 elements; the 13 hybrid ones
// (2, then 7, 13, ..., 73) also run the shared attention block, K/V of their own: 16 KV heads
// of 2 x 3712 / 16 = 464.
inline ModelPreset Zamba7B() {
  const StateSpec mamba{3 * 7424, Format::kBF16, 7424 * 16, Format::kBF16};
  ModelPreset preset{"zamba-7b-v1", 4096, std::vector<LayerSpec>(76, LayerSpec::Recurrent(mamba)),
                     "Mamba blocks: conv 22272 and recurrent 118784 BF16 elements; the hybrid "
                     "blocks' attention reads the hidden state and the embeddings side by side"};
  preset.layers[2] = LayerSpec::Global(16, 464).WithState(mamba);
  for (size_t i = 7; i < 76; i += 6) preset.layers[i] = LayerSpec::Global(16, 464).WithState(mamba);
  return preset;
}

// MiniMax-M1 (40k and 80k: one config.json, published with the remote code): 80 layers, a
// softmax attention layer (8 KV heads of 128) after every 7 lightning attention layers
// (attn_type_list); a lightning layer keeps its K^T V sum, 64 heads x 128 x 128 F32 elements
// (the remote code keeps it in float32), and no conv state.
inline ModelPreset MiniMaxM1() {
  const StateSpec lightning{0, Format::kBF16, 64 * 128 * 128, Format::kF32};
  return {"minimax-m1", 10240000,
          EveryNthGlobal(80, 8, LayerSpec::Recurrent(lightning), LayerSpec::Global(8, 128)),
          "lightning layers: recurrent 1048576 F32 elements, no conv state; RoPE on 64 of the "
          "128 dims"};
}

}  // namespace detail

// Returns every preset, in a stable order. Allocates; cost O(total layers).
inline std::vector<ModelPreset> ModelPresets() {
  using detail::AllGlobal;
  using detail::EveryNthGlobal;
  std::vector<ModelPreset> presets;
  presets.push_back(detail::Gemma2("gemma-2-2b", 26, 4, 256));
  presets.push_back(detail::Gemma2("gemma-2-9b", 42, 8, 256));
  presets.push_back(detail::Gemma2("gemma-2-27b", 46, 16, 128));
  presets.push_back(detail::Gemma3("gemma-3-270m", 18, 1, 256, 512, 32768));
  presets.push_back(detail::Gemma3("gemma-3-1b", 26, 1, 256, 512, 32768));
  presets.push_back(detail::Gemma3("gemma-3-4b", 34, 4, 256, 1024, 131072));
  presets.push_back(detail::Gemma3("gemma-3-12b", 48, 8, 256, 1024, 131072));
  presets.push_back(detail::Gemma3("gemma-3-27b", 62, 16, 128, 1024, 131072));
  presets.push_back(detail::Gemma3n("gemma-3n-e2b", 30, 10));
  presets.push_back(detail::Gemma3n("gemma-3n-e4b", 35, 15));
  presets.push_back(detail::Gemma4("gemma-4-e2b", 35, 5, 512, 1, 1, 20, 131072));
  presets.push_back(detail::Gemma4("gemma-4-e4b", 42, 6, 512, 2, 2, 18, 131072));
  presets.push_back(detail::Gemma4("gemma-4-12b", 48, 6, 1024, 8, 1, 0, 262144));
  presets.push_back(detail::Gemma4("gemma-4-26b-a4b", 30, 6, 1024, 8, 2, 0, 262144));
  presets.push_back(detail::Gemma4("gemma-4-31b", 60, 6, 1024, 16, 4, 0, 262144));
  presets.push_back(
      {"mistral-7b-v0.1", 32768, std::vector<LayerSpec>(32, LayerSpec::Sliding(4096, 8, 128)), ""});
  presets.push_back(AllGlobal("llama-3.1-8b", 32, 8, 128, 131072));
  presets.push_back(AllGlobal("llama-3.1-70b", 80, 8, 128, 131072));
  presets.push_back(
      {"llama-4-scout", 10485760,
       EveryNthGlobal(48, 4, LayerSpec::Chunked(8192, 8, 128), LayerSpec::Global(8, 128)),
       "global layers use no RoPE"});
  presets.push_back(detail::GptOss("gpt-oss-20b", 24));
  presets.push_back(detail::GptOss("gpt-oss-120b", 36));
  presets.push_back(
      {"command-r7b", 8192,
       EveryNthGlobal(32, 4, LayerSpec::Sliding(4096, 8, 128), LayerSpec::Global(8, 128)), ""});
  presets.push_back(AllGlobal("qwen3-8b", 36, 8, 128, 40960));
  presets.push_back(AllGlobal("qwen2-vl-2b-instruct", 28, 2, 128, 32768));
  presets.push_back({"deepseek-v3", 163840, std::vector<LayerSpec>(61, LayerSpec::Latent(576)),
                     "MLA: kv_lora_rank 512 + qk_rope_head_dim 64 per position"});
  presets.push_back({"deepseek-v3.2-exp", 163840,
                     std::vector<LayerSpec>(61, LayerSpec::Latent(576).WithIndexer(128)),
                     "MLA with DSA: a 128-element indexer key per position beside the latent"});
  presets.push_back({"kimi-k2-instruct", 131072, std::vector<LayerSpec>(61, LayerSpec::Latent(576)),
                     "MLA (DeepSeek V3's, 64 heads): kv_lora_rank 512 + qk_rope_head_dim 64"});
  presets.push_back({"longcat-flash-chat", 131072,
                     std::vector<LayerSpec>(56, LayerSpec::Latent(576)),
                     "MLA, two latent attentions in each of 28 decoder layers, a cache slot each: "
                     "kv_lora_rank 512 + qk_rope_head_dim 64"});
  presets.push_back(detail::GatedDeltaNet("qwen3-next-80b-a3b", 48, Format::kBF16));
  presets.push_back(detail::MimoV2Flash());
  presets.push_back(detail::KimiLinear48B());
  presets.push_back(
      {"exaone-4.0-32b", 131072,
       EveryNthGlobal(64, 4, LayerSpec::Sliding(4096, 8, 128), LayerSpec::Global(8, 128)),
       "global layers use no RoPE"});
  presets.push_back(
      {"olmo-3-7b", 65536,
       EveryNthGlobal(32, 4, LayerSpec::Sliding(4096, 32, 128), LayerSpec::Global(32, 128)),
       "YaRN on the global layers only"});
  presets.push_back(
      {"trinity-nano-preview", 131072,
       EveryNthGlobal(56, 4, LayerSpec::Sliding(2048, 2, 128), LayerSpec::Global(2, 128)), ""});
  presets.push_back({"smollm3-3b", 65536, std::vector<LayerSpec>(36, LayerSpec::Global(4, 128)),
                     "every 4th layer uses no RoPE (no_rope_layers)"});
  presets.push_back(
      {"ministral-3-3b", 262144, std::vector<LayerSpec>(26, LayerSpec::Global(8, 128)),
       "no sliding window; queries scaled by 1 + 0.1 ln(1 + floor(pos / 16384)) before attending"});
  presets.push_back(detail::NemotronH8B());
  presets.push_back(detail::Jamba15Mini());
  presets.push_back(detail::Lfm2_1_2B());
  presets.push_back(detail::FalconH1_7B());
  presets.push_back(detail::Granite4H1B());
  presets.push_back(detail::GatedDeltaNet("qwen3.6-35b-a3b", 40, Format::kF32));
  presets.push_back({"glm-4.6", 202752, std::vector<LayerSpec>(92, LayerSpec::Global(8, 128)),
                     "the MTP layer (num_nextn_predict_layers 1) is not among the 92"});
  presets.push_back({"glm-4.7-flash", 202752, std::vector<LayerSpec>(47, LayerSpec::Latent(576)),
                     "MLA: kv_lora_rank 512 + qk_rope_head_dim 64 per position"});
  presets.push_back(detail::Glm53());
  presets.push_back(detail::Zamba2_2_7B());
  presets.push_back(detail::MiniMaxM1());
  presets.push_back(detail::Bamba9B());
  presets.push_back(detail::Zamba7B());
  return presets;
}

// Returns the preset called `name`, or an Error naming it and the known names.
inline Expected<ModelPreset> FindModelPreset(const std::string& name) {
  std::vector<ModelPreset> presets = ModelPresets();
  std::string known;
  for (ModelPreset& preset : presets) {
    if (preset.name == name) return std::move(preset);
    known += (known.empty() ? "" : ", ") + preset.name;
  }
  return Error{"preset", "preset: unknown model '" + name + "'; known: " + known};
}

// Returns a Builder holding the preset's layers, ready for SetRuntime() and Build().
inline LayerPlan::Builder BuilderFor(const ModelPreset& preset) {
  LayerPlan::Builder builder;
  for (const LayerSpec& spec : preset.layers) builder.AddLayer(spec);
  return builder;
}

}  // namespace kvring

#endif  // KVRING_MODEL_PRESETS_H_
