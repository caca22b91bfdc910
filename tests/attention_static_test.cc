// Attention by static dispatch (include kvring/ops/attention-inl.h and call it: the baseline
// target of the compiler flags), and the threading tests that ThreadSanitizer runs
// (CMakePresets.json "tsan" builds only this binary).
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvring/attention.h"
#include "kvring/ops/attention-inl.h"
#include "kvring/storage/kv_pool.h"
#include "reference/kv_fixture.h"
#include "reference/random_floats.h"
#include "reference/reference_attention.h"
#include "reference/started_threads.h"

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
  batch.head_dim = p.head_dim;
  kvring::AttentionOptions options;
  options.split_positions = 256;
  (void)history;
  kvring::AttentionWorkspace workspace;
  const kvring::Result result =
      pool != nullptr
          ? hn_kvring::Attention(s.View(p.visibility), batch, options, workspace, pool->Runner())
          : hn_kvring::Attention(s.View(p.visibility), batch, options, workspace,
                                 kvring_testing::StartedThreads(&num_threads));
  EXPECT_TRUE(result.ok()) << result.Message();
  return out;
}

std::vector<float> RandomQueries(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  kvring::testing::NormalFloats normal(0.0f, 1.0f);
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

// --- Checked calls: every bad argument is refused with a message naming it, and writes nothing.

// A sliding-window ring of 96 slots holding [224, 320), 8 q heads on 2 kv_heads of 64 dims.
struct CheckedCall {
  Problem p;
  History history;
  Storage<kvring::FlashLayout> ring;
  std::vector<float> queries, out;
  kvring::AttentionBatch batch;
  kvring::AttentionOptions options;

  CheckedCall() {
    p.group = 4;
    p.visibility = kvring::Visibility{AttentionKind::kSliding, 64};
    p.first_q_pos = 319;
    history = History::Random(p.num_kv_heads, p.head_dim, p.head_dim, 320, 21);
    ring = Storage<kvring::FlashLayout>::Make(history, 96, 320);
    queries = RandomQueries(p, 22);
    out.assign(queries.size(), -7.0f);
    batch.queries_f32 = queries.data();
    batch.out_f32 = out.data();
    batch.first_q_pos = p.first_q_pos;
    batch.num_queries = 1;
    batch.num_q_heads = p.num_kv_heads * p.group;
    batch.head_dim = p.head_dim;
  }
  kvring::KVView<kvring::FlashLayout> View() const { return ring.View(p.visibility); }
  // Runs the call and expects it refused with `status` and a message holding each of `words`,
  // with the output and the workspace untouched.
  void ExpectRefused(const kvring::KVView<kvring::FlashLayout>& view, kvring::Status status,
                     std::initializer_list<const char*> words) {
    kvring::AttentionWorkspace workspace;
    const kvring::Result result = hn_kvring::Attention(view, batch, options, workspace);
    EXPECT_EQ(result.status(), status) << result.Message();
    for (const char* word : words) {
      EXPECT_NE(result.Message().find(word), std::string::npos)
          << "'" << word << "' not in: " << result.Message();
    }
    EXPECT_EQ(kvring::CheckAttention(view, batch, options).status(), status);
    for (float x : out) ASSERT_EQ(x, -7.0f) << "a refused call wrote its output";
    EXPECT_EQ(workspace.NumFloats(), 0u) << "a refused call grew the workspace";
  }
};

// Sequences of a KVPool (paged global and ring sliding layers) of lengths across blocks,
// some forked, each given one decode query or a few queries, attended in one AttentionMany
// call per layer on 1, 2 and 3 threads (started per call, and a ThreadPool): each entry's
// output is bit-identical to an Attention call of that entry alone.
template <typename Layout>
void ManySequencesMatchOneCallEach() {
  const kvring::LayerPlan plan = kvring::LayerPlan::Builder()
                                     .AddLayer(kvring::LayerSpec::Sliding(80, 2, 64))
                                     .AddLayer(kvring::LayerSpec::Global(2, 64))
                                     .SetContext(2048)
                                     .SetBatch(16)
                                     .SetLayout<Layout>()
                                     .Build()
                                     .value();
  kvring::KVPool<Layout> pool =
      kvring::KVPool<Layout>::Create(plan, kvring::PoolSpec{32u << 20, 24, 0}).value();
  std::mt19937 rng(5);
  kvring::testing::NormalFloats normal(0.0f, 1.0f);
  std::vector<kvring::SequenceId> ids;
  std::vector<float> k(16 * 2 * 64), v(16 * 2 * 64);
  const auto step = [&](kvring::SequenceId id, uint64_t n) {
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    const uint64_t pos = *pool.EndPos(id);
    for (size_t layer = 0; layer < 2; ++layer) {
      ASSERT_TRUE(pool.AppendF32(id, layer, pos, k.data(), v.data(), n).ok());
    }
  };
  for (int i = 0; i < 16; ++i) {
    kvring::SequenceId id;
    ASSERT_TRUE(pool.AddSequence(&id).ok());
    const uint64_t length = 1 + rng() % 1400;
    for (uint64_t pos = 0; pos < length; pos += 16) step(id, std::min<uint64_t>(16, length - pos));
    ids.push_back(id);
    if (i % 4 == 3) {  // a fork that goes on differently
      kvring::SequenceId fork;
      ASSERT_TRUE(pool.Fork(id, &fork).ok());
      step(fork, 1 + rng() % 16);
      ids.push_back(fork);
    }
  }
  kvring::AttentionOptions options;
  options.split_positions = 256;  // long sequences split: merges in the call too
  for (size_t layer = 0; layer < 2; ++layer) {
    for (uint32_t queries : {1u, 3u}) {
      std::vector<kvring::AttentionEntry<Layout>> entries;
      std::vector<std::vector<float>> q(ids.size()), alone(ids.size()), together(ids.size());
      for (size_t e = 0; e < ids.size(); ++e) {
        const uint64_t end = *pool.EndPos(ids[e]);
        const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(queries, end));
        q[e].resize(size_t{n} * 8 * 64);
        for (float& x : q[e]) x = normal(rng);
        alone[e].assign(q[e].size(), -1.0f);
        together[e].assign(q[e].size(), -2.0f);
        kvring::AttentionEntry<Layout> entry;
        entry.kv = *pool.View(ids[e], layer);
        entry.batch.queries_f32 = q[e].data();
        entry.batch.out_f32 = alone[e].data();
        entry.batch.first_q_pos = end - n;
        entry.batch.num_queries = n;
        entry.batch.num_q_heads = 8;
        entry.batch.head_dim = 64;
        kvring::AttentionWorkspace workspace;
        ASSERT_TRUE(hn_kvring::Attention(entry.kv, entry.batch, options, workspace).ok());
        entry.batch.out_f32 = together[e].data();
        entries.push_back(entry);
      }
      kvring::ThreadPool thread_pool(2);
      for (uint32_t threads : {1u, 2u, 3u, 0u}) {  // 0: the ThreadPool
        kvring::AttentionWorkspace workspace;
        const kvring::Result result =
            threads == 0
                ? hn_kvring::AttentionMany(entries.data(), entries.size(), options, workspace,
                                           thread_pool.Runner())
                : hn_kvring::AttentionMany(entries.data(), entries.size(), options, workspace,
                                           kvring_testing::StartedThreads(&threads));
        ASSERT_TRUE(result.ok()) << result.Message();
        for (size_t e = 0; e < ids.size(); ++e) {
          ASSERT_EQ(std::memcmp(alone[e].data(), together[e].data(), alone[e].size() * 4), 0)
              << "entry " << e << " layer " << layer << " threads " << threads;
          std::fill(together[e].begin(), together[e].end(), -2.0f);
        }
      }
    }
  }
  // A refused entry refuses the call and writes nothing.
  std::vector<kvring::AttentionEntry<Layout>> bad(2);
  std::vector<float> q(8 * 64, 1.0f), out(8 * 64, 7.0f);
  for (auto& entry : bad) {
    entry.kv = *pool.View(ids[0], 1);
    entry.batch.queries_f32 = q.data();
    entry.batch.out_f32 = out.data();
    entry.batch.first_q_pos = *pool.EndPos(ids[0]) - 1;
    entry.batch.num_queries = 1;
    entry.batch.num_q_heads = 8;
    entry.batch.head_dim = 64;
  }
  bad[1].batch.num_q_heads = 3;
  kvring::AttentionWorkspace workspace;
  EXPECT_EQ(hn_kvring::AttentionMany(bad.data(), bad.size(), options, workspace,
                                     kvring::TaskRunner::Inline())
                .status(),
            kvring::Status::kBadArgument);
  EXPECT_EQ(out[0], 7.0f);
}

TEST(AttentionThreads, ManySequencesInOneCallMatchOneCallPerSequenceFlash) {
  ManySequencesMatchOneCallEach<kvring::FlashLayout>();
}
TEST(AttentionThreads, ManySequencesInOneCallMatchOneCallPerSequenceTiled) {
  ManySequencesMatchOneCallEach<kvring::TiledLayout<16>>();
}

TEST(AttentionChecks, AWellFormedCallIsAccepted) {
  CheckedCall call;
  kvring::AttentionWorkspace workspace;
  const kvring::Result result =
      hn_kvring::Attention(call.View(), call.batch, call.options, workspace);
  EXPECT_TRUE(result.ok()) << result.Message();
  EXPECT_GT(workspace.NumFloats(), 0u);
}

TEST(AttentionChecks, AQueryWhoseKVWasNeverAppendedIsRefusedNamingThePositions) {
  CheckedCall call;
  call.batch.first_q_pos = 320;
  call.ExpectRefused(call.View(), kvring::Status::kNotLive, {"320", "end"});
  call.batch.first_q_pos = 318;
  call.batch.num_queries = 3;  // 318, 319 held; 320 not
  call.ExpectRefused(call.View(), kvring::Status::kNotLive, {"318", "320"});
}

TEST(AttentionChecks, AQueryOlderThanTheRingHoldsIsRefused) {
  CheckedCall call;
  call.batch.first_q_pos = 100;  // the ring holds [224, 320)
  call.ExpectRefused(call.View(), kvring::Status::kNotLive, {"100", "224", "320"});
  // A query inside the ring whose window starts before it: 250 sees from 187.
  call.batch.first_q_pos = 250;
  call.ExpectRefused(call.View(), kvring::Status::kNotLive, {"250", "187", "224"});
}

TEST(AttentionChecks, HeadDimsTheKernelsCannotServeAreRefused) {
  for (uint32_t head_dim : {8u, 72u, 100u, 592u}) {
    CheckedCall call;
    kvring::KVShape shape = call.View().layout.Shape();
    shape.head_dim = head_dim;
    shape.v_head_dim = head_dim;
    kvring::KVView<kvring::FlashLayout> view = call.View();
    view.layout = kvring::FlashLayout(shape);
    call.ExpectRefused(view, kvring::Status::kBadArgument,
                       {"head_dim", std::to_string(head_dim).c_str()});
  }
}

TEST(AttentionChecks, QHeadsThatAreNotAMultipleOfTheKVHeadsAreRefused) {
  CheckedCall call;
  call.batch.num_q_heads = 7;
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"num_q_heads", "7", "2"});
  call.batch.num_q_heads = 0;
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"num_q_heads", "0"});
}

TEST(AttentionChecks, QueriesOfAnotherHeadSizeThanTheViewsAreRefused) {
  CheckedCall call;  // queries [8][64] over a head_dim of 64: accepted; any other size is not
  for (uint32_t head_dim : {0u, 32u, 128u}) {
    call.batch.head_dim = head_dim;
    call.ExpectRefused(
        call.View(), kvring::Status::kBadArgument,
        {"batch.head_dim", std::to_string(head_dim).c_str(), "view's head_dim is 64"});
  }
}

TEST(AttentionChecks, MissingOrDoubledPointersAreRefused) {
  CheckedCall call;
  std::vector<kvring::BF16> bf16(call.queries.size());
  call.batch.queries_f32 = nullptr;
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"queries_f32", "queries_bf16"});
  call.batch.queries_f32 = call.queries.data();
  call.batch.queries_bf16 = bf16.data();
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"queries_f32", "queries_bf16"});
  call.batch.queries_bf16 = nullptr;
  call.batch.out_f32 = nullptr;
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"out_f32", "out_bf16"});
  call.batch.out_f32 = call.out.data();
  kvring::KVView<kvring::FlashLayout> view = call.View();
  view.k = nullptr;
  call.ExpectRefused(view, kvring::Status::kBadArgument, {"view.k"});
}

TEST(AttentionChecks, RowStridesBelowARowAreRefused) {
  CheckedCall call;
  call.batch.q_row_stride = 8 * 64 - 1;
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"q_row_stride", "511", "512"});
  call.batch.q_row_stride = 0;
  call.batch.out_row_stride = 100;
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"out_row_stride", "100", "512"});
}

TEST(AttentionChecks, LatentValueDimsMustMatchTheView) {
  CheckedCall call;
  call.options.latent_v_dims = 32;  // the view has V
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"latent_v_dims", "32"});
  call.options.latent_v_dims = 0;
  kvring::KVView<kvring::FlashLayout> view = call.View();
  view.v = nullptr;  // a view without V must say how many dims its values take; this one's
                     // shape also still has a v_head_dim
  call.ExpectRefused(view, kvring::Status::kBadArgument, {"view.v", "64"});
}

TEST(AttentionChecks, AViewHoldingMoreThanItsSlotsOrBadOptionsAreRefused) {
  CheckedCall call;
  kvring::KVView<kvring::FlashLayout> view = call.View();
  view.first_pos = 100;  // 220 positions in 96 slots
  call.ExpectRefused(view, kvring::Status::kBadArgument, {"100", "320", "96"});
  call.options.soft_cap = -1.0f;
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"soft_cap"});
  call.options.soft_cap = 0.0f;
  call.options.products = static_cast<kvring::Products>(7);
  call.ExpectRefused(call.View(), kvring::Status::kBadArgument, {"options.products", "7"});
}

TEST(AttentionChecks, Int8ViewsWithoutTheirElementsOrScalesAreRefused) {
  CheckedCall call;
  const kvring::reference::Int8History q8 = kvring::reference::Int8History::Of(call.history);
  const auto int8 = kvring::reference::Int8Storage<kvring::FlashLayout>::Make(q8, 96, 320);
  const kvring::KVView<kvring::FlashLayout> view = int8.View(call.p.visibility);
  {
    kvring::AttentionWorkspace workspace;
    const kvring::Result result = hn_kvring::Attention(view, call.batch, call.options, workspace);
    EXPECT_TRUE(result.ok()) << result.Message();
    call.out.assign(call.out.size(), -7.0f);
  }
  kvring::KVView<kvring::FlashLayout> no_scales = view;
  no_scales.k_scales = nullptr;
  call.ExpectRefused(no_scales, kvring::Status::kBadArgument, {"k_int8", "k_scales"});
  kvring::KVView<kvring::FlashLayout> half_v = view;
  half_v.v_scales = nullptr;
  call.ExpectRefused(half_v, kvring::Status::kBadArgument, {"v_int8", "v_scales"});
  kvring::KVView<kvring::FlashLayout> bad_format = view;
  bad_format.format = static_cast<kvring::Format>(9);
  call.ExpectRefused(bad_format, kvring::Status::kBadArgument, {"format", "9"});
  kvring::KVView<kvring::FlashLayout> f32 = view;
  f32.format = kvring::Format::kF32;  // counted by plans, read by no kernel
  call.ExpectRefused(f32, kvring::Status::kBadArgument, {"view.format: 3", "accounting only"});
}

TEST(AttentionChecks, ACheckedPlanNamesTheRefusalForEnginesThatRunItemsThemselves) {
  CheckedCall call;
  const kvring::Expected<kvring::AttentionWork> good =
      kvring::AttentionWork::Checked(call.View(), call.batch, call.options);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_GT(good->NumItems(), 0u);
  call.batch.num_q_heads = 7;
  const kvring::Expected<kvring::AttentionWork> bad =
      kvring::AttentionWork::Checked(call.View(), call.batch, call.options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("num_q_heads: 7"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace kvring_test
