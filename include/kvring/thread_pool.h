// kvring/thread_pool.h: running independent tasks on threads, for users without a thread pool
// of their own. ThreadPool keeps its threads between calls (a decode step runs attention once
// per layer: starting threads per call would cost more than a short call's work), and hands
// kvring's calls a TaskRunner; ParallelFor starts and joins threads per call. Neither schedules
// fairly or nests: an engine with its own pool passes kvring a TaskRunner of that pool instead.
#ifndef KVRING_THREAD_POOL_H_
#define KVRING_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "kvring/base.h"
#include "kvring/task_runner.h"

namespace kvring {

// Runs fn(task, thread) for every task in [0, num_tasks) on `num_threads` threads (the calling
// thread is thread 0; num_threads - 1 std::threads are started and joined). Tasks are taken
// from a shared atomic counter, so which thread runs a task varies; `fn` must make results
// independent of that. Allocates the threads only; returns after every task has run.
template <typename Fn>
void ParallelFor(uint32_t num_threads, uint64_t num_tasks, const Fn& fn) {
  if (num_tasks == 0) return;
  if (num_threads <= 1 || num_tasks == 1) {
    for (uint64_t task = 0; task < num_tasks; ++task) fn(task, uint32_t{0});
    return;
  }
  if (num_threads > num_tasks) num_threads = static_cast<uint32_t>(num_tasks);
  std::atomic<uint64_t> next{0};
  auto worker = [&](uint32_t thread) {
    for (;;) {
      const uint64_t task = next.fetch_add(1, std::memory_order_relaxed);
      if (task >= num_tasks) return;
      fn(task, thread);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(num_threads - 1);
  for (uint32_t thread = 1; thread < num_threads; ++thread) threads.emplace_back(worker, thread);
  worker(0);
  for (std::thread& thread : threads) thread.join();
}

// A fixed set of threads that run the tasks of one Run call at a time: the calling thread is
// thread 0 and num_threads - 1 workers wait between calls (briefly spinning, then asleep on a
// condition variable). Run has ParallelFor's contract without starting threads. Not copyable
// or movable; Run must not be called from two threads at once, nor from inside a task (checked
// in debug builds). Destruction joins the workers.
class ThreadPool {
 public:
  // Starts num_threads - 1 workers (none for 0 or 1). Allocates.
  explicit ThreadPool(uint32_t num_threads) {
    const uint32_t workers = num_threads > 1 ? num_threads - 1 : 0;
    workers_.reserve(workers);
    for (uint32_t i = 0; i < workers; ++i) workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  // Threads that run tasks, the caller's included (at least 1).
  uint32_t NumThreads() const { return static_cast<uint32_t>(workers_.size()) + 1; }

  // Returns a TaskRunner that runs tasks on this pool (valid while the pool lives). Does not
  // allocate.
  TaskRunner Runner() {
    TaskRunner runner;
    runner.context = this;
    runner.num_threads = NumThreads();
    runner.run = [](void* context, uint64_t num_tasks, TaskRunner::TaskFn task,
                    const void* task_context) {
      static_cast<ThreadPool*>(context)->Run(
          num_tasks, [&](uint64_t index, uint32_t thread) { task(task_context, index, thread); });
    };
    return runner;
  }

  // Runs fn(task, thread) for every task in [0, num_tasks), thread < NumThreads(), and returns
  // after every task has run. Which thread runs a task varies from call to call. `fn` must not
  // throw. Does not allocate.
  template <typename Fn>
  void Run(uint64_t num_tasks, const Fn& fn) {
    if (num_tasks == 0) return;
    const bool was_running = running_.exchange(true, std::memory_order_acquire);
    KVRING_DASSERT(!was_running && "ThreadPool::Run inside a task, or on two threads at once");
    (void)was_running;
    if (workers_.empty() || num_tasks == 1) {
      for (uint64_t task = 0; task < num_tasks; ++task) fn(task, uint32_t{0});
    } else {
      task_fn_ = [](const void* context, uint64_t task, uint32_t thread) {
        (*static_cast<const Fn*>(context))(task, thread);
      };
      task_context_ = &fn;
      num_tasks_ = num_tasks;
      next_task_.store(0, std::memory_order_relaxed);
      busy_workers_.store(static_cast<uint32_t>(workers_.size()), std::memory_order_relaxed);
      {
        // The release of the new generation publishes the task fields to the workers.
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.fetch_add(1, std::memory_order_release);
      }
      wake_.notify_all();
      RunTasks(0);
      // The workers finish their last task about when this thread does: wait by polling,
      // and let a worker that shares this CPU run (more threads than CPUs).
      for (uint32_t polls = 1; busy_workers_.load(std::memory_order_acquire) != 0; ++polls) {
        Pause(polls);
      }
    }
    running_.store(false, std::memory_order_release);
  }

 private:
  // Polls before sleeping (about 0.1 ms here): an engine's next call, the next layer's
  // attention, often comes sooner than a sleeping thread wakes (10-40 us here).
  static constexpr uint32_t kSpinPolls = 4096;

  // Waits a moment between two polls; every kYieldPolls-th poll gives the CPU to another
  // thread, so that polling threads do not starve the one they wait for.
  static constexpr uint32_t kYieldPolls = 256;
  static void Pause(uint32_t polls) {
    if (polls % kYieldPolls == 0) {
      std::this_thread::yield();
      return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  void RunTasks(uint32_t thread) {
    for (;;) {
      const uint64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
      if (task >= num_tasks_) return;
      task_fn_(task_context_, task, thread);
    }
  }

  void WorkerLoop(uint32_t thread) {
    uint64_t seen = 0;
    for (;;) {
      for (uint32_t polls = 1;
           generation_.load(std::memory_order_acquire) == seen && polls <= kSpinPolls; ++polls) {
        Pause(polls);
      }
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock,
                   [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
        if (stop_) return;
        seen = generation_.load(std::memory_order_relaxed);
      }
      RunTasks(thread);
      busy_workers_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mutex_
  // Incremented (under mutex_) for each Run that uses the workers.
  std::atomic<uint64_t> generation_{0};
  // The current Run's tasks: written by Run before the generation's release, read by workers
  // after its acquire.
  void (*task_fn_)(const void*, uint64_t, uint32_t) = nullptr;
  const void* task_context_ = nullptr;
  uint64_t num_tasks_ = 0;
  std::atomic<uint64_t> next_task_{0};
  // Workers that have not finished the current Run's tasks.
  std::atomic<uint32_t> busy_workers_{0};
  std::atomic<bool> running_{false};  // inside Run: checked in debug builds
};

}  // namespace kvring

#endif  // KVRING_THREAD_POOL_H_
