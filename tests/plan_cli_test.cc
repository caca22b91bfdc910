// Tests of the kvring-plan command line (tools/plan_cli.h), called in-process.
#include "plan_cli.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/plan_cli_run.h"

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
  for (const char* name : {"gemma-2-2b", "gemma-3n-e4b", "mistral-7b-v0.1", "llama-4-scout",
                           "gpt-oss-120b", "command-r7b", "qwen3-8b", "deepseek-v3"}) {
    EXPECT_NE(run.out.find(name), std::string::npos) << name;
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
       "int8)\n"},
      {"global=int8,global=bf16",
       "kvring-plan: option --dtype: 'global=int8,global=bf16': names global twice\n"},
  };
  for (const auto& c : kCases) {
    const CliRun run = RunCli({"--dtype", c.value});
    EXPECT_EQ(run.status, 2) << c.value;
    EXPECT_EQ(run.err, c.err);
  }
}

}  // namespace
}  // namespace tools
}  // namespace kvring
