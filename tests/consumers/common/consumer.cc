// A downstream program, built as a user builds it (find_package, add_subdirectory or
// FetchContent, -fno-exceptions -Werror): the toy engine loop of a new user, checked. Two
// layers (sliding 64 + global), 8 q heads on 2 kv_heads of 128 dims, fused QKV rows
// ([token][q heads | k heads | v heads]) appended and attended in place, on both layouts;
// prefill, decode, snapshot, speculative rollback, clear; attention by dynamic dispatch
// (kvring::kernels) on the calling thread, a kvring::ThreadPool and a thread pool of its own
// behind a TaskRunner, bit-identical across the three and within 1e-3 of a float64 reference;
// no allocation in any decode step. Exits 1 on any failed check.
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "kvring/dispatch.h"
#include "kvring/kvring.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

// Every operator new of the program is counted (kvring's workspace uses the aligned form).
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
void* operator new(size_t size, std::align_val_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const size_t a = static_cast<size_t>(align);
  void* p = std::aligned_alloc(a, (size + a - 1) / a * a);
  if (p == nullptr) std::abort();
  return p;
}
void* operator new(size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const size_t a = static_cast<size_t>(align);
  return std::aligned_alloc(a, (size + a - 1) / a * a);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace {

constexpr uint32_t kKVHeads = 2, kQHeads = 8, kDim = 128;
constexpr uint64_t kWindow = 64;
constexpr size_t kQRow = size_t{kQHeads} * kDim, kKVRow = size_t{kKVHeads} * kDim;
constexpr size_t kFusedRow = kQRow + 2 * kKVRow;  // [q heads | k heads | v heads]

int g_passed = 0, g_failed = 0;
void Check(bool ok, const char* what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::fprintf(stderr, "consumer: FAILED: %s\n", what);
  }
}

// The engine's own thread pool: a fixed set of workers taking tasks from a counter, handed
// to kvring as a TaskRunner (two plain function pointers; kvring never sees this type).
class OwnPool {
 public:
  explicit OwnPool(uint32_t num_threads) {
    for (uint32_t i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { Work(i); });
  }
  ~OwnPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }
  kvring::TaskRunner Runner() {
    kvring::TaskRunner runner;
    runner.context = this;
    runner.num_threads = static_cast<uint32_t>(workers_.size()) + 1;
    runner.run = [](void* context, uint64_t num_tasks, kvring::TaskRunner::TaskFn task,
                    const void* task_context) {
      static_cast<OwnPool*>(context)->Run(num_tasks, task, task_context);
    };
    return runner;
  }

 private:
  void Run(uint64_t num_tasks, kvring::TaskRunner::TaskFn task, const void* task_context) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = task;
      task_context_ = task_context;
      num_tasks_ = num_tasks;
      next_ = 0;
      busy_ = workers_.size();
      ++generation_;
    }
    wake_.notify_all();
    Take(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
  }
  void Take(uint32_t thread) {
    for (;;) {
      const uint64_t index = next_.fetch_add(1);
      if (index >= num_tasks_) return;
      task_(task_context_, index, thread);
    }
  }
  void Work(uint32_t thread) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      Take(thread);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  size_t busy_ = 0;
  kvring::TaskRunner::TaskFn task_ = nullptr;
  const void* task_context_ = nullptr;
  uint64_t num_tasks_ = 0;
  std::atomic<uint64_t> next_{0};
};

// Deterministic fused rows of token `pos`: q, k and v in (-1, 1).
void FusedRow(uint64_t pos, float* row) {
  uint64_t x = pos * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < kFusedRow; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    row[i] = static_cast<float>(static_cast<double>(x >> 11) / 4503599627370496.0 - 1.0);
  }
}

// The float64 attention of one query row over what `cache` stores for `layer` (ReadRow).
template <typename Layout>
double ReferenceError(const kvring::KVCache<Layout>& cache, size_t layer, uint64_t q_pos,
                      const float* q, const float* out) {
  const kvring::Visibility visibility = cache.View(layer).visibility;
  std::vector<kvring::BF16> k(kKVRow), v(kKVRow);
  double err = 0.0, norm = 0.0;
  for (uint32_t head = 0; head < kQHeads; ++head) {
    const uint32_t kv_head = head / (kQHeads / kKVHeads);
    std::vector<double> scores, acc(kDim, 0.0);
    double max = -1e300;
    for (uint64_t pos = visibility.FirstVisible(q_pos); pos <= q_pos; ++pos) {
      if (!cache.ReadRow(layer, pos, k.data(), v.data()).ok()) return 1e9;
      double s = 0.0;
      for (uint32_t d = 0; d < kDim; ++d) {
        s += double{q[head * kDim + d]} * kvring::BF16ToF32(k[kv_head * kDim + d]);
      }
      scores.push_back(s / std::sqrt(double{kDim}));
      if (scores.back() > max) max = scores.back();
    }
    double sum = 0.0;
    uint64_t i = 0;
    for (uint64_t pos = visibility.FirstVisible(q_pos); pos <= q_pos; ++pos, ++i) {
      if (!cache.ReadRow(layer, pos, k.data(), v.data()).ok()) return 1e9;
      const double p = std::exp(scores[i] - max);
      sum += p;
      for (uint32_t d = 0; d < kDim; ++d) acc[d] += p * kvring::BF16ToF32(v[kv_head * kDim + d]);
    }
    for (uint32_t d = 0; d < kDim; ++d) {
      const double ref = acc[d] / sum;
      err += (out[head * kDim + d] - ref) * (out[head * kDim + d] - ref);
      norm += ref * ref;
    }
  }
  return std::sqrt(err / norm);
}

// One engine: a cache, a workspace and a runner; Forward appends each owning layer's K/V
// from the fused rows in place, then attends every layer, writing outputs [token][layer][q].
template <typename Layout>
struct Engine {
  kvring::KVCache<Layout> cache;
  kvring::AttentionWorkspace workspace;
  kvring::TaskRunner runner;

  bool Forward(const float* fused, uint64_t num_tokens, float* out) {
    const uint64_t pos = cache.EndPos();
    const kvring::RowStrides strides{kFusedRow, kFusedRow};
    for (size_t layer = 0; layer < cache.NumLayers(); ++layer) {
      const kvring::Result appended =
          cache.AppendF32(layer, pos, fused + kQRow, fused + kQRow + kKVRow, num_tokens, strides);
      if (!appended.ok()) {
        std::fprintf(stderr, "consumer: append: %s\n", appended.Message().c_str());
        return false;
      }
      kvring::AttentionBatch batch;
      batch.queries_f32 = fused;
      batch.q_row_stride = kFusedRow;
      batch.out_f32 = out + layer * kQRow;
      batch.out_row_stride = cache.NumLayers() * kQRow;
      batch.first_q_pos = pos;
      batch.num_queries = static_cast<uint32_t>(num_tokens);
      batch.num_q_heads = kQHeads;
      batch.head_dim = kDim;
      const kvring::Result attended = kvring::Attention(
          cache.View(layer), batch, kvring::AttentionOptions(), workspace, runner);
      if (!attended.ok()) {
        std::fprintf(stderr, "consumer: attention: %s\n", attended.Message().c_str());
        return false;
      }
    }
    return true;
  }
};

// Runs the whole loop on `runner`; returns every output it computed, in order.
template <typename Layout>
std::vector<float> RunLoop(const kvring::LayerPlan& plan, const kvring::TaskRunner& runner,
                           const char* mode) {
  Engine<Layout> engine{kvring::KVCache<Layout>::Create(plan).value(), {}, runner};
  // The workspace for the largest call (a 16-query prefill on 2 threads needs far less),
  // reserved up front: no call allocates.
  Check(engine.workspace.Reserve(1u << 20), "workspace reserved");
  std::vector<float> all, fused(16 * kFusedRow), out(16 * 2 * kQRow);
  all.reserve(320 * 2 * kQRow);  // this program's own bookkeeping allocates nothing in decode
  const auto rows = [&](uint64_t pos, uint64_t n) {
    for (uint64_t t = 0; t < n; ++t) FusedRow(pos + t, fused.data() + t * kFusedRow);
  };
  const auto keep = [&](uint64_t n) {
    all.insert(all.end(), out.begin(), out.begin() + n * 2 * kQRow);
  };
  // Prefill 200 tokens in batches of 16 (the rings of 64 - 1 + 16 slots wrap twice).
  for (uint64_t pos = 0; pos < 200; pos += 16) {
    const uint64_t n = pos + 16 <= 200 ? 16 : 200 - pos;
    rows(pos, n);
    Check(engine.Forward(fused.data(), n, out.data()), "prefill");
    keep(n);
  }
  // Decode 100 tokens: no allocation in any step.
  const uint64_t before = g_allocations.load();
  for (int step = 0; step < 100; ++step) {
    rows(engine.cache.EndPos(), 1);
    Check(engine.Forward(fused.data(), 1, out.data()), "decode");
    keep(1);
  }
  const uint64_t decode_allocations = g_allocations.load() - before;
  Check(decode_allocations == 0, "100 decode steps allocate nothing");
  // The last query against float64, per layer.
  for (size_t layer = 0; layer < 2; ++layer) {
    FusedRow(299, fused.data());
    const double err =
        ReferenceError(engine.cache, layer, 299, fused.data(), out.data() + layer * kQRow);
    Check(err < 1e-3, "decode within 1e-3 of float64");
  }
  // A snapshot continues as the source does.
  kvring::Expected<kvring::KVCache<Layout>> snapshot = engine.cache.Copy();
  Check(snapshot.ok(), "snapshot");
  // Speculative: a draft of 4 appended, 3 rejected, continued.
  rows(engine.cache.EndPos(), 4);
  Check(engine.Forward(fused.data(), 4, out.data()), "draft");
  // (A row's bits do not depend on the batch it is in: the draft's first row is what a decode
  // step at 300 gives.)
  const std::vector<float> at_300(out.begin(), out.begin() + 2 * kQRow);
  const kvring::RollbackResult rolled = engine.cache.Rollback(3);
  Check(rolled.ok() && rolled.EndPos() == 301, "rollback of 3 to 301");
  rows(301, 1);
  Check(engine.Forward(fused.data(), 1, out.data()), "after rollback");
  keep(1);
  // Out of step: a layer appended twice before the other is refused and changes nothing.
  rows(302, 1);
  Check(engine.cache
            .AppendF32(0, 302, fused.data() + kQRow, fused.data() + kQRow + kKVRow, 1,
                       kvring::RowStrides{kFusedRow, kFusedRow})
            .ok(),
        "layer 0 appended");
  const kvring::Result ahead =
      engine.cache.AppendF32(0, 303, fused.data() + kQRow, fused.data() + kQRow + kKVRow, 1,
                             kvring::RowStrides{kFusedRow, kFusedRow});
  Check(ahead.status() == kvring::Status::kWrongPosition && engine.cache.EndPos() == 302,
        "a layer appended twice before the others is refused");
  Check(engine.cache
            .AppendF32(1, 302, fused.data() + kQRow, fused.data() + kQRow + kKVRow, 1,
                       kvring::RowStrides{kFusedRow, kFusedRow})
            .ok(),
        "layer 1 catches up");
  // The snapshot, given the same next token as the source had at 300, gives its bits.
  Engine<Layout> restored{std::move(snapshot).value(), {}, runner};
  rows(300, 1);
  std::vector<float> restored_out(2 * kQRow);
  Check(restored.Forward(fused.data(), 1, restored_out.data()), "restored");
  Check(std::memcmp(restored_out.data(), at_300.data(), at_300.size() * sizeof(float)) == 0,
        "the snapshot continues with the source's bits");
  all.insert(all.end(), restored_out.begin(), restored_out.end());
  // A new conversation on the same buffers gives the first conversation's first bits.
  engine.cache.Clear();
  Check(engine.cache.EndPos() == 0, "clear");
  rows(0, 16);
  Check(engine.Forward(fused.data(), 16, out.data()), "second conversation");
  Check(std::memcmp(out.data(), all.data(), 16 * 2 * kQRow * sizeof(float)) == 0,
        "after Clear the same tokens give the same bits");
  std::printf("consumer: %s backend, %s: %zu outputs, %llu allocations in 100 decode steps\n",
              kvring::ToString(Layout::kBackend), mode, all.size(),
              static_cast<unsigned long long>(decode_allocations));
  return all;
}

template <typename Layout>
void RunLayout() {
  kvring::Expected<kvring::LayerPlan> plan =
      kvring::LayerPlan::Builder()
          .AddLayer(kvring::LayerSpec::Sliding(kWindow, kKVHeads, kDim))
          .AddLayer(kvring::LayerSpec::Global(kKVHeads, kDim))
          .SetContext(1024)
          .SetBatch(16)
          .SetRollback(4)
          .SetLayout<Layout>()
          .Build();
  if (!plan.ok()) {
    std::fprintf(stderr, "consumer: %s\n", plan.error().message.c_str());
    std::exit(1);
  }
  kvring::ThreadPool pool(2);
  OwnPool own(3);
  const std::vector<float> inline_out =
      RunLoop<Layout>(*plan, kvring::TaskRunner::Inline(), "calling thread");
  const std::vector<float> pool_out =
      RunLoop<Layout>(*plan, pool.Runner(), "kvring::ThreadPool(2)");
  const std::vector<float> own_out = RunLoop<Layout>(*plan, own.Runner(), "own pool of 3");
  Check(inline_out.size() == pool_out.size() &&
            std::memcmp(inline_out.data(), pool_out.data(), inline_out.size() * sizeof(float)) == 0,
        "ThreadPool bits equal the calling thread's");
  Check(inline_out.size() == own_out.size() &&
            std::memcmp(inline_out.data(), own_out.data(), inline_out.size() * sizeof(float)) == 0,
        "own pool bits equal the calling thread's");
}

}  // namespace

int main() {
  // The plan of the README's example still holds.
  kvring::Expected<kvring::LayerPlan> plan =
      kvring::LayerPlan::Builder()
          .AddLayers(5, kvring::LayerSpec::Sliding(1024, 16, 128))
          .AddLayer(kvring::LayerSpec::Global(16, 128))
          .SetContext(131072)
          .SetBatch(512)
          .Build();
  Check(plan.ok() && plan->Layer(0).capacity == 1535 && plan->Layer(5).capacity == 131072,
        "the README's plan");
  RunLayout<kvring::FlashLayout>();
  RunLayout<kvring::TiledLayout<16>>();
  std::printf("consumer: target %s; %d checks passed, %d failed: %s\n",
              kvring::DispatchedTargetName(), g_passed, g_failed, g_failed == 0 ? "OK" : "FAILED");
  return g_failed == 0 ? 0 : 1;
}
