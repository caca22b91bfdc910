// Prefix cache benchmarks (sharing/prefix_cache.h), each beside its twin timed in turn in the
// same loop. Plan: Gemma-3-like (three sliding layers of window 1024 and one global, 8
// kv_heads x 128, rollback 4), as the pool benchmarks'.
// - BM_Checkpoint/<backend>/<context>: Insert of a decoding sequence at `context` - 1
//   positions (a fork resized to decode rings), then its Evict; memcpy_ratio: a memcpy of the
//   checkpoint's ring bytes into fresh memory over it. Flat in the context: the blocks are
//   shared, not copied.
// - BM_Resume/<backend>/<prefix>: Match and Attach of a prompt whose first `prefix` tokens a
//   checkpoint holds, then the first step's Reserve of the rest (which copies the shared,
//   partly filled last block), against prefilling those `prefix` tokens again with kvring's
//   own kernels (kvring::kernels, dynamic dispatch: chunks of 512, each layer's appends and
//   attention of 16 query heads); prefill_ratio is the prefill's time over the resume's.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvring/dispatch.h"
#include "kvring/kvring.h"

namespace {

using kvring::BF16;

constexpr uint32_t kKVHeads = 8, kHeadDim = 128, kQHeads = 16;
constexpr uint64_t kRowElements = uint64_t{kKVHeads} * kHeadDim;
constexpr uint64_t kChunk = 512;

template <typename Layout>
kvring::LayerPlan Plan(uint64_t context) {
  return kvring::LayerPlan::Builder()
      .AddLayers(3, kvring::LayerSpec::Sliding(1024, kKVHeads, kHeadDim))
      .AddLayer(kvring::LayerSpec::Global(kKVHeads, kHeadDim))
      .SetContext(context)
      .SetBatch(kChunk)
      .SetRollback(4)
      .SetLayout<Layout>()
      .Build()
      .value();
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<kvring::TokenId> Tokens(uint64_t count) {
  std::vector<kvring::TokenId> tokens(count);
  for (uint64_t i = 0; i < count; ++i) tokens[i] = static_cast<kvring::TokenId>(i * 7919 % 50000);
  return tokens;
}

// Prefills tokens [from, to) of `id` in chunks: each chunk's appends to every layer and, when
// `attend`, each layer's attention of the chunk's queries (the work of a prefill's K/V side).
template <typename Layout>
void Prefill(kvring::KVPool<Layout>* pool, kvring::SequenceId id, uint64_t from, uint64_t to,
             bool attend, kvring::AttentionWorkspace* workspace) {
  static const std::vector<BF16> rows(kChunk * kRowElements, kvring::BF16FromF32(0.5f));
  static const std::vector<float> queries(kChunk * kQHeads * kHeadDim, 0.25f);
  static std::vector<float> out(kChunk * kQHeads * kHeadDim);
  for (uint64_t pos = from; pos < to;) {
    const uint64_t n = std::min(kChunk, to - pos);
    if (!pool->Reserve(id, n).ok()) std::abort();
    for (size_t layer = 0; layer < pool->NumLayers(); ++layer) {
      if (!pool->AppendBF16(id, layer, pos, rows.data(), rows.data(), n).ok()) std::abort();
      if (!attend) continue;
      kvring::AttentionBatch batch;
      batch.queries_f32 = queries.data();
      batch.out_f32 = out.data();
      batch.first_q_pos = pos;
      batch.num_queries = static_cast<uint32_t>(n);
      batch.num_q_heads = kQHeads;
      batch.head_dim = kHeadDim;
      const kvring::Result attended =
          kvring::Attention(*pool->View(id, layer), batch, kvring::AttentionOptions(), *workspace,
                            kvring::TaskRunner::Inline());
      if (!attended.ok()) std::abort();
    }
    pos += n;
  }
  if (!pool->Resize(id, 1).ok()) std::abort();
}

template <typename Layout>
void BM_Checkpoint(benchmark::State& state, uint64_t context) {
  const kvring::LayerPlan plan = Plan<Layout>(context);
  kvring::PoolSpec spec{3 * plan.TotalBytes(), 4, 0};
  kvring::KVPool<Layout> pool = kvring::KVPool<Layout>::Create(plan, spec).value();
  kvring::PrefixCache<Layout> cache(&pool);
  kvring::AttentionWorkspace workspace;
  kvring::SequenceId id;
  if (!pool.AddSequence(&id, 1).ok()) std::abort();
  Prefill(&pool, id, 0, context - 1, /*attend=*/false, &workspace);
  const std::vector<kvring::TokenId> tokens = Tokens(context - 1);
  const uint64_t bytes = *pool.RingBytesOf(id);
  std::vector<uint8_t> from(bytes, 1);
  double best = 1e30, best_twin = 1e30;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    if (!cache.Insert(id, tokens.data(), tokens.size()).ok()) std::abort();
    const double seconds = Since(start);
    state.SetIterationTime(seconds);
    best = std::min(best, seconds);
    if (!cache.Evict(cache.Match(tokens.data(), tokens.size())).ok()) std::abort();
    start = std::chrono::steady_clock::now();
    std::vector<uint8_t> to(bytes);  // fresh memory, as a fork's rings are
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
    best_twin = std::min(best_twin, Since(start));
  }
  state.counters["best_us"] = best * 1e6;
  state.counters["rings_KiB"] = static_cast<double>(bytes) / 1024;
  state.counters["memcpy_ratio"] = best_twin / best;
}

template <typename Layout>
void BM_Resume(benchmark::State& state, uint64_t prefix) {
  const kvring::LayerPlan plan = Plan<Layout>(prefix + kChunk);
  kvring::PoolSpec spec{4 * plan.TotalBytes(), 4, 0};
  kvring::KVPool<Layout> pool = kvring::KVPool<Layout>::Create(plan, spec).value();
  kvring::PrefixCache<Layout> cache(&pool);
  kvring::AttentionWorkspace workspace;
  kvring::SequenceId id;
  if (!pool.AddSequence(&id, 1).ok()) std::abort();
  Prefill(&pool, id, 0, prefix, /*attend=*/false, &workspace);
  const std::vector<kvring::TokenId> prompt = Tokens(prefix + 64);
  if (!cache.Insert(id, prompt.data(), prefix).ok() || !pool.Free(id).ok()) std::abort();
  double best = 1e30, best_prefill = 1e30;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    const kvring::PrefixMatch match = cache.Match(prompt.data(), prompt.size());
    kvring::SequenceId resumed;
    if (match.length != prefix || !cache.Attach(match, &resumed).ok() ||
        !pool.Reserve(resumed, 64).ok()) {
      std::abort();
    }
    const double seconds = Since(start);
    state.SetIterationTime(seconds);
    best = std::min(best, seconds);
    if (!pool.Free(resumed).ok()) std::abort();
    kvring::SequenceId again;
    if (!pool.AddSequence(&again, 1).ok()) std::abort();
    start = std::chrono::steady_clock::now();
    Prefill(&pool, again, 0, prefix, /*attend=*/true, &workspace);
    best_prefill = std::min(best_prefill, Since(start));
    if (!pool.Free(again).ok()) std::abort();
  }
  state.counters["best_us"] = best * 1e6;
  state.counters["prefill_ms"] = best_prefill * 1e3;
  state.counters["prefill_ratio"] = best_prefill / best;
}

template <typename Layout>
void Register(const char* name) {
  for (uint64_t context : {uint64_t{8192}, uint64_t{32768}, uint64_t{131072}}) {
    benchmark::RegisterBenchmark(
        (std::string("BM_Checkpoint/") + name + "/" + std::to_string(context)).c_str(),
        [=](benchmark::State& s) { BM_Checkpoint<Layout>(s, context); })
        ->UseManualTime()
        ->Iterations(20);
  }
  for (uint64_t prefix : {uint64_t{2048}, uint64_t{8192}}) {
    benchmark::RegisterBenchmark(
        (std::string("BM_Resume/") + name + "/" + std::to_string(prefix)).c_str(),
        [=](benchmark::State& s) { BM_Resume<Layout>(s, prefix); })
        ->UseManualTime()
        ->Iterations(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Register<kvring::FlashLayout>("flash");
  Register<kvring::TiledLayout<16>>("tiled16");
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
