// kvring/attention.h: what attention over a KVView computes and how the work is split, without
// vector code: options and the batch (attention/options.h), the checks every entry point makes
// (attention/check.h), the plan of independent work items (attention/work.h) and the
// caller-owned workspace they run in (attention/workspace.h); with the thread pool that runs
// them. The kernels are in kvring/ops/attention-inl.h (static dispatch) and behind
// kvring/dispatch.h (dynamic dispatch).
#ifndef KVRING_ATTENTION_H_
#define KVRING_ATTENTION_H_

#include "kvring/attention/check.h"
#include "kvring/attention/options.h"
#include "kvring/attention/work.h"
#include "kvring/attention/workspace.h"
#include "kvring/task_runner.h"
#include "kvring/thread_pool.h"

#endif  // KVRING_ATTENTION_H_
