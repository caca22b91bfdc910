// Tests of the kvring-plan command line (tools/plan_cli.h), called in-process.
#include "plan_cli.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/plan_cli_run.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/model_presets.h"
#include "kvring/storage/kv_pool.h"

namespace kvring {
namespace tools {
namespace {

TEST(PlanCli, ParseSizeAcceptsSuffixes) {
  const struct {
    const char* text;
    uint64_t value;
  } kCases[] = {{"131072", 131072},
                {"128k", 131072},
                {"128K", 131072},
                {"10m", 10485760},
                {"24GiB", 24ull << 30},
                {"24gib", 24ull << 30},
                {"24GB", 24000000000ull},
                {"1t", 1ull << 40},
                {"512B", 512},
                {"2TiB", 2ull << 40},
                {"18446744073709551615", UINT64_MAX}};
  for (const auto& c : kCases) {
    uint64_t value = 0;
    EXPECT_TRUE(ParseSize(c.text, &value)) << c.text;
    EXPECT_EQ(value, c.value) << c.text;
  }
}

TEST(PlanCli, ParseSizeRejectsMalformedAndOverflowingText) {
  for (const char* text : {"", "k", "-5", "12x", "1.5GiB", "12 k", "18446744073709551616",
                           "17179869184GiB", "0x10", "24GiBs"}) {
    uint64_t value = 7;
    EXPECT_FALSE(ParseSize(text, &value)) << text;
    EXPECT_EQ(value, 7u) << text;
  }
}

TEST(PlanCli, FormatBytesUsesBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(62ull << 30), "62.00 GiB");
  EXPECT_EQ(FormatBytes(16777216000ull), "15.62 GiB");
}

TEST(PlanCli, DefaultPlansGemma3_27BWithFoldedRows) {
  const CliRun run = RunCli({});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.err, "");
  EXPECT_NE(run.out.find("gemma-3-27b, context 131072, batch 512"), std::string::npos);
  // Layers 0-4 fold into one row; 62 layers make 10 sliding runs and 10 global rows, plus a
  // trailing run 60-61.
  EXPECT_NE(run.out.find("\n0-4 "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\n5 "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\n60-61 "), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("\n1 "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("62.02 GiB"), std::string::npos) << run.out;  // the flat cache
  EXPECT_NE(run.out.find("saving:"), std::string::npos);
}

TEST(PlanCli, JsonCarriesTheDocumentedFields) {
  const CliRun run =
      RunCli({"--preset", "gemma-3n-e4b", "--json", "--context=8k", "--batch", "64"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["model"], "gemma-3n-e4b");
  EXPECT_EQ(json["context"], 8192);
  EXPECT_EQ(json["batch"], 64);
  EXPECT_EQ(json["rollback"], 0);
  EXPECT_EQ(json["backend"], "flash");
  EXPECT_EQ(json["dtype"], "bf16");
  EXPECT_EQ(json["num_sequences"], 1);
  ASSERT_EQ(json["layers"].size(), 35u);
  uint64_t sum = 0;
  for (const auto& layer : json["layers"]) {
    for (const char* key :
         {"index", "kind", "owner", "num_kv_heads", "head_dim", "capacity", "num_slots", "bytes"}) {
      EXPECT_TRUE(layer.contains(key)) << key;
    }
    sum += layer["bytes"].get<uint64_t>();
  }
  EXPECT_EQ(json["layers"][33]["owner"], 18);  // a sliding consumer
  EXPECT_EQ(json["layers"][34]["owner"], 19);  // (34 + 1) % 5 == 0: a global consumer
  EXPECT_EQ(json["layers"][34]["bytes"], 0);
  EXPECT_EQ(json["layers"][0]["capacity"], 511 + 64);
  EXPECT_EQ(json["total_bytes"].get<uint64_t>(), sum);
  // Flat: 20 owners at 8192 positions of 2 KiB, in 8224 slots (256 tiles of 32, made odd).
  EXPECT_EQ(json["flat_bytes"].get<uint64_t>(), 20ull * 8224 * 2048);
}

TEST(PlanCli, OptionsReachThePlan) {
  const CliRun run = RunCli({"--preset", "gpt-oss-20b", "--json", "--context", "4096", "--batch",
                             "8", "--rollback", "32", "--sequences", "3", "--backend", "tiled",
                             "--tile-rows", "64", "--dtype", "f32"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["backend"], "tiled");
  EXPECT_EQ(json["tile_rows"], 64);
  EXPECT_EQ(json["dtype"], "f32");
  EXPECT_EQ(json["num_sequences"], 3);
  // Sliding 128: 127 + max(8, 32) = 159 slots, padded to 192 for 64-row tiles.
  EXPECT_EQ(json["layers"][0]["capacity"], 159);
  EXPECT_EQ(json["layers"][0]["num_slots"], 192);
  EXPECT_EQ(json["layers"][0]["bytes"], 192 * 8 * 64 * 2 * 4);
  EXPECT_EQ(json["total_bytes_all_sequences"].get<uint64_t>(),
            3 * json["total_bytes"].get<uint64_t>());
}

TEST(PlanCli, Int8DtypeCountsTheScales) {
  const CliRun run = RunCli({"--preset", "llama-3.1-8b", "--json", "--dtype", "int8"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["dtype"], "int8");
  EXPECT_EQ(json["element_bytes"], 1);
  for (const auto& layer : json["layers"]) {
    EXPECT_EQ(layer["format"], "int8");
    // 8 kv_heads x (128 + 4) bytes, K and V: the scale of each row included.
    EXPECT_EQ(layer["k_slot_bytes"], 8 * (128 + 4));
    EXPECT_EQ(layer["v_slot_bytes"], 8 * (128 + 4));
    EXPECT_EQ(layer["slot_bytes"], 2112);
  }
  EXPECT_EQ(json["total_bytes"].get<uint64_t>(), 32ull * 131104 * 2112);
  EXPECT_EQ(json["flat_bytes"], json["total_bytes"]);
  EXPECT_EQ(json["context_token_bytes"], 32 * 2112);
}

TEST(PlanCli, Int8hDtypeTakesInt8sBytesAndIsRefusedForMLA) {
  const CliRun run = RunCli({"--preset", "llama-3.1-8b", "--json", "--dtype", "int8h"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["dtype"], "int8h");
  EXPECT_EQ(json["element_bytes"], 1);
  for (const auto& layer : json["layers"]) {
    EXPECT_EQ(layer["format"], "int8h");
    EXPECT_EQ(layer["slot_bytes"], 2112);  // int8's: the rotation takes no byte
  }
  EXPECT_EQ(json["total_bytes"].get<uint64_t>(), 32ull * 131104 * 2112);
  const CliRun per_kind = RunCli({"--json", "--dtype", "global=int8h"});
  ASSERT_EQ(per_kind.status, 0) << per_kind.err;
  EXPECT_EQ(nlohmann::json::parse(per_kind.out)["layers"][5]["format"], "int8h");
  const CliRun mla = RunCli({"--preset", "deepseek-v3", "--dtype", "int8h"});
  EXPECT_EQ(mla.status, 2);
  EXPECT_NE(mla.err.find("layers[0].format: int8h is invalid for an MLA layer"), std::string::npos)
      << mla.err;
}

TEST(PlanCli, PerKindDtypeSetsEachLayersFormat) {
  const CliRun run = RunCli({"--json", "--dtype", "sliding=bf16,global=int8"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["dtype"], "global=int8,sliding=bf16");  // in kind order
  EXPECT_EQ(json["element_bytes"], 0);                   // no one element size
  EXPECT_EQ(json["layers"][0]["format"], "bf16");
  EXPECT_EQ(json["layers"][0]["slot_bytes"], 16 * 128 * 2 * 2);
  EXPECT_EQ(json["layers"][5]["format"], "int8");
  EXPECT_EQ(json["layers"][5]["slot_bytes"], 16 * (128 + 4) * 2);
  EXPECT_EQ(json["total_bytes"].get<uint64_t>(), 52ull * 1568 * 8192 + 10ull * 131104 * 4224);
  // The flat cache is in the same formats.
  EXPECT_EQ(json["flat_bytes"].get<uint64_t>(), 131104ull * (52 * 8192 + 10 * 4224));

  // A consumer reads its owner's format: gemma-3n's layer 34 reads global layer 19.
  const CliRun shared =
      RunCli({"--preset", "gemma-3n-e4b", "--json", "--dtype", "global=int8", "--context", "8k"});
  ASSERT_EQ(shared.status, 0) << shared.err;
  const nlohmann::json layers = nlohmann::json::parse(shared.out)["layers"];
  EXPECT_EQ(layers[34]["owner"], 19);
  EXPECT_EQ(layers[34]["format"], "int8");
  EXPECT_EQ(layers[33]["format"], "bf16");
}

TEST(PlanCli, TableShowsEachLayersFormat) {
  const CliRun run = RunCli({"--dtype", "global=int8"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("batch 512, rollback 0, backend flash, global=int8, 1 sequence"),
            std::string::npos)
      << run.out;
  const auto line_of = [&](const std::string& start) {
    const size_t begin = run.out.find("\n" + start);
    return begin == std::string::npos
               ? std::string()
               : run.out.substr(begin + 1, run.out.find('\n', begin + 1) - begin - 1);
  };
  const std::string header = line_of("layers");
  EXPECT_EQ(header.substr(header.size() - 6), "format") << header;
  const std::string sliding = line_of("0-4 "), global = line_of("5 ");
  EXPECT_EQ(sliding.substr(sliding.size() - 4), "bf16") << sliding;
  EXPECT_EQ(global.substr(global.size() - 4), "int8") << global;
  // What-if element types name themselves in the column.
  const CliRun f32 = RunCli({"--preset", "llama-3.1-8b", "--dtype", "f32", "--json"});
  ASSERT_EQ(f32.status, 0) << f32.err;
  EXPECT_EQ(nlohmann::json::parse(f32.out)["layers"][0]["format"], "f32");
}

TEST(PlanCli, CapacityReportOfABudget) {
  const CliRun run =
      RunCli({"--preset", "llama-3.1-8b", "--json", "--memory", "80GiB", "--weights", "16GiB",
              "--workspace", "4GiB", "--margin", "1GiB", "--sequences", "8"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["capacity"]["usable_bytes"], 59ull << 30);
  EXPECT_EQ(json["capacity"]["max_sequences"], 3);
  // 59 GiB / 8 / 128 KiB = 60416 slots: 1888 tiles, even, so 1887 tiles: 60384 positions.
  EXPECT_EQ(json["capacity"]["max_context"], 60384);
}

TEST(PlanCli, ShortContextCapsTheDefaultBatch) {
  const CliRun run = RunCli({"--context", "100", "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["batch"], 100);
}

TEST(PlanCli, ListPresetsNamesEveryModel) {
  const CliRun run = RunCli({"--list-presets"});
  ASSERT_EQ(run.status, 0);
  for (const ModelPreset& preset : ModelPresets()) {
    EXPECT_NE(run.out.find(preset.name + " "), std::string::npos) << preset.name;
  }
}

TEST(PlanCli, BadInputExitsTwoWithOneLineAndNoStdout) {
  const std::vector<std::vector<std::string>> kBad = {{"--preset", "nope"},
                                                      {"--frobnicate"},
                                                      {"--context", "12x"},
                                                      {"--context", "0"},
                                                      {"--batch"},
                                                      {"--batch", "0"},
                                                      {"--backend", "cuda"},
                                                      {"--dtype", "f64"},
                                                      {"--tile-rows", "12"},
                                                      {"--json=yes"},
                                                      {"--sequences", "0"},
                                                      {"--context", "100", "--batch", "200"},
                                                      {"--memory", "lots"},
                                                      {"positional"},
                                                      {"--rollback", "1000000000"},
                                                      {"--dtype", "global=int9"},
                                                      {"--dtype", "local=int8"},
                                                      {"--dtype", "global=f32"},
                                                      {"--dtype", "global=int8,global=bf16"},
                                                      {"--dtype", "global=int8,"},
                                                      {"--dtype", "global"}};
  for (const auto& args : kBad) {
    const CliRun run = RunCli(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(run.status, 2) << joined;
    EXPECT_EQ(run.out, "") << joined;
    EXPECT_EQ(run.err.rfind("kvring-plan: ", 0), 0u) << joined << run.err;
    EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << joined << run.err;
  }
}

TEST(PlanCli, BadPerKindDtypeNamesTheOptionAndTheValue) {
  const struct {
    const char* value;
    const char* err;
  } kCases[] = {
      {"local=int8",
       "kvring-plan: option --dtype: 'local=int8': 'local' is not an attention kind (global, "
       "sliding, chunked)\n"},
      {"global=int4,sliding=bf16",
       "kvring-plan: option --dtype: 'global=int4,sliding=bf16': 'int4' is not a format (bf16, "
       "int8, int8h)\n"},
      {"global=int8,global=bf16",
       "kvring-plan: option --dtype: 'global=int8,global=bf16': names global twice\n"},
  };
  for (const auto& c : kCases) {
    const CliRun run = RunCli({"--dtype", c.value});
    EXPECT_EQ(run.status, 2) << c.value;
    EXPECT_EQ(run.err, c.err);
  }
}

// The pool report, recomputed from the rules of docs/planning.md: a flash ring or cache of
// `capacity` positions takes whole 32-slot tiles, an odd number of them.
uint64_t FlashSlots(uint64_t capacity) {
  uint64_t tiles = (capacity + 31) / 32;
  if (tiles % 2 == 0) ++tiles;
  return tiles * 32;
}

uint64_t Admitted(uint64_t budget, double expected_bytes) {
  return static_cast<uint64_t>(std::floor(static_cast<double>(budget) / expected_bytes));
}

TEST(PlanCli, PoolReportCountsAHybridModelsRecurrentStates) {
  // Qwen3.5's layer_types (tests/configs): a pool's sequence, a KVCache full or sized, each
  // keeps the model's recurrent states besides its K/V.
  std::string config = __FILE__;  // tests/plan_cli_test.cc
  config = config.substr(0, config.find_last_of('/')) + "/configs/qwen3_5_layer_types.json";
  const CliRun run =
      RunCli({"--config", config, "--json", "--memory", "20GiB", "--pool", "--mean-length", "8k"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  const nlohmann::json& pool = json["pool"];
  const uint64_t states = json["state_bytes"];
  ASSERT_GT(states, 0u);
  EXPECT_EQ(pool["state_bytes"], states);
  const nlohmann::json& entry = pool["lengths"][0];
  const uint64_t blocks = entry["blocks"], block = pool["block_bytes"];
  const uint64_t decode_rings = pool["decode_ring_bytes"], total = json["total_bytes"];
  EXPECT_EQ(entry["pool_decode_bytes"], decode_rings + blocks * block + states);
  EXPECT_EQ(entry["kvcache_bytes"], total + states);
  EXPECT_NE(RunCli({"--config", config, "--memory", "20GiB", "--pool", "--mean-length", "8k"})
                .out.find("recurrent states: "),
            std::string::npos);
}

TEST(PlanCli, StageStatesKeepsOneMoreCopyOfEachState) {
  // LFM2 1.2B: 10 short-convolution layers, 6 full; rollback 2: 3 copies of each state, 4
  // staged.
  const auto plan = [](bool staged) {
    std::vector<std::string> args = {"--preset", "lfm2-1.2b", "--json", "--rollback", "2"};
    if (staged) args.push_back("--stage-states");
    const CliRun run = RunCli(args);
    EXPECT_EQ(run.status, 0) << run.err;
    return nlohmann::json::parse(run.out);
  };
  const nlohmann::json plain = plan(false), staged = plan(true);
  EXPECT_EQ(plain["stage_states"], false);
  EXPECT_EQ(staged["stage_states"], true);
  const uint64_t plain_states = plain["state_bytes"], staged_states = staged["state_bytes"];
  ASSERT_GT(plain_states, 0u);
  EXPECT_EQ(staged_states * 3, plain_states * 4);
  EXPECT_EQ(staged["total_bytes"], plain["total_bytes"]);  // the K/V is the same
  size_t state_layers = 0;
  for (const auto& layer : staged["layers"]) {
    if (layer["state_copies"] == 0) continue;
    ++state_layers;
    EXPECT_EQ(layer["state_copies"], 4);
  }
  EXPECT_EQ(state_layers, 10u);
  const CliRun text = RunCli({"--preset", "lfm2-1.2b", "--rollback", "2", "--stage-states"});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("in 10 layers (4 copies each: rollback 2 + 1 + 1 staged;"),
            std::string::npos)
      << text.out;
  const CliRun bad = RunCli({"--preset", "lfm2-1.2b", "--stage-states=1"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err, "kvring-plan: option --stage-states takes no value\n");
}

TEST(PlanCli, PoolReportCountsGemma3_27BSequences) {
  const CliRun run =
      RunCli({"--json", "--memory", "20GiB", "--pool", "--lengths", "512:0.5,4096:0.3,32768:0.2"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json pool = nlohmann::json::parse(run.out)["pool"];
  // Gemma 3 27B: 52 sliding layers (window 1024) and 10 global, 16 x 128 BF16: 8 KiB a slot.
  const uint64_t slot = 16 * 128 * 2 * 2, context = 131072, batch = 512;
  const uint64_t budget = 20ull << 30;
  const uint64_t decode_rings = 52 * FlashSlots(1024 - 1 + 1) * slot;
  const uint64_t prefill_rings = 52 * FlashSlots(1024 - 1 + batch) * slot;
  const uint64_t block = 10 * 160 * slot;  // flash blocks: five 32-slot tiles
  const uint64_t kvcache = prefill_rings + 10 * FlashSlots(context) * slot;
  EXPECT_EQ(pool["usable_bytes"], budget);
  EXPECT_EQ(pool["layout"], "FlashLayout");
  EXPECT_EQ(pool["block_slots"], 160);
  EXPECT_EQ(pool["block_bytes"], block);
  EXPECT_EQ(pool["num_ring_layers"], 52);
  EXPECT_EQ(pool["num_paged_layers"], 10);
  EXPECT_EQ(pool["decode_ring_bytes"], decode_rings);
  EXPECT_EQ(pool["prefill_ring_bytes"], prefill_rings);

  const uint64_t lengths[] = {512, 4096, 32768};
  const double fractions[] = {0.5, 0.3, 0.2};
  double decode = 0, prefill = 0, sized = 0;
  ASSERT_EQ(pool["lengths"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const uint64_t length = lengths[i];
    const uint64_t blocks = (length + 159) / 160;
    // A KVCache planned at the length: sliding layers keep min(T, W - 1 + min(B, T)).
    const uint64_t sized_bytes =
        52 * FlashSlots(std::min(length, 1023 + std::min(batch, length))) * slot +
        10 * FlashSlots(length) * slot;
    const nlohmann::json& entry = pool["lengths"][i];
    EXPECT_EQ(entry["length"], length);
    EXPECT_EQ(entry["blocks"], blocks);
    EXPECT_EQ(entry["pool_decode_bytes"], decode_rings + blocks * block);
    EXPECT_EQ(entry["pool_prefill_bytes"], prefill_rings + blocks * block);
    EXPECT_EQ(entry["kvcache_bytes"], kvcache);
    EXPECT_EQ(entry["kvcache_at_length_bytes"], sized_bytes);
    decode += fractions[i] * static_cast<double>(decode_rings + blocks * block);
    prefill += fractions[i] * static_cast<double>(prefill_rings + blocks * block);
    sized += fractions[i] * static_cast<double>(sized_bytes);
  }
  EXPECT_EQ(pool["expected_bytes"]["pool_decode"], std::llround(decode));
  EXPECT_EQ(pool["expected_bytes"]["kvcache"], kvcache);
  EXPECT_EQ(pool["sequences"]["pool_decode"], Admitted(budget, decode));
  EXPECT_EQ(pool["sequences"]["pool_prefill"], Admitted(budget, prefill));
  EXPECT_EQ(pool["sequences"]["kvcache"], budget / kvcache);
  EXPECT_EQ(pool["sequences"]["kvcache_at_length"], Admitted(budget, sized));
  EXPECT_DOUBLE_EQ(
      pool["ratio"]["pool_decode"].get<double>(),
      static_cast<double>(Admitted(budget, decode)) / static_cast<double>(budget / kvcache));
  EXPECT_GT(pool["sequences"]["pool_decode"], pool["sequences"]["kvcache"]);

  // One sequence's sliding layers: the pool's decode ring keeps W - 1 + max(1, R) = 1024
  // positions, the KVCache 1535 for its batch of 512; vLLM RoundUp(1024, 16), one 16-token
  // block more while the window starts inside a block.
  ASSERT_EQ(pool["rings"].size(), 1u);
  const nlohmann::json& ring = pool["rings"][0];
  EXPECT_EQ(ring["kind"], "sliding");
  EXPECT_EQ(ring["span"], 1024);
  EXPECT_EQ(ring["num_layers"], 52);
  EXPECT_EQ(ring["pool_decode_capacity"], 1024);
  EXPECT_EQ(ring["pool_decode_num_slots"], FlashSlots(1024));
  EXPECT_EQ(ring["kvcache_capacity"], 1535);
  EXPECT_EQ(ring["kvcache_num_slots"], FlashSlots(1535));
  EXPECT_EQ(ring["vllm_slots"], 1024);
  EXPECT_EQ(ring["vllm_slots_at_most"], 1040);
  EXPECT_EQ(pool["ring_bytes"]["pool_decode"], decode_rings);
  EXPECT_EQ(pool["ring_bytes"]["kvcache"], prefill_rings);
  EXPECT_EQ(pool["ring_bytes"]["vllm"], 52 * 1024 * slot);
  EXPECT_EQ(pool["ring_bytes"]["vllm_at_most"], 52 * 1040 * slot);

  // The text report says the same.
  const CliRun text =
      RunCli({"--memory", "20GiB", "--pool", "--lengths", "512:0.5,4096:0.3,32768:0.2"});
  ASSERT_EQ(text.status, 0) << text.err;
  const size_t line = text.out.find("\n  sequences ");
  ASSERT_NE(line, std::string::npos) << text.out;
  std::istringstream cells(text.out.substr(line + 1, text.out.find('\n', line + 1) - line - 1));
  std::vector<std::string> words{std::istream_iterator<std::string>(cells), {}};
  const std::vector<std::string> counts = {"sequences", std::to_string(Admitted(budget, decode)),
                                           std::to_string(Admitted(budget, prefill)),
                                           std::to_string(budget / kvcache),
                                           std::to_string(Admitted(budget, sized))};
  EXPECT_EQ(words, counts) << text.out;
  EXPECT_NE(text.out.find("KVPool<FlashLayout>"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1024 in 1056 slots   1535 in 1568 slots"), std::string::npos)
      << text.out;
}

TEST(PlanCli, PoolReportOfATiledPoolMatchesTheLibrarysPool) {
  // gpt-oss-20b: 12 sliding layers (window 128) and 12 global, 8 x 64 BF16: 2 KiB a slot.
  const CliRun run =
      RunCli({"--preset", "gpt-oss-20b", "--json", "--backend", "tiled", "--tile-rows", "16",
              "--rollback", "40", "--memory", "10GiB", "--weights", "2GiB", "--pool",
              "--mean-length", "5000", "--block-slots", "64"});
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json pool = nlohmann::json::parse(run.out)["pool"];
  const uint64_t slot = 8 * 64 * 2 * 2, budget = 8ull << 30;
  const auto round16 = [](uint64_t n) { return (n + 15) / 16 * 16; };
  const uint64_t decode_rings = 12 * round16(127 + 40) * slot;  // max(1, rollback 40)
  const uint64_t prefill_rings = 12 * round16(127 + 512) * slot;
  const uint64_t block = 12 * 64 * slot, blocks = (5000 + 63) / 64;
  const uint64_t kvcache = prefill_rings + 12 * round16(131072) * slot;
  const uint64_t sized = prefill_rings + 12 * round16(5000) * slot;
  EXPECT_EQ(pool["layout"], "TiledLayout<16>");
  EXPECT_EQ(pool["block_slots"], 64);
  EXPECT_EQ(pool["mean_length"], 5000.0);
  EXPECT_EQ(pool["decode_ring_bytes"], decode_rings);
  EXPECT_EQ(pool["lengths"][0]["pool_decode_bytes"], decode_rings + blocks * block);
  EXPECT_EQ(pool["lengths"][0]["kvcache_at_length_bytes"], sized);
  EXPECT_EQ(pool["sequences"]["pool_decode"], budget / (decode_rings + blocks * block));
  EXPECT_EQ(pool["sequences"]["pool_prefill"], budget / (prefill_rings + blocks * block));
  EXPECT_EQ(pool["sequences"]["kvcache"], budget / kvcache);
  EXPECT_EQ(pool["sequences"]["kvcache_at_length"], budget / sized);
  EXPECT_EQ(pool["rings"][0]["pool_decode_capacity"], 167);
  EXPECT_EQ(pool["rings"][0]["vllm_slots"], 128);
  EXPECT_EQ(pool["rings"][0]["vllm_slots_at_most"], 144);

  // The library's own pool of the same plan, probed with a small budget, agrees.
  Expected<ModelPreset> preset = FindModelPreset("gpt-oss-20b");
  ASSERT_TRUE(preset.ok());
  RuntimeSpec runtime;
  runtime.context = 131072;
  runtime.batch = 512;
  runtime.rollback = 40;
  runtime.backend = Backend::kTiled;
  runtime.tile_rows = 16;
  Expected<LayerPlan> plan = BuilderFor(*preset).SetRuntime(runtime).Build();
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  PoolSpec spec;
  spec.budget_bytes = 8ull << 20;
  spec.max_sequences = 1;
  spec.block_slots = 64;
  Expected<KVPool<TiledLayout<16>>> probe = KVPool<TiledLayout<16>>::Create(*plan, spec);
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  EXPECT_EQ(pool["decode_ring_bytes"], probe->RingBytesFor(1));
  EXPECT_EQ(pool["prefill_ring_bytes"], probe->RingBytesFor(512));
  EXPECT_EQ(pool["block_bytes"], probe->BlockBytesFor(1));
  EXPECT_EQ(pool["lengths"][0]["pool_decode_bytes"],
            probe->RingBytesFor(1) + probe->BlockBytesFor(5000));
}

TEST(PlanCli, PoolReportWithoutRingsOrWithoutBlocks) {
  // llama-3.1-8b: every layer paged, no rings; 32 layers x 8 x 128 BF16: 4 KiB a slot.
  const CliRun paged = RunCli(
      {"--preset", "llama-3.1-8b", "--json", "--memory", "59GiB", "--pool", "--mean-length", "8k"});
  ASSERT_EQ(paged.status, 0) << paged.err;
  const nlohmann::json pool = nlohmann::json::parse(paged.out)["pool"];
  const uint64_t per_sequence = (8192 + 159) / 160 * 32 * 160 * 4096ull;
  EXPECT_EQ(pool["num_ring_layers"], 0);
  EXPECT_EQ(pool["decode_ring_bytes"], 0);
  EXPECT_EQ(pool["rings"].size(), 0u);
  EXPECT_EQ(pool["lengths"][0]["pool_decode_bytes"], per_sequence);
  EXPECT_EQ(pool["sequences"]["pool_decode"], (59ull << 30) / per_sequence);
  EXPECT_EQ(pool["sequences"]["kvcache"], 3);  // the capacity report's maximum concurrency

  // mistral-7b-v0.1 at 32768: every layer a ring (window 4096), no blocks.
  const CliRun rings = RunCli({"--preset", "mistral-7b-v0.1", "--json", "--memory", "20GiB",
                               "--pool", "--lengths", "2000:0.5,30000:0.5"});
  ASSERT_EQ(rings.status, 0) << rings.err;
  const nlohmann::json ring_pool = nlohmann::json::parse(rings.out)["pool"];
  EXPECT_EQ(ring_pool["num_paged_layers"], 0);
  EXPECT_EQ(ring_pool["block_bytes"], 0);
  EXPECT_EQ(ring_pool["lengths"][1]["blocks"], 0);
  EXPECT_EQ(ring_pool["lengths"][1]["pool_decode_bytes"], 32 * FlashSlots(4096) * 4096ull);
}

TEST(PlanCli, BadPoolOptionsNameTheOptionAndTheValue) {
  const std::vector<std::string> kPool = {"--memory", "20GiB", "--pool"};
  const struct {
    std::vector<std::string> args;
    const char* err;
  } kCases[] = {
      {{"--lengths", "512:0.5,4096:0.4"},
       "kvring-plan: option --lengths: '512:0.5,4096:0.4': the fractions sum to 0.9, not 1\n"},
      {{"--lengths", "512"},
       "kvring-plan: option --lengths: '512': '512' is not length:fraction (as "
       "512:0.5,4096:0.3,32k:0.2)\n"},
      {{"--lengths", "512:half"},
       "kvring-plan: option --lengths: '512:half': 'half' is not a fraction in (0, 1]\n"},
      {{"--lengths", "512:1.5"},
       "kvring-plan: option --lengths: '512:1.5': '1.5' is not a fraction in (0, 1]\n"},
      {{"--lengths", "12x:1"},
       "kvring-plan: option --lengths: '12x:1': '12x' is not a length (examples: 512, 32k)\n"},
      {{"--lengths", "0:1"},
       "kvring-plan: option --lengths: '0:1': a length of 0 is invalid: one token at least\n"},
      {{"--lengths", "512:0.5,200000:0.5"},
       "kvring-plan: option --lengths: '512:0.5,200000:0.5': 200000 is past the context of "
       "131072\n"},
      {{"--mean-length", "0"},
       "kvring-plan: option --mean-length: 0 is invalid: one token at least\n"},
      {{"--mean-length", "1m"},
       "kvring-plan: option --mean-length: '1m': 1048576 is past the context of 131072\n"},
      {{"--mean-length", "8k", "--block-slots", "100"},
       "kvring-plan: option --block-slots: 100 is invalid: a block holds a positive multiple of "
       "the layout's tile of 32 positions, at most a tile past the context\n"},
      {{"--mean-length", "8k", "--block-slots", "0"},
       "kvring-plan: option --block-slots: 0 is invalid: a block holds one tile at least\n"},
      {{"--mean-length", "8k", "--dtype", "f32"},
       "kvring-plan: option --pool: runtime.element_type: f32 is not stored: a kvring pool holds "
       "BF16 or int8 (other element types are for what-if accounting only)\n"},
      {{"--mean-length", "8k", "--lengths", "512:1"},
       "kvring-plan: options --lengths and --mean-length both give the lengths; give one\n"},
      {{},
       "kvring-plan: option --pool needs the lengths: --lengths LEN:FRACTION,... or "
       "--mean-length N\n"},
  };
  for (const auto& c : kCases) {
    std::vector<std::string> args = kPool;
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliRun run = RunCli(args);
    EXPECT_EQ(run.status, 2) << c.err;
    EXPECT_EQ(run.out, "") << c.err;
    EXPECT_EQ(run.err, c.err);
  }
  // The pool options need one another.
  EXPECT_EQ(RunCli({"--pool", "--mean-length", "8k"}).err,
            "kvring-plan: option --pool needs --memory: the budget the pool and the KVCaches "
            "share\n");
  EXPECT_EQ(RunCli({"--memory", "20GiB", "--lengths", "512:1"}).err,
            "kvring-plan: option --lengths is for the pool report; add --pool\n");
  EXPECT_EQ(RunCli({"--memory", "20GiB", "--block-slots", "96"}).err,
            "kvring-plan: option --block-slots is for the pool report; add --pool\n");
}

}  // namespace
}  // namespace tools
}  // namespace kvring
