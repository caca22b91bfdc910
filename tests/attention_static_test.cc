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
#include "reference/kv_fixture.h"
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
