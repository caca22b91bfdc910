// Moving a KVPool sequence out and back in steps (kvring/io/state_steps.h): the steps write
// SaveState's bytes and load them back bit for bit while other sequences are written between
// them, each step moves at most 256 positions of one layer, and a sequence changed between
// steps stops the export or the import (kStaleView naming the call), leaving an import's
// sequence cleared.
#include "kvring/io/state_steps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kvring/io/state_io.h"
#include "kvring/kvring.h"

namespace kvring {
namespace {

const char kModel[] = "steps-model";

// A sliding owner (window 40), a global owner, a chunked int8 owner (chunk 24) and a consumer.
LayerPlan Plan() {
  LayerSpec chunked = LayerSpec::Chunked(24, 1, 32);
  chunked.format = Format::kInt8;
  Expected<LayerPlan> plan = LayerPlan::Builder()
                                 .AddLayer(LayerSpec::Sliding(40, 2, 32))
                                 .AddLayer(LayerSpec::Global(2, 64))
                                 .AddLayer(chunked)
                                 .AddLayer(LayerSpec::Sliding(16, 2, 32).SharedFrom(0))
                                 .SetContext(2048)
                                 .SetBatch(16)
                                 .SetLayout<TiledLayout<16>>()
                                 .Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.value();
}

KVPool<TiledLayout<16>> Pool(const LayerPlan& plan) {
  PoolSpec spec;
  spec.budget_bytes = 1 << 24;
  spec.max_sequences = 4;
  spec.block_slots = 64;
  return KVPool<TiledLayout<16>>::Create(plan, spec).value();
}

// Appends positions [from, to) to every owner of `id`, `step` tokens at a time.
void Append(KVPool<TiledLayout<16>>* pool, SequenceId id, uint64_t from, uint64_t to, float salt) {
  const LayerPlan& plan = pool->Plan();
  for (uint64_t pos = from; pos < to; pos += 16) {
    const uint64_t n = std::min<uint64_t>(16, to - pos);
    for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
      const LayerInfo& info = plan.Layer(layer);
      if (!info.OwnsKV()) continue;
      const KVShape shape = KVShape::Of(info.spec, info.num_slots);
      std::vector<float> k(n * shape.KRowElements()), v(n * shape.VRowElements());
      for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>((pos * 7 + i) % 23) + salt;
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((pos * 3 + i) % 19) - salt;
      ASSERT_TRUE(pool->AppendF32(id, layer, pos, k.data(), v.data(), n).ok());
    }
  }
}

std::vector<uint8_t> Saved(const KVPool<TiledLayout<16>>& pool, SequenceId id) {
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  EXPECT_TRUE(SaveState(pool, id, kModel, &sink).ok());
  return bytes;
}

// The steps a sequence's state takes: per owner, the 256-position chunks its range meets.
uint64_t StepsOf(const KVPool<TiledLayout<16>>& pool, SequenceId id) {
  uint64_t steps = 0;
  for (size_t layer = 0; layer < pool.NumLayers(); ++layer) {
    if (!pool.OwnsKV(layer)) continue;
    const uint64_t first = *pool.FirstPos(id, layer), end = *pool.EndPos(id, layer);
    steps += std::max<uint64_t>(1, (end + 255) / 256 - first / 256);
  }
  return steps;
}

TEST(StateSteps, AnExportAndAnImportInStepsMoveASequenceBitForBit) {
  const LayerPlan plan = Plan();
  KVPool<TiledLayout<16>> pool = Pool(plan);
  SequenceId idle, busy;
  ASSERT_TRUE(pool.AddSequence(&idle).ok());
  ASSERT_TRUE(pool.AddSequence(&busy).ok());
  Append(&pool, idle, 0, 1000, 0.5f);
  const std::vector<uint8_t> expected = Saved(pool, idle);

  // Out, a step at a time, while another sequence decodes between the steps.
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  SequenceExport<TiledLayout<16>> out;
  ASSERT_TRUE(SequenceExport<TiledLayout<16>>::Begin(pool, idle, kModel, &sink, &out).ok());
  uint64_t steps = 0, busy_end = 0;
  while (!out.Done()) {
    ASSERT_TRUE(out.Step().ok());
    ++steps;
    Append(&pool, busy, busy_end, busy_end + 1, 0.25f);
    ++busy_end;
  }
  EXPECT_EQ(steps, StepsOf(pool, idle));
  EXPECT_GE(steps, 6u);  // the global layer's 1000 positions alone take 4
  EXPECT_EQ(bytes, expected);
  ASSERT_TRUE(pool.Free(idle).ok());  // moved out

  // Back into a new sequence, a step at a time, the other sequence going on.
  SequenceId back;
  ASSERT_TRUE(pool.AddSequence(&back).ok());
  MemorySource source(bytes);
  SequenceImport<TiledLayout<16>> in;
  ASSERT_TRUE(SequenceImport<TiledLayout<16>>::Begin(&source, kModel, &pool, back, &in).ok());
  uint64_t in_steps = 0;
  while (!in.Done()) {
    const Result step = in.Step();
    ASSERT_TRUE(step.ok()) << step.Message();
    ++in_steps;
    Append(&pool, busy, busy_end, busy_end + 1, 0.25f);
    ++busy_end;
  }
  EXPECT_EQ(in_steps, steps);
  EXPECT_EQ(*pool.EndPos(back), 1000u);
  EXPECT_EQ(Saved(pool, back), expected);
  // And it goes on as the original would have: the same appends give the same state.
  KVPool<TiledLayout<16>> reference = Pool(plan);
  SequenceId same;
  ASSERT_TRUE(reference.AddSequence(&same).ok());
  Append(&reference, same, 0, 1000, 0.5f);
  Append(&reference, same, 1000, 1100, 0.5f);
  Append(&pool, back, 1000, 1100, 0.5f);
  EXPECT_EQ(Saved(pool, back), Saved(reference, same));
  // A SaveState loads through an import too, and an export through LoadState (checked above
  // by the bytes being SaveState's).
}

TEST(StateSteps, ASequenceChangedBetweenStepsStopsThem) {
  const LayerPlan plan = Plan();
  KVPool<TiledLayout<16>> pool = Pool(plan);
  SequenceId id;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  Append(&pool, id, 0, 600, 1.0f);
  const std::vector<uint8_t> state = Saved(pool, id);

  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  SequenceExport<TiledLayout<16>> out;
  ASSERT_TRUE(SequenceExport<TiledLayout<16>>::Begin(pool, id, kModel, &sink, &out).ok());
  ASSERT_TRUE(out.Step().ok());
  Append(&pool, id, 600, 601, 1.0f);
  Result stopped = out.Step();
  EXPECT_EQ(stopped.status(), Status::kStaleView);
  EXPECT_NE(stopped.Message().find("appended"), std::string::npos) << stopped.Message();
  EXPECT_TRUE(out.Done());
  EXPECT_EQ(out.Step().status(), Status::kStaleView);

  // An import whose sequence is cleared between steps stops, leaving it empty.
  MemorySource source(state);
  SequenceImport<TiledLayout<16>> in;
  ASSERT_TRUE(SequenceImport<TiledLayout<16>>::Begin(&source, kModel, &pool, id, &in).ok());
  ASSERT_TRUE(in.Step().ok());
  ASSERT_TRUE(pool.Resize(id, 32).ok());
  stopped = in.Step();
  EXPECT_EQ(stopped.status(), Status::kStaleView) << stopped.Message();
  EXPECT_NE(stopped.Message().find("resized"), std::string::npos) << stopped.Message();
  EXPECT_EQ(*pool.EndPos(id), 0u);
  EXPECT_EQ(pool.Usage().blocks_in_use, 0u);

  // One whose sequence is freed stops without touching the slot's next sequence.
  ASSERT_TRUE(SequenceImport<TiledLayout<16>>::Begin(&source, kModel, &pool, id, &in).ok());
  ASSERT_TRUE(pool.Free(id).ok());
  SequenceId next;
  ASSERT_TRUE(pool.AddSequence(&next).ok());
  Append(&pool, next, 0, 40, 2.0f);
  const std::vector<uint8_t> next_state = Saved(pool, next);
  stopped = in.Step();
  EXPECT_EQ(stopped.status(), Status::kStaleView) << stopped.Message();
  EXPECT_EQ(Saved(pool, next), next_state);

  // A bad state is refused at Begin, changing nothing.
  std::vector<uint8_t> damaged = state;
  damaged[damaged.size() / 2] ^= 1;
  MemorySource bad(damaged);
  EXPECT_EQ(SequenceImport<TiledLayout<16>>::Begin(&bad, kModel, &pool, next, &in).status(),
            Status::kBadState);
  EXPECT_EQ(Saved(pool, next), next_state);
  EXPECT_EQ(
      SequenceExport<TiledLayout<16>>::Begin(pool, SequenceId{}, kModel, &sink, &out).status(),
      Status::kUnknownSequence);
}

}  // namespace
}  // namespace kvring
