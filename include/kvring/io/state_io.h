// kvring/io/state_io.h: saving a KVCache, or one sequence of a KVPool, as bytes, and loading
// them back into a cache or pool sequence of the same model and plan, in any layout
// (docs/design.md, "State format"). The bytes carry a fingerprint (the caller's model id, the
// runtime's context, every layer's kind, span, shapes, format and owner) and every owning
// layer's held positions in an order that depends on no layout, each section with a CRC32C.
// Loading checks all of it before it writes anything and allocates nothing.
#ifndef KVRING_IO_STATE_IO_H_
#define KVRING_IO_STATE_IO_H_

#include <cstdint>
#include <string>

#include "kvring/io/byte_io.h"
#include "kvring/io/state_access.h"
#include "kvring/io/state_format.h"
#include "kvring/io/state_steps.h"
#include "kvring/status.h"
#include "kvring/storage/kv_cache.h"
#include "kvring/storage/kv_pool.h"
#include "kvring/task_runner.h"

namespace kvring {

// Writes `cache` to `sink`, tagged with `model_id` (any bytes that name the model and its
// weights; loading compares them exactly): every owning layer's held positions, and of a
// hybrid model every recurrent state after the end position (StateAfter(layer, EndPos())).
// Refused, writing nothing, mid-step (kWrongPosition: append every owning layer to the same
// position first), when a layer with a recurrent state does not hold the state after the end
// (kWrongPosition), for a model id past kMaxModelIdBytes or a null sink (kBadArgument);
// kIOError if the sink failed. Cost: one pass over the held bytes and their CRC32C; StateBytes(...)
// bytes. With a `runner` of several threads the rows are gathered and checksummed on its threads
// while one writes to the sink (the same bytes; allocates two chunks' staging per thread).
template <typename Layout>
Result SaveState(const KVCache<Layout>& cache, const std::string& model_id, ByteSink* sink,
                 const TaskRunner& runner = TaskRunner::Inline()) {
  return detail::StateAccess::Save(cache, model_id, sink, runner);
}

// Loads a state SaveState wrote (from a cache or a pool sequence, in any layout) into `cache`,
// replacing what it holds. First checks all of it: the preamble, every section's size and
// CRC32C, the model id, the context, every layer's kind, span, shapes, format and owner, and
// each layer's range (a ring's must hold the window the next query reads; a flat layer's must
// start at 0), each recurrent state's formats and sizes. Any mismatch is kBadState with one
// message naming what differs, the cache unchanged. Rings keep the newest positions their
// slots hold; each recurrent state becomes the current one (State(layer)) and the only one
// held: a Rollback to before the loaded end is refused (kRollbackTooFar; those states were not
// saved). Ends the cache's views
// (ViewEnd::kLoad). Allocates nothing on the calling thread. kIOError if the source fails to
// read (if it fails while rows are copied, the cache is cleared). Cost: a CRC32C pass and a
// copy of the bytes; with a `runner` of several threads and a source whose views are
// concurrent (MemorySource, FileSource), both passes run on its threads (and allocate a list
// of the layers' sections).
template <typename Layout>
Result LoadState(ByteSource* source, const std::string& model_id, KVCache<Layout>* cache,
                 const TaskRunner& runner = TaskRunner::Inline()) {
  return detail::StateAccess::Load(source, model_id, cache, runner);
}

// As SaveState for a cache: sequence `id` of `pool` (kUnknownSequence for an id not live).
template <typename Layout>
Result SaveState(const KVPool<Layout>& pool, SequenceId id, const std::string& model_id,
                 ByteSink* sink, const TaskRunner& runner = TaskRunner::Inline()) {
  return detail::StateAccess::Save(pool, id, model_id, sink, runner);
}

// As LoadState for a cache, into live sequence `id` of `pool`, replacing what it holds: its
// paged layers take the blocks of the state's positions (the blocks it holds alone come back
// first; kPoolExhausted, changing nothing, if the budget cannot give the rest; blocks it
// shares with forks stay theirs), its rings keep what their slots hold. Ends the sequence's
// views (ViewEnd::kLoad).
template <typename Layout>
Result LoadState(ByteSource* source, const std::string& model_id, KVPool<Layout>* pool,
                 SequenceId id, const TaskRunner& runner = TaskRunner::Inline()) {
  return detail::StateAccess::Load(source, model_id, pool, id, runner);
}

// Returns the bytes SaveState writes for `cache` with `model_id` (0 when it would refuse:
// mid-step, a recurrent state after the end not written; or on overflow).
template <typename Layout>
uint64_t StateBytes(const KVCache<Layout>& cache, const std::string& model_id) {
  return detail::StateAccess::Bytes(cache, model_id);
}
// As StateBytes for a cache: sequence `id` of `pool` (0 for an id not live, or mid-step).
template <typename Layout>
uint64_t StateBytes(const KVPool<Layout>& pool, SequenceId id, const std::string& model_id) {
  return detail::StateAccess::Bytes(pool, id, model_id);
}

// Writes `cache` to the file at `path` through "<path>.tmp", renamed when complete: a failed
// or refused save leaves no temporary file and any earlier file at `path` as it was.
template <typename Layout>
Result SaveStateFile(const KVCache<Layout>& cache, const std::string& model_id,
                     const std::string& path, const TaskRunner& runner = TaskRunner::Inline()) {
  FileSink sink;
  Result result = sink.Open(path);
  if (result.ok()) result = SaveState(cache, model_id, &sink, runner);
  return result.ok() ? sink.Finish() : result;  // an unfinished sink removes its file
}
// As SaveStateFile for sequence `id` of `pool`.
template <typename Layout>
Result SaveStateFile(const KVPool<Layout>& pool, SequenceId id, const std::string& model_id,
                     const std::string& path, const TaskRunner& runner = TaskRunner::Inline()) {
  FileSink sink;
  Result result = sink.Open(path);
  if (result.ok()) result = SaveState(pool, id, model_id, &sink, runner);
  return result.ok() ? sink.Finish() : result;
}

// Loads the file at `path` into `cache` (LoadState); kIOError if it cannot be opened.
template <typename Layout>
Result LoadStateFile(const std::string& path, const std::string& model_id, KVCache<Layout>* cache,
                     const TaskRunner& runner = TaskRunner::Inline()) {
  FileSource source;
  const Result opened = source.Open(path);
  return opened.ok() ? LoadState(&source, model_id, cache, runner) : opened;
}
// As LoadStateFile, into sequence `id` of `pool`.
template <typename Layout>
Result LoadStateFile(const std::string& path, const std::string& model_id, KVPool<Layout>* pool,
                     SequenceId id, const TaskRunner& runner = TaskRunner::Inline()) {
  FileSource source;
  const Result opened = source.Open(path);
  return opened.ok() ? LoadState(&source, model_id, pool, id, runner) : opened;
}

}  // namespace kvring

#endif  // KVRING_IO_STATE_IO_H_
