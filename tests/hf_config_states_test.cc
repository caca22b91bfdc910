// Tests of kvring/hf_config.h on recurrent states: Kimi Linear (Kimi Delta Attention beside
// latent attention, its 1-indexed layer lists) and every hybrid family's state split across
// tensor-parallel ranks as vLLM splits it (HfReadOptions::tensor_parallel, kvring-plan
// --tensor-parallel). Every expected figure is worked out here by hand from the file and the
// family's rule (docs/configs.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/plan_cli_run.h"
#include "hf_config_files.h"
#include "kvring/hf_config.h"
#include "kvring/layer_plan.h"
#include "plan_cli.h"

namespace kvring {
namespace tools {
namespace {

Expected<HfModel> ReadRanks(const std::string& name, uint64_t ranks,
                            MlaCache mla = MlaCache::kLatent) {
  HfReadOptions options;
  options.mla = mla;
  options.tensor_parallel = ranks;
  return ReadHfConfig(ConfigPath(name), options);
}

TEST(HfConfigStates, KimiLinearKeepsKdaStatesBesideLatentLayers) {
  // Kimi-Linear-48B-A3B's published file: full_attn_layers 4, 8, ..., 24, 27 (1-indexed) are
  // latent attention of kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements; the 20 others
  // KDA layers of 32 heads x 128: a conv state of (4 - 1) x 3 x 32 x 128 = 36864 BF16
  // elements and a recurrent state of 32 x 128 x 128 = 524288 F32 elements.
  const Expected<HfModel> model = ReadRanks("presets/kimi-linear-48b-a3b.json", 1);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->model_type, "kimi_linear");
  EXPECT_EQ(model->max_context, 1048576u);  // model_max_length
  EXPECT_EQ(model->num_attention_heads, 32u);
  ASSERT_EQ(model->layers.size(), 27u);
  const std::vector<size_t> full = {3, 7, 11, 15, 19, 23, 26};
  for (size_t i = 0; i < 27; ++i) {
    const LayerSpec& spec = model->layers[i];
    const bool is_full = std::find(full.begin(), full.end(), i) != full.end();
    EXPECT_EQ(spec.attends, is_full) << i;
    if (is_full) {
      EXPECT_EQ(spec.latent_dim, 576u) << i;
      EXPECT_FALSE(spec.HasState()) << i;
      continue;
    }
    EXPECT_EQ(spec.state.conv_elements, 36864u) << i;
    EXPECT_EQ(spec.state.conv_format, Format::kBF16);
    EXPECT_EQ(spec.state.recurrent_elements, 524288u) << i;
    EXPECT_EQ(spec.state.recurrent_format, Format::kF32);
  }
  // As transformers-style caches hold it: 32 heads of K 128 + 64 and V 128.
  const Expected<HfModel> expanded =
      ReadRanks("presets/kimi-linear-48b-a3b.json", 1, MlaCache::kExpanded);
  ASSERT_TRUE(expanded.ok()) << expanded.error().message;
  EXPECT_EQ(expanded->layers[3].num_kv_heads, 32u);
  EXPECT_EQ(expanded->layers[3].head_dim, 192u);
  EXPECT_EQ(expanded->layers[3].VHeadDim(), 128u);
  // kvring-plan: 20 KDA layers of 72 KiB + 2 MiB a sequence, one copy without rollback.
  const CliRun run =
      RunCli({"--config", ConfigPath("presets/kimi-linear-48b-a3b.json"), "--context", "131072"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("read as model_type kimi_linear (transformers' KimiLinearConfig"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("recurrent state, per sequence: 41.41 MiB in 20 layers (1 copy"),
            std::string::npos)
      << run.out;
  // Without linear_attn_config every layer is latent attention (64 + 16 elements).
  const Expected<HfModel> latent_only = ReadRanks("kimi_linear_without_kda.json", 1);
  ASSERT_TRUE(latent_only.ok()) << latent_only.error().message;
  ASSERT_EQ(latent_only->layers.size(), 3u);
  for (const LayerSpec& spec : latent_only->layers) EXPECT_EQ(spec.latent_dim, 80u);
  EXPECT_TRUE(HasDefault(*latent_only, "linear_attn_config", "None (no KDA layer)"));
}

TEST(HfConfigStates, KimiLinearFilesWhoseListsDisagreeAreRefused) {
  const struct {
    const char* file;
    const char* message;
  } kCases[] = {
      {"bad/kimi_linear_layer_number_zero.json",
       "linear_attn_config.kda_layers[0]: 0 is no layer number: the lists count layers from 1"},
      {"bad/kimi_linear_layer_past_last.json",
       "linear_attn_config.full_attn_layers[6]: 28 is too large (at most 27)"},
      {"bad/kimi_linear_layer_in_both.json",
       "linear_attn_config.full_attn_layers[0]: 3 is in kda_layers and full_attn_layers (layer "
       "2)"},
      {"bad/kimi_linear_layer_in_neither.json",
       "linear_attn_config.full_attn_layers: names neither layer number 27 (layer 26) nor does "
       "kda_layers"},
      {"bad/kimi_linear_no_full_list.json",
       "linear_attn_config.full_attn_layers: is missing; KimiLinearConfig (remote code) asserts "
       "both layer lists"},
      {"bad/kimi_linear_no_context.json",
       "model_max_length: is missing; KimiLinearConfig (remote code)'s default None gives the "
       "model no context length"},
      {"bad/kimi_linear_no_latent_rank.json",
       "kv_lora_rank: is missing; KimiLinearConfig (remote code)'s default None gives its latent "
       "attention no size"},
      {"bad/kimi_linear_no_kda_heads.json", "linear_attn_config.num_heads: is missing"},
  };
  for (const auto& c : kCases) ExpectToolRefuses(c.file, c.message);
}

// One layer's state per rank: conv and recurrent elements.
struct RankState {
  size_t layer;
  uint64_t conv;
  uint64_t recurrent;
};

void ExpectStates(const std::string& file, uint64_t ranks, const std::vector<RankState>& rows) {
  SCOPED_TRACE(file + " over " + std::to_string(ranks) + " ranks");
  const Expected<HfModel> model = ReadRanks(file, ranks);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->tensor_parallel, ranks);
  for (const RankState& row : rows) {
    ASSERT_LT(row.layer, model->layers.size());
    EXPECT_EQ(model->layers[row.layer].state.conv_elements, row.conv) << row.layer;
    EXPECT_EQ(model->layers[row.layer].state.recurrent_elements, row.recurrent) << row.layer;
  }
}

TEST(HfConfigStates, BambaAttendsOnItsListedLayersAndKeepsMamba2StatesElsewhere) {
  // attn_layer_indices [2, 5]: those attend (2 KV heads of 64 / 4 = 16); the others keep a
  // Mamba2 state of 2 x 64 = 128 channels in 8 heads, 2 groups of 16: a conv state of (4 - 1)
  // x (128 + 2 x 2 x 16) = 576 and an SSM state of 128 x 16 = 2048 BF16 elements.
  const Expected<HfModel> model = ReadRanks("bamba_tiny.json", 1);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->model_type, "bamba");
  EXPECT_EQ(model->max_context, 8192u);
  ASSERT_EQ(model->layers.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const LayerSpec& spec = model->layers[i];
    const bool attends = i == 2 || i == 5;
    EXPECT_EQ(spec.attends, attends) << i;
    EXPECT_EQ(spec.HasState(), !attends) << i;
    if (attends) {
      EXPECT_EQ(spec.num_kv_heads, 2u) << i;
      EXPECT_EQ(spec.head_dim, 16u) << i;
      continue;
    }
    EXPECT_EQ(spec.state.conv_elements, 576u) << i;
    EXPECT_EQ(spec.state.recurrent_elements, 2048u) << i;
    EXPECT_EQ(spec.state.recurrent_format, Format::kBF16);
  }
  // Two ranks: 4 heads of 16 and one of the 2 groups each, conv 3 x (64 + 2 x 16) = 288.
  const Expected<HfModel> half = ReadRanks("bamba_tiny.json", 2);
  ASSERT_TRUE(half.ok()) << half.error().message;
  EXPECT_EQ(half->layers[0].state.conv_elements, 288u);
  EXPECT_EQ(half->layers[0].state.recurrent_elements, 1024u);
}

TEST(HfConfigStates, XlstmBlocksKeepAMatrixMemoryPerHead) {
  // 3 mLSTM blocks of 2 heads: qk_dim 128 x 0.5 = 64 (32 a head), v_dim 128 (64 a head); each
  // head keeps C (32 x 64), n (32) and m (1): 2 x 2081 = 4162 F32 elements.
  const Expected<HfModel> model = ReadRanks("xlstm_tiny.json", 1);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->max_context, 0u);
  ASSERT_EQ(model->layers.size(), 3u);
  for (const LayerSpec& spec : model->layers) {
    EXPECT_FALSE(spec.attends);
    EXPECT_EQ(spec.state.conv_elements, 0u);
    EXPECT_EQ(spec.state.recurrent_elements, 4162u);
    EXPECT_EQ(spec.state.recurrent_format, Format::kF32);
  }
  const Expected<HfModel> half = ReadRanks("xlstm_tiny.json", 2);  // one head a rank
  ASSERT_TRUE(half.ok()) << half.error().message;
  EXPECT_EQ(half->layers[0].state.recurrent_elements, 2081u);
  // inference_state_dtype bfloat16; 4 heads, qk 256 x 0.25 = 64 (16 a head), v 256 (64): 4 x
  // (16 x 64 + 16 + 1) = 4164 BF16 elements; num_blocks 2; the file's context.
  const Expected<HfModel> bf16 = ReadRanks("xlstm_bf16_state.json", 1);
  ASSERT_TRUE(bf16.ok()) << bf16.error().message;
  EXPECT_EQ(bf16->max_context, 8192u);
  ASSERT_EQ(bf16->layers.size(), 2u);
  EXPECT_EQ(bf16->layers[1].state.recurrent_elements, 4164u);
  EXPECT_EQ(bf16->layers[1].state.recurrent_format, Format::kBF16);
}

TEST(HfConfigStates, RwkvBlocksKeepTokenShiftsAndAWkvState) {
  // 3 blocks of hidden_size 96: the time mix's and the channel mix's previous input, 2 x 96
  // BF16 elements (a conv state of one column), and the WKV numerator, denominator and
  // maximum, 3 x 96 F32 elements; context_length 4096 is the context.
  const Expected<HfModel> model = ReadRanks("rwkv_tiny.json", 1);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->model_type, "rwkv");
  EXPECT_EQ(model->max_context, 4096u);
  ASSERT_EQ(model->layers.size(), 3u);
  for (const LayerSpec& spec : model->layers) {
    EXPECT_FALSE(spec.attends);
    EXPECT_EQ(spec.state.conv_elements, 192u);
    EXPECT_EQ(spec.state.conv_format, Format::kBF16);
    EXPECT_EQ(spec.state.recurrent_elements, 288u);
    EXPECT_EQ(spec.state.recurrent_format, Format::kF32);
  }
  // Two ranks: each keeps half the WKV channels, and both whole inputs.
  const Expected<HfModel> half = ReadRanks("rwkv_tiny.json", 2);
  ASSERT_TRUE(half.ok()) << half.error().message;
  EXPECT_EQ(half->layers[0].state.conv_elements, 192u);
  EXPECT_EQ(half->layers[0].state.recurrent_elements, 144u);
  EXPECT_FALSE(ReadRanks("rwkv_tiny.json", 5).ok());  // 96 channels do not split in 5
  // max_position_embeddings, context_length's alias, names the context.
  const Expected<HfModel> alias = ReadRanks("rwkv_context_alias.json", 1);
  ASSERT_TRUE(alias.ok()) << alias.error().message;
  EXPECT_EQ(alias->max_context, 2048u);
  EXPECT_EQ(alias->layers[1].state.recurrent_elements, 192u);
  const Expected<HfModel> width = ReadRanks("bad/rwkv_attention_width.json", 1);
  ASSERT_FALSE(width.ok());
  EXPECT_NE(width.error().message.find("attention_hidden_size: 32 is not hidden_size 64"),
            std::string::npos)
      << width.error().message;
}

TEST(HfConfigStates, RecurrentGemmaKeepsRgLruStatesBesideSlidingAttention) {
  // block_types' default (recurrent, recurrent, attention) over 7 layers: 2 and 5 attend over a
  // window of 32 with 1 KV head of 64 / 4 = 16; the others keep a conv state of (3 - 1) x 96
  // BF16 and an RG-LRU state of 96 F32 elements (lru_width 96). No context named.
  const Expected<HfModel> model = ReadRanks("recurrent_gemma_tiny.json", 1);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->max_context, 0u);
  ASSERT_EQ(model->layers.size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    const LayerSpec& spec = model->layers[i];
    EXPECT_EQ(spec.attends, i % 3 == 2) << i;
    if (spec.attends) {
      EXPECT_EQ(spec.kind, AttentionKind::kSliding) << i;
      EXPECT_EQ(spec.window, 32u) << i;
      EXPECT_EQ(spec.num_kv_heads, 1u) << i;
      EXPECT_EQ(spec.head_dim, 16u) << i;
      continue;
    }
    EXPECT_EQ(spec.state.conv_elements, 192u) << i;
    EXPECT_EQ(spec.state.recurrent_elements, 96u) << i;
    EXPECT_EQ(spec.state.recurrent_format, Format::kF32);
  }
  // Two ranks keep 2 of the 4 RG-LRU blocks of 24: 48 channels.
  const Expected<HfModel> half = ReadRanks("recurrent_gemma_tiny.json", 2);
  ASSERT_TRUE(half.ok()) << half.error().message;
  EXPECT_EQ(half->layers[0].state.recurrent_elements, 48u);
  EXPECT_EQ(half->layers[0].state.conv_elements, 96u);
  // block_types (attention, recurrent) repeated; the file's head_dim 32 replaces the class's
  // hidden_size / num_attention_heads; a context the file states.
  const Expected<HfModel> blocks = ReadRanks("recurrent_gemma_blocks.json", 1);
  ASSERT_TRUE(blocks.ok()) << blocks.error().message;
  EXPECT_EQ(blocks->max_context, 8192u);
  ASSERT_EQ(blocks->layers.size(), 4u);
  EXPECT_TRUE(blocks->layers[0].attends);
  EXPECT_EQ(blocks->layers[0].head_dim, 32u);
  EXPECT_EQ(blocks->layers[0].window, 2048u);
  EXPECT_FALSE(blocks->layers[3].attends);
  EXPECT_EQ(blocks->layers[3].state.conv_elements, 3u * 64);
}

TEST(HfConfigStates, StateSpaceModelsKeepOnlyStatesAndNameNoContext) {
  // Mamba: every layer a Mamba1 state of 2 x 64 = 128 channels, conv (3 - 1) x 128 = 256 and
  // SSM 128 x 8 = 1024 BF16 elements; no attention, no context named.
  const Expected<HfModel> mamba = ReadRanks("mamba_tiny.json", 1);
  ASSERT_TRUE(mamba.ok()) << mamba.error().message;
  EXPECT_EQ(mamba->model_type, "mamba");
  EXPECT_EQ(mamba->max_context, 0u);
  EXPECT_EQ(mamba->num_attention_heads, 0u);
  ASSERT_EQ(mamba->layers.size(), 3u);
  for (const LayerSpec& spec : mamba->layers) {
    EXPECT_FALSE(spec.attends);
    EXPECT_EQ(spec.state.conv_elements, 256u);
    EXPECT_EQ(spec.state.recurrent_elements, 1024u);
    EXPECT_EQ(spec.state.recurrent_format, Format::kBF16);
  }
  EXPECT_TRUE(
      HasDefault(*mamba, "max_position_embeddings", "none (no layer attends; give the context)"));
  // The plan needs a context the model does not name: refused until one is set.
  EXPECT_FALSE(mamba->PlanBuilder().Build().ok());
  const Expected<LayerPlan> plan = mamba->PlanBuilder().SetContext(4096).Build();
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->StateBytes(), 3u * (256 + 1024) * 2);
  EXPECT_EQ(plan->ContextTokenBytes(), 0u);
  const CliRun refused = RunCli({"--config", ConfigPath("mamba_tiny.json")});
  EXPECT_EQ(refused.status, 2);
  EXPECT_NE(refused.err.find("mamba_tiny.json: MambaConfig names no context length (no layer "
                             "attends past a window, so its memory stops growing): give "
                             "--context N"),
            std::string::npos)
      << refused.err;
  const CliRun run = RunCli({"--config", ConfigPath("mamba_tiny.json"), "--context", "4096"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("recurrent state, per sequence: 7.50 KiB in 3 layers"), std::string::npos)
      << run.out;
  // Falcon Mamba: the file's intermediate_size 96 replaces expand 16 x hidden 32 (as in Falcon
  // Mamba 7B's file); class defaults state 16, kernel 4: conv 3 x 96 = 288, SSM 96 x 16 = 1536.
  // The file states a context.
  const Expected<HfModel> falcon = ReadRanks("falcon_mamba_tiny.json", 1);
  ASSERT_TRUE(falcon.ok()) << falcon.error().message;
  EXPECT_EQ(falcon->max_context, 8192u);
  ASSERT_EQ(falcon->layers.size(), 2u);
  EXPECT_EQ(falcon->layers[1].state.conv_elements, 288u);
  EXPECT_EQ(falcon->layers[1].state.recurrent_elements, 1536u);
  // Mamba2: 8 heads of 16 (2 x 64 = 128 channels), 2 groups of 16: conv (4 - 1) x (128 + 2 x 2
  // x 16) = 576, SSM 128 x 16 = 2048; two ranks keep 4 heads and a group each: conv 3 x (64 +
  // 2 x 16) = 288, SSM 64 x 16 = 1024.
  const Expected<HfModel> mamba2 = ReadRanks("mamba2_tiny.json", 1);
  ASSERT_TRUE(mamba2.ok()) << mamba2.error().message;
  ASSERT_EQ(mamba2->layers.size(), 2u);
  EXPECT_EQ(mamba2->layers[0].state.conv_elements, 576u);
  EXPECT_EQ(mamba2->layers[0].state.recurrent_elements, 2048u);
  const Expected<HfModel> half = ReadRanks("mamba2_tiny.json", 2);
  ASSERT_TRUE(half.ok()) << half.error().message;
  EXPECT_EQ(half->layers[1].state.conv_elements, 288u);
  EXPECT_EQ(half->layers[1].state.recurrent_elements, 1024u);
}

TEST(HfConfigStates, ZambaBlocksKeepAMambaStateAndHybridOnesAlsoAttend) {
  // No block list: mamba, mamba, hybrid, then hybrid iff (i - 3) % 3 == 1: blocks 2, 4 and 7
  // attend (2 KV heads of 2 x 64 / 4 = 32). Every block's multi-head Mamba state: 2 x 64 = 128
  // channels in 4 heads, a conv state of (3 - 1) x 128 = 256 and an SSM state of 128 x 8 =
  // 1024 BF16 elements.
  const Expected<HfModel> model = ReadRanks("zamba_tiny.json", 1);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->model_type, "zamba");
  EXPECT_EQ(model->max_context, 2048u);
  ASSERT_EQ(model->layers.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    const LayerSpec& spec = model->layers[i];
    EXPECT_EQ(spec.attends, i == 2 || i == 4 || i == 7) << i;
    EXPECT_EQ(spec.state.conv_elements, 256u) << i;
    EXPECT_EQ(spec.state.conv_format, Format::kBF16);
    EXPECT_EQ(spec.state.recurrent_elements, 1024u) << i;
    EXPECT_EQ(spec.state.recurrent_format, Format::kBF16);
    if (!spec.attends) continue;
    EXPECT_EQ(spec.num_kv_heads, 2u) << i;
    EXPECT_EQ(spec.head_dim, 32u) << i;
  }
  EXPECT_TRUE(
      HasDefault(*model, "attention_head_dim", "2 x hidden_size / num_attention_heads (32)"));
  // Two ranks keep 2 of the 4 Mamba heads each: half of each state.
  const Expected<HfModel> half = ReadRanks("zamba_tiny.json", 2);
  ASSERT_TRUE(half.ok()) << half.error().message;
  EXPECT_EQ(half->layers[0].state.conv_elements, 128u);
  EXPECT_EQ(half->layers[7].state.recurrent_elements, 512u);
  // The file's block list (layer_types, the class's other name for it) replaces the computed
  // one; head_dim wins over attention_head_dim; class defaults: 2 Mamba heads of 64, state 16,
  // kernel 4 (conv 3 x 128 = 384, SSM 128 x 16 = 2048), 4096 positions.
  const Expected<HfModel> listed = ReadRanks("zamba_block_list.json", 1);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->max_context, 4096u);
  ASSERT_EQ(listed->layers.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const LayerSpec& spec = listed->layers[i];
    EXPECT_EQ(spec.attends, i % 2 == 1) << i;
    EXPECT_EQ(spec.state.conv_elements, 384u) << i;
    EXPECT_EQ(spec.state.recurrent_elements, 2048u) << i;
    if (spec.attends) EXPECT_EQ(spec.head_dim, 32u) << i;
  }
}

TEST(HfConfigStates, TensorParallelSplitsEachFamilysStateAsVllmDoes) {
  // Gated DeltaNet (Qwen3-Next tiny: 2 key heads of 32, 4 value heads of 16, kernel 4): a rank
  // of 2 keeps 1 key head and its 2 value heads, conv 3 x (2 x 1 x 32 + 2 x 16) = 288,
  // recurrent 2 x 32 x 16 = 1024.
  ExpectStates("qwen3_next_tiny.json", 1, {{0, 576, 2048}});
  ExpectStates("qwen3_next_tiny.json", 2, {{0, 288, 1024}});
  // Mamba2 (Nemotron-H: 8 heads of 16, 2 groups of state 16, kernel 4): 2 ranks take 4 heads
  // and one group each, conv 3 x (64 + 2 x 1 x 16) = 288, SSM 64 x 16 = 1024.
  ExpectStates("nemotron_h_pattern.json", 2, {{0, 288, 1024}});
  // Granite 4.0-H (width 2 x 128 = 256 in 8 heads, 1 group of 16): the one group on every
  // rank, conv 3 x (128 + 2 x 16) = 480, SSM 128 x 16 = 2048.
  ExpectStates("granitemoehybrid_tiny.json", 1, {{0, 864, 4096}});
  ExpectStates("granitemoehybrid_tiny.json", 2, {{0, 480, 2048}});
  // Falcon-H1 (every layer: width 128 in 8 heads, 2 groups of 16): conv 3 x (64 + 32) = 288.
  ExpectStates("falcon_h1_tiny.json", 2, {{0, 288, 1024}, {2, 288, 1024}});
  // Zamba2 (width 128 in 4 heads, 2 groups of 16): the same split, hybrid blocks too.
  ExpectStates("zamba2_tiny.json", 2, {{0, 288, 1024}, {2, 288, 1024}});
  // Mamba1 (Jamba: 2 x 64 = 128 channels, state 8, kernel 4): conv 3 x 64, SSM 64 x 8.
  ExpectStates("jamba_tiny.json", 1, {{0, 384, 1024}});
  ExpectStates("jamba_tiny.json", 2, {{0, 192, 512}});
  // Lightning attention (MiniMax: 4 heads of 16): 2 heads x 16 x 16 a rank.
  ExpectStates("minimax_tiny.json", 2, {{1, 0, 512}});
  // MiniMax-M1's remote code: the same split of its lightning heads (F32 elements).
  ExpectStates("minimax_m1_tiny.json", 2, {{0, 0, 512}, {2, 0, 512}});
  // Short convolution (LFM2: 128 channels, L_cache 3): 2 x 64 a rank.
  ExpectStates("lfm2_full_attn_idxs.json", 2, {{0, 128, 0}});
  // KDA (Kimi Linear: 32 heads of 128): 8 ranks keep 4 heads, conv 3 x 3 x 4 x 128 = 4608,
  // recurrent 4 x 128 x 128 = 65536.
  ExpectStates("presets/kimi-linear-48b-a3b.json", 8, {{0, 4608, 65536}});
}

TEST(HfConfigStates, TensorParallelRefusesStatesThatDoNotSplit) {
  const struct {
    const char* file;
    const char* ranks;
    const char* message;  // what follows "kvring-plan: <path>: "
  } kCases[] = {
      {"qwen3_next_tiny.json", "4",
       "linear_num_key_heads: 2 does not split across tensor_parallel 4 ranks (vLLM gives each "
       "rank whole key heads, each with its values)"},
      {"nemotron_h_pattern.json", "4",
       "n_groups: 2 does not split across tensor_parallel 4 ranks, and is not 1 (vLLM splits the "
       "groups with the heads, or gives every rank the one group)"},
      {"falcon_h1_tiny.json", "16",
       "mamba_n_heads: 8 does not split across tensor_parallel 16 ranks (vLLM gives each rank "
       "whole Mamba heads, each with its channels)"},
      {"jamba_tiny.json", "3",
       "mamba_expand: mamba_expand x hidden_size 128 does not split across tensor_parallel 3 "
       "ranks (vLLM gives each rank whole channels)"},
      {"presets/kimi-linear-48b-a3b.json", "3",
       "linear_attn_config.num_heads: 32 does not split across tensor_parallel 3 ranks"},
  };
  for (const auto& c : kCases) {
    const std::string path = ConfigPath(c.file);
    const CliRun run = RunCli({"--config", path, "--tensor-parallel", c.ranks});
    EXPECT_EQ(run.status, 2) << c.file;
    EXPECT_EQ(run.out, "") << c.file;
    EXPECT_EQ(run.err.rfind("kvring-plan: " + path + ": " + c.message, 0), 0u) << run.err;
  }
  // The library refuses 0 ranks by name; SplitAcrossRanks refuses a state it was not told is
  // already one rank's (a preset's or an engine's own layers: the split is the family's).
  HfReadOptions none;
  none.tensor_parallel = 0;
  const Expected<HfModel> zero = ReadHfConfig(ConfigPath("qwen3_next_tiny.json"), none);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().field, "tensor_parallel");
  const Expected<HfModel> whole = ReadRanks("qwen3_next_tiny.json", 1);
  ASSERT_TRUE(whole.ok());
  const Expected<std::vector<LayerSpec>> refused = SplitAcrossRanks(whole->layers, 16, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, "tensor_parallel");
  EXPECT_NE(refused.error().message.find("layer 0 has a recurrent state"), std::string::npos);
}

TEST(HfConfigStates, TensorParallelPlansOneRanksStatesAndKv) {
  // Qwen3-Next tiny over 2 ranks: 1 of the 2 KV heads on each full layer, each linear layer's
  // state halved: (288 x 2 + 1024 x 2) bytes x 6 layers = 15.38 KiB a sequence.
  const CliRun run = RunCli({"--config", ConfigPath("qwen3_next_tiny.json"), "--json",
                             "--tensor-parallel", "2", "--context", "4096"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["tensor_parallel"], 2);
  EXPECT_EQ(json["layers"][3]["num_kv_heads"], 1);
  EXPECT_EQ(json["layers"][0]["conv_state_bytes"], 288 * 2);
  EXPECT_EQ(json["layers"][0]["recurrent_state_bytes"], 1024 * 2);
  EXPECT_EQ(json["state_bytes"], 6 * (288 * 2 + 1024 * 2));
  const CliRun text =
      RunCli({"--config", ConfigPath("qwen3_next_tiny.json"), "--tensor-parallel", "2"});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("recurrent states split by heads as vLLM splits them"), std::string::npos)
      << text.out;
  // Nemotron-H's blocks without a mixer hold nothing and split as they are.
  const CliRun nemotron = RunCli(
      {"--config", ConfigPath("nemotron_h_pattern.json"), "--json", "--tensor-parallel", "2"});
  ASSERT_EQ(nemotron.status, 0) << nemotron.err;
  EXPECT_EQ(nlohmann::json::parse(nemotron.out)["layers"][1]["kind"], "none");
}

}  // namespace
}  // namespace tools
}  // namespace kvring
