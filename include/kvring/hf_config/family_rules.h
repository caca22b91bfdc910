// kvring/hf_config/family_rules.h: the vocabulary of the family table (kvring/hf_config/
// families.h): the rules by which a transformers configuration class fills what a file leaves
// out (KV heads, head_dim, the layer pattern), which reader reads a family, and the Family
// record itself. Data types only.
#ifndef KVRING_HF_CONFIG_FAMILY_RULES_H_
#define KVRING_HF_CONFIG_FAMILY_RULES_H_

#include <cstdint>

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
  kRequired,          // class default None, which its attention cannot take: absent or null
                      // refused (Nemotron)
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
  kGpt,
  kJetMoe,
  kModernBertDecoder,
  kRwkv,
  kHrmText,
  kKyutaiSpeech,
  kLongcatFlash,
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

// The row of a family whose every layer attends fully and which reads no window, chunk or KV
// sharing: its class's context, KV heads and head_dim rules.
constexpr Family AllFullFamily(const char* model_type, const char* class_name,
                               uint64_t max_position_embeddings, KvHeadsRule kv_heads,
                               uint64_t kv_heads_default, HeadDimRule head_dim,
                               uint64_t head_dim_default) {
  return Family{model_type,
                class_name,
                max_position_embeddings,
                kv_heads,
                kv_heads_default,
                head_dim,
                head_dim_default,
                PatternRule::kAllFull,
                0,
                0,
                false,
                false,
                false,
                false,
                "every layer full_attention"};
}

// The row of a GPT-style family (kvring/hf_config/gpt.h: its keys and K/V rule are there): its
// class's context, and GPT-Neo's default window (0 for the others, which have none).
constexpr Family GptStyleFamily(const char* model_type, const char* class_name,
                                uint64_t max_position_embeddings, const char* rule_text,
                                uint64_t window_default = 0) {
  return Family{model_type,
                class_name,
                max_position_embeddings,
                KvHeadsRule::kUnused,
                0,
                HeadDimRule::kUnused,
                0,
                PatternRule::kAllFull,
                window_default,
                0,
                false,
                false,
                false,
                false,
                rule_text,
                "sliding_window_pattern",
                15,
                Reader::kGpt};
}

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_FAMILY_RULES_H_
