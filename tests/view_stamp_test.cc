// Stale views (kv_view.h's ViewStamp): every call that ends a view of a KVPool sequence or of a
// KVCache makes CheckAttention, the first check of every attention entry point, refuse it with
// kStaleView naming the layer, the sequence and the call; calls that leave its rows where they
// were (writes to other sequences and forks, refused calls, moving a cache) keep it current.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kvring/attention/check.h"
#include "kvring/kv_view.h"
#include "kvring/kvring.h"

namespace kvring {
namespace {

template <typename Layout>
class ViewStampTest : public ::testing::Test {};
using Layouts = ::testing::Types<FlashLayout, TiledLayout<16>>;
TYPED_TEST_SUITE(ViewStampTest, Layouts);

// Sliding owner 0, global owner 1 (paged in a pool), consumer 2 reading 0.
template <typename Layout>
LayerPlan StampPlan() {
  return LayerPlan::Builder()
      .AddLayer(LayerSpec::Sliding(32, 2, 64))
      .AddLayer(LayerSpec::Global(2, 64))
      .AddLayer(LayerSpec::Sliding(32, 2, 64).SharedFrom(0))
      .SetContext(1024)
      .SetBatch(8)
      .SetRollback(4)
      .SetLayout<Layout>()
      .Build()
      .value();
}

// Returns CheckAttention of one query at the view's newest position.
template <typename Layout>
Result CheckOneQuery(const KVView<Layout>& view) {
  std::vector<float> q(4 * 64, 0.5f), out(4 * 64);
  AttentionBatch batch;
  batch.queries_f32 = q.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = view.end_pos - 1;
  batch.num_queries = 1;
  batch.num_q_heads = 4;
  batch.head_dim = 64;
  return CheckAttention(view, batch, AttentionOptions());
}

std::vector<float> Rows(uint64_t num_tokens) { return std::vector<float>(num_tokens * 128, 0.25f); }

// Appends `num_tokens` tokens to both owners of `id` at its end.
template <typename Layout>
void PoolStep(KVPool<Layout>* pool, SequenceId id, uint64_t num_tokens) {
  const std::vector<float> rows = Rows(num_tokens);
  const uint64_t pos = *pool->EndPos(id);
  for (size_t layer : {0, 1}) {
    ASSERT_TRUE(pool->AppendF32(id, layer, pos, rows.data(), rows.data(), num_tokens).ok());
  }
}

template <typename Layout>
void ExpectStale(const KVView<Layout>& view, const std::vector<std::string>& words,
                 const std::string& call) {
  const Result result = CheckOneQuery(view);
  ASSERT_EQ(result.status(), Status::kStaleView) << call << ": " << result.Message();
  for (const std::string& word : words) {
    EXPECT_NE(result.Message().find(word), std::string::npos)
        << call << ": \"" << word << "\" missing from " << result.Message();
  }
}

TYPED_TEST(ViewStampTest, EveryCallThatEndsAPoolViewMakesAttentionRefuseIt) {
  using Pool = KVPool<TypeParam>;
  struct Case {
    const char* call;
    std::function<void(Pool*, SequenceId)> run;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"an append to another layer",
       [](Pool* pool, SequenceId id) { PoolStep(pool, id, 1); },
       {"appended"}},
      {"Rollback",
       [](Pool* pool, SequenceId id) { ASSERT_TRUE(pool->Rollback(id, 2).ok()); },
       {"rolled back"}},
      {"Clear", [](Pool* pool, SequenceId id) { ASSERT_TRUE(pool->Clear(id).ok()); }, {"cleared"}},
      {"Resize",
       [](Pool* pool, SequenceId id) { ASSERT_TRUE(pool->Resize(id, 40).ok()); },
       {"resized"}},
      {"a Reserve that grows the rings",
       [](Pool* pool, SequenceId id) { ASSERT_TRUE(pool->Reserve(id, 24).ok()); },
       {"Reserve"}},
      {"a Reserve that takes a block",
       [](Pool* pool, SequenceId id) { ASSERT_TRUE(pool->Reserve(id, 8).ok()); },
       {"Reserve took or copied blocks"}},
      {"Free, then AddSequence in the same slot",
       [](Pool* pool, SequenceId id) {
         ASSERT_TRUE(pool->Free(id).ok());
         SequenceId next;
         ASSERT_TRUE(pool->AddSequence(&next).ok());
         ASSERT_EQ(next.index, id.index);
         PoolStep(pool, next, 60);
       },
       {"freed"}},
  };
  for (const Case& c : cases) {
    Pool pool = Pool::Create(StampPlan<TypeParam>(), PoolSpec{16u << 20, 4, 64}).value();
    SequenceId id;
    ASSERT_TRUE(pool.AddSequence(&id).ok());
    for (int i = 0; i < 8; ++i) PoolStep(&pool, id, 8);  // 64: the next 8 need a second block
    std::vector<KVView<TypeParam>> views;
    for (size_t layer = 0; layer < 3; ++layer) {
      views.push_back(*pool.View(id, layer));
      ASSERT_TRUE(CheckOneQuery(views.back()).ok()) << CheckOneQuery(views.back()).Message();
    }
    c.run(&pool, id);
    for (size_t layer = 0; layer < 3; ++layer) {
      std::vector<std::string> words = c.words;
      words.push_back("layers[" + std::to_string(layer) + "]");
      words.push_back("sequence " + std::to_string(id.index) + " (generation 0)");
      ExpectStale(views[layer], words, c.call);
    }
    // A view taken now is current again (unless the sequence is gone).
    if (pool.EndPos(id).ok() && *pool.EndPos(id) > 0) {
      EXPECT_TRUE(CheckOneQuery(*pool.View(id, 1)).ok()) << c.call;
    }
  }
}

TYPED_TEST(ViewStampTest, WritesElsewhereAndRefusedCallsLeaveAPoolViewCurrent) {
  using Pool = KVPool<TypeParam>;
  Pool pool = Pool::Create(StampPlan<TypeParam>(), PoolSpec{16u << 20, 4, 64}).value();
  SequenceId id, fork, other;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  for (int i = 0; i < 5; ++i) PoolStep(&pool, id, 8);  // 40: the fork shares a partial block
  const KVView<TypeParam> view = *pool.View(id, 1);
  ASSERT_TRUE(pool.Fork(id, &fork).ok());
  PoolStep(&pool, fork, 8);  // copies the shared block: the source keeps its own
  ASSERT_TRUE(pool.Rollback(fork, 3).ok());
  ASSERT_TRUE(pool.Resize(fork, 32).ok());
  ASSERT_TRUE(pool.AddSequence(&other).ok());
  PoolStep(&pool, other, 8);
  ASSERT_TRUE(pool.Free(other).ok());
  ASSERT_TRUE(pool.Free(fork).ok());
  // Refused calls on the sequence itself change nothing, its views included.
  const std::vector<float> rows = Rows(1);
  EXPECT_EQ(pool.AppendF32(id, 1, 39, rows.data(), rows.data(), 1).status(),
            Status::kWrongPosition);
  EXPECT_EQ(pool.Rollback(id, 5).status(), Status::kRollbackTooFar);
  EXPECT_EQ(pool.Resize(id, 0).status(), Status::kBadArgument);
  EXPECT_EQ(pool.Reserve(id, 2000).status(), Status::kContextFull);
  // A Reserve that needs nothing new (the block of 40..47 is its own) ends nothing either.
  ASSERT_TRUE(pool.Reserve(id, 8).ok());
  const Result result = CheckOneQuery(view);
  EXPECT_TRUE(result.ok()) << result.Message();
}

template <typename Layout>
void CacheStep(KVCache<Layout>* cache, uint64_t num_tokens) {
  const std::vector<float> rows = Rows(num_tokens);
  const uint64_t pos = cache->EndPos();
  for (size_t layer : {0, 1}) {
    ASSERT_TRUE(cache->AppendF32(layer, pos, rows.data(), rows.data(), num_tokens).ok());
  }
}

TYPED_TEST(ViewStampTest, EveryCallThatEndsACacheViewMakesAttentionRefuseIt) {
  using Cache = KVCache<TypeParam>;
  struct Case {
    const char* call;
    std::function<void(Cache*)> run;
    const char* words;
  };
  const std::vector<Case> cases = {
      {"an append", [](Cache* cache) { CacheStep(cache, 1); }, "appended"},
      {"Rollback", [](Cache* cache) { ASSERT_TRUE(cache->Rollback(2).ok()); }, "rolled back"},
      {"Clear", [](Cache* cache) { cache->Clear(); }, "cleared"},
      {"Grow", [](Cache* cache) { ASSERT_TRUE(cache->Grow(100).ok()); }, "Grow"},
      // Grows the rings first where they hold less (the first call that ends the view).
      {"an append of a larger batch", [](Cache* cache) { CacheStep(cache, 100); },
       "grew (Grow, or an append of a larger batch)"},
      {"a restore",
       [](Cache* cache) {
         Cache snapshot = cache->Copy().value();
         CacheStep(&snapshot, 2);
         *cache = std::move(snapshot);
       },
       "restore"},
  };
  for (const Case& c : cases) {
    Cache cache = Cache::Create(StampPlan<TypeParam>()).value();
    for (int i = 0; i < 5; ++i) CacheStep(&cache, 8);
    std::vector<KVView<TypeParam>> views;
    for (size_t layer = 0; layer < 3; ++layer) {
      views.push_back(cache.View(layer));
      ASSERT_TRUE(CheckOneQuery(views.back()).ok()) << CheckOneQuery(views.back()).Message();
    }
    c.run(&cache);
    for (size_t layer = 0; layer < 3; ++layer) {
      ExpectStale(views[layer], {c.words, "layers[" + std::to_string(layer) + "]"}, c.call);
    }
    if (cache.EndPos() > 0) EXPECT_TRUE(CheckOneQuery(cache.View(1)).ok()) << c.call;
  }
}

TYPED_TEST(ViewStampTest, MovingACacheOrWritingItsCopyKeepsItsViewsCurrent) {
  using Cache = KVCache<TypeParam>;
  Cache cache = Cache::Create(StampPlan<TypeParam>()).value();
  for (int i = 0; i < 5; ++i) CacheStep(&cache, 8);
  const KVView<TypeParam> view = cache.View(0);
  Cache copy = cache.Copy().value();
  CacheStep(&copy, 8);
  copy.Clear();
  EXPECT_TRUE(CheckOneQuery(view).ok());
  // A moved cache owns the same buffers: the views read them still.
  Cache moved = std::move(cache);
  EXPECT_TRUE(CheckOneQuery(view).ok());
  CacheStep(&moved, 1);
  ExpectStale(view, {"appended", "layers[0]"}, "an append to the moved cache");
}

TYPED_TEST(ViewStampTest, ARefusalNamesTheFirstCallThatEndedTheView) {
  KVCache<TypeParam> cache = KVCache<TypeParam>::Create(StampPlan<TypeParam>()).value();
  for (int i = 0; i < 5; ++i) CacheStep(&cache, 8);
  const KVView<TypeParam> view = cache.View(1);
  ASSERT_TRUE(cache.Rollback(1).ok());
  for (int i = 0; i < 3; ++i) CacheStep(&cache, 1);  // two appends each
  const std::vector<float> rows = Rows(1);
  ASSERT_TRUE(cache.AppendF32(0, 42, rows.data(), rows.data(), 1).ok());  // 8 calls since
  ExpectStale(view, {"rolled back"}, "a rollback, then appends");
  ASSERT_TRUE(cache.AppendF32(1, 42, rows.data(), rows.data(), 1).ok());
  ExpectStale(view, {"more than 8 times"}, "a rollback, then more appends than remembered");
  // A view taken inside a step (owner 1 ahead), then the step abandoned.
  ASSERT_TRUE(cache.AppendF32(1, 43, rows.data(), rows.data(), 1).ok());
  const KVView<TypeParam> in_step = cache.View(0);
  ASSERT_TRUE(CheckOneQuery(in_step).ok());
  ASSERT_EQ(cache.AbandonStep().EndPos(), 43u);
  ExpectStale(in_step, {"AbandonStep", "layers[0]"}, "AbandonStep");
}

TYPED_TEST(ViewStampTest, ARestoreEndsTheViewsOfBothCaches) {
  using Cache = KVCache<TypeParam>;
  Cache cache = Cache::Create(StampPlan<TypeParam>()).value();
  for (int i = 0; i < 5; ++i) CacheStep(&cache, 8);
  Cache snapshot = cache.Copy().value();
  const KVView<TypeParam> view = cache.View(1), snapshot_view = snapshot.View(1);
  cache = std::move(snapshot);
  ExpectStale(view, {"restore", "layers[1]"}, "the restored cache's view");
  ExpectStale(snapshot_view, {"restore", "layers[1]"}, "the moved snapshot's view");
  EXPECT_TRUE(CheckOneQuery(cache.View(1)).ok());
}

TEST(ViewStamp, AViewWithoutAStampIsNotChecked) {
  RingKV<FlashLayout> ring = RingKV<FlashLayout>::Create(StampPlan<FlashLayout>(), 0).value();
  const std::vector<float> rows = Rows(8);
  ASSERT_TRUE(ring.AppendF32(0, rows.data(), rows.data(), 8).ok());
  const KVView<FlashLayout> view = ring.View(Visibility{AttentionKind::kSliding, 32});
  EXPECT_EQ(view.stamp.epoch, nullptr);
  EXPECT_TRUE(CheckOneQuery(view).ok());
}

}  // namespace
}  // namespace kvring
