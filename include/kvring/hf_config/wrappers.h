// kvring/hf_config/wrappers.h: the multimodal and speech checkpoints whose language model is
// configured under text_config, and which text family each reads there. Data only; the
// reading is kvring/hf_config.h's TextModel. Each row restates what the wrapper's transformers
// configuration class does with its text_config; nothing here is taken from transformers' code.
#ifndef KVRING_HF_CONFIG_WRAPPERS_H_
#define KVRING_HF_CONFIG_WRAPPERS_H_

#include <cstdint>

namespace kvring {
namespace detail {
namespace hf {

// A value a wrapper class puts under its text_config's missing key before the text family
// reads it (transformers: {**defaults, **text_config}). `count`: the value is one checkpoint's
// count, not a rule, so a file without the key is refused rather than planned with it.
struct TextDefault {
  const char* key;  // nullptr ends a list
  uint64_t value;
  bool count;
};

// Voxtral (Voxtral Mini's text model) and GLM-ASR: only the keys that decide the plan; the
// others they fill (vocabulary, RoPE, norms) do not.
inline constexpr TextDefault kVoxtralText[] = {{"hidden_size", 3072, false},
                                               {"num_key_value_heads", 8, true},
                                               {"head_dim", 128, false},
                                               {"max_position_embeddings", 131072, false},
                                               {nullptr, 0, false}};
inline constexpr TextDefault kGlmAsrText[] = {{"hidden_size", 2048, false},
                                              {"num_key_value_heads", 4, true},
                                              {"max_position_embeddings", 8192, false},
                                              {nullptr, 0, false}};

struct Wrapper {
  const char* model_type;
  const char* text_model_type;  // the family text_config holds (the default under any_text)
  bool flat = false;      // without text_config, the text keys sit at the top level (older files)
  bool any_text = false;  // text_config.model_type names the family (text_model_type: default)
  bool typed = false;     // text_config.model_type is required (the class has no default)
  const char* class_name = nullptr;            // for messages about text_defaults
  const TextDefault* text_defaults = nullptr;  // what the class fills in text_config
  const char* outer = nullptr;  // the key of the object holding text_config (nullptr: the top)
  // The class sets its text model's use_bidirectional_attention for a prefix that attends both
  // ways through its masks (PaliGemma), generation staying causal: a causal cache, whatever
  // text_config says of that key.
  bool prefix_lm = false;
};

inline constexpr Wrapper kWrappers[] = {
    // Wrappers of one text family: a text_config.model_type, when present, must name it.
    {"gemma3", "gemma3_text"},
    {"gemma3n", "gemma3n_text"},
    {"llama4", "llama4_text"},
    {"gemma4", "gemma4_text"},
    {"qwen3_5", "qwen3_5_text"},
    {"qwen3_5_moe", "qwen3_5_moe_text"},
    {"qwen2_vl", "qwen2_vl_text", true},
    {"qwen2_5_vl", "qwen2_5_vl_text", true},
    {"qwen3_vl", "qwen3_vl_text"},
    {"glm4v", "glm4v_text"},
    {"glm4v_moe", "glm4v_moe_text"},
    {"qwen3_vl_moe", "qwen3_vl_moe_text"},
    {"minimax_m3_vl", "minimax_m3_vl_text"},
    {"mllama", "mllama_text_model"},  // Llama 3.2 Vision: refused (its cross-attention)
    // Qwen Omni: the thinker (the language model that writes text) keeps its text_config in
    // thinker_config; the talker, which turns it into speech, has a cache of its own that
    // this plan does not count. The thinker classes build their text class from any
    // text_config.
    {"qwen2_5_omni", "qwen2_5_omni_text", false, false, false, nullptr, nullptr, "thinker_config"},
    {"qwen2_5_omni_thinker", "qwen2_5_omni_text"},
    {"qwen3_omni_moe", "qwen3_omni_moe_text", false, false, false, nullptr, nullptr,
     "thinker_config"},
    {"qwen3_omni_moe_thinker", "qwen3_omni_moe_text"},
    {"gemma4_unified", "gemma4_unified_text"},
    {"aria", "aria_text"},
    // Classes that build their own text class from any text_config.
    {"glm_ocr", "glm_ocr_text"},
    {"paddleocr_vl", "paddleocr_vl_text"},
    {"ernie4_5_vl_moe", "ernie4_5_vl_moe_text"},
    {"deepseek_ocr2", "deepseek_ocr2_text"},
    {"emu3", "emu3_text_model"},
    // Ovis 2 builds a Qwen2Config from any text_config, whatever model_type it names.
    {"ovis2", "qwen2"},
    // Wrappers whose text_config.model_type names any family kvring reads (when absent, the
    // class's default family). Mistral 3's multimodal checkpoints: Mistral Small 3.1 mistral,
    // Ministral 3 ministral3, Mistral Small 4 mistral4; LFM2-VL: lfm2 or lfm2_moe.
    {"mistral3", "mistral", false, true},
    {"lfm2_vl", "lfm2", false, true},
    // Vision-language models.
    {"aya_vision", "cohere2", false, true},      // Aya Vision
    {"cohere2_vision", "cohere2", false, true},  // Command A Vision
    {"exaone4_5", "exaone4", false, true},       // EXAONE 4.5
    {"shieldgemma2", "gemma3_text", false, true},
    {"minicpmv4_6", "qwen3_5_text", false, true, true},  // MiniCPM-V 4.6
    {"glm46v", "glm4v_text", false, true},               // GLM-4.6V
    {"glmga", "glm4v_text", false, true},
    {"cosmos3_omni", "qwen3_vl_text", false, true},
    {"idefics2", "mistral", false, true},
    {"idefics3", "llama", false, true},
    {"smolvlm", "llama", false, true},
    {"llava", "llama", false, true},
    {"llava_next", "llama", false, true},
    {"llava_next_video", "llama", false, true},
    {"llava_onevision", "qwen2", false, true},
    {"video_llava", "llama", false, true},
    {"vipllava", "llama", false, true},
    {"internvl", "qwen2", false, true},
    {"janus", "llama", false, true},
    {"deepseek_vl", "llama", false, true},
    {"deepseek_vl_hybrid", "llama", false, true},
    {"perception_lm", "llama", false, true},
    {"fast_vlm", "qwen2", false, true},
    {"video_llama_3", "qwen2", false, true, true},
    {"got_ocr2", "qwen2", false, true},
    {"pp_chart2table", "qwen2", false, true},
    {"lighton_ocr", "qwen3", false, true},
    {"qianfan_ocr", "qwen3", false, true},
    // Granite 4.0 Vision: its own Granite text model by default, any text family.
    {"granite4_vision", "granite4_vision_text", false, true},
    // BLIP-2 and InstructBLIP: a Q-Former's query tokens before an OPT model by default, any
    // text family (a T5 text_config is an encoder-decoder's, which kvring does not read).
    {"blip-2", "opt", false, true},
    {"instructblip", "opt", false, true},
    {"instructblipvideo", "opt", false, true},
    // PaliGemma (1: gemma, 2: gemma2): its image and prompt prefix attends both ways.
    {"paligemma", "gemma", false, true, false, nullptr, nullptr, nullptr, true},
    // Fuyu: without text_config, its own top-level keys make a Persimmon model.
    {"fuyu", "persimmon", true, true},
    // Speech and audio language models. Voxtral and GLM-ASR fill a text_config's missing keys
    // with defaults of their own, whatever family it names.
    {"voxtral", "llama", false, true, false, "VoxtralConfig", kVoxtralText},
    {"glmasr", "llama", false, true, false, "GlmAsrConfig", kGlmAsrText},
    {"qwen2_audio", "qwen2", false, true},
    {"audioflamingo3", "qwen2", false, true},
    {"musicflamingo", "qwen2", false, true},
    {"vibevoice_asr", "qwen2", false, true},
};

}  // namespace hf
}  // namespace detail
}  // namespace kvring

#endif  // KVRING_HF_CONFIG_WRAPPERS_H_
