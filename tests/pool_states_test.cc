// Tests of a KVPool's sequences of a hybrid model (issue 17): each sequence keeps its own
// recurrent states beside its rings and blocks, counted in the budget; forks copy them,
// Rollback takes them back with the K/V (and RollbackLimit says how far it may), Clear zeroes
// them; state files, exports and imports carry them; a prefix cache's checkpoints keep them.
// The "engine" is a toy recurrence whose every state is known.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/kvring.h"

namespace kvring {
namespace {

constexpr uint64_t kRollback = 2;

StateSpec SmallState() {
  StateSpec state;
  state.conv_elements = 60;  // 120 BF16 bytes
  state.conv_format = Format::kBF16;
  state.recurrent_elements = 32;  // 128 F32 bytes
  state.recurrent_format = Format::kF32;
  return state;
}

// Two recurrent layers, a sliding layer with a state of its own (window 8) and a global
// layer (paged in a pool); `staged`: RuntimeSpec::stage_states.
template <typename Layout>
LayerPlan HybridPlan(bool staged = false) {
  LayerPlan::Builder builder;
  builder.AddLayer(LayerSpec::Recurrent(SmallState()));
  builder.AddLayer(LayerSpec::Recurrent(SmallState()));
  builder.AddLayer(LayerSpec::Sliding(8, 1, 16).WithState(SmallState()));
  builder.AddLayer(LayerSpec::Global(1, 16));
  Expected<LayerPlan> plan = builder.SetContext(256)
                                 .SetBatch(4)
                                 .SetRollback(kRollback)
                                 .SetStageStates(staged)
                                 .SetLayout<Layout>()
                                 .Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.value();
}

// The state after n positions of layer l in a sequence seeded `seed`.
uint8_t ConvByte(uint32_t seed, size_t layer, uint64_t n) {
  return static_cast<uint8_t>((n + 7 * layer + 31 * seed) % 251);
}
void WriteState(const StateSlot& slot, uint32_t seed, size_t layer, uint64_t n) {
  std::memset(slot.conv, ConvByte(seed, layer, n), slot.conv_bytes);
  std::memset(slot.recurrent, ConvByte(seed, layer, n) ^ 0x5a, slot.recurrent_bytes);
}
bool HoldsState(const Expected<StateSlot>& slot, uint32_t seed, size_t layer, uint64_t n) {
  if (!slot.ok()) return false;
  for (uint64_t i = 0; i < slot->conv_bytes; ++i) {
    if (slot->conv[i] != ConvByte(seed, layer, n)) return false;
  }
  for (uint64_t i = 0; i < slot->recurrent_bytes; ++i) {
    if (slot->recurrent[i] != (ConvByte(seed, layer, n) ^ 0x5a)) return false;
  }
  return true;
}

// One forward pass of `count` positions of sequence `id` from `pos`: each layer with a state
// writes the state after each position (`every`: or only the last), then the attention
// layers append K/V whose elements are the position.
template <typename Layout>
void Step(KVPool<Layout>* pool, SequenceId id, uint32_t seed, uint64_t pos, uint64_t count,
          bool every = true) {
  for (size_t layer = 0; layer < 3; ++layer) {
    for (uint64_t n = pos + 1; n <= pos + count; ++n) {
      if (!every && n != pos + count) continue;
      Expected<StateSlot> slot = pool->StateAfter(id, layer, n);
      ASSERT_TRUE(slot.ok()) << slot.error().message;
      WriteState(*slot, seed, layer, n);
    }
  }
  std::vector<float> rows(count * 16);
  for (uint64_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(pos + i / 16);
  for (size_t layer : {size_t{2}, size_t{3}}) {
    ASSERT_TRUE(pool->AppendF32(id, layer, pos, rows.data(), rows.data(), count).ok());
  }
}

template <typename Layout>
KVPool<Layout> MakePool(const LayerPlan& plan, uint64_t budget = 4 << 20,
                        uint64_t block_slots = 0) {
  PoolSpec spec;
  spec.budget_bytes = budget;
  spec.block_slots = block_slots;
  spec.max_sequences = 8;
  Expected<KVPool<Layout>> pool = KVPool<Layout>::Create(plan, spec);
  EXPECT_TRUE(pool.ok()) << pool.error().message;
  return std::move(pool).value();
}

// Runs sequence `id` (seed `seed`) to position 19 in passes of 4 and 3.
template <typename Layout>
void RunTo19(KVPool<Layout>* pool, SequenceId id, uint32_t seed) {
  uint64_t pos = 0;
  for (uint64_t count : {4u, 3u, 4u, 4u, 4u}) {
    Step(pool, id, seed, pos, count);
    pos += count;
  }
}

TEST(PoolStates, EachSequenceKeepsItsOwnStatesCountedInTheBudget) {
  const LayerPlan plan = HybridPlan<FlashLayout>();
  KVPool<FlashLayout> pool = MakePool<FlashLayout>(plan);
  const uint64_t states = plan.StateBytes();
  EXPECT_EQ(states, 3 * (kRollback + 1) * (120u + 128u));
  SequenceId a, b;
  ASSERT_TRUE(pool.AddSequence(&a).ok());
  ASSERT_TRUE(pool.AddSequence(&b).ok());
  EXPECT_EQ(pool.Usage().state_bytes, 2 * states);
  EXPECT_EQ(pool.AllocatedBytes(), pool.Usage().ring_bytes + 2 * states +
                                       pool.Usage().num_blocks * pool.Usage().block_bytes);
  // A new sequence starts from zero states.
  Expected<StateSlot> zero = pool.State(a, 1);
  ASSERT_TRUE(zero.ok()) << zero.error().message;
  for (uint64_t i = 0; i < zero->conv_bytes; ++i) ASSERT_EQ(zero->conv[i], 0);
  RunTo19(&pool, a, 1);
  Step(&pool, b, 2, 0, 4);
  for (size_t layer = 0; layer < 3; ++layer) {
    EXPECT_TRUE(HoldsState(pool.State(a, layer), 1, layer, 19)) << layer;
    EXPECT_TRUE(HoldsState(pool.State(b, layer), 2, layer, 4)) << layer;
  }
  EXPECT_NE(pool.State(a, 0)->conv, pool.State(b, 0)->conv);
  // Refusals name the layer, the range or the id.
  EXPECT_EQ(pool.State(a, 3).error().message,
            "layer: 3 is not a layer with a recurrent state (of 4 layers)");
  EXPECT_FALSE(pool.StateAfter(a, 0, 15).ok());  // before the last step (15 to 19)
  ASSERT_TRUE(pool.Free(b).ok());
  EXPECT_EQ(pool.State(b, 0).error().field, "id");
  EXPECT_EQ(pool.StateAfter(b, 0, 1).error().message,
            "id: sequence " + std::to_string(b.index) + " (generation " +
                std::to_string(b.generation) + ") is not live in this pool");
  EXPECT_EQ(pool.Usage().state_bytes, states);
  // Clear zeroes the states with the positions.
  ASSERT_TRUE(pool.Clear(a).ok());
  EXPECT_EQ(pool.State(a, 2)->conv[0], 0);
  Step(&pool, a, 3, 0, 2);
  EXPECT_TRUE(HoldsState(pool.State(a, 2), 3, 2, 2));
}

TEST(PoolStates, ABudgetWithoutRoomForTheStatesRefusesTheFork) {
  const LayerPlan plan = HybridPlan<FlashLayout>();
  const uint64_t rings = MakePool<FlashLayout>(plan).RingBytesFor(plan.Runtime().batch);
  const uint64_t block = MakePool<FlashLayout>(plan).Usage().block_bytes;
  // Room for a sequence (rings, states and a block) and a fork's rings, not its states too.
  KVPool<FlashLayout> pool =
      MakePool<FlashLayout>(plan, 2 * rings + 2 * plan.StateBytes() + block - 1);
  SequenceId a, fork;
  ASSERT_TRUE(pool.AddSequence(&a).ok());
  Step(&pool, a, 1, 0, 4);
  ASSERT_EQ(pool.Usage().blocks_in_use, 1u);
  const Result forked = pool.Fork(a, &fork);
  EXPECT_EQ(forked, Status::kPoolExhausted) << forked.Message();
  EXPECT_EQ(pool.Usage().live_sequences, 1u);
  EXPECT_EQ(pool.Usage().state_bytes, plan.StateBytes());
}

TEST(PoolStates, StagedStatesSurviveAStepWhoseAppendIsRefused) {
  // A step whose global append is refused (no block left) after the state layers wrote their
  // states: staged, AbandonStep leaves the sequence at the state it started from, and the
  // step runs again once another sequence frees its block.
  const LayerPlan plan = HybridPlan<FlashLayout>(/*staged=*/true);
  EXPECT_EQ(plan.StateBytes(), 3 * (kRollback + 2) * (120u + 128u));
  const KVPool<FlashLayout> probe = MakePool<FlashLayout>(plan, 4 << 20, 32);
  const uint64_t rings = probe.RingBytesFor(plan.Runtime().batch);
  // Two sequences and two blocks of 32 slots.
  KVPool<FlashLayout> pool =
      MakePool<FlashLayout>(plan, 2 * (rings + plan.StateBytes() + probe.Usage().block_bytes), 32);
  SequenceId a, b;
  ASSERT_TRUE(pool.AddSequence(&a).ok());
  ASSERT_TRUE(pool.AddSequence(&b).ok());
  EXPECT_EQ(pool.Usage().state_bytes, 2 * plan.StateBytes());
  for (uint64_t pos = 0; pos < 32; pos += 4) Step(&pool, a, 1, pos, 4);
  Step(&pool, b, 2, 0, 4);
  ASSERT_EQ(pool.Usage().blocks_in_use, 2u);
  // The step from 32: states written, the sliding layer appended, the global one refused.
  for (size_t layer = 0; layer < 3; ++layer) {
    for (uint64_t n = 33; n <= 36; ++n) WriteState(*pool.StateAfter(a, layer, n), 9, layer, n);
  }
  std::vector<float> rows(4 * 16, 0.5f);
  ASSERT_TRUE(pool.AppendF32(a, 2, 32, rows.data(), rows.data(), 4).ok());
  EXPECT_EQ(pool.AppendF32(a, 3, 32, rows.data(), rows.data(), 4), Status::kPoolExhausted);
  EXPECT_EQ(pool.AbandonStep(a).EndPos(), 32u);
  for (size_t layer = 0; layer < 3; ++layer) {
    EXPECT_TRUE(HoldsState(pool.State(a, layer), 1, layer, 32)) << layer;
  }
  ASSERT_TRUE(pool.Free(b).ok());
  Step(&pool, a, 1, 32, 4);
  EXPECT_EQ(*pool.EndPos(a), 36u);
  for (size_t layer = 0; layer < 3; ++layer) {
    EXPECT_TRUE(HoldsState(pool.State(a, layer), 1, layer, 36)) << layer;
  }
  EXPECT_EQ(*pool.RollbackLimit(a), kRollback);
}

TEST(PoolStates, ForksCopyTheStatesAndRollbackTakesThemBackWithTheKV) {
  KVPool<TiledLayout<16>> pool = MakePool<TiledLayout<16>>(HybridPlan<TiledLayout<16>>());
  SequenceId a, fork;
  ASSERT_TRUE(pool.AddSequence(&a).ok());
  RunTo19(&pool, a, 1);
  ASSERT_TRUE(pool.Fork(a, &fork).ok());
  EXPECT_NE(pool.State(a, 1)->recurrent, pool.State(fork, 1)->recurrent);
  Step(&pool, fork, 2, 19, 3);                          // drafts written with seed 2
  EXPECT_TRUE(HoldsState(pool.State(a, 1), 1, 1, 19));  // the source is untouched
  EXPECT_EQ(*pool.RollbackLimit(fork), kRollback);
  ASSERT_TRUE(pool.Rollback(fork, 2).ok());
  EXPECT_EQ(*pool.EndPos(fork), 20u);
  EXPECT_TRUE(HoldsState(pool.State(fork, 0), 2, 0, 20));
  // A pass that wrote only its last states rolls back no further than its end (the drafts'
  // states after 21 and 22 went with the rollback): the limit says so, and a rollback is
  // refused naming the layer, changing nothing.
  Step(&pool, fork, 2, 20, 3, /*every=*/false);
  EXPECT_EQ(*pool.RollbackLimit(fork), 0u);
  const RollbackResult refused = pool.Rollback(fork, 1);
  EXPECT_EQ(refused, Status::kRollbackTooFar);
  EXPECT_NE(refused.Message().find("layers[0] holds no state after them"), std::string::npos)
      << refused.Message();
  EXPECT_EQ(*pool.EndPos(fork), 23u);
  EXPECT_TRUE(HoldsState(pool.State(fork, 2), 2, 2, 23));
  // An abandoned step's states go with it: the step written again with only its last state
  // cannot roll back onto the abandoned one's.
  for (size_t layer = 0; layer < 3; ++layer) {
    for (uint64_t n : {24u, 25u}) WriteState(*pool.StateAfter(fork, layer, n), 9, layer, n);
  }
  std::vector<float> rows(32, 0.5f);
  ASSERT_TRUE(pool.AppendF32(fork, 2, 23, rows.data(), rows.data(), 2).ok());
  EXPECT_EQ(pool.AbandonStep(fork).EndPos(), 23u);
  Step(&pool, fork, 2, 23, 2, /*every=*/false);
  EXPECT_EQ(pool.Rollback(fork, 1), Status::kRollbackTooFar);
}

TEST(PoolStates, StateFilesExportsAndImportsCarryTheStates) {
  const LayerPlan plan = HybridPlan<FlashLayout>();
  KVPool<FlashLayout> pool = MakePool<FlashLayout>(plan);
  SequenceId a;
  ASSERT_TRUE(pool.AddSequence(&a).ok());
  RunTo19(&pool, a, 1);
  std::vector<uint8_t> saved;
  VectorSink sink(&saved);
  ASSERT_TRUE(SaveState(pool, a, "hybrid", &sink).ok());
  EXPECT_EQ(saved.size(), StateBytes(pool, a, "hybrid"));
  // The same bytes a step at a time.
  std::vector<uint8_t> exported;
  VectorSink export_sink(&exported);
  SequenceExport<FlashLayout> out;
  ASSERT_TRUE(SequenceExport<FlashLayout>::Begin(pool, a, "hybrid", &export_sink, &out).ok());
  while (!out.Done()) ASSERT_TRUE(out.Step().ok());
  EXPECT_EQ(exported, saved);
  // Into a cache of the other layout, into another sequence at once and a step at a time.
  Expected<KVCache<TiledLayout<16>>> cache =
      KVCache<TiledLayout<16>>::Create(HybridPlan<TiledLayout<16>>());
  ASSERT_TRUE(cache.ok());
  MemorySource source(saved);
  ASSERT_TRUE(LoadState(&source, "hybrid", &*cache).ok());
  SequenceId b, c;
  ASSERT_TRUE(pool.AddSequence(&b).ok());
  ASSERT_TRUE(pool.AddSequence(&c).ok());
  Step(&pool, b, 5, 0, 4);
  ASSERT_TRUE(LoadState(&source, "hybrid", &pool, b).ok());
  SequenceImport<FlashLayout> in;
  ASSERT_TRUE(SequenceImport<FlashLayout>::Begin(&source, "hybrid", &pool, c, &in).ok());
  while (!in.Done()) ASSERT_TRUE(in.Step().ok());
  for (size_t layer = 0; layer < 3; ++layer) {
    EXPECT_TRUE(HoldsState(cache->State(layer), 1, layer, 19)) << layer;
    EXPECT_TRUE(HoldsState(pool.State(b, layer), 1, layer, 19)) << layer;
    EXPECT_TRUE(HoldsState(pool.State(c, layer), 1, layer, 19)) << layer;
  }
  EXPECT_EQ(*pool.RollbackLimit(b), 0u);  // only the end's states were saved
  Step(&pool, c, 1, 19, 1);               // goes on from the loaded states
  EXPECT_TRUE(HoldsState(pool.State(c, 0), 1, 0, 20));
  // A sequence whose pass appended K/V without writing its states: a save is refused,
  // writing nothing, and so is an export.
  SequenceId d;
  ASSERT_TRUE(pool.AddSequence(&d).ok());
  std::vector<float> one(16, 0.0f);
  ASSERT_TRUE(pool.AppendF32(d, 2, 0, one.data(), one.data(), 1).ok());
  ASSERT_TRUE(pool.AppendF32(d, 3, 0, one.data(), one.data(), 1).ok());
  std::vector<uint8_t> refused_bytes;
  VectorSink refused_sink(&refused_bytes);
  const Result refused = SaveState(pool, d, "hybrid", &refused_sink);
  EXPECT_EQ(refused, Status::kWrongPosition);
  EXPECT_NE(refused.Message().find("layers[0] holds no recurrent state after 1 positions"),
            std::string::npos)
      << refused.Message();
  EXPECT_TRUE(refused_bytes.empty());
  EXPECT_EQ(StateBytes(pool, d, "hybrid"), 0u);
  SequenceExport<FlashLayout> none;
  EXPECT_EQ(SequenceExport<FlashLayout>::Begin(pool, d, "hybrid", &refused_sink, &none),
            Status::kWrongPosition);
}

TEST(PoolStates, PrefixCheckpointsKeepTheStatesOfTheirRollbackSlots) {
  const LayerPlan plan = HybridPlan<FlashLayout>();
  KVPool<FlashLayout> pool = MakePool<FlashLayout>(plan);
  PrefixCache<FlashLayout> prefixes(&pool);
  SequenceId a;
  ASSERT_TRUE(pool.AddSequence(&a).ok());
  RunTo19(&pool, a, 1);
  std::vector<TokenId> tokens(19);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<TokenId>(i);
  ASSERT_TRUE(prefixes.Insert(a, tokens.data(), tokens.size()).ok());
  EXPECT_EQ(prefixes.Stats().state_bytes, plan.StateBytes());
  // A prompt that diverges at its 19th token resumes from 18: the checkpoint's states after
  // 18 (a rollback slot) become the sequence's.
  std::vector<TokenId> prompt = tokens;
  prompt[18] = 1000;
  const PrefixMatch match = prefixes.Match(prompt.data(), prompt.size());
  ASSERT_EQ(match.length, 18u);
  EXPECT_EQ(*prefixes.AttachBytes(match), pool.RingBytesFor(1) + plan.StateBytes());
  SequenceId resumed;
  ASSERT_TRUE(prefixes.Attach(match, &resumed).ok());
  for (size_t layer = 0; layer < 3; ++layer) {
    EXPECT_TRUE(HoldsState(pool.State(resumed, layer), 1, layer, 18)) << layer;
  }
  // A sequence whose states after its end were not written is no checkpoint: refused,
  // nothing taken.
  SequenceId bare;
  ASSERT_TRUE(pool.AddSequence(&bare).ok());
  std::vector<float> rows(16, 0.0f);
  for (size_t layer : {size_t{2}, size_t{3}}) {
    ASSERT_TRUE(pool.AppendF32(bare, layer, 0, rows.data(), rows.data(), 1).ok());
  }
  const uint64_t live = pool.Usage().live_sequences;
  const Result refused = prefixes.Insert(bare, tokens.data(), 1);
  EXPECT_EQ(refused, Status::kWrongPosition);
  EXPECT_NE(refused.Message().find("layers[0] holds no recurrent state after the sequence's 1 "
                                   "positions"),
            std::string::npos)
      << refused.Message();
  EXPECT_EQ(pool.Usage().live_sequences, live);
  EXPECT_EQ(prefixes.Stats().checkpoints, 1u);
}

}  // namespace
}  // namespace kvring
