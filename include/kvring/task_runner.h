// kvring/task_runner.h: TaskRunner, how kvring hands the independent tasks of one call (the
// work items of an attention call) to whatever runs them: the calling thread, a kvring
// ThreadPool, or the engine's own thread pool through two plain function pointers. It neither
// owns threads nor allocates.
#ifndef KVRING_TASK_RUNNER_H_
#define KVRING_TASK_RUNNER_H_

#include <cstdint>

namespace kvring {

// A callback that runs tasks. `run(context, num_tasks, task, task_context)` must call
// `task(task_context, index, thread)` exactly once for every index in [0, num_tasks), with
// thread < num_threads and no two tasks on the same `thread` at once, and return after the
// last one has finished (its writes visible to the caller). The order and the thread of each
// task are free: kvring's results do not depend on them. Tasks do not throw and never call
// `run` again. `run` is called from one thread at a time; it may run tasks on the calling
// thread. Trivially copyable; an engine builds one once and passes it to every call.
struct TaskRunner {
  using TaskFn = void (*)(const void* task_context, uint64_t task, uint32_t thread);
  using RunFn = void (*)(void* context, uint64_t num_tasks, TaskFn task, const void* task_context);

  RunFn run = nullptr;  // nullptr: every task runs on the calling thread, in order
  void* context = nullptr;
  uint32_t num_threads = 1;  // distinct `thread` values run passes, at least 1

  // Returns the runner of the calling thread alone (the default).
  static TaskRunner Inline() { return TaskRunner(); }

  // Runs fn(task, thread) for every task through this runner (see the contract above).
  template <typename Fn>
  void Run(uint64_t num_tasks, const Fn& fn) const {
    if (num_tasks == 0) return;
    if (run == nullptr || num_tasks == 1) {
      for (uint64_t task = 0; task < num_tasks; ++task) fn(task, uint32_t{0});
      return;
    }
    run(
        context, num_tasks,
        [](const void* task_context, uint64_t task, uint32_t thread) {
          (*static_cast<const Fn*>(task_context))(task, thread);
        },
        &fn);
  }
  // Threads the runner may use at once (1 for the calling thread alone).
  uint32_t NumThreads() const { return run == nullptr || num_threads == 0 ? 1 : num_threads; }
};

}  // namespace kvring

#endif  // KVRING_TASK_RUNNER_H_
