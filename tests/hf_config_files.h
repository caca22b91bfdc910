// Helpers of the config reader's tests: the files under tests/configs/, read and planned,
// and one plan's layers checked row by row.
#ifndef KVRING_TESTS_HF_CONFIG_FILES_H_
#define KVRING_TESTS_HF_CONFIG_FILES_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/plan_cli_run.h"
#include "kvring/hf_config.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace tools {

// Returns the path of a file under tests/configs/ (found beside this source file).
inline std::string ConfigPath(const std::string& name) {
  std::string dir = __FILE__;  // tests/hf_config_files.h
  dir = dir.substr(0, dir.find_last_of('/'));
  return dir + "/configs/" + name;
}

inline HfModel Read(const std::string& name) {
  Expected<HfModel> model = ReadHfConfig(ConfigPath(name));
  EXPECT_TRUE(model.ok()) << model.error().message;
  return model.ok() ? model.value() : HfModel();
}

inline LayerPlan Plan(const std::vector<LayerSpec>& layers, uint64_t context, uint64_t batch) {
  LayerPlan::Builder builder;
  for (const LayerSpec& spec : layers) builder.AddLayer(spec);
  Expected<LayerPlan> plan = builder.SetContext(context).SetBatch(batch).Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.ok() ? plan.value() : LayerPlan();
}

// What one layer of a plan must be: 'S' sliding, 'G' global, 'C' chunked; `owner` its KV
// owner; `capacity` 0 for consumers.
struct Row {
  char kind;
  uint64_t span;  // window or chunk (0 for global)
  size_t owner;
  uint64_t capacity;
};

// Checks that layer `i` of a plan is `row`, with `num_kv_heads` x `head_dim` K.
inline void ExpectRow(const LayerInfo& layer, size_t i, const Row& row, uint32_t num_kv_heads,
                      uint32_t head_dim) {
  const AttentionKind kind = row.kind == 'S'   ? AttentionKind::kSliding
                             : row.kind == 'C' ? AttentionKind::kChunked
                                               : AttentionKind::kGlobal;
  EXPECT_EQ(layer.spec.kind, kind) << "layer " << i;
  EXPECT_EQ(layer.spec.Span(), row.span) << "layer " << i;
  EXPECT_EQ(layer.owner, row.owner) << "layer " << i;
  EXPECT_EQ(layer.capacity, row.capacity) << "layer " << i;
  EXPECT_EQ(layer.spec.num_kv_heads, num_kv_heads) << "layer " << i;
  EXPECT_EQ(layer.spec.head_dim, head_dim) << "layer " << i;
}

inline void ExpectRows(const LayerPlan& plan, const std::vector<Row>& rows, uint32_t num_kv_heads,
                       uint32_t head_dim) {
  ASSERT_EQ(plan.NumLayers(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ExpectRow(plan.Layer(i), i, rows[i], num_kv_heads, head_dim);
  }
}

inline bool HasDefault(const HfModel& model, const std::string& key, const std::string& value) {
  for (const HfDefault& entry : model.defaults) {
    if (entry.key == key && entry.value == value) return true;
  }
  return false;
}

// Runs kvring-plan --config on tests/configs/`file`: exit status 2, nothing on stdout, and one
// line on stderr, "kvring-plan: <path>: " followed by `message` (its start).
inline void ExpectToolRefuses(const std::string& file, const std::string& message) {
  const std::string path = ConfigPath(file);
  const CliRun run = RunCli({"--config", path});
  EXPECT_EQ(run.status, 2) << file;
  EXPECT_EQ(run.out, "") << file;
  const std::string expected = "kvring-plan: " + path + ": " + message;
  EXPECT_EQ(run.err.rfind(expected, 0), 0u) << file << "\n" << run.err;
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << file << "\n" << run.err;
}

}  // namespace tools
}  // namespace kvring

#endif  // KVRING_TESTS_HF_CONFIG_FILES_H_
