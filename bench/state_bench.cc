// State format benchmarks (io/state_io.h): saving a KVCache to memory and to a file, and
// loading it back, each timed in turn with its headroom twin over the same bytes in this
// binary: a memcpy of the held bytes out of (save) or into (load) the cache's buffers, and a
// sequential file write (fwrite in 1 MiB pieces) or read (fread) of that many bytes.
// twin_ratio is the twin's time over kvring's: 1.0 is as fast as the twin, 0.5 twice as slow.
// Shape: a Llama-3.1-8B-like layer (8 kv_heads x 128) in four owning layers, two sliding
// (window 4096, batch 512: 4608 slots) and two global, at 32768 positions held: 292 MiB in
// BF16. Flash and tiled16 layouts, BF16 and int8; also on two threads (threads:2, a
// kvring::ThreadPool as the save's or load's runner): twin_ratio against the memcpy on one
// thread, threads_twin_ratio against a memcpy split over the same two threads.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/env.h"
#include "kvring/kvring.h"

namespace {

constexpr uint32_t kKVHeads = 8, kHeadDim = 128;
constexpr uint64_t kContext = 32768, kWindow = 4096, kBatch = 512;
const char kModel[] = "bench-model";

template <typename Layout>
kvring::KVCache<Layout> FilledCache(kvring::Format format) {
  kvring::LayerSpec sliding = kvring::LayerSpec::Sliding(kWindow, kKVHeads, kHeadDim);
  kvring::LayerSpec global = kvring::LayerSpec::Global(kKVHeads, kHeadDim);
  sliding.format = global.format = format;
  kvring::Expected<kvring::LayerPlan> plan = kvring::LayerPlan::Builder()
                                                 .AddLayer(sliding)
                                                 .AddLayer(global)
                                                 .AddLayer(sliding)
                                                 .AddLayer(global)
                                                 .SetContext(kContext)
                                                 .SetBatch(kBatch)
                                                 .SetLayout<Layout>()
                                                 .SetHugePages(kvring_bench::HugePages())
                                                 .Build();
  if (!plan.ok()) std::abort();
  kvring::Expected<kvring::KVCache<Layout>> cache = kvring::KVCache<Layout>::Create(plan.value());
  if (!cache.ok()) std::abort();
  std::vector<float> rows(kBatch * kKVHeads * kHeadDim);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 97) * 0.03f - 1.4f;
  for (uint64_t pos = 0; pos < kContext; pos += kBatch) {
    for (size_t layer = 0; layer < 4; ++layer) {
      if (!cache->AppendF32(layer, pos, rows.data(), rows.data(), kBatch).ok()) std::abort();
    }
  }
  return std::move(cache).value();
}

// The bytes the cache holds (every owning layer's held positions; RowBytes counts int8 scales).
template <typename Layout>
uint64_t HeldBytes(const kvring::KVCache<Layout>& cache) {
  uint64_t bytes = 0;
  for (size_t layer = 0; layer < cache.NumLayers(); ++layer) {
    const uint64_t row = 2 * kKVHeads * kvring::RowBytes(cache.GetFormat(layer), kHeadDim);
    bytes += (cache.EndPos(layer) - cache.FirstPos(layer)) * row;
  }
  return bytes;
}

double Seconds(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// Sequential file write of `bytes` bytes of `data` in 1 MiB pieces (the file twin of a save).
void WriteFileTwin(const std::string& path, const uint8_t* data, uint64_t bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  std::setvbuf(file, nullptr, _IONBF, 0);
  for (uint64_t at = 0; at < bytes; at += 1 << 20) {
    const uint64_t len = std::min<uint64_t>(1 << 20, bytes - at);
    if (std::fwrite(data + at, 1, len, file) != len) std::abort();
  }
  if (std::fclose(file) != 0) std::abort();
}

// Sequential file read of the file at `path` into `data` (the file twin of a load).
void ReadFileTwin(const std::string& path, uint8_t* data, uint64_t bytes) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) std::abort();
  std::setvbuf(file, nullptr, _IONBF, 0);
  if (std::fread(data, 1, bytes, file) != bytes) std::abort();
  std::fclose(file);
}

enum class Where { kMemory, kFile };
enum class Direction { kSave, kLoad };

// Times a save or load of a filled cache against its twin, in turn, `state.iterations()`
// times each; reports the best of each and their ratio.
template <typename Layout>
void BM_State(benchmark::State& state) {
  const Direction direction = static_cast<Direction>(state.range(0));
  const Where where = static_cast<Where>(state.range(1));
  const kvring::Format format = static_cast<kvring::Format>(state.range(2));
  kvring::ThreadPool threads(static_cast<uint32_t>(state.range(3)));
  const kvring::TaskRunner runner = threads.Runner();
  kvring::KVCache<Layout> cache = FilledCache<Layout>(format);
  const uint64_t held = HeldBytes(cache);
  const uint64_t total = kvring::StateBytes(cache, kModel);
  std::vector<uint8_t> image(total), twin_buffer(held, 1);
  const std::string path = TempPath("kvring_state_bench.kvstate");
  const std::string twin_path = TempPath("kvring_state_bench.twin");
  kvring::MemorySink first(image.data(), image.size());
  if (!kvring::SaveState(cache, kModel, &first).ok()) std::abort();
  if (where == Where::kFile) {
    if (!kvring::SaveStateFile(cache, kModel, path).ok()) std::abort();
    WriteFileTwin(twin_path, twin_buffer.data(), held);
  }
  // A buffer as large as the held bytes that the memcpy twin copies into or out of: the
  // cache's buffers stand for it (both touch the same amount of memory).
  std::vector<uint8_t> cache_side(held, 2);
  double best = 1e30, best_twin = 1e30, best_threads_twin = 1e30;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    kvring::Result result;
    if (direction == Direction::kSave) {
      kvring::MemorySink sink(image.data(), image.size());
      result = where == Where::kMemory ? kvring::SaveState(cache, kModel, &sink, runner)
                                       : kvring::SaveStateFile(cache, kModel, path, runner);
    } else if (where == Where::kMemory) {
      kvring::MemorySource source(image);
      result = kvring::LoadState(&source, kModel, &cache, runner);
    } else {
      result = kvring::LoadStateFile(path, kModel, &cache, runner);
    }
    if (!result.ok()) state.SkipWithError(result.Message().c_str());
    best = std::min(best, Seconds(start));
    start = std::chrono::steady_clock::now();
    if (where == Where::kMemory) {
      if (direction == Direction::kSave) {
        std::memcpy(twin_buffer.data(), cache_side.data(), held);
      } else {
        std::memcpy(cache_side.data(), twin_buffer.data(), held);
      }
    } else if (direction == Direction::kSave) {
      WriteFileTwin(twin_path, cache_side.data(), held);
    } else {
      ReadFileTwin(twin_path, cache_side.data(), held);
    }
    benchmark::DoNotOptimize(cache_side.data());
    benchmark::DoNotOptimize(twin_buffer.data());
    best_twin = std::min(best_twin, Seconds(start));
    if (where == Where::kMemory && state.range(3) > 1) {
      // The memcpy on the same threads: each copies its share.
      start = std::chrono::steady_clock::now();
      const uint64_t share = (held + state.range(3) - 1) / state.range(3);
      runner.Run(static_cast<uint64_t>(state.range(3)), [&](uint64_t task, uint32_t) {
        const uint64_t from = task * share, bytes = std::min(share, held - std::min(held, from));
        if (direction == Direction::kSave) {
          std::memcpy(twin_buffer.data() + from, cache_side.data() + from, bytes);
        } else {
          std::memcpy(cache_side.data() + from, twin_buffer.data() + from, bytes);
        }
      });
      benchmark::DoNotOptimize(cache_side.data());
      best_threads_twin = std::min(best_threads_twin, Seconds(start));
    }
  }
  std::remove(path.c_str());
  std::remove(twin_path.c_str());
  state.counters["held_MiB"] = static_cast<double>(held) / (1 << 20);
  state.counters["best_ms"] = best * 1e3;
  state.counters["GBps"] = static_cast<double>(total) / best * 1e-9;
  state.counters["twin_ratio"] = best_twin / best;
  if (best_threads_twin < 1e30) state.counters["threads_twin_ratio"] = best_threads_twin / best;
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"load", "file", "int8", "threads"});
  const int64_t bf16 = static_cast<int64_t>(kvring::Format::kBF16);
  const int64_t int8 = static_cast<int64_t>(kvring::Format::kInt8);
  for (int64_t direction : {0, 1}) {
    for (int64_t where : {0, 1}) b->Args({direction, where, bf16, 1});
    b->Args({direction, 0, int8, 1});
  }
  // Saves and loads on a ThreadPool of two threads (their runner), against the same twins.
  for (int64_t direction : {0, 1}) {
    for (int64_t where : {0, 1}) b->Args({direction, where, bf16, 2});
    b->Args({direction, 0, int8, 2});
  }
  b->Iterations(8)->Unit(benchmark::kMillisecond);
}

BENCHMARK_TEMPLATE(BM_State, kvring::FlashLayout)->Apply(Args);
BENCHMARK_TEMPLATE(BM_State, kvring::TiledLayout<16>)->Apply(Args);

}  // namespace

BENCHMARK_MAIN();
