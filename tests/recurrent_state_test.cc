// Tests of recurrent states in a KVCache (issue 17): a hybrid model's state layers keep
// rollback + 1 zeroed, 64-byte aligned slots beside the attention layers' K/V; the engine reads
// the current state and writes each position's state where kvring says; Rollback makes an
// earlier state current with the K/V, all or nothing; staged states (one slot more) survive an
// abandoned step; Copy, Clear and the refusals. The "engine" here is a toy recurrence whose every
// state is known.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/kvring.h"

namespace kvring {
namespace {

constexpr uint64_t kBatch = 4;
constexpr uint64_t kRollback = 2;

StateSpec SmallState() {
  StateSpec state;
  state.conv_elements = 3 * 20;  // 120 BF16 bytes: the recurrent state starts 128 bytes in
  state.conv_format = Format::kBF16;
  state.recurrent_elements = 4 * 8;
  state.recurrent_format = Format::kF32;
  return state;
}

// Three recurrent layers and a global one (Qwen3.5's pattern), batch 4, rollback 2.
LayerPlan HybridPlan() {
  LayerPlan::Builder builder;
  for (int i = 0; i < 3; ++i) builder.AddLayer(LayerSpec::Recurrent(SmallState()));
  builder.AddLayer(LayerSpec::Global(1, 16));
  Expected<LayerPlan> plan = builder.SetContext(256)
                                 .SetBatch(kBatch)
                                 .SetRollback(kRollback)
                                 .SetLayout<FlashLayout>()
                                 .Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.value();
}

// The toy recurrence: the state after n positions of layer l has every recurrent element
// equal to 1000 * l + n and every conv byte equal to (n + l) % 251.
float ValueOf(size_t layer, uint64_t n) { return static_cast<float>(1000 * layer + n); }

void WriteState(const StateSlot& slot, size_t layer, uint64_t n) {
  std::memset(slot.conv, static_cast<int>((n + layer) % 251), slot.conv_bytes);
  float* recurrent = reinterpret_cast<float*>(slot.recurrent);
  for (uint64_t i = 0; i < slot.recurrent_bytes / 4; ++i) recurrent[i] = ValueOf(layer, n);
}

bool HoldsState(const StateSlot& slot, size_t layer, uint64_t n) {
  for (uint64_t i = 0; i < slot.conv_bytes; ++i) {
    if (slot.conv[i] != (n + layer) % 251) return false;
  }
  const float* recurrent = reinterpret_cast<const float*>(slot.recurrent);
  for (uint64_t i = 0; i < slot.recurrent_bytes / 4; ++i) {
    if (recurrent[i] != ValueOf(layer, n)) return false;
  }
  return true;
}

// One forward pass of `count` positions from `pos`: each recurrent layer reads its current
// state (checked) and writes the state after each position (`every`: or only the last one);
// the global layer appends K/V.
void Step(KVCache<FlashLayout>* cache, uint64_t pos, uint64_t count, bool every = true) {
  for (size_t layer = 0; layer < 3; ++layer) {
    Expected<StateSlot> current = cache->State(layer);
    ASSERT_TRUE(current.ok()) << current.error().message;
    EXPECT_TRUE(pos == 0 ? current->recurrent[0] == 0 : HoldsState(*current, layer, pos));
    for (uint64_t n = pos + 1; n <= pos + count; ++n) {
      if (!every && n != pos + count) continue;
      Expected<StateSlot> slot = cache->StateAfter(layer, n);
      ASSERT_TRUE(slot.ok()) << slot.error().message;
      WriteState(*slot, layer, n);
    }
  }
  std::vector<float> k(count * 16, 0.5f), v(count * 16, -0.5f);
  ASSERT_TRUE(cache->AppendF32(3, pos, k.data(), v.data(), count).ok());
}

TEST(RecurrentState, SlotsAreZeroedAlignedAndCountedAsPlanned) {
  const LayerPlan plan = HybridPlan();
  Expected<KVCache<FlashLayout>> created = KVCache<FlashLayout>::Create(plan);
  ASSERT_TRUE(created.ok()) << created.error().message;
  KVCache<FlashLayout> cache = std::move(created).value();
  EXPECT_EQ(plan.StateBytes(), 3 * (kRollback + 1) * (120u + 128u));
  EXPECT_EQ(cache.AllocatedBytes(), plan.TotalBytes() + plan.StateBytes());
  for (size_t layer = 0; layer < 3; ++layer) {
    Expected<StateSlot> state = cache.State(layer);
    ASSERT_TRUE(state.ok()) << state.error().message;
    EXPECT_EQ(state->conv_bytes, 120u);
    EXPECT_EQ(state->recurrent_bytes, 128u);
    EXPECT_EQ(state->recurrent_format, Format::kF32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(state->conv) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(state->recurrent) % 64, 0u);
    for (uint64_t i = 0; i < state->conv_bytes; ++i) ASSERT_EQ(state->conv[i], 0);
  }
}

// A rollback of one position after a pass that wrote only its last state: refused, naming
// layer 0, the state it lacks.
void ExpectRollbackOfOneRefusedByLayer0(KVCache<FlashLayout>* cache) {
  const RollbackResult refused = cache->Rollback(1);
  EXPECT_EQ(refused, Status::kRollbackTooFar);
  EXPECT_NE(refused.Message().find("layers[0] holds no state after them"), std::string::npos)
      << refused.Message();
}

TEST(RecurrentState, RollbackMakesAnEarlierStateCurrentWithTheKV) {
  Expected<KVCache<FlashLayout>> created = KVCache<FlashLayout>::Create(HybridPlan());
  ASSERT_TRUE(created.ok());
  KVCache<FlashLayout> cache = std::move(created).value();
  uint64_t pos = 0;
  for (uint64_t count : {3u, 4u, 1u, 4u}) {
    Step(&cache, pos, count);
    pos += count;
  }
  ASSERT_EQ(cache.EndPos(), 12u);
  // Speculative decoding: 4 drafted positions, 2 rejected.
  Step(&cache, 12, 4);
  ASSERT_EQ(cache.Rollback(2).EndPos(), 14u);
  for (size_t layer = 0; layer < 3; ++layer) {
    Expected<StateSlot> state = cache.State(layer);
    ASSERT_TRUE(state.ok()) << state.error().message;
    EXPECT_TRUE(HoldsState(*state, layer, 14)) << layer;
  }
  Step(&cache, 14, 2);  // continues from the state after 14
  EXPECT_EQ(cache.EndPos(), 16u);

  // A pass that wrote only its last state cannot roll back: refused, nothing changed.
  Step(&cache, 16, 3, /*every=*/false);
  ExpectRollbackOfOneRefusedByLayer0(&cache);
  EXPECT_EQ(cache.EndPos(), 19u);
  Expected<StateSlot> kept = cache.State(0);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(HoldsState(*kept, 0, 19));
  EXPECT_TRUE(cache.Rollback(0).ok());
}

TEST(RecurrentState, ARolledBackDraftsStatesAreNeverHeldAgain) {
  Expected<KVCache<FlashLayout>> created = KVCache<FlashLayout>::Create(HybridPlan());
  ASSERT_TRUE(created.ok());
  KVCache<FlashLayout> cache = std::move(created).value();
  Step(&cache, 0, 4);
  Step(&cache, 4, 3);  // drafts: the states after 5, 6 and 7
  ASSERT_TRUE(cache.Rollback(2).ok());
  // A pass that writes only its last state: the states after 6 and 7 of the rejected drafts
  // would sit in the slots a rollback of 1 or 2 reads; they went with the rollback.
  Step(&cache, 5, 3, /*every=*/false);
  ExpectRollbackOfOneRefusedByLayer0(&cache);
  EXPECT_EQ(cache.EndPos(), 8u);
}

TEST(RecurrentState, CopyIsIndependentAndClearStartsOver) {
  Expected<KVCache<FlashLayout>> created = KVCache<FlashLayout>::Create(HybridPlan());
  ASSERT_TRUE(created.ok());
  KVCache<FlashLayout> cache = std::move(created).value();
  Step(&cache, 0, 4);
  Expected<KVCache<FlashLayout>> copied = cache.Copy();
  ASSERT_TRUE(copied.ok());
  KVCache<FlashLayout> copy = std::move(copied).value();
  Step(&cache, 4, 2);
  Expected<StateSlot> snapshot = copy.State(1);
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message;
  EXPECT_TRUE(HoldsState(*snapshot, 1, 4));
  EXPECT_NE(snapshot->recurrent, cache.State(1)->recurrent);
  cache.Clear();
  EXPECT_EQ(cache.EndPos(), 0u);
  Expected<StateSlot> fresh = cache.State(2);
  ASSERT_TRUE(fresh.ok());
  for (uint64_t i = 0; i < fresh->conv_bytes; ++i) ASSERT_EQ(fresh->conv[i], 0);
  EXPECT_EQ(reinterpret_cast<const float*>(fresh->recurrent)[0], 0.0f);
  Step(&cache, 0, 4);  // a new sequence runs from the zero state
}

TEST(RecurrentState, RefusalsNameTheLayerAndTheRange) {
  Expected<KVCache<FlashLayout>> created = KVCache<FlashLayout>::Create(HybridPlan());
  ASSERT_TRUE(created.ok());
  KVCache<FlashLayout> cache = std::move(created).value();
  Expected<StateSlot> attention = cache.State(3);
  ASSERT_FALSE(attention.ok());
  EXPECT_EQ(attention.error().message,
            "layer: 3 is not a layer with a recurrent state (of 4 layers)");
  EXPECT_FALSE(cache.State(9).ok());
  // A recurrent layer holds no K/V: appends, reads and attention of it are refused, and no
  // other layer's buffers are touched.
  std::vector<float> rows(16, 1.0f);
  const Result append = cache.AppendF32(1, 0, rows.data(), rows.data(), 1);
  EXPECT_EQ(append, Status::kBadArgument);
  EXPECT_EQ(append.Message(),
            "BadArgument: layers[1] has no attention (a recurrent layer): it holds no K/V");
  std::vector<BF16> row(16);
  EXPECT_EQ(cache.ReadRow(2, 0, row.data(), row.data()), Status::kBadArgument);
  EXPECT_EQ(cache.View(0).k, nullptr);
  EXPECT_EQ(cache.EndPos(1), cache.EndPos());
  EXPECT_EQ(cache.EndPos(3), 0u);
  Expected<StateSlot> past = cache.StateAfter(0, 257);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.error().message,
            "num_positions: 257 is not in (0, 256]: past the start of the current or last step, "
            "within the context");
  EXPECT_FALSE(cache.StateAfter(0, 0).ok());
  // A state that was never written is not handed out: after a pass that skipped layer 1's
  // state, its current state is refused rather than stale.
  for (size_t layer : {size_t{0}, size_t{2}}) WriteState(*cache.StateAfter(layer, 2), layer, 2);
  std::vector<float> k(32, 0.0f), v(32, 0.0f);
  ASSERT_TRUE(cache.AppendF32(3, 0, k.data(), v.data(), 2).ok());
  Expected<StateSlot> missing = cache.State(1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("layers[1].state: the state after 2 positions was not "
                                         "written"),
            std::string::npos)
      << missing.error().message;
}

TEST(RecurrentState, HybridLayersKeepTheirKVAndAStateThatRollBackTogether) {
  // Falcon-H1 and Zamba2's hybrid blocks: a layer that attends and keeps a Mamba state. Here a
  // sliding one (window 8) and a global one, each with both.
  LayerPlan::Builder builder;
  builder.AddLayer(LayerSpec::Sliding(8, 1, 16).WithState(SmallState()));
  builder.AddLayer(LayerSpec::Global(1, 16).WithState(SmallState()));
  const Expected<LayerPlan> plan = builder.SetContext(64)
                                       .SetBatch(kBatch)
                                       .SetRollback(kRollback)
                                       .SetLayout<FlashLayout>()
                                       .Build();
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  Expected<KVCache<FlashLayout>> created = KVCache<FlashLayout>::Create(*plan);
  ASSERT_TRUE(created.ok()) << created.error().message;
  KVCache<FlashLayout> cache = std::move(created).value();
  EXPECT_EQ(cache.AllocatedBytes(), plan->TotalBytes() + plan->StateBytes());
  EXPECT_EQ(plan->StateBytes(), 2 * (kRollback + 1) * (120u + 128u));
  // Each pass writes every layer's states, then appends its K/V (row value = position).
  const auto pass = [&](uint64_t pos, uint64_t count) {
    for (size_t layer = 0; layer < 2; ++layer) {
      for (uint64_t n = pos + 1; n <= pos + count; ++n) {
        Expected<StateSlot> slot = cache.StateAfter(layer, n);
        ASSERT_TRUE(slot.ok()) << slot.error().message;
        WriteState(*slot, layer, n);
      }
      std::vector<float> k(count * 16), v(count * 16);
      for (uint64_t i = 0; i < count * 16; ++i) k[i] = v[i] = static_cast<float>(pos + i / 16);
      ASSERT_TRUE(cache.AppendF32(layer, pos, k.data(), v.data(), count).ok());
    }
  };
  pass(0, 4);
  pass(4, 4);
  pass(8, 3);  // the sliding ring has wrapped
  ASSERT_EQ(cache.EndPos(), 11u);
  ASSERT_TRUE(cache.Rollback(2).ok());
  EXPECT_EQ(cache.EndPos(), 9u);
  for (size_t layer = 0; layer < 2; ++layer) {
    Expected<StateSlot> state = cache.State(layer);
    ASSERT_TRUE(state.ok()) << state.error().message;
    EXPECT_TRUE(HoldsState(*state, layer, 9)) << layer;
    EXPECT_EQ(cache.EndPos(layer), 9u) << layer;
    std::vector<BF16> k(16), v(16);
    ASSERT_TRUE(cache.ReadRow(layer, 8, k.data(), v.data()).ok());
    EXPECT_EQ(BF16ToF32(k[0]), 8.0f) << layer;
  }
  pass(9, 2);  // continues from the states after 9
  EXPECT_EQ(cache.EndPos(), 11u);
  // A layer after the step's appends (a recurrent layer after the last attention layer)
  // writes its states once the step is complete, continuing from the state after its start;
  // the next step's first append closes them.
  ASSERT_TRUE(HoldsState(*cache.State(1, 9), 1, 9));
  EXPECT_FALSE(cache.State(1, 8).ok());  // rolled back: not held
  for (uint64_t n : {10u, 11u}) {
    Expected<StateSlot> late = cache.StateAfter(1, n);
    ASSERT_TRUE(late.ok()) << late.error().message;
    WriteState(*late, 1, n + 100);
  }
  EXPECT_TRUE(HoldsState(*cache.State(1), 1, 111));
  std::vector<float> row(16, 11.0f);
  ASSERT_TRUE(cache.AppendF32(0, 11, row.data(), row.data(), 1).ok());
  const Expected<StateSlot> closed = cache.StateAfter(1, 11);
  ASSERT_FALSE(closed.ok());
  EXPECT_NE(closed.error().message.find("before the next step begins"), std::string::npos)
      << closed.error().message;
  EXPECT_TRUE(HoldsState(*cache.State(1, 11), 1, 111));
}

// Recurrent layers around two global ones (rollback `rollback`, RuntimeSpec::stage_states
// `staged`), so that a step can fail between its appends: a forward pass that fails at layer
// 4 after layer 2 appended leaves the step unfinished, for AbandonStep to take back.
LayerPlan TwoOwnerPlan(uint64_t rollback, bool staged) {
  LayerPlan::Builder builder;
  for (size_t layer = 0; layer < 5; ++layer) {
    builder.AddLayer(layer == 2 || layer == 4 ? LayerSpec::Global(1, 16)
                                              : LayerSpec::Recurrent(SmallState()));
  }
  Expected<LayerPlan> plan = builder.SetContext(256)
                                 .SetBatch(16)
                                 .SetRollback(rollback)
                                 .SetStageStates(staged)
                                 .SetLayout<FlashLayout>()
                                 .Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.value();
}

// A forward pass of `count` positions from `pos` through TwoOwnerPlan's layers: each state
// layer reads its current state (checked) and writes the state after every position (as
// state `n + shift` of the toy recurrence), each global layer appends. `fail`: the pass stops
// before layer 4's append.
void TwoOwnerStep(KVCache<FlashLayout>* cache, uint64_t pos, uint64_t count, uint64_t shift,
                  bool fail) {
  std::vector<float> k(count * 16, 0.25f), v(count * 16, -0.25f);
  for (size_t layer = 0; layer < 5; ++layer) {
    if (layer == 2 || layer == 4) {
      if (fail && layer == 4) return;
      ASSERT_TRUE(cache->AppendF32(layer, pos, k.data(), v.data(), count).ok());
      continue;
    }
    Expected<StateSlot> current = cache->State(layer, pos);
    ASSERT_TRUE(current.ok()) << current.error().message;
    ASSERT_TRUE(pos == 0 ? current->recurrent[0] == 0 : HoldsState(*current, layer, pos));
    for (uint64_t n = pos + 1; n <= pos + count; ++n) {
      Expected<StateSlot> slot = cache->StateAfter(layer, n);
      ASSERT_TRUE(slot.ok()) << slot.error().message;
      WriteState(*slot, layer, n + shift);
    }
  }
}

TEST(RecurrentState, StagedStatesSurviveAnAbandonedStepOfAnyLength) {
  // An engine whose forward pass fails part way (an append refused, an error of its own)
  // abandons the step after some state layers wrote theirs. The states it starts from are
  // still held if the step was no longer than the rollback; with stage_states at any length,
  // at the cost of one more state per layer. Without it a longer step overwrote them: State
  // then refuses (the sequence must be recomputed), never hands out the abandoned step's.
  for (const uint64_t rollback : {uint64_t{0}, uint64_t{2}}) {
    for (const bool staged : {false, true}) {
      for (const uint64_t count : {uint64_t{1}, rollback + 1, uint64_t{9}}) {
        SCOPED_TRACE("rollback " + std::to_string(rollback) + (staged ? " staged" : "") +
                     ", a step of " + std::to_string(count));
        const LayerPlan plan = TwoOwnerPlan(rollback, staged);
        EXPECT_EQ(plan.StateBytes(), 3 * (rollback + (staged ? 2 : 1)) * (120u + 128u));
        Expected<KVCache<FlashLayout>> created = KVCache<FlashLayout>::Create(plan);
        ASSERT_TRUE(created.ok()) << created.error().message;
        KVCache<FlashLayout> cache = std::move(created).value();
        EXPECT_EQ(cache.AllocatedBytes(), plan.TotalBytes() + plan.StateBytes());
        TwoOwnerStep(&cache, 0, 5, 0, false);
        // Staged, the slot a step writes is never the one it starts from.
        if (staged) EXPECT_NE(cache.StateAfter(0, 6)->recurrent, cache.State(0)->recurrent);
        TwoOwnerStep(&cache, 5, count, 100, /*fail=*/true);
        ASSERT_EQ(cache.EndPos(), 5u);
        ASSERT_EQ(cache.AbandonStep().EndPos(), 5u);
        const bool survives = staged || count <= rollback;
        for (size_t layer : {size_t{0}, size_t{1}, size_t{3}}) {
          Expected<StateSlot> state = cache.State(layer);
          ASSERT_EQ(state.ok(), survives) << layer;
          if (survives) {
            EXPECT_TRUE(HoldsState(*state, layer, 5)) << layer;
          } else {
            EXPECT_NE(state.error().message.find("or was overwritten since"), std::string::npos)
                << state.error().message;
          }
        }
        if (!survives) continue;
        // A step abandoned before its first append (its state layers ran first): the states
        // it wrote are forgotten, the sequence stays where it is.
        for (uint64_t n = 6; n <= 5 + count; ++n) WriteState(*cache.StateAfter(0, n), 0, n + 100);
        ASSERT_EQ(cache.AbandonStep().EndPos(), 5u);
        EXPECT_FALSE(cache.State(0, 6).ok());
        EXPECT_TRUE(HoldsState(*cache.State(0), 0, 5));
        // The step again, whole: it continues from the state after 5 (checked in the pass),
        // and a rollback reaches as far back as the plan's, its states every position's.
        TwoOwnerStep(&cache, 5, count, 0, false);
        ASSERT_EQ(cache.EndPos(), 5 + count);
        const uint64_t back = std::min(rollback, count);
        ASSERT_TRUE(cache.Rollback(back).ok());
        for (size_t layer : {size_t{0}, size_t{1}, size_t{3}}) {
          EXPECT_TRUE(HoldsState(*cache.State(layer), layer, 5 + count - back)) << layer;
        }
      }
    }
  }
}

// A forward pass of `count` positions from `pos` through [recurrent, global, recurrent]: the
// global layer appends rows of value pos + 1 + i, each state layer writes the state after
// every position; `fail`: the pass stops before the last layer (after the last append).
void TrailingStep(KVCache<FlashLayout>* cache, uint64_t pos, uint64_t count, bool fail) {
  std::vector<float> k(count * 16), v(count * 16);
  for (uint64_t i = 0; i < count * 16; ++i) {
    k[i] = static_cast<float>(pos + 1 + i / 16);
    v[i] = -k[i];
  }
  for (size_t layer = 0; layer < 3; ++layer) {
    if (layer == 1) {
      ASSERT_TRUE(cache->AppendF32(1, pos, k.data(), v.data(), count).ok());
      continue;
    }
    if (fail && layer == 2) return;
    const StateSlot current = *cache->State(layer, pos);
    ASSERT_TRUE(pos == 0 ? current.recurrent[0] == 0 : HoldsState(current, layer, pos)) << layer;
    for (uint64_t n = pos + 1; n <= pos + count; ++n) {
      Expected<StateSlot> slot = cache->StateAfter(layer, n);
      ASSERT_TRUE(slot.ok()) << slot.error().message;
      WriteState(*slot, layer, n);
    }
  }
}

TEST(RecurrentState, AStepThatFailsAfterItsLastAppendIsAbandonedWhole) {
  // A recurrent layer after the last attention layer (Jamba's, Nemotron-H's last layers)
  // fails: every append of the step is in, its states are not. AbandonStep takes the whole
  // step back, the K/V of every owner and the states; staged (or a step within the rollback)
  // the sequence then reads as before the step and runs it again.
  for (const uint64_t rollback : {uint64_t{0}, uint64_t{2}}) {
    for (const bool staged : {false, true}) {
      for (const uint64_t count : {uint64_t{1}, uint64_t{9}}) {
        SCOPED_TRACE("rollback " + std::to_string(rollback) + (staged ? " staged" : "") +
                     ", a step of " + std::to_string(count));
        Expected<LayerPlan> plan = LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Recurrent(SmallState()))
                                       .AddLayer(LayerSpec::Global(1, 16))
                                       .AddLayer(LayerSpec::Recurrent(SmallState()))
                                       .SetContext(256)
                                       .SetBatch(16)
                                       .SetRollback(rollback)
                                       .SetStageStates(staged)
                                       .SetLayout<FlashLayout>()
                                       .Build();
        ASSERT_TRUE(plan.ok()) << plan.error().message;
        KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(*plan).value();
        TrailingStep(&cache, 0, 5, false);
        // A finished step is not abandoned: AbandonStep between steps keeps it.
        ASSERT_EQ(cache.AbandonStep().EndPos(), 5u);
        TrailingStep(&cache, 5, count, /*fail=*/true);
        ASSERT_EQ(cache.EndPos(), 5 + count);  // every append is in
        ASSERT_EQ(cache.AbandonStep().EndPos(), 5u);
        std::vector<float> k(16), v(16);
        for (uint64_t pos = 0; pos < 5; ++pos) {
          ASSERT_TRUE(cache.ReadRowF32(1, pos, k.data(), v.data()).ok());
          EXPECT_EQ(k[0], static_cast<float>(pos + 1));
        }
        EXPECT_FALSE(cache.ReadRowF32(1, 5, k.data(), v.data()).ok());
        EXPECT_TRUE(HoldsState(*cache.State(2), 2, 5));  // it wrote nothing
        const bool survives = staged || count <= rollback;
        ASSERT_EQ(cache.State(0).ok(), survives);
        if (!survives) continue;  // (the sequence must be recomputed, as State says)
        EXPECT_TRUE(HoldsState(*cache.State(0), 0, 5));
        TrailingStep(&cache, 5, count, false);
        ASSERT_EQ(cache.EndPos(), 5 + count);
        ASSERT_EQ(cache.AbandonStep().EndPos(), 5 + count);
        EXPECT_TRUE(HoldsState(*cache.State(2), 2, 5 + count));
        // Given the pass's start, even the finished step goes back (a later layer failed), its
        // states with it; then once more, whole.
        ASSERT_EQ(cache.AbandonStep(5).EndPos(), 5u);
        EXPECT_TRUE(HoldsState(*cache.State(0), 0, 5));
        EXPECT_TRUE(HoldsState(*cache.State(2), 2, 5));
        EXPECT_FALSE(cache.State(2, 5 + count).ok());
        TrailingStep(&cache, 5, count, false);
        ASSERT_EQ(cache.EndPos(), 5 + count);
        // A next step abandoned before its first append, even one whose first state layer
        // overwrote the state it started from (unstaged, rollback 0): the finished step stays.
        WriteState(*cache.StateAfter(0, 6 + count), 0, 6 + count);
        ASSERT_EQ(cache.AbandonStep().EndPos(), 5 + count);
        EXPECT_EQ(cache.State(0).ok(), staged || rollback > 0);
        EXPECT_TRUE(HoldsState(*cache.State(2), 2, 5 + count));
      }
    }
  }
}

TEST(RecurrentState, APlanOfRecurrentLayersOnlyIsRefused) {
  // (Pools and state files hold recurrent states: pool_states_test.cc,
  // state_io_recurrent_test.cc.)
  // A plan of recurrent layers only has no position to count.
  LayerPlan::Builder only;
  only.AddLayer(LayerSpec::Recurrent(SmallState()));
  const Expected<LayerPlan> recurrent = only.SetContext(64).SetBatch(4).Build();
  ASSERT_TRUE(recurrent.ok());
  EXPECT_FALSE(KVCache<FlashLayout>::Create(*recurrent).ok());
  PoolSpec spec;
  spec.budget_bytes = 64 << 20;
  spec.max_sequences = 4;
  const Expected<KVPool<FlashLayout>> pool = KVPool<FlashLayout>::Create(*recurrent, spec);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.error().field, "layers");
}

}  // namespace
}  // namespace kvring
