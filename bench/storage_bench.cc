// Storage benchmarks: appends of 1 and 512 tokens into ring and flat storage of each layout,
// Copy() and growth, each beside its memcpy headroom twin of the same bytes in this binary;
// and BF16 rows of 512 tokens appended into int8 rings (BM_AppendInt8), beside the memcpy of
// the same BF16 input bytes. memcpy_ratio is the twin's time over the benchmark's: 1.0 is as
// fast as memcpy.
// Shape: 8 kv_heads x 128 dims (Llama 3.1 8B, Mistral), BF16 (int8: 1 byte and 4 of scale per
// 128); a ring of window 4096 planned for batches of 512 (4608 slots, 18 MiB in BF16); flat
// storage of 32768 positions. BM_Fork and BM_PoolAppend: a KVPool of a Gemma-3-like plan
// (three sliding layers of window 1024 and a global one) against memcpy and KVCache.
// BM_StepAppend: a decode step's appends into the 62 layers of a KVCache or a KVPool against
// the same appends into RingKV and GlobalKV directly.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/kvring.h"

namespace {

using kvring::BF16;

constexpr uint32_t kKVHeads = 8, kHeadDim = 128;
constexpr uint64_t kRowElements = uint64_t{kKVHeads} * kHeadDim;  // K (or V) of one position
constexpr uint64_t kRowBytes = 2 * kRowElements * sizeof(BF16);   // K and V of one position
constexpr uint64_t kWindow = 4096, kBatch = 512, kFlatContext = 32768;

enum class Storage { kRing, kFlat };

// Returns the spec of a ring (window 4096, batch 512) or of flat storage (32768 positions).
template <typename Layout>
kvring::StorageSpec SpecOf(Storage storage, kvring::Format format = kvring::Format::kBF16) {
  kvring::StorageSpec spec;
  spec.format = format;
  spec.shape = kvring::KVShape{0, kKVHeads, kHeadDim, kHeadDim};
  const uint64_t capacity = storage == Storage::kRing ? kWindow - 1 + kBatch : kFlatContext;
  if (!Layout::NumSlotsFor(capacity, &spec.shape.num_slots)) std::abort();
  spec.keep = storage == Storage::kRing ? kWindow - 1 : kFlatContext;
  spec.context = storage == Storage::kRing ? uint64_t{1} << 40 : kFlatContext;
  return spec;
}

// Returns the fastest of `calls` timed calls of `fn` (the benchmarks report their fastest
// call too, so ratios compare best with best).
template <typename Fn>
double BestSeconds(int calls, const Fn& fn) {
  double best = 1e30;
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

// The memcpy twin of an append: copies the K and V bytes of `num_tokens` positions into a
// destination as large as the storage, at a moving offset, as the storage writes them.
class MemcpyAppendTwin {
 public:
  MemcpyAppendTwin(uint64_t num_tokens, uint64_t num_slots)
      : bytes_(num_tokens * kRowBytes), src_(bytes_, 1), dst_(num_slots * kRowBytes, 2) {}
  // Returns the seconds one append-sized memcpy takes.
  double Seconds() {
    if (offset_ + bytes_ > dst_.size()) offset_ = 0;
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst_.data() + offset_, src_.data(), bytes_);
    benchmark::DoNotOptimize(dst_.data());
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    offset_ += bytes_;
    return elapsed.count();
  }

 private:
  uint64_t bytes_;
  std::vector<uint8_t> src_, dst_;
  uint64_t offset_ = 0;
};

// The memcpy twin of a copy: a fresh zeroed allocation as large as the copy's buffers
// (`allocated_bytes`, as the storage allocates them) and a memcpy of the `bytes` held into it.
// A snapshot must write into new memory too, and first writes to new pages cost page faults
// (about 14 us per 4 KiB page on this VM), so both sides pay them for the bytes they write.
double MemcpySeconds(uint64_t bytes, uint64_t allocated_bytes) {
  std::vector<uint8_t> src(bytes, 1);
  return BestSeconds(10, [&] {
    void* dst = std::calloc(allocated_bytes, 1);
    if (dst == nullptr) std::abort();
    std::memcpy(dst, src.data(), bytes);
    benchmark::DoNotOptimize(dst);
    std::free(dst);
  });
}

template <typename Layout, typename Kind>
Kind Create(Storage storage, kvring::Format format = kvring::Format::kBF16) {
  kvring::Expected<Kind> created = Kind::Create(SpecOf<Layout>(storage, format));
  if (!created.ok()) std::abort();
  return std::move(created).value();
}

// Appends `num_tokens` BF16 rows per call into storage of `format`; the flat storage is cleared
// when it is full. The twin copies the BF16 input bytes in either format.
template <typename Layout, typename Kind>
void AppendLoop(benchmark::State& state, Storage storage, uint64_t num_tokens,
                kvring::Format format = kvring::Format::kBF16) {
  Kind kv = Create<Layout, Kind>(storage, format);
  std::vector<BF16> k(num_tokens * kRowElements), v(num_tokens * kRowElements);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = kvring::BF16FromF32(static_cast<float>(i % 97));
    v[i] = kvring::BF16FromF32(static_cast<float>(i % 89));
  }
  const uint64_t limit = SpecOf<Layout>(storage).context;
  // Steady state: write every slot once first, so that first-touch page faults (the lazily
  // zeroed buffers are mapped on first write) are not timed.
  for (uint64_t written = 0; written < kv.NumSlots(); written += num_tokens) {
    if (kv.EndPos() + num_tokens > limit) kv.Clear();
    if (kv.AppendBF16(kv.EndPos(), k.data(), v.data(), num_tokens) != kvring::Status::kOk) {
      std::abort();
    }
  }
  // Each iteration times one append, then its memcpy twin; the ratio compares the fastest of
  // each. Interleaving them means a slow spell of this shared machine falls on both sides of
  // the ratio; the fastest call is the least disturbed. The reported time is the append's
  // alone (manual time).
  MemcpyAppendTwin twin(num_tokens, kv.NumSlots());
  double best = 1e30, best_twin = 1e30;
  for (auto _ : state) {
    if (kv.EndPos() + num_tokens > limit) kv.Clear();  // O(1)
    const auto start = std::chrono::steady_clock::now();
    if (kv.AppendBF16(kv.EndPos(), k.data(), v.data(), num_tokens) != kvring::Status::kOk) {
      state.SkipWithError("append refused");
    }
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(seconds.count());
    best = std::min(best, seconds.count());
    best_twin = std::min(best_twin, twin.Seconds());
  }
  state.counters["best_us"] = best * 1e6;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * num_tokens * kRowBytes));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * num_tokens));
  state.counters["memcpy_ratio"] = best_twin / best;
}

template <typename Layout>
void BM_Append(benchmark::State& state, Storage storage, uint64_t num_tokens,
               kvring::Format format = kvring::Format::kBF16) {
  if (storage == Storage::kRing) {
    AppendLoop<Layout, kvring::RingKV<Layout>>(state, storage, num_tokens, format);
  } else {
    AppendLoop<Layout, kvring::GlobalKV<Layout>>(state, storage, num_tokens, format);
  }
}

// Returns storage filled with BF16 rows up to `end` positions (in appends of 512).
template <typename Layout, typename Kind>
Kind Filled(Storage storage, uint64_t end) {
  Kind kv = Create<Layout, Kind>(storage);
  std::vector<BF16> rows(kBatch * kRowElements, kvring::BF16FromF32(1.0f));
  while (kv.EndPos() < end) {
    if (kv.AppendBF16(kv.EndPos(), rows.data(), rows.data(), kBatch) != kvring::Status::kOk) {
      std::abort();
    }
  }
  return kv;
}

// Times `call` per iteration and sets memcpy_ratio against a memcpy of the held bytes into a
// fresh allocation of `allocated_bytes`.
template <typename Kind, typename Fn>
void CopyLoop(benchmark::State& state, const Kind& kv, uint64_t allocated_bytes, const Fn& call) {
  const uint64_t held_bytes = (kv.EndPos() - kv.FirstPos()) * kRowBytes;
  // Allocates, copies, and frees the copy, as the twin does; compares best times.
  double best = 1e30;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    call();
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    best = std::min(best, seconds.count());
  }
  state.counters["best_us"] = best * 1e6;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * held_bytes));
  state.counters["held_MiB"] = static_cast<double>(held_bytes) / (1 << 20);
  state.counters["memcpy_ratio"] = MemcpySeconds(held_bytes, allocated_bytes) / best;
}

// Copy() of a full ring, and of flat storage holding 4096 of its 32768 positions: it should
// cost the held bytes, not the context.
template <typename Layout, typename Kind>
void BM_Copy(benchmark::State& state, Storage storage) {
  const Kind kv = Filled<Layout, Kind>(storage, storage == Storage::kRing ? 3 * kWindow : kWindow);
  CopyLoop(state, kv, kv.AllocatedBytes(), [&] {
    kvring::Expected<Kind> copy = kv.Copy();
    benchmark::DoNotOptimize(copy.value().View(kvring::Visibility{}).k);
  });
}

// Growth of a full ring from 4608 to 9216 slots (what KVCache::Grow does per ring).
template <typename Layout>
void BM_Grow(benchmark::State& state) {
  using Ring = kvring::RingKV<Layout>;
  const Ring ring = Filled<Layout, Ring>(Storage::kRing, 3 * kWindow);
  CopyLoop(state, ring, 2 * ring.AllocatedBytes(), [&] {
    kvring::Expected<Ring> grown = ring.GrownCopy(2 * ring.NumSlots());
    benchmark::DoNotOptimize(grown.value().View(kvring::Visibility{}).k);
  });
}

// A Gemma-3-like plan for the pool benchmarks: three sliding layers (window 1024) and one
// global, 8 kv_heads x 128, decoding (batch 1, rollback 4), at `context` positions.
template <typename Layout>
kvring::LayerPlan PoolPlan(uint64_t context, uint64_t batch) {
  return kvring::LayerPlan::Builder()
      .AddLayers(3, kvring::LayerSpec::Sliding(1024, kKVHeads, kHeadDim))
      .AddLayer(kvring::LayerSpec::Global(kKVHeads, kHeadDim))
      .SetContext(context)
      .SetBatch(batch)
      .SetRollback(4)
      .SetLayout<Layout>()
      .Build()
      .value();
}

// Fork of a sequence holding context - 1 positions, then the fork's first append (which
// copies the shared, partly filled last block): what a fork costs, against a memcpy of the
// rings plus one block into fresh memory (memcpy_ratio). Flat in the context: the blocks are
// shared, not copied (only the table of block ids is).
template <typename Layout>
void BM_Fork(benchmark::State& state, uint64_t context) {
  const kvring::LayerPlan plan = PoolPlan<Layout>(context, 1);
  kvring::PoolSpec spec;
  spec.max_sequences = 2;
  spec.budget_bytes = 3 * plan.TotalBytes();
  kvring::KVPool<Layout> pool = kvring::KVPool<Layout>::Create(plan, spec).value();
  kvring::SequenceId id;
  if (!pool.AddSequence(&id, kBatch).ok()) std::abort();
  std::vector<BF16> rows(kBatch * kRowElements, kvring::BF16FromF32(1.0f));
  for (uint64_t pos = 0; pos < context - 1;) {
    const uint64_t n = std::min(kBatch, context - 1 - pos);
    for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
      if (!pool.AppendBF16(id, layer, pos, rows.data(), rows.data(), n).ok()) std::abort();
    }
    pos += n;
  }
  if (!pool.Resize(id, 1).ok()) std::abort();
  const uint64_t bytes = *pool.RingBytesOf(id) + pool.Usage().block_bytes;
  double best = 1e30;
  for (auto _ : state) {
    kvring::SequenceId fork;
    const auto start = std::chrono::steady_clock::now();
    if (!pool.Fork(id, &fork).ok() || !pool.Reserve(fork, 1).ok()) std::abort();
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(seconds.count());
    best = std::min(best, seconds.count());
    if (!pool.Free(fork).ok()) std::abort();
  }
  state.counters["best_us"] = best * 1e6;
  state.counters["copied_KiB"] = static_cast<double>(bytes) / 1024;
  state.counters["memcpy_ratio"] = MemcpySeconds(bytes, bytes) / best;
}

// Appends of `num_tokens` to every owning layer of a pool's sequence against the same appends
// into a KVCache of the same plan, timed in turn (kvcache_ratio: the cache's time over the
// pool's; 1.0 is as fast). Both are cleared when full.
template <typename Layout>
void BM_PoolAppend(benchmark::State& state, uint64_t num_tokens) {
  const kvring::LayerPlan plan = PoolPlan<Layout>(kFlatContext, kBatch);
  kvring::PoolSpec spec;
  spec.max_sequences = 1;
  spec.budget_bytes = 2 * plan.TotalBytes();
  kvring::KVPool<Layout> pool = kvring::KVPool<Layout>::Create(plan, spec).value();
  kvring::KVCache<Layout> cache = kvring::KVCache<Layout>::Create(plan).value();
  kvring::SequenceId id;
  if (!pool.AddSequence(&id).ok()) std::abort();
  std::vector<BF16> rows(num_tokens * kRowElements, kvring::BF16FromF32(0.5f));
  double best = 1e30, best_cache = 1e30;
  uint64_t iteration = 0;
  for (auto _ : state) {
    if (*pool.EndPos(id) + num_tokens > kFlatContext) {
      if (!pool.Clear(id).ok()) std::abort();
      cache.Clear();
    }
    const uint64_t pos = *pool.EndPos(id);
    const auto pool_append = [&] {
      const auto start = std::chrono::steady_clock::now();
      for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
        if (!pool.AppendBF16(id, layer, pos, rows.data(), rows.data(), num_tokens).ok()) {
          std::abort();
        }
      }
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    const auto cache_append = [&] {
      const auto start = std::chrono::steady_clock::now();
      for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
        if (!cache.AppendBF16(layer, pos, rows.data(), rows.data(), num_tokens).ok()) {
          std::abort();
        }
      }
      best_cache =
          std::min(best_cache,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    };
    if (iteration++ % 2 == 1) cache_append();
    const double seconds = pool_append();
    if (iteration % 2 == 1) cache_append();
    state.SetIterationTime(seconds);
    best = std::min(best, seconds);
  }
  state.counters["best_us"] = best * 1e6;
  state.counters["kvcache_ratio"] = best_cache / best;
}

// A 62-layer plan (Gemma 3 27B's pattern: five sliding layers of window 1024, then a global
// one) of one kv_head x 128, decoding at up to kFlatContext positions: small rows, so that
// what an append costs besides its bytes shows.
template <typename Layout>
kvring::LayerPlan DeepPlan() {
  kvring::LayerPlan::Builder builder;
  for (size_t layer = 0; layer < 62; ++layer) {
    builder.AddLayer(layer % 6 == 5 ? kvring::LayerSpec::Global(1, kHeadDim)
                                    : kvring::LayerSpec::Sliding(1024, 1, kHeadDim));
  }
  return builder.SetContext(kFlatContext)
      .SetBatch(1)
      .SetRollback(4)
      .SetLayout<Layout>()
      .Build()
      .value();
}

// One decode step's appends (one token into each of 62 owning layers) into a KVCache, or a
// KVPool's sequence, against the same appends into a RingKV or GlobalKV per layer, timed in
// turn (direct_ratio: the direct appends' time over the cache's; 1.0 is as fast). The step
// rule must not scan the other layers on each append: at 62 layers a scan per append is
// 3844 end positions read per step.
template <typename Layout, bool kPool>
void BM_StepAppend(benchmark::State& state) {
  const kvring::LayerPlan plan = DeepPlan<Layout>();
  std::vector<kvring::RingKV<Layout>> rings;
  std::vector<kvring::GlobalKV<Layout>> globals;
  for (const kvring::LayerInfo& layer : plan.Layers()) {
    if (layer.span == 0) {
      globals.push_back(kvring::GlobalKV<Layout>::Create(plan, layer.index).value());
    } else {
      rings.push_back(kvring::RingKV<Layout>::Create(plan, layer.index).value());
    }
  }
  kvring::KVCache<Layout> cache;
  kvring::KVPool<Layout> pool;
  kvring::SequenceId id;
  if constexpr (kPool) {
    kvring::PoolSpec spec;
    spec.max_sequences = 1;
    spec.budget_bytes = 2 * plan.TotalBytes();
    pool = kvring::KVPool<Layout>::Create(plan, spec).value();
    if (!pool.AddSequence(&id).ok()) std::abort();
  } else {
    cache = kvring::KVCache<Layout>::Create(plan).value();
  }
  std::vector<BF16> row(kHeadDim, kvring::BF16FromF32(0.5f));
  const BF16* r = row.data();
  double best = 1e30, best_direct = 1e30;
  uint64_t pos = 0, iteration = 0;
  const auto seconds_of = [](const auto& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const auto direct_step = [&] {
    best_direct = std::min(best_direct, seconds_of([&] {
                             for (auto& ring : rings) {
                               if (!ring.AppendBF16(pos, r, r, 1).ok()) std::abort();
                             }
                             for (auto& global : globals) {
                               if (!global.AppendBF16(pos, r, r, 1).ok()) std::abort();
                             }
                           }));
  };
  for (auto _ : state) {
    if (pos == kFlatContext) {
      pos = 0;
      for (auto& ring : rings) ring.Clear();
      for (auto& global : globals) global.Clear();
      if constexpr (kPool) {
        if (!pool.Clear(id).ok()) std::abort();
      } else {
        cache.Clear();
      }
    }
    if (iteration++ % 2 == 1) direct_step();
    const double seconds = seconds_of([&] {
      for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
        if constexpr (kPool) {
          if (!pool.AppendBF16(id, layer, pos, r, r, 1).ok()) std::abort();
        } else {
          if (!cache.AppendBF16(layer, pos, r, r, 1).ok()) std::abort();
        }
      }
    });
    if (iteration % 2 == 1) direct_step();
    ++pos;
    state.SetIterationTime(seconds);
    best = std::min(best, seconds);
  }
  state.counters["best_us"] = best * 1e6;
  state.counters["direct_ratio"] = best_direct / best;
}

template <typename Layout>
void RegisterLayout(const std::string& name) {
  for (Storage storage : {Storage::kRing, Storage::kFlat}) {
    const std::string storage_name = storage == Storage::kRing ? "ring" : "flat";
    for (uint64_t num_tokens : {uint64_t{1}, kBatch}) {
      benchmark::RegisterBenchmark(
          ("BM_Append/" + name + "/" + storage_name + "/" + std::to_string(num_tokens)).c_str(),
          [=](benchmark::State& state) { BM_Append<Layout>(state, storage, num_tokens); })
          ->UseManualTime();
    }
  }
  if (Layout::kBackend == kvring::Backend::kFlash || Layout::kSlotAlignment == 16) {
    // Each (pos, kv_head) row encoded with EncodeInt8Row: the int8 target is half the memcpy.
    // int8h rotates each K row first (RotateHadamard).
    for (const kvring::Format format : {kvring::Format::kInt8, kvring::Format::kInt8Hadamard}) {
      const std::string prefix =
          format == kvring::Format::kInt8 ? "BM_AppendInt8/" : "BM_AppendInt8h/";
      benchmark::RegisterBenchmark((prefix + name + "/ring/" + std::to_string(kBatch)).c_str(),
                                   [format](benchmark::State& state) {
                                     BM_Append<Layout>(state, Storage::kRing, kBatch, format);
                                   })
          ->UseManualTime();
    }
  }
  benchmark::RegisterBenchmark(("BM_Copy/" + name + "/ring").c_str(), [](benchmark::State& s) {
    BM_Copy<Layout, kvring::RingKV<Layout>>(s, Storage::kRing);
  })->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("BM_Copy/" + name + "/flat").c_str(), [](benchmark::State& s) {
    BM_Copy<Layout, kvring::GlobalKV<Layout>>(s, Storage::kFlat);
  })->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("BM_Grow/" + name + "/ring").c_str(), [](benchmark::State& s) {
    BM_Grow<Layout>(s);
  })->Unit(benchmark::kMicrosecond);
  if (Layout::kBackend == kvring::Backend::kTiled && Layout::kSlotAlignment != 16) return;
  benchmark::RegisterBenchmark(("BM_StepAppend/" + name + "/cache").c_str(),
                               [](benchmark::State& s) { BM_StepAppend<Layout, false>(s); })
      ->UseManualTime();
  benchmark::RegisterBenchmark(("BM_StepAppend/" + name + "/pool").c_str(),
                               [](benchmark::State& s) { BM_StepAppend<Layout, true>(s); })
      ->UseManualTime();
  for (uint64_t context :
       {uint64_t{1} << 10, uint64_t{1} << 13, uint64_t{1} << 15, uint64_t{1} << 17}) {
    benchmark::RegisterBenchmark(("BM_Fork/" + name + "/" + std::to_string(context)).c_str(),
                                 [=](benchmark::State& s) { BM_Fork<Layout>(s, context); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (uint64_t num_tokens : {uint64_t{1}, kBatch}) {
    benchmark::RegisterBenchmark(
        ("BM_PoolAppend/" + name + "/" + std::to_string(num_tokens)).c_str(),
        [=](benchmark::State& s) { BM_PoolAppend<Layout>(s, num_tokens); })
        ->UseManualTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterLayout<kvring::FlashLayout>("flash");
  RegisterLayout<kvring::TiledLayout<16>>("tiled16");
  RegisterLayout<kvring::TiledLayout<32>>("tiled32");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
