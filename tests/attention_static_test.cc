// Attention by static dispatch (include kvring/ops/attention-inl.h and call it: the baseline
// target of the compiler flags), and the threading tests that ThreadSanitizer runs
// (CMakePresets.json "tsan" builds only this binary).
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kvring/attention.h"
#include "kvring/ops/attention-inl.h"
#include "reference/kv_fixture.h"
#include "reference/reference_attention.h"

namespace kvring_test {
namespace {

namespace hn_kvring = kvring::HWY_NAMESPACE;
using kvring::AttentionKind;
using kvring::reference::History;
using kvring::reference::Storage;

struct Problem {
  uint32_t head_dim = 64, num_kv_heads = 2, group = 4, num_queries = 1;
  uint64_t first_q_pos = 1200;
  kvring::Visibility visibility{AttentionKind::kGlobal, 0};
};

// Attends on `num_threads` started threads, or on `pool` when it is set.
template <typename Layout>
std::vector<float> Attend(const Problem& p, const History& history, const Storage<Layout>& s,
                          const std::vector<float>& queries, uint32_t num_threads,
                          kvring::ThreadPool* pool = nullptr) {
  std::vector<float> out(size_t{p.num_queries} * p.num_kv_heads * p.group * p.head_dim);
  kvring::AttentionBatch batch;
  batch.queries_f32 = queries.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = p.first_q_pos;
  batch.num_queries = p.num_queries;
  batch.num_q_heads = p.num_kv_heads * p.group;
  kvring::AttentionOptions options;
  options.split_positions = 256;
  (void)history;
  if (pool != nullptr) {
    hn_kvring::AttentionOnThreads(s.View(p.visibility), batch, options, *pool);
  } else {
    hn_kvring::AttentionOnThreads(s.View(p.visibility), batch, options,
                                  kvring::AttentionThreads{num_threads});
  }
  return out;
}

std::vector<float> RandomQueries(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(size_t{p.num_queries} * p.num_kv_heads * p.group * p.head_dim);
  for (float& x : q) x = normal(rng);
  return q;
}

TEST(AttentionStatic, IncludeAndCallMatchesReference) {
  Problem p;
  p.num_queries = 7;
  p.visibility = kvring::Visibility{AttentionKind::kSliding, 200};
  const History history =
      History::Random(p.num_kv_heads, p.head_dim, p.head_dim, p.first_q_pos + p.num_queries, 3);
  const auto ring = Storage<kvring::FlashLayout>::Make(history, 224, p.first_q_pos + p.num_queries);
  const std::vector<float> q = RandomQueries(p, 4);
  const std::vector<float> out = Attend(p, history, ring, q, 1);
  kvring::reference::ReferenceOptions ro;
  ro.scale = kvring::AttentionScale(kvring::AttentionOptions(), p.head_dim);
  const std::vector<double> ref =
      kvring::reference::ReferenceAttention(history.Reference(), p.visibility, q, p.first_q_pos,
                                            p.num_queries, p.num_kv_heads * p.group, ro);
  for (size_t row = 0; row < out.size() / p.head_dim; ++row) {
    EXPECT_LE(kvring::reference::NormwiseRelativeError(&out[row * p.head_dim],
                                                       &ref[row * p.head_dim], p.head_dim),
              1e-3)
        << row;
  }
}

// Split decode and block prefill on 1..4 threads give the same bits (the item partition and
// merge order depend on positions only); ThreadSanitizer checks the helper and the items.
TEST(AttentionThreads, StaticDispatchIsBitIdenticalOnAnyThreadCount) {
  for (uint32_t num_queries : {1u, 40u}) {
    Problem p;
    p.num_queries = num_queries;
    const uint64_t end = p.first_q_pos + num_queries;
    const History history = History::Random(p.num_kv_heads, p.head_dim, p.head_dim, end, 9);
    const auto flash = Storage<kvring::FlashLayout>::Make(history, (end + 31) / 32 * 32, end);
    const auto tiled = Storage<kvring::TiledLayout<32>>::Make(history, (end + 31) / 32 * 32, end);
    const std::vector<float> q = RandomQueries(p, 10);
    const std::vector<float> flash_one = Attend(p, history, flash, q, 1);
    const std::vector<float> tiled_one = Attend(p, history, tiled, q, 1);
    for (uint32_t threads : {2u, 3u, 4u}) {
      const std::vector<float> a = Attend(p, history, flash, q, threads);
      const std::vector<float> b = Attend(p, history, tiled, q, threads);
      EXPECT_EQ(std::memcmp(a.data(), flash_one.data(), a.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(b.data(), tiled_one.data(), b.size() * sizeof(float)), 0);
    }
  }
}

// One pool serves many calls in a row (decode with KV splits and merges, prefill blocks, both
// layouts) and gives the bits of one thread; ThreadSanitizer checks the pool's hand-offs.
TEST(AttentionThreads, PoolGivesTheBitsOfOneThread) {
  kvring::ThreadPool pools[] = {kvring::ThreadPool(1), kvring::ThreadPool(2),
                                kvring::ThreadPool(3)};
  for (uint32_t num_queries : {1u, 3u, 40u}) {
    Problem p;
    p.num_queries = num_queries;
    p.visibility = kvring::Visibility{AttentionKind::kSliding, 700};
    const uint64_t end = p.first_q_pos + num_queries;
    const History history = History::Random(p.num_kv_heads, p.head_dim, p.head_dim, end, 11);
    const auto flash = Storage<kvring::FlashLayout>::Make(history, 768, end);
    const auto tiled = Storage<kvring::TiledLayout<16>>::Make(history, 768, end);
    const std::vector<float> q = RandomQueries(p, 12);
    const std::vector<float> flash_one = Attend(p, history, flash, q, 1);
    const std::vector<float> tiled_one = Attend(p, history, tiled, q, 1);
    for (kvring::ThreadPool& pool : pools) {
      for (int call = 0; call < 4; ++call) {
        const std::vector<float> a = Attend(p, history, flash, q, 0, &pool);
        const std::vector<float> b = Attend(p, history, tiled, q, 0, &pool);
        ASSERT_EQ(std::memcmp(a.data(), flash_one.data(), a.size() * sizeof(float)), 0)
            << pool.NumThreads() << " threads, call " << call;
        ASSERT_EQ(std::memcmp(b.data(), tiled_one.data(), b.size() * sizeof(float)), 0)
            << pool.NumThreads() << " threads, call " << call;
      }
    }
  }
}

}  // namespace
}  // namespace kvring_test
