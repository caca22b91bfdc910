// ThreadPool and ParallelFor (kvring/thread_pool.h): every task runs once, on a thread the pool
// has, for pools used many times in a row, after their workers fell asleep, and when idle.
// ThreadSanitizer runs these (CMakePresets.json "tsan", filter ThreadPool).
#include "kvring/thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvring_test {
namespace {

// Runs `num_tasks` tasks on `pool`, and expects each once, on threads below NumThreads().
void ExpectEveryTaskOnce(kvring::ThreadPool& pool, uint64_t num_tasks) {
  std::vector<std::atomic<int>> counts(num_tasks);
  std::atomic<bool> thread_in_range{true};
  pool.Run(num_tasks, [&](uint64_t task, uint32_t thread) {
    if (thread >= pool.NumThreads()) thread_in_range.store(false);
    counts[task].fetch_add(1, std::memory_order_relaxed);
  });
  EXPECT_TRUE(thread_in_range.load());
  for (uint64_t task = 0; task < num_tasks; ++task) {
    ASSERT_EQ(counts[task].load(), 1) << "task " << task << " of " << num_tasks;
  }
}

TEST(ThreadPool, RunsEveryTaskOnceOnItsThreads) {
  for (uint32_t threads : {0u, 1u, 2u, 3u, 5u}) {
    kvring::ThreadPool pool(threads);
    EXPECT_EQ(pool.NumThreads(), threads == 0 ? 1u : threads);
    for (int round = 0; round < 20; ++round) {
      for (uint64_t num_tasks : {0u, 1u, 2u, 7u, 1000u}) ExpectEveryTaskOnce(pool, num_tasks);
    }
  }
}

// Thousands of short runs in a row: the workers catch each run while still polling, and a run
// must not start before every worker has left the previous one.
TEST(ThreadPool, ManyShortRunsInARow) {
  kvring::ThreadPool pool(3);
  std::vector<uint64_t> sums(4, 0);
  for (uint64_t run = 1; run <= 3000; ++run) {
    pool.Run(4, [&](uint64_t task, uint32_t) { sums[task] += run; });  // disjoint per task
  }
  for (uint64_t sum : sums) EXPECT_EQ(sum, uint64_t{3000} * 3001 / 2);
}

// Runs after the workers stopped polling and went to sleep on the condition variable: each of
// two tasks waits (up to 10 s) for the other to start, which only a woken worker can do while
// the caller runs the first.
TEST(ThreadPool, WakesSleepingWorkers) {
  kvring::ThreadPool pool(2);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::atomic<int> started{0};
    std::atomic<int> met{0};
    pool.Run(2, [&](uint64_t, uint32_t) {
      started.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      if (started.load() == 2) met.fetch_add(1);
    });
    EXPECT_EQ(met.load(), 2) << "round " << round;
    ExpectEveryTaskOnce(pool, 100);
  }
}

TEST(ThreadPool, IdlePoolsJoinOnDestruction) {
  for (int i = 0; i < 20; ++i) {
    kvring::ThreadPool pool(4);
    if (i % 2 == 1) ExpectEveryTaskOnce(pool, 3);
  }
}

TEST(ThreadPool, ParallelForRunsEveryTaskOnce) {
  for (uint32_t threads : {0u, 1u, 2u, 5u}) {
    for (uint64_t num_tasks : {0u, 1u, 3u, 1000u}) {
      std::vector<std::atomic<int>> counts(num_tasks);
      std::atomic<bool> thread_in_range{true};
      kvring::ParallelFor(threads, num_tasks, [&](uint64_t task, uint32_t thread) {
        if (thread >= (threads == 0 ? 1u : threads)) thread_in_range.store(false);
        counts[task].fetch_add(1);
      });
      EXPECT_TRUE(thread_in_range.load());
      for (const auto& count : counts) ASSERT_EQ(count.load(), 1);
    }
  }
}

#if defined(__SANITIZE_THREAD__)
#define KVRING_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVRING_TEST_TSAN 1
#endif
#endif

TEST(ThreadPoolDeathTest, RunFromInsideATaskAborts) {
  if (!KVRING_ENABLE_DASSERT) GTEST_SKIP() << "debug assertions are off in this build";
#if defined(KVRING_TEST_TSAN)
  GTEST_SKIP() << "death tests fork a threaded process; not under ThreadSanitizer";
#endif
  // threadsafe re-executes the binary for the child. Under qemu-user without binfmt_misc (the
  // aarch64 preset) an arm64 binary cannot be executed again: the preset asks for fast (the
  // child forks here, before the statement starts its pool's threads; none run beside it).
  const char* style = std::getenv("KVRING_DEATH_TEST_STYLE");
  GTEST_FLAG_SET(death_test_style, style != nullptr ? style : "threadsafe");
  EXPECT_DEATH(
      {
        kvring::ThreadPool pool(2);
        pool.Run(4, [&](uint64_t, uint32_t) { pool.Run(2, [](uint64_t, uint32_t) {}); });
      },
      "ThreadPool::Run inside a task");
}

}  // namespace
}  // namespace kvring_test
