// Tests of kvring/hf_config.h on the families and wrappers that are rows of data only: the
// families whose every layer attends fully, read by the Llama keys under their own class
// defaults (kvring/hf_config/families.h), the GPT-style families, read by their own keys and
// K/V rules (kvring/hf_config/gpt.h), JetMoE, ModernBERT's decoder, HRM-Text and Kyutai's
// speech-to-text decoder (kvring/hf_config/bespoke.h), the families refused by name, and the
// multimodal and speech wrappers
// (kvring/hf_config/wrappers.h), each of which reads its language model from text_config as
// the family text_config.model_type names or, when absent, the wrapper class's default
// family. Every expected layer is worked out here by hand from the file and the family's rules
// (docs/configs.md); tools/transformers/check_configs.py checks the same files against
// transformers itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "hf_config_files.h"
#include "kvring/hf_config.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace tools {
namespace {

// `kinds` has one letter a layer: 'S' sliding over `window`, 'G' global; each layer its own
// owner; planned at the file's context with a batch of 4.
void ExpectLayers(const std::string& file, const std::string& family, uint64_t context,
                  const std::string& kinds, uint64_t window, uint32_t kv_heads, uint32_t head_dim) {
  SCOPED_TRACE(file);
  const HfModel model = Read(file);
  EXPECT_EQ(model.model_type, family);
  EXPECT_EQ(model.max_context, context);
  std::vector<Row> rows;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const bool sliding = kinds[i] == 'S';
    rows.push_back(
        {kinds[i], sliding ? window : 0, i, sliding ? std::min(window + 3, context) : context});
  }
  ExpectRows(Plan(model.layers, context, 4), rows, kv_heads, head_dim);
}

TEST(HfConfigFullFamilies, EachFillsWhatTheFileLeavesOutAsItsClassDoes) {
  // Every layer full. KV heads absent: MHA where the class default is None (OLMo, Granite,
  // Cohere, ...); null: MHA there too, and in ERNIE 4.5, Seed-OSS and BitNet, whose classes
  // map None to the query heads. head_dim absent: the class's number (Gemma 256; GLM, ERNIE
  // 4.5, Helium, Seed-OSS, MiniMax M2 128) or hidden_size / num_attention_heads (256 / 4).
  ExpectLayers("gemma_tiny.json", "gemma", 8192, "GG", 0, 1, 256);
  ExpectLayers("olmo_tiny.json", "olmo", 2048, "GG", 0, 4, 64);
  ExpectLayers("olmo2_tiny.json", "olmo2", 4096, "GG", 0, 2, 64);
  ExpectLayers("olmoe_tiny.json", "olmoe", 4096, "GG", 0, 4, 64);
  ExpectLayers("flex_olmo_tiny.json", "flex_olmo", 4096, "GG", 0, 4, 32);
  ExpectLayers("granite_tiny.json", "granite", 2048, "GG", 0, 2, 64);
  ExpectLayers("granitemoe_tiny.json", "granitemoe", 2048, "GG", 0, 4, 64);
  ExpectLayers("granitemoeshared_tiny.json", "granitemoeshared", 131072, "GG", 0, 4, 64);
  ExpectLayers("cohere_tiny.json", "cohere", 8192, "GG", 0, 4, 64);
  ExpectLayers("glm_tiny.json", "glm", 131072, "GG", 0, 2, 128);
  ExpectLayers("glm4_tiny.json", "glm4", 32768, "GG", 0, 2, 128);
  ExpectLayers("ernie4_5_tiny.json", "ernie4_5", 131072, "GG", 0, 4, 128);
  ExpectLayers("ernie4_5_moe_tiny.json", "ernie4_5_moe", 131072, "GG", 0, 4, 64);
  ExpectLayers("stablelm_tiny.json", "stablelm", 4096, "GG", 0, 4, 64);
  ExpectLayers("helium_tiny.json", "helium", 4096, "GG", 0, 2, 128);
  ExpectLayers("apertus_tiny.json", "apertus", 65536, "GG", 0, 4, 64);
  // Arcee: head_dim null is hidden_size / num_attention_heads (its class maps None so).
  ExpectLayers("arcee_tiny.json", "arcee", 4096, "GG", 0, 4, 64);
  // Seed-OSS: head_dim null is hidden_size / num_attention_heads (its default, absent, 128).
  ExpectLayers("seed_oss_tiny.json", "seed_oss", 524288, "GG", 0, 4, 64);
  ExpectLayers("solar_open_tiny.json", "solar_open", 131072, "GG", 0, 2, 64);
  ExpectLayers("hunyuan_v1_dense_tiny.json", "hunyuan_v1_dense", 2048, "GG", 0, 4, 32);
  ExpectLayers("hunyuan_v1_moe_tiny.json", "hunyuan_v1_moe", 2048, "GG", 0, 2, 64);
  ExpectLayers("jais2_tiny.json", "jais2", 8192, "GG", 0, 4, 64);
  ExpectLayers("minimax_m2_tiny.json", "minimax_m2", 196608, "GG", 0, 2, 128);
  ExpectLayers("nanochat_tiny.json", "nanochat", 2048, "GG", 0, 4, 64);
  ExpectLayers("bitnet_tiny.json", "bitnet", 2048, "GG", 0, 4, 64);
  // Nemotron: head_dim null is hidden_size / num_attention_heads; HyperCLOVA X: KV heads and
  // head_dim absent, MHA of 256 / 4.
  ExpectLayers("nemotron_tiny.json", "nemotron", 4096, "GG", 0, 2, 64);
  ExpectLayers("hyperclovax_tiny.json", "hyperclovax", 2048, "GG", 0, 4, 64);
  // Phi-2's shape: 2560 / 32 = 80 a head, MHA.
  ExpectLayers("phi_tiny.json", "phi", 2048, "GG", 0, 32, 80);
  // Chameleon: KV heads given (its class default 32 is a count); head_dim always 256 / 4.
  ExpectLayers("chameleon_tiny.json", "chameleon", 4096, "GG", 0, 2, 64);
  // JetMoE: 4 K/V heads of kv_channels 32; queries from 2 attention experts: 8 query heads.
  ExpectLayers("jetmoe_tiny.json", "jetmoe", 4096, "GG", 0, 4, 32);
  EXPECT_EQ(Read("jetmoe_tiny.json").num_attention_heads, 8u);
  // head_dim, the alias of kv_channels, wins when both are given (transformers sets it last).
  ExpectLayers("jetmoe_head_dim.json", "jetmoe", 4096, "GG", 0, 2, 64);
  EXPECT_EQ(Read("jetmoe_head_dim.json").num_attention_heads, 8u);
}

TEST(HfConfigFullFamilies, BadFilesAreRefusedNamingTheKey) {
  ExpectToolRefuses("bad/gemma_no_kv_heads.json",
                    "num_key_value_heads: is missing; GemmaConfig's default 16 is one "
                    "checkpoint's count");
  ExpectToolRefuses("bad/glm4_null_head_dim.json", "head_dim: is null; Glm4Config needs a number");
  ExpectToolRefuses("bad/hunyuan_v1_dense_no_head_dim.json",
                    "head_dim: is missing; HunYuanDenseV1Config's default None leaves its "
                    "attention without a head dimension");
  ExpectToolRefuses("bad/olmo2_sliding_window.json",
                    "sliding_window: 64 is set, but Olmo2Config has no sliding window");
  ExpectToolRefuses("bad/nemotron_no_kv_heads.json",
                    "num_key_value_heads: is missing; NemotronConfig's default None leaves its "
                    "attention without a KV head count");
  ExpectToolRefuses("bad/jetmoe_heads.json",
                    "num_attention_heads: 4 is not num_key_value_heads x num_experts_per_tok = 8, "
                    "which JetMoeConfig's attention uses");
  ExpectToolRefuses("bad/jetmoe_top_k.json",
                    "num_experts_per_tok: 3 is more than num_local_experts 2");
  ExpectToolRefuses("bad/chameleon_null_kv_heads.json",
                    "num_key_value_heads: is null; ChameleonConfig's default 32 is one "
                    "checkpoint's count");
  ExpectToolRefuses("bad/minimax_m2_null_kv_heads.json",
                    "num_key_value_heads: is null; MiniMaxM2Config's default 8 is one checkpoint's "
                    "count");
}

TEST(HfConfigGptFamilies, EachReadsItsOwnKeysAndItsAttentionsKvRule) {
  // GPT-2's n_layer, n_head, n_embd and n_positions; one K/V head per query head.
  ExpectLayers("gpt2_tiny.json", "gpt2", 2048, "GGG", 0, 4, 64);
  // GPT-J and CodeGen: n_positions (CodeGen's n_ctx unread), 2048 when absent.
  ExpectLayers("gptj_tiny.json", "gptj", 2048, "GG", 0, 4, 64);
  EXPECT_TRUE(HasDefault(Read("gptj_tiny.json"), "n_positions", "2048"));
  ExpectLayers("codegen_tiny.json", "codegen", 4096, "GG", 0, 4, 64);
  // GPT BigCode (StarCoder): multi_query keeps one K/V head, else one per query head; the
  // usual names read as its own (num_hidden_layers for n_layer, ...).
  ExpectLayers("gpt_bigcode_tiny.json", "gpt_bigcode", 8192, "GG", 0, 1, 64);
  ExpectLayers("gpt_bigcode_mha.json", "gpt_bigcode", 1024, "GG", 0, 4, 64);
  // GPT-Neo: attention_types [[global, local] x 2, [local] x 2] with a window of 64.
  ExpectLayers("gpt_neo_tiny.json", "gpt_neo", 2048, "GSGSSS", 64, 4, 64);
  ExpectLayers("gpt_neox_tiny.json", "gpt_neox", 4096, "GG", 0, 8, 64);
  ExpectLayers("opt_tiny.json", "opt", 2048, "GG", 0, 4, 64);
  // Falcon: multi_query (the default) keeps one K/V head; new_decoder_architecture keeps
  // num_kv_heads (transformers' own cache repeats them for every query head; engines do not).
  ExpectLayers("falcon_mqa.json", "falcon", 2048, "GG", 0, 1, 64);
  ExpectLayers("falcon_new_arch.json", "falcon", 8192, "GG", 0, 2, 64);
  // GPT-SW3 (GPT-2's class), GPT-1 (512 positions when absent), XGLM (num_layers,
  // attention_heads, d_model), Persimmon (16384), BioGPT and GPT-NeoX Japanese: one K/V head
  // per query head.
  ExpectLayers("gpt_sw3_tiny.json", "gpt-sw3", 2048, "GG", 0, 4, 64);
  ExpectLayers("openai_gpt_tiny.json", "openai-gpt", 512, "GG", 0, 4, 64);
  ExpectLayers("xglm_tiny.json", "xglm", 2048, "GG", 0, 4, 64);
  ExpectLayers("persimmon_tiny.json", "persimmon", 16384, "GG", 0, 4, 64);
  ExpectLayers("biogpt_tiny.json", "biogpt", 1024, "GG", 0, 4, 64);
  ExpectLayers("gpt_neox_japanese_tiny.json", "gpt_neox_japanese", 2048, "GG", 0, 4, 64);
  // DBRX: n_layers, n_heads, d_model, max_seq_len; attn_config.kv_n_heads 2 of 8 heads.
  ExpectLayers("dbrx_tiny.json", "dbrx", 32768, "GG", 0, 2, 64);
}

TEST(HfConfigGptFamilies, EveryGptStyleRowHasItsKeysAndEveryKeysEntryItsRow) {
  using detail::hf::kFamilies;
  using detail::hf::kGptFamilies;
  size_t rows = 0;
  for (const auto& family : kFamilies) {
    if (family.reader != detail::hf::Reader::kGpt) continue;
    ++rows;
    const auto named = [&](const auto& keys) {
      return std::string(keys.model_type) == family.model_type;
    };
    EXPECT_EQ(std::count_if(std::begin(kGptFamilies), std::end(kGptFamilies), named), 1)
        << family.model_type;
  }
  EXPECT_EQ(rows, std::size(kGptFamilies));
}

TEST(HfConfigGptFamilies, TheUsualNamesWinOverTheClasssOwnAsTransformersSetsThem) {
  // num_hidden_layers 3, num_attention_heads 8, hidden_size 256, max_position_embeddings
  // 4096 beside n_layer 2, n_head 4, n_embd 512, n_positions 1024: 3 layers of 8 x 32.
  ExpectLayers("gpt2_both_names.json", "gpt2", 4096, "GGG", 0, 8, 32);
  // Falcon's n_embed replaces hidden_size (its __post_init__): 256 / 4, not 512 / 4.
  ExpectLayers("falcon_n_embed.json", "falcon", 2048, "GG", 0, 4, 64);
}

TEST(HfConfigGptFamilies, BadFilesAreRefusedNamingTheKey) {
  ExpectToolRefuses("bad/gpt2_no_heads.json",
                    "n_head: is missing; kvring-plan does not guess a model's size");
  ExpectToolRefuses("bad/gpt2_heads_not_dividing.json",
                    "n_embd: 256 is not a multiple of n_head 6, so head_dim is undefined");
  ExpectToolRefuses("bad/gpt2_kv_heads.json",
                    "num_key_value_heads: 2 is set, but GPT2Config does not read it: its "
                    "attention keeps 4 K/V heads");
  ExpectToolRefuses("bad/gptj_head_dim.json",
                    "head_dim: 128 is set, but GPTJConfig does not read it: its heads are n_embd "
                    "/ n_head = 64 wide");
  ExpectToolRefuses("bad/gpt_neo_types_length.json",
                    "attention_types: gives 4 layers, but num_layers is 5");
  ExpectToolRefuses("bad/gpt_neo_unknown_type.json",
                    "attention_types[0][0][1]: \"sparse\" is not \"global\" or \"local\"");
  ExpectToolRefuses("bad/gpt_neo_layer_types.json",
                    "layer_types[1]: full_attention, but layer 1 is sliding_attention (by "
                    "attention_types), and GPTNeoConfig does not read layer_types");
  ExpectToolRefuses("bad/gpt_bigcode_multi_query_string.json",
                    "multi_query: \"yes\" is a string, not true or false");
  ExpectToolRefuses("bad/falcon_alibi.json",
                    "alibi: is true: FalconConfig's attention adds ALiBi position biases");
  ExpectToolRefuses("bad/falcon_kv_heads_not_dividing.json",
                    "num_kv_heads: 3 does not divide num_attention_heads 8");
  ExpectToolRefuses("bad/falcon_old_kv_heads.json",
                    "num_kv_heads: 2 is not num_attention_heads 8, but FalconConfig without "
                    "new_decoder_architecture or multi_query keeps a K and V head per query head");
  ExpectToolRefuses("bad/dbrx_kv_heads_not_dividing.json",
                    "attn_config.kv_n_heads: 3 does not divide n_heads 8");
  ExpectToolRefuses("bad/bloom_unplanned.json",
                    "model_type: 'bloom' (transformers' BloomConfig): its attention adds ALiBi");
  ExpectToolRefuses("bad/mpt_unplanned.json",
                    "model_type: 'mpt' (transformers' MptConfig): its attention adds ALiBi");
}

TEST(HfConfigModernBertDecoder, SlidesOverHalfItsLocalAttentionOrTheFilesWindow) {
  // global_attn_every_n_layers 3: layers 0, 3 and 6 full; local_attention 128: a window of 64.
  ExpectLayers("modernbert_decoder_tiny.json", "modernbert-decoder", 8000, "GSSGSSG", 64, 4, 64);
  EXPECT_TRUE(HasDefault(Read("modernbert_decoder_tiny.json"), "sliding_window",
                         "local_attention / 2 (64)"));
  // layer_types and sliding_window 100 (set after the class derives 64 from local_attention).
  ExpectLayers("modernbert_decoder_window.json", "modernbert-decoder", 8192, "SGSG", 100, 4, 64);
  ExpectToolRefuses("bad/modernbert_decoder_no_local.json",
                    "local_attention: null leaves the sliding layers without a window");
  ExpectToolRefuses("bad/modernbert_decoder_zero_period.json",
                    "global_attn_every_n_layers: 0 is invalid: it must be at least 1");
}

TEST(HfConfigHrmText, KeepsACacheSlotPerRunOfEachLayerOfItsStacks) {
  // 2 layers a stack, H_cycles 2, L_cycles 1: each H cycle runs the L stack once, then the H
  // stack: 2 x 2 x (1 + 1) = 8 global layers of 4 K/V heads (one per query head) of 16.
  ExpectLayers("hrm_text_tiny.json", "hrm_text", 4096, "GGGGGGGG", 0, 4, 16);
  EXPECT_TRUE(HasDefault(Read("hrm_text_tiny.json"), "num_layers_per_stack",
                         "num_hidden_layers (2; the cache slots are 8)"));
  // A saved file: num_layers_per_stack 3 and num_hidden_layers already 3 x 1 x (3 + 1) = 12;
  // head_dim 128 by default.
  ExpectLayers("hrm_text_saved.json", "hrm_text", 2048, std::string(12, 'G'), 0, 2, 128);
  ExpectToolRefuses("bad/hrm_text_slots_disagree.json",
                    "num_hidden_layers: 3 is not num_layers_per_stack 3 x H_cycles x (L_cycles + "
                    "1) = 24, the cache slots the model's attention calls use");
  ExpectToolRefuses("bad/hrm_text_kv_heads.json",
                    "num_key_value_heads: 2 is set, but HrmTextConfig does not read it: its "
                    "attention keeps 4 K/V heads");
}

TEST(HfConfigKyutaiSpeechToText, EveryLayerSlidesOverAWindowThatIsNeverNull) {
  ExpectLayers("kyutai_speech_to_text_tiny.json", "kyutai_speech_to_text", 96, "SS", 24, 2, 32);
  ExpectToolRefuses("bad/kyutai_speech_to_text_null_window.json",
                    "sliding_window: is null; KyutaiSpeechToTextConfig needs a number here");
}

TEST(HfConfigUnplanned, FamiliesWhoseAttentionKvringDoesNotComputeAreRefusedWithTheReason) {
  ExpectToolRefuses("bad/diffllama_unplanned.json",
                    "model_type: 'diffllama' (transformers' DiffLlamaConfig): its differential "
                    "attention");
  ExpectToolRefuses("bad/doge_unplanned.json",
                    "model_type: 'doge' (transformers' DogeConfig): its dynamic mask attention");
  ExpectToolRefuses("bad/moshi_unplanned.json",
                    "model_type: 'moshi' (transformers' MoshiConfig): its depformer");
  ExpectToolRefuses("bad/gemma4_assistant_unplanned.json",
                    "model_type: 'gemma4_assistant' (transformers' Gemma4AssistantConfig): a "
                    "drafter for speculative decoding whose every layer attends the K/V of the "
                    "Gemma 4 model it drafts for");
}

TEST(HfConfigWrappers, EachReadsTheDefaultFamilyOfItsClassWhenTextConfigNamesNone) {
  // Cohere 2 (Aya Vision): sliding_window_pattern 4 by default, so layer 3 is full; no KV
  // heads: MHA, head_dim 512 / 8.
  ExpectLayers("aya_vision_tiny.json", "cohere2", 512, "SSSG", 16, 8, 64);
  // EXAONE 4 (EXAONE 4.5): its layer_types, LLLG twice.
  ExpectLayers("exaone4_5_tiny.json", "exaone4", 131072, "SSSGSSSG", 64, 2, 32);
  // Gemma 3's text model (ShieldGemma 2): full iff (i + 1) % 3 == 0; 131072 by default.
  ExpectLayers("shieldgemma2_tiny.json", "gemma3_text", 131072, "SSGSSGS", 8, 1, 32);
  // GLM-4V's text model (GLM-4.6V): every layer full, KV heads null: MHA, 64 / 4.
  ExpectLayers("glm46v_tiny.json", "glm4v_text", 8192, "GG", 0, 4, 16);
  // Qwen3-VL's text model (Cosmos 3 Omni): head_dim 128 by default.
  ExpectLayers("cosmos3_omni_tiny.json", "qwen3_vl_text", 8192, "GG", 0, 2, 128);
  // Mistral (Idefics 2): sliding_window 4096 by default, every layer.
  ExpectLayers("idefics2_tiny.json", "mistral", 8192, "SS", 4096, 8, 32);
  // Qwen 2: layers from max_window_layers 2 slide when use_sliding_window is true.
  ExpectLayers("llava_onevision_tiny.json", "qwen2", 4096, "GGSS", 32, 2, 64);
  ExpectLayers("qwen2_audio_tiny.json", "qwen2", 4096, "GGSS", 32, 2, 64);
  // Qwen 2 without use_sliding_window: every layer full, 32768 positions by default.
  for (const char* file : {"fast_vlm_tiny.json", "got_ocr2_tiny.json", "audioflamingo3_tiny.json",
                           "vibevoice_asr_tiny.json"}) {
    ExpectLayers(file, "qwen2", 32768, "GGG", 0, 2, 64);
  }
  // Qwen 3 (LightOnOCR).
  ExpectLayers("lighton_ocr_tiny.json", "qwen3", 40960, "GGG", 0, 8, 64);
  // Llama: 768 / 12 = 64 a head, 4 KV heads.
  for (const char* file : {"idefics3_tiny.json", "llava_next_tiny.json", "video_llava_tiny.json",
                           "janus_tiny.json", "deepseek_vl_tiny.json", "perception_lm_tiny.json"}) {
    ExpectLayers(file, "llama", 4096, "GG", 0, 4, 64);
  }
  // Fuyu without text_config: its top-level keys make a Persimmon model (16384 positions).
  ExpectLayers("fuyu_tiny.json", "persimmon", 16384, "GG", 0, 4, 64);
  // Aria: always its own text class; KV heads 2 of 4, head_dim absent: 256 / 4.
  ExpectLayers("aria_tiny.json", "aria_text", 65536, "GG", 0, 2, 64);
  // Text classes of their own, every layer full. GLM-OCR: head_dim absent, 512 / 8;
  // PaddleOCR-VL: KV heads null, MHA, head_dim 128 by default; ERNIE 4.5 VL: 512 / 4;
  // DeepSeek-OCR 2: KV heads absent, MHA; Emu3: 9216 positions by default.
  ExpectLayers("glm_ocr_tiny.json", "glm_ocr_text", 131072, "GG", 0, 2, 64);
  ExpectLayers("paddleocr_vl_tiny.json", "paddleocr_vl_text", 131072, "GG", 0, 4, 128);
  ExpectLayers("ernie4_5_vl_moe_tiny.json", "ernie4_5_vl_moe_text", 32768, "GG", 0, 2, 128);
  ExpectLayers("deepseek_ocr2_tiny.json", "deepseek_ocr2_text", 8192, "GG", 0, 4, 64);
  ExpectLayers("emu3_tiny.json", "emu3_text_model", 9216, "GG", 0, 2, 64);
  // Granite 4.0 Vision: its own Granite text model; KV heads 2 of 4, head_dim absent: 128 / 4.
  ExpectLayers("granite4_vision_tiny.json", "granite4_vision_text", 16384, "GG", 0, 2, 32);
  // BLIP-2: OPT by default (a K and V head per query head, 256 / 4); InstructBLIP's file names
  // Llama.
  ExpectLayers("blip2_tiny.json", "opt", 2048, "GG", 0, 4, 64);
  ExpectLayers("instructblip_tiny.json", "llama", 2048, "GG", 0, 4, 64);
}

TEST(HfConfigWrappers, EachReadsTheFamilyTextConfigNames) {
  // LLaVA 1.6 over Mistral: every layer slides over 32.
  ExpectLayers("llava_tiny.json", "mistral", 4096, "SS", 32, 2, 64);
  // InternVL 3.5 over Qwen 3.
  ExpectLayers("internvl_tiny.json", "qwen3", 40960, "GGG", 0, 8, 64);
  ExpectLayers("qianfan_ocr_tiny.json", "qwen3", 40960, "GGG", 0, 8, 64);
  ExpectLayers("cohere2_vision_tiny.json", "cohere2", 512, "SSSG", 16, 8, 64);
  ExpectLayers("glmga_tiny.json", "glm4v_text", 8192, "GG", 0, 4, 16);
  for (const char* file : {"smolvlm_tiny.json", "llava_next_video_tiny.json", "vipllava_tiny.json",
                           "deepseek_vl_hybrid_tiny.json"}) {
    ExpectLayers(file, "llama", 4096, "GG", 0, 4, 64);
  }
  // Video-LLaMA 3 names its family (its class has no default); Ovis 2's class is Qwen 2's.
  for (const char* file : {"video_llama_3_tiny.json", "pp_chart2table_tiny.json",
                           "musicflamingo_tiny.json", "ovis2_tiny.json"}) {
    ExpectLayers(file, "qwen2", 32768, "GGG", 0, 2, 64);
  }
}

TEST(HfConfigWrappers, VoxtralAndGlmAsrFillTheirTextConfigsMissingKeysFirst) {
  // Voxtral puts head_dim 128 (and hidden_size 3072, 131072 positions) under a text_config
  // that leaves them out, before Llama's rules: 128, not 768 / 12.
  ExpectLayers("voxtral_tiny.json", "llama", 4096, "GG", 0, 4, 128);
  EXPECT_TRUE(HasDefault(Read("voxtral_tiny.json"), "text_config.head_dim", "128"));
  const HfModel defaults = Read("voxtral_defaults.json");
  EXPECT_TRUE(HasDefault(defaults, "text_config.hidden_size", "3072"));
  ExpectLayers("voxtral_defaults.json", "llama", 131072, "GG", 0, 8, 128);
  // GLM-ASR: hidden_size 2048 and 8192 positions; head_dim Llama's 2048 / 16.
  ExpectLayers("glmasr_tiny.json", "llama", 8192, "GG", 0, 4, 128);
  // Their KV head counts are one checkpoint's: a file must write them.
  ExpectToolRefuses("bad/voxtral_no_kv_heads.json",
                    "text_config.num_key_value_heads: is missing; VoxtralConfig's default 8 is one "
                    "checkpoint's count, not a rule (write the count)");
}

TEST(HfConfigWrappers, PaliGemmaCachesCausallyWhateverItsTextConfigSaysOfItsPrefix) {
  // PaliGemma: Gemma by default; its class sets use_bidirectional_attention for the prefix its
  // masks let attend both ways, so a text_config saying true is a causal cache still (a Gemma
  // file saying so alone is an encoder, refused).
  ExpectLayers("paligemma_tiny.json", "gemma", 8192, "GG", 0, 1, 64);
  ExpectLayers("paligemma2_tiny.json", "gemma2", 8192, "SGSG", 64, 4, 64);
  ExpectToolRefuses("bad/paligemma_bidirectional_string.json",
                    "text_config.use_bidirectional_attention: \"prefix\" is a string, not true or "
                    "false");
}

TEST(HfConfigWrappers, QwenOmniReadsItsThinkersTextModel) {
  // Qwen2.5-Omni: thinker_config.text_config by Qwen 2's rules: layers from max_window_layers 2
  // slide over 32 when use_sliding_window; keys named by their whole path.
  ExpectLayers("qwen2_5_omni_tiny.json", "qwen2_5_omni_text", 4096, "GGSS", 32, 2, 64);
  EXPECT_TRUE(HasDefault(Read("qwen2_5_omni_tiny.json"), "thinker_config.text_config.head_dim",
                         "hidden_size / num_attention_heads (64)"));
  // A thinker alone: its text_config at the top; KV heads null: MHA; 32768 by default.
  ExpectLayers("qwen2_5_omni_thinker_tiny.json", "qwen2_5_omni_text", 32768, "GG", 0, 4, 64);
  // Qwen3-Omni: every layer full.
  ExpectLayers("qwen3_omni_moe_tiny.json", "qwen3_omni_moe_text", 65536, "GG", 0, 2, 32);
  ExpectToolRefuses("bad/qwen2_5_omni_no_thinker.json",
                    "thinker_config: is missing; qwen2_5_omni keeps its language model's "
                    "configuration in its text_config");
}

TEST(HfConfigWrappers, MiniCpmV46ReadsQwen35sLinearAndFullLayers) {
  // Its text_config (qwen3_5_text, named as the class requires): layer_types linear, full,
  // linear, full; full layers 2 KV heads of Qwen 3.5's default head_dim 256.
  const HfModel model = Read("minicpmv4_6_tiny.json");
  EXPECT_EQ(model.model_type, "qwen3_5_text");
  ASSERT_EQ(model.layers.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(model.layers[i].attends, i % 2 == 1) << i;
    EXPECT_EQ(model.layers[i].state.conv_elements != 0, i % 2 == 0) << i;
  }
  EXPECT_EQ(model.layers[1].num_kv_heads, 2u);
  EXPECT_EQ(model.layers[1].head_dim, 256u);
}

TEST(HfConfigWrappers, KnownModelTypesListsEveryWrapperOfAFamilyKvringReads) {
  const std::vector<std::string> known = KnownModelTypes();
  for (const detail::hf::Wrapper& wrapper : detail::hf::kWrappers) {
    const bool read = detail::hf::FindFamily(wrapper.text_model_type) != nullptr;
    EXPECT_EQ(std::count(known.begin(), known.end(), wrapper.model_type), read ? 1 : 0)
        << wrapper.model_type;
  }
  for (const char* name : {"llava", "internvl", "aya_vision", "minicpmv4_6", "qwen2_audio"}) {
    EXPECT_EQ(std::count(known.begin(), known.end(), name), 1) << name;
  }
}

TEST(HfConfigWrappers, BadWrapperFilesAreRefusedNamingTheKey) {
  ExpectToolRefuses("bad/emu3_null_kv_heads.json",
                    "text_config.num_key_value_heads: is null; Emu3TextConfig's default 8 is one "
                    "checkpoint's count");
  ExpectToolRefuses("bad/deepseek_ocr2_head_dim.json",
                    "text_config.head_dim: 128 contradicts hidden_size / num_attention_heads = 64, "
                    "which DeepseekOcr2TextConfig always uses");
  ExpectToolRefuses("bad/minicpmv4_6_untyped_text.json",
                    "text_config.model_type: is missing; minicpmv4_6 has no default language "
                    "model family: the file must name it");
  ExpectToolRefuses("bad/blip2_t5_text.json",
                    "text_config.model_type: 't5' (in blip-2) is not a family kvring-plan reads");
  ExpectToolRefuses(
      "bad/llava_unknown_text.json",
      "text_config.model_type: 'retnet' (in llava) is not a family kvring-plan reads");
  ExpectToolRefuses("bad/idefics3_no_text_config.json",
                    "text_config: is missing; idefics3 keeps its language model's configuration "
                    "there");
}

}  // namespace
}  // namespace tools
}  // namespace kvring
