// Tests of recurrent-state layers in a plan (issue 17): layers without attention (a
// recurrent state, or no sequence mixer at all) and hybrid layers that attend and hold a state.
// Every expected byte count is worked out here by hand from the specs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvring/layer_plan.h"

namespace kvring {
namespace {

// A Gated DeltaNet layer's state as Qwen3.5 keeps it: a conv state of (kernel - 1) x channels
// in BF16, a recurrent state of v_heads x k_dim x v_dim in F32 (sizes shrunk).
StateSpec DeltaNetState() {
  StateSpec state;
  state.conv_elements = 3 * 96;  // kernel 4, channels 96
  state.conv_format = Format::kBF16;
  state.recurrent_elements = 4 * 16 * 16;
  state.recurrent_format = Format::kF32;
  return state;
}

LayerPlan Build(const std::vector<LayerSpec>& layers, uint64_t context, uint64_t rollback,
                bool stage_states = false) {
  LayerPlan::Builder builder;
  for (const LayerSpec& spec : layers) builder.AddLayer(spec);
  RuntimeSpec runtime;
  runtime.context = context;
  runtime.batch = 16;
  runtime.rollback = rollback;
  runtime.stage_states = stage_states;
  Expected<LayerPlan> plan = builder.SetRuntime(runtime).Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.ok() ? plan.value() : LayerPlan();
}

TEST(PlanState, RecurrentLayersCountTheirStatesApartFromTheKV) {
  // Qwen3.5's pattern: three Gated DeltaNet layers, then a full-attention one; and a layer
  // with no sequence mixer (Nemotron-H's MLP blocks).
  const LayerSpec recurrent = LayerSpec::Recurrent(DeltaNetState());
  const std::vector<LayerSpec> layers = {recurrent, recurrent, recurrent, LayerSpec::Global(2, 64),
                                         LayerSpec::Recurrent({})};
  const uint64_t one_copy = 3 * 96 * 2 + 4 * 16 * 16 * 4;  // 576 + 4096 bytes
  // Staged (RuntimeSpec::stage_states), each state layer keeps one copy more.
  for (const uint64_t rollback : {uint64_t{0}, uint64_t{3}}) {
    for (const bool staged : {false, true}) {
      SCOPED_TRACE(std::to_string(rollback) + (staged ? " staged" : ""));
      const LayerPlan plan = Build(layers, 1024, rollback, staged);
      const uint64_t copies = rollback + 1 + (staged ? 1 : 0);
      ASSERT_EQ(plan.NumLayers(), 5u);
      EXPECT_TRUE(plan.HasStateLayers());
      EXPECT_EQ(plan.NumOwningLayers(), 1u);
      for (size_t i = 0; i < 3; ++i) {
        const LayerInfo& layer = plan.Layer(i);
        EXPECT_FALSE(layer.OwnsKV());
        EXPECT_EQ(layer.bytes, 0u);
        EXPECT_EQ(layer.capacity, 0u);
        EXPECT_EQ(layer.conv_state_bytes, 576u);
        EXPECT_EQ(layer.recurrent_state_bytes, 4096u);
        EXPECT_EQ(layer.state_copies, copies);
        EXPECT_EQ(layer.state_bytes, one_copy * copies);
      }
      EXPECT_FALSE(plan.Layer(4).OwnsKV());
      EXPECT_FALSE(plan.Layer(4).HasState());
      EXPECT_EQ(plan.Layer(4).state_bytes, 0u);
      // The K/V: one global layer of 2 x 64, 512 bytes a position, 1024 positions plus the
      // flash padding (1024 slots are 32 tiles, even: one tile more).
      EXPECT_EQ(plan.TotalBytes(), 1056u * 512u);
      EXPECT_EQ(plan.StateBytes(), 3 * one_copy * copies);
      // The states do not grow with the context; the capacity report counts them.
      EXPECT_EQ(plan.BytesAtContext(1024), plan.TotalBytes() + plan.StateBytes());
      EXPECT_EQ(plan.BytesAtContext(1), 32u * 512u + plan.StateBytes());
      MemoryBudget budget;
      budget.device_bytes = 10 * (plan.TotalBytes() + plan.StateBytes()) + 1;
      const CapacityReport report = plan.Capacity(budget, 1024);
      EXPECT_EQ(report.bytes_per_sequence, plan.TotalBytes() + plan.StateBytes());
      EXPECT_EQ(report.max_sequences, 10u);
    }
  }
}

TEST(PlanState, AHybridLayerAttendsAndHoldsAState) {
  // Falcon-H1: every layer attends and keeps a Mamba2 state beside.
  const LayerSpec hybrid = LayerSpec::Sliding(8, 2, 32).WithState(DeltaNetState());
  const LayerPlan plan =
      Build({hybrid, LayerSpec::Global(2, 32).WithState(DeltaNetState())}, 256, 0);
  EXPECT_TRUE(plan.Layer(0).OwnsKV());
  EXPECT_EQ(plan.Layer(0).capacity, 8u - 1 + 16);
  EXPECT_EQ(plan.Layer(0).state_bytes, 576u + 4096u);
  EXPECT_EQ(plan.StateBytes(), 2 * (576u + 4096u));
  EXPECT_EQ(plan.NumOwningLayers(), 2u);
}

TEST(PlanState, BadStatesAndAttentionFieldsOnRecurrentLayersAreRefused) {
  const auto refused = [](const std::vector<LayerSpec>& layers, const std::string& field,
                          const std::string& words) {
    LayerPlan::Builder builder;
    for (const LayerSpec& spec : layers) builder.AddLayer(spec);
    const Expected<LayerPlan> plan = builder.SetContext(64).SetBatch(4).Build();
    ASSERT_FALSE(plan.ok()) << field;
    EXPECT_EQ(plan.error().field, field) << plan.error().message;
    EXPECT_NE(plan.error().message.find(words), std::string::npos) << plan.error().message;
  };
  StateSpec int8_state = DeltaNetState();
  int8_state.recurrent_format = Format::kInt8;
  refused({LayerSpec::Recurrent(int8_state)}, "layers[0].state.recurrent_format",
          "int8 is not bf16 or f32");
  LayerSpec with_heads = LayerSpec::Recurrent(DeltaNetState());
  with_heads.num_kv_heads = 2;
  refused({with_heads}, "layers[0].num_kv_heads", "is set on a layer without attention");
  // A consumer cannot read a layer that has no K/V.
  refused({LayerSpec::Recurrent(DeltaNetState()), LayerSpec::Global(2, 32).SharedFrom(0)},
          "layers[1].kv_source", "layer 0 has no attention, so no K/V to read");
  LayerSpec huge = LayerSpec::Recurrent(DeltaNetState());
  huge.state.recurrent_elements = uint64_t{1} << 62;
  refused({huge}, "layers[0].state", "overflow 64 bits");
}

}  // namespace
}  // namespace kvring
