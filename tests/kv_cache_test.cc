// Tests of kvring/kv_cache.h: random operation sequences against a reference model for every
// layout, the plan's bytes equal to what is allocated for every preset, shared-KV consumers,
// whole-cache rollback, growth and snapshots, and refused calls that change nothing.
#include "kvring/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvring/kvring.h"
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
  // 40 random models x 300 steps = 12,000 steps per layout.
  size_t appends = 0, wraps = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    RandomChoices choices(seed * 7919 + TypeParam::kSlotAlignment);
    testing::StorageDriver<TypeParam> driver(&choices);
    const std::string failure = driver.Run(300);
    ASSERT_EQ(failure, "") << "seed " << seed;
    appends += driver.num_appends();
    wraps += driver.num_wraps();
  }
  // The sequences do wrap the rings, many times.
  EXPECT_GT(appends, 5000u);
  EXPECT_GT(wraps, 2000u);
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

TYPED_TEST(KVCacheTest, AllocatesExactlyThePlanForEveryPreset) {
  for (const ModelPreset& preset : ModelPresets()) {
    for (uint64_t context : {uint64_t{700}, uint64_t{5000}}) {
      const LayerPlan plan = PlanOf(BuilderFor(preset), context, 64, 8, TypeParam::kBackend,
                                    static_cast<uint32_t>(TypeParam::kSlotAlignment));
      Expected<KVCache<TypeParam>> cache = KVCache<TypeParam>::Create(plan);
      ASSERT_TRUE(cache.ok()) << preset.name << ": " << cache.error().message;
      EXPECT_EQ(cache->AllocatedBytes(), plan.TotalBytes()) << preset.name << " " << context;
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
}

}  // namespace
}  // namespace kvring
