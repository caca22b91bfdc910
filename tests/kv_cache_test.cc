// Tests of kvring/storage/kv_cache.h: random operation sequences against a reference model for
// every layout, the plan's bytes equal to what is allocated for every preset, shared-KV consumers,
// whole-cache rollback, growth and snapshots, and refused calls that change nothing.
#include "kvring/storage/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "kvring/kvring.h"
#include "reference/random_test_scale.h"
#include "reference/storage_model.h"

namespace kvring {
namespace {

class RandomChoices : public testing::ChoiceSource {
 public:
  explicit RandomChoices(uint64_t seed) : rng_(seed) {}
  uint64_t Below(uint64_t bound) override {
    return std::uniform_int_distribution<uint64_t>(0, bound - 1)(rng_);
  }

 private:
  std::mt19937_64 rng_;
};

template <typename Layout>
class KVCacheTest : public ::testing::Test {};
using Layouts = ::testing::Types<FlashLayout, TiledLayout<8>, TiledLayout<16>, TiledLayout<32>,
                                 TiledLayout<64>>;
TYPED_TEST_SUITE(KVCacheTest, Layouts);

TYPED_TEST(KVCacheTest, RandomOperationsAgreeWithTheReferenceModel) {
  // 40 random models x 300 steps = 12,000 steps per layout, and 5 whose last layer is a DSA
  // latent; under the sanitizers (KVRING_RANDOM_TEST_DIVISOR) the first 1/n of the models, at
  // least 10 (3,000 steps), and 2 DSA ones.
  const uint64_t num_models = testing::RandomTestSteps(40, 10);
  const uint64_t dsa_models = testing::RandomTestSteps(5, 2);
  size_t appends = 0, wraps = 0, int8_appends = 0, indexer_appends = 0;
  for (uint64_t seed = 1; seed <= num_models + dsa_models; ++seed) {
    RandomChoices choices(seed * 7919 + TypeParam::kSlotAlignment);
    testing::StorageDriver<TypeParam> driver(&choices, /*dsa=*/seed > num_models);
    const std::string failure = driver.Run(300);
    ASSERT_EQ(failure, "") << "seed " << seed;
    appends += driver.num_appends();
    wraps += driver.num_wraps();
    int8_appends += driver.num_int8_appends();
    indexer_appends += driver.num_indexer_appends();
  }
  // The sequences do wrap the rings, many times.
  EXPECT_GT(appends, 125 * num_models);
  EXPECT_GT(wraps, 50 * num_models);
  // Some owners of the random plans are int8.
  EXPECT_GT(int8_appends, appends / 4);
  // Some latents keep DSA indexer keys.
  EXPECT_GT(indexer_appends, appends / 20);
}

LayerPlan PlanOf(LayerPlan::Builder builder, uint64_t context, uint64_t batch, uint64_t rollback,
                 Backend backend, uint32_t tile_rows) {
  RuntimeSpec runtime;
  runtime.context = context;
  runtime.batch = batch;
  runtime.rollback = rollback;
  runtime.backend = backend;
  runtime.tile_rows = tile_rows;
  Expected<LayerPlan> plan = builder.SetRuntime(runtime).Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.value();
}

// For the tests that create every preset's cache and free it before the next: glibc's mmap
// threshold would rise and each calloc clear memory the one before freed (under qemu-aarch64
// that clearing was 5.3 s of such a test's 5.6). A fixed threshold maps each large buffer
// afresh, as a first cache's are (what the tests check, the bytes allocated, does not change).
// This process only: ctest runs each test alone.
void MapEachLargeBufferAfresh() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

TYPED_TEST(KVCacheTest, AllocatesExactlyThePlanForEveryPreset) {
  MapEachLargeBufferAfresh();
  for (const ModelPreset& preset : ModelPresets()) {
    for (uint64_t context : {uint64_t{700}, uint64_t{5000}}) {
      const LayerPlan plan = PlanOf(BuilderFor(preset), context, 64, 8, TypeParam::kBackend,
                                    static_cast<uint32_t>(TypeParam::kSlotAlignment));
      Expected<KVCache<TypeParam>> cache = KVCache<TypeParam>::Create(plan);
      ASSERT_TRUE(cache.ok()) << preset.name << ": " << cache.error().message;
      // K/V and the hybrid presets' recurrent states.
      EXPECT_EQ(cache->AllocatedBytes(), plan.TotalBytes() + plan.StateBytes())
          << preset.name << " " << context;
      for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
        EXPECT_EQ(cache->Owner(layer), plan.Layer(layer).owner);
        if (plan.Layer(layer).OwnsKV()) {
          EXPECT_EQ(cache->View(layer).NumSlots(), plan.Layer(layer).num_slots);
          EXPECT_EQ(cache->IsFlat(layer), plan.Layer(layer).capacity == context);
        }
      }
    }
  }
}

// Gemma 3n style: layer 0 sliding (window 8), 1 global, 2 reads layer 0 with window 4,
// 3 reads layer 1 (global).
LayerPlan::Builder SharedModel() {
  return LayerPlan::Builder()
      .AddLayer(LayerSpec::Sliding(8, 2, 16))
      .AddLayer(LayerSpec::Global(2, 16))
      .AddLayer(LayerSpec::Sliding(4, 2, 16).SharedFrom(0))
      .AddLayer(LayerSpec::Global(2, 16).SharedFrom(1));
}

std::vector<float> Rows(uint64_t pos, uint64_t num_tokens, float layer) {
  std::vector<float> rows(num_tokens * 32);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = layer * 1000 + static_cast<float>(pos + i / 32) + static_cast<float>(i % 32) / 64;
  }
  return rows;
}

template <typename Layout>
void AppendStep(KVCache<Layout>* cache, uint64_t num_tokens) {
  for (size_t layer : {0u, 1u}) {
    const uint64_t pos = cache->EndPos(layer);
    const std::vector<float> k = Rows(pos, num_tokens, static_cast<float>(layer));
    ASSERT_EQ(cache->AppendF32(layer, pos, k.data(), k.data(), num_tokens), Status::kOk);
  }
}

TYPED_TEST(KVCacheTest, ConsumersReadTheirOwnersDataWithTheirOwnVisibility) {
  const LayerPlan plan = PlanOf(SharedModel(), 100, 4, 0, TypeParam::kBackend,
                                static_cast<uint32_t>(TypeParam::kSlotAlignment));
  KVCache<TypeParam> cache = KVCache<TypeParam>::Create(plan).value();
  for (int i = 0; i < 20; ++i) AppendStep(&cache, 3);
  const KVView<TypeParam> owner = cache.View(0), consumer = cache.View(2);
  EXPECT_EQ(consumer.k, owner.k);
  EXPECT_EQ(consumer.v, owner.v);
  EXPECT_EQ(consumer.visibility.span, 4u);
  EXPECT_EQ(owner.visibility.span, 8u);
  EXPECT_EQ(cache.View(3).k, cache.View(1).k);
  EXPECT_EQ(cache.View(3).visibility.kind, AttentionKind::kGlobal);
  std::vector<BF16> k(32), k_owner(32);
  ASSERT_EQ(cache.ReadRow(2, 57, k.data(), nullptr), Status::kOk);
  ASSERT_EQ(cache.ReadRow(0, 57, k_owner.data(), nullptr), Status::kOk);
  for (size_t e = 0; e < 32; ++e) EXPECT_EQ(k[e].bits, k_owner[e].bits);
  const std::vector<float> rows = Rows(60, 1, 0);
  EXPECT_EQ(cache.AppendF32(2, 60, rows.data(), rows.data(), 1), Status::kNotOwner);
  EXPECT_EQ(cache.AppendF32(9, 60, rows.data(), rows.data(), 1), Status::kBadArgument);
  EXPECT_EQ(cache.EndPos(2), 60u);
}

TYPED_TEST(KVCacheTest, RollbackIsAllOrNothing) {
  const LayerPlan plan = PlanOf(SharedModel(), 100, 4, 3, TypeParam::kBackend,
                                static_cast<uint32_t>(TypeParam::kSlotAlignment));
  KVCache<TypeParam> cache = KVCache<TypeParam>::Create(plan).value();
  AppendStep(&cache, 2);
  EXPECT_EQ(cache.Rollback(3), Status::kRollbackTooFar);  // layer 0 holds only 2
  EXPECT_EQ(cache.EndPos(0), 2u);
  EXPECT_EQ(cache.EndPos(1), 2u);
  for (int i = 0; i < 10; ++i) AppendStep(&cache, 4);
  EXPECT_EQ(cache.Rollback(4), Status::kRollbackTooFar);  // past the planned headroom
  EXPECT_EQ(cache.Rollback(3), Status::kOk);
  EXPECT_EQ(cache.EndPos(0), 39u);
  EXPECT_EQ(cache.EndPos(1), 39u);
}

TYPED_TEST(KVCacheTest, ALargerBatchGrowsEveryRingAndKeepsThePlanExact) {
  const LayerPlan plan = PlanOf(SharedModel(), 1000, 4, 0, TypeParam::kBackend,
                                static_cast<uint32_t>(TypeParam::kSlotAlignment));
  KVCache<TypeParam> cache = KVCache<TypeParam>::Create(plan).value();
  for (int i = 0; i < 30; ++i) AppendStep(&cache, 4);
  const BF16* global_k = cache.View(1).k;
  AppendStep(&cache, 100);  // grows layer 0 to 7 + 100 slots
  EXPECT_EQ(cache.Plan().Runtime().batch, 100u);
  EXPECT_GE(cache.View(0).NumSlots(), 107u);
  EXPECT_EQ(cache.View(1).k, global_k);  // the flat layer is untouched
  EXPECT_EQ(cache.AllocatedBytes(), cache.Plan().TotalBytes());
  std::vector<BF16> k(32);
  for (uint64_t pos = 220 - 7 - 100; pos < 220; ++pos) {
    ASSERT_EQ(cache.ReadRow(0, pos, k.data(), nullptr), Status::kOk) << pos;
    EXPECT_EQ(k[5].bits, BF16FromF32(Rows(pos, 1, 0)[5]).bits) << pos;
  }
  EXPECT_EQ(cache.Grow(5000), Status::kBadArgument);  // past the context
  const std::vector<float> rows = Rows(220, 800, 0);
  EXPECT_EQ(cache.AppendF32(0, 220, rows.data(), rows.data(), 800), Status::kContextFull);
  EXPECT_EQ(cache.Plan().Runtime().batch, 100u);  // the refused append grew nothing
}

TYPED_TEST(KVCacheTest, SnapshotIsIndependentAndClearKeepsTheBuffers) {
  const LayerPlan plan = PlanOf(SharedModel(), 200, 4, 0, TypeParam::kBackend,
                                static_cast<uint32_t>(TypeParam::kSlotAlignment));
  KVCache<TypeParam> cache = KVCache<TypeParam>::Create(plan).value();
  for (int i = 0; i < 10; ++i) AppendStep(&cache, 3);
  KVCache<TypeParam> snapshot = cache.Copy().value();
  EXPECT_NE(snapshot.View(0).k, cache.View(0).k);
  cache.Clear();
  AppendStep(&cache, 2);
  EXPECT_EQ(cache.EndPos(0), 2u);
  EXPECT_EQ(snapshot.EndPos(0), 30u);
  std::vector<BF16> k(32);
  ASSERT_EQ(snapshot.ReadRow(1, 0, k.data(), nullptr), Status::kOk);
  EXPECT_EQ(k[0].bits, BF16FromF32(Rows(0, 1, 1)[0]).bits);
  ASSERT_EQ(cache.ReadRow(0, 1, k.data(), nullptr), Status::kOk);
  EXPECT_EQ(k[0].bits, BF16FromF32(Rows(1, 1, 0)[0]).bits);
  EXPECT_EQ(cache.ReadRow(0, 5, k.data(), nullptr), Status::kNotLive);
  EXPECT_EQ(cache.AllocatedBytes(), plan.TotalBytes());
}

TEST(KVCache, ARefusedLargeAppendGrowsNothing) {
  const LayerPlan plan = PlanOf(SharedModel(), 4096, 1, 0, Backend::kFlash, 32);
  KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  const uint64_t bytes = cache.AllocatedBytes();
  const std::vector<float> rows = Rows(0, 100, 0);
  EXPECT_EQ(cache.AppendF32(0, 0, rows.data(), nullptr, 100), Status::kBadArgument);
  EXPECT_EQ(cache.AppendF32(0, 0, nullptr, rows.data(), 100), Status::kBadArgument);
  EXPECT_EQ(cache.AppendF32(0, 5, rows.data(), rows.data(), 100), Status::kWrongPosition);
  EXPECT_EQ(cache.Grow(0), Status::kBadArgument);
  EXPECT_EQ(cache.AllocatedBytes(), bytes);
  EXPECT_EQ(cache.Plan().Runtime().batch, 1u);
  EXPECT_EQ(cache.AppendF32(0, 0, rows.data(), rows.data(), 100), Status::kOk);  // grows
  EXPECT_EQ(cache.Plan().Runtime().batch, 100u);
  EXPECT_EQ(cache.AllocatedBytes(), cache.Plan().TotalBytes());
}

// Returns the K (and V) rows layer `layer` of `cache` holds, one vector per position of
// [FirstPos, EndPos), to see that a refused call changed none of them.
template <typename Layout>
std::vector<std::vector<uint16_t>> HeldRows(const KVCache<Layout>& cache, size_t layer) {
  std::vector<std::vector<uint16_t>> held;
  std::vector<BF16> k(32), v(32);
  for (uint64_t pos = cache.FirstPos(layer); pos < cache.EndPos(layer); ++pos) {
    EXPECT_EQ(cache.ReadRow(layer, pos, k.data(), v.data()), Status::kOk);
    held.emplace_back();
    for (const BF16& x : k) held.back().push_back(x.bits);
    for (const BF16& x : v) held.back().push_back(x.bits);
  }
  return held;
}

// Appends `num_tokens` rows to layer `layer` at its end.
template <typename Layout>
Result AppendTo(KVCache<Layout>* cache, size_t layer, uint64_t num_tokens) {
  const uint64_t pos = cache->EndPos(layer);
  const std::vector<float> rows = Rows(pos, num_tokens, static_cast<float>(layer));
  return cache->AppendF32(layer, pos, rows.data(), rows.data(), num_tokens);
}

TEST(KVCache, EndPosIsThePositionEveryOwningLayerHasReached) {
  const LayerPlan plan = PlanOf(SharedModel(), 100, 4, 4, Backend::kFlash, 32);
  KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  EXPECT_EQ(cache.EndPos(), 0u);
  for (int i = 0; i < 8; ++i) AppendStep(&cache, 4);
  EXPECT_EQ(cache.EndPos(), 32u);
  ASSERT_EQ(AppendTo(&cache, 0, 2), Status::kOk);  // a step begun
  EXPECT_EQ(cache.EndPos(), 32u);
  EXPECT_EQ(cache.EndPos(0), 34u);
  EXPECT_EQ(cache.EndPos(2), 34u);  // a consumer reports its owner's end
  EXPECT_EQ(cache.EndPos(1), 32u);
  ASSERT_EQ(AppendTo(&cache, 1, 2), Status::kOk);  // and finished
  EXPECT_EQ(cache.EndPos(), 34u);
}

TEST(KVCache, AppendToALayerAheadOfTheOthersIsRefusedNamingBoth) {
  const LayerPlan plan = PlanOf(SharedModel(), 100, 4, 4, Backend::kFlash, 32);
  KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  for (int i = 0; i < 8; ++i) AppendStep(&cache, 4);
  ASSERT_EQ(AppendTo(&cache, 0, 2), Status::kOk);
  const auto held0 = HeldRows(cache, 0), held1 = HeldRows(cache, 1);
  const uint64_t bytes = cache.AllocatedBytes();

  const Result ahead = AppendTo(&cache, 0, 1);
  EXPECT_EQ(ahead, Status::kWrongPosition);
  EXPECT_EQ(ahead.Message(),
            "WrongPosition: layers[0]: already at 34 while layers[1] is at 32; append the other "
            "owning layers up to it first");
  // Past the furthest layer, even in a batch larger than planned (which would grow first).
  const Result passing = AppendTo(&cache, 1, 3);
  EXPECT_EQ(passing, Status::kWrongPosition);
  EXPECT_EQ(passing.Message(),
            "WrongPosition: layers[1]: an append at 32 passes 34, where layers[0] is; append up "
            "to there to finish the step first");
  EXPECT_EQ(AppendTo(&cache, 1, 50), Status::kWrongPosition);
  const std::vector<float> rows = Rows(33, 1, 1);
  EXPECT_EQ(cache.AppendF32(1, 33, rows.data(), rows.data(), 1).Message(),
            "WrongPosition: layers[1]: append at 33, but its next position is 32");

  EXPECT_EQ(cache.EndPos(0), 34u);
  EXPECT_EQ(cache.EndPos(1), 32u);
  EXPECT_EQ(cache.AllocatedBytes(), bytes);
  EXPECT_EQ(cache.Plan().Runtime().batch, 4u);
  EXPECT_EQ(HeldRows(cache, 0), held0);
  EXPECT_EQ(HeldRows(cache, 1), held1);
  ASSERT_EQ(AppendTo(&cache, 1, 2), Status::kOk);  // the step done, any layer may go on
  EXPECT_EQ(AppendTo(&cache, 1, 4), Status::kOk);
  EXPECT_EQ(AppendTo(&cache, 0, 4), Status::kOk);
  EXPECT_EQ(cache.EndPos(), 38u);
}

TEST(KVCache, RollbackReturnsTheNewEnd) {
  const LayerPlan plan = PlanOf(SharedModel(), 100, 4, 3, Backend::kFlash, 32);
  KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  for (int i = 0; i < 10; ++i) AppendStep(&cache, 4);
  const RollbackResult rolled = cache.Rollback(3);
  ASSERT_TRUE(rolled.ok()) << rolled.Message();
  EXPECT_EQ(rolled.EndPos(), 37u);
  EXPECT_EQ(cache.EndPos(), 37u);
  const RollbackResult refused = cache.Rollback(4);
  EXPECT_EQ(refused, Status::kRollbackTooFar);
  EXPECT_EQ(refused.EndPos(), 37u);
  EXPECT_EQ(refused.Message(),
            "RollbackTooFar: layers[0]: rollback of 4 positions, but at most 3 are allowed now "
            "(planned headroom 3; the next query's window stays held)");
  EXPECT_EQ(cache.Rollback(0).EndPos(), 37u);
}

TEST(KVCache, RollbackInTheMiddleOfAStepIsRefused) {
  const LayerPlan plan = PlanOf(SharedModel(), 100, 4, 3, Backend::kFlash, 32);
  KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  for (int i = 0; i < 10; ++i) AppendStep(&cache, 4);
  ASSERT_EQ(AppendTo(&cache, 0, 1), Status::kOk);
  const auto held0 = HeldRows(cache, 0), held1 = HeldRows(cache, 1);
  const RollbackResult refused = cache.Rollback(1);
  EXPECT_EQ(refused, Status::kWrongPosition);
  EXPECT_EQ(refused.EndPos(), 40u);
  EXPECT_EQ(refused.Message(),
            "WrongPosition: rollback while layers[1] is at 40 and layers[0] at 41; append every "
            "owning layer to the same position first");
  EXPECT_EQ(cache.EndPos(0), 41u);
  EXPECT_EQ(cache.EndPos(1), 40u);
  EXPECT_EQ(HeldRows(cache, 0), held0);
  EXPECT_EQ(HeldRows(cache, 1), held1);
  ASSERT_EQ(AppendTo(&cache, 1, 1), Status::kOk);
  EXPECT_EQ(cache.Rollback(1).EndPos(), 40u);
}

// An engine that failed between the layers of a step (here: after owner 0 of two) abandons it
// and redoes it; the cache then stores exactly what a cache that never failed stores.
TEST(KVCache, AnUnfinishedStepIsAbandonedAndRedoneBitIdentically) {
  const LayerPlan plan = LayerPlan::Builder()
                             .AddLayer(LayerSpec::Sliding(32, 2, 64))
                             .AddLayer(LayerSpec::Global(2, 64))
                             .SetContext(512)
                             .SetBatch(8)
                             .SetRollback(4)
                             .SetLayout<FlashLayout>()
                             .Build()
                             .value();
  KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  KVCache<FlashLayout> twin = KVCache<FlashLayout>::Create(plan).value();
  const auto rows_at = [](size_t layer, uint64_t pos, uint64_t n) {
    std::vector<float> rows(n * 128);
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i] = static_cast<float>((layer * 7919 + pos * 128 + i) * 2654435761u % 2001) / 1000.0f;
    }
    return rows;
  };
  const auto append = [&](KVCache<FlashLayout>* kv, size_t layer, uint64_t pos, uint64_t n) {
    const std::vector<float> rows = rows_at(layer, pos, n);
    return kv->AppendF32(layer, pos, rows.data(), rows.data(), n);
  };
  for (uint64_t pos = 0; pos < 120; pos += 8) {
    for (size_t layer : {0, 1}) {
      ASSERT_TRUE(append(&cache, layer, pos, 8).ok());
      ASSERT_TRUE(append(&twin, layer, pos, 8).ok());
    }
  }
  // Half a step: owner 0 at 128 (its ring wrapped past what the step overwrote), owner 1 at 120;
  // then half of one again, in two appends of owner 1.
  ASSERT_TRUE(append(&cache, 0, 120, 8).ok());
  EXPECT_EQ(cache.Rollback(1).status(), Status::kWrongPosition);
  RollbackResult abandoned = cache.AbandonStep();
  ASSERT_TRUE(abandoned.ok());
  EXPECT_EQ(abandoned.EndPos(), 120u);
  EXPECT_EQ(cache.EndPos(0), 120u);
  ASSERT_TRUE(append(&cache, 1, 120, 8).ok());
  ASSERT_TRUE(append(&cache, 0, 120, 3).ok());
  abandoned = cache.AbandonStep();
  EXPECT_EQ(abandoned.EndPos(), 123u);  // the end every owner reached
  EXPECT_EQ(cache.EndPos(1), 123u);
  EXPECT_EQ(cache.AbandonStep().EndPos(), 123u);  // between steps: nothing to abandon
  ASSERT_TRUE(cache.Rollback(3).ok());
  for (uint64_t pos = 120; pos < 136; pos += 8) {
    for (size_t layer : {0, 1}) {
      ASSERT_TRUE(append(&cache, layer, pos, 8).ok());
      ASSERT_TRUE(append(&twin, layer, pos, 8).ok());
    }
  }
  // A pass that failed after its last append (a later layer, the head): the step is finished,
  // AbandonStep() keeps it; given the pass's start it takes the step back, whatever its
  // length. Another start is refused, naming it, and changes nothing.
  EXPECT_EQ(cache.AbandonStep().EndPos(), 136u);
  const RollbackResult wrong = cache.AbandonStep(130);
  EXPECT_EQ(wrong.status(), Status::kWrongPosition);
  EXPECT_NE(wrong.Message().find("start: 130"), std::string::npos) << wrong.Message();
  EXPECT_EQ(cache.EndPos(), 136u);
  EXPECT_EQ(cache.AbandonStep(136).EndPos(), 136u);  // a next pass that appended nothing
  ASSERT_EQ(cache.AbandonStep(128).EndPos(), 128u);
  EXPECT_EQ(cache.EndPos(0), 128u);
  EXPECT_EQ(cache.EndPos(1), 128u);
  for (size_t layer : {0, 1}) ASSERT_TRUE(append(&cache, layer, 128, 8).ok());
  std::vector<float> k(128), v(128), twin_k(128), twin_v(128);
  for (size_t layer : {0, 1}) {
    ASSERT_EQ(cache.FirstPos(layer), twin.FirstPos(layer));
    ASSERT_EQ(cache.EndPos(layer), 136u);
    for (uint64_t pos = cache.FirstPos(layer); pos < 136; ++pos) {
      ASSERT_TRUE(cache.ReadRowF32(layer, pos, k.data(), v.data()).ok());
      ASSERT_TRUE(twin.ReadRowF32(layer, pos, twin_k.data(), twin_v.data()).ok());
      ASSERT_EQ(std::memcmp(k.data(), twin_k.data(), 128 * 4), 0) << layer << " " << pos;
      ASSERT_EQ(std::memcmp(v.data(), twin_v.data(), 128 * 4), 0) << layer << " " << pos;
    }
  }
}

TEST(KVCache, RefusalsNameTheLayerAndTheValues) {
  const LayerPlan plan = PlanOf(SharedModel(), 100, 4, 3, Backend::kFlash, 32);
  KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  for (int i = 0; i < 24; ++i) AppendStep(&cache, 4);  // [0, 96) in flat layer 1
  const auto held0 = HeldRows(cache, 0), held1 = HeldRows(cache, 1);
  const std::vector<float> rows = Rows(96, 8, 0);
  EXPECT_EQ(cache.AppendF32(1, 96, rows.data(), rows.data(), 5).Message(),
            "ContextFull: layers[1]: append at 96 of 5 tokens passes the context of 100 "
            "positions");
  EXPECT_EQ(cache.AppendF32(7, 96, rows.data(), rows.data(), 1).Message(),
            "BadArgument: layers[7]: the model has 4 layers");
  EXPECT_EQ(cache.AppendF32(2, 96, rows.data(), rows.data(), 1).Message(),
            "NotOwner: layers[2] reads the KV of layers[0]; append to that owner");
  EXPECT_EQ(cache.AppendF32(0, 96, rows.data(), rows.data(), 1, {8, 0}).Message(),
            "BadArgument: layers[0]: append at 96: k row stride 8 is below the 32 elements of a "
            "K row (kv_heads x head_dim)");
  EXPECT_EQ(cache.AppendF32(0, 96, rows.data(), rows.data(), 1, {0, 31}).Message(),
            "BadArgument: layers[0]: append at 96: v row stride 31 is below the 32 elements of a "
            "V row (kv_heads x v_head_dim)");
  EXPECT_EQ(cache.AppendF32(0, 96, nullptr, rows.data(), 1).Message(),
            "BadArgument: layers[0]: append at 96: k is null");
  EXPECT_EQ(cache.AppendF32(0, 96, rows.data(), rows.data(), 0).Message(),
            "EmptyBatch: layers[0]: append at 96 of no tokens: a batch holds at least one");
  std::vector<BF16> k(32);
  EXPECT_EQ(cache.ReadRow(2, 50, k.data(), nullptr).Message(),
            "NotLive: layers[2]: read of 50, but the held positions are [" +
                std::to_string(cache.FirstPos(0)) + ", 96)");
  EXPECT_EQ(cache.ReadRow(1, 96, k.data(), nullptr), Status::kNotLive);
  EXPECT_EQ(cache.ReadRow(4, 0, k.data(), nullptr).Message(),
            "BadArgument: layers[4]: the model has 4 layers");
  EXPECT_EQ(cache.ReadRow(1, 0, nullptr, nullptr).Message(),
            "BadArgument: layers[1]: read of 0: k_out is null");
  EXPECT_EQ(cache.Grow(0).Message(),
            "BadArgument: grow to a batch of 0 tokens: a batch holds at least one");
  EXPECT_EQ(cache.Grow(101).Message(),
            "BadArgument: grow to a batch of 101 tokens: past the context of 100");
  EXPECT_EQ(cache.EndPos(), 96u);
  EXPECT_EQ(cache.Plan().Runtime().batch, 4u);
  EXPECT_EQ(HeldRows(cache, 0), held0);
  EXPECT_EQ(HeldRows(cache, 1), held1);
}

TYPED_TEST(KVCacheTest, ClearResetsEveryLayer) {
  const LayerPlan plan = PlanOf(SharedModel(), 200, 4, 0, TypeParam::kBackend,
                                static_cast<uint32_t>(TypeParam::kSlotAlignment));
  KVCache<TypeParam> cache = KVCache<TypeParam>::Create(plan).value();
  for (int i = 0; i < 10; ++i) AppendStep(&cache, 3);
  ASSERT_EQ(AppendTo(&cache, 0, 2), Status::kOk);  // even in the middle of a step
  cache.Clear();
  EXPECT_EQ(cache.EndPos(), 0u);
  for (size_t layer = 0; layer < cache.NumLayers(); ++layer) {
    EXPECT_EQ(cache.EndPos(layer), 0u);
    EXPECT_EQ(cache.FirstPos(layer), 0u);
  }
  EXPECT_EQ(AppendTo(&cache, 1, 3), Status::kOk);
}

// A model whose layer 0 is a ring (window 64) and layer 1 flat, each with 2 kv_heads of K
// head_dim 16 and V v_head_dim 32, and 4 query heads of 16: a fused row [q | k | v] holds
// 64 + 32 + 64 elements.
constexpr uint64_t kQDim = 64, kKDim = 32, kVDim = 64, kQKVDim = kQDim + kKDim + kVDim;

LayerPlan FusedModelPlan(Backend backend, uint32_t tile_rows) {
  LayerSpec sliding = LayerSpec::Sliding(64, 2, 16), global = LayerSpec::Global(2, 16);
  sliding.v_head_dim = global.v_head_dim = 32;
  return PlanOf(LayerPlan::Builder().AddLayer(sliding).AddLayer(global), 2000, 300, 0, backend,
                tile_rows);
}

template <typename Layout>
class KVCacheFusedTest : public ::testing::Test {};
using FusedLayouts = ::testing::Types<FlashLayout, TiledLayout<16>>;
TYPED_TEST_SUITE(KVCacheFusedTest, FusedLayouts);

TYPED_TEST(KVCacheFusedTest, FusedQKVRowsAreStoredAsTheSameRowsPacked) {
  const LayerPlan plan =
      FusedModelPlan(TypeParam::kBackend, static_cast<uint32_t>(TypeParam::kSlotAlignment));
  KVCache<TypeParam> fused = KVCache<TypeParam>::Create(plan).value();
  KVCache<TypeParam> packed = KVCache<TypeParam>::Create(plan).value();
  ASSERT_FALSE(fused.IsFlat(0));
  ASSERT_TRUE(fused.IsFlat(1));
  uint32_t seed = 7;
  const auto next = [&seed] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(seed >> 8) / 65536.0f - 128.0f;
  };
  // One token and 300 (streamed K lines into the ring, split where it wraps), f32 and BF16.
  const uint64_t batches[] = {1, 300, 1, 300, 300, 1, 300};
  for (size_t b = 0; b < sizeof(batches) / sizeof(batches[0]); ++b) {
    const uint64_t num_tokens = batches[b];
    for (size_t layer = 0; layer < 2; ++layer) {
      const uint64_t pos = fused.EndPos(layer);
      std::vector<float> qkv(num_tokens * kQKVDim);
      for (float& x : qkv) x = next();
      std::vector<float> k(num_tokens * kKDim), v(num_tokens * kVDim);
      for (uint64_t t = 0; t < num_tokens; ++t) {
        std::copy_n(qkv.data() + t * kQKVDim + kQDim, kKDim, k.data() + t * kKDim);
        std::copy_n(qkv.data() + t * kQKVDim + kQDim + kKDim, kVDim, v.data() + t * kVDim);
      }
      const RowStrides strides{kQKVDim, kQKVDim};
      if (b % 2 == 0) {
        ASSERT_EQ(fused.AppendF32(layer, pos, qkv.data() + kQDim, qkv.data() + kQDim + kKDim,
                                  num_tokens, strides),
                  Status::kOk);
        ASSERT_EQ(packed.AppendF32(layer, pos, k.data(), v.data(), num_tokens), Status::kOk);
      } else {
        std::vector<BF16> qkv16(qkv.size()), k16(k.size()), v16(v.size());
        std::transform(qkv.begin(), qkv.end(), qkv16.begin(), BF16FromF32);
        std::transform(k.begin(), k.end(), k16.begin(), BF16FromF32);
        std::transform(v.begin(), v.end(), v16.begin(), BF16FromF32);
        ASSERT_EQ(fused.AppendBF16(layer, pos, qkv16.data() + kQDim, qkv16.data() + kQDim + kKDim,
                                   num_tokens, strides),
                  Status::kOk);
        ASSERT_EQ(packed.AppendBF16(layer, pos, k16.data(), v16.data(), num_tokens), Status::kOk);
      }
    }
  }
  EXPECT_EQ(fused.EndPos(), 1203u);
  std::vector<BF16> k(kKDim), v(kVDim), k_packed(kKDim), v_packed(kVDim);
  for (size_t layer = 0; layer < 2; ++layer) {
    ASSERT_EQ(fused.FirstPos(layer), packed.FirstPos(layer));
    for (uint64_t pos = fused.FirstPos(layer); pos < fused.EndPos(layer); ++pos) {
      ASSERT_EQ(fused.ReadRow(layer, pos, k.data(), v.data()), Status::kOk);
      ASSERT_EQ(packed.ReadRow(layer, pos, k_packed.data(), v_packed.data()), Status::kOk);
      for (uint64_t e = 0; e < kKDim; ++e) ASSERT_EQ(k[e].bits, k_packed[e].bits) << pos;
      for (uint64_t e = 0; e < kVDim; ++e) ASSERT_EQ(v[e].bits, v_packed[e].bits) << pos;
    }
  }
}

// Returns the bytes the owning layers of `plan` take in their formats, worked out here: for
// each, num_slots x num_kv_heads x (RowBytes(format, head_dim) + RowBytes(format, v_head_dim)),
// the V term 0 without V (an MLA latent is one stream).
uint64_t BytesInFormats(const LayerPlan& plan) {
  uint64_t bytes = 0;
  for (const LayerInfo& layer : plan.Layers()) {
    if (!layer.OwnsKV()) continue;
    const KVShape shape = KVShape::Of(layer.spec, layer.num_slots);
    const Format format = layer.spec.format;
    bytes += layer.num_slots * shape.num_kv_heads *
             (RowBytes(format, shape.head_dim) +
              (shape.v_head_dim != 0 ? RowBytes(format, shape.v_head_dim) : 0));
  }
  return bytes;
}

LayerSpec Int8(LayerSpec spec) {
  spec.format = Format::kInt8;
  return spec;
}

// SharedModel with int8 owners: layer 0 sliding (window 8) int8, 1 global BF16 or int8, 2
// reads layer 0 with window 4, 3 reads layer 1.
LayerPlan::Builder Int8SharedModel(Format global_format) {
  LayerSpec global = LayerSpec::Global(2, 16);
  global.format = global_format;
  return LayerPlan::Builder()
      .AddLayer(Int8(LayerSpec::Sliding(8, 2, 16)))
      .AddLayer(global)
      .AddLayer(LayerSpec::Sliding(4, 2, 16).SharedFrom(0))
      .AddLayer(LayerSpec::Global(2, 16).SharedFrom(1));
}

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Checks that int8 layer `layer` of `cache` holds at `pos` the encoding of Rows(pos, 1,
// owner) (K and V alike), through ReadRowInt8, ReadRowF32 and its view.
template <typename Layout>
void ExpectInt8Row(const KVCache<Layout>& cache, size_t layer, uint64_t pos) {
  const std::vector<float> rows = Rows(pos, 1, static_cast<float>(cache.Owner(layer)));
  int8_t want[32];
  float want_scales[2];
  for (uint32_t h = 0; h < 2; ++h)
    want_scales[h] = EncodeInt8Row(rows.data() + 16 * h, 16, want + 16 * h);
  int8_t k[32], v[32];
  float k_scales[2], v_scales[2], k_f32[32], v_f32[32];
  ASSERT_EQ(cache.ReadRowInt8(layer, pos, k, k_scales, v, v_scales), Status::kOk) << pos;
  ASSERT_EQ(cache.ReadRowF32(layer, pos, k_f32, v_f32), Status::kOk) << pos;
  const KVView<Layout> view = cache.View(layer);
  ASSERT_EQ(view.format, Format::kInt8);
  const uint64_t slot = view.SlotOf(pos);
  for (uint32_t h = 0; h < 2; ++h) {
    ASSERT_EQ(Bits(k_scales[h]), Bits(want_scales[h])) << pos;
    ASSERT_EQ(Bits(v_scales[h]), Bits(want_scales[h])) << pos;
    ASSERT_EQ(Bits(view.k_scales[view.ScaleOffset(slot, h)]), Bits(want_scales[h])) << pos;
    ASSERT_EQ(Bits(view.v_scales[view.ScaleOffset(slot, h)]), Bits(want_scales[h])) << pos;
    for (uint32_t d = 0; d < 16; ++d) {
      const uint32_t e = 16 * h + d;
      ASSERT_EQ(k[e], want[e]) << pos << " " << e;
      ASSERT_EQ(v[e], want[e]) << pos << " " << e;
      ASSERT_EQ(view.k_int8[view.layout.K()(slot, h, d)], want[e]) << pos << " " << e;
      ASSERT_EQ(view.v_int8[view.layout.V()(slot, h, d)], want[e]) << pos << " " << e;
      ASSERT_EQ(Bits(k_f32[e]), Bits(DecodeInt8(want_scales[h], want[e]))) << pos;
      ASSERT_EQ(Bits(v_f32[e]), Bits(DecodeInt8(want_scales[h], want[e]))) << pos;
    }
  }
}

TYPED_TEST(KVCacheTest, Int8LayersStoreTheirEncodingBesideBF16Layers) {
  const LayerPlan plan = PlanOf(Int8SharedModel(Format::kBF16), 1000, 4, 3, TypeParam::kBackend,
                                static_cast<uint32_t>(TypeParam::kSlotAlignment));
  Expected<KVCache<TypeParam>> created = KVCache<TypeParam>::Create(plan);
  ASSERT_TRUE(created.ok()) << created.error().message;
  KVCache<TypeParam> cache = std::move(created).value();
  EXPECT_EQ(cache.GetFormat(0), Format::kInt8);
  EXPECT_EQ(cache.GetFormat(1), Format::kBF16);
  EXPECT_EQ(cache.GetFormat(2), Format::kInt8);  // a consumer reads its owner's format
  EXPECT_EQ(cache.AllocatedBytes(), BytesInFormats(plan));
  AppendStep(&cache, 1);
  for (int i = 0; i < 30; ++i) AppendStep(&cache, 4);  // wraps layer 0's ring
  AppendStep(&cache, 300);                             // grows it first
  EXPECT_EQ(cache.EndPos(), 421u);
  EXPECT_EQ(cache.AllocatedBytes(), BytesInFormats(cache.Plan()));
  for (uint64_t pos = cache.FirstPos(0); pos < cache.EndPos(0); ++pos) {
    ExpectInt8Row(cache, 0, pos);
    ExpectInt8Row(cache, 2, pos);  // the consumer reads the same rows
  }
  // Consumers read their owner's buffers and scales with their own visibility.
  const KVView<TypeParam> owner = cache.View(0), consumer = cache.View(2);
  EXPECT_EQ(consumer.k_int8, owner.k_int8);
  EXPECT_EQ(consumer.v_int8, owner.v_int8);
  EXPECT_EQ(consumer.k_scales, owner.k_scales);
  EXPECT_EQ(consumer.v_scales, owner.v_scales);
  EXPECT_EQ(owner.k, nullptr);
  EXPECT_EQ(owner.v, nullptr);
  EXPECT_EQ(consumer.visibility.span, 4u);
  // The BF16 layer is untouched by its neighbour's format: ReadRow and ReadRowF32 agree.
  EXPECT_EQ(cache.View(1).format, Format::kBF16);
  EXPECT_EQ(cache.View(1).k_int8, nullptr);
  std::vector<BF16> k16(32);
  std::vector<float> k_f32(32);
  ASSERT_EQ(cache.ReadRow(3, 17, k16.data(), nullptr), Status::kOk);
  ASSERT_EQ(cache.ReadRowF32(3, 17, k_f32.data(), nullptr), Status::kOk);
  for (size_t e = 0; e < 32; ++e) {
    EXPECT_EQ(k16[e].bits, BF16FromF32(Rows(17, 1, 1)[e]).bits);
    EXPECT_EQ(Bits(k_f32[e]), Bits(BF16ToF32(k16[e])));
  }
  // Reads in the other format are refused, naming the layer and pointing to the right read.
  const Result refused = cache.ReadRow(2, 420, k16.data(), nullptr);
  EXPECT_EQ(refused, Status::kBadArgument);
  EXPECT_NE(refused.Message().find("layers[2]"), std::string::npos) << refused.Message();
  EXPECT_NE(refused.Message().find("ReadRowInt8"), std::string::npos) << refused.Message();
  int8_t q[32];
  float scales[2];
  EXPECT_EQ(cache.ReadRowInt8(1, 17, q, scales, nullptr, nullptr), Status::kBadArgument);
  EXPECT_EQ(cache.ReadRowInt8(9, 17, q, scales, nullptr, nullptr), Status::kBadArgument);
  EXPECT_EQ(cache.ReadRowF32(9, 17, k_f32.data(), nullptr), Status::kBadArgument);
  EXPECT_EQ(cache.ReadRowInt8(0, 421, q, scales, nullptr, nullptr), Status::kNotLive);
  // Rollback, and the same positions appended again read back as before.
  ASSERT_EQ(cache.Rollback(3), Status::kOk);
  EXPECT_EQ(cache.ReadRowInt8(0, 418, q, scales, nullptr, nullptr), Status::kNotLive);
  AppendStep(&cache, 3);
  for (uint64_t pos = 410; pos < 421; ++pos) ExpectInt8Row(cache, 0, pos);
}

TYPED_TEST(KVCacheTest, Int8SnapshotIsIndependentAndClearForgetsEveryLayer) {
  const LayerPlan plan = PlanOf(Int8SharedModel(Format::kInt8), 200, 4, 0, TypeParam::kBackend,
                                static_cast<uint32_t>(TypeParam::kSlotAlignment));
  KVCache<TypeParam> cache = KVCache<TypeParam>::Create(plan).value();
  EXPECT_EQ(cache.AllocatedBytes(), BytesInFormats(plan));
  for (int i = 0; i < 10; ++i) AppendStep(&cache, 3);
  KVCache<TypeParam> snapshot = cache.Copy().value();
  EXPECT_NE(snapshot.View(0).k_int8, cache.View(0).k_int8);
  EXPECT_NE(snapshot.View(1).k_scales, cache.View(1).k_scales);
  EXPECT_EQ(snapshot.AllocatedBytes(), cache.AllocatedBytes());
  cache.Clear();
  EXPECT_EQ(cache.EndPos(), 0u);
  EXPECT_EQ(cache.AllocatedBytes(), BytesInFormats(plan));
  // Other values at positions the snapshot holds.
  for (size_t layer : {0u, 1u}) {
    const std::vector<float> rows(2 * 32, -7.0f);
    ASSERT_EQ(cache.AppendF32(layer, 0, rows.data(), rows.data(), 2), Status::kOk);
  }
  int8_t q[32];
  float scales[2];
  ASSERT_EQ(cache.ReadRowInt8(1, 1, q, scales, nullptr, nullptr), Status::kOk);
  EXPECT_EQ(scales[0], 7.0f / 127.0f);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(cache.ReadRowInt8(1, 2, q, scales, nullptr, nullptr), Status::kNotLive);
  EXPECT_EQ(snapshot.EndPos(), 30u);
  for (uint64_t pos = snapshot.FirstPos(0); pos < 30; ++pos) ExpectInt8Row(snapshot, 0, pos);
  for (uint64_t pos = 0; pos < 30; ++pos) ExpectInt8Row(snapshot, 3, pos);
}

TYPED_TEST(KVCacheTest, AllocatesExactlyTheInt8BytesForEveryPreset) {
  MapEachLargeBufferAfresh();
  for (const ModelPreset& preset : ModelPresets()) {
    LayerPlan::Builder builder;
    for (size_t i = 0; i < preset.layers.size(); ++i) {
      // Every other owner int8, so that formats mix.
      builder.AddLayer(i % 2 == 0 ? Int8(preset.layers[i]) : preset.layers[i]);
    }
    const LayerPlan plan = PlanOf(builder, 700, 64, 8, TypeParam::kBackend,
                                  static_cast<uint32_t>(TypeParam::kSlotAlignment));
    Expected<KVCache<TypeParam>> cache = KVCache<TypeParam>::Create(plan);
    ASSERT_TRUE(cache.ok()) << preset.name << ": " << cache.error().message;
    EXPECT_EQ(cache->AllocatedBytes(), BytesInFormats(plan) + plan.StateBytes()) << preset.name;
  }
}

TEST(KVCacheDeathTest, ViewOfALayerPastTheModelAborts) {
  const LayerPlan plan = PlanOf(SharedModel(), 100, 4, 0, Backend::kFlash, 32);
  const KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  EXPECT_DEATH((void)cache.View(4), "check failed");
}

TEST(KVCache, CreateRejectsAPlanForAnotherLayout) {
  const LayerPlan flash = PlanOf(SharedModel(), 100, 4, 0, Backend::kFlash, 16);
  EXPECT_EQ(KVCache<TiledLayout<16>>::Create(flash).error().field, "runtime.backend");
  const LayerPlan tiled = PlanOf(SharedModel(), 100, 4, 0, Backend::kTiled, 32);
  EXPECT_EQ(KVCache<TiledLayout<16>>::Create(tiled).error().field, "runtime.tile_rows");
  EXPECT_EQ(KVCache<FlashLayout>::Create(tiled).error().field, "runtime.backend");
  EXPECT_EQ(KVCache<FlashLayout>::Create(LayerPlan()).error().field, "plan");
  // Other element types are for accounting: a cache stores BF16, so its bytes would differ.
  Expected<LayerPlan> f32 =
      LayerPlan::Builder(SharedModel()).SetContext(100).SetElementType(ElementType::kF32).Build();
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(KVCache<FlashLayout>::Create(*f32).error().field, "runtime.element_type");
  // So is one layer's accounting-only format: the plan counts it, the cache refuses it by name.
  LayerSpec f16_global = LayerSpec::Global(2, 16);
  f16_global.format = Format::kF16;
  Expected<LayerPlan> f16 = LayerPlan::Builder()
                                .AddLayer(LayerSpec::Sliding(8, 2, 16))
                                .AddLayer(f16_global)
                                .SetContext(100)
                                .Build();
  ASSERT_TRUE(f16.ok()) << f16.error().message;
  const Error refused = KVCache<FlashLayout>::Create(*f16).error();
  EXPECT_EQ(refused.field, "layers[1].format");
  EXPECT_NE(refused.message.find("layers[1].format: f16 is for accounting only"), std::string::npos)
      << refused.message;
  // A DSA indexer key is stored beside an MLA latent (in its V stream); beside per-head K/V
  // (MLA expanded) caches and pools refuse it by name.
  Expected<LayerPlan> dsa = LayerPlan::Builder()
                                .AddLayer(LayerSpec::Latent(64))
                                .AddLayer(LayerSpec::Global(2, 32).WithIndexer(32))
                                .SetContext(100)
                                .Build();
  ASSERT_TRUE(dsa.ok()) << dsa.error().message;
  const Error no_indexer = KVCache<FlashLayout>::Create(*dsa).error();
  EXPECT_EQ(no_indexer.field, "layers[1].indexer_dim");
  EXPECT_NE(no_indexer.message.find("layers[1].indexer_dim: 32 is a DSA indexer key beside "
                                    "per-head K/V: a kvring cache keeps it beside an MLA latent "
                                    "only"),
            std::string::npos)
      << no_indexer.message;
  EXPECT_EQ(KVPool<FlashLayout>::Create(*dsa, PoolSpec{1 << 20, 4, 0}).error().field,
            "layers[1].indexer_dim");
}

TEST(KVCache, Int8PlansAllocateExactlyThePlansBytesScalesIncluded) {
  // int8 globals beside BF16 sliding layers, and a plan whose element type makes every layer
  // int8: the cache allocates what the plan counts, scales included (property 6).
  Expected<LayerPlan> int8 = LayerPlan::Builder(SharedModel())
                                 .SetContext(100)
                                 .SetFormat(AttentionKind::kGlobal, Format::kInt8)
                                 .Build();
  ASSERT_TRUE(int8.ok()) << int8.error().message;
  ASSERT_EQ(int8->Layer(1).spec.format, Format::kInt8);  // the global owner
  Expected<KVCache<FlashLayout>> cache = KVCache<FlashLayout>::Create(*int8);
  ASSERT_TRUE(cache.ok()) << cache.error().message;
  EXPECT_EQ(cache->AllocatedBytes(), int8->TotalBytes());
  EXPECT_EQ(cache->GetFormat(1), Format::kInt8);
  Expected<LayerPlan> all_int8 =
      LayerPlan::Builder(SharedModel()).SetContext(100).SetElementType(ElementType::kInt8).Build();
  ASSERT_TRUE(all_int8.ok());
  Expected<KVCache<FlashLayout>> all = KVCache<FlashLayout>::Create(*all_int8);
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->AllocatedBytes(), all_int8->TotalBytes());
  Expected<LayerPlan> bf16 = LayerPlan::Builder(SharedModel()).SetContext(100).Build();
  ASSERT_TRUE(bf16.ok());
  EXPECT_LT(all->AllocatedBytes(), KVCache<FlashLayout>::Create(*bf16).value().AllocatedBytes());
}

}  // namespace
}  // namespace kvring
