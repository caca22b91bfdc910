// Attention benchmarks: decode and prefill, flash and tiled, ring and flat storage, each beside
// its headroom twins in this binary: a plain vector read of the same K/V bytes (read_ratio)
// and an f32 FMA loop of the same multiply-adds (fma_ratio). Ratios are the twin's time over
// the benchmark's: 1.0 is as fast as the twin. Dynamic dispatch: the best target of this CPU.
// Benchmarks ending in /bf16products run the BF16-product mode (Products::kBF16) beside a
// vdpbf16ps loop of the same multiply-adds (bf16_peak_ratio: the machine's BF16 peak) and the
// exact mode's call of the same arguments, timed in turn (exact_ratio: its time over the
// mode's).
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

// Compile AVX3_DL (AVX-512 with BF16/VNNI) too: Highway 1.0.3 needs this opt-in.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
// The int8 benchmarks time TiledLayout<64> as well, BF16 decode <64> and <32>
// (tests/reference/attention_wrappers-inl.h).
#define KVRING_TESTING_TILED32
#define KVRING_TESTING_TILED64
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/attention_bench.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kvring/ops/attention-inl.h"
#include "reference/attention_wrappers-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring_bench {
namespace HWY_NAMESPACE {

#include "bench/twins-inl.h"

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench/env.h"
#include "bench/evict.h"
#include "benchmark/benchmark.h"
#include "kvring/detail/cpu_choice.h"
#include "kvring/storage/global_kv.h"
#include "kvring/storage/ring_kv.h"
#include "reference/history_storage.h"
#include "reference/kv_fixture.h"

namespace kvring_bench {
HWY_EXPORT(ReadTwin);
HWY_EXPORT(FmaTwin);

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
// Whether this CPU runs vdpbf16ps (AVX512-BF16).
bool HasBF16Twin() { return __builtin_cpu_supports("avx512bf16"); }

// The BF16 twin: `count` BF16 multiply-adds on vdpbf16ps (32 a call, two per f32 lane), with
// enough independent accumulators to cover its latency: the machine's BF16 peak.
__attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) float BF16Twin(uint64_t count,
                                                                                float x) {
  constexpr size_t kAcc = 16;
  __m512 acc[kAcc];
  for (size_t i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(x), _mm512_set1_ps(x));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(1e-7f));
  const uint64_t iterations = count / (32 * kAcc);
  for (uint64_t it = 0; it < iterations; ++it) {
    for (size_t i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (size_t i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}
#else
bool HasBF16Twin() { return false; }
float BF16Twin(uint64_t, float) { return 0.0f; }
#endif

using kvring::AttentionKind;
using kvring::reference::History;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* kind;  // "Decode" or "Prefill"
  uint32_t head_dim, num_q_heads, num_kv_heads, num_queries;
  uint64_t window;  // visible positions per query (sliding window)
  uint32_t num_threads;
  uint32_t latent_v_dims = 0;  // MLA: no V; the values are K's first latent_v_dims dims
  uint32_t VDims() const { return latent_v_dims != 0 ? latent_v_dims : head_dim; }
};

// Returns the seconds fn takes.
template <typename Fn>
double Seconds(const Fn& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Returns `history` appended (positions [0, end)) into a KV (RingKV or GlobalKV) for `spec`;
// aborts with the reason if it is refused.
template <typename KV>
KV Store(const History& history, const kvring::StorageSpec& spec, uint64_t end) {
  kvring::Expected<KV> kv = kvring::reference::StoreHistory<KV>(history, spec, end);
  if (!kv.ok()) {
    std::fprintf(stderr, "attention_bench: %s: %s\n", kv.error().field.c_str(),
                 kv.error().message.c_str());
    std::abort();
  }
  return std::move(kv).value();
}

template <typename Layout>
void BM_Attention(benchmark::State& state, Shape shape, bool ring,
                  kvring::Products products = kvring::Products::kF32) {
  // Queries far enough in that the ring has wrapped several times.
  const uint64_t first_q_pos = 3 * (shape.window + shape.num_queries) + 17;
  const uint64_t end = first_q_pos + shape.num_queries;
  // Slots as a LayerPlan gives them: the ring holds window - 1 + batch positions, the flat
  // storage every position, each padded by the layout's rule (flash: an odd number of tiles).
  uint64_t ring_slots = 0, flat_slots = 0;
  if (!Layout::NumSlotsFor(shape.window - 1 + shape.num_queries, &ring_slots) ||
      !Layout::NumSlotsFor(end, &flat_slots)) {
    std::abort();
  }
  const uint64_t slots = ring ? ring_slots : flat_slots;
  // Random K/V only where visible; the rest of the history stays zero.
  History history;
  history.num_kv_heads = shape.num_kv_heads;
  history.head_dim = shape.head_dim;
  history.v_head_dim = shape.latent_v_dims != 0 ? 0 : shape.head_dim;
  history.num_positions = end;
  const size_t row = size_t{shape.num_kv_heads} * shape.head_dim;
  const size_t v_row = size_t{shape.num_kv_heads} * history.v_head_dim;
  history.k.assign(end * row, kvring::BF16FromF32(0.0f));
  history.v.assign(end * v_row, kvring::BF16FromF32(0.0f));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint64_t pos = end - ring_slots; pos < end; ++pos) {
    for (size_t i = 0; i < row; ++i) history.k[pos * row + i] = kvring::BF16FromF32(normal(rng));
    for (size_t i = 0; i < v_row; ++i)
      history.v[pos * v_row + i] = kvring::BF16FromF32(normal(rng));
  }
  // K/V as an engine's storage holds them: a RingKV that has wrapped or a GlobalKV, appended
  // from the history in the largest batches it takes (a ring: slots - keep positions).
  // A ring benchmark also runs the flat storage of the same history (its ring / flat ratio
  // then compares calls interleaved in one loop, not two runs minutes apart on a shared host).
  kvring::StorageSpec spec =
      kvring::reference::SpecOf(history, slots, /*keep=*/shape.window - 1, end);
  kvring::StorageSpec flat_spec =
      kvring::reference::SpecOf(history, flat_slots, /*keep=*/shape.window - 1, end);
  spec.huge_pages = flat_spec.huge_pages = HugePages();
  kvring::RingKV<Layout> ring_kv;
  kvring::GlobalKV<Layout> flat_kv;
  if (ring) ring_kv = Store<kvring::RingKV<Layout>>(history, spec, end);
  flat_kv = Store<kvring::GlobalKV<Layout>>(history, flat_spec, end);
  const kvring::Visibility visibility{AttentionKind::kSliding, shape.window};
  std::vector<float> queries(size_t{shape.num_queries} * shape.num_q_heads * shape.head_dim);
  for (float& q : queries) q = normal(rng);
  std::vector<float> out(size_t{shape.num_queries} * shape.num_q_heads * shape.VDims());
  std::vector<float> out_flat(out.size());
  kvring::AttentionOptions options;
  options.latent_v_dims = shape.latent_v_dims;
  options.products = products;
  const bool bf16_products = products == kvring::Products::kBF16;
  kvring::AttentionOptions exact_options = options;
  exact_options.products = kvring::Products::kF32;
  kvring::AttentionBatch batch;
  batch.queries_f32 = queries.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = first_q_pos;
  batch.num_queries = shape.num_queries;
  batch.num_q_heads = shape.num_q_heads;
  batch.head_dim = shape.head_dim;
  const kvring::KVView<Layout> kv = ring ? ring_kv.View(visibility) : flat_kv.View(visibility);
  kvring::AttentionBatch flat_batch = batch;
  flat_batch.out_f32 = out_flat.data();
  const kvring::KVView<Layout> flat_view = flat_kv.View(visibility);

  // Work: K/V bytes the batch reads, and multiply-adds (q.k and p.v) it does.
  uint64_t kv_positions = 0, visible_pairs = 0;
  {
    const uint64_t first = visibility.FirstVisible(first_q_pos);
    kv_positions = end - first;
    for (uint32_t i = 0; i < shape.num_queries; ++i) {
      const uint64_t q = first_q_pos + i;
      visible_pairs += q + 1 - visibility.FirstVisible(q);
    }
  }
  const uint64_t bytes = kv_positions * (row + v_row) * sizeof(kvring::BF16);
  const uint64_t fmas = visible_pairs * shape.num_q_heads * (shape.head_dim + shape.VDims());

  // Each iteration times the kernel, then the read twin over a buffer of the same bytes, then
  // the FMA twin; the ratios compare the best time of each. Interleaving them means a slow
  // spell of this shared machine (or a neighbour's traffic in the L3) falls on both sides of a
  // ratio rather than on one; the best is the least disturbed measurement. The twins run on
  // the benchmark's threads (a kvring::ThreadPool, as the kernel), each thread its share, so
  // that a ratio also holds what this machine's cores give together: two vCPUs may share one
  // core's FMA units. The reported time is the kernel's alone (manual time). On more than one
  // thread the kernel runs on the pool, as an engine without a pool of its own would call it,
  // once per layer and token.
  const uint32_t threads = shape.num_threads;
  kvring::ThreadPool pool(threads);
  kvring::ThreadPool* const pool_or_null = threads > 1 ? &pool : nullptr;
  std::vector<uint32_t> twin_buffer(bytes / 4, 1u);
  std::vector<uint32_t> read_sums(threads);
  std::vector<float> fma_sums(threads);
  // The twins on n threads: n parts on the pool (one part runs on this thread alone).
  const auto read_twin_on = [&](uint32_t n) {
    const size_t share = twin_buffer.size() / n;
    pool.Run(n, [&](uint64_t part, uint32_t) {
      read_sums[part] = HWY_DYNAMIC_DISPATCH(ReadTwin)(twin_buffer.data() + part * share, share);
    });
  };
  const auto fma_twin_on = [&](uint32_t n) {
    pool.Run(n, [&](uint64_t part, uint32_t) {
      fma_sums[part] = HWY_DYNAMIC_DISPATCH(FmaTwin)(fmas / n, 0.999f);
    });
  };
  const auto read_twin = [&] { read_twin_on(threads); };
  const auto fma_twin = [&] { fma_twin_on(threads); };
  // Decode reads each position's K/V once per call, and an engine calls a layer once per token
  // with every other layer's K/V (and weights) passing through the caches in between: a
  // decode call meets its K/V in memory, not in the L3 (32 MiB here, which would hold a
  // 4096-position window's 8 MiB). So each decode call and each read twin start cold: their
  // lines are evicted first (clflush, outside the timed region). A warm call and a warm read
  // twin follow in the same iteration, as counters (warm_us, warm_read_ratio, warm_fma_ratio):
  // the kernel's speed when the K/V sits in the L3. Prefill (~300 multiply-adds per byte of
  // K/V) runs warm.
  const bool cold = std::strcmp(shape.kind, "Decode") == 0;
  const uint64_t first_visible = visibility.FirstVisible(first_q_pos);
  const auto evict_kv = [&](const kvring::KVView<Layout>& view) {
    if (cold) EvictPositions(view, first_visible, end);
  };
  const auto evict_twin = [&] {
    if (cold) Evict(twin_buffer.data(), twin_buffer.size() * sizeof(uint32_t));
  };
  // Each storage's calls reuse one workspace, as an engine's do: no allocation per call.
  kvring::AttentionWorkspace workspace, flat_workspace, one_workspace;
  const auto call = [&] {
    return Seconds([&] {
      kvring_testing::DispatchAttention(kv, batch, options, threads, pool_or_null, &workspace);
    });
  };
  double best = 1e30, best_read = 1e30, best_fma = 1e30, best_flat = 1e30;
  double best_warm = 1e30, best_warm_read = 1e30;
  const auto flat_call = [&] {
    evict_kv(flat_view);
    best_flat =
        std::min(best_flat, Seconds([&] {
                   kvring_testing::DispatchAttention(flat_view, flat_batch, options, threads,
                                                     pool_or_null, &flat_workspace);
                 }));
    benchmark::DoNotOptimize(out_flat.data());
  };
  // A benchmark on N > 1 threads also runs the call and both twins on one thread in each
  // iteration: its speed-up (counter speedup) then compares calls interleaved in one loop, as
  // the ratios do, beside what the twins gained on the same threads at the same time
  // (fma_twin_speedup, read_twin_speedup). The one-thread output must equal the N-thread
  // output bit for bit (the work split does not depend on the thread count).
  std::vector<float> out_one(threads > 1 ? out.size() : 0);
  kvring::AttentionBatch one_batch = batch;
  one_batch.out_f32 = out_one.data();
  double best_one = 1e30, best_one_read = 1e30, best_one_fma = 1e30;
  const auto one_thread = [&] {
    evict_kv(kv);
    best_one = std::min(best_one, Seconds([&] {
                          kvring_testing::DispatchAttention(kv, one_batch, options, 1, nullptr,
                                                            &one_workspace);
                        }));
    benchmark::DoNotOptimize(out_one.data());
    evict_twin();
    best_one_read = std::min(best_one_read, Seconds([&] { read_twin_on(1); }));
    best_one_fma = std::min(best_one_fma, Seconds([&] { fma_twin_on(1); }));
  };
  // The BF16-product mode also times the exact mode's call (same threads, its own output and
  // workspace) and the BF16 twin of the same multiply-adds in each iteration.
  std::vector<float> out_exact(bf16_products ? out.size() : 0);
  kvring::AttentionBatch exact_batch = batch;
  exact_batch.out_f32 = out_exact.data();
  kvring::AttentionWorkspace exact_workspace;
  double best_exact = 1e30, best_bf16 = 1e30;
  std::vector<float> bf16_sums(threads);
  const bool bf16_twin = bf16_products && HasBF16Twin();
  const auto exact_call = [&] {
    evict_kv(kv);
    best_exact =
        std::min(best_exact, Seconds([&] {
                   kvring_testing::DispatchAttention(kv, exact_batch, exact_options, threads,
                                                     pool_or_null, &exact_workspace);
                 }));
    benchmark::DoNotOptimize(out_exact.data());
    if (bf16_twin) {
      best_bf16 = std::min(best_bf16, Seconds([&] {
                             pool.Run(threads, [&](uint64_t part, uint32_t) {
                               bf16_sums[part] = BF16Twin(fmas / threads, 0.999f);
                             });
                           }));
    }
  };
  uint64_t iteration = 0;
  for (auto _ : state) {
    const bool odd = iteration++ % 2 == 1;  // neither side of a comparison always goes first
    if (bf16_products && odd) exact_call();
    const bool one_first = threads > 1 && odd;
    if (one_first) one_thread();
    const bool flat_first = ring && odd;
    if (flat_first) flat_call();
    evict_kv(kv);
    const double seconds = call();
    benchmark::DoNotOptimize(out.data());
    if (ring && !flat_first) flat_call();
    state.SetIterationTime(seconds);
    best = std::min(best, seconds);
    evict_twin();
    best_read = std::min(best_read, Seconds(read_twin));
    best_fma = std::min(best_fma, Seconds(fma_twin));
    if (cold) {
      call();  // brings the K/V back into the caches
      best_warm = std::min(best_warm, call());
      read_twin();
      best_warm_read = std::min(best_warm_read, Seconds(read_twin));
    }
    if (threads > 1 && !one_first) one_thread();
    if (bf16_products && !odd) exact_call();
    benchmark::DoNotOptimize(bf16_sums.data());
    benchmark::DoNotOptimize(read_sums.data());
    benchmark::DoNotOptimize(fma_sums.data());
  }
  // What the checks every call makes first (CheckAttention, in every build) cost: the best of
  // ten runs of 1000 checks of this call's arguments, against the best call. The view is
  // stamped as a KVCache's or KVPool's is, so that the staleness check is timed too.
  kvring::ViewEpoch epoch;
  kvring::KVView<Layout> stamped = kv;
  stamped.stamp = kvring::ViewStamp::Of(epoch, 0);
  double best_check = 1e30;
  for (int run = 0; run < 10; ++run) {
    best_check = std::min(
        best_check, Seconds([&] {
                      for (int i = 0; i < 1000; ++i) {
                        benchmark::DoNotOptimize(kvring::CheckAttention(stamped, batch, options));
                      }
                    }) / 1000);
  }
  state.counters["check_ns"] = best_check * 1e9;
  state.counters["check_share"] = best_check / best;
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.counters["read_ratio"] = best_read / best;
  state.counters["fma_ratio"] = best_fma / best;
  state.counters["best_us"] = best * 1e6;
  if (cold) {
    state.counters["warm_us"] = best_warm * 1e6;
    state.counters["warm_read_ratio"] = best_warm_read / best_warm;
    state.counters["warm_fma_ratio"] = best_fma / best_warm;
  }
  if (threads > 1) {
    if (std::memcmp(out.data(), out_one.data(), out.size() * sizeof(float)) != 0) {
      state.SkipWithError("one thread and N threads gave different outputs");
    }
    state.counters["one_thread_us"] = best_one * 1e6;
    state.counters["speedup"] = best_one / best;
    state.counters["fma_twin_speedup"] = best_one_fma / best_fma;
    state.counters["read_twin_speedup"] = best_one_read / best_read;
  }
  if (bf16_products) {
    state.counters["exact_us"] = best_exact * 1e6;
    state.counters["exact_ratio"] = best_exact / best;
    if (bf16_twin) state.counters["bf16_peak_ratio"] = best_bf16 / best;
  }
  if (ring) {
    // Property 1 (docs/design.md), on the benchmark's own data: the ring's output is the flat
    // storage's, bit for bit.
    if (std::memcmp(out.data(), out_flat.data(), out.size() * sizeof(float)) != 0) {
      state.SkipWithError("ring and flat storage gave different outputs");
    }
    state.counters["flat_us"] = best_flat * 1e6;
    state.counters["ring_over_flat"] = best / best_flat;
  }
}

// Int8 against BF16 (Format::kInt8, or kInt8Hadamard: K rotated, queries rotated per call):
// the same history appended in both formats to storage as BM_Attention's (RingKV or
// GlobalKV, huge pages with KVRING_BENCH_HUGE_PAGES=1), the int8 call, the BF16 call and the
// read twin of the int8 bytes timed in turn in each iteration (alternating order), decode
// cold as BM_Attention's.
// Counters: bf16_ratio (the BF16 call's time over the int8 call's: 2.0 = twice as fast),
// read_ratio (the read twin of the int8 bytes, elements and scales, over the int8 call), and
// for a ring ring_over_flat (the int8 ring against int8 flat storage of the same history,
// outputs checked bit-identical). Names ending in /int8products run the int8 calls in the
// integer-product mode (Products::kInt8); the BF16 call stays exact.
template <typename Layout>
void BM_Int8(benchmark::State& state, Shape shape, bool ring, kvring::Format format,
             kvring::Products products) {
  const uint64_t first_q_pos = 3 * (shape.window + shape.num_queries) + 17;
  const uint64_t end = first_q_pos + shape.num_queries;
  uint64_t ring_slots = 0, flat_slots = 0;
  if (!Layout::NumSlotsFor(shape.window - 1 + shape.num_queries, &ring_slots) ||
      !Layout::NumSlotsFor(end, &flat_slots)) {
    std::abort();
  }
  const uint64_t slots = ring ? ring_slots : flat_slots;
  History history;
  history.num_kv_heads = shape.num_kv_heads;
  history.head_dim = shape.head_dim;
  history.v_head_dim = shape.head_dim;
  history.num_positions = end;
  const size_t row = size_t{shape.num_kv_heads} * shape.head_dim;
  history.k.assign(end * row, kvring::BF16FromF32(0.0f));
  history.v.assign(end * row, kvring::BF16FromF32(0.0f));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint64_t pos = end - ring_slots; pos < end; ++pos) {
    for (size_t i = 0; i < row; ++i) history.k[pos * row + i] = kvring::BF16FromF32(normal(rng));
    for (size_t i = 0; i < row; ++i) history.v[pos * row + i] = kvring::BF16FromF32(normal(rng));
  }
  // Int8 and BF16 storage as BM_Attention's (storage quantizes on append), with huge pages
  // when KVRING_BENCH_HUGE_PAGES=1; int8 flat storage too for a ring's ring_over_flat.
  kvring::StorageSpec bf16_spec =
      kvring::reference::SpecOf(history, slots, /*keep=*/shape.window - 1, end);
  bf16_spec.huge_pages = HugePages();
  kvring::StorageSpec int8_spec = bf16_spec;
  int8_spec.format = format;
  kvring::StorageSpec int8_flat_spec = int8_spec;
  int8_flat_spec.shape.num_slots = flat_slots;
  kvring::RingKV<Layout> int8_ring, bf16_ring;
  kvring::GlobalKV<Layout> int8_flat, bf16_flat;
  if (ring) {
    int8_ring = Store<kvring::RingKV<Layout>>(history, int8_spec, end);
    bf16_ring = Store<kvring::RingKV<Layout>>(history, bf16_spec, end);
  } else {
    bf16_flat = Store<kvring::GlobalKV<Layout>>(history, bf16_spec, end);
  }
  int8_flat = Store<kvring::GlobalKV<Layout>>(history, int8_flat_spec, end);
  const kvring::Visibility visibility{AttentionKind::kSliding, shape.window};
  const kvring::KVView<Layout> flat_view = int8_flat.View(visibility);
  const kvring::KVView<Layout> view = ring ? int8_ring.View(visibility) : flat_view;
  const kvring::KVView<Layout> bf16_view =
      ring ? bf16_ring.View(visibility) : bf16_flat.View(visibility);
  std::vector<float> queries(size_t{shape.num_queries} * shape.num_q_heads * shape.head_dim);
  for (float& q : queries) q = normal(rng);
  std::vector<float> out(size_t{shape.num_queries} * shape.num_q_heads * shape.head_dim);
  std::vector<float> out_flat(out.size()), out_bf16(out.size());
  kvring::AttentionOptions options, bf16_options;
  options.products = products;
  kvring::AttentionBatch batch;
  batch.queries_f32 = queries.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = first_q_pos;
  batch.num_queries = shape.num_queries;
  batch.num_q_heads = shape.num_q_heads;
  batch.head_dim = shape.head_dim;
  kvring::AttentionBatch flat_batch = batch, bf16_batch = batch;
  flat_batch.out_f32 = out_flat.data();
  bf16_batch.out_f32 = out_bf16.data();
  const uint64_t first_visible = visibility.FirstVisible(first_q_pos);
  const uint64_t kv_positions = end - first_visible;
  // The int8 bytes a call reads: elements of K and V, and their two scales per kv_head.
  const uint64_t bytes = kv_positions * (2 * row + 2 * shape.num_kv_heads * sizeof(float));
  std::vector<uint32_t> twin_buffer(bytes / 4, 1u);
  // KVRING_BENCH_WARM=1 times decode without evicting its bytes first: the kernels' own cost
  // with K/V in the caches, beside the cold figures (docs/attention.md).
  const bool cold =
      std::strcmp(shape.kind, "Decode") == 0 && std::getenv("KVRING_BENCH_WARM") == nullptr;
  kvring::AttentionWorkspace workspace, flat_workspace, bf16_workspace;
  double best = 1e30, best_bf16 = 1e30, best_flat = 1e30, best_read = 1e30;
  uint32_t sum = 0;
  double last = 0.0;  // the int8 call's time in this iteration
  const auto int8_call = [&] {
    if (cold) EvictPositions(view, first_visible, end);
    last = Seconds(
        [&] { kvring_testing::DispatchAttention(view, batch, options, 1, nullptr, &workspace); });
    best = std::min(best, last);
    benchmark::DoNotOptimize(out.data());
  };
  const auto bf16_call = [&] {
    if (cold) EvictPositions(bf16_view, first_visible, end);
    best_bf16 = std::min(best_bf16, Seconds([&] {
                           kvring_testing::DispatchAttention(bf16_view, bf16_batch, bf16_options, 1,
                                                             nullptr, &bf16_workspace);
                         }));
    benchmark::DoNotOptimize(out_bf16.data());
  };
  const auto flat_call = [&] {
    if (!ring) return;
    if (cold) EvictPositions(flat_view, first_visible, end);
    best_flat = std::min(best_flat, Seconds([&] {
                           kvring_testing::DispatchAttention(flat_view, flat_batch, options, 1,
                                                             nullptr, &flat_workspace);
                         }));
    benchmark::DoNotOptimize(out_flat.data());
  };
  const auto read_call = [&] {
    if (cold) Evict(twin_buffer.data(), twin_buffer.size() * sizeof(uint32_t));
    best_read =
        std::min(best_read, Seconds([&] {
                   sum += HWY_DYNAMIC_DISPATCH(ReadTwin)(twin_buffer.data(), twin_buffer.size());
                 }));
  };
  uint64_t iteration = 0;
  for (auto _ : state) {
    if (iteration++ % 2 == 0) {
      int8_call();
      bf16_call();
      flat_call();
    } else {
      flat_call();
      bf16_call();
      int8_call();
    }
    read_call();
    state.SetIterationTime(last);
  }
  benchmark::DoNotOptimize(sum);
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.counters["best_us"] = best * 1e6;
  state.counters["bf16_us"] = best_bf16 * 1e6;
  state.counters["bf16_ratio"] = best_bf16 / best;
  state.counters["read_ratio"] = best_read / best;
  if (ring) {
    if (std::memcmp(out.data(), out_flat.data(), out.size() * sizeof(float)) != 0) {
      state.SkipWithError("int8 ring and flat storage gave different outputs");
    }
    state.counters["flat_us"] = best_flat * 1e6;
    state.counters["ring_over_flat"] = best / best_flat;
  }
}

// The benchmarks' backends by index, and their names: 0 flash, 1 tiled (16 rows), 2 tiled64,
// 3 tiled32.
const char* const kBackends[] = {"flash", "tiled", "tiled64", "tiled32"};

// Returns fn(layout) for a default layout of backend `backend` (kBackends).
template <class Fn>
benchmark::internal::Benchmark* OnBackend(int backend, const Fn& fn) {
  switch (backend) {
    case 0:
      return fn(kvring::FlashLayout());
    case 1:
      return fn(kvring::TiledLayout<16>());
    case 2:
      return fn(kvring::TiledLayout<64>());
    default:
      return fn(kvring::TiledLayout<32>());
  }
}

void RegisterAll() {
  const Shape shapes[] = {
      {"Decode", 128, 8, 4, 1, 4096, 1},
      {"Decode", 128, 16, 2, 1, 4096, 1},
      {"Decode", 256, 8, 4, 1, 4096, 1},
      {"Decode", 128, 8, 4, 1, 4096, 2},
      {"Decode", 128, 8, 4, 1, 32768, 1},
      {"Decode", 128, 8, 4, 1, 32768, 2},
      {"Prefill", 256, 8, 4, 512, 1024, 1},
      {"Prefill", 256, 8, 4, 512, 1024, 2},
      // MLA (DeepSeek): 16 q heads (a tensor-parallel slice of 128) on one 576-element latent,
      // values its first 512 elements.
      {"Decode", 576, 16, 1, 1, 4096, 1, 512},
      // Gemma 4 31B: a global layer (32 q heads on 4 kv_heads of 512) and a sliding one (on 16
      // kv_heads of 256) at its window of 1024.
      {"Decode", 512, 32, 4, 1, 4096, 1},
      {"Decode", 256, 32, 16, 1, 1024, 1},
  };
  // The BF16-product mode: the compute-bound shapes (prefill 512 over 1024 at D256,
  // decode GQA 16/2, MLA decode) and memory-bound decode GQA 8/4, which must not slow down.
  const Shape products_shapes[] = {
      {"Prefill", 256, 8, 4, 512, 1024, 1}, {"Prefill", 256, 8, 4, 512, 1024, 2},
      {"Decode", 128, 16, 2, 1, 4096, 1},   {"Decode", 576, 16, 1, 1, 4096, 1, 512},
      {"Decode", 128, 8, 4, 1, 4096, 1},
  };
  // Int8 against BF16: decode at 512, 8192 and 32768 positions, prefill over a 1024 window.
  const Shape int8_shapes[] = {
      {"Decode", 128, 8, 4, 1, 512, 1},
      {"Decode", 128, 8, 4, 1, 8192, 1},
      {"Decode", 128, 8, 4, 1, 32768, 1},
      {"Prefill", 256, 8, 4, 512, 1024, 1},
  };
  // int8h (K rotated) on rings: its cost against int8's is the queries' rotation. Each in the
  // exact and the integer-product mode.
  struct Int8Run {
    kvring::Format format;
    bool ring;
    kvring::Products products;
  };
  std::vector<Int8Run> int8_runs;
  for (const kvring::Products products : {kvring::Products::kF32, kvring::Products::kInt8}) {
    int8_runs.push_back({kvring::Format::kInt8, true, products});
    int8_runs.push_back({kvring::Format::kInt8, false, products});
    int8_runs.push_back({kvring::Format::kInt8Hadamard, true, products});
  }
  // Backends: flash, tiled (16 rows), for the integer-product mode tiled64 (taller tiles:
  // fewer softmax steps per position), and for int8 (not int8h) tiled32, the fastest exact
  // int8 decode on the Zen 5 host (docs/benchmarks.md).
  for (const Shape& s : int8_shapes) {
    for (int backend = 0; backend < 4; ++backend) {
      for (const Int8Run& run : int8_runs) {
        if (backend == 2 && run.products != kvring::Products::kInt8) continue;
        if (backend == 3 && run.format != kvring::Format::kInt8) continue;
        const std::string name =
            std::string("BM_") + s.kind + "/" + kBackends[backend] + "/" +
            (run.ring ? "ring" : "flat") + "/" + kvring::ToString(run.format) + "/D" +
            std::to_string(s.head_dim) + "/q" + std::to_string(s.num_q_heads) + "/kv" +
            std::to_string(s.num_kv_heads) + "/queries" + std::to_string(s.num_queries) +
            "/window" + std::to_string(s.window) + "/threads1" +
            (run.products == kvring::Products::kInt8 ? "/int8products" : "");
        benchmark::internal::Benchmark* b = OnBackend(backend, [&](auto layout) {
          return benchmark::RegisterBenchmark(name.c_str(), BM_Int8<decltype(layout)>, s, run.ring,
                                              run.format, run.products);
        });
        b->UseManualTime()->Unit(benchmark::kMicrosecond);
        if (std::strcmp(s.kind, "Decode") == 0) {
          b->Iterations(std::max<int64_t>(
              60, std::min<int64_t>(
                      300, static_cast<int64_t>((uint64_t{1} << 30) /
                                                (s.window * s.num_kv_heads * s.head_dim * 6)))));
        }
      }
    }
  }
  // Backends (kBackends) from `first` to `last`.
  const auto register_shape = [](const Shape& s, kvring::Products products, int first = 0,
                                 int last = 1) {
    const bool bf16 = products == kvring::Products::kBF16;
    for (int backend = first; backend <= last; ++backend) {
      for (bool ring : {true, false}) {
        const std::string name =
            std::string("BM_") + s.kind + "/" + kBackends[backend] + "/" +
            (ring ? "ring" : "flat") + "/D" + std::to_string(s.head_dim) + "/q" +
            std::to_string(s.num_q_heads) + "/kv" + std::to_string(s.num_kv_heads) + "/queries" +
            std::to_string(s.num_queries) + "/window" + std::to_string(s.window) + "/threads" +
            std::to_string(s.num_threads) +
            (s.latent_v_dims != 0 ? "/latent" + std::to_string(s.latent_v_dims) : "") +
            (bf16 ? "/bf16products" : "");
        benchmark::internal::Benchmark* b = OnBackend(backend, [&](auto layout) {
          return benchmark::RegisterBenchmark(name.c_str(), BM_Attention<decltype(layout)>, s, ring,
                                              products);
        });
        b->UseManualTime()->Unit(benchmark::kMicrosecond);
        if (std::strcmp(s.kind, "Decode") == 0) {
          // Evicting before every cold call costs more than the call (clflush of every line):
          // a fixed count, 2 GiB of K/V read cold per benchmark within 100 to 300 calls.
          const uint64_t bytes =
              uint64_t{s.window} * s.num_kv_heads * s.head_dim * (s.latent_v_dims != 0 ? 2 : 4);
          b->Iterations(static_cast<benchmark::IterationCount>(
              std::max<uint64_t>(100, std::min<uint64_t>(300, (uint64_t{2} << 30) / bytes))));
        }
      }
    }
  };
  for (const Shape& s : shapes) register_shape(s, kvring::Products::kF32);
  for (const Shape& s : products_shapes) register_shape(s, kvring::Products::kBF16);
  // TiledLayout<64> and <32> decode (one softmax step per 64 or 32 positions), beside flash
  // and tiled16.
  const Shape taller_tile_shapes[] = {
      {"Decode", 128, 8, 4, 1, 4096, 1},
      {"Decode", 128, 16, 2, 1, 4096, 1},
      {"Decode", 128, 8, 4, 1, 32768, 1},
  };
  for (const Shape& s : taller_tile_shapes) register_shape(s, kvring::Products::kF32, 2, 3);
}

}  // namespace kvring_bench

int main(int argc, char** argv) {
  // KVRING_BENCH_NO_AVX512=1: dispatch no AVX-512 target, to time the AVX2 kernels on an
  // AVX-512 host (their instruction mix, not an AVX2-only CPU's speed).
  if (kvring_bench::EnvFlag("KVRING_BENCH_NO_AVX512")) {
    hwy::DisableTargets(HWY_AVX3 | HWY_AVX3_DL);
    std::fprintf(stderr, "KVRING_BENCH_NO_AVX512=1: AVX-512 targets disabled\n");
  }
  // KVRING_BENCH_NO_AVX_VNNI=1: the AVX2 kernels' integer-product mode takes the f32 loops of
  // AVX2 CPUs without AVX-VNNI.
  if (kvring_bench::EnvFlag("KVRING_BENCH_NO_AVX_VNNI")) {
    kvring::detail::AvxVnniAllowed() = false;
    std::fprintf(stderr, "KVRING_BENCH_NO_AVX_VNNI=1: AVX-VNNI not used\n");
  }
  // KVRING_BENCH_NO_AMX=1: the AVX3_DL kernels' BF16-product mode runs every block on
  // vdpbf16ps, as on CPUs without AMX.
  if (kvring_bench::EnvFlag("KVRING_BENCH_NO_AMX")) {
    kvring::detail::AmxAllowed() = false;
    std::fprintf(stderr, "KVRING_BENCH_NO_AMX=1: AMX not used\n");
  }
  if (!kvring_bench::ApplyPrefetchSwitch()) return 2;
  // KVRING_BENCH_HUGE_PAGES=1 (bench/env.h): BM_Attention's RingKV and GlobalKV.
  if (kvring_bench::HugePages()) {
    std::fprintf(stderr, "KVRING_BENCH_HUGE_PAGES=1: BF16 K/V storage on huge pages\n");
  }
  kvring_bench::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

#endif  // HWY_ONCE
