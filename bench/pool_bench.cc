// KVPool attention benchmarks, each beside its twins in this binary and timed in turn in one
// loop (this host's speed moves within minutes; ratios of calls timed in turn are stable):
// - BM_DecodeMany/<backend>/<paged|ring>/...: one decode query for each of 64 sequences of
//   lengths 256 to 8192 in one AttentionMany call, against the same 64 decodes as 64 calls
//   (separate_ratio) and the read twin of the same bytes (read_ratio), cold; on two threads,
//   against the one call on one thread (speedup).
// - BM_Decode/<backend>/paged/... and BM_Prefill/<backend>/paged/...: a pool's paged global
//   layer (blocks out of order, some shared with a fork's source) against flat storage of
//   the same history (paged_over_flat), outputs checked bit-identical; one variant per block
//   size, for the choice of DefaultBlockSlots.
// Where kvring::kernels compiles TiledLayout<32> (-DKVRING_KERNELS_TILE_ROWS=32, which defines
// KVRING_BENCH_TILED_32 here), BM_DecodeMany/tiled32/... as well.
// The kernels come from kvring::kernels (dynamic dispatch), as an engine links them.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/pool_bench.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvring_bench {
namespace HWY_NAMESPACE {

#include "bench/twins-inl.h"

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "bench/env.h"
#include "bench/evict.h"
#include "benchmark/benchmark.h"
#include "kvring/dispatch.h"
#include "kvring/kvring.h"
#include "kvring/storage/kv_pool.h"
#include "reference/history_storage.h"
#include "reference/kv_fixture.h"

namespace kvring_bench {
HWY_EXPORT(ReadTwin);

using Clock = std::chrono::steady_clock;
using kvring::reference::History;

template <typename Fn>
double Seconds(const Fn& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The read twin over `buffer` on `runner`'s threads, each its share.
double ReadTwinSeconds(std::vector<uint32_t>* buffer, kvring::ThreadPool* pool, uint32_t threads,
                       std::vector<uint32_t>* sums) {
  const size_t share = buffer->size() / threads;
  return Seconds([&] {
    pool->Run(threads, [&](uint64_t part, uint32_t) {
      (*sums)[part] = HWY_DYNAMIC_DISPATCH(ReadTwin)(buffer->data() + part * share, share);
    });
  });
}

constexpr uint32_t kHeadDim = 128, kQHeads = 8, kKVHeads = 2;

// 64 sequences of lengths 256 to 8192 (evenly spread) in a pool whose one layer is global
// (paged) or sliding with a 4096 window (a ring per sequence), one decode query each.
template <typename Layout>
void BM_DecodeMany(benchmark::State& state, bool paged, uint32_t threads) {
  constexpr uint32_t kSequences = 64;
  const uint64_t window = 4096, context = 8192;
  const kvring::LayerSpec spec = paged ? kvring::LayerSpec::Global(kKVHeads, kHeadDim)
                                       : kvring::LayerSpec::Sliding(window, kKVHeads, kHeadDim);
  const kvring::LayerPlan plan = kvring::LayerPlan::Builder()
                                     .AddLayer(spec)
                                     .SetContext(context)
                                     .SetBatch(512)
                                     .SetLayout<Layout>()
                                     .SetHugePages(HugePages())
                                     .Build()
                                     .value();
  const uint64_t slot_bytes = plan.Layer(0).slot_bytes;
  kvring::PoolSpec pool_spec;
  pool_spec.max_sequences = kSequences;
  pool_spec.budget_bytes = kSequences * (context + 1024) * slot_bytes;
  kvring::KVPool<Layout> pool = kvring::KVPool<Layout>::Create(plan, pool_spec).value();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<kvring::BF16> k(512 * kKVHeads * kHeadDim), v(k.size());
  std::vector<kvring::SequenceId> ids(kSequences);
  uint64_t visible_positions = 0;
  for (uint32_t i = 0; i < kSequences; ++i) {
    const uint64_t length = 256 + (8192 - 256) * i / (kSequences - 1);
    if (!pool.AddSequence(&ids[i]).ok()) std::abort();
    for (uint64_t pos = 0; pos < length;) {
      const uint64_t n = std::min<uint64_t>(512, length - pos);
      for (auto& x : k) x = kvring::BF16FromF32(normal(rng));
      for (auto& x : v) x = kvring::BF16FromF32(normal(rng));
      if (!pool.AppendBF16(ids[i], 0, pos, k.data(), v.data(), n).ok()) std::abort();
      pos += n;
    }
    if (!pool.Resize(ids[i], 1).ok()) std::abort();  // decoding: the smaller rings
    visible_positions += paged ? length : std::min(length, window);
  }
  std::vector<std::vector<float>> queries(kSequences), out(kSequences), out_separate(kSequences),
      out_one(kSequences);
  std::vector<kvring::AttentionEntry<Layout>> entries(kSequences), one_entries(kSequences);
  for (uint32_t i = 0; i < kSequences; ++i) {
    queries[i].resize(kQHeads * kHeadDim);
    for (float& q : queries[i]) q = normal(rng);
    out[i].resize(kQHeads * kHeadDim);
    out_separate[i].resize(out[i].size());
    out_one[i].resize(out[i].size());
    kvring::AttentionEntry<Layout>& entry = entries[i];
    entry.kv = *pool.View(ids[i], 0);
    entry.batch.queries_f32 = queries[i].data();
    entry.batch.out_f32 = out[i].data();
    entry.batch.first_q_pos = *pool.EndPos(ids[i]) - 1;
    entry.batch.num_queries = 1;
    entry.batch.num_q_heads = kQHeads;
    entry.batch.head_dim = kHeadDim;
    one_entries[i] = entry;
    one_entries[i].batch.out_f32 = out_one[i].data();
  }
  const uint64_t bytes = visible_positions * slot_bytes;
  const auto evict = [&] {
    for (const auto& entry : entries) {
      EvictPositions(entry.kv, entry.kv.visibility.FirstVisible(entry.batch.first_q_pos),
                     entry.kv.end_pos);
    }
  };
  kvring::ThreadPool thread_pool(threads);
  const kvring::TaskRunner runner =
      threads > 1 ? thread_pool.Runner() : kvring::TaskRunner::Inline();
  kvring::AttentionOptions options;
  kvring::AttentionWorkspace workspace, separate_workspace, one_workspace;
  std::vector<uint32_t> twin(bytes / 4, 1u), sums(threads);
  double best = 1e30, best_separate = 1e30, best_read = 1e30, best_one = 1e30;
  uint64_t iteration = 0;
  for (auto _ : state) {
    const bool odd = iteration++ % 2 == 1;
    const auto separate = [&] {
      evict();
      best_separate = std::min(
          best_separate, Seconds([&] {
            for (uint32_t i = 0; i < kSequences; ++i) {
              kvring::AttentionBatch batch = entries[i].batch;
              batch.out_f32 = out_separate[i].data();
              if (!kvring::Attention(entries[i].kv, batch, options, separate_workspace, runner)
                       .ok()) {
                std::abort();
              }
            }
          }));
    };
    const auto one_thread = [&] {
      evict();
      best_one = std::min(best_one, Seconds([&] {
                            if (!kvring::AttentionMany(one_entries.data(), kSequences, options,
                                                       one_workspace, kvring::TaskRunner::Inline())
                                     .ok()) {
                              std::abort();
                            }
                          }));
    };
    if (odd) separate();
    if (odd && threads > 1) one_thread();
    evict();
    const double seconds = Seconds([&] {
      if (!kvring::AttentionMany(entries.data(), kSequences, options, workspace, runner).ok()) {
        std::abort();
      }
    });
    state.SetIterationTime(seconds);
    best = std::min(best, seconds);
    if (!odd) separate();
    if (!odd && threads > 1) one_thread();
    Evict(twin.data(), twin.size() * 4);
    best_read = std::min(best_read, ReadTwinSeconds(&twin, &thread_pool, threads, &sums));
    benchmark::DoNotOptimize(sums.data());
  }
  for (uint32_t i = 0; i < kSequences; ++i) {
    if (std::memcmp(out[i].data(), out_separate[i].data(), out[i].size() * 4) != 0 ||
        (threads > 1 && std::memcmp(out[i].data(), out_one[i].data(), out[i].size() * 4) != 0)) {
      state.SkipWithError("the one call and the separate calls gave different outputs");
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.counters["best_us"] = best * 1e6;
  state.counters["read_ratio"] = best_read / best;
  state.counters["separate_ratio"] = best_separate / best;
  if (threads > 1) state.counters["speedup"] = best_one / best;
}

// A history of `end` positions in flat storage and in a pool's paged layer of `block_slots`
// (PagedHistory: blocks out of order, a fork half way); `num_queries` at its end, decode cold
// (one query) or prefill warm, the flat and the paged call timed in turn.
template <typename Layout>
void BM_Paged(benchmark::State& state, uint32_t head_dim, uint32_t num_q_heads,
              uint32_t num_kv_heads, uint64_t end, uint32_t num_queries, uint64_t block_slots) {
  const History history = History::Random(num_kv_heads, head_dim, head_dim, end, 3);
  uint64_t flat_slots = 0;
  if (!Layout::NumSlotsFor(end, &flat_slots)) std::abort();
  const kvring::StorageSpec spec = kvring::reference::SpecOf(history, flat_slots, end - 1, end);
  kvring::GlobalKV<Layout> flat =
      kvring::reference::StoreHistory<kvring::GlobalKV<Layout>>(history, spec, end).value();
  const auto paged = kvring::reference::PagedHistory<Layout>::Make(history, end, block_slots);
  const kvring::Visibility global{kvring::AttentionKind::kGlobal, 0};
  const kvring::KVView<Layout> flat_view = flat.View(global);
  const kvring::KVView<Layout> paged_view = paged.View(global);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> queries(size_t{num_queries} * num_q_heads * head_dim);
  for (float& q : queries) q = normal(rng);
  std::vector<float> out_flat(queries.size()), out_paged(queries.size());
  kvring::AttentionBatch batch;
  batch.queries_f32 = queries.data();
  batch.first_q_pos = end - num_queries;
  batch.num_queries = num_queries;
  batch.num_q_heads = num_q_heads;
  batch.head_dim = head_dim;
  kvring::AttentionBatch paged_batch = batch;
  batch.out_f32 = out_flat.data();
  paged_batch.out_f32 = out_paged.data();
  const bool cold = num_queries == 1;
  kvring::AttentionOptions options;
  kvring::AttentionWorkspace flat_workspace, paged_workspace;
  double best_flat = 1e30, best_paged = 1e30;
  uint64_t iteration = 0;
  for (auto _ : state) {
    const bool odd = iteration++ % 2 == 1;
    const auto flat_call = [&] {
      if (cold) EvictPositions(flat_view, 0, end);
      best_flat = std::min(best_flat, Seconds([&] {
                             if (!kvring::Attention(flat_view, batch, options, flat_workspace).ok())
                               std::abort();
                           }));
    };
    if (odd) flat_call();
    if (cold) EvictPositions(paged_view, 0, end);
    const double seconds = Seconds([&] {
      if (!kvring::Attention(paged_view, paged_batch, options, paged_workspace).ok()) std::abort();
    });
    state.SetIterationTime(seconds);
    best_paged = std::min(best_paged, seconds);
    if (!odd) flat_call();
  }
  if (std::memcmp(out_flat.data(), out_paged.data(), out_flat.size() * 4) != 0) {
    state.SkipWithError("paged and flat storage gave different outputs");
    return;
  }
  state.counters["best_us"] = best_paged * 1e6;
  state.counters["flat_us"] = best_flat * 1e6;
  state.counters["paged_over_flat"] = best_paged / best_flat;
}

void RegisterAll() {
  for (int backend = 0; backend < 2; ++backend) {
    const char* name = backend == 0 ? "flash" : "tiled";
    for (bool paged : {true, false}) {
      for (uint32_t threads : {1u, 2u}) {
        const std::string bm = std::string("BM_DecodeMany/") + name + "/" +
                               (paged ? "paged" : "ring") + "/sequences64/lengths256-8192/D128" +
                               "/q8/kv2/threads" + std::to_string(threads);
        benchmark::internal::Benchmark* b =
            backend == 0 ? benchmark::RegisterBenchmark(
                               bm.c_str(), BM_DecodeMany<kvring::FlashLayout>, paged, threads)
                         : benchmark::RegisterBenchmark(
                               bm.c_str(), BM_DecodeMany<kvring::TiledLayout<16>>, paged, threads);
        b->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(30);
      }
    }
  }
#ifdef KVRING_BENCH_TILED_32
  for (bool paged : {true, false}) {
    for (uint32_t threads : {1u, 2u}) {
      const std::string bm = std::string("BM_DecodeMany/tiled32/") + (paged ? "paged" : "ring") +
                             "/sequences64/lengths256-8192/D128/q8/kv2/threads" +
                             std::to_string(threads);
      benchmark::RegisterBenchmark(bm.c_str(), BM_DecodeMany<kvring::TiledLayout<32>>, paged,
                                   threads)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(30);
    }
  }
#endif
  // Paged against flat: decode at 32768 positions (cold) for each block size, prefill of 512
  // queries over 4096 positions (warm) at the default.
  for (int backend = 0; backend < 2; ++backend) {
    const char* name = backend == 0 ? "flash" : "tiled";
    const uint64_t tile =
        backend == 0 ? kvring::FlashLayout::kTileSlots : kvring::TiledLayout<16>::kTileSlots;
    const uint64_t default_slots = backend == 0
                                       ? kvring::DefaultBlockSlots<kvring::FlashLayout>()
                                       : kvring::DefaultBlockSlots<kvring::TiledLayout<16>>();
    for (uint64_t tiles : {1u, 2u, 3u, 4u, 5u, 8u, 16u, 32u, 64u}) {
      const uint64_t block_slots = tiles * tile;
      const std::string bm = std::string("BM_Decode/") + name + "/paged/D128/q8/kv4/queries1/" +
                             "positions32768/block" + std::to_string(block_slots);
      benchmark::internal::Benchmark* b =
          backend == 0
              ? benchmark::RegisterBenchmark(bm.c_str(), BM_Paged<kvring::FlashLayout>, 128u, 8u,
                                             4u, uint64_t{32768}, 1u, block_slots)
              : benchmark::RegisterBenchmark(bm.c_str(), BM_Paged<kvring::TiledLayout<16>>, 128u,
                                             8u, 4u, uint64_t{32768}, 1u, block_slots);
      b->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(100);
    }
    const std::string bm = std::string("BM_Prefill/") + name +
                           "/paged/D256/q8/kv4/queries512/positions4096/block" +
                           std::to_string(default_slots);
    benchmark::internal::Benchmark* b =
        backend == 0
            ? benchmark::RegisterBenchmark(bm.c_str(), BM_Paged<kvring::FlashLayout>, 256u, 8u, 4u,
                                           uint64_t{4096}, 512u, default_slots)
            : benchmark::RegisterBenchmark(bm.c_str(), BM_Paged<kvring::TiledLayout<16>>, 256u, 8u,
                                           4u, uint64_t{4096}, 512u, default_slots);
    b->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(10);
  }
}

}  // namespace kvring_bench

int main(int argc, char** argv) {
  if (!kvring_bench::ApplyPrefetchSwitch()) return 2;
  kvring_bench::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

#endif  // HWY_ONCE
