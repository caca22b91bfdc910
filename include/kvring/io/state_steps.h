// kvring/io/state_steps.h: moving a KVPool sequence out to a ByteSink and back in steps of at
// most kRowChunk (256) positions of one layer, so that an engine moves an idle sequence out
// of its pool (to host memory elsewhere, to disk, to another machine) and brings it back
// bit-identical while it goes on with its own work between the steps. The bytes are
// SaveState's (io/state_io.h): an export loads with LoadState, a SaveState with an import.
#ifndef KVRING_IO_STATE_STEPS_H_
#define KVRING_IO_STATE_STEPS_H_

#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include "kvring/io/byte_io.h"
#include "kvring/io/state_access.h"
#include "kvring/io/state_rows.h"
#include "kvring/io/state_stream.h"
#include "kvring/kv_view.h"
#include "kvring/status.h"
#include "kvring/storage/kv_pool.h"
#include "kvring/storage/row_pieces.h"

namespace kvring {

// Positions of one layer a step moves at most.
inline constexpr uint64_t kStateStepPositions = detail::kRowChunk;

// Writes sequence `id` of a pool to a sink a step at a time. The pool and the sink must stay
// where they are until Done(); the sequence must not change (the calls that end its views).
template <typename Layout>
class SequenceExport {
 public:
  SequenceExport() = default;

  // Starts the export of sequence `id` of `pool` with `model_id`, refused as SaveState is
  // (writing nothing: kUnknownSequence, kWrongPosition mid-step, kBadArgument), or
  // kOutOfMemory without its staging buffer (the state's bytes, at most 512 KiB).
  static Result Begin(const KVPool<Layout>& pool, SequenceId id, const std::string& model_id,
                      ByteSink* sink, SequenceExport* out) {
    if (out == nullptr) return Result::Refused(Status::kBadArgument, "export: out is null");
    uint64_t bytes = 0;
    const Result allowed = detail::StateAccess::CheckSave(pool, id, model_id, sink, &bytes);
    if (!allowed.ok()) return allowed;
    std::unique_ptr<detail::StateWriter> writer(new (std::nothrow)
                                                    detail::StateWriter(sink, bytes));
    if (writer == nullptr || writer->Failed()) {
      return Result::Refused(Status::kOutOfMemory, "export: no memory for its staging buffer");
    }
    detail::StateAccess::SaveHeader(pool, id, model_id, writer.get());
    *out = SequenceExport();
    out->pool_ = &pool;
    out->id_ = id;
    out->stamp_ = detail::StateAccess::StampOf(pool, id);
    out->writer_ = std::move(writer);
    return Status::kOk;
  }

  // Writes the next step: at most kStateStepPositions positions of one owning layer; the last
  // step hands the sink the last bytes. Refused with kStaleView (naming the call) if the
  // sequence changed since Begin: the export stops, and what the sink took is not a state.
  // The sink's kIOError stops it too. After Done(), does nothing.
  Result Step() {
    if (Done()) return failed_;
    const Result current = stamp_.Check();
    if (!current.ok()) return Stop(current);
    detail::StateAccess::SaveStep(*pool_, id_, &cursor_, writer_.get());
    if (writer_->Failed()) return Stop(writer_->Finish());
    if (!detail::NextOwner(pool_->Plan(), &cursor_)) {
      // The last step adds the recurrent states and hands over the last bytes.
      detail::StateAccess::SaveStates(*pool_, id_, writer_.get());
      return Stop(writer_->Finish());
    }
    return Status::kOk;
  }

  // Whether every step is done (or the export stopped: then Step() returns why).
  bool Done() const { return writer_ == nullptr; }

 private:
  Result Stop(const Result& result) {
    writer_.reset();
    failed_ = result;
    return result;
  }

  const KVPool<Layout>* pool_ = nullptr;
  SequenceId id_;
  ViewStamp stamp_;
  std::unique_ptr<detail::StateWriter> writer_;
  detail::StateCursor cursor_;
  Result failed_;
};

// Loads a state into sequence `id` of a pool a step at a time. Begin checks all of it and
// takes the blocks; the steps copy the rows. The pool and the source must stay where they
// are, unchanged, until Done(); the sequence must not be written or attended before then.
template <typename Layout>
class SequenceImport {
 public:
  SequenceImport() = default;

  // Checks the state `source` holds against sequence `id` of `pool` as LoadState does (every
  // refusal changes nothing), then empties the sequence and gives it the state's blocks and
  // ranges; its rows follow in Step(). Ends its views (ViewEnd::kLoad).
  static Result Begin(ByteSource* source, const std::string& model_id, KVPool<Layout>* pool,
                      SequenceId id, SequenceImport* out) {
    if (source == nullptr || pool == nullptr || out == nullptr) {
      return Result::Refused(Status::kBadArgument, "import: the source, pool or out is null");
    }
    detail::StateReader reader(source);
    uint64_t end = 0;
    const Result begun = detail::StateAccess::LoadBegin(&reader, model_id, pool, id, &end);
    if (!begun.ok()) return begun;
    *out = SequenceImport();
    out->pool_ = pool;
    out->id_ = id;
    out->reader_ = reader;
    out->end_ = end;
    out->stamp_ = detail::StateAccess::StampOf(*pool, id);
    out->cursor_.offset = detail::FirstLayerSection(&out->reader_, pool->Plan());
    out->active_ = true;
    return Status::kOk;
  }

  // Copies the next step: at most kStateStepPositions positions of one owning layer; after
  // the last the sequence is at the state's end and its views end again. Refused with
  // kStaleView (naming the call) if the sequence changed since Begin, and with the source's
  // kIOError: the sequence is then cleared. After Done(), does nothing.
  Result Step() {
    if (Done()) return failed_;
    Result result = stamp_.Check();
    if (!result.ok()) {
      // Not left half loaded (a freed sequence has nothing left to clear).
      if (detail::StateAccess::IsLive(*pool_, id_)) detail::StateAccess::LoadFailed(pool_, id_);
      return Stop(result);
    }
    bool more = true;
    result = detail::StateAccess::LoadStep(&reader_, pool_, id_, &cursor_, &more);
    if (!result.ok()) return Stop(result);
    if (!detail::NextOwner(pool_->Plan(), &cursor_)) {
      // The last step reads the recurrent states and ends the load.
      return Stop(detail::StateAccess::LoadDone(&reader_, pool_, id_, end_));
    }
    return Status::kOk;
  }

  bool Done() const { return !active_; }

 private:
  Result Stop(const Result& result) {
    active_ = false;
    failed_ = result;
    return result;
  }

  KVPool<Layout>* pool_ = nullptr;
  SequenceId id_;
  detail::StateReader reader_;
  uint64_t end_ = 0;
  ViewStamp stamp_;
  detail::StateCursor cursor_;
  bool active_ = false;
  Result failed_;
};

}  // namespace kvring

#endif  // KVRING_IO_STATE_STEPS_H_
