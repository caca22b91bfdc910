// kvring/hf_config.h as an engine uses it: compiled with -fno-exceptions (this file only) and
// checked against kvring-plan on every config.json the tool's tests read (family, preset and
// bad files): the same layers (kind, window, chunk, owner, heads, dims) for the files it reads,
// the same one-line error for the files it refuses (a model that names no context is planned at
// a --context given). The tool runs in this process (its
// RunPlanCli, what its main calls) for every file, and as a process for every eighth, whose
// status and output must be the in-process run's byte for byte. And a plan built from it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "kvring/hf_config.h"
#include "kvring/layer_plan.h"
#include "plan_cli.h"

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#error "this test checks the reader without exceptions: compile it with -fno-exceptions"
#endif

namespace kvring {
namespace {

std::string ConfigDir() { return KVRING_TEST_CONFIG_DIR; }

std::vector<std::string> ConfigFiles() {
  std::vector<std::string> files;
  std::error_code error;
  for (std::filesystem::recursive_directory_iterator it(ConfigDir(), error), end;
       !error && it != end; it.increment(error)) {
    if (it->path().extension() == ".json") files.push_back(it->path().string());
  }
  EXPECT_FALSE(error) << error.message();
  return files;
}

struct ToolRun {
  int status = -1;
  std::string out, err;
};

std::string ReadAll(std::FILE* file) {
  std::string text;
  char buffer[4096];
  size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, read);
  return text;
}

// The context a model that names none (HfModel::max_context 0) is planned at, which the tool
// needs as --context; "" for the others.
std::string ContextFor(const Expected<HfModel>& model) {
  return model.ok() && model->max_context == 0 ? "4096" : "";
}

// Runs `kvring-plan --config path --json [--context N]` as a process.
ToolRun RunTool(const std::string& path, const std::string& context) {
  const std::string err_path = ::testing::TempDir() + "kvring_plan_stderr.txt";
  // (KVRING_PLAN_EMULATOR: the emulator of a cross build, with a trailing space; or empty.)
  const std::string command =
      std::string(KVRING_PLAN_EMULATOR) + "'" + KVRING_PLAN_BINARY + "' --config '" + path +
      "' --json" + (context.empty() ? "" : " --context " + context) + " 2>'" + err_path + "'";
  ToolRun run;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  run.out = ReadAll(pipe);
  const int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (std::FILE* err = std::fopen(err_path.c_str(), "rb")) {
    run.err = ReadAll(err);
    std::fclose(err);
  }
  return run;
}

// Runs the same command line in this process (tools/plan_cli.h).
ToolRun RunToolHere(const std::string& path, const std::string& context) {
  std::vector<std::string> args = {"--config", path, "--json"};
  if (!context.empty()) args.insert(args.end(), {"--context", context});
  ToolRun run;
  run.status = tools::RunPlanCli(args, &run.out, &run.err);
  return run;
}

TEST(HfConfigLibrary, ReadsEveryConfigAsTheToolDoes) {
  const std::vector<std::string> files = ConfigFiles();
  ASSERT_GE(files.size(), 50u);
  int read = 0, refused = 0, launched = 0;
  for (size_t file = 0; file < files.size(); ++file) {
    const std::string& path = files[file];
    SCOPED_TRACE(path);
    const Expected<HfModel> model = ReadHfConfig(path);
    const std::string context = ContextFor(model);
    const ToolRun tool = RunToolHere(path, context);
    // (A process costs 10-100 ms, under the sanitizers and the emulator; a sample of them pins
    // the process to the function.)
    if (file % 8 == 0 || file + 1 == files.size()) {
      const ToolRun process = RunTool(path, context);
      EXPECT_EQ(process.status, tool.status);
      EXPECT_EQ(process.out, tool.out);
      EXPECT_EQ(process.err, tool.err);
      ++launched;
    }
    if (!model.ok()) {
      ++refused;
      EXPECT_EQ(tool.status, 2);
      EXPECT_EQ(tool.err, "kvring-plan: " + model.error().message + "\n");
      continue;
    }
    ++read;
    ASSERT_EQ(tool.status, 0) << tool.err;
    const nlohmann::json report = nlohmann::json::parse(tool.out, nullptr, false);
    ASSERT_FALSE(report.is_discarded());
    const nlohmann::json& layers = report["layers"];
    ASSERT_EQ(layers.size(), model->layers.size());
    EXPECT_EQ(report["model_type"], model->model_type);
    for (size_t i = 0; i < model->layers.size(); ++i) {
      const LayerSpec& spec = model->layers[i];
      const nlohmann::json& layer = layers[i];
      EXPECT_EQ(layer["kind"], LayerKindName(spec.kind, spec.attends, spec.HasState())) << i;
      EXPECT_EQ(layer["window"], spec.window) << i;
      EXPECT_EQ(layer["chunk"], spec.chunk) << i;
      EXPECT_EQ(layer["owner"], spec.kv_source < 0 ? int64_t(i) : int64_t{spec.kv_source}) << i;
      EXPECT_EQ(layer["num_kv_heads"], spec.num_kv_heads) << i;
      EXPECT_EQ(layer["head_dim"], spec.head_dim) << i;
      EXPECT_EQ(layer["latent_dim"], spec.latent_dim) << i;
      EXPECT_EQ(layer["conv_state_bytes"],
                spec.state.conv_elements * ElementBytes(spec.state.conv_format))
          << i;
      EXPECT_EQ(layer["recurrent_state_bytes"],
                spec.state.recurrent_elements * ElementBytes(spec.state.recurrent_format))
          << i;
    }
  }
  EXPECT_GT(read, 20);
  EXPECT_GT(refused, 20);
  EXPECT_GE(launched, 20);
}

TEST(HfConfigLibrary, AModelBuildsItsPlan) {
  const Expected<HfModel> model = ReadHfConfig(ConfigDir() + "/presets/gemma-3-27b.json");
  ASSERT_TRUE(model.ok()) << model.error().message;
  Expected<LayerPlan> plan = model->PlanBuilder().SetBatch(64).Build();
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->NumLayers(), 62u);
  EXPECT_EQ(plan->Runtime().context, 131072u);
  EXPECT_EQ(plan->Layer(0).spec.kind, AttentionKind::kSliding);
  EXPECT_EQ(plan->Layer(5).spec.kind, AttentionKind::kGlobal);
  EXPECT_EQ(plan->Layer(0).capacity, 1024u - 1 + 64);
}

TEST(HfConfigLibrary, ArbitraryBytesAreRefusedWithoutAborting) {
  for (const std::string& text :
       {std::string("{"), std::string("{\"model_type\": 3}"), std::string("[1, 2]"),
        std::string("\xff\xfe"), std::string("{\"a\": 1, \"a\": 2}"),
        std::string("{\"model_type\": \"gemma3\", \"text_config\": {\"layer_types\": 5, "
                    "\"num_hidden_layers\": 2, \"num_attention_heads\": 1}}")}) {
    const Expected<HfModel> model = ParseHfConfig(text, "inline.json");
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.error().message.rfind("inline.json: ", 0), 0u) << model.error().message;
  }
}

}  // namespace
}  // namespace kvring
