// Tests of kvring/hf_config.h on the families added for transformers 5.12: Gemma 4 (global
// layers of their own shape; its unified 12B text model too), OLMo 3, EXAONE 4 (and its MoE),
// AFMoE, SmolLM3, Ministral, Ministral 3, Mellum, CWM, VaultGemma, dots.llm1 and Qwen2-VL's flat
// files, and MiMo-V2-Flash (remote code: sliding layers of their own shape); and their bad
// files. Every expected layer is worked out here by hand from the file and the family's rules
// (docs/configs.md); tools/transformers/check_configs.py checks the same files against
// transformers itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/plan_cli_run.h"
#include "hf_config_files.h"
#include "kvring/hf_config.h"
#include "kvring/layer_plan.h"
#include "kvring/model_presets.h"
#include "plan_cli.h"

namespace kvring {
namespace tools {
namespace {

constexpr uint64_t kKiB = 1024;

// One layer's kind, window, owner, capacity and K/V shape.
struct ShapedRow {
  Row row;
  uint32_t num_kv_heads;
  uint32_t head_dim;
};

void ExpectShapedRows(const LayerPlan& plan, const std::vector<ShapedRow>& rows) {
  ASSERT_EQ(plan.NumLayers(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const LayerInfo& layer = plan.Layer(i);
    ExpectRow(layer, i, rows[i].row, rows[i].num_kv_heads, rows[i].head_dim);
    EXPECT_EQ(layer.spec.VHeadDim(), rows[i].head_dim) << "layer " << i;
  }
}

// Eight Gemma 4 layers without layer_types: full at 5 ((i + 1) % 6 == 0) and 7 (the last, made
// full), sliding elsewhere, each its own owner.
std::vector<ShapedRow> EightGemma4Layers(const ShapedRow& full, const ShapedRow& sliding) {
  std::vector<ShapedRow> rows;
  for (size_t i = 0; i < 8; ++i) {
    rows.push_back(i == 5 || i == 7 ? full : sliding);
    rows.back().row.owner = i;
  }
  return rows;
}

TEST(HfConfigFamilies, Gemma4GlobalLayersHaveTheirOwnHeadDimAndSharedLayersReadTheLastOwner) {
  const HfModel model = Read("gemma4_e2b_like.json");
  EXPECT_EQ(model.model_type, "gemma4_text");
  EXPECT_EQ(model.max_context, 4096u);
  // layer_types 4:1; full layers take global_head_dim 64 (sliding: head_dim 32), both on the
  // one KV head (attention_k_eq_v absent: false). num_kv_shared_layers 4: layers 8-11 read
  // the last earlier layer of their kind, 7 (sliding) and 4 (full). Window 16, batch 4: 19.
  EXPECT_TRUE(HasDefault(model, "text_config.attention_k_eq_v", "false"));
  const ShapedRow s{{'S', 16, 0, 19}, 1, 32}, g{{'G', 0, 4, 4096}, 1, 64};
  std::vector<ShapedRow> rows;
  for (size_t i = 0; i < 12; ++i) {
    const bool full = (i + 1) % 5 == 0 || i == 11;
    ShapedRow row = full ? g : s;
    row.row.owner = i < 8 ? i : (full ? 4 : 7);
    if (i >= 8) row.row.capacity = 0;
    rows.push_back(row);
  }
  ExpectShapedRows(Plan(model.layers, 4096, 4), rows);
}

TEST(HfConfigFamilies, Gemma4KEqVTakesTheGlobalKvHeadsAndTheLastLayerIsAlwaysFull) {
  const HfModel model = Read("gemma4_text_k_eq_v.json");
  // No layer_types: full iff (i + 1) % 6 == 0, so layer 5; layer 7 (the last) is made full too,
  // and the reading says so. attention_k_eq_v: the full layers have num_global_key_value_heads
  // 1 of global_head_dim's default 512; the sliding ones 2 of head_dim's default 256.
  EXPECT_TRUE(HasDefault(model, "layer_types[7]",
                         "full_attention (Gemma4TextConfig makes the last layer full)"));
  EXPECT_TRUE(HasDefault(model, "global_head_dim", "512"));
  EXPECT_TRUE(HasDefault(model, "max_position_embeddings", "131072"));
  ExpectShapedRows(Plan(model.layers, 1024, 2),
                   EightGemma4Layers({{'G', 0, 0, 1024}, 1, 512}, {{'S', 16, 0, 17}, 2, 256}));
}

TEST(HfConfigFamilies, Gemma4UnifiedReadsGemma4sRulesWithItsOwnDefaults) {
  const HfModel model = Read("gemma4_unified_tiny.json");
  EXPECT_EQ(model.model_type, "gemma4_unified_text");
  // Gemma4UnifiedTextConfig's defaults: 262144 positions, a window of 1024 (Gemma 4's: 131072
  // and 512), full iff (i + 1) % 6 == 0 and the last layer; the full layers take the one
  // num_global_key_value_heads of global_head_dim's 512 (attention_k_eq_v).
  EXPECT_EQ(model.max_context, 262144u);
  EXPECT_TRUE(HasDefault(model, "text_config.sliding_window", "1024"));
  EXPECT_TRUE(HasDefault(model, "text_config.global_head_dim", "512"));
  EXPECT_TRUE(HasDefault(model, "text_config.layer_types[7]",
                         "full_attention (Gemma4UnifiedTextConfig makes the last layer full)"));
  ExpectShapedRows(Plan(model.layers, 2048, 4),
                   EightGemma4Layers({{'G', 0, 0, 2048}, 1, 512}, {{'S', 1024, 0, 1027}, 2, 32}));
}

TEST(HfConfigFamilies, MistralLikeFamiliesSlideEveryLayerOrNone) {
  // Qwen 3 MoE: use_sliding_window and a window slide every layer (no max_window_layers);
  // head_dim from the file (the class has none).
  const HfModel qwen3_moe = Read("qwen3_moe_sliding.json");
  EXPECT_EQ(qwen3_moe.max_context, 4096u);
  ExpectRows(Plan(qwen3_moe.layers, 1024, 4),
             {{'S', 48, 0, 51}, {'S', 48, 1, 51}, {'S', 48, 2, 51}}, 2, 32);
  // Mixtral: sliding_window's class default is null: all full; head_dim null is derived.
  const HfModel mixtral = Read("mixtral_tiny.json");
  EXPECT_TRUE(HasDefault(mixtral, "sliding_window", "null"));
  EXPECT_EQ(mixtral.max_context, 32768u);
  ExpectRows(Plan(mixtral.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}}, 2, 16);
  // Phi-3: a window of 47 (Phi-3-mini's files say 2047) on every layer; KV heads absent: MHA;
  // the class's 4096 positions.
  const HfModel phi3 = Read("phi3_sliding.json");
  EXPECT_EQ(phi3.max_context, 4096u);
  ExpectRows(Plan(phi3.layers, 1024, 4), {{'S', 47, 0, 50}, {'S', 47, 1, 50}}, 4, 16);
  // StarCoder2: every layer slides over 64; PhiMoE: sliding_window null, all full.
  ExpectRows(Plan(Read("starcoder2_tiny.json").layers, 1024, 4),
             {{'S', 64, 0, 67}, {'S', 64, 1, 67}}, 2, 16);
  const HfModel phimoe = Read("phimoe_tiny.json");
  EXPECT_EQ(phimoe.max_context, 131072u);
  ExpectRows(Plan(phimoe.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}}, 4, 16);
  // Phi-4-multimodal: Phi-3's rule; its window (262144) wider than a context of 1024, so each
  // ring holds the context.
  const HfModel phi4mm = Read("phi4_multimodal_tiny.json");
  EXPECT_EQ(phi4mm.max_context, 131072u);
  ExpectRows(Plan(phi4mm.layers, 1024, 4), {{'S', 262144, 0, 1024}, {'S', 262144, 1, 1024}}, 2, 64);
}

TEST(HfConfigFamilies, Mistral3WrapsTheFamilyItsTextConfigNames) {
  // text_config.model_type ministral3: Ministral 3's rules (sliding_window null: all full).
  const HfModel ministral3 = Read("mistral3_ministral3.json");
  EXPECT_EQ(ministral3.model_type, "ministral3");
  EXPECT_EQ(ministral3.max_context, 8192u);
  ExpectRows(Plan(ministral3.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}}, 2, 16);
  // No model_type in text_config: Mistral3Config's default, mistral (every layer slides).
  const HfModel mistral = Read("mistral3_default_text.json");
  EXPECT_EQ(mistral.model_type, "mistral");
  ExpectRows(Plan(mistral.layers, 1024, 4), {{'S', 32, 0, 35}, {'S', 32, 1, 35}}, 2, 16);
}

TEST(HfConfigFamilies, QwenVisionLanguageWrappersReadTheirTextModels) {
  // Qwen2.5-VL: a flat file (its text keys at the top level), Qwen 2's window rule: layers from
  // max_window_layers 3 slide over 32; head_dim hidden_size / num_attention_heads.
  const HfModel qwen25 = Read("qwen2_5_vl_flat.json");
  EXPECT_EQ(qwen25.model_type, "qwen2_5_vl_text");
  ExpectRows(Plan(qwen25.layers, 1024, 4),
             {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}, {'G', 0, 2, 1024}, {'S', 32, 3, 35}}, 2, 32);
  // Qwen3-VL: text_config, every layer full, head_dim's class default 128.
  const HfModel qwen3 = Read("qwen3_vl_tiny.json");
  EXPECT_TRUE(HasDefault(qwen3, "text_config.head_dim", "128"));
  EXPECT_EQ(qwen3.max_context, 8192u);
  ExpectRows(Plan(qwen3.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}}, 2, 128);
  // GLM-4.1V: null KV heads are MHA; the head dim is always hidden_size / num_attention_heads.
  // GLM-4.5V (glm4v_moe): the file's head_dim (32, not 64 / 6) and 65536 positions.
  const HfModel glm4v = Read("glm4v_tiny.json");
  EXPECT_EQ(glm4v.model_type, "glm4v_text");
  ExpectRows(Plan(glm4v.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}}, 4, 16);
  const HfModel glm4v_moe = Read("glm4v_moe_tiny.json");
  EXPECT_EQ(glm4v_moe.max_context, 65536u);
  ExpectRows(Plan(glm4v_moe.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}}, 2, 32);
  // Hy V3 (not a wrapper, all full too): head_dim's class default 128.
  const HfModel hy_v3 = Read("hy_v3_tiny.json");
  EXPECT_TRUE(HasDefault(hy_v3, "head_dim", "128"));
  ExpectRows(Plan(hy_v3.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}, {'G', 0, 2, 1024}},
             2, 128);
  // Qwen3-VL MoE: head_dim null is hidden_size / num_attention_heads; 128000 positions.
  const HfModel qwen3_moe = Read("qwen3_vl_moe_tiny.json");
  EXPECT_EQ(qwen3_moe.max_context, 128000u);
  ExpectRows(Plan(qwen3_moe.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}}, 2, 16);
}

TEST(HfConfigFamilies, SlidingWindowFamiliesReadTheirPatterns) {
  // OLMo 3: full iff (i + 1) % 4 == 0; KV heads given; head_dim 256 / 4.
  ExpectRows(Plan(Read("olmo3_tiny.json").layers, 1024, 4),
             {{'S', 32, 0, 35},
              {'S', 32, 1, 35},
              {'S', 32, 2, 35},
              {'G', 0, 3, 1024},
              {'S', 32, 4, 35},
              {'S', 32, 5, 35},
              {'S', 32, 6, 35},
              {'G', 0, 7, 1024}},
             2, 64);
  // EXAONE 4: layer_types, with the published letter pattern "LLLG" agreeing.
  ExpectRows(Plan(Read("exaone4_llg.json").layers, 1024, 4),
             {{'S', 64, 0, 67},
              {'S', 64, 1, 67},
              {'S', 64, 2, 67},
              {'G', 0, 3, 1024},
              {'S', 64, 4, 67},
              {'S', 64, 5, 67},
              {'S', 64, 6, 67},
              {'G', 0, 7, 1024}},
             2, 32);
  // EXAONE MoE: EXAONE 4's rules; no layer_types nor pattern: the default period 4 (layer 3
  // full); head_dim hidden_size / num_attention_heads; the MoE keys do not touch attention.
  const HfModel exaone_moe = Read("exaone_moe_tiny.json");
  EXPECT_TRUE(HasDefault(exaone_moe, "sliding_window_pattern", "4"));
  EXPECT_EQ(exaone_moe.max_context, 2048u);
  ExpectRows(Plan(exaone_moe.layers, 1024, 4),
             {{'S', 32, 0, 35},
              {'S', 32, 1, 35},
              {'S', 32, 2, 35},
              {'G', 0, 3, 1024},
              {'S', 32, 4, 35},
              {'S', 32, 5, 35}},
             2, 64);
  // dots.llm1: sliding iff sliding_window is set and i >= max_window_layers (4 here); null KV
  // heads: MHA; head_dim hidden_size / num_attention_heads.
  const HfModel dots1 = Read("dots1_tiny.json");
  EXPECT_EQ(dots1.max_context, 2048u);
  ExpectRows(Plan(dots1.layers, 1024, 4),
             {{'G', 0, 0, 1024},
              {'G', 0, 1, 1024},
              {'G', 0, 2, 1024},
              {'G', 0, 3, 1024},
              {'S', 16, 4, 19},
              {'S', 16, 5, 19}},
             4, 64);
  // Qwen2-MoE: use_sliding_window true: sliding iff i is even and i < max_window_layers (5
  // here: layers 0, 2, 4; 5 and 6 full); head_dim hidden_size / num_attention_heads.
  const HfModel qwen2_moe = Read("qwen2_moe_sliding.json");
  EXPECT_EQ(qwen2_moe.max_context, 4096u);
  ExpectRows(Plan(qwen2_moe.layers, 1024, 4),
             {{'S', 64, 0, 67},
              {'G', 0, 1, 1024},
              {'S', 64, 2, 67},
              {'G', 0, 3, 1024},
              {'S', 64, 4, 67},
              {'G', 0, 5, 1024},
              {'G', 0, 6, 1024}},
             2, 16);
  // Without use_sliding_window (default false) the window is dropped: every layer full.
  const HfModel qwen2_moe_full = Read("qwen2_moe_defaults.json");
  EXPECT_TRUE(HasDefault(qwen2_moe_full, "use_sliding_window", "false"));
  EXPECT_EQ(qwen2_moe_full.max_context, 32768u);
  ExpectRows(Plan(qwen2_moe_full.layers, 1024, 4),
             {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}, {'G', 0, 2, 1024}}, 4, 16);
  // Cohere 2 MoE: first_k_dense_replace 2 layers by prefix_dense_sliding_window_pattern
  // (default 1: both full), then sliding_window_pattern 3 counted from layer 2: full at 4, 7.
  // The stated pattern 3 does not describe the layers from 0 (Cohere 2 would refuse that).
  const HfModel cohere_moe = Read("cohere2_moe_prefix.json");
  EXPECT_TRUE(HasDefault(cohere_moe, "prefix_dense_sliding_window_pattern", "1"));
  ExpectRows(Plan(cohere_moe.layers, 1024, 4),
             {{'G', 0, 0, 1024},
              {'G', 0, 1, 1024},
              {'S', 32, 2, 35},
              {'S', 32, 3, 35},
              {'G', 0, 4, 1024},
              {'S', 32, 5, 35},
              {'S', 32, 6, 35},
              {'G', 0, 7, 1024}},
             2, 16);
  // A prefix of 3 by period 2 (full at 1), then the default period 4 from layer 3 (no full
  // layer in 3 more); class defaults: window 4096, head_dim 128, MHA, 8192 positions.
  const HfModel cohere_moe_defaults = Read("cohere2_moe_defaults.json");
  EXPECT_EQ(cohere_moe_defaults.max_context, 8192u);
  ExpectRows(Plan(cohere_moe_defaults.layers, 8192, 4),
             {{'S', 4096, 0, 4099},
              {'G', 0, 1, 8192},
              {'S', 4096, 2, 4099},
              {'S', 4096, 3, 4099},
              {'S', 4096, 4, 4099},
              {'S', 4096, 5, 4099}},
             4, 128);
  // Laguna: layer_types; query heads per layer (6, 8, 6, 4) over 2 KV heads of 16 each, the
  // model's head count the largest dividing every layer's (2); 4 ranks cannot split 6 heads.
  const HfModel laguna = Read("laguna_tiny.json");
  EXPECT_EQ(laguna.num_attention_heads, 2u);
  ExpectRows(Plan(laguna.layers, 1024, 4),
             {{'G', 0, 0, 1024}, {'S', 64, 1, 67}, {'S', 64, 2, 67}, {'G', 0, 3, 1024}}, 2, 16);
  HfReadOptions four_ranks;
  four_ranks.tensor_parallel = 4;
  const Expected<HfModel> split = ReadHfConfig(ConfigPath("laguna_tiny.json"), four_ranks);
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.error().message.find("num_attention_heads_per_layer[0]: 6 does not split "
                                       "across tensor_parallel 4 ranks"),
            std::string::npos)
      << split.error().message;
  // VaultGemma: Gemma 2's rule, sliding on even layers; head_dim absent: its 256.
  const HfModel vaultgemma = Read("vaultgemma_tiny.json");
  EXPECT_TRUE(HasDefault(vaultgemma, "head_dim", "256"));
  EXPECT_EQ(vaultgemma.max_context, 8192u);
  ExpectRows(Plan(vaultgemma.layers, 1024, 4),
             {{'S', 32, 0, 35}, {'G', 0, 1, 1024}, {'S', 32, 2, 35}, {'G', 0, 3, 1024}}, 1, 256);
  // CWM: no layer_types: full iff i % 4 == 0 (layer 0 full, unlike OLMo 3's (i + 1) % 4);
  // head_dim absent: CwmConfig's 128.
  const HfModel cwm = Read("cwm_tiny.json");
  EXPECT_TRUE(HasDefault(cwm, "head_dim", "128"));
  ExpectRows(Plan(cwm.layers, 1024, 4),
             {{'G', 0, 0, 1024},
              {'S', 16, 1, 19},
              {'S', 16, 2, 19},
              {'S', 16, 3, 19},
              {'G', 0, 4, 1024},
              {'S', 16, 5, 19},
              {'S', 16, 6, 19},
              {'S', 16, 7, 19}},
             2, 128);
  // Mellum: layer_types read (all full without them); sliding_window absent: MellumConfig's
  // 1024; head_dim absent: its 128.
  const HfModel mellum = Read("mellum_tiny.json");
  EXPECT_TRUE(HasDefault(mellum, "sliding_window", "1024"));
  EXPECT_TRUE(HasDefault(mellum, "head_dim", "128"));
  EXPECT_EQ(mellum.max_context, 131072u);
  ExpectRows(Plan(mellum.layers, 4096, 4),
             {{'S', 1024, 0, 1027}, {'S', 1024, 1, 1027}, {'S', 1024, 2, 1027}, {'G', 0, 3, 4096}},
             2, 128);
  // AFMoE: global_attn_every_n_layers 3; head_dim absent: AfmoeConfig's 128.
  const HfModel afmoe = Read("afmoe_tiny.json");
  EXPECT_TRUE(HasDefault(afmoe, "head_dim", "128"));
  EXPECT_EQ(afmoe.max_context, 16384u);
  ExpectRows(Plan(afmoe.layers, 1024, 4),
             {{'S', 32, 0, 35},
              {'S', 32, 1, 35},
              {'G', 0, 2, 1024},
              {'S', 32, 3, 35},
              {'S', 32, 4, 35},
              {'G', 0, 5, 1024}},
             2, 128);
  // SmolLM3: with use_sliding_window, the NoPE layers (no_rope_layers[i] == 0) slide.
  ExpectRows(Plan(Read("smollm3_sliding.json").layers, 1024, 4),
             {{'G', 0, 0, 1024},
              {'G', 0, 1, 1024},
              {'S', 32, 2, 35},
              {'G', 0, 3, 1024},
              {'G', 0, 4, 1024},
              {'S', 32, 5, 35}},
             2, 64);
  // Ministral: every layer slides (no layer_types) over sliding_window.
  ExpectRows(Plan(Read("ministral_tiny.json").layers, 1024, 4),
             {{'S', 32, 0, 35}, {'S', 32, 1, 35}, {'S', 32, 2, 35}}, 2, 32);
  // Ministral 3: sliding_window's default is null, so every layer is full; head_dim 128 and
  // the context 262144 are the class's defaults.
  const HfModel ministral3 = Read("ministral3_defaults.json");
  EXPECT_EQ(ministral3.max_context, 262144u);
  EXPECT_TRUE(HasDefault(ministral3, "sliding_window", "null"));
  ExpectRows(Plan(ministral3.layers, 1024, 4), {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}}, 2, 128);
  // Qwen2-VL without text_config (older files): the top-level keys are the text model's;
  // i >= max_window_layers 2 slide when use_sliding_window; head_dim 256 / 4.
  const HfModel qwen2_vl = Read("qwen2_vl_flat.json");
  EXPECT_EQ(qwen2_vl.model_type, "qwen2_vl_text");
  ExpectRows(Plan(qwen2_vl.layers, 1024, 4),
             {{'G', 0, 0, 1024}, {'G', 0, 1, 1024}, {'S', 32, 2, 35}, {'S', 32, 3, 35}}, 2, 64);
}

TEST(HfConfigFamilies, Gemma4PresetsMatchLlamaCppFiguresAndThePublishedOwners) {
  // llama.cpp reported 104 MiB of cache for Gemma 4 E4B at 4096 positions and 552 MiB at
  // 32768: 4 owning full layers of 2 x 512 (4 KiB a position) and 20 owning sliding ones of
  // 2 x 256 kept at 1024 cells (2 KiB a cell). kvring keeps 511 + 512 = 1023 positions a ring.
  for (const uint64_t context : {uint64_t{4096}, uint64_t{32768}}) {
    Expected<ModelPreset> preset = FindModelPreset("gemma-4-e4b");
    ASSERT_TRUE(preset.ok());
    Expected<LayerPlan> plan = BuilderFor(*preset).SetContext(context).SetBatch(512).Build();
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const uint64_t llama_cpp = (context == 4096 ? 104 : 552) * kKiB * kKiB;
    EXPECT_EQ(plan->TotalBytes() - plan->PaddingBytes(), llama_cpp - 20 * 2 * kKiB);
    EXPECT_EQ(plan->NumOwningLayers(), 24u);
    for (size_t i = 24; i < 42; ++i) {
      EXPECT_EQ(plan->Layer(i).owner, (i + 1) % 6 == 0 ? 23u : 22u) << i;
    }
  }
}

TEST(HfConfigFamilies, MlaFamiliesPlanTheLatentOrTheExpandedHeads) {
  // Latent (the default, what engines store): kv_lora_rank + qk_rope_head_dim per position.
  // Mistral 4: rank 64 (file) + Mistral4Config's rope 64; GLM-4.7-Flash: both defaults, 512 +
  // 64; Kimi K2 (DeepSeek V3's classes): 32 + 16.
  const struct {
    const char* file;
    uint32_t latent, num_heads, k_dim, v_dim;
    uint64_t max_context;
  } kCases[] = {{"mistral4_tiny.json", 128, 4, 64 + 64, 128, 8192},
                {"glm4_moe_lite_defaults.json", 576, 4, 192 + 64, 256, 202752},
                {"kimi_k2_tiny.json", 48, 4, 32 + 16, 32, 131072},
                {"deepseek_v3_tiny.json", 48, 8, 32 + 16, 32, 2048},
                // DeepSeek V2 (q_lora_rank null, as V2-Lite): 32 + 16, V 16; 2048 by default.
                {"deepseek_v2_tiny.json", 48, 8, 32 + 16, 16, 2048},
                // Youtu-LLM: DeepSeek V3's defaults, 512 + 64, K 128 + 64, V 128.
                {"youtu_defaults.json", 576, 8, 128 + 64, 128, 8192},
                // LongCat-Flash: 32 + 16, K 32 + 16, V 32; its 2 decoder layers' two latent
                // attentions are 4 layers (checked below).
                {"longcat_flash_tiny.json", 48, 4, 32 + 16, 32, 8192}};
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.file);
    const HfModel latent = Read(c.file);
    EXPECT_EQ(latent.max_context, c.max_context);
    for (const LayerSpec& spec : latent.layers) {
      EXPECT_EQ(spec.kind, AttentionKind::kGlobal);
      EXPECT_EQ(spec.latent_dim, c.latent);
    }
    // Expanded (transformers' cache): per query head, K of qk_nope + qk_rope, V of v_head_dim.
    HfReadOptions options;
    options.mla = MlaCache::kExpanded;
    const Expected<HfModel> expanded = ReadHfConfig(ConfigPath(c.file), options);
    ASSERT_TRUE(expanded.ok()) << expanded.error().message;
    ASSERT_EQ(expanded->layers.size(), latent.layers.size());
    for (const LayerSpec& spec : expanded->layers) {
      EXPECT_EQ(spec.latent_dim, 0u);
      EXPECT_EQ(spec.num_kv_heads, c.num_heads);
      EXPECT_EQ(spec.head_dim, c.k_dim);
      EXPECT_EQ(spec.VHeadDim(), c.v_dim);
    }
  }
  // LongCat-Flash: a cache slot for each of a decoder layer's two latent attentions; a file's
  // num_hidden_layers other than 2 x num_layers contradicts the model, which sets it so.
  EXPECT_EQ(Read("longcat_flash_tiny.json").layers.size(), 4u);
  // LongCat-Flash-Lite's remote class extends LongcatFlashConfig: 3 decoder layers, 6 latent
  // layers of 32 + 16, 327680 positions.
  const HfModel lite = Read("longcat_flash_ngram_tiny.json");
  EXPECT_EQ(lite.model_type, "longcat_flash_ngram");
  EXPECT_EQ(lite.max_context, 327680u);
  ASSERT_EQ(lite.layers.size(), 6u);
  for (const LayerSpec& spec : lite.layers) EXPECT_EQ(spec.latent_dim, 48u);
  ExpectToolRefuses("bad/longcat_flash_hidden_layers.json",
                    "num_hidden_layers: 2 is set, but LongcatFlashConfig does not read it: the "
                    "model sets it to 2 x num_layers = 4");
  // GLM-4.5's glm4_moe is no MLA: its head_dim is only in the file (64, not 256 / 8).
  ExpectRows(Plan(Read("glm4_moe_head_dim.json").layers, 4096, 4),
             {{'G', 0, 0, 4096}, {'G', 0, 1, 4096}, {'G', 0, 2, 4096}}, 2, 64);
  // kvring-plan --mla expanded prints the per-head shapes; a bad form is refused.
  const CliRun run = RunCli({"--config", ConfigPath("deepseek_v3_tiny.json"), "--mla", "expanded"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("8 x 48/32"), std::string::npos) << run.out;
  const CliRun bad = RunCli({"--config", ConfigPath("deepseek_v3_tiny.json"), "--mla", "wide"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err, "kvring-plan: option --mla: 'wide' is not latent or expanded\n");
}

TEST(HfConfigFamilies, DsaLayersCountTheirIndexerKeyInTheirSlot) {
  // DeepSeek-V3.2-Exp: 61 latent layers of 512 + 64, each with an indexer key of 128: in BF16
  // 1152 + 256 bytes a position, in int8 (the FP8 key and scale engines keep) 580 + 132.
  const HfModel v32 = Read("deepseek_v32_exp.json");
  EXPECT_EQ(v32.max_context, 163840u);
  ASSERT_EQ(v32.layers.size(), 61u);
  for (const LayerSpec& spec : v32.layers) {
    EXPECT_EQ(spec.latent_dim, 576u);
    EXPECT_EQ(spec.indexer_dim, 128u);
  }
  const LayerPlan bf16 = Plan(v32.layers, 4096, 16);
  EXPECT_EQ(bf16.Layer(0).indexer_slot_bytes, 256u);
  EXPECT_EQ(bf16.Layer(0).slot_bytes, 576u * 2 + 256);
  EXPECT_EQ(bf16.ContextTokenBytes(), 61u * (576 * 2 + 256));
  LayerPlan::Builder builder = v32.PlanBuilder();
  const Expected<LayerPlan> int8 =
      builder.SetContext(4096).SetBatch(16).SetElementType(ElementType::kInt8).Build();
  ASSERT_TRUE(int8.ok()) << int8.error().message;
  EXPECT_EQ(int8->Layer(0).indexer_slot_bytes, 128u + 4);
  EXPECT_EQ(int8->Layer(0).slot_bytes, 576u + 4 + 128 + 4);
  // Expanded (transformers' cache): 128 heads of K 192 and V 128, and the indexer key.
  HfReadOptions expanded;
  expanded.mla = MlaCache::kExpanded;
  const Expected<HfModel> wide = ReadHfConfig(ConfigPath("deepseek_v32_exp.json"), expanded);
  ASSERT_TRUE(wide.ok()) << wide.error().message;
  EXPECT_EQ(wide->layers[0].num_kv_heads, 128u);
  EXPECT_EQ(wide->layers[0].indexer_dim, 128u);
  // GLM-5's indexer_types: "full" layers run an indexer (and keep its keys), "shared" ones
  // reuse the previous full layer's top-k. From index_topk_freq 2 and index_skip_topk_offset 2:
  // full iff max(i - 1, 0) % 2 == 0, layers 0, 1, 3, 5; from the list, 0, 3, 5.
  const struct {
    const char* file;
    std::vector<bool> full;
  } kGlm[] = {{"glm_moe_dsa_freq.json", {true, true, false, true, false, true}},
              {"glm_moe_dsa_indexer_types.json", {true, false, false, true, false, true}}};
  for (const auto& c : kGlm) {
    SCOPED_TRACE(c.file);
    const HfModel glm = Read(c.file);
    ASSERT_EQ(glm.layers.size(), c.full.size());
    for (size_t i = 0; i < c.full.size(); ++i) {
      EXPECT_EQ(glm.layers[i].latent_dim, 64u + 16) << i;
      EXPECT_EQ(glm.layers[i].indexer_dim, c.full[i] ? 64u : 0u) << i;
    }
  }
  // kvring-plan reports them and where storage keeps them: beside the latent, and not beside
  // the expanded form's per-head K/V (caches and pools refuse that plan by the field).
  const CliRun run = RunCli({"--config", ConfigPath("deepseek_v32_exp.json"), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["layers"][0]["indexer_dim"], 128);
  EXPECT_EQ(json["layers"][0]["indexer_slot_bytes"], 256);
  EXPECT_EQ(json["layers"][0]["slot_bytes"], 576 * 2 + 256);
  const CliRun text = RunCli({"--config", ConfigPath("deepseek_v32_exp.json")});
  EXPECT_NE(text.out.find("DSA indexer keys: 61 layers, 256 bytes a position each"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("per sequence; stored beside each latent)"), std::string::npos)
      << text.out;
  const CliRun expanded_run =
      RunCli({"--config", ConfigPath("deepseek_v32_exp.json"), "--mla", "expanded"});
  ASSERT_EQ(expanded_run.status, 0) << expanded_run.err;
  EXPECT_NE(
      expanded_run.out.find("kvring's storage keeps them beside MLA latents only: --mla latent"),
      std::string::npos)
      << expanded_run.out;
}

TEST(HfConfigFamilies, GatedDeltaNetHybridsPlanStatesBesideTheFullLayers) {
  // Qwen3-Next: full iff (i + 1) % 4 == 0; each linear_attention layer keeps a conv state of
  // (kernel 4 - 1) x (2 x 2 x 32 + 4 x 16) = 576 BF16 elements and a recurrent state of
  // 4 x 32 x 16 = 2048 elements, BF16 without mamba_ssm_dtype.
  const HfModel next = Read("qwen3_next_tiny.json");
  ASSERT_EQ(next.layers.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const LayerSpec& spec = next.layers[i];
    EXPECT_EQ(spec.attends, (i + 1) % 4 == 0) << i;
    if (spec.attends) {
      EXPECT_EQ(spec.num_kv_heads, 2u);
      EXPECT_EQ(spec.head_dim, 64u);
      EXPECT_FALSE(spec.HasState());
      continue;
    }
    EXPECT_EQ(spec.state.conv_elements, 576u) << i;
    EXPECT_EQ(spec.state.conv_format, Format::kBF16);
    EXPECT_EQ(spec.state.recurrent_elements, 2048u) << i;
    EXPECT_EQ(spec.state.recurrent_format, Format::kBF16);
  }
  EXPECT_TRUE(HasDefault(next, "mamba_ssm_dtype", "bfloat16 (the model's type)"));
  // Qwen3.5 (text_config, layer_types, mamba_ssm_dtype float32): class defaults head_dim 256,
  // linear dims 128, kernel 4: conv 3 x (2 x 2 x 128 + 2 x 128) = 2304, recurrent 2 x 128 x
  // 128 = 32768 F32 elements; with rollback 2, three copies of each.
  const HfModel qwen35 = Read("qwen3_5_layer_types.json");
  EXPECT_EQ(qwen35.model_type, "qwen3_5_text");
  LayerPlan::Builder builder = qwen35.PlanBuilder();
  const Expected<LayerPlan> plan = builder.SetContext(1024).SetBatch(16).SetRollback(2).Build();
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->Layer(0).conv_state_bytes, 2304u * 2);
  EXPECT_EQ(plan->Layer(0).recurrent_state_bytes, 32768u * 4);
  EXPECT_EQ(plan->StateBytes(), 2 * 3 * (2304u * 2 + 32768u * 4));
  EXPECT_EQ(plan->Layer(1).spec.head_dim, 256u);
  // kvring-plan names the kinds and prints the state line.
  const CliRun run = RunCli({"--config", ConfigPath("qwen3_next_tiny.json"), "--rollback", "2"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("0-2     state"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("recurrent state, per sequence: 92.25 KiB in 6 layers (3 copies"),
            std::string::npos)
      << run.out;
}

TEST(HfConfigFamilies, NemotronHPlansMambaAttentionAndBlocksWithoutMixer) {
  // hybrid_override_pattern "M-M*EM": mamba, mlp, mamba, attention, moe, mamba. A mamba block
  // keeps (conv_kernel 4 - 1) x (8 x 16 + 2 x 2 x 16) = 576 BF16 conv elements and an SSM
  // state of 8 x 16 x 16 = 2048 elements, F32 (NemotronHConfig's mamba_ssm_cache_dtype).
  const HfModel pattern = Read("nemotron_h_pattern.json");
  const char* const kKinds[] = {"state", "none", "state", "global", "none", "state"};
  ASSERT_EQ(pattern.layers.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const LayerSpec& spec = pattern.layers[i];
    EXPECT_STREQ(LayerKindName(spec.kind, spec.attends, spec.HasState()), kKinds[i]) << i;
    if (spec.HasState()) {
      EXPECT_EQ(spec.state.conv_elements, 576u);
      EXPECT_EQ(spec.state.recurrent_elements, 2048u);
      EXPECT_EQ(spec.state.recurrent_format, Format::kF32);
    }
  }
  EXPECT_EQ(pattern.layers[3].num_kv_heads, 2u);
  EXPECT_EQ(pattern.layers[3].head_dim, 64u);
  EXPECT_TRUE(HasDefault(pattern, "mamba_ssm_cache_dtype", "float32"));
  // layers_block_type, with the SSM state in BF16 as the file asks.
  const HfModel list = Read("nemotron_h_block_list.json");
  ASSERT_EQ(list.layers.size(), 4u);
  EXPECT_FALSE(list.layers[0].attends);
  EXPECT_EQ(list.layers[0].state.recurrent_format, Format::kBF16);
  EXPECT_TRUE(list.layers[1].attends);
  EXPECT_FALSE(list.layers[2].HasState());
}

TEST(HfConfigFamilies, Granite4HybridDerivesTheMambaHeadDim) {
  // layer_types mamba, mamba, attention, mamba; mamba_d_head "auto": 2 x 128 / 8 = 32. Conv
  // (4 - 1) x (256 + 2 x 1 x 16) = 864 BF16 elements; SSM 8 x 32 x 16 = 4096 BF16 elements (no
  // mamba_ssm_dtype); the attention layer MHA-less: 2 KV heads of 128 / 4.
  const HfModel model = Read("granitemoehybrid_tiny.json");
  ASSERT_EQ(model.layers.size(), 4u);
  EXPECT_TRUE(HasDefault(model, "mamba_d_head", "auto"));
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
    EXPECT_FALSE(model.layers[i].attends) << i;
    EXPECT_EQ(model.layers[i].state.conv_elements, 864u) << i;
    EXPECT_EQ(model.layers[i].state.recurrent_elements, 4096u) << i;
    EXPECT_EQ(model.layers[i].state.recurrent_format, Format::kBF16) << i;
  }
  EXPECT_TRUE(model.layers[2].attends);
  EXPECT_EQ(model.layers[2].num_kv_heads, 2u);
  EXPECT_EQ(model.layers[2].head_dim, 32u);
}

TEST(HfConfigFamilies, JambaPlacesAttentionByPeriodAndOffset) {
  // attn_layer_period 3, offset 1: layers 1 and 4 attend (2 KV heads of 64 / 4), the others are
  // Mamba1 layers: intermediate 2 x 64 = 128, conv (4 - 1) x 128 = 384 BF16 elements, SSM
  // 128 x 8 = 1024 BF16 elements.
  const HfModel model = Read("jamba_tiny.json");
  ASSERT_EQ(model.layers.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const LayerSpec& spec = model.layers[i];
    const bool attention = i % 3 == 1;
    EXPECT_EQ(spec.attends, attention) << i;
    EXPECT_EQ(spec.HasState(), !attention) << i;
    if (attention) {
      EXPECT_EQ(spec.kind, AttentionKind::kGlobal) << i;
      EXPECT_EQ(spec.num_kv_heads, 2u) << i;
      EXPECT_EQ(spec.head_dim, 16u) << i;
    } else {
      EXPECT_EQ(spec.state.conv_elements, 384u) << i;
      EXPECT_EQ(spec.state.recurrent_elements, 1024u) << i;
      EXPECT_EQ(spec.state.recurrent_format, Format::kBF16) << i;
    }
  }
  EXPECT_EQ(model.max_context, 4096u);
}

TEST(HfConfigFamilies, FalconH1LayersAttendAndKeepAMamba2State) {
  // Every layer: full attention (2 KV heads of the file's head_dim 32) and a Mamba2 state of
  // mamba_d_ssm 128 in 8 heads of 16 ("auto"): conv (4 - 1) x (128 + 2 x 2 x 16) = 576 BF16
  // elements, SSM 8 x 16 x 16 = 2048 BF16 elements.
  const HfModel model = Read("falcon_h1_tiny.json");
  ASSERT_EQ(model.layers.size(), 3u);
  for (const LayerSpec& spec : model.layers) {
    EXPECT_TRUE(spec.attends);
    EXPECT_EQ(spec.kind, AttentionKind::kGlobal);
    EXPECT_EQ(spec.num_kv_heads, 2u);
    EXPECT_EQ(spec.head_dim, 32u);
    EXPECT_EQ(spec.state.conv_elements, 576u);
    EXPECT_EQ(spec.state.recurrent_elements, 2048u);
    EXPECT_STREQ(LayerKindName(spec.kind, spec.attends, spec.HasState()), "global");
  }
  // Without mamba_d_ssm the class default 1024 is the Mamba width; null asks for mamba_expand x
  // hidden_size (2 x 64 = 128).
  std::ifstream file(ConfigPath("falcon_h1_tiny.json"));
  std::stringstream contents;
  contents << file.rdbuf();
  const std::string text = contents.str();
  const std::string d_ssm = "\"mamba_d_ssm\": 128,";
  ASSERT_NE(text.find(d_ssm), std::string::npos);
  std::string absent = text;
  absent.erase(absent.find(d_ssm), d_ssm.size());
  const Expected<HfModel> wide = ParseHfConfig(absent, "falcon_h1_tiny.json");
  ASSERT_TRUE(wide.ok()) << wide.error().message;
  EXPECT_EQ(wide.value().layers[0].state.recurrent_elements, 1024u * 16u);
  EXPECT_TRUE(HasDefault(wide.value(), "mamba_d_ssm", "1024"));
  std::string null = text;
  null.replace(null.find(d_ssm), d_ssm.size(), "\"mamba_d_ssm\": null,");
  const Expected<HfModel> expanded = ParseHfConfig(null, "falcon_h1_tiny.json");
  ASSERT_TRUE(expanded.ok()) << expanded.error().message;
  EXPECT_EQ(expanded.value().layers[0].state.recurrent_elements, 128u * 16u);
}

TEST(HfConfigFamilies, MiniMaxLightningLayersKeepAHeadDimSquaredState) {
  // No layer_types: full on even layers, lightning on odd; head_dim null: 64 / 4 = 16, so a
  // lightning layer keeps 4 x 16 x 16 = 1024 BF16 elements and no conv state.
  const HfModel model = Read("minimax_tiny.json");
  ASSERT_EQ(model.layers.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const LayerSpec& spec = model.layers[i];
    EXPECT_EQ(spec.attends, i % 2 == 0) << i;
    if (spec.attends) {
      EXPECT_EQ(spec.kind, AttentionKind::kGlobal) << i;
      EXPECT_EQ(spec.num_kv_heads, 2u) << i;
      EXPECT_EQ(spec.head_dim, 16u) << i;
      EXPECT_FALSE(spec.HasState()) << i;
    } else {
      EXPECT_EQ(spec.state.conv_elements, 0u) << i;
      EXPECT_EQ(spec.state.recurrent_elements, 1024u) << i;
      EXPECT_EQ(spec.state.recurrent_format, Format::kBF16) << i;
    }
  }
  // layer_types (with an attn_type_list that agrees) and sliding_window 64: the softmax layer
  // slides; the lightning layers keep 4 x 32 x 32 elements (head_dim 32).
  const HfModel listed = Read("minimax_layer_types.json");
  ASSERT_EQ(listed.layers.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(listed.layers[i].attends) << i;
    EXPECT_EQ(listed.layers[i].state.recurrent_elements, 4096u) << i;
  }
  EXPECT_EQ(listed.layers[3].kind, AttentionKind::kSliding);
  EXPECT_EQ(listed.layers[3].window, 64u);
  EXPECT_EQ(listed.layers[3].head_dim, 32u);
}

TEST(HfConfigFamilies, MiniMaxM1ReadsAttnTypeListAndKeepsTheLightningStateInF32) {
  // MiniMax-M1's remote code: attn_type_list [0, 0, 0, 1] makes layers 0-2 lightning (4 heads
  // of 64 / 4 = 16: 4 x 16 x 16 = 1024 F32 elements, the remote code's float32) and layer 3
  // full attention of 2 KV heads.
  const HfModel model = Read("minimax_m1_tiny.json");
  ASSERT_EQ(model.layers.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(model.layers[i].attends) << i;
    EXPECT_EQ(model.layers[i].state.conv_elements, 0u) << i;
    EXPECT_EQ(model.layers[i].state.recurrent_elements, 1024u) << i;
    EXPECT_EQ(model.layers[i].state.recurrent_format, Format::kF32) << i;
  }
  EXPECT_EQ(model.layers[3].kind, AttentionKind::kGlobal);
  EXPECT_EQ(model.layers[3].num_kv_heads, 2u);
  EXPECT_EQ(model.layers[3].head_dim, 16u);
  EXPECT_FALSE(model.layers[3].HasState());
  EXPECT_EQ(model.max_context, 8192u);
  // The published file: 80 layers, softmax attention at i % 8 == 7 (8 KV heads of 128), the
  // lightning layers 64 x 128 x 128 F32 elements each (4 MiB), 10240000 positions.
  const HfModel published = Read("presets/minimax-m1.json");
  ASSERT_EQ(published.layers.size(), 80u);
  for (size_t i = 0; i < 80; ++i) {
    const LayerSpec& spec = published.layers[i];
    EXPECT_EQ(spec.attends, i % 8 == 7) << i;
    if (spec.attends) {
      EXPECT_EQ(spec.num_kv_heads, 8u) << i;
      EXPECT_EQ(spec.head_dim, 128u) << i;
    } else {
      EXPECT_EQ(spec.state.recurrent_elements, 64u * 128u * 128u) << i;
      EXPECT_EQ(spec.state.recurrent_format, Format::kF32) << i;
    }
  }
  EXPECT_EQ(published.max_context, 10240000u);
}

TEST(HfConfigFamilies, OlmoHybridDerivesItsLinearHeadsFromTheAttentionHeads) {
  // No layer_types: full iff i % 4 == 3. Linear keys from the 4 attention heads: 4 key and 4
  // value heads, key head dim int(0.75 x 64 / 4) = 12, value head dim 24; conv (4 - 1) x
  // (2 x 4 x 12 + 4 x 24) = 576, recurrent 4 x 12 x 24 = 1152 elements.
  const HfModel model = Read("olmo_hybrid_defaults.json");
  ASSERT_EQ(model.layers.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(model.layers[i].attends, i == 3) << i;
    if (i == 3) continue;
    EXPECT_EQ(model.layers[i].state.conv_elements, 576u) << i;
    EXPECT_EQ(model.layers[i].state.recurrent_elements, 1152u) << i;
  }
  EXPECT_EQ(model.layers[3].num_kv_heads, 4u);  // None: MHA
  EXPECT_TRUE(HasDefault(model, "linear_key_head_dim", "12"));
  // The file's keys, linear_value_head_dim null (2 x 16): conv (3 - 1) x (2 x 2 x 16 + 4 x 32)
  // = 384, recurrent 4 x 16 x 32 = 2048.
  const HfModel keyed = Read("olmo_hybrid_linear_keys.json");
  ASSERT_EQ(keyed.layers.size(), 3u);
  EXPECT_EQ(keyed.layers[0].state.conv_elements, 384u);
  EXPECT_EQ(keyed.layers[2].state.recurrent_elements, 2048u);
  EXPECT_EQ(keyed.layers[1].num_kv_heads, 2u);
}

TEST(HfConfigFamilies, Zamba2HybridBlocksAttendBesideTheirMamba2State) {
  // Blocks mamba, mamba, hybrid, mamba, hybrid. Mamba2: 2 x 64 = 128 wide in 4 heads, 2 groups
  // of 16: conv (4 - 1) x (128 + 2 x 2 x 16) = 576, SSM 128 x 16 = 2048 elements. A hybrid
  // block also attends: 2 KV heads of the file's head_dim 16. use_long_context: 16384.
  const HfModel model = Read("zamba2_tiny.json");
  ASSERT_EQ(model.layers.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const LayerSpec& spec = model.layers[i];
    EXPECT_EQ(spec.attends, i == 2 || i == 4) << i;
    EXPECT_EQ(spec.state.conv_elements, 576u) << i;
    EXPECT_EQ(spec.state.recurrent_elements, 2048u) << i;
    if (spec.attends) {
      EXPECT_EQ(spec.num_kv_heads, 2u) << i;
      EXPECT_EQ(spec.head_dim, 16u) << i;
    }
  }
  EXPECT_EQ(model.max_context, 16384u);
  // Without layers_block_type, the class's 54 blocks (hybrid at 6, 12, ..., 42, 47 and 51) and
  // its head dim 2 x 64 / 4 = 32.
  const HfModel blocks = Read("zamba2_default_blocks.json");
  ASSERT_EQ(blocks.layers.size(), 54u);
  for (size_t i = 0; i < 54; ++i) {
    const bool hybrid = (i % 6 == 0 && i > 0 && i <= 42) || i == 47 || i == 51;
    EXPECT_EQ(blocks.layers[i].attends, hybrid) << i;
  }
  EXPECT_EQ(blocks.layers[6].head_dim, 32u);
  EXPECT_EQ(blocks.layers[6].num_kv_heads, 4u);
}

TEST(HfConfigFamilies, Lfm2ConvLayersKeepTheirShortConvolution) {
  // full_attn_idxs [2, 4]: layers 0, 1, 3 are conv layers of (conv_L_cache 3 - 1) x 128 BF16
  // elements, no recurrent state; full layers 2 x 32 (Lfm2Config's head dim: 128 / 4).
  const HfModel model = Read("lfm2_full_attn_idxs.json");
  ASSERT_EQ(model.layers.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const LayerSpec& spec = model.layers[i];
    const bool full = i == 2 || i == 4;
    EXPECT_EQ(spec.attends, full) << i;
    EXPECT_EQ(spec.state.conv_elements, full ? 0u : 256u) << i;
    EXPECT_EQ(spec.state.recurrent_elements, 0u) << i;
    if (full) EXPECT_EQ(spec.head_dim, 32u);
  }
}

TEST(HfConfigFamilies, Lfm2MoeAndLfm2VlReadLfm2sLayers) {
  // LFM2 MoE: layer_types (required) of conv and full_attention; a conv layer keeps (3 - 1) x
  // 64 BF16 elements; full layers 2 KV heads of 64 / 4 = 16.
  const HfModel moe = Read("lfm2_moe_tiny.json");
  ASSERT_EQ(moe.layers.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(moe.layers[i].attends, i % 2 == 1) << i;
    EXPECT_EQ(moe.layers[i].state.conv_elements, i % 2 == 1 ? 0u : 128u) << i;
  }
  EXPECT_EQ(moe.layers[1].head_dim, 16u);
  // LFM2-VL: its text_config's model_type (lfm2) reads full_attn_idxs [2].
  const HfModel vl = Read("lfm2_vl_tiny.json");
  EXPECT_EQ(vl.model_type, "lfm2");
  ASSERT_EQ(vl.layers.size(), 3u);
  EXPECT_FALSE(vl.layers[0].attends);
  EXPECT_FALSE(vl.layers[1].attends);
  EXPECT_TRUE(vl.layers[2].attends);
}

// --- Bad files of the new families: one line naming the file and the key, exit status 2 ----

TEST(HfConfigFamilies, MimoV2FlashGivesItsSlidingLayersTheirOwnShape) {
  // The published file: hybrid_layer_pattern makes layers 0, 5, 11, ..., 47 full (4 KV heads of
  // K 192 and V 128), the 39 others slide over 128 keys with 8 KV heads of the same dims.
  const HfModel model = Read("presets/mimo-v2-flash.json");
  EXPECT_EQ(model.model_type, "mimo_v2_flash");
  EXPECT_EQ(model.max_context, 262144u);
  ASSERT_EQ(model.layers.size(), 48u);
  size_t num_full = 0;
  for (size_t i = 0; i < 48; ++i) {
    const LayerSpec& spec = model.layers[i];
    const bool full = i == 0 || (i + 1) % 6 == 0;
    num_full += full ? 1 : 0;
    EXPECT_EQ(spec.kind, full ? AttentionKind::kGlobal : AttentionKind::kSliding) << i;
    EXPECT_EQ(spec.window, full ? 0u : 128u) << i;
    EXPECT_EQ(spec.num_kv_heads, full ? 4u : 8u) << i;
    EXPECT_EQ(spec.head_dim, 192u) << i;
    EXPECT_EQ(spec.VHeadDim(), 128u) << i;
  }
  EXPECT_EQ(num_full, 9u);
  // Without a pattern, hybrid_block_size 3 makes every third layer full; the window comes from
  // sliding_window_size; each kind keeps its own heads and dims.
  const HfModel blocks = Read("mimo_v2_flash_block_size.json");
  ASSERT_EQ(blocks.layers.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const LayerSpec& spec = blocks.layers[i];
    const bool full = (i + 1) % 3 == 0;
    EXPECT_EQ(spec.window, full ? 0u : 64u) << i;
    EXPECT_EQ(spec.num_kv_heads, full ? 2u : 4u) << i;
    EXPECT_EQ(spec.head_dim, full ? 48u : 64u) << i;
    EXPECT_EQ(spec.VHeadDim(), full ? 32u : 16u) << i;
  }
  EXPECT_TRUE(
      HasDefault(blocks, "hybrid_layer_pattern", "full iff (i + 1) % hybrid_block_size (3) == 0"));
  // kvring-plan: a sliding layer holds its window - 1 + the batch (512) positions, 639, in 21
  // tiles of 32 slots (an odd count), each slot 8 x (192 + 128) x 2 bytes; a full layer 4 heads.
  const CliRun run = RunCli({"--config", ConfigPath("presets/mimo-v2-flash.json"), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["layers"][1]["kind"], "sliding");
  EXPECT_EQ(json["layers"][1]["num_kv_heads"], 8);
  EXPECT_EQ(json["layers"][1]["v_head_dim"], 128);
  EXPECT_EQ(json["layers"][1]["capacity"], 639);
  EXPECT_EQ(json["layers"][1]["num_slots"], 672);
  EXPECT_EQ(json["layers"][1]["slot_bytes"], 8 * (192 + 128) * 2);
  EXPECT_EQ(json["layers"][5]["slot_bytes"], 4 * (192 + 128) * 2);
  EXPECT_EQ(json["layers"][5]["kind"], "global");
  EXPECT_EQ(json["layers"][5]["num_kv_heads"], 4);
}

TEST(HfConfigFamilies, BadFilesExitTwoWithOneLineNamingFileAndKey) {
  const struct {
    const char* file;
    const char* message;  // what follows "kvring-plan: <path>: "
  } kCases[] = {
      {"bad/gemma4_k_eq_v_without_global_heads.json",
       "text_config.num_global_key_value_heads: is missing, but attention_k_eq_v is true"},
      {"bad/gemma4_global_heads_not_dividing.json",
       "num_global_key_value_heads: 3 does not divide num_attention_heads 4"},
      {"bad/gemma4_null_global_head_dim.json", "global_head_dim: is null"},
      {"bad/gemma4_all_shared.json", "num_kv_shared_layers: 8 leaves no layer of the 8"},
      {"bad/gemma4_shared_full_without_owner.json",
       "num_kv_shared_layers: 3 makes layer 5 (full_attention) read shared KV, but no earlier"},
      {"bad/gemma4_bidirectional_all.json", "use_bidirectional_attention: is \"all\""},
      {"bad/gemma4_unified_bidirectional_all.json",
       "text_config.use_bidirectional_attention: is \"all\""},
      {"bad/gemma4_bidirectional_unknown.json",
       "use_bidirectional_attention: \"text\" is not \"all\", \"vision\" or null"},
      {"bad/gemma4_text_config_model_type.json",
       "text_config.model_type: \"gemma3_text\" is not gemma4_text"},
      {"bad/exaone4_pattern_string_without_layer_types.json",
       "sliding_window_pattern: \"LLLG\" is a string, not a number; Exaone4Config derives"},
      {"bad/exaone_moe_pattern_string_without_layer_types.json",
       "sliding_window_pattern: \"LLLG\" is a string, not a number; ExaoneMoeConfig derives"},
      {"bad/dots1_null_max_window_layers.json", "max_window_layers: is null; Dots1Config needs"},
      {"bad/vaultgemma_missing_kv_heads.json",
       "num_key_value_heads: is missing; VaultGemmaConfig's default 4 is one checkpoint's count"},
      {"bad/cwm_null_window.json", "sliding_window: is null, but layer 1 is sliding_attention"},
      {"bad/mellum_null_window.json", "sliding_window: is null, but layer 0 is sliding_attention"},
      {"bad/exaone4_pattern_letters.json",
       "sliding_window_pattern: \"LLXG\" is not a period nor a string of L (local) and G"},
      {"bad/exaone4_pattern_contradicts.json",
       "sliding_window_pattern: \"LLG\" makes layer 2 full_attention, but layer 2 is sliding"},
      {"bad/smollm3_window_missing.json",
       "sliding_window: is missing, but use_sliding_window is true; SmolLM3Config"},
      {"bad/smollm3_no_rope_length.json", "no_rope_layers: has 3 entries, but num_hidden_layers"},
      {"bad/ministral_no_head_dim.json", "head_dim: is missing; MinistralConfig's default None"},
      {"bad/ministral3_layer_types.json",
       "layer_types[1]: full_attention, but layer 1 is sliding_attention (by Ministral3Config"},
      {"bad/olmo3_null_window.json", "sliding_window: is null, but layer 0 is sliding"},
      {"bad/afmoe_null_head_dim.json", "head_dim: is null; AfmoeConfig needs a number here"},
      {"bad/afmoe_zero_interval.json", "global_attn_every_n_layers: 0 is invalid"},
      {"bad/qwen2_vl_flat_head_dim.json",
       "head_dim: 32 contradicts hidden_size / num_attention_heads = 64"},
      {"bad/glm_moe_dsa_shared_first.json",
       "indexer_types: makes layer 0 shared, but no earlier layer runs an indexer"},
      {"bad/glm_moe_dsa_offset_shares_first.json",
       "index_skip_topk_offset: makes layer 0 shared, but no earlier layer runs an indexer"},
      {"bad/glm_moe_dsa_pattern_letter.json",
       "index_topk_pattern: \"FSXFSF\" has 'X' at 2, not F (full) or S (shared)"},
      {"bad/minimax_m3_sparse_unplanned.json",
       "model_type: 'minimax_m3_vl_text' (transformers' MiniMaxM3VLTextConfig): its "
       "minimax_m3_sparse layers"},
      {"bad/mllama_unplanned.json",
       "model_type: 'mllama_text_model' (transformers' MllamaTextConfig): its cross-attention "
       "layers"},
      {"bad/t5gemma_unplanned.json",
       "model_type: 't5gemma' (transformers' T5GemmaConfig): an encoder-decoder"},
      {"bad/deepseek_v4_unplanned.json",
       "model_type: 'deepseek_v4' (transformers' DeepseekV4Config): its compressed attention"},
      {"bad/mistral4_null_rope.json",
       "qk_rope_head_dim: is null; Mistral4Config's latent attention needs a number here"},
      {"bad/glm4_moe_missing_kv_heads.json",
       "num_key_value_heads: is missing; Glm4MoeConfig's default 8"},
      {"bad/qwen3_next_layer_type.json",
       "layer_types[1]: \"mamba\" is not linear_attention or full_attention (Qwen3NextConfig)"},
      {"bad/qwen3_next_value_heads.json",
       "linear_num_value_heads: 4 is not a multiple of linear_num_key_heads 3"},
      {"bad/nemotron_h_pattern_letter.json",
       "hybrid_override_pattern: \"M-X*\" has 'X' at 2, not M (mamba), E (moe)"},
      {"bad/nemotron_h_no_blocks.json",
       "layers_block_type: is missing, and so is hybrid_override_pattern"},
      {"bad/nemotron_h_groups.json", "n_groups: 3 does not divide mamba_num_heads 8"},
      {"bad/lfm2_index_past_last_layer.json", "full_attn_idxs[1]: 5 is too large (at most 4)"},
      {"bad/lfm2_layer_type.json", "layer_types[2]: \"mamba\" is not conv or full_attention"},
      {"bad/granitemoehybrid_head_dim.json",
       "mamba_d_head: 16 x mamba_n_heads 8 is not mamba_expand x hidden_size 256"},
      {"bad/granitemoehybrid_layer_type.json",
       "layer_types[1]: \"linear_attention\" is not mamba or attention"},
      {"bad/jamba_offset.json",
       "attn_layer_offset: 2 is not below attn_layer_period 2 (JambaConfig refuses it)"},
      {"bad/jamba_expert_offset.json",
       "expert_layer_offset: 1 is not below expert_layer_period 1 (JambaConfig"},
      {"bad/jamba_conv_kernel.json", "mamba_d_conv: 0 is invalid: it must be at least 1"},
      {"bad/jamba_state_overflow.json",
       "mamba_d_state: makes a layer's state elements overflow 64 bits"},
      {"bad/falcon_h1_mamba_heads.json",
       "mamba_n_heads: 8 does not divide the Mamba width 100 (FalconH1Config refuses it)"},
      {"bad/falcon_h1_kv_heads.json",
       "num_key_value_heads: 3 does not divide num_attention_heads 4"},
      {"bad/falcon_h1_mamba_head_dim.json",
       "mamba_d_head: 32 x mamba_n_heads 8 is not the Mamba width 128"},
      {"bad/minimax_attn_type_list.json",
       "attn_type_list[0]: 0, but MiniMaxConfig reads layer_types, which make layer 0 "
       "full_attention"},
      {"bad/minimax_layer_type.json",
       "layer_types[0]: \"lightning\" is not linear_attention or full_attention (MiniMaxConfig)"},
      {"bad/minimax_null_kv_heads.json", "num_key_value_heads: is null; MiniMaxConfig's default 8"},
      {"bad/minimax_m1_no_attn_type_list.json",
       "attn_type_list: is missing; MiniMaxM1Config (remote code)'s model reads one 0 (lightning) "
       "or 1 (softmax attention) per layer from it"},
      {"bad/minimax_m1_attn_type_value.json",
       "attn_type_list[1]: 2 is not 0 (lightning attention) or 1 (softmax attention)"},
      {"bad/minimax_m1_sliding_window.json",
       "sliding_window: 64 is set, but MiniMaxM1Config (remote code)'s eager attention attends "
       "every position"},
      {"bad/olmo_hybrid_no_attention.json",
       "layer_types: has no attention layer; OlmoHybridConfig expects at least one"},
      {"bad/olmo_hybrid_key_head_dim.json",
       "linear_key_head_dim: is not given, and int(0.75 x hidden_size / linear_num_key_heads) = 0 "
       "is no head dim"},
      {"bad/olmo_hybrid_no_linear.json",
       "layer_types: has no linear_attention layer; OlmoHybridConfig expects at least one"},
      {"bad/zamba2_block_type.json",
       "layers_block_type[1]: \"attention\" is not mamba or hybrid (Zamba2Config)"},
      {"bad/zamba2_missing_blocks.json",
       "layers_block_type: is missing; Zamba2Config's default lists the 54 blocks of Zamba2-2.7B, "
       "but num_hidden_layers is 6"},
      {"bad/zamba2_mamba_heads.json",
       "n_mamba_heads: 3 does not divide mamba_expand x hidden_size 128"},
      {"bad/zamba2_null_head_dim.json", "head_dim: is null"},
      {"bad/qwen3_vl_missing_kv_heads.json",
       "text_config.num_key_value_heads: is missing; Qwen3VLTextConfig's default 32"},
      {"bad/qwen3_vl_moe_null_kv_heads.json",
       "text_config.num_key_value_heads: is null; Qwen3VLMoeTextConfig's default 16"},
      {"bad/lfm2_moe_no_layer_types.json",
       "layer_types: is missing; Lfm2MoeConfig derives none (its model indexes the list)"},
      {"bad/recurrent_gemma_block_type.json",
       "block_types[1]: \"mamba\" is not recurrent or attention (RecurrentGemmaConfig)"},
      {"bad/recurrent_gemma_kv_heads.json", "num_key_value_heads: 8 is too large (at most 4)"},
      {"bad/hy_v3_null_head_dim.json", "head_dim: is null; HYV3Config needs a number here"},
      {"bad/xlstm_qk_dim.json",
       "qk_dim_factor: makes hidden_size x it 50, which is not a multiple of 64"},
      {"bad/xlstm_state_dtype.json",
       "inference_state_dtype: \"int8\" is not \"float32\", \"bfloat16\" or \"float16\""},
      {"bad/xlstm_blocks_disagree.json", "num_blocks: 3 is not num_hidden_layers 2"},
      {"bad/glm4v_head_dim.json",
       "text_config.head_dim: 32 contradicts hidden_size / num_attention_heads = 16, which "
       "Glm4vTextConfig always uses"},
      {"bad/mistral3_unplanned_text.json",
       "text_config.model_type: 'diffllama' (transformers' DiffLlamaConfig): its differential "
       "attention"},
      {"bad/deepseek_v2_null_rank.json",
       "kv_lora_rank: is null; DeepseekV2Config's latent attention needs a number here"},
      {"bad/mistral3_no_text_config.json",
       "text_config: is missing; mistral3 keeps its language model's configuration there"},
      {"bad/qwen3_moe_switched_without_window.json",
       "sliding_window: is null, but use_sliding_window is true; Qwen3MoeConfig would silently "
       "make every layer full_attention"},
      {"bad/mixtral_null_kv_heads.json",
       "num_key_value_heads: is null; MixtralConfig's default 8 is one checkpoint's count"},
      {"bad/phi3_null_head_dim.json", "head_dim: is null; the model would have no head dimension"},
      {"bad/phi4_multimodal_no_kv_heads.json",
       "num_key_value_heads: is missing; Phi4MultimodalConfig's default 8 is one checkpoint's "
       "count"},
      {"bad/laguna_heads_per_layer.json",
       "num_attention_heads_per_layer[1]: 6 is not a multiple of num_key_value_heads 4"},
      {"bad/laguna_heads_list_length.json",
       "num_attention_heads_per_layer: has 2 entries, but num_hidden_layers is 3"},
      {"bad/laguna_missing_kv_heads.json",
       "num_key_value_heads: is missing; LagunaConfig's default 8 is one checkpoint's count"},
      {"bad/cohere2_moe_prefix_past_last_layer.json",
       "first_k_dense_replace: 5 is too large (at most 4)"},
      {"bad/cohere2_moe_zero_prefix_pattern.json",
       "prefix_dense_sliding_window_pattern: 0 is invalid: it must be at least 1"},
      {"bad/cohere2_moe_null_head_dim.json", "head_dim: is null; Cohere2MoeConfig needs a number"},
      {"bad/qwen2_moe_null_kv_heads.json",
       "num_key_value_heads: is null; Qwen2MoeConfig's default 16 is one checkpoint's count"},
      {"bad/qwen2_moe_sliding_without_window.json",
       "layer_types[0]: is sliding_attention, but use_sliding_window is false, so Qwen2MoeConfig "
       "drops sliding_window"},
      {"bad/bamba_index_past_last_layer.json", "attn_layer_indices[1]: 4 is too large (at most 3)"},
      {"bad/bamba_layer_types.json",
       "layer_types: is given, but BambaConfig computes the layer kinds from attn_layer_indices "
       "and refuses a list"},
      {"bad/bamba_mamba_heads.json",
       "mamba_n_heads: 3 does not divide mamba_expand x hidden_size 128 (BambaConfig refuses it)"},
      {"bad/bamba_missing_kv_heads.json",
       "num_key_value_heads: is missing; BambaConfig's default 8 is one checkpoint's count"},
      {"bad/mamba2_heads_width.json",
       "num_heads: 8 x head_dim 8 is not expand x hidden_size 128 (Mamba2Config refuses it)"},
      {"bad/mamba2_groups.json", "n_groups: 3 does not divide num_heads 8"},
      {"bad/mamba_layer_types.json",
       "layer_types: is given, but MambaConfig makes every layer mamba and refuses a list"},
      {"bad/mamba_conv_kernel.json", "conv_kernel: 0 is invalid: it must be at least 1"},
      {"bad/falcon_mamba_null_state.json", "state_size: is null; FalconMambaConfig needs a number"},
      {"bad/zamba_block_type.json",
       "layers_block_type[1]: \"attention\" is not mamba or hybrid (ZambaConfig)"},
      {"bad/zamba_two_layers.json",
       "num_hidden_layers: 2 is below 3: ZambaConfig's block list always starts mamba, mamba, "
       "hybrid (3 blocks)"},
      {"bad/zamba_mamba_heads.json",
       "n_mamba_heads: 3 does not divide mamba_expand x hidden_size 128 (ZambaConfig refuses it)"},
      {"bad/zamba_null_head_dim.json", "head_dim: is null"},
      {"bad/zamba_zero_period.json", "attn_layer_period: 0 is invalid: it must be at least 1"},
      {"bad/mimo_v2_flash_pattern_value.json",
       "hybrid_layer_pattern[7]: 2 is not 0 (full attention) or 1 (sliding window)"},
      {"bad/mimo_v2_flash_no_pattern.json",
       "hybrid_layer_pattern: is missing, and so is hybrid_block_size; MiMoV2FlashConfig (remote "
       "code)'s model indexes the pattern"},
      {"bad/mimo_v2_flash_windows_differ.json",
       "sliding_window_size: 256 is not sliding_window 128 (transformers' mask reads one, vLLM "
       "the other)"},
      {"bad/mimo_v2_flash_no_swa_head_dim.json", "swa_head_dim: is missing"},
      {"bad/mimo_v2_flash_swa_kv_heads.json",
       "swa_num_key_value_heads: 7 does not divide swa_num_attention_heads 64"},
      {"bad/mimo_v2_flash_no_window.json",
       "sliding_window: is missing (and so is sliding_window_size), but MiMoV2FlashConfig "
       "(remote code)'s hybrid_layer_pattern has sliding layers"},
      {"bad/qwen3_5_ssm_dtype.json",
       "mamba_ssm_dtype: \"int8\" is not \"float32\", \"bfloat16\" or \"float16\""},
  };
  for (const auto& c : kCases) ExpectToolRefuses(c.file, c.message);
}

}  // namespace
}  // namespace tools
}  // namespace kvring
