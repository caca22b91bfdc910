// Tests of kvring/model_presets.h: every preset's layer pattern (published configs) and the
// published memory figures a correct planner reproduces. Expected numbers are worked out
// here by hand from the models' facts.
#include "kvring/model_presets.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace kvring {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

LayerPlan PlanPreset(const std::string& name, uint64_t context, uint64_t batch,
                     ElementType type = ElementType::kBF16) {
  Expected<ModelPreset> preset = FindModelPreset(name);
  EXPECT_TRUE(preset.ok()) << name;
  if (!preset.ok()) return LayerPlan();
  Expected<LayerPlan> plan =
      BuilderFor(*preset).SetContext(context).SetBatch(batch).SetElementType(type).Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.ok() ? plan.value() : LayerPlan();
}

struct Pattern {
  const char* name;
  size_t num_layers, num_sliding, num_chunked, num_global, num_consumers;
  uint64_t span;  // window or chunk of the local layers
  uint32_t num_kv_heads, head_dim, latent_dim;
  uint64_t max_context;
  uint32_t global_kv_heads = 0, global_head_dim = 0;  // global layers of another shape (Gemma 4)
  size_t num_state = 0;  // recurrent layers (no attention; their state is checked elsewhere)
};

// From the models' published configs, counted by hand: e.g. Gemma 3 27B has 62 layers, globals at
// i = 5, 11, ..., 59 (10 of them), so 52 sliding.
constexpr Pattern kPatterns[] = {
    {"gemma-2-2b", 26, 13, 0, 13, 0, 4096, 4, 256, 0, 8192},
    {"gemma-2-9b", 42, 21, 0, 21, 0, 4096, 8, 256, 0, 8192},
    {"gemma-2-27b", 46, 23, 0, 23, 0, 4096, 16, 128, 0, 8192},
    {"gemma-3-270m", 18, 15, 0, 3, 0, 512, 1, 256, 0, 32768},
    {"gemma-3-1b", 26, 22, 0, 4, 0, 512, 1, 256, 0, 32768},
    {"gemma-3-4b", 34, 29, 0, 5, 0, 1024, 4, 256, 0, 131072},
    {"gemma-3-12b", 48, 40, 0, 8, 0, 1024, 8, 256, 0, 131072},
    {"gemma-3-27b", 62, 52, 0, 10, 0, 1024, 16, 128, 0, 131072},
    {"gemma-3n-e2b", 30, 24, 0, 6, 10, 512, 2, 256, 0, 32768},
    {"gemma-3n-e4b", 35, 28, 0, 7, 15, 512, 2, 256, 0, 32768},
    // Gemma 4 E2B: full iff (i + 1) % 5 == 0; E4B and the others (i + 1) % 6 == 0 (and the last).
    {"gemma-4-e2b", 35, 28, 0, 7, 20, 512, 1, 256, 0, 131072, 1, 512},
    {"gemma-4-e4b", 42, 35, 0, 7, 18, 512, 2, 256, 0, 131072, 2, 512},
    {"gemma-4-12b", 48, 40, 0, 8, 0, 1024, 8, 256, 0, 262144, 1, 512},
    {"gemma-4-26b-a4b", 30, 25, 0, 5, 0, 1024, 8, 256, 0, 262144, 2, 512},
    {"gemma-4-31b", 60, 50, 0, 10, 0, 1024, 16, 256, 0, 262144, 4, 512},
    {"mistral-7b-v0.1", 32, 32, 0, 0, 0, 4096, 8, 128, 0, 32768},
    {"llama-3.1-8b", 32, 0, 0, 32, 0, 0, 8, 128, 0, 131072},
    {"llama-3.1-70b", 80, 0, 0, 80, 0, 0, 8, 128, 0, 131072},
    {"llama-4-scout", 48, 0, 36, 12, 0, 8192, 8, 128, 0, 10485760},
    {"gpt-oss-20b", 24, 12, 0, 12, 0, 128, 8, 64, 0, 131072},
    {"gpt-oss-120b", 36, 18, 0, 18, 0, 128, 8, 64, 0, 131072},
    {"command-r7b", 32, 24, 0, 8, 0, 4096, 8, 128, 0, 8192},
    {"qwen3-8b", 36, 0, 0, 36, 0, 0, 8, 128, 0, 40960},
    {"qwen2-vl-2b-instruct", 28, 0, 0, 28, 0, 0, 2, 128, 0, 32768},
    {"deepseek-v3", 61, 0, 0, 61, 0, 0, 0, 0, 576, 163840},
    // Qwen3-Next: full iff (i + 1) % 4 == 0; MiMo-V2-Flash: full at 0 and (i + 1) % 6 == 0;
    // Kimi Linear: latent at layer numbers 4, 8, ..., 24, 27.
    {"qwen3-next-80b-a3b", 48, 0, 0, 12, 0, 0, 2, 256, 0, 262144, 0, 0, 36},
    {"mimo-v2-flash", 48, 39, 0, 9, 0, 128, 8, 192, 0, 262144, 4, 192},
    {"kimi-linear-48b-a3b", 27, 0, 0, 7, 0, 0, 0, 0, 576, 1048576, 0, 0, 20},
    // EXAONE 4.0: global iff (i + 1) % 4 == 0; Nemotron-H: full at the pattern's 4 '*' (24
    // Mamba2 layers, 24 MLP blocks without state); Jamba: full iff i % 8 == 4.
    {"exaone-4.0-32b", 64, 48, 0, 16, 0, 4096, 8, 128, 0, 131072},
    {"olmo-3-7b", 32, 24, 0, 8, 0, 4096, 32, 128, 0, 65536},
    {"trinity-nano-preview", 56, 42, 0, 14, 0, 2048, 2, 128, 0, 131072},
    {"smollm3-3b", 36, 0, 0, 36, 0, 0, 4, 128, 0, 65536},
    {"ministral-3-3b", 26, 0, 0, 26, 0, 0, 8, 128, 0, 262144},
    {"nemotron-h-8b", 52, 0, 0, 4, 0, 0, 8, 128, 0, 8192, 0, 0, 24},
    {"jamba-1.5-mini", 32, 0, 0, 4, 0, 0, 8, 128, 0, 262144, 0, 0, 28},
    {"lfm2-1.2b", 16, 0, 0, 6, 0, 0, 8, 64, 0, 128000, 0, 0, 10},
    {"falcon-h1-7b", 44, 0, 0, 44, 0, 0, 2, 128, 0, 262144},
    {"granite-4.0-h-1b", 40, 0, 0, 4, 0, 0, 4, 128, 0, 131072, 0, 0, 36},
    {"qwen3.6-35b-a3b", 40, 0, 0, 10, 0, 0, 2, 256, 0, 262144, 0, 0, 30},
    {"glm-4.6", 92, 0, 0, 92, 0, 0, 8, 128, 0, 202752},
    {"glm-4.7-flash", 47, 0, 0, 47, 0, 0, 0, 0, 576, 202752},
    {"deepseek-v3.2-exp", 61, 0, 0, 61, 0, 0, 0, 0, 576, 163840},
    {"kimi-k2-instruct", 61, 0, 0, 61, 0, 0, 0, 0, 576, 131072},
    {"longcat-flash-chat", 56, 0, 0, 56, 0, 0, 0, 0, 576, 131072},
    {"glm-5.3", 78, 0, 0, 78, 0, 0, 0, 0, 576, 1048576},
    // Zamba2: every block keeps a Mamba2 state; the 9 hybrid ones also attend (MHA, head 160).
    {"zamba2-2.7b-instruct-v2", 54, 0, 0, 9, 0, 0, 32, 160, 0, 4096, 0, 0, 45},
    {"minimax-m1", 80, 0, 0, 10, 0, 0, 8, 128, 0, 10240000, 0, 0, 70},
    // Bamba: attention at 9, 18 and 27; Zamba: hybrid blocks 2 and 7, 13, ..., 73 (MHA, 464).
    {"bamba-9b", 32, 0, 0, 3, 0, 0, 8, 128, 0, 262144, 0, 0, 29},
    {"zamba-7b-v1", 76, 0, 0, 13, 0, 0, 16, 464, 0, 4096, 0, 0, 63},
};

TEST(ModelPresets, EveryPresetHasTheLayerPatternOfItsModel) {
  EXPECT_EQ(ModelPresets().size(), sizeof(kPatterns) / sizeof(kPatterns[0]));
  for (const Pattern& p : kPatterns) {
    Expected<ModelPreset> preset = FindModelPreset(p.name);
    ASSERT_TRUE(preset.ok()) << p.name;
    EXPECT_EQ(preset->max_context, p.max_context) << p.name;
    ASSERT_EQ(preset->layers.size(), p.num_layers) << p.name;
    size_t sliding = 0, chunked = 0, global = 0, consumers = 0, state = 0;
    for (const LayerSpec& spec : preset->layers) {
      if (!spec.attends) {
        state += spec.HasState();
        continue;
      }
      sliding += spec.kind == AttentionKind::kSliding;
      chunked += spec.kind == AttentionKind::kChunked;
      global += spec.kind == AttentionKind::kGlobal;
      consumers += !spec.OwnsKV();
      if (spec.kind != AttentionKind::kGlobal) EXPECT_EQ(spec.Span(), p.span) << p.name;
      const bool other = spec.kind == AttentionKind::kGlobal && p.global_head_dim != 0;
      EXPECT_EQ(spec.num_kv_heads, other ? p.global_kv_heads : p.num_kv_heads) << p.name;
      EXPECT_EQ(spec.head_dim, other ? p.global_head_dim : p.head_dim) << p.name;
      EXPECT_EQ(spec.latent_dim, p.latent_dim) << p.name;
    }
    EXPECT_EQ(sliding, p.num_sliding) << p.name;
    EXPECT_EQ(chunked, p.num_chunked) << p.name;
    EXPECT_EQ(global, p.num_global) << p.name;
    EXPECT_EQ(consumers, p.num_consumers) << p.name;
    EXPECT_EQ(state, p.num_state) << p.name;
  }
}

TEST(ModelPresets, Gemma3PlacesAGlobalLayerEverySixth) {
  const LayerPlan plan = PlanPreset("gemma-3-27b", 131072, 512);
  for (size_t i = 0; i < plan.NumLayers(); ++i) {
    const bool global = (i + 1) % 6 == 0;
    EXPECT_EQ(plan.Layer(i).spec.kind, global ? AttentionKind::kGlobal : AttentionKind::kSliding)
        << i;
    EXPECT_EQ(plan.Layer(i).capacity, global ? 131072u : 1535u) << i;
  }
}

TEST(ModelPresets, Gemma3_27BAtFullContextHas52RingsOf1535) {
  const LayerPlan plan = PlanPreset("gemma-3-27b", 131072, 512);
  // Flash slots: 1535 is 48 tiles of 32, 131072 is 4096: both even, so one tile more each.
  size_t rings = 0, globals = 0;
  for (const LayerInfo& layer : plan.Layers()) {
    rings += layer.capacity == 1535 && layer.num_slots == 1568;
    globals += layer.capacity == 131072 && layer.num_slots == 131104;
  }
  EXPECT_EQ(rings, 52u);
  EXPECT_EQ(globals, 10u);
  const uint64_t slot_bytes = 16 * 128 * 2 * 2;  // 8 KiB
  EXPECT_EQ(plan.TotalBytes(), (52 * 1568 + 10 * 131104) * slot_bytes);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), (52 * 1535 + 10 * 131072) * slot_bytes);
  EXPECT_EQ(plan.FlatBytes(), 62 * kGiB + 62 * 32 * slot_bytes);  // 62 GiB apart from padding
  EXPECT_EQ(plan.ContextTokenBytes(), 10 * slot_bytes);
}

TEST(ModelPresets, Gemma3_27BWithWindowOnlyRingsIs10Point41GiB) {
  // The published figure keeps 1024 positions per sliding layer: a batch of 1.
  const LayerPlan plan = PlanPreset("gemma-3-27b", 131072, 1);
  const uint64_t positions = 10 * 131072 + 52 * 1024;
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), positions * 8 * kKiB);
  EXPECT_NEAR(static_cast<double>(plan.TotalBytes() - plan.PaddingBytes()) / kGiB, 10.41, 0.005);
}

TEST(ModelPresets, Gemma3nE4BOwnsKVInTwentyLayers) {
  const LayerPlan plan = PlanPreset("gemma-3n-e4b", 32768, 512);
  EXPECT_EQ(plan.NumOwningLayers(), 20u);
  for (size_t i = 20; i < 35; ++i) {
    const LayerInfo& layer = plan.Layer(i);
    EXPECT_FALSE(layer.OwnsKV()) << i;
    EXPECT_EQ(layer.bytes, 0u) << i;
    EXPECT_EQ(layer.owner, layer.spec.kind == AttentionKind::kGlobal ? 19u : 18u) << i;
  }
  // Owners: 16 sliding (511 + 512 = 1023, padded to 33 tiles: 1056 slots) and 4 global
  // (32768, padded to 1025 tiles: 32800), 2 KiB a slot.
  EXPECT_EQ(plan.TotalBytes(), (16 * 1056 + 4 * 32800) * 2 * kKiB);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), (16 * 1023 + 4 * 32768) * 2 * kKiB);
}

TEST(ModelPresets, Gemma3nE2BConsumersReadLayers18And19) {
  const LayerPlan plan = PlanPreset("gemma-3n-e2b", 32768, 512);
  EXPECT_EQ(plan.NumOwningLayers(), 20u);
  for (size_t i = 20; i < 30; ++i) {
    EXPECT_EQ(plan.Layer(i).owner, (i + 1) % 5 == 0 ? 19u : 18u) << i;
  }
}

TEST(ModelPresets, Llama31MatchesHuggingFaceFigures) {
  // 32 layers * 8 heads * 128 dims * 2 (K, V) * 2 bytes = 128 KiB per token, apart from
  // padding (the published figures count positions).
  const auto unpadded = [](const LayerPlan& plan) {
    return plan.TotalBytes() - plan.PaddingBytes();
  };
  EXPECT_EQ(unpadded(PlanPreset("llama-3.1-8b", 128000, 512)), 15625 * kGiB / 1000);
  EXPECT_EQ(unpadded(PlanPreset("llama-3.1-8b", 16000, 512)), 1953125 * kGiB / 1000000);
  EXPECT_EQ(unpadded(PlanPreset("llama-3.1-70b", 128000, 512)), 390625 * kGiB / 10000);
}

TEST(ModelPresets, DeepSeekV3MatchesLlamaCppMlaFigure) {
  const LayerPlan plan = PlanPreset("deepseek-v3", 32768, 512, ElementType::kF16);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), 2196 * kMiB);
}

TEST(ModelPresets, DeepSeekV32ExpCountsItsIndexerKeys) {
  // 61 layers of a 576-element latent and a 128-element indexer key, BF16: 1408 bytes a
  // position and layer, apart from padding.
  const LayerPlan plan = PlanPreset("deepseek-v3.2-exp", 32768, 512);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), 61 * uint64_t{32768} * (576 + 128) * 2);
  EXPECT_EQ(plan.ContextTokenBytes(), 61u * 1408);
}

TEST(ModelPresets, Glm53CountsTheIndexerKeysOfItsFullIndexerLayersOnly) {
  // 78 layers of a 576-element latent; 21 of them (0, 1, 2, 6, 10, ..., 74) also keep a
  // 128-element indexer key. BF16: 78 x 1152 + 21 x 256 bytes a position, apart from padding.
  const LayerPlan plan = PlanPreset("glm-5.3", 32768, 512);
  EXPECT_EQ(plan.ContextTokenBytes(), 78u * 1152 + 21u * 256);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), uint64_t{32768} * (78 * 576 + 21 * 128) * 2);
  for (const size_t i : {0, 1, 2, 6, 10, 74}) EXPECT_EQ(plan.Layer(i).spec.indexer_dim, 128u) << i;
  for (const size_t i : {3, 4, 5, 7, 75, 77}) EXPECT_EQ(plan.Layer(i).spec.indexer_dim, 0u) << i;
}

TEST(ModelPresets, Gemma4_12BGrowsByItsEightGlobalLayersOnly) {
  // 40 sliding layers over 1024 positions (8 KV heads of 256) and 8 full ones (5, 11, ..., 47)
  // of one KV head of 512 (attention_k_eq_v: K and V both cached): 2 KiB a position each.
  const LayerPlan plan = PlanPreset("gemma-4-12b", 262144, 512);
  EXPECT_EQ(plan.ContextTokenBytes(), 8 * 2 * kKiB);
  EXPECT_EQ(plan.Layer(5).capacity, 262144u);
  EXPECT_EQ(plan.Layer(4).capacity, 1023u + 512);
  EXPECT_EQ(plan.Layer(47).spec.head_dim, 512u);
  EXPECT_EQ(plan.Layer(46).spec.num_kv_heads, 8u);
}

TEST(ModelPresets, Ministral3_3BKeeps104KiBAPositionAt262144Positions) {
  // No sliding window: 26 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes = 104 KiB a
  // position, 26 GiB at the model's 262144 positions, apart from padding.
  const LayerPlan plan = PlanPreset("ministral-3-3b", 262144, 512);
  EXPECT_EQ(plan.ContextTokenBytes(), 104 * kKiB);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), 26 * kGiB);
  EXPECT_EQ(plan.TotalBytes(), plan.FlatBytes());
}

TEST(ModelPresets, Gemma3_270MAt8192Is39MiB) {
  // 15 sliding layers of 1023 positions (511 + 512) and 3 global of 8192, 1 KiB a position:
  // llama.cpp keeps 1024 cells per sliding layer, 39 MiB in all; kvring one position fewer,
  // plus the flash padding (33 tiles: 1056 slots; 8192 is 256 tiles: 257, 8224 slots).
  const LayerPlan plan = PlanPreset("gemma-3-270m", 8192, 512);
  EXPECT_EQ(plan.Layer(0).capacity, 1023u);
  EXPECT_EQ(plan.Layer(0).num_slots, 1056u);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), 39 * kMiB - 15 * kKiB);
  EXPECT_EQ(plan.TotalBytes(), (15 * 1056 + 3 * 8224) * kKiB);
}

TEST(ModelPresets, HybridPresetsStatesAreTheirFamiliesFormulas) {
  // Nemotron-H-8B: 24 Mamba2 layers, each a conv state of (conv_kernel 4 - 1) x (128 heads x 64
  // + 2 x n_groups 8 x state 128) BF16 elements and a recurrent state of 128 x 64 x 128 F32
  // elements: 61,440 + 4,194,304 bytes; 4 full layers of 8 x 128, 4 KiB a position each.
  const LayerPlan nemotron = PlanPreset("nemotron-h-8b", 8192, 512);
  EXPECT_EQ(nemotron.StateBytes(), 24 * (3 * 10240 * 2 + 4 * kMiB));
  EXPECT_EQ(nemotron.ContextTokenBytes(), 4 * 4 * kKiB);
  EXPECT_EQ(nemotron.TotalBytes() - nemotron.PaddingBytes(), 4 * 8192 * 4 * kKiB);
  // Jamba 1.5 Mini: 28 Mamba layers of 3 x 8192 and 8192 x 16 BF16 elements (48 + 256 KiB).
  const LayerPlan jamba = PlanPreset("jamba-1.5-mini", 4096, 512);
  EXPECT_EQ(jamba.StateBytes(), 28 * 304 * kKiB);
  EXPECT_EQ(jamba.TotalBytes() - jamba.PaddingBytes(), 4 * 4096 * 4 * kKiB);
  // LFM2-1.2B: 10 conv layers of (3 - 1) x 2048 BF16 elements, no recurrent state; 6 full
  // layers of 8 x 64, 2 KiB a position each.
  const LayerPlan lfm2 = PlanPreset("lfm2-1.2b", 4096, 512);
  EXPECT_EQ(lfm2.StateBytes(), 10 * 8 * kKiB);
  EXPECT_EQ(lfm2.TotalBytes() - lfm2.PaddingBytes(), 6 * 4096 * 2 * kKiB);
  // Falcon-H1-7B: every one of 44 layers keeps K/V (2 x 128, 1 KiB a position) and a Mamba2
  // state of 3 x (3072 + 2 x 256) and 3072 x 256 BF16 elements (21 KiB + 1.5 MiB).
  const LayerPlan falcon = PlanPreset("falcon-h1-7b", 4096, 512);
  EXPECT_EQ(falcon.StateBytes(), 44 * (21 * kKiB + 3 * kMiB / 2));
  EXPECT_EQ(falcon.TotalBytes() - falcon.PaddingBytes(), 44 * 4096 * kKiB);
  // Granite-4.0-H-1B: 36 Mamba2 layers of 3 x (2 x 1536 + 2 x 128) and 48 x 64 x 128 BF16
  // elements (19.5 KiB + 768 KiB); 4 full layers of 4 x 128, 2 KiB a position each.
  const LayerPlan granite = PlanPreset("granite-4.0-h-1b", 4096, 512);
  EXPECT_EQ(granite.StateBytes(), 36 * (3 * 3328 * 2 + 768 * kKiB));
  EXPECT_EQ(granite.TotalBytes() - granite.PaddingBytes(), 4 * 4096 * 2 * kKiB);
  // Qwen3.6-35B-A3B: 30 Gated DeltaNet layers of 3 x 8192 BF16 and 32 x 128 x 128 F32 elements
  // (48 KiB + 2 MiB); 10 full layers of 2 x 256, 2 KiB a position each.
  const LayerPlan qwen = PlanPreset("qwen3.6-35b-a3b", 4096, 512);
  EXPECT_EQ(qwen.StateBytes(), 30 * (48 * kKiB + 2 * kMiB));
  EXPECT_EQ(qwen.TotalBytes() - qwen.PaddingBytes(), 10 * 4096 * 2 * kKiB);
  // Zamba2-2.7B-Instruct-v2: 54 Mamba2 blocks of 3 x (5120 + 2 x 64) and 80 x 64 x 64 BF16
  // elements (30.75 KiB + 640 KiB); the 9 hybrid ones also K/V of 32 x 160, 20 KiB a position.
  const LayerPlan zamba2 = PlanPreset("zamba2-2.7b-instruct-v2", 4096, 512);
  EXPECT_EQ(zamba2.StateBytes(), 54 * (3 * 5248 * 2 + 640 * kKiB));
  EXPECT_EQ(zamba2.ContextTokenBytes(), 9 * 20 * kKiB);
  EXPECT_EQ(zamba2.TotalBytes() - zamba2.PaddingBytes(), 9 * 4096 * 20 * kKiB);
  // Bamba-9B: 29 Mamba2 layers of 3 x (8192 + 2 x 128) and 8192 x 128 BF16 elements (49.5 KiB
  // + 2 MiB); 3 full layers of 8 x 128, 4 KiB a position each.
  const LayerPlan bamba = PlanPreset("bamba-9b", 4096, 512);
  EXPECT_EQ(bamba.StateBytes(), 29 * (3 * 8448 * 2 + 2 * kMiB));
  EXPECT_EQ(bamba.ContextTokenBytes(), 3 * 4 * kKiB);
  // Zamba-7B-v1: 76 blocks of 3 x 7424 and 7424 x 16 BF16 elements (43.5 KiB + 232 KiB); the 13
  // hybrid ones also K/V of 16 x 464, 29 KiB a position.
  const LayerPlan zamba = PlanPreset("zamba-7b-v1", 4096, 512);
  EXPECT_EQ(zamba.StateBytes(), 76 * (3 * 7424 * 2 + 232 * kKiB));
  EXPECT_EQ(zamba.ContextTokenBytes(), 13 * 29 * kKiB);
  EXPECT_EQ(zamba.TotalBytes() - zamba.PaddingBytes(), 13 * 4096 * 29 * kKiB);
}

TEST(ModelPresets, EveryPresetPlansAtSmallAndFullContext) {
  for (const ModelPreset& preset : ModelPresets()) {
    for (uint64_t context : {uint64_t{1}, uint64_t{777}, preset.max_context}) {
      Expected<LayerPlan> plan = BuilderFor(preset).SetContext(context).Build();
      ASSERT_TRUE(plan.ok()) << preset.name << ": " << plan.error().message;
      EXPECT_LE(plan->TotalBytes(), plan->FlatBytes()) << preset.name;
      uint64_t sum = 0;
      for (const LayerInfo& layer : plan->Layers()) {
        sum += layer.bytes;
        if (layer.OwnsKV()) {
          EXPECT_LE(layer.capacity, context) << preset.name;
          EXPECT_EQ(layer.num_slots % 32, 0u) << preset.name;
          EXPECT_EQ(layer.num_slots / 32 % 2, 1u) << preset.name;  // an odd number of tiles
          EXPECT_LT(layer.num_slots - layer.capacity, 64u) << preset.name;
        }
      }
      EXPECT_EQ(sum, plan->TotalBytes()) << preset.name;
    }
  }
}

TEST(ModelPresets, UnknownPresetIsAnErrorListingTheKnownOnes) {
  Expected<ModelPreset> preset = FindModelPreset("gemma-4");
  ASSERT_FALSE(preset.ok());
  EXPECT_EQ(preset.error().field, "preset");
  EXPECT_NE(preset.error().message.find("'gemma-4'"), std::string::npos);
  EXPECT_NE(preset.error().message.find("deepseek-v3"), std::string::npos);
}

}  // namespace
}  // namespace kvring
