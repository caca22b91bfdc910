// Tests of state files of hybrid models (issue 17): a KVCache's recurrent states go into its
// state file with its K/V (the state after the end position of every layer that keeps one),
// load back into a cache of either layout as its current states, and are checked like the
// rest: formats and sizes against the plan, a CRC32C, a refusal that names the layer and
// changes nothing. The "engine" is a toy recurrence whose every state is known.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/kvring.h"

namespace kvring {
namespace {

constexpr uint64_t kRollback = 2;

StateSpec SmallState(Format recurrent_format = Format::kF32, uint64_t conv_elements = 60) {
  StateSpec state;
  state.conv_elements = conv_elements;
  state.conv_format = Format::kBF16;
  state.recurrent_elements = 32;
  state.recurrent_format = recurrent_format;
  return state;
}

// Two recurrent layers, a sliding layer with a state of its own (Falcon-H1's kind of hybrid
// layer, window 8: its ring wraps) and a global layer.
template <typename Layout>
LayerPlan HybridPlan(const StateSpec& state = SmallState(), bool sliding_state = true) {
  LayerPlan::Builder builder;
  builder.AddLayer(LayerSpec::Recurrent(state));
  builder.AddLayer(LayerSpec::Recurrent(state));
  const LayerSpec sliding = LayerSpec::Sliding(8, 1, 16);
  builder.AddLayer(sliding_state ? sliding.WithState(state) : sliding);
  builder.AddLayer(LayerSpec::Global(1, 16));
  Expected<LayerPlan> plan =
      builder.SetContext(128).SetBatch(4).SetRollback(kRollback).SetLayout<Layout>().Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.value();
}

// The state after n positions of layer l: every conv byte (n + 7 * l) % 251, every recurrent
// byte (3 * n + l) % 253.
void WriteState(const StateSlot& slot, size_t layer, uint64_t n) {
  std::memset(slot.conv, static_cast<int>((n + 7 * layer) % 251), slot.conv_bytes);
  std::memset(slot.recurrent, static_cast<int>((3 * n + layer) % 253), slot.recurrent_bytes);
}

bool HoldsState(const StateSlot& slot, size_t layer, uint64_t n) {
  for (uint64_t i = 0; i < slot.conv_bytes; ++i) {
    if (slot.conv[i] != (n + 7 * layer) % 251) return false;
  }
  for (uint64_t i = 0; i < slot.recurrent_bytes; ++i) {
    if (slot.recurrent[i] != (3 * n + layer) % 253) return false;
  }
  return true;
}

// One forward pass of `count` positions from `pos`: every layer with a state writes the state
// after each position (except `skip`), then the attention layers append K/V whose
// first element is the position.
template <typename Layout>
void Step(KVCache<Layout>* cache, uint64_t pos, uint64_t count, size_t skip = ~size_t{0}) {
  for (size_t layer = 0; layer < 3; ++layer) {
    if (layer == skip || !cache->Plan().Layer(layer).HasState()) continue;
    for (uint64_t n = pos + 1; n <= pos + count; ++n) {
      Expected<StateSlot> slot = cache->StateAfter(layer, n);
      ASSERT_TRUE(slot.ok()) << slot.error().message;
      WriteState(*slot, layer, n);
    }
  }
  std::vector<float> k(count * 16), v(count * 16);
  for (uint64_t i = 0; i < count * 16; ++i) k[i] = v[i] = static_cast<float>(pos + i / 16);
  for (size_t layer : {size_t{2}, size_t{3}}) {
    ASSERT_TRUE(cache->AppendF32(layer, pos, k.data(), v.data(), count).ok());
  }
}

template <typename Layout>
KVCache<Layout> MakeCache(const LayerPlan& plan) {
  Expected<KVCache<Layout>> created = KVCache<Layout>::Create(plan);
  EXPECT_TRUE(created.ok()) << created.error().message;
  return std::move(created).value();
}

// A flash cache at position 19 (its sliding ring wrapped), saved.
std::vector<uint8_t> SavedHybrid(const LayerPlan& plan, const TaskRunner& runner) {
  KVCache<FlashLayout> cache = MakeCache<FlashLayout>(plan);
  uint64_t pos = 0;
  for (uint64_t count : {4u, 3u, 4u, 4u, 4u}) {
    Step(&cache, pos, count);
    pos += count;
  }
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  const Result saved = SaveState(cache, "hybrid", &sink, runner);
  EXPECT_TRUE(saved.ok()) << saved.Message();
  EXPECT_EQ(bytes.size(), StateBytes(cache, "hybrid"));
  return bytes;
}

TEST(RecurrentStateFile, StatesAndKVLoadIntoEitherLayoutAndTheSequenceGoesOn) {
  const std::vector<uint8_t> bytes = SavedHybrid(HybridPlan<FlashLayout>(), TaskRunner::Inline());
  ThreadPool threads(2);
  EXPECT_EQ(SavedHybrid(HybridPlan<FlashLayout>(), threads.Runner()), bytes);
  // Into a tiled cache whose states hold other values.
  KVCache<TiledLayout<16>> cache = MakeCache<TiledLayout<16>>(HybridPlan<TiledLayout<16>>());
  Step(&cache, 0, 4);
  MemorySource source(bytes.data(), bytes.size());
  const Result loaded = LoadState(&source, "hybrid", &cache);
  ASSERT_TRUE(loaded.ok()) << loaded.Message();
  EXPECT_EQ(cache.EndPos(), 19u);
  for (size_t layer = 0; layer < 3; ++layer) {
    Expected<StateSlot> state = cache.State(layer);
    ASSERT_TRUE(state.ok()) << state.error().message;
    EXPECT_TRUE(HoldsState(*state, layer, 19)) << layer;
  }
  std::vector<BF16> k(16), v(16);
  ASSERT_TRUE(cache.ReadRow(2, 18, k.data(), v.data()).ok());
  EXPECT_EQ(BF16ToF32(k[0]), 18.0f);
  // Only the loaded end's states were saved: a rollback to before it is refused, nothing
  // changed; positions appended after it roll back to it.
  EXPECT_EQ(cache.Rollback(1), Status::kRollbackTooFar);
  EXPECT_EQ(cache.EndPos(), 19u);
  Step(&cache, 19, 2);
  ASSERT_TRUE(cache.Rollback(2).ok());
  EXPECT_TRUE(HoldsState(*cache.State(1), 1, 19));
  Step(&cache, 19, 1);
  EXPECT_TRUE(HoldsState(*cache.State(0), 0, 20));
}

TEST(RecurrentStateFile, ASaveWithoutTheEndsStatesIsRefusedWritingNothing) {
  const LayerPlan plan = HybridPlan<FlashLayout>();
  KVCache<FlashLayout> cache = MakeCache<FlashLayout>(plan);
  Step(&cache, 0, 4);
  Step(&cache, 4, 3, /*skip=*/1);
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  const Result saved = SaveState(cache, "hybrid", &sink);
  EXPECT_EQ(saved, Status::kWrongPosition);
  EXPECT_NE(saved.Message().find("layers[1] holds no recurrent state after 7 positions"),
            std::string::npos)
      << saved.Message();
  EXPECT_TRUE(bytes.empty());
  EXPECT_EQ(StateBytes(cache, "hybrid"), 0u);
}

// Loads `bytes` into a cache of `plan` that has run 4 positions; expects kBadState with
// `message` in it and the cache unchanged.
void ExpectRefused(const std::vector<uint8_t>& bytes, const LayerPlan& plan,
                   const std::string& message) {
  KVCache<FlashLayout> cache = MakeCache<FlashLayout>(plan);
  Step(&cache, 0, 4);
  MemorySource source(bytes.data(), bytes.size());
  const Result loaded = LoadState(&source, "hybrid", &cache);
  EXPECT_EQ(loaded, Status::kBadState);
  EXPECT_NE(loaded.Message().find(message), std::string::npos) << loaded.Message();
  EXPECT_EQ(cache.EndPos(), 4u);
  for (size_t layer = 0; layer < 3; ++layer) {
    if (!plan.Layer(layer).HasState()) continue;
    Expected<StateSlot> state = cache.State(layer);
    ASSERT_TRUE(state.ok()) << state.error().message;
    EXPECT_TRUE(HoldsState(*state, layer, 4)) << layer;
  }
}

TEST(RecurrentStateFile, AStateOfOtherStatesIsRefusedNamingTheLayerAndField) {
  const std::vector<uint8_t> bytes = SavedHybrid(HybridPlan<FlashLayout>(), TaskRunner::Inline());
  ExpectRefused(bytes, HybridPlan<FlashLayout>(SmallState(Format::kBF16)),
                "layers[0].state.recurrent_format is 3 in the state and 0 in this plan");
  ExpectRefused(bytes, HybridPlan<FlashLayout>(SmallState(Format::kF32, 64)),
                "layers[0]'s conv state is 120 bytes in the state and 128 in this plan");
  // The sliding layer without its state: the same descriptors, one state section too many.
  ExpectRefused(bytes, HybridPlan<FlashLayout>(SmallState(), /*sliding_state=*/false),
                "it holds recurrent states (a section at byte");
  // And a file without the sliding layer's state into the plan that keeps one.
  const std::vector<uint8_t> fewer = SavedHybrid(
      HybridPlan<FlashLayout>(SmallState(), /*sliding_state=*/false), TaskRunner::Inline());
  ExpectRefused(fewer, HybridPlan<FlashLayout>(),
                "it ends without the recurrent state of layers[2], which this plan keeps");
  // A damaged state: a byte of the last layer's recurrent state flipped.
  std::vector<uint8_t> damaged = bytes;
  damaged[damaged.size() - 10] ^= 1;
  ExpectRefused(damaged, HybridPlan<FlashLayout>(), "fails its CRC32C check");
}

}  // namespace
}  // namespace kvring
