// kvring/hf_config/families.h: the transformers families kvring reads config.json files of:
// for each model_type, its configuration class, its defaults and the rules by which it fills
// what a file leaves out (KV heads, head_dim, the layer pattern; kvring/hf_config/
// family_rules.h). Data only; the reading is in kvring/hf_config.h. Each rule restates what the
// family's transformers configuration class does with the keys; nothing here is taken from
// transformers' code.
#ifndef KVRING_HF_CONFIG_FAMILIES_H_
#define KVRING_HF_CONFIG_FAMILIES_H_

#include <string>

#include "kvring/hf_config/family_rules.h"

namespace kvring {
namespace detail {
namespace hf {

inline constexpr Family kFamilies[] = {
    AllFullFamily("llama", "LlamaConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kHiddenOverHeads, 0),
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
    // Phi-4-multimodal's language model: its text keys at the top level, as Phi-3's.
    {"phi4_multimodal", "Phi4MultimodalConfig", 131072, KvHeadsRule::kNumberNullIsMha, 8,
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
    // LongCat-Flash: two latent attentions a decoder layer, a cache slot each (mla.h).
    {"longcat_flash", "LongcatFlashConfig", 131072, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused,
     0, PatternRule::kAllFull, 0, 0, false, false, false, true,
     "two latent attentions a decoder layer (cache slots 2i and 2i + 1)", "sliding_window_pattern",
     15, Reader::kLongcatFlash},
    // LongCat-Flash-Lite: remote code whose class extends transformers' LongcatFlashConfig (its
    // n-gram embeddings change no attention).
    {"longcat_flash_ngram", "LongcatFlashNgramConfig (remote code)", 131072, KvHeadsRule::kUnused,
     0, HeadDimRule::kUnused, 0, PatternRule::kAllFull, 0, 0, false, false, false, true,
     "two latent attentions a decoder layer (cache slots 2i and 2i + 1)", "sliding_window_pattern",
     15, Reader::kLongcatFlash},
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
    {"rwkv", "RwkvConfig", 1024, KvHeadsRule::kUnused, 0, HeadDimRule::kUnused, 0,
     PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every block a time mix (WKV) and a channel mix", "sliding_window_pattern", 15, Reader::kRwkv},
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
    AllFullFamily("hy_v3", "HYV3Config", 131072, KvHeadsRule::kNumberNoNullRule, 8,
                  HeadDimRule::kDefaultNoNull, 128),
    AllFullFamily("glm4_moe", "Glm4MoeConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
                  HeadDimRule::kAbsentIsHidden, 0),
    // Sliding-window families (transformers 5.12).
    {"qwen2_vl_text", "Qwen2VLTextConfig", 32768, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kAlwaysHidden, 0, PatternRule::kMaxWindowLayers, 4096, 80, true, false, false,
     false, "sliding iff use_sliding_window and i >= max_window_layers"},
    {"qwen2_5_vl_text", "Qwen2_5_VLTextConfig", 32768, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kAlwaysHidden, 0, PatternRule::kMaxWindowLayers, 4096, 80, true, false, false,
     false, "sliding iff use_sliding_window and i >= max_window_layers"},
    // GLM-4.1V's and GLM-4.5V's text models: every layer full.
    AllFullFamily("glm4v_text", "Glm4vTextConfig", 32768, KvHeadsRule::kNumberNullIsMha, 2,
                  HeadDimRule::kAlwaysHidden, 0),
    AllFullFamily("glm4v_moe_text", "Glm4vMoeTextConfig", 65536, KvHeadsRule::kNumberNoNullRule, 8,
                  HeadDimRule::kAbsentIsHidden, 0),
    // Qwen3-VL's text models: every layer full (no sliding keys).
    AllFullFamily("qwen3_vl_text", "Qwen3VLTextConfig", 128000, KvHeadsRule::kNumberNullIsMha, 32,
                  HeadDimRule::kDefaultNoNull, 128),
    AllFullFamily("qwen3_vl_moe_text", "Qwen3VLMoeTextConfig", 128000,
                  KvHeadsRule::kNumberNoNullRule, 16, HeadDimRule::kHiddenOverHeads, 0),
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
    AllFullFamily("qwen3_omni_moe_text", "Qwen3OmniMoeTextConfig", 32768,
                  KvHeadsRule::kNumberNoNullRule, 4, HeadDimRule::kAbsentIsHidden, 0),
    // Families whose every layer attends fully, read as their classes read the Llama keys.
    AllFullFamily("gemma", "GemmaConfig", 8192, KvHeadsRule::kNumberNoNullRule, 16,
                  HeadDimRule::kDefaultNoNull, 256),
    AllFullFamily("olmo", "OlmoConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("olmo2", "Olmo2Config", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("olmoe", "OlmoeConfig", 4096, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("flex_olmo", "FlexOlmoConfig", 4096, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("granite", "GraniteConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("granitemoe", "GraniteMoeConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("granitemoeshared", "GraniteMoeSharedConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("cohere", "CohereConfig", 8192, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("glm", "GlmConfig", 131072, KvHeadsRule::kNumberNoNullRule, 2,
                  HeadDimRule::kDefaultNoNull, 128),
    AllFullFamily("glm4", "Glm4Config", 131072, KvHeadsRule::kNumberNoNullRule, 2,
                  HeadDimRule::kDefaultNoNull, 128),
    {"ernie4_5", "Ernie4_5Config", 131072, KvHeadsRule::kNumberNullIsMha, 2,
     HeadDimRule::kDefaultNullIsHidden, 128, PatternRule::kAllFull, 0, 0, false, false, false,
     false, "every layer full_attention"},
    AllFullFamily("ernie4_5_moe", "Ernie4_5_MoeConfig", 131072, KvHeadsRule::kNumberNoNullRule, 4,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("stablelm", "StableLmConfig", 4096, KvHeadsRule::kNumberNoNullRule, 32,
                  HeadDimRule::kAlwaysHidden, 0),
    AllFullFamily("helium", "HeliumConfig", 4096, KvHeadsRule::kNumberNoNullRule, 20,
                  HeadDimRule::kDefaultNoNull, 128),
    AllFullFamily("apertus", "ApertusConfig", 65536, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("arcee", "ArceeConfig", 4096, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kHiddenOverHeads, 0),
    {"seed_oss", "SeedOssConfig", 524288, KvHeadsRule::kNumberNullIsMha, 8,
     HeadDimRule::kDefaultNullIsHidden, 128, PatternRule::kAllFull, 0, 0, false, false, false,
     false, "every layer full_attention"},
    AllFullFamily("solar_open", "SolarOpenConfig", 131072, KvHeadsRule::kNumberNoNullRule, 8,
                  HeadDimRule::kDefaultNoNull, 128),
    AllFullFamily("hunyuan_v1_dense", "HunYuanDenseV1Config", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kRequired, 0),
    AllFullFamily("hunyuan_v1_moe", "HunYuanMoEV1Config", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kRequired, 0),
    AllFullFamily("jais2", "Jais2Config", 8192, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kHiddenOverHeads, 0),
    AllFullFamily("minimax_m2", "MiniMaxM2Config", 196608, KvHeadsRule::kNumberNoNullRule, 8,
                  HeadDimRule::kDefaultNoNull, 128),
    AllFullFamily("nemotron", "NemotronConfig", 4096, KvHeadsRule::kRequired, 0,
                  HeadDimRule::kHiddenOverHeads, 0),
    AllFullFamily("hyperclovax", "HyperCLOVAXConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kHiddenOverHeads, 0),
    AllFullFamily("nanochat", "NanoChatConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("bitnet", "BitNetConfig", 2048, KvHeadsRule::kNumberNullIsMha, 5,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("phi", "PhiConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kAbsentIsHidden, 0),
    // GPT-style families (kvring/hf_config/gpt.h): sizes under keys of their own, K/V heads by
    // their attention's rule.
    GptStyleFamily("gpt2", "GPT2Config", 1024, "every layer full_attention"),
    GptStyleFamily("gptj", "GPTJConfig", 2048, "every layer full_attention"),
    GptStyleFamily("codegen", "CodeGenConfig", 2048, "every layer full_attention"),
    GptStyleFamily("gpt_bigcode", "GPTBigCodeConfig", 1024, "every layer full_attention"),
    GptStyleFamily("gpt_neo", "GPTNeoConfig", 2048,
                   "attention_types: global (full) or local (window_size) blocks", 256),
    GptStyleFamily("gpt_neox", "GPTNeoXConfig", 2048, "every layer full_attention"),
    GptStyleFamily("opt", "OPTConfig", 2048, "every layer full_attention"),
    GptStyleFamily("falcon", "FalconConfig", 2048, "every layer full_attention"),
    GptStyleFamily("gpt-sw3", "GPT2Config", 1024, "every layer full_attention"),
    GptStyleFamily("openai-gpt", "OpenAIGPTConfig", 512, "every layer full_attention"),
    GptStyleFamily("xglm", "XGLMConfig", 2048, "every layer full_attention"),
    GptStyleFamily("persimmon", "PersimmonConfig", 16384, "every layer full_attention"),
    GptStyleFamily("biogpt", "BioGptConfig", 1024, "every layer full_attention"),
    GptStyleFamily("gpt_neox_japanese", "GPTNeoXJapaneseConfig", 2048,
                   "every layer full_attention"),
    GptStyleFamily("dbrx", "DbrxConfig", 2048, "every layer full_attention"),
    // ModernBERT's decoder: global and local layers (kvring/hf_config/bespoke.h).
    {"modernbert-decoder", "ModernBertDecoderConfig", 8192, KvHeadsRule::kUnused, 0,
     HeadDimRule::kUnused, 0, PatternRule::kAllFull, 64, 0, true, false, false, false,
     "full iff i % global_attn_every_n_layers (default 3) == 0", "sliding_window_pattern", 15,
     Reader::kModernBertDecoder},
    // JetMoE's mixture of attention heads (kvring/hf_config/bespoke.h).
    {"jetmoe", "JetMoeConfig", 4096, KvHeadsRule::kNumberNoNullRule, 16,
     HeadDimRule::kDefaultNoNull, 128, PatternRule::kAllFull, 0, 0, false, false, false, false,
     "every layer full_attention", "sliding_window_pattern", 15, Reader::kJetMoe},
    AllFullFamily("chameleon", "ChameleonConfig", 4096, KvHeadsRule::kNumberNoNullRule, 32,
                  HeadDimRule::kAlwaysHidden, 0),
    AllFullFamily("aria_text", "AriaTextConfig", 2048, KvHeadsRule::kNoneMeansMha, 0,
                  HeadDimRule::kHiddenOverHeads, 0),
    // The text models of OCR and vision-language wrappers with text classes of their own.
    AllFullFamily("glm_ocr_text", "GlmOcrTextConfig", 131072, KvHeadsRule::kNumberNullIsMha, 8,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("paddleocr_vl_text", "PaddleOCRTextConfig", 131072, KvHeadsRule::kNumberNullIsMha,
                  2, HeadDimRule::kDefaultNullIsHidden, 128),
    AllFullFamily("ernie4_5_vl_moe_text", "Ernie4_5_VLMoeTextConfig", 131072,
                  KvHeadsRule::kNumberNoNullRule, 4, HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("deepseek_ocr2_text", "DeepseekOcr2TextConfig", 2048, KvHeadsRule::kNoneMeansMha,
                  0, HeadDimRule::kAlwaysHidden, 0),
    AllFullFamily("emu3_text_model", "Emu3TextConfig", 9216, KvHeadsRule::kNumberNoNullRule, 8,
                  HeadDimRule::kAbsentIsHidden, 0),
    AllFullFamily("granite4_vision_text", "Granite4VisionTextConfig", 2048,
                  KvHeadsRule::kNoneMeansMha, 0, HeadDimRule::kAbsentIsHidden, 0),
    // HRM-Text: a cache slot per run of each layer of its recurrent stacks (bespoke.h).
    {"hrm_text", "HrmTextConfig", 2048, KvHeadsRule::kUnused, 0, HeadDimRule::kDefaultNoNull, 128,
     PatternRule::kAllFull, 0, 0, false, false, false, false, "every cache slot full_attention",
     "sliding_window_pattern", 15, Reader::kHrmText},
    // Kyutai's speech-to-text decoder: Mistral's sliding layers, a window never null (bespoke.h).
    {"kyutai_speech_to_text", "KyutaiSpeechToTextConfig", 750, KvHeadsRule::kNoneMeansMha, 0,
     HeadDimRule::kHiddenOverHeads, 0, PatternRule::kAllSliding, 375, 0, false, false, false, false,
     "every layer slides (sliding_window)", "sliding_window_pattern", 15, Reader::kKyutaiSpeech},
};

// Families transformers reads whose attention kvring does not plan or compute yet: refused
// with the reason, never planned wrong.
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
    {"bloom", "BloomConfig",
     "its attention adds ALiBi position biases, which kvring's attention does not apply yet"},
    {"mpt", "MptConfig",
     "its attention adds ALiBi position biases (attn_config.alibi, true by default), which "
     "kvring's attention does not apply yet"},
    {"diffllama", "DiffLlamaConfig",
     "its differential attention subtracts a second softmax map's output from the first's, "
     "each over the values of two K/V heads, which kvring's attention does not compute yet"},
    {"doge", "DogeConfig",
     "its dynamic mask attention keeps, per query, the keep_window_size positions its learned "
     "mask ranks highest, which kvring's attention does not compute yet"},
    {"moshi", "MoshiConfig",
     "its depformer runs a second transformer over each step's codebooks with a cache of its "
     "own, which kvring does not plan beside the main one yet"},
    {"gemma4_assistant", "Gemma4AssistantConfig",
     "a drafter for speculative decoding whose every layer attends the K/V of the Gemma 4 model "
     "it drafts for (that model's last sliding and last full layer) and keeps none of its own: "
     "plan that model, to which the assistant adds no KV cache"},
    {"gemma4_unified_assistant", "Gemma4UnifiedAssistantConfig",
     "a drafter for speculative decoding whose every layer attends the K/V of the Gemma 4 model "
     "it drafts for (that model's last sliding and last full layer) and keeps none of its own: "
     "plan that model, to which the assistant adds no KV cache"},
};

inline const Unplanned* FindUnplanned(const std::string& model_type) {
  for (const Unplanned& unplanned : kUnplanned) {
    if (model_type == unplanned.model_type) return &unplanned;
  }
  return nullptr;
}

// The refusal of a family kvring does not plan: its name, its class and the reason.
inline std::string UnplannedMessage(const Unplanned& unplanned) {
  return std::string("'") + unplanned.model_type + "' (transformers' " + unplanned.class_name +
         "): " + unplanned.reason + "; refused rather than planned wrong";
}

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
