// tests/reference/started_threads.h: a TaskRunner that starts threads per call (ParallelFor),
// standing in for an engine's own thread pool behind kvring's TaskRunner callback, and the
// check of a call the test expects attention to accept.
#ifndef KVRING_TESTS_REFERENCE_STARTED_THREADS_H_
#define KVRING_TESTS_REFERENCE_STARTED_THREADS_H_

#include <cstdint>
#include <cstdio>

#include "kvring/base.h"
#include "kvring/status.h"
#include "kvring/task_runner.h"
#include "kvring/thread_pool.h"

namespace kvring_testing {

// Returns a runner that runs each call's tasks on *num_threads threads started for it
// (ParallelFor); *num_threads must outlive the runner.
inline kvring::TaskRunner StartedThreads(const uint32_t* num_threads) {
  kvring::TaskRunner runner;
  runner.context = const_cast<uint32_t*>(num_threads);
  runner.num_threads = *num_threads == 0 ? 1 : *num_threads;
  runner.run = [](void* context, uint64_t num_tasks, kvring::TaskRunner::TaskFn task,
                  const void* task_context) {
    kvring::ParallelFor(
        *static_cast<const uint32_t*>(context), num_tasks,
        [&](uint64_t index, uint32_t thread) { task(task_context, index, thread); });
  };
  return runner;
}

// Aborts with the call's message when attention refused a call a test expects to succeed.
inline void ExpectAttended(const kvring::Result& result) {
  if (!result.ok()) {
    std::fprintf(stderr, "attention refused: %s\n", result.Message().c_str());
    KVRING_CHECK(result.ok());
  }
}

}  // namespace kvring_testing

#endif  // KVRING_TESTS_REFERENCE_STARTED_THREADS_H_
