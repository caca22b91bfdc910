// Tests of kvring/hf_config.h and kvring-plan's --config, --sweep and --tensor-parallel. The
// config files live in tests/configs/ (family files, one per preset in presets/, bad files in
// bad/). Every expected kind, window, owner and capacity is worked out here by hand from the
// file and the family's transformers rules (docs/configs.md), never copied from output.
#include "kvring/hf_config.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/plan_cli_run.h"
#include "hf_config_files.h"
#include "kvring/layer_plan.h"
#include "kvring/model_presets.h"
#include "plan_cli.h"

namespace kvring {
namespace tools {
namespace {

constexpr uint64_t kKiB = 1024, kGiB = kKiB * kKiB * kKiB;

// --- One file per family, layer by layer ---------------------------------------------------

TEST(HfConfig, Gemma2AlternatesFromItsFirstLayerAndDefaultsHeadDimTo256) {
  const HfModel model = Read("gemma2_tiny.json");
  EXPECT_EQ(model.model_type, "gemma2");
  EXPECT_EQ(model.max_context, 64u);
  EXPECT_TRUE(HasDefault(model, "head_dim", "256"));  // not hidden_size / heads = 16
  // Even layers slide over 16 keys: 16 - 1 + batch 4 = 19 slots; odd layers keep all 64.
  ExpectRows(
      Plan(model.layers, 64, 4),
      {{'S', 16, 0, 19}, {'G', 0, 1, 64}, {'S', 16, 2, 19}, {'G', 0, 3, 64}, {'S', 16, 4, 19}}, 2,
      256);
}

TEST(HfConfig, Gemma3TextMakesEveryPatternthLayerFull) {
  const HfModel model = Read("gemma3_text_pattern.json");
  // sliding_window_pattern 3: (i + 1) % 3 == 0 at i = 2 and 5.
  EXPECT_EQ(model.max_context, 131072u);  // Gemma3TextConfig's default
  EXPECT_TRUE(HasDefault(model, "max_position_embeddings", "131072"));
  ExpectRows(Plan(model.layers, 1024, 4),
             {{'S', 8, 0, 11},
              {'S', 8, 1, 11},
              {'G', 0, 2, 1024},
              {'S', 8, 3, 11},
              {'S', 8, 4, 11},
              {'G', 0, 5, 1024},
              {'S', 8, 6, 11}},
             1, 32);
}

TEST(HfConfig, MultimodalGemma3ReadsOnlyItsTextConfig) {
  const HfModel model = Read("gemma3_nested_layer_types.json");
  EXPECT_EQ(model.model_type, "gemma3_text");
  // The wrapper's own num_hidden_layers 99 and max_position_embeddings 999 are not read.
  EXPECT_EQ(model.max_context, 256u);
  EXPECT_TRUE(model.defaults.empty());
  // layer_types S F S F (which _sliding_window_pattern 2 agrees with); window 32:
  // 31 + 4 = 35 slots.
  ExpectRows(Plan(model.layers, 256, 4),
             {{'S', 32, 0, 35}, {'G', 0, 1, 256}, {'S', 32, 2, 35}, {'G', 0, 3, 256}}, 2, 16);
}

TEST(HfConfig, Gemma3nSharedLayersReadTheLastOwnerOfTheirKind) {
  const HfModel model = Read("gemma3n_tiny.json");
  EXPECT_EQ(model.model_type, "gemma3n_text");
  // Full iff (i + 1) % 5 == 0: layers 4 and 9. num_kv_shared_layers 4: layers 6-9 are
  // consumers; 6, 7, 8 slide and read layer 5 (the last sliding layer before 6); 9 is full and
  // reads layer 4. Window 64: 63 + 4 = 67 slots.
  ExpectRows(Plan(model.layers, 1024, 4),
             {{'S', 64, 0, 67},
              {'S', 64, 1, 67},
              {'S', 64, 2, 67},
              {'S', 64, 3, 67},
              {'G', 0, 4, 1024},
              {'S', 64, 5, 67},
              {'S', 64, 5, 0},
              {'S', 64, 5, 0},
              {'S', 64, 5, 0},
              {'G', 0, 4, 0}},
             2, 64);
}

TEST(HfConfig, MistralSlidesEverywhereUnlessTheWindowIsNull) {
  const HfModel global = Read("mistral_no_window.json");
  // sliding_window null: full attention; head_dim = 512 / 8.
  ExpectRows(Plan(global.layers, 32768, 512),
             {{'G', 0, 0, 32768}, {'G', 0, 1, 32768}, {'G', 0, 2, 32768}}, 2, 64);

  const HfModel sliding = Read("mistral_default_window.json");
  // sliding_window absent: MistralConfig's 4096.
  EXPECT_TRUE(HasDefault(sliding, "sliding_window", "4096"));
  ExpectRows(Plan(sliding.layers, 8192, 512), {{'S', 4096, 0, 4607}, {'S', 4096, 1, 4607}}, 8, 32);
}

TEST(HfConfig, Qwen2SlidesFromMaxWindowLayersOnlyWhenUseSlidingWindowIsTrue) {
  const HfModel sliding = Read("qwen2_sliding.json");
  // i >= max_window_layers 2 slide; KV heads null means MHA (4); head_dim = 256 / 4.
  ExpectRows(Plan(sliding.layers, 4096, 4),
             {{'G', 0, 0, 4096}, {'G', 0, 1, 4096}, {'S', 32, 2, 35}, {'S', 32, 3, 35}}, 4, 64);

  const HfModel ignored = Read("qwen2_window_ignored.json");
  // Qwen 2.5 style: use_sliding_window false drops sliding_window 131072.
  EXPECT_EQ(ignored.max_context, 32768u);
  ExpectRows(Plan(ignored.layers, 32768, 512),
             {{'G', 0, 0, 32768}, {'G', 0, 1, 32768}, {'G', 0, 2, 32768}, {'G', 0, 3, 32768}}, 2,
             64);
}

TEST(HfConfig, Qwen3HeadDimDefaultsTo128NotHiddenOverHeads) {
  const HfModel model = Read("qwen3_defaults.json");
  // 1024 / 16 would be 64; Qwen3Config's default is 128. max_position_embeddings: 32768.
  EXPECT_TRUE(HasDefault(model, "head_dim", "128"));
  EXPECT_EQ(model.max_context, 32768u);
  ExpectRows(Plan(model.layers, 32768, 512),
             {{'G', 0, 0, 32768}, {'G', 0, 1, 32768}, {'G', 0, 2, 32768}}, 8, 128);
}

TEST(HfConfig, LlamaWithoutKvHeadsIsMultiHead) {
  const HfModel model = Read("llama_mha.json");
  EXPECT_EQ(model.max_context, 2048u);  // LlamaConfig's default
  EXPECT_EQ(model.num_attention_heads, 12u);
  ExpectRows(Plan(model.layers, 2048, 512), {{'G', 0, 0, 2048}, {'G', 0, 1, 2048}}, 12, 64);
}

TEST(HfConfig, Llama4ChunksTheRopeLayers) {
  const HfModel model = Read("llama4_interval.json");
  // no_rope_layers [] counts as absent: NoPE (full) iff (i + 1) % 2 == 0, the others chunked
  // by 16 (15 + 4 = 19 slots). head_dim absent: Llama4TextConfig's 128, not 256 / 4.
  ExpectRows(Plan(model.layers, 128, 4),
             {{'C', 16, 0, 19}, {'G', 0, 1, 128}, {'C', 16, 2, 19}, {'G', 0, 3, 128}}, 2, 128);

  const HfModel nested = Read("llama4_nested_layer_types.json");
  // Explicit layer_types; attention_chunk_size absent: 8192, so at context 128 the chunked
  // layers keep everything.
  EXPECT_TRUE(HasDefault(nested, "text_config.attention_chunk_size", "8192"));
  ExpectRows(Plan(nested.layers, 128, 4),
             {{'G', 0, 0, 128}, {'C', 8192, 1, 128}, {'C', 8192, 2, 128}}, 4, 64);
}

TEST(HfConfig, GptOssAlternatesAndDefaultsHeadDimTo64) {
  const HfModel model = Read("gpt_oss_tiny.json");
  // 2880 / 8 would be 360; GptOssConfig's head_dim is 64.
  ExpectRows(Plan(model.layers, 256, 4),
             {{'S', 8, 0, 11}, {'G', 0, 1, 256}, {'S', 8, 2, 11}, {'G', 0, 3, 256}}, 2, 64);
}

TEST(HfConfig, Cohere2DefaultsToPattern4AndMultiHead) {
  const HfModel model = Read("cohere2_tiny.json");
  // sliding_window_pattern absent: 4, so layers 3 and 7 are full; 8 KV heads of 512 / 8.
  EXPECT_TRUE(HasDefault(model, "sliding_window_pattern", "4"));
  ExpectRows(Plan(model.layers, 512, 4),
             {{'S', 16, 0, 19},
              {'S', 16, 1, 19},
              {'S', 16, 2, 19},
              {'G', 0, 3, 512},
              {'S', 16, 4, 19},
              {'S', 16, 5, 19},
              {'S', 16, 6, 19},
              {'G', 0, 7, 512}},
             8, 64);
}

TEST(HfConfig, DeepSeekCachesTheLatentAndTheRopeKey) {
  const HfModel model = Read("deepseek_v3_tiny.json");
  const LayerPlan plan = Plan(model.layers, 2048, 4);
  ASSERT_EQ(plan.NumLayers(), 3u);
  for (const LayerInfo& layer : plan.Layers()) {
    EXPECT_EQ(layer.spec.latent_dim, 32u + 16u);  // kv_lora_rank + qk_rope_head_dim
    EXPECT_EQ(layer.capacity, 2048u);
    EXPECT_EQ(layer.slot_bytes, 48u * 2);
  }
}

// --- The acceptance: each preset's config file plans exactly as the preset ---------------

TEST(HfConfig, EveryPresetsConfigFilePlansLikeThePreset) {
  size_t compared = 0;
  for (const ModelPreset& preset : ModelPresets()) {
    SCOPED_TRACE(preset.name);
    const HfModel model = Read("presets/" + preset.name + ".json");
    EXPECT_EQ(model.max_context, preset.max_context);
    ASSERT_EQ(model.layers.size(), preset.layers.size());
    const LayerPlan from_file = Plan(model.layers, preset.max_context, 512);
    const LayerPlan from_preset = Plan(preset.layers, preset.max_context, 512);
    for (size_t i = 0; i < from_file.NumLayers(); ++i) {
      const LayerInfo& a = from_file.Layer(i);
      const LayerInfo& b = from_preset.Layer(i);
      EXPECT_EQ(a.spec.kind, b.spec.kind) << "layer " << i;
      EXPECT_EQ(a.spec.window, b.spec.window) << "layer " << i;
      EXPECT_EQ(a.spec.chunk, b.spec.chunk) << "layer " << i;
      EXPECT_EQ(a.owner, b.owner) << "layer " << i;
      EXPECT_EQ(a.spec.num_kv_heads, b.spec.num_kv_heads) << "layer " << i;
      EXPECT_EQ(a.spec.head_dim, b.spec.head_dim) << "layer " << i;
      EXPECT_EQ(a.spec.latent_dim, b.spec.latent_dim) << "layer " << i;
      EXPECT_EQ(a.spec.VHeadDim(), b.spec.VHeadDim()) << "layer " << i;
      EXPECT_EQ(a.spec.attends, b.spec.attends) << "layer " << i;
      EXPECT_EQ(a.spec.state.conv_elements, b.spec.state.conv_elements) << "layer " << i;
      EXPECT_EQ(a.spec.state.conv_format, b.spec.state.conv_format) << "layer " << i;
      EXPECT_EQ(a.spec.state.recurrent_elements, b.spec.state.recurrent_elements) << "layer " << i;
      EXPECT_EQ(a.spec.state.recurrent_format, b.spec.state.recurrent_format) << "layer " << i;
      EXPECT_EQ(a.capacity, b.capacity) << "layer " << i;
      EXPECT_EQ(a.bytes, b.bytes) << "layer " << i;
    }
    EXPECT_EQ(from_file.TotalBytes(), from_preset.TotalBytes());
    EXPECT_EQ(from_file.FlatBytes(), from_preset.FlatBytes());
    EXPECT_EQ(from_file.StateBytes(), from_preset.StateBytes());
    ++compared;
  }
  EXPECT_EQ(compared, 49u);
}

TEST(HfConfig, PublishedGemma3_27BConfigGivesTheDesignsWorkedCheck) {
  // The published multimodal file leaves out max_position_embeddings and the pattern.
  const HfModel model = Read("presets/gemma-3-27b.json");
  EXPECT_TRUE(HasDefault(model, "text_config.max_position_embeddings", "131072"));
  EXPECT_TRUE(HasDefault(model, "text_config.sliding_window_pattern", "6"));
  // docs/design.md, worked check: 52 sliding layers of 1535 slots, 10 of 131072, 8 KiB a slot; the
  // flash layout pads them to odd numbers of 32-slot tiles: 1568 and 131104.
  const LayerPlan plan = Plan(model.layers, 131072, 512);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), (52 * 1535 + 10 * 131072) * 8 * kKiB);
  EXPECT_EQ(plan.TotalBytes(), (52 * 1568 + 10 * 131104) * 8 * kKiB);
}

// --- Bad files: one line naming the file and the key, exit status 2 ------------------------

TEST(HfConfig, BadFilesExitTwoWithOneLineNamingFileAndKey) {
  const struct {
    const char* file;
    const char* message;  // what follows "kvring-plan: <path>: "
  } kCases[] = {
      {"bad/does_not_exist.json", "cannot open: No such file or directory"},
      {"bad", "is a directory"},
      {"bad/empty.json", "is empty"},
      {"bad/malformed.json", "malformed JSON: parse error at line 4"},
      {"bad/top_level_array.json", "the top level is an array, not a JSON object"},
      {"bad/duplicate_key.json", "sliding_window: appears twice"},
      {"bad/no_model_type.json", "model_type: is missing"},
      {"bad/unknown_model_type.json", "model_type: 'retnet' is not a family"},
      {"bad/missing_attention_heads.json", "num_attention_heads: is missing"},
      {"bad/gemma2_missing_kv_heads.json",
       "num_key_value_heads: is missing; Gemma2Config's default 4"},
      {"bad/zero_layers.json", "num_hidden_layers: 0 is invalid"},
      {"bad/count_is_string.json", "num_hidden_layers: \"32\" is a string, not an integer"},
      {"bad/head_dim_fraction.json", "head_dim: 128.5 is a number with a fraction"},
      {"bad/negative_window.json", "sliding_window: -1 is negative"},
      {"bad/hidden_not_divisible.json", "hidden_size: 100 is not a multiple"},
      {"bad/kv_heads_not_dividing.json", "num_key_value_heads: 3 does not divide"},
      {"bad/unknown_layer_type.json", "layer_types[2]: \"linear_attention\" is not an attention"},
      {"bad/layer_types_length.json", "layer_types: has 3 entries, but num_hidden_layers is 4"},
      {"bad/chunked_in_gemma.json", "layer_types[0]: is chunked_attention, but Gemma3TextConfig"},
      {"bad/gemma2_null_window.json", "sliding_window: is null, but layer 0 is sliding"},
      {"bad/qwen2_enabled_null_window.json",
       "sliding_window: is null, but use_sliding_window is true"},
      {"bad/qwen3_sliding_disabled.json",
       "layer_types[1]: is sliding_attention, but use_sliding_window is false"},
      {"bad/pattern_contradicts_layer_types.json",
       "sliding_window_pattern: 6 makes layer 1 sliding_attention, but layer 1 is full"},
      {"bad/underscore_pattern_not_read.json", "_sliding_window_pattern: 2 makes layer 1 full"},
      {"bad/mistral_layer_types.json", "layer_types[1]: full_attention, but layer 1 is sliding"},
      {"bad/llama_with_sliding_window.json", "sliding_window: 4096 is set, but LlamaConfig"},
      {"bad/mla_in_llama.json", "kv_lora_rank: 512 is set, but LlamaConfig"},
      {"bad/cohere2_head_dim.json", "head_dim: is null; the model would have no head dimension"},
      {"bad/mistral_null_kv_heads.json",
       "num_key_value_heads: is null; MistralConfig's default 8 is one checkpoint's count"},
      {"bad/gpt_oss_null_head_dim.json", "head_dim: is null; GptOssConfig needs a number here"},
      {"bad/gemma3_without_text_config.json", "text_config: is missing"},
      {"bad/text_config_model_type.json", "text_config.model_type: \"llama\" is not gemma3_text"},
      {"bad/gemma3n_no_producer.json", "num_kv_shared_layers: 1 makes layer 4 (full_attention)"},
      {"bad/gemma3n_all_shared.json", "num_kv_shared_layers: 5 leaves no layer"},
      {"bad/llama4_null_chunk.json", "attention_chunk_size: is null, but layer 0 is chunked"},
      {"bad/llama4_no_rope_value.json", "no_rope_layers[1]: 2 is too large"},
      {"bad/bidirectional.json", "use_bidirectional_attention: is true"},
      {"bad/deepseek_null_rank.json", "kv_lora_rank: is null"},
  };
  for (const auto& c : kCases) ExpectToolRefuses(c.file, c.message);
}

TEST(HfConfig, ErrorFieldNamesTheNestedKey) {
  const Expected<HfModel> model = ParseHfConfig(
      R"({"model_type": "gemma3", "text_config": {"num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2,
          "layer_types": ["sliding_attention", "mamba"]}})",
      "inline.json");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().field, "text_config.layer_types[1]");
  EXPECT_EQ(model.error().message.rfind("inline.json: text_config.layer_types[1]: \"mamba\"", 0),
            0u)
      << model.error().message;
}

// Keys and names come from the file: a message shows them escaped, so it stays one line (the
// config fuzz target found a key holding "\n" printed raw).
TEST(HfConfig, KeysAndNamesFromTheFileAreEscapedInMessages) {
  const struct {
    const char* text;
    const char* field;
    const char* message;
  } kCases[] = {
      {R"({"model_type": "llama", "hidd\n_size": 1, "hidd\n_size": 2})", "hidd\\n_size",
       "inline.json: hidd\\n_size: appears twice"},
      {R"({"a\tb": {"x\u0001": 1, "x\u0001": 1}})", "a\\tb.x\\u0001",
       "inline.json: a\\tb.x\\u0001: appears twice"},
      {R"({"model_type": "ph\ni3\u007f"})", "model_type",
       "inline.json: model_type: 'ph\\ni3\\u007f' is not a family"},
  };
  for (const auto& c : kCases) {
    const Expected<HfModel> model = ParseHfConfig(c.text, "inline.json");
    ASSERT_FALSE(model.ok()) << c.text;
    EXPECT_EQ(model.error().field, c.field) << c.text;
    EXPECT_EQ(model.error().message.rfind(c.message, 0), 0u) << model.error().message;
    EXPECT_EQ(model.error().message.find('\n'), std::string::npos) << model.error().message;
  }
}

// --- The command line -------------------------------------------------------------------

TEST(HfConfig, ConfigReportsSayHowTheFileWasRead) {
  const std::string path = ConfigPath("presets/gemma-3-27b.json");
  const CliRun text = RunCli({"--config", path});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("kvring plan: " + path + ", context 131072, batch 512"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("read as model_type gemma3_text (transformers' Gemma3TextConfig)"),
            std::string::npos);
  EXPECT_NE(text.out.find("text_config.max_position_embeddings = 131072"), std::string::npos);

  const CliRun json_run = RunCli({"--config", path, "--json", "--context", "4096"});
  ASSERT_EQ(json_run.status, 0) << json_run.err;
  const nlohmann::json json = nlohmann::json::parse(json_run.out);
  EXPECT_EQ(json["config"], path);
  EXPECT_EQ(json["model_type"], "gemma3_text");
  EXPECT_EQ(json["defaults"]["text_config.sliding_window_pattern"], "6");
  EXPECT_EQ(json["tensor_parallel"], 1);
  EXPECT_EQ(json["context"], 4096);
  EXPECT_EQ(json["layers"][5]["kind"], "global");
  EXPECT_EQ(json["layers"][5]["capacity"], 4096);
}

TEST(HfConfig, PresetAndConfigTogetherAreRefused) {
  const CliRun run =
      RunCli({"--preset", "llama-3.1-8b", "--config", ConfigPath("presets/llama-3.1-8b.json")});
  EXPECT_EQ(run.status, 2);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "kvring-plan: options --preset and --config both name the model; give one\n");
}

TEST(HfConfig, CapacityReportFromAConfigMatchesThePlanArithmetic) {
  // Llama 3.1 8B at 131072: 32 layers x 131072 slots x 8 x 128 x 2 (K, V) x 2 bytes = 16 GiB
  // a sequence; 80 - 16 - 4 - 1 = 59 GiB usable holds 3 sequences (7 per rank of 2, whose
  // sequences take 8 GiB).
  const std::vector<std::string> budget = {"--memory",    "80GiB", "--weights", "16GiB",
                                           "--workspace", "4GiB",  "--margin",  "1GiB"};
  for (const auto& [ranks, sequences] : {std::pair<const char*, const char*>{"1", "3"},
                                         std::pair<const char*, const char*>{"2", "7"}}) {
    std::vector<std::string> args = {"--config", ConfigPath("presets/llama-3.1-8b.json"),
                                     "--tensor-parallel", ranks};
    args.insert(args.end(), budget.begin(), budget.end());
    const CliRun run = RunCli(args);
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_NE(run.out.find("usable KV memory: 59.00 GiB"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find(std::string("maximum concurrency for 131072 tokens per request: ") +
                           sequences + "\n"),
              std::string::npos)
        << run.out;
  }
  const CliRun preset = RunCli({"--preset", "llama-3.1-8b", "--memory", "80GiB", "--weights",
                                "16GiB", "--workspace", "4GiB", "--margin", "1GiB", "--json"});
  ASSERT_EQ(preset.status, 0);
  // 131072 positions of 128 KiB, in 131104 slots (4096 tiles of 32, made odd).
  EXPECT_EQ(nlohmann::json::parse(preset.out)["capacity"]["bytes_per_sequence"],
            16 * kGiB + 32 * 128 * kKiB);
}

// --- Tensor parallelism -------------------------------------------------------------------

TEST(HfConfig, TensorParallelSplitsKvHeadsAndReplicatesFewerThanTheRanks) {
  const std::vector<LayerSpec> layers = {LayerSpec::Sliding(1024, 16, 128),
                                         LayerSpec::Global(16, 128)};
  const struct {
    uint64_t ranks;
    uint32_t kv_heads_per_rank;
  } kCases[] = {{1, 16}, {2, 8}, {4, 4}, {16, 1}, {32, 1}, {64, 1}};
  for (const auto& c : kCases) {
    Expected<std::vector<LayerSpec>> rank = SplitAcrossRanks(layers, 64, c.ranks);
    ASSERT_TRUE(rank.ok()) << c.ranks << ": " << rank.error().message;
    EXPECT_EQ((*rank)[0].num_kv_heads, c.kv_heads_per_rank) << c.ranks;
    EXPECT_EQ((*rank)[1].num_kv_heads, c.kv_heads_per_rank) << c.ranks;
    EXPECT_EQ((*rank)[0].window, 1024u);
  }
  // 16 heads over 3 (or 6) ranks do not divide; 2 heads cannot be replicas on 3 ranks.
  for (uint64_t ranks : {3, 6}) {
    Expected<std::vector<LayerSpec>> rank = SplitAcrossRanks(layers, 0, ranks);
    ASSERT_FALSE(rank.ok()) << ranks;
    EXPECT_EQ(rank.error().field, "layers[0].num_kv_heads");
  }
  EXPECT_FALSE(SplitAcrossRanks({LayerSpec::Global(2, 64)}, 0, 3).ok());
  // Query heads must split whole: 24 over 16 ranks does not.
  Expected<std::vector<LayerSpec>> uneven = SplitAcrossRanks(layers, 24, 16);
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.error().field, "tensor_parallel");
  // MLA latents are replicated whole.
  Expected<std::vector<LayerSpec>> mla = SplitAcrossRanks({LayerSpec::Latent(576)}, 128, 8);
  ASSERT_TRUE(mla.ok());
  EXPECT_EQ((*mla)[0].latent_dim, 576u);
}

TEST(HfConfig, TensorParallelPlansOneRank) {
  // Gemma 3 27B over 2 ranks: 8 KV heads a rank, 4 KiB a slot, half the bytes.
  const CliRun two = RunCli(
      {"--config", ConfigPath("presets/gemma-3-27b.json"), "--json", "--tensor-parallel", "2"});
  ASSERT_EQ(two.status, 0) << two.err;
  const nlohmann::json json = nlohmann::json::parse(two.out);
  EXPECT_EQ(json["tensor_parallel"], 2);
  EXPECT_EQ(json["layers"][0]["num_kv_heads"], 8);
  EXPECT_EQ(json["total_bytes"].get<uint64_t>(), (52 * 1568 + 10 * 131104) * 4 * kKiB);

  // DeepSeek-V3 over 8 ranks: every rank keeps the 576-element latent.
  const CliRun mla = RunCli({"--config", ConfigPath("presets/deepseek-v3.json"), "--json",
                             "--tensor-parallel", "8", "--context", "32768"});
  ASSERT_EQ(mla.status, 0) << mla.err;
  // 61 layers x 32768 x 576 x 2 bytes = 2196 MiB apart from padding, as on one rank
  // (llama.cpp's MLA figure); 32768 positions sit in 32800 slots (1024 tiles, made odd).
  const nlohmann::json mla_json = nlohmann::json::parse(mla.out);
  EXPECT_EQ(mla_json["total_bytes"].get<uint64_t>(), 61ull * 32800 * 576 * 2);
  EXPECT_EQ(mla_json["total_bytes"].get<uint64_t>() - mla_json["padding_bytes"].get<uint64_t>(),
            2196ull << 20);

  // 32 query heads over 3 ranks: refused, naming the heads.
  const CliRun three =
      RunCli({"--config", ConfigPath("presets/gemma-3-27b.json"), "--tensor-parallel", "3"});
  EXPECT_EQ(three.status, 2);
  EXPECT_EQ(three.out, "");
  EXPECT_EQ(three.err,
            "kvring-plan: tensor_parallel: 3 does not divide num_attention_heads 32; every rank "
            "needs whole query heads\n");
  // A preset knows no query heads; its 16 KV heads do not divide over 3 ranks either.
  const CliRun preset = RunCli({"--preset", "gemma-3-27b", "--tensor-parallel", "3"});
  EXPECT_EQ(preset.status, 2);
  EXPECT_EQ(preset.err,
            "kvring-plan: tensor_parallel: 3 does not divide the 16 KV heads of layer 0\n");
  EXPECT_EQ(RunCli({"--tensor-parallel", "0"}).status, 2);
}

// --- Sweeps ---------------------------------------------------------------------------------

TEST(HfConfig, SweepPrintsKvringAndFlatBytesPerContext) {
  // Llama 3.1 8B keeps everything: 32 layers x 8 x 128 x 2 x 2 bytes = 128 KiB a token.
  const CliRun llama = RunCli({"--preset", "llama-3.1-8b", "--sweep", "--context", "4096"});
  ASSERT_EQ(llama.status, 0) << llama.err;
  EXPECT_EQ(llama.out,
            "context,kvring_bytes,flat_bytes\n"
            "1024,138412032,138412032\n"    // 1056 slots: 32 tiles, made odd
            "2048,272629760,272629760\n"    // 2080 slots
            "4096,541065216,541065216\n");  // 4128 slots

  // Gemma 3 27B (8 KiB a slot, batch 512): at 1024 the sliding layers hold all 1024 tokens
  // (1056 slots: 32 tiles of 32, made odd); from 2048 on they hold 1535 (1568 slots).
  const CliRun gemma = RunCli({"--config", ConfigPath("presets/gemma-3-27b.json"), "--sweep",
                               "--sweep-step", "1024", "--context", "3000", "--json"});
  ASSERT_EQ(gemma.status, 0) << gemma.err;
  const nlohmann::json json = nlohmann::json::parse(gemma.out);
  EXPECT_EQ(json["model_type"], "gemma3_text");
  EXPECT_FALSE(json.contains("context"));
  const nlohmann::json& points = json["points"];
  // 1024, 2048 and the context 3000 (94 tiles, made odd: 3040 slots); 2048 is in 2080.
  ASSERT_EQ(points.size(), 3u);
  const uint64_t slot = 8 * kKiB;
  EXPECT_EQ(points[0]["context"], 1024);
  EXPECT_EQ(points[0]["kvring_bytes"].get<uint64_t>(), 62 * 1056 * slot);
  EXPECT_EQ(points[0]["flat_bytes"].get<uint64_t>(), 62 * 1056 * slot);
  EXPECT_EQ(points[1]["kvring_bytes"].get<uint64_t>(), (52 * 1568 + 10 * 2080) * slot);
  EXPECT_EQ(points[1]["flat_bytes"].get<uint64_t>(), 62 * 2080 * slot);
  EXPECT_EQ(points[2]["context"], 3000);
  EXPECT_EQ(points[2]["kvring_bytes"].get<uint64_t>(), (52 * 1568 + 10 * 3040) * slot);
  EXPECT_EQ(points[2]["flat_bytes"].get<uint64_t>(), 62 * 3040 * slot);
}

TEST(HfConfig, SweepBelowTheBatchCapsItAndBadSweepsAreRefused) {
  // Context 100: one point, the default batch capped at 100; gpt-oss-20b's sliding layers then
  // hold all 100 tokens (127 + 100 > 100), in 160 slots (4 tiles of 32, made odd):
  // 24 layers x 160 x 8 x 64 x 4 bytes.
  const CliRun small = RunCli({"--preset", "gpt-oss-20b", "--sweep", "--context", "100"});
  ASSERT_EQ(small.status, 0) << small.err;
  EXPECT_EQ(small.out, "context,kvring_bytes,flat_bytes\n100,7864320,7864320\n");
  EXPECT_EQ(24ull * 160 * 8 * 64 * 4, 7864320ull);

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--sweep-step", "1", "--preset", "llama-4-scout"},
        std::vector<std::string>{"--sweep", "--memory", "80GiB"},
        std::vector<std::string>{"--sweep-step", "0"}, std::vector<std::string>{"--sweep=1"}}) {
    const CliRun run = RunCli(args);
    EXPECT_EQ(run.status, 2) << args[0];
    EXPECT_EQ(run.out, "");
    EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
  }
}

}  // namespace
}  // namespace tools
}  // namespace kvring
