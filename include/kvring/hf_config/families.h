// kvring/hf_config/families.h: the transformers families kvring reads config.json files of:
// for each model_type, its configuration class, its defaults and the rules by which it fills
// what a file leaves out (KV heads, head_dim, the layer pattern). Data only; the reading is in
// kvring/hf_config.h. Each rule restates what the family's transformers configuration class
// does with the keys; nothing here is taken from transformers' code.
#ifndef KVRING_HF_CONFIG_FAMILIES_H_
#define KVRING_HF_CONFIG_FAMILIES_H_

#include <cstdint>
#include <string>

namespace kvring {
namespace detail {
namespace hf {

inline constexpr uint64_t kMaxLayers = 100000;
inline constexpr uint64_t kMaxDim = uint64_t{1} << 20;
inline constexpr uint64_t kMaxFileBytes = uint64_t{64} << 20;

// A layer's attention as transformers' layer_types names it.
enum class LayerType { kFull, kSliding, kChunked };

inline const char* LayerTypeName(LayerType type) {
  switch (type) {
    case LayerType::kFull:
      return "full_attention";
    case LayerType::kSliding:
      return "sliding_attention";
    case LayerType::kChunked:
      return "chunked_attention";
  }
  return "invalid";
}

// What a family's configuration class does when num_key_value_heads is absent or null.
enum class KvHeadsRule {
  kNoneMeansMha,      // class default None, then num_attention_heads: absent or null is MHA
  kNumberNullIsMha,   // class default is one checkpoint's count (refused); null is MHA
  kNumberNoNullRule,  // class default is one checkpoint's count (refused); null refused
  kUnused,            // MLA: the latent replaces per-head K and V
};

// What a family does when head_dim is absent or null.
enum class HeadDimRule {
  kHiddenOverHeads,      // absent or null: hidden_size / num_attention_heads
  kAbsentIsHidden,       // absent: hidden_size / num_attention_heads (the model's getattr); null
                         // refused
  kDefaultNoNull,        // absent: the class default; null refused
  kDefaultNullIsHidden,  // absent: the class default; null: hidden_size / num_attention_heads
  kAlwaysHidden,         // always hidden_size / num_attention_heads, whatever the file says
  kRequired,             // absent or null refused (the class default None gives no head dim)
  kUnused,               // MLA
};

// How a family fills layer_types when the file has none (or when it never reads them).
enum class PatternRule {
  kAllFull,             // no local attention
  kAllSliding,          // every layer slides when sliding_window is not null (Mistral)
  kAllSlidingSwitched,  // every layer slides when use_sliding_window and a window (Qwen 3 MoE)
  kEvenSliding,         // sliding on even layers (Gemma 2, GPT-OSS)
  kSlidingPattern,   // full iff (i + 1) % <pattern_key> == 0 (Gemma 3, Cohere 2, EXAONE 4, AFMoE)
  kPrefixDense,      // kSlidingPattern counted after the first first_k_dense_replace layers,
                     // which follow prefix_dense_sliding_window_pattern (Cohere 2 MoE)
  kEveryNthFull,     // full iff (i + 1) % pattern_default == 0, a constant (Gemma 3n, 4, OLMo 3)
  kFirstOfEveryNth,  // full iff i % pattern_default == 0, a constant (CWM: layer 0 full)
  kMaxWindowLayers,  // sliding iff use_sliding_window and i >= max_window_layers (Qwen 2, 3)
  kEvenBelowWindowLayers,  // sliding iff use_sliding_window, i even and i < max_window_layers
                           // (Qwen2-MoE)
  kWindowFromLayer,  // sliding iff sliding_window is not null and i >= max_window_layers (dots1)
  kNoRopeLayers,     // chunked iff no_rope_layers[i] == 1 (Llama 4)
  kNoRopeSliding,    // sliding iff use_sliding_window and no_rope_layers[i] == 0 (SmolLM3)
};

// Whether use_sliding_window switches the family's sliding_window on (off: every layer full, and
// the window dropped): Qwen 2, 3, 2-MoE and 3 MoE, SmolLM3.
inline bool SwitchesWindow(PatternRule rule) {
  return rule == PatternRule::kMaxWindowLayers || rule == PatternRule::kEvenBelowWindowLayers ||
         rule == PatternRule::kAllSlidingSwitched || rule == PatternRule::kNoRopeSliding;
}

// Which reader reads a family's layers: the families whose rules are the data below, or a
// family group with rules of its own (kvring/hf_config/gemma4.h).
enum class Reader {
  kStandard,
  kGemma4,
  kMla,
  kGatedDeltaNet,
  kMamba2,
  kShortConv,
  kJamba,
  kFalconH1,
  kLightning,
  kOlmoHybrid,
  kStateSpace,
  kXlstm,
  kRecurrentGemma,
  kLaguna,
  kZamba,
  kZamba2,
  kKimiLinear,
  kMimoV2,
  kLightningRemote,
};

// A class whose sliding_window defaults to None (sliding_window_default).
inline constexpr uint64_t kNullWindow = UINT64_MAX;

struct Family {
  const char* model_type;
  const char* class_name;
  uint64_t max_position_embeddings;  // the class default
  KvHeadsRule kv_heads;
  uint64_t kv_heads_default;  // the class default, quoted in messages
  HeadDimRule head_dim;
  uint64_t head_dim_default;
  PatternRule pattern;
  uint64_t sliding_window_default;  // 0: the family has no sliding window; kNullWindow: None
  uint64_t pattern_default;         // kSlidingPattern: <pattern_key>'s default; kEveryNthFull: the
                                    // period; kMaxWindowLayers, kWindowFromLayer,
                                    // kEvenBelowWindowLayers:
                                    // max_window_layers' default
  bool reads_layer_types;
  bool reads_chunk;       // attention_chunk_size (default 8192)
  bool shares_kv;         // num_kv_shared_layers (default shared_default)
  bool mla;               // latent attention (kvring/hf_config/mla.h)
  const char* rule_text;  // the derived pattern, for messages
  const char* pattern_key = "sliding_window_pattern";  // kSlidingPattern: the key of the period
  uint64_t shared_default = 15;                        // num_kv_shared_layers' class default
  Reader reader = Reader::kStandard;
};

inline constexpr Family kFamilies[] = {
    {"llama", "LlamaConfig", 2048, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kHiddenOverHeads, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"mistral", "MistralConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kHiddenOverHeads, 0, PatternRule::kAllSliding, 4096, 0, false, false, false,
     false, "every layer slides when sliding_window is set"},
    {"qwen2", "Qwen2Config", 32768, KvHeadsRule::kNumberNullIsMha, 32, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kMaxWindowLayers, 4096, 28, true, false, false, false,
     "sliding iff use_sliding_window and i >= max_window_layers"},
    {"qwen2_moe", "Qwen2MoeConfig", 32768, KvHeadsRule::kNumberNoNullRule, 16,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kEvenBelowWindowLayers, 4096, 28, true, false,
     false, false, "sliding iff use_sliding_window, i is even and i < max_window_layers"},
    {"qwen3_moe", "Qwen3MoeConfig", 32768, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllSlidingSwitched, 4096, 0, false, false,
     false, false, "every layer slides when use_sliding_window and sliding_window are set"},
    // Every layer slides when sliding_window is set (default null): Mistral's rule.
    {"mixtral", "MixtralConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kHiddenOverHeads, 0, PatternRule::kAllSliding, kNullWindow, 0, false, false,
     false, false, "every layer slides when sliding_window is set"},
    {"phi3", "Phi3Config", 4096, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden, 0,
     PatternRule::kAllSliding, kNullWindow, 0, false, false, false, false,
     "every layer slides when sliding_window is set"},
    {"phimoe", "PhimoeConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllSliding, kNullWindow, 0, false, false, false,
     false, "every layer slides when sliding_window is set"},
    {"starcoder2", "Starcoder2Config", 4096, KvHeadsRule::kNumberNoNullRule, 2,
     HeadDimRule::kHiddenOverHeads, 0, PatternRule::kAllSliding, kNullWindow, 0, false, false,
     false, false, "every layer slides when sliding_window is set"},
    {"qwen3", "Qwen3Config", 32768, KvHeadsRule::kNumberNullIsMha, 32, HeadDimRule::kDefaultNoNull,
     128, PatternRule::kMaxWindowLayers, 4096, 28, true, false, false, false,
     "sliding iff use_sliding_window and i >= max_window_layers"},
    {"gemma2", "Gemma2Config", 8192, KvHeadsRule::kNumberNoNullRule, 4, HeadDimRule::kDefaultNoNull,
     256, PatternRule::kEvenSliding, 4096, 0, true, false, false, false,
     "sliding on even layers, full on odd"},
    // VaultGemma: Gemma 2's attention and defaults.
    {"vaultgemma", "VaultGemmaConfig", 8192, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kEvenSliding, 4096, 0, true, false, false,
     false, "sliding on even layers, full on odd"},
    {"gemma3_text", "Gemma3TextConfig", 131072, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kSlidingPattern, 4096, 6, true, false, false,
     false, "full iff (i + 1) % sliding_window_pattern == 0"},
    {"gemma3n_text", "Gemma3nTextConfig", 32768, KvHeadsRule::kNumberNoNullRule, 2,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kEveryNthFull, 512, 5, true, false, true, false,
     "full iff (i + 1) % 5 == 0"},
    {"llama4_text", "Llama4TextConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kNoRopeLayers, 0, 0, true, true, false, false,
     "chunked iff no_rope_layers[i] == 1"},
    {"gpt_oss", "GptOssConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kDefaultNoNull, 64, PatternRule::kEvenSliding, 128, 0, true, false, false, false,
     "sliding on even layers, full on odd"},
    {"cohere2", "Cohere2Config", 8192, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kSlidingPattern, 4096, 4, true, false, false, false,
     "full iff (i + 1) % sliding_window_pattern == 0"},
    // Laguna: layer_types, and query heads per layer (kvring/hf_config/reader.h).
    {"laguna", "LagunaConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllFull, 512, 0, true, false, false, false,
     "layer_types (every layer full without them)", "sliding_window_pattern", 15, Reader::kLaguna},
    {"cohere2_moe", "Cohere2MoeConfig", 8192, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kPrefixDense, 4096, 4, true, false, false,
     false,
     "layers below first_k_dense_replace full iff (i + 1) % prefix_dense_sliding_window_pattern "
     "== 0, the others full iff (i - first_k_dense_replace + 1) % sliding_window_pattern == 0",
     "sliding_window_pattern"},
    // Latent attention (kvring/hf_config/mla.h). kimi_k2 files name transformers' DeepseekV3
    // classes through remote code.
    {"deepseek_v3", "DeepseekV3Config", 4096, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, true, "every layer full_attention (MLA)",
     "sliding_window_pattern", 15, Reader::kMla},
    {"kimi_k2", "DeepseekV3Config (remote code)", 4096, KvHeadsRule::kUnused, 0,
     HeadDimRule::kUnused, 0, PatternRule::kAllFull, 0, 0, false, false, false, true,
     "every layer full_attention (MLA)", "sliding_window_pattern", 15, Reader::kMla},
    {"deepseek_v2", "DeepseekV2Config", 2048, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, true, "every layer full_attention (MLA)",
     "sliding_window_pattern", 15, Reader::kMla},
    {"youtu", "YoutuConfig", 131072, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, true, "every layer full_attention (MLA)",
     "sliding_window_pattern", 15, Reader::kMla},
    {"mistral4", "Mistral4Config", 1048576, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, true, "every layer full_attention (MLA)",
     "sliding_window_pattern", 15, Reader::kMla},
    {"glm4_moe_lite", "Glm4MoeLiteConfig", 202752, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, true, "every layer full_attention (MLA)",
     "sliding_window_pattern", 15, Reader::kMla},
    // DeepSeek sparse attention (DSA): MLA with an indexer key per position (mla.h).
    {"deepseek_v32", "DeepseekV32Config", 163840, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, true,
     "every layer full_attention (MLA with a DSA indexer)", "sliding_window_pattern", 15,
     Reader::kMla},
    {"glm_moe_dsa", "GlmMoeDsaConfig", 202752, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, true,
     "every layer full_attention (MLA with a DSA indexer on its indexer_types full layers)",
     "sliding_window_pattern", 15, Reader::kMla},
    // Hybrids of Gated DeltaNet and full attention (kvring/hf_config/hybrid.h).
    {"qwen3_next", "Qwen3NextConfig", 32768, KvHeadsRule::kNumberNoNullRule, 2,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kAllFull, 0, 0, true, false, false, false,
     "full iff (i + 1) % full_attention_interval == 0", "sliding_window_pattern", 15,
     Reader::kGatedDeltaNet},
    {"qwen3_5_text", "Qwen3_5TextConfig", 32768, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kAllFull, 0, 0, true, false, false, false,
     "full iff (i + 1) % full_attention_interval == 0", "sliding_window_pattern", 15,
     Reader::kGatedDeltaNet},
    {"qwen3_5_moe_text", "Qwen3_5MoeTextConfig", 32768, KvHeadsRule::kNumberNoNullRule, 2,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kAllFull, 0, 0, true, false, false, false,
     "full iff (i + 1) % full_attention_interval == 0", "sliding_window_pattern", 15,
     Reader::kGatedDeltaNet},
    {"nemotron_h", "NemotronHConfig", 4096, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllFull, 0, 0, true, false, false, false,
     "layers_block_type, or hybrid_override_pattern", "sliding_window_pattern", 15,
     Reader::kMamba2},
    {"granitemoehybrid", "GraniteMoeHybridConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, true, false, false, false,
     "layer_types of mamba and attention (every layer mamba without them)",
     "sliding_window_pattern", 15, Reader::kMamba2},
    {"bamba", "BambaConfig", 262144, KvHeadsRule::kNumberNullIsMha, 8, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "attention iff i is in attn_layer_indices, else mamba (every layer without them)",
     "sliding_window_pattern", 15, Reader::kMamba2},
    {"lfm2", "Lfm2Config", 128000, KvHeadsRule::kNumberNoNullRule, 8, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kAllFull, 0, 0, true, false, false, false,
     "layer_types of conv and full_attention, or full_attn_idxs", "sliding_window_pattern", 15,
     Reader::kShortConv},
    {"lfm2_moe", "Lfm2MoeConfig", 128000, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, true, false, false, false,
     "layer_types of conv and full_attention (required: the class derives none)",
     "sliding_window_pattern", 15, Reader::kShortConv},
    {"recurrent_gemma", "RecurrentGemmaConfig", 0, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 2048, 0, false, false, false, false,
     "block_types (default recurrent, recurrent, attention) repeated over the layers",
     "sliding_window_pattern", 15, Reader::kRecurrentGemma},
    {"jamba", "JambaConfig", 262144, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "attention iff i % attn_layer_period == attn_layer_offset, else mamba",
     "sliding_window_pattern", 15, Reader::kJamba},
    {"falcon_h1", "FalconH1Config", 8192, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention beside a Mamba2 mixer", "sliding_window_pattern", 15,
     Reader::kFalconH1},
    {"minimax", "MiniMaxConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kHiddenOverHeads, 0, PatternRule::kAllFull, kNullWindow, 0, false, false, false,
     false, "layer_types of linear_attention and full_attention (default: full on even layers)",
     "sliding_window_pattern", 15, Reader::kLightning},
    {"olmo_hybrid", "OlmoHybridConfig", 65536, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "layer_types of linear_attention and full_attention (default: full iff i % 4 == 3)",
     "sliding_window_pattern", 15, Reader::kOlmoHybrid},
    // Every layer a Mamba mixer, no attention (kvring/hf_config/ssm.h).
    {"mamba", "MambaConfig", 0, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer mamba (Mamba1)",
     "sliding_window_pattern", 15, Reader::kStateSpace},
    {"falcon_mamba", "FalconMambaConfig", 0, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer mamba (Mamba1)",
     "sliding_window_pattern", 15, Reader::kStateSpace},
    {"mamba2", "Mamba2Config", 0, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer mamba (Mamba2)",
     "sliding_window_pattern", 15, Reader::kStateSpace},
    {"xlstm", "xLSTMConfig", 0, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every block an mLSTM",
     "sliding_window_pattern", 15, Reader::kXlstm},
    {"zamba", "ZambaConfig", 4096, KvHeadsRule::kNumberNoNullRule, 16, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false,
     "mamba, mamba, hybrid, then hybrid iff (i - 3) % attn_layer_period == attn_layer_offset",
     "sliding_window_pattern", 15, Reader::kZamba},
    {"zamba2", "Zamba2Config", 4096, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false,
     "layers_block_type of mamba and hybrid (attention beside Mamba2) blocks",
     "sliding_window_pattern", 15, Reader::kZamba2},
    // Kimi Delta Attention beside latent attention (kvring/hf_config/kimi_linear.h); remote
    // code, its context model_max_length.
    {"kimi_linear", "KimiLinearConfig (remote code)", 0, KvHeadsRule::kUnused, 0,
     HeadDimRule::kUnused, 0, PatternRule::kAllFull, 0, 0, false, false, false, true,
     "kda_layers and full_attn_layers of linear_attn_config (1-indexed)", "sliding_window_pattern",
     15, Reader::kKimiLinear},
    // MiniMax-M1's lightning attention as its published remote code builds it
    // (kvring/hf_config/hybrid.h): attn_type_list names every layer's mixer.
    {"minimax_m1", "MiniMaxM1Config (remote code)", 131072, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, kNullWindow, 0, false, false, false,
     false, "attn_type_list: 0 lightning attention, 1 softmax attention (required)",
     "sliding_window_pattern", 15, Reader::kLightningRemote},
    // Full and sliding layers of their own shapes (kvring/hf_config/mimo_v2.h); remote code.
    {"mimo_v2_flash", "MiMoV2FlashConfig (remote code)", 32768, KvHeadsRule::kNumberNullIsMha, 32,
     HeadDimRule::kRequired, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "hybrid_layer_pattern: 0 full, 1 sliding (or hybrid_block_size)", "sliding_window_pattern", 15,
     Reader::kMimoV2},
    // Tencent's Hy V3 (HYV3Config): every layer full.
    {"hy_v3", "HYV3Config", 131072, KvHeadsRule::kNumberNoNullRule, 8, HeadDimRule::kDefaultNoNull,
     128, PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"glm4_moe", "Glm4MoeConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    // Sliding-window families (transformers 5.12).
    {"qwen2_vl_text", "Qwen2VLTextConfig", 32768, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kAlwaysHidden, 0, PatternRule::kMaxWindowLayers, 4096, 80, true, false, false,
     false, "sliding iff use_sliding_window and i >= max_window_layers"},
    {"qwen2_5_vl_text", "Qwen2_5_VLTextConfig", 32768, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kAlwaysHidden, 0, PatternRule::kMaxWindowLayers, 4096, 80, true, false, false,
     false, "sliding iff use_sliding_window and i >= max_window_layers"},
    // GLM-4.1V's and GLM-4.5V's text models: every layer full.
    {"glm4v_text", "Glm4vTextConfig", 32768, KvHeadsRule::kNumberNullIsMha, 2,
     HeadDimRule::kAlwaysHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"glm4v_moe_text", "Glm4vMoeTextConfig", 65536, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    // Qwen3-VL's text models: every layer full (no sliding keys).
    {"qwen3_vl_text", "Qwen3VLTextConfig", 128000, KvHeadsRule::kNumberNullIsMha, 32,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"qwen3_vl_moe_text", "Qwen3VLMoeTextConfig", 128000, KvHeadsRule::kNumberNoNullRule, 16,
     HeadDimRule::kHiddenOverHeads, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"olmo3", "Olmo3Config", 2048, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden, 0,
     PatternRule::kEveryNthFull, 4096, 4, true, false, false, false, "full iff (i + 1) % 4 == 0"},
    {"exaone4", "Exaone4Config", 2048, KvHeadsRule::kNumberNoNullRule, 32,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kSlidingPattern, 4096, 4, true, false, false,
     false, "full iff (i + 1) % sliding_window_pattern == 0"},
    // rednote's dots.llm1: Qwen 2's layers, switched by the window itself.
    {"dots1", "Dots1Config", 2048, KvHeadsRule::kNumberNullIsMha, 32, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kWindowFromLayer, 4096, 62, true, false, false, false,
     "sliding iff sliding_window is not null and i >= max_window_layers"},
    // Meta's CWM: layers 0, 4, 8, ... full without layer_types.
    {"cwm", "CwmConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8, HeadDimRule::kDefaultNoNull,
     128, PatternRule::kFirstOfEveryNth, 8192, 4, true, false, false, false, "full iff i % 4 == 0"},
    // Mellum 2 (JetBrains): all full unless layer_types names sliding layers.
    {"mellum", "MellumConfig", 131072, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllFull, 1024, 0, true, false, false, false,
     "every layer full_attention"},
    // EXAONE 4's MoE sibling (K-EXAONE): EXAONE 4's rules and defaults.
    {"exaone_moe", "ExaoneMoeConfig", 2048, KvHeadsRule::kNumberNoNullRule, 32,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kSlidingPattern, 4096, 4, true, false, false,
     false, "full iff (i + 1) % sliding_window_pattern == 0"},
    {"afmoe", "AfmoeConfig", 16384, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kDefaultNoNull, 128,
     PatternRule::kSlidingPattern, 1024, 4, true, false, false, false,
     "full iff (i + 1) % global_attn_every_n_layers == 0", "global_attn_every_n_layers"},
    {"smollm3", "SmolLM3Config", 32768, KvHeadsRule::kNumberNullIsMha, 4,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kNoRopeSliding, kNullWindow, 0, true, false,
     false, false, "sliding iff use_sliding_window and no_rope_layers[i] == 0"},
    {"ministral", "MinistralConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kRequired, 0, PatternRule::kAllSliding, 4096, 0, true, false, false, false,
     "every layer slides when sliding_window is set"},
    {"ministral3", "Ministral3Config", 262144, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllSliding, kNullWindow, 0, false, false,
     false, false, "every layer slides when sliding_window is set"},
    // Gemma 4: global layers of their own shape (kvring/hf_config/gemma4.h).
    {"gemma4_text", "Gemma4TextConfig", 131072, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kEveryNthFull, 512, 6, true, false, true, false,
     "full iff (i + 1) % 6 == 0, and the last layer", "sliding_window_pattern", 0, Reader::kGemma4},
    // Gemma 4 12B's unified text model: Gemma 4's rules with its own defaults.
    {"gemma4_unified_text", "Gemma4UnifiedTextConfig", 262144, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kDefaultNoNull, 256, PatternRule::kEveryNthFull, 1024, 6, true, false, true,
     false, "full iff (i + 1) % 6 == 0, and the last layer", "sliding_window_pattern", 0,
     Reader::kGemma4},
    // Qwen Omni's thinker text models: Qwen2.5-Omni's by Qwen 2's rules (its own defaults),
    // Qwen3-Omni's attention always full (its layers drop any sliding_window).
    {"qwen2_5_omni_text", "Qwen2_5OmniTextConfig", 32768, KvHeadsRule::kNumberNullIsMha, 4,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kMaxWindowLayers, 32768, 28, true, false, false,
     false, "sliding iff use_sliding_window and i >= max_window_layers"},
    {"qwen3_omni_moe_text", "Qwen3OmniMoeTextConfig", 32768, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    // Families whose every layer attends fully, read as their classes read the Llama keys.
    {"gemma", "GemmaConfig", 8192, KvHeadsRule::kNumberNoNullRule, 16, HeadDimRule::kDefaultNoNull,
     256, PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"olmo", "OlmoConfig", 2048, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"olmo2", "Olmo2Config", 2048, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"olmoe", "OlmoeConfig", 4096, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"flex_olmo", "FlexOlmoConfig", 4096, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"granite", "GraniteConfig", 2048, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"granitemoe", "GraniteMoeConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"granitemoeshared", "GraniteMoeSharedConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"cohere", "CohereConfig", 8192, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"glm", "GlmConfig", 131072, KvHeadsRule::kNumberNoNullRule, 2, HeadDimRule::kDefaultNoNull,
     128, PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"glm4", "Glm4Config", 131072, KvHeadsRule::kNumberNoNullRule, 2, HeadDimRule::kDefaultNoNull,
     128, PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"ernie4_5", "Ernie4_5Config", 131072, KvHeadsRule::kNumberNullIsMha, 2,
     HeadDimRule::kDefaultNullIsHidden, 128, PatternRule::kAllFull, 0, 0, false, false, false,
     false, "every layer full_attention"},
    {"ernie4_5_moe", "Ernie4_5_MoeConfig", 131072, KvHeadsRule::kNumberNoNullRule, 4,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"stablelm", "StableLmConfig", 4096, KvHeadsRule::kNumberNoNullRule, 32,
     HeadDimRule::kAlwaysHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"helium", "HeliumConfig", 4096, KvHeadsRule::kNumberNoNullRule, 20,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"apertus", "ApertusConfig", 65536, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"arcee", "ArceeConfig", 4096, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kHiddenOverHeads, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"seed_oss", "SeedOssConfig", 524288, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kDefaultNullIsHidden, 128, PatternRule::kAllFull, 0, 0, false, false, false,
     false, "every layer full_attention"},
    {"solar_open", "SolarOpenConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"hunyuan_v1_dense", "HunYuanDenseV1Config", 2048, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kRequired, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"hunyuan_v1_moe", "HunYuanMoEV1Config", 2048, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kRequired, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"jais2", "Jais2Config", 8192, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kHiddenOverHeads, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"minimax_m2", "MiniMaxM2Config", 196608, KvHeadsRule::kNumberNoNullRule, 8,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"nanochat", "NanoChatConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kAbsentIsHidden, 0, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention"},
    {"bitnet", "BitNetConfig", 2048, KvHeadsRule::kNumberNullIsMha, 5, HeadDimRule::kAbsentIsHidden,
     0, PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
    {"phi", "PhiConfig", 2048, KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every layer full_attention"},
};

// Families transformers reads whose attention kvring does not plan yet: refused with the
// reason, never planned wrong.
struct Unplanned {
  const char* model_type;
  const char* class_name;
  const char* reason;
};
inline constexpr Unplanned kUnplanned[] = {
    {"minimax_m3_vl_text", "MiniMaxM3VLTextConfig",
     "its minimax_m3_sparse layers (block-sparse attention chosen by a lightning indexer) are not "
     "a layer kind kvring plans yet"},
    {"deepseek_v4", "DeepseekV4Config",
     "its compressed attention is not a layer kind kvring plans yet"},
    {"mllama_text_model", "MllamaTextConfig",
     "its cross-attention layers (cross_attention_layers) attend the image's tokens, not the "
     "sequence's, a layer kind kvring does not plan yet"},
    {"t5gemma", "T5GemmaConfig",
     "an encoder-decoder: its decoder's cross-attention attends the encoder's outputs, a layer "
     "kind kvring does not plan yet"},
    {"t5gemma2", "T5Gemma2Config",
     "an encoder-decoder: its decoder's cross-attention attends the encoder's outputs, a layer "
     "kind kvring does not plan yet"},
    {"longcat_flash", "LongcatFlashConfig",
     "each decoder layer runs two latent attentions with caches of their own, which kvring "
     "does not plan as one layer yet"},
};

inline const Family* FindFamily(const std::string& model_type) {
  for (const Family& family : kFamilies) {
    if (model_type == family.model_type) return &family;
  }
  return nullptr;
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_FAMILIES_H_
