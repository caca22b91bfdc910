// kvring/dispatch.h, linked from kvring::kernels: dynamic dispatch through plain functions,
// checked like the per-target calls, and a decode step (appends and attention on a thread
// pool, with a reused workspace) and a state load that allocate nothing. Counts every operator
// new of the process (kvring allocates through it or calloc; the workspace through aligned new).
#include "kvring/dispatch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvring/kvring.h"
#include "reference/random_floats.h"
#include "reference/reference_attention.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

// Every allocation of the process goes through these while the test binary runs.
// The replacements allocate with malloc and aligned_alloc and release with free, as they
// should; g++ warns about free in an operator delete regardless.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) std::abort();
  return p;
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new(size_t size, std::align_val_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = std::aligned_alloc(static_cast<size_t>(align), (size + static_cast<size_t>(align) - 1) /
                                                               static_cast<size_t>(align) *
                                                               static_cast<size_t>(align));
  if (p == nullptr) std::abort();
  return p;
}
void* operator new(size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::aligned_alloc(static_cast<size_t>(align), (size + static_cast<size_t>(align) - 1) /
                                                            static_cast<size_t>(align) *
                                                            static_cast<size_t>(align));
}
// The array forms too (the state writer's staging buffer is a nothrow new[]): every form
// that a delete below frees must come from malloc.
void* operator new[](size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void* operator new[](size_t size, std::align_val_t align) { return operator new(size, align); }
void* operator new[](size_t size, std::align_val_t align, const std::nothrow_t& tag) noexcept {
  return operator new(size, align, tag);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace kvring_test {
namespace {

// The toy engine of a new user: a sliding layer (window 64) and a global one, 8 q heads on 2
// kv_heads of 128 dims.
constexpr uint32_t kKVHeads = 2, kQHeads = 8, kDim = 128;

template <typename Layout>
kvring::KVCache<Layout> MakeCache() {
  kvring::LayerPlan::Builder builder;
  builder.AddLayer(kvring::LayerSpec::Sliding(64, kKVHeads, kDim))
      .AddLayer(kvring::LayerSpec::Global(kKVHeads, kDim))
      .SetContext(4096)
      .SetBatch(32);
  builder.SetLayout<Layout>();
  kvring::Expected<kvring::LayerPlan> plan = builder.Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return kvring::KVCache<Layout>::Create(*plan).value();
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  kvring::testing::NormalFloats normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

template <typename Layout>
void DecodeAllocatesNothing() {
  kvring::KVCache<Layout> cache = MakeCache<Layout>();
  kvring::ThreadPool pool(2);
  const kvring::TaskRunner runner = pool.Runner();
  kvring::AttentionWorkspace workspace;
  std::mt19937 rng(5);
  const size_t kv_row = size_t{kKVHeads} * kDim, q_row = size_t{kQHeads} * kDim;
  // Prefill 100 positions, then decode: rows of every step made before counting.
  const std::vector<float> prompt_k = Random(100 * kv_row, rng),
                           prompt_v = Random(100 * kv_row, rng);
  uint64_t pos = 0;
  // (The owning layers append in step: each batch to every layer before the next batch.)
  for (uint64_t first = 0; first < 100; first += 25) {
    for (size_t layer = 0; layer < 2; ++layer) {
      const kvring::Result appended = cache.AppendF32(
          layer, first, prompt_k.data() + first * kv_row, prompt_v.data() + first * kv_row, 25);
      ASSERT_TRUE(appended.ok()) << appended.Message();
    }
  }
  pos = 100;
  constexpr int kSteps = 40;
  const std::vector<float> k = Random(kSteps * kv_row, rng), v = Random(kSteps * kv_row, rng),
                           q = Random(kSteps * q_row, rng);
  std::vector<float> out(q_row);
  kvring::AttentionOptions options;
  options.split_positions = 32;  // long ranges split: partial states and merges too
  int growing_calls = 0;
  for (int step = 0; step < kSteps; ++step) {
    for (size_t layer = 0; layer < 2; ++layer) {
      const uint64_t before_append = g_allocations.load();
      ASSERT_EQ(cache.AppendF32(layer, pos, k.data() + step * kv_row, v.data() + step * kv_row, 1),
                kvring::Status::kOk);
      EXPECT_EQ(g_allocations.load() - before_append, 0u) << "an append allocated, step " << step;
      kvring::AttentionBatch batch;
      batch.queries_f32 = q.data() + step * q_row;
      batch.out_f32 = out.data();
      batch.first_q_pos = pos;
      batch.num_queries = 1;
      batch.num_q_heads = kQHeads;
      batch.head_dim = kDim;
      const uint64_t before = g_allocations.load();
      const uint64_t floats_before = workspace.NumFloats();
      const kvring::Result result =
          kvring::Attention(cache.View(layer), batch, options, workspace, runner);
      ASSERT_TRUE(result.ok()) << result.Message();
      // A call allocates exactly when the workspace grows: the first call of each layer's
      // shape, and a call whose global range reaches one more KV split (more partial states).
      const bool grew = workspace.NumFloats() != floats_before;
      growing_calls += grew;
      EXPECT_EQ(g_allocations.load() - before, grew ? 1u : 0u)
          << "step " << step << " layer " << layer;
      for (float x : out) ASSERT_TRUE(std::isfinite(x));
    }
    ++pos;
  }
  EXPECT_LE(growing_calls, 4) << "the workspace grew on most calls";
  // Reserved up front for the longest call, the steps allocate nothing at all.
  kvring::AttentionWorkspace reserved;
  ASSERT_TRUE(reserved.Reserve(1u << 20));
  const uint64_t before = g_allocations.load();
  for (int step = 0; step < 8; ++step) {
    for (size_t layer = 0; layer < 2; ++layer) {
      kvring::AttentionBatch batch;
      batch.queries_f32 = q.data() + step * q_row;
      batch.out_f32 = out.data();
      batch.first_q_pos = pos - 1;
      batch.num_queries = 1;
      batch.num_q_heads = kQHeads;
      batch.head_dim = kDim;
      ASSERT_TRUE(kvring::Attention(cache.View(layer), batch, options, reserved, runner).ok());
    }
  }
  EXPECT_EQ(g_allocations.load() - before, 0u);
}

TEST(Dispatch, ADecodeStepOnAThreadPoolAllocatesNothingFlash) {
  DecodeAllocatesNothing<kvring::FlashLayout>();
}
TEST(Dispatch, ADecodeStepOnAThreadPoolAllocatesNothingTiled) {
  DecodeAllocatesNothing<kvring::TiledLayout<16>>();
}

// Loading a saved state into a cache, or into a pool sequence that held as many blocks
// before, allocates nothing: nor does a refused load (a damaged state).
TEST(Dispatch, LoadingAStateAllocatesNothing) {
  kvring::KVCache<kvring::FlashLayout> source = MakeCache<kvring::FlashLayout>();
  std::mt19937 rng(9);
  const size_t kv_row = size_t{kKVHeads} * kDim;
  const std::vector<float> k = Random(300 * kv_row, rng), v = Random(300 * kv_row, rng);
  for (uint64_t first = 0; first < 300; first += 30) {
    for (size_t layer = 0; layer < 2; ++layer) {
      ASSERT_TRUE(
          source.AppendF32(layer, first, k.data() + first * kv_row, v.data() + first * kv_row, 30)
              .ok());
    }
  }
  std::vector<uint8_t> bytes, damaged;
  kvring::VectorSink sink(&bytes);
  ASSERT_TRUE(kvring::SaveState(source, "m", &sink).ok());
  damaged = bytes;
  damaged[bytes.size() / 2] ^= 4;
  kvring::MemorySource good(bytes), bad(damaged);

  kvring::KVCache<kvring::FlashLayout> cache = MakeCache<kvring::FlashLayout>();
  uint64_t before = g_allocations.load();
  EXPECT_EQ(kvring::LoadState(&bad, "m", &cache), kvring::Status::kBadState);
  const kvring::Result loaded = kvring::LoadState(&good, "m", &cache);
  EXPECT_EQ(g_allocations.load() - before, 0u) << "a cache load allocated";
  ASSERT_TRUE(loaded.ok()) << loaded.Message();
  EXPECT_EQ(cache.EndPos(), 300u);

  kvring::PoolSpec spec;
  spec.budget_bytes = 64ull << 20;
  spec.max_sequences = 2;
  kvring::KVPool<kvring::FlashLayout> pool =
      kvring::KVPool<kvring::FlashLayout>::Create(source.Plan(), spec).value();
  kvring::SequenceId id;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  ASSERT_TRUE(kvring::LoadState(&good, "m", &pool, id).ok());  // the table's entries grow once
  before = g_allocations.load();
  EXPECT_EQ(kvring::LoadState(&bad, "m", &pool, id), kvring::Status::kBadState);
  const kvring::Result again = kvring::LoadState(&good, "m", &pool, id);
  EXPECT_EQ(g_allocations.load() - before, 0u) << "a pool load allocated";
  ASSERT_TRUE(again.ok()) << again.Message();
  EXPECT_EQ(*pool.EndPos(id), 300u);
}

TEST(Dispatch, TheDispatchedCallMatchesTheReferenceAndRefusesBadCalls) {
  kvring::KVCache<kvring::FlashLayout> cache = MakeCache<kvring::FlashLayout>();
  std::mt19937 rng(9);
  const size_t kv_row = size_t{kKVHeads} * kDim, q_row = size_t{kQHeads} * kDim;
  constexpr uint64_t kEnd = 300;  // the sliding ring (64 - 1 + 32, padded) has wrapped
  const std::vector<float> k = Random(kEnd * kv_row, rng), v = Random(kEnd * kv_row, rng);
  for (uint64_t first = 0; first < kEnd; first += 20) {
    for (size_t layer = 0; layer < 2; ++layer) {
      const kvring::Result appended =
          cache.AppendF32(layer, first, k.data() + first * kv_row, v.data() + first * kv_row, 20);
      ASSERT_TRUE(appended.ok()) << appended.Message();
    }
  }
  const std::vector<float> q = Random(q_row, rng);
  std::vector<float> out(q_row);
  kvring::AttentionBatch batch;
  batch.queries_f32 = q.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = kEnd - 1;
  batch.num_queries = 1;
  batch.num_q_heads = kQHeads;
  batch.head_dim = kDim;
  kvring::AttentionWorkspace workspace;
  ASSERT_TRUE(kvring::Attention(cache.View(0), batch, kvring::AttentionOptions(), workspace).ok());
  // The float64 reference over the BF16 rows the cache stores.
  kvring::reference::ReferenceKV ref;
  ref.num_kv_heads = kKVHeads;
  ref.head_dim = kDim;
  ref.v_head_dim = kDim;
  const auto stored = [](const std::vector<float>& rows) {
    return [&rows](uint64_t pos, uint32_t kv_head, uint32_t dim) {
      return kvring::BF16ToF32(kvring::BF16FromF32(rows[(pos * kKVHeads + kv_head) * kDim + dim]));
    };
  };
  ref.k = stored(k);
  ref.v = stored(v);
  kvring::reference::ReferenceOptions ro;
  ro.scale = 1.0 / std::sqrt(double{kDim});
  const std::vector<double> expected = kvring::reference::ReferenceAttention(
      ref, cache.View(0).visibility, q, kEnd - 1, 1, kQHeads, ro);
  for (uint32_t head = 0; head < kQHeads; ++head) {
    EXPECT_LE(
        kvring::reference::NormwiseRelativeError(&out[head * kDim], &expected[head * kDim], kDim),
        1e-3);
  }
  // A query past the end is refused through dispatch too, naming the positions.
  batch.first_q_pos = kEnd;
  const kvring::Result refused =
      kvring::Attention(cache.View(1), batch, kvring::AttentionOptions(), workspace);
  EXPECT_EQ(refused.status(), kvring::Status::kNotLive);
  EXPECT_NE(refused.Message().find("300"), std::string::npos) << refused.Message();
  EXPECT_NE(std::string(kvring::DispatchedTargetName()), "");
}

// A pool of 32 sequences of a sliding and a global layer, each prefilled to its own length.
struct ManySequences {
  kvring::KVPool<kvring::FlashLayout> pool;
  std::vector<kvring::SequenceId> ids;
  std::vector<float> rows;

  explicit ManySequences(uint64_t context) {
    const kvring::LayerPlan plan = kvring::LayerPlan::Builder()
                                       .AddLayer(kvring::LayerSpec::Sliding(64, kKVHeads, kDim))
                                       .AddLayer(kvring::LayerSpec::Global(kKVHeads, kDim))
                                       .SetContext(context)
                                       .SetBatch(32)
                                       .SetLayout<kvring::FlashLayout>()
                                       .Build()
                                       .value();
    pool = kvring::KVPool<kvring::FlashLayout>::Create(plan, kvring::PoolSpec{256u << 20, 32, 0})
               .value();
    std::mt19937 rng(11);
    rows = Random(32 * size_t{kKVHeads} * kDim, rng);
    for (uint64_t i = 0; i < 32; ++i) {
      kvring::SequenceId id;
      EXPECT_TRUE(pool.AddSequence(&id).ok());
      const uint64_t length = 1 + i * 97 % (context / 2);
      for (uint64_t pos = 0; pos < length; pos += 32)
        Append(id, std::min<uint64_t>(32, length - pos));
      EXPECT_TRUE(pool.Resize(id, 1).ok());  // decode from now on
      ids.push_back(id);
    }
  }
  // Appends num_tokens (at most 32: the rows held) to both layers of `id`.
  void Append(kvring::SequenceId id, uint64_t num_tokens) {
    ASSERT_LE(num_tokens, 32u);
    const uint64_t pos = *pool.EndPos(id);
    for (size_t layer = 0; layer < 2; ++layer) {
      EXPECT_TRUE(pool.AppendF32(id, layer, pos, rows.data(), rows.data(), num_tokens).ok());
    }
  }
};

TEST(Dispatch, AManySequenceDecodeLoopAllocatesNothingAfterReservingTheBound) {
  ManySequences many(2048);
  kvring::ThreadPool threads(2);
  const kvring::TaskRunner runner = threads.Runner();
  kvring::AttentionOptions options;
  options.split_positions = 128;  // many splits: partial states for every long sequence
  kvring::AttentionBound bound;
  bound.num_q_heads = kQHeads;
  bound.context = 2048;
  bound.max_entries = 32;
  bound.num_threads = runner.NumThreads();
  const kvring::ValueResult<uint64_t> floats =
      kvring::AttentionWorkspaceFloats<kvring::FlashLayout>(
          kvring::KVShape{0, kKVHeads, kDim, kDim}, options, bound);
  ASSERT_TRUE(floats.ok()) << floats.Message();
  kvring::AttentionWorkspace workspace;
  ASSERT_TRUE(workspace.Reserve(*floats));
  std::mt19937 rng(12);
  const std::vector<float> q = Random(32 * size_t{kQHeads} * kDim, rng);
  std::vector<float> out(q.size());
  std::vector<kvring::AttentionEntry<kvring::FlashLayout>> entries(32);
  for (int step = 0; step < 3; ++step) {
    for (kvring::SequenceId id : many.ids) many.Append(id, 1);
    for (size_t layer = 0; layer < 2; ++layer) {
      for (size_t e = 0; e < 32; ++e) {
        entries[e].kv = *many.pool.View(many.ids[e], layer);
        kvring::AttentionBatch& batch = entries[e].batch;
        batch.queries_f32 = q.data() + e * kQHeads * kDim;
        batch.out_f32 = out.data() + e * kQHeads * kDim;
        batch.first_q_pos = entries[e].kv.end_pos - 1;
        batch.num_queries = 1;
        batch.num_q_heads = kQHeads;
        batch.head_dim = kDim;
      }
      const uint64_t before = g_allocations.load();
      const kvring::Result result =
          kvring::AttentionMany(entries.data(), entries.size(), options, workspace, runner);
      EXPECT_EQ(g_allocations.load() - before, 0u) << "step " << step << " layer " << layer;
      ASSERT_TRUE(result.ok()) << result.Message();
      EXPECT_EQ(workspace.NumFloats(), *floats);
    }
  }
  // The bound is what the largest call takes: 32 entries, each a query at the context's end.
  ManySequences full(256);
  for (kvring::SequenceId id : full.ids) {
    while (*full.pool.EndPos(id) < 256)
      full.Append(id, std::min<uint64_t>(32, 256 - *full.pool.EndPos(id)));
  }
  bound.context = 256;
  const uint64_t full_floats = *kvring::AttentionWorkspaceFloats<kvring::FlashLayout>(
      kvring::KVShape{0, kKVHeads, kDim, kDim}, options, bound);
  for (size_t e = 0; e < 32; ++e) {
    entries[e].kv = *full.pool.View(full.ids[e], 1);
    entries[e].batch.first_q_pos = 255;
  }
  kvring::AttentionWorkspace grown;
  ASSERT_TRUE(kvring::AttentionMany(entries.data(), entries.size(), options, grown, runner).ok());
  EXPECT_EQ(grown.NumFloats(), full_floats);
  // A bound no call could take is refused.
  bound.num_q_heads = 3;
  EXPECT_EQ(kvring::AttentionWorkspaceFloats<kvring::FlashLayout>(
                kvring::KVShape{0, kKVHeads, kDim, kDim}, options, bound)
                .status(),
            kvring::Status::kBadArgument);
}

TEST(Dispatch, AManySequenceRefusalNamesItsEntry) {
  ManySequences many(1024);
  std::mt19937 rng(13);
  const std::vector<float> q = Random(size_t{kQHeads} * kDim, rng);
  std::vector<float> out(q.size(), 7.0f);
  std::vector<kvring::AttentionEntry<kvring::FlashLayout>> entries(32);
  for (size_t e = 0; e < 32; ++e) {
    entries[e].kv = *many.pool.View(many.ids[e], 0);
    entries[e].batch.queries_f32 = q.data();
    entries[e].batch.out_f32 = out.data();
    entries[e].batch.first_q_pos = entries[e].kv.end_pos - 1;
    entries[e].batch.num_queries = 1;
    entries[e].batch.num_q_heads = kQHeads;
    entries[e].batch.head_dim = kDim;
  }
  kvring::AttentionWorkspace workspace;
  kvring::AttentionBatch& bad = entries[17].batch;
  bad.num_q_heads = 3;
  kvring::Result refused =
      kvring::AttentionMany(entries.data(), entries.size(), kvring::AttentionOptions(), workspace);
  EXPECT_EQ(refused.status(), kvring::Status::kBadArgument);
  EXPECT_EQ(refused.Entry(), 17u);
  EXPECT_NE(refused.Message().find("entries[17]: batch.num_q_heads: 3"), std::string::npos)
      << refused.Message();
  // Queries laid out [8][64] against a head_dim of 128.
  bad.num_q_heads = kQHeads;
  bad.head_dim = 64;
  refused =
      kvring::AttentionMany(entries.data(), entries.size(), kvring::AttentionOptions(), workspace);
  EXPECT_EQ(refused.status(), kvring::Status::kBadArgument);
  EXPECT_NE(
      refused.Message().find("entries[17]: batch.head_dim: 64, but the view's head_dim is 128"),
      std::string::npos)
      << refused.Message();
  bad.head_dim = kDim;
  // A view its sequence's append ended.
  many.Append(many.ids[5], 1);
  refused =
      kvring::AttentionMany(entries.data(), entries.size(), kvring::AttentionOptions(), workspace);
  EXPECT_EQ(refused.status(), kvring::Status::kStaleView);
  EXPECT_EQ(refused.Entry(), 5u);
  EXPECT_NE(refused.Message().find("entries[5]: view of layers[0] of sequence"), std::string::npos)
      << refused.Message();
  EXPECT_EQ(out[0], 7.0f);  // refused calls write nothing
  entries[5].kv = *many.pool.View(many.ids[5], 0);
  entries[5].batch.first_q_pos = entries[5].kv.end_pos - 1;
  EXPECT_TRUE(
      kvring::AttentionMany(entries.data(), entries.size(), kvring::AttentionOptions(), workspace)
          .ok());
}

}  // namespace
}  // namespace kvring_test
