// KVPool against a reference model: plain per-sequence vectors of every position's stored
// rows. Random operations over at least 32 live sequences (add, appends of random sizes across
// block and ring boundaries, forks of forks, rollbacks, clears, frees, ring resizes, pool
// exhaustion) keep every sequence's visible positions identical to the reference, refused
// calls change nothing, the accounting adds up after every step, and freeing every sequence
// frees every block.
#include "kvring/storage/kv_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kvring/formats/int8.h"
#include "kvring/kvring.h"
#include "kvring/views.h"
#include "reference/pool_model.h"
#include "reference/random_test_scale.h"

namespace kvring {
namespace {

#ifndef KVRING_POOL_TEST_STEPS
#define KVRING_POOL_TEST_STEPS 100000
#endif

using testing::PoolDriver;
using testing::PoolModel;
using testing::PoolTestPlan;

// Random choices for the driver.
class RandomChoices : public testing::ChoiceSource {
 public:
  explicit RandomChoices(uint64_t seed) : rng_(seed) {}
  uint64_t Below(uint64_t bound) override { return rng_() % bound; }

 private:
  std::mt19937_64 rng_;
};

template <typename Layout>
class KVPoolTest : public ::testing::Test {};
using PoolLayouts = ::testing::Types<FlashLayout, TiledLayout<16>>;
TYPED_TEST_SUITE(KVPoolTest, PoolLayouts);

// 100,000 random operations per layout (KVRING_POOL_TEST_STEPS), fewer under sanitizers.
template <typename Layout>
void RandomOperations(Format global_format, uint64_t all_steps, uint64_t seed, bool moves = false,
                      bool hybrid = false, bool dsa = false, bool staged = false) {
  // At least 5,000 steps under the sanitizers (tests/reference/random_test_scale.h).
  const uint64_t steps = testing::RandomTestSteps(all_steps, 5000);
  RandomChoices choices(seed);
  PoolDriver<Layout> driver(&choices, global_format, seed, moves, hybrid, dsa, staged);
  ASSERT_EQ(driver.Run(steps), "");
  if (staged) {
    // Steps abandoned part way, by the engine and by the budget (after a ring's append).
    EXPECT_GT(driver.failed_steps(), steps / 40);
    if (steps >= 10000) {
      EXPECT_GT(driver.refused_appends(), steps / 400) << "unreserved paged appends refused";
    }
  }
  if (moves) {
    EXPECT_GT(driver.moves(), steps / 100);  // SaveState of one sequence, LoadState into another
    return;
  }
  // (Shorter sanitizer runs may end before the pool first fills: ExhaustionIsRefused... below
  // covers that on its own.)
  if (steps >= 10000) EXPECT_GT(driver.refused_steps(), 0u) << "the budget never ran out";
  EXPECT_GT(driver.forks(), steps / 20);
  EXPECT_GT(driver.steps(), steps / 3);
}

TYPED_TEST(KVPoolTest, RandomOperationsMatchTheReference) {
  RandomOperations<TypeParam>(Format::kBF16, KVRING_POOL_TEST_STEPS, 7);
}

TYPED_TEST(KVPoolTest, RandomOperationsInt8Globals) {
  RandomOperations<TypeParam>(Format::kInt8, KVRING_POOL_TEST_STEPS / 5, 11);
}

// The same mix with a sequence saved (SaveState) and loaded into a new or a live one
// (LoadState) every 50 steps: shared blocks, smaller rings, budgets that refuse the blocks.
TYPED_TEST(KVPoolTest, RandomOperationsWithStateMoves) {
  RandomOperations<TypeParam>(Format::kBF16, KVRING_POOL_TEST_STEPS / 5, 13, /*moves=*/true);
}

// A hybrid plan (a chunked layer with a state, a recurrent layer): every step writes each
// position's states, every check reads the current one; moves carry them.
TYPED_TEST(KVPoolTest, RandomOperationsOfAHybridModel) {
  RandomOperations<TypeParam>(Format::kBF16, KVRING_POOL_TEST_STEPS / 5, 17, /*moves=*/true,
                              /*hybrid=*/true);
}

// The hybrid plan with staged states, every step run layer after layer as an engine runs it
// (states written when their layer's turn comes, before later appends): one step in four
// fails before a random layer or after the last one, and unreserved steps meet the budget
// after the sliding ring's append; AbandonStep (with the step's start or without) must leave
// each such sequence as it was, its states included, through forks, rollbacks and moves.
TYPED_TEST(KVPoolTest, RandomOperationsOfAHybridModelWithStagedStates) {
  RandomOperations<TypeParam>(Format::kBF16, KVRING_POOL_TEST_STEPS / 5, 29, /*moves=*/true,
                              /*hybrid=*/true, /*dsa=*/false, /*staged=*/true);
}

// DSA latents (a paged one and a ring), BF16 and int8: every check reads each position's
// indexer key beside its latent; forks share and copy the keys' blocks, moves carry them.
TYPED_TEST(KVPoolTest, RandomOperationsOfADsaModel) {
  RandomOperations<TypeParam>(Format::kBF16, KVRING_POOL_TEST_STEPS / 10, 19, /*moves=*/true,
                              /*hybrid=*/false, /*dsa=*/true);
  RandomOperations<TypeParam>(Format::kInt8, KVRING_POOL_TEST_STEPS / 10, 23, /*moves=*/true,
                              /*hybrid=*/false, /*dsa=*/true);
}

TYPED_TEST(KVPoolTest, ForkSharesBlocksAndCopiesOnWrite) {
  const LayerPlan plan = PoolTestPlan<TypeParam>(Format::kBF16, 8);
  PoolSpec spec{4ull << 20, 4, 2 * TypeParam::kTileSlots};
  PoolModel<TypeParam> model(plan, spec, 3);
  ASSERT_TRUE(model.Add(0));
  const uint64_t block_slots = model.Pool().BlockSlots();
  // 2.5 blocks of history, then a fork: every block shared, nothing copied.
  uint64_t pos = 0;
  while (pos < block_slots * 5 / 2) {
    ASSERT_TRUE(model.Step(0, 8, true));
    pos += 8;
  }
  const PoolUsage before = model.Pool().Usage();
  ASSERT_TRUE(model.Fork(0));
  PoolUsage after = model.Pool().Usage();
  EXPECT_EQ(after.blocks_in_use, before.blocks_in_use);
  EXPECT_EQ(after.shared_blocks, before.blocks_in_use);
  // The fork's first step copies the partly filled last block only, as ReserveBytes says.
  const SequenceId fork{1, 0};
  EXPECT_EQ(*model.Pool().ReserveBytes(fork, 1), after.block_bytes);
  ASSERT_TRUE(model.Step(1, 1, true));
  EXPECT_EQ(*model.Pool().ReserveBytes(fork, 1), 0u);
  after = model.Pool().Usage();
  EXPECT_EQ(after.blocks_in_use, before.blocks_in_use + 1);
  EXPECT_EQ(after.shared_blocks, before.blocks_in_use - 1);
  // The source's step writes its own block (no longer shared): no copy.
  ASSERT_TRUE(model.Step(0, 1, true));
  EXPECT_EQ(model.Pool().Usage().blocks_in_use, before.blocks_in_use + 1);
  model.CheckAll();
  model.CheckAccounting();
  model.FreeAll();
  EXPECT_EQ(model.Failure(), "");
}

TYPED_TEST(KVPoolTest, RefusalsNameTheFieldAndChangeNothing) {
  const LayerPlan plan = PoolTestPlan<TypeParam>(Format::kBF16, 8);
  Expected<KVPool<TypeParam>> no_sequences =
      KVPool<TypeParam>::Create(plan, PoolSpec{1 << 20, 0, 0});
  ASSERT_FALSE(no_sequences.ok());
  EXPECT_EQ(no_sequences.error().field, "max_sequences");
  Expected<KVPool<TypeParam>> tiny = KVPool<TypeParam>::Create(plan, PoolSpec{1000, 4, 0});
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.error().field, "budget_bytes");
  Expected<KVPool<TypeParam>> odd_block =
      KVPool<TypeParam>::Create(plan, PoolSpec{1 << 20, 4, TypeParam::kTileSlots + 1});
  ASSERT_FALSE(odd_block.ok());
  EXPECT_EQ(odd_block.error().field, "block_slots");
  Expected<KVPool<TypeParam>> other_layout = KVPool<TypeParam>::Create(
      PoolTestPlan<TiledLayout<32>>(Format::kBF16, 8), PoolSpec{1 << 20, 4, 0});
  EXPECT_FALSE(other_layout.ok());
  // Accounting-only formats: planned, never stored (the element type, or one layer's).
  const auto accounting_plan = [](Format element_type, Format global_format) {
    LayerSpec global = LayerSpec::Global(1, 32);
    global.format = global_format;
    return LayerPlan::Builder()
        .AddLayer(LayerSpec::Sliding(24, 2, 16))
        .AddLayer(global)
        .SetContext(320)
        .SetElementType(element_type)
        .SetLayout<TypeParam>()
        .Build();
  };
  const Expected<LayerPlan> f16 = accounting_plan(Format::kF16, Format::kBF16);
  ASSERT_TRUE(f16.ok()) << f16.error().message;
  EXPECT_EQ(KVPool<TypeParam>::Create(*f16, PoolSpec{1 << 20, 4, 0}).error().field,
            "runtime.element_type");
  const Expected<LayerPlan> fp8 = accounting_plan(Format::kBF16, Format::kFP8);
  ASSERT_TRUE(fp8.ok()) << fp8.error().message;
  const Error fp8_layer = KVPool<TypeParam>::Create(*fp8, PoolSpec{1 << 20, 4, 0}).error();
  EXPECT_EQ(fp8_layer.field, "layers[1].format");
  EXPECT_NE(fp8_layer.message.find("fp8 is for accounting only: a kvring pool"), std::string::npos)
      << fp8_layer.message;

  PoolModel<TypeParam> model(plan, PoolSpec{8ull << 20, 2, 0}, 5);
  KVPool<TypeParam>& pool = model.Pool();
  ASSERT_TRUE(model.Add(0));
  ASSERT_TRUE(model.Step(0, 8, true));
  const SequenceId id{0, 0};  // the first sequence a pool adds
  std::vector<float> k(64 * 32, 0.5f), v(64 * 32, 0.5f);
  EXPECT_EQ(pool.AppendF32(id, 2, 8, k.data(), v.data(), 1).status(), Status::kNotOwner);
  EXPECT_EQ(pool.AppendF32(id, 9, 8, k.data(), v.data(), 1).status(), Status::kBadArgument);
  EXPECT_EQ(pool.AppendF32(id, 0, 7, k.data(), v.data(), 1).status(), Status::kWrongPosition);
  EXPECT_EQ(pool.AppendF32(id, 0, 8, nullptr, v.data(), 1).status(), Status::kBadArgument);
  EXPECT_EQ(pool.AppendF32(id, 0, 8, k.data(), v.data(), 0).status(), Status::kEmptyBatch);
  EXPECT_EQ(pool.AppendF32(SequenceId{1, 0}, 0, 0, k.data(), v.data(), 1).status(),
            Status::kUnknownSequence);
  // A step begun: fork, shrink and rollback wait for it to finish.
  ASSERT_TRUE(pool.AppendF32(id, 0, 8, k.data(), v.data(), 1).ok());
  SequenceId fork;
  EXPECT_EQ(pool.Fork(id, &fork).status(), Status::kWrongPosition);
  EXPECT_EQ(pool.Rollback(id, 1).status(), Status::kWrongPosition);
  EXPECT_EQ(pool.Resize(id, 1).status(), Status::kWrongPosition);
  const Result ahead = pool.AppendF32(id, 0, 9, k.data(), v.data(), 1);
  EXPECT_EQ(ahead.status(), Status::kWrongPosition);
  EXPECT_NE(ahead.Message().find("layers[0]"), std::string::npos) << ahead.Message();
  EXPECT_EQ(pool.Rollback(id, 5).status(), Status::kWrongPosition);
  ASSERT_TRUE(pool.AppendF32(id, 1, 8, k.data(), v.data(), 1).ok());
  ASSERT_TRUE(pool.AppendF32(id, 3, 8, k.data(), v.data(), 1).ok());
  EXPECT_EQ(*pool.EndPos(id), 9u);
  const RollbackResult too_far = pool.Rollback(id, 5);
  EXPECT_EQ(too_far.status(), Status::kRollbackTooFar);
  EXPECT_EQ(too_far.EndPos(), 9u);
  EXPECT_EQ(pool.Resize(id, 0).status(), Status::kBadArgument);
  EXPECT_EQ(pool.AddSequence(nullptr).status(), Status::kBadArgument);
}

TYPED_TEST(KVPoolTest, ExhaustionIsRefusedUntilASequenceIsFreed) {
  const LayerPlan plan = PoolTestPlan<TypeParam>(Format::kBF16, 8);
  // Two sequences' rings and four blocks.
  const uint64_t block_slots = 2 * TypeParam::kTileSlots;
  Expected<KVPool<TypeParam>> sized =
      KVPool<TypeParam>::Create(plan, PoolSpec{4ull << 20, 1, block_slots});
  ASSERT_TRUE(sized.ok());
  PoolModel<TypeParam> model(
      plan, PoolSpec{2 * sized->RingBytesFor(8) + 4 * sized->Usage().block_bytes, 4, block_slots},
      9);
  ASSERT_TRUE(model.Add(0));
  ASSERT_TRUE(model.Add(0));
  uint64_t appended = 0;
  while (model.Step(0, 8, true)) appended += 8;
  EXPECT_EQ(appended, 4 * block_slots);
  EXPECT_FALSE(model.Add(0));  // every byte is in use: no room for a third sequence's rings
  EXPECT_EQ(model.Pool().Reserve(SequenceId{1, 0}, 1).status(), Status::kPoolExhausted);
  model.CheckAll();
  model.Free(0);
  EXPECT_TRUE(model.Step(0, 8, true));  // the survivor (sequence 1) steps now
  model.CheckAll();
  model.FreeAll();
  EXPECT_EQ(model.Failure(), "");
}

TYPED_TEST(KVPoolTest, DecodingSequencesShrinkTheirRings) {
  const LayerPlan plan = PoolTestPlan<TypeParam>(Format::kBF16, 64);
  PoolModel<TypeParam> model(plan, PoolSpec{4ull << 20, 2, 0}, 13);
  ASSERT_TRUE(model.Add(64));
  const uint64_t prefill = *model.Pool().RingBytesOf(SequenceId{0, 0});
  ASSERT_TRUE(model.Step(0, 64, true));
  model.Resize(0, 1);
  const uint64_t decode = *model.Pool().RingBytesOf(SequenceId{0, 0});
  EXPECT_LT(decode, prefill);
  EXPECT_EQ(decode, model.Pool().RingBytesFor(1));
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(model.Step(0, 1, false));
  model.Rollback(0, 4);
  model.CheckAll();
  model.CheckAccounting();
  EXPECT_EQ(model.Failure(), "");
}

// TileAt (views.h), the one home of tile addresses, against the rows as stored: for every
// tile of a wrapped ring, a flat-like paged global and an int8 paged global, each held
// lane's K and V elements (and int8 scales) at the tile's offsets are those ReadRowF32 gives.
TYPED_TEST(KVPoolTest, TileAtAddressesEveryHeldRowOfRingsAndBlocks) {
  constexpr uint64_t kTile = TypeParam::kTileSlots;
  for (Format format : {Format::kBF16, Format::kInt8}) {
    const LayerPlan plan = LayerPlan::Builder()
                               .AddLayer(LayerSpec::Sliding(40, 2, 32))
                               .AddLayer(LayerSpec::Global(2, 32))
                               .SetContext(1000)
                               .SetLayout<TypeParam>()
                               .SetFormat(AttentionKind::kGlobal, format)
                               .Build()
                               .value();
    KVPool<TypeParam> pool = KVPool<TypeParam>::Create(plan, PoolSpec{64ull << 20, 2, 0}).value();
    SequenceId id;
    ASSERT_TRUE(pool.AddSequence(&id).ok());
    std::vector<float> row(2 * 32);
    const uint64_t end = 300;  // the ring wraps; the global spans several blocks
    for (uint64_t pos = 0; pos < end; ++pos) {
      for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>((pos * 7 + i) % 61) - 30;
      for (size_t layer = 0; layer < 2; ++layer) {
        ASSERT_TRUE(pool.AppendF32(id, layer, pos, row.data(), row.data(), 1).ok());
      }
    }
    std::vector<float> k(2 * 32), v(2 * 32);
    for (size_t layer = 0; layer < 2; ++layer) {
      const KVView<TypeParam> kv = *pool.View(id, layer);
      const auto k_map = kv.layout.K();
      uint64_t tiles = 0;
      ForEachTile<kTile>(kv.first_pos, kv.end_pos, [&](uint64_t tile_pos) {
        ++tiles;
        for (uint32_t head = 0; head < 2; ++head) {
          const TileOffsets at = TileAt(kv, tile_pos, head);
          for (uint64_t lane = 0; lane < kTile; ++lane) {
            const uint64_t pos = tile_pos + lane;
            if (!kv.Holds(pos)) continue;
            ASSERT_TRUE(pool.ReadRowF32(id, layer, pos, k.data(), v.data()).ok());
            for (uint32_t dim = 0; dim < 32; ++dim) {
              // K of one tile: lanes consecutive, dims DimStride() apart; V: [slot][dim].
              const uint64_t k_at = at.k + lane + dim * k_map.DimStride();
              const uint64_t v_at = at.v + lane * 32 + dim;
              float stored_k, stored_v;
              if (kv.format == Format::kInt8) {
                stored_k = DecodeInt8(kv.k_scales[at.scales + lane], kv.k_int8[k_at]);
                stored_v = DecodeInt8(kv.v_scales[at.scales + lane], kv.v_int8[v_at]);
              } else {
                stored_k = BF16ToF32(kv.k[k_at]);
                stored_v = BF16ToF32(kv.v[v_at]);
              }
              ASSERT_EQ(stored_k, k[head * 32 + dim]) << layer << " " << pos << " " << dim;
              ASSERT_EQ(stored_v, v[head * 32 + dim]) << layer << " " << pos << " " << dim;
            }
          }
        }
      });
      EXPECT_EQ(tiles, (kv.end_pos - TileStart(kv.first_pos, kTile) + kTile - 1) / kTile);
      if (layer == 1) EXPECT_TRUE(kv.Paged());
      if (layer == 0) EXPECT_GT(kv.first_pos, 0u);  // wrapped
    }
  }
}

// A small hybrid plan for the tests below: sliding owner 0, global owner 1 (paged).
template <typename Layout>
LayerPlan HalfStepPlan() {
  return LayerPlan::Builder()
      .AddLayer(LayerSpec::Sliding(32, 2, 64))
      .AddLayer(LayerSpec::Global(2, 64))
      .SetContext(1024)
      .SetBatch(8)
      .SetRollback(4)
      .SetLayout<Layout>()
      .Build()
      .value();
}

// Rows of `num_tokens` tokens from `pos` of `layer`, different for every position and layer.
std::vector<float> RowsAt(size_t layer, uint64_t pos, uint64_t num_tokens) {
  std::vector<float> rows(num_tokens * 128);
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint64_t x = (layer * 7919 + pos * 128 + i) * 2654435761u;
    rows[i] = static_cast<float>(x % 2001) / 1000.0f - 1.0f;
  }
  return rows;
}

template <typename Layout>
Result AppendAt(KVPool<Layout>* pool, SequenceId id, size_t layer, uint64_t pos, uint64_t n) {
  const std::vector<float> rows = RowsAt(layer, pos, n);
  return pool->AppendF32(id, layer, pos, rows.data(), rows.data(), n);
}

TYPED_TEST(KVPoolTest, QueriesOfAFreedSequenceAreRefusedNotAnsweredWithZero) {
  KVPool<TypeParam> pool =
      KVPool<TypeParam>::Create(HalfStepPlan<TypeParam>(), PoolSpec{8u << 20, 4, 64}).value();
  SequenceId id, never{3, 0};
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  ASSERT_TRUE(AppendAt(&pool, id, 0, 0, 5).ok());
  ASSERT_TRUE(AppendAt(&pool, id, 1, 0, 5).ok());
  EXPECT_EQ(*pool.EndPos(id), 5u);
  EXPECT_EQ(*pool.EndPos(id, 1), 5u);
  EXPECT_EQ(pool.View(id, 2).status(), Status::kBadArgument);
  EXPECT_NE(pool.View(id, 2).Message().find("layers[2]"), std::string::npos);
  EXPECT_EQ(pool.FirstPos(id, 7).status(), Status::kBadArgument);
  ASSERT_TRUE(pool.Free(id).ok());
  for (SequenceId dead : {id, never}) {
    const std::string name = "sequence " + std::to_string(dead.index);
    const std::vector<std::pair<const char*, Result>> queries = {
        {"View", pool.View(dead, 0)},
        {"EndPos", pool.EndPos(dead)},
        {"EndPos(layer)", pool.EndPos(dead, 1)},
        {"FirstPos", pool.FirstPos(dead, 0)},
        {"BlocksOf", pool.BlocksOf(dead)},
        {"RingBytesOf", pool.RingBytesOf(dead)},
        {"ReserveBytes", pool.ReserveBytes(dead, 4)},
        {"AbandonStep", pool.AbandonStep(dead)},
        {"AbandonStep(start)", pool.AbandonStep(dead, 0)},
    };
    for (const auto& [query, result] : queries) {
      EXPECT_EQ(result.status(), Status::kUnknownSequence) << query;
      EXPECT_NE(result.Message().find(name), std::string::npos)
          << query << ": " << result.Message();
    }
  }
}

// A step refused part way (the budget ran out at the paged layer) leaves the owners at
// different ends; AbandonStep takes them back to the last end all reached, and the step
// retried after room is made stores exactly what a pool that never ran out stores. Given a
// pass's start, AbandonStep also takes a finished step back (a later layer failed).
TYPED_TEST(KVPoolTest, AStepRefusedPartWayIsAbandonedAndRetriedBitIdentically) {
  const LayerPlan plan = HalfStepPlan<TypeParam>();
  KVPool<TypeParam> twin = KVPool<TypeParam>::Create(plan, PoolSpec{64u << 20, 4, 64}).value();
  const uint64_t ring_bytes = twin.RingBytesFor(8), block_bytes = twin.Usage().block_bytes;
  KVPool<TypeParam> pool =
      KVPool<TypeParam>::Create(plan, PoolSpec{2 * ring_bytes + 3 * block_bytes, 4, 64}).value();
  SequenceId id, other, twin_id;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  ASSERT_TRUE(pool.AddSequence(&other).ok());
  ASSERT_TRUE(twin.AddSequence(&twin_id).ok());
  for (uint64_t pos = 0; pos < 64; pos += 8) {
    for (size_t layer : {0, 1}) {
      ASSERT_TRUE(AppendAt(&pool, id, layer, pos, 8).ok());
      ASSERT_TRUE(AppendAt(&twin, twin_id, layer, pos, 8).ok());
    }
  }
  for (uint64_t pos = 0; pos < 128; pos += 8) {  // the other sequence takes the last blocks
    for (size_t layer : {0, 1}) ASSERT_TRUE(AppendAt(&pool, other, layer, pos, 8).ok());
  }
  const uint64_t blocks_before = pool.Usage().blocks_in_use;
  // The step at 64: the ring takes it, the paged layer needs a block the budget lacks.
  ASSERT_TRUE(AppendAt(&pool, id, 0, 64, 8).ok());
  ASSERT_EQ(AppendAt(&pool, id, 1, 64, 8).status(), Status::kPoolExhausted);
  EXPECT_EQ(*pool.EndPos(id, 0), 72u);
  EXPECT_EQ(pool.Rollback(id, 8).status(), Status::kWrongPosition);
  const RollbackResult abandoned = pool.AbandonStep(id);
  ASSERT_TRUE(abandoned.ok()) << abandoned.Message();
  EXPECT_EQ(abandoned.EndPos(), 64u);
  EXPECT_EQ(*pool.EndPos(id, 0), 64u);
  EXPECT_EQ(*pool.EndPos(id, 1), 64u);
  EXPECT_EQ(pool.Usage().blocks_in_use, blocks_before);
  EXPECT_EQ(pool.AbandonStep(id).EndPos(), 64u);  // between steps: nothing to abandon
  EXPECT_EQ(pool.AbandonStep(id, 56).status(), Status::kWrongPosition);  // not its start
  // Room made, the step retried, and one more.
  ASSERT_TRUE(pool.Free(other).ok());
  for (uint64_t pos = 64; pos < 80; pos += 8) {
    ASSERT_TRUE(pool.Reserve(id, 8).ok());
    for (size_t layer : {0, 1}) {
      ASSERT_TRUE(AppendAt(&pool, id, layer, pos, 8).ok());
      ASSERT_TRUE(AppendAt(&twin, twin_id, layer, pos, 8).ok());
    }
  }
  // On to a block's end; then a step into the next block whose pass fails after its last
  // append (a later layer): given the pass's start, the finished step goes back and releases
  // its block, and runs again.
  const auto step = [&](uint64_t pos, bool in_twin) {
    ASSERT_TRUE(pool.Reserve(id, 8).ok());
    for (size_t layer : {0, 1}) {
      ASSERT_TRUE(AppendAt(&pool, id, layer, pos, 8).ok());
      if (in_twin) ASSERT_TRUE(AppendAt(&twin, twin_id, layer, pos, 8).ok());
    }
  };
  for (uint64_t pos = 80; pos < 128; pos += 8) step(pos, true);
  const uint64_t blocks_at_128 = pool.Usage().blocks_in_use;
  step(128, false);
  EXPECT_GT(pool.Usage().blocks_in_use, blocks_at_128);
  EXPECT_EQ(pool.AbandonStep(id).EndPos(), 136u);  // a finished step, as far as it can tell
  ASSERT_EQ(pool.AbandonStep(id, 128).EndPos(), 128u);
  EXPECT_EQ(*pool.EndPos(id, 1), 128u);
  EXPECT_EQ(pool.Usage().blocks_in_use, blocks_at_128);
  step(128, true);
  std::vector<float> k(128), v(128), twin_k(128), twin_v(128);
  for (size_t layer : {0, 1}) {
    ASSERT_EQ(*pool.FirstPos(id, layer), *twin.FirstPos(twin_id, layer));
    ASSERT_EQ(*pool.EndPos(id, layer), 136u);
    for (uint64_t pos = *pool.FirstPos(id, layer); pos < 136; ++pos) {
      ASSERT_TRUE(pool.ReadRowF32(id, layer, pos, k.data(), v.data()).ok());
      ASSERT_TRUE(twin.ReadRowF32(twin_id, layer, pos, twin_k.data(), twin_v.data()).ok());
      ASSERT_EQ(std::memcmp(k.data(), twin_k.data(), 128 * 4), 0) << layer << " " << pos;
      ASSERT_EQ(std::memcmp(v.data(), twin_v.data(), 128 * 4), 0) << layer << " " << pos;
    }
  }
}

}  // namespace
}  // namespace kvring
