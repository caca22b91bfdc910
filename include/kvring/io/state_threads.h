// kvring/io/state_threads.h: saving and loading a state on a TaskRunner's threads, the same
// bytes as on the calling thread (state_rows.h). A save cuts the rows into steps (chunks of a
// layer), gathered and checksummed per thread and written in place where the sink has memory
// of its own (ByteSink::Reserve), else in order while the next batch is gathered; a load copies
// the chunks as tasks. CRC32Cs of parts join with Crc32cZeros. Internal.
#ifndef KVRING_IO_STATE_THREADS_H_
#define KVRING_IO_STATE_THREADS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kvring/base.h"
#include "kvring/detail/crc32c.h"
#include "kvring/detail/transpose.h"
#include "kvring/io/byte_io.h"
#include "kvring/io/state_format.h"
#include "kvring/io/state_rows.h"
#include "kvring/io/state_stream.h"
#include "kvring/layer_plan.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/storage/row_pieces.h"
#include "kvring/task_runner.h"

namespace kvring {
namespace detail {

// A step of a save on several threads: positions [pos, to) of owning layer `layer`, whose
// rows take `bytes` at `offset` from the first layer section's start; the first of its
// section (`opens`: the section header goes before it) or the last (`closes`: the CRC after).
struct SaveStep {
  size_t layer = 0;
  uint64_t pos = 0, to = 0;
  uint64_t offset = 0, bytes = 0;
  bool opens = false, closes = false;
};

// The steps of a save (chunks of a layer, one per step) and what they take.
struct SavePlan {
  std::vector<SaveStep> steps;
  uint64_t largest = 0;  // bytes of the largest step
  uint64_t bytes = 0;    // of every layer section: headers, rows, CRCs
};

// Fills *out with the steps of the layers' sections of `plan`, each layer holding held(layer).
template <typename Held>
void PlanSave(const LayerPlan& plan, const Held& held, SavePlan* out) {
  for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
    if (!plan.Layer(layer).OwnsKV()) continue;
    const auto range = held(layer);
    const LayerInfo& info = plan.Layer(layer);
    const KVShape shape = KVShape::Of(info.spec, info.num_slots);
    out->bytes += kSectionHeaderBytes + kLayerFixedBytes;
    uint64_t pos = range.first;
    do {
      SaveStep step{layer, pos, std::min(range.second, (pos / kRowChunk + 1) * kRowChunk)};
      (void)PieceBytes(shape, info.spec.format, step.to - step.pos, &step.bytes);
      step.offset = out->bytes;
      step.opens = pos == range.first;
      step.closes = step.to == range.second;
      out->steps.push_back(step);
      out->bytes += step.bytes;
      out->largest = std::max(out->largest, step.bytes);
      pos = step.to;
    } while (pos < range.second);
    out->bytes += kSectionCrcBytes;
  }
}

// Joins the CRC32Cs of a section's steps, keeping the zeros operator of the last length (a
// layer's full chunks all have one).
class StepCrcs {
 public:
  uint32_t Join(uint32_t crc, uint32_t step_crc, uint64_t step_bytes) {
    if (step_bytes != bytes_) {
      zeros_ = Crc32cZeros(step_bytes);
      bytes_ = step_bytes;
    }
    return zeros_.Apply(crc) ^ step_crc;
  }

 private:
  uint64_t bytes_ = 0;
  Crc32cZeros zeros_{0};
};

// Copies the rows of `step` (its layer holds [first, ...) at locate_of(layer)) into `to`, in
// the state's order, and returns their CRC32C.
template <typename Layout, typename LocateOf>
uint32_t GatherSaveStep(const LayerPlan& plan, const SaveStep& step, uint64_t first,
                        const LocateOf& locate_of, uint8_t* to) {
  const LayerInfo& info = plan.Layer(step.layer);
  const KVShape shape = KVShape::Of(info.spec, info.num_slots);
  uint64_t base = 0;
  (void)PieceBytes(shape, info.spec.format, step.pos - first, &base);
  ForEachRowPiece<PieceOrder::kStaged, Layout>(shape, info.spec.format, first, step.pos, step.to,
                                               locate_of(step.layer), [&](const RowPiece& piece) {
                                                 if (piece.memory != nullptr)
                                                   StagePiece(piece, to + (piece.offset - base));
                                               });
  return Crc32c(0, to, step.bytes);
}

// Writes the sections of `save` into `memory` (the sink's, save.bytes long): each step is
// gathered and checksummed in a staging buffer of its thread (in cache) and streamed to its
// place; the headers and the sections' CRC32Cs (joined with Crc32cCombine) follow.
template <typename Layout, typename Held, typename LocateOf>
Result WriteSectionsDirect(const LayerPlan& plan, const Held& held, const LocateOf& locate_of,
                           const SavePlan& save, uint8_t* memory, const TaskRunner& runner) {
  const uint64_t threads = runner.NumThreads();
  std::unique_ptr<uint8_t[]> stage(new (std::nothrow) uint8_t[threads * save.largest + 1]);
  std::vector<uint32_t> crcs(save.steps.size());
  if (stage == nullptr) {
    return Result::Refused(Status::kOutOfMemory, "state: no memory for %llu staging bytes",
                           threads * save.largest);
  }
  runner.Run(save.steps.size(), [&](uint64_t task, uint32_t thread) {
    const SaveStep& step = save.steps[task];
    uint8_t* staged = stage.get() + thread * save.largest;
    crcs[task] = GatherSaveStep<Layout>(plan, step, held(step.layer).first, locate_of, staged);
    StreamCopy(memory + step.offset, staged, step.bytes);
    StoreFence();
  });
  uint32_t crc = 0;
  StepCrcs joined;
  for (size_t i = 0; i < save.steps.size(); ++i) {
    const SaveStep& step = save.steps[i];
    if (step.opens) {
      uint8_t header[kSectionHeaderBytes + kLayerFixedBytes];
      const auto range = held(step.layer);
      crc = LayerSectionHeader(plan, step.layer, range.first, range.second, header);
      std::memcpy(memory + step.offset - sizeof(header), header, sizeof(header));
    }
    crc = joined.Join(crc, crcs[i], step.bytes);
    if (step.closes) std::memcpy(memory + step.offset + step.bytes, &crc, kSectionCrcBytes);
  }
  return Status::kOk;
}

// Writes the sections of `save` to `sink` with Write: batches of steps gathered and
// checksummed on the runner's threads (four per thread, into buffers of their own) while one
// task writes the batch before in order.
template <typename Layout, typename Held, typename LocateOf>
Result WriteSectionsPipelined(const LayerPlan& plan, const Held& held, const LocateOf& locate_of,
                              const SavePlan& save, ByteSink* sink, const TaskRunner& runner) {
  const uint64_t batch = uint64_t{4} * runner.NumThreads();
  std::unique_ptr<uint8_t[]> buffers(new (std::nothrow) uint8_t[2 * batch * save.largest + 1]);
  std::vector<uint32_t> crcs(save.steps.size());
  if (buffers == nullptr) {
    return Result::Refused(Status::kOutOfMemory, "state: no memory for %llu staging bytes",
                           2 * batch * save.largest);
  }
  Result result;
  const auto write = [&](const void* data, uint64_t bytes) {
    for (uint64_t at = 0; at < bytes && result.ok(); at += ByteSink::kMaxWrite) {
      result = sink->Write(static_cast<const uint8_t*>(data) + at,
                           std::min(ByteSink::kMaxWrite, bytes - at));
    }
  };
  uint32_t crc = 0;
  StepCrcs joined;
  const auto put = [&](uint64_t first, uint64_t last, const uint8_t* staged) {
    for (uint64_t i = first; i < last && result.ok(); ++i) {
      const SaveStep& step = save.steps[i];
      if (step.opens) {
        uint8_t header[kSectionHeaderBytes + kLayerFixedBytes];
        const auto range = held(step.layer);
        crc = LayerSectionHeader(plan, step.layer, range.first, range.second, header);
        write(header, sizeof(header));
      }
      write(staged + (i - first) * save.largest, step.bytes);
      crc = joined.Join(crc, crcs[i], step.bytes);
      if (step.closes) write(&crc, kSectionCrcBytes);
    }
  };
  const uint64_t steps = save.steps.size(), batches = (steps + batch - 1) / batch;
  for (uint64_t b = 0; b <= batches && result.ok(); ++b) {
    const uint64_t first = b * batch, count = b < batches ? std::min(batch, steps - first) : 0;
    uint8_t* set = buffers.get() + (b % 2) * batch * save.largest;
    const uint64_t writer = b > 0 ? 1 : 0;  // task 0 writes batch b - 1 meanwhile
    runner.Run(count + writer, [&](uint64_t task, uint32_t) {
      if (task < writer) {
        const uint64_t before = first - batch;
        put(before, std::min(first, steps), buffers.get() + ((b + 1) % 2) * batch * save.largest);
        return;
      }
      const uint64_t i = first + task - writer;
      const SaveStep& step = save.steps[i];
      crcs[i] = GatherSaveStep<Layout>(plan, step, held(step.layer).first, locate_of,
                                       set + (i - first) * save.largest);
    });
  }
  return result;
}

// As WriteState, on `runner`'s threads, writing the same bytes: into the sink's own memory
// when it has some (ByteSink::Reserve), else through Write. Allocates the steps and staging.
template <typename Layout, typename Held, typename LocateOf>
Result WriteStateParallel(const LayerPlan& plan, const std::string& model_id, uint64_t end,
                          const Held& held, const LocateOf& locate_of, ByteSink* sink,
                          const TaskRunner& runner) {
  Result result = CheckStateWrite(plan, model_id, held, sink);
  if (!result.ok()) return result;
  SavePlan save;
  PlanSave(plan, held, &save);
  {
    StateWriter out(sink, StateHeadBytes(model_id.size(), plan.NumLayers()));
    WriteStateHeader(plan, model_id, end, &out);
    result = out.Finish();
  }
  if (!result.ok() || save.steps.empty()) return result;
  uint8_t* memory = sink->Reserve(save.bytes);
  if (memory != nullptr) {
    return WriteSectionsDirect<Layout>(plan, held, locate_of, save, memory, runner);
  }
  return WriteSectionsPipelined<Layout>(plan, held, locate_of, save, sink, runner);
}

// As ReadStateRows, on the reader's threads: every chunk of every layer section is a task
// (the chunks write disjoint rows), each thread reading through a reader of its own.
// Allocates the list of sections and the readers.
template <typename Layout, typename TargetOf, typename Held, typename LocateOf>
Result ReadStateRowsParallel(StateReader* reader, const LayerPlan& plan, const TargetOf& target_of,
                             const Held& held, const LocateOf& locate_of) {
  struct Section {
    size_t layer;
    uint64_t rows;  // where its rows start in the source
    LayerSection fields;
    uint64_t from;        // the first position the destination keeps
    uint64_t first_task;  // of its chunks
  };
  std::vector<Section> sections;
  uint64_t tasks = 0, offset = FirstLayerSection(reader, plan);
  for (size_t layer = 0; layer < plan.NumLayers() && offset != 0; ++layer) {
    if (!plan.Layer(layer).OwnsKV()) continue;
    Section section{layer, offset + kSectionHeaderBytes + kLayerFixedBytes, {}, 0, tasks};
    if (!section.fields.Read(reader, offset)) return ReadFailed(offset);
    section.from = held(layer).first;
    if (section.from < section.fields.end) {
      tasks += (section.fields.end - 1) / kRowChunk - section.from / kRowChunk + 1;
    }
    sections.push_back(section);
    offset = section.fields.Next(offset);
  }
  if (offset == 0) return ReadFailed(kStatePreambleBytes);
  std::vector<StateReader> readers(reader->Threads(), StateReader(reader->Source()));
  std::vector<uint8_t> failed(reader->Threads(), 0);
  reader->Runner().Run(tasks, [&](uint64_t task, uint32_t thread) {
    const Section& section =
        *(std::upper_bound(sections.begin(), sections.end(), task,
                           [](uint64_t t, const Section& s) { return t < s.first_task; }) -
          1);
    const uint64_t chunk = section.from / kRowChunk + (task - section.first_task);
    const uint64_t pos = std::max(section.from, chunk * kRowChunk);
    const uint64_t to = std::min(section.fields.end, (chunk + 1) * kRowChunk);
    if (!ReadStateChunk<Layout>(&readers[thread], section.rows, target_of(section.layer),
                                section.fields.first, pos, to, locate_of(section.layer))) {
      failed[thread] = 1;
    }
  });
  for (uint8_t f : failed) {
    if (f != 0) return ReadFailed(FirstLayerSection(reader, plan));
  }
  return Status::kOk;
}

// Writes a state as WriteState does, on `runner`'s threads when it has several.
template <typename Layout, typename Held, typename LocateOf>
Result WriteStateOn(const TaskRunner& runner, const LayerPlan& plan, const std::string& model_id,
                    uint64_t end, const Held& held, const LocateOf& locate_of, ByteSink* sink) {
  if (runner.NumThreads() > 1) {
    return WriteStateParallel<Layout>(plan, model_id, end, held, locate_of, sink, runner);
  }
  return WriteState<Layout>(plan, model_id, end, held, locate_of, sink);
}

// Reads the rows as ReadStateRows does, on the reader's threads when it has several.
template <typename Layout, typename TargetOf, typename Held, typename LocateOf>
Result ReadStateRowsOn(StateReader* reader, const LayerPlan& plan, const TargetOf& target_of,
                       const Held& held, const LocateOf& locate_of) {
  if (reader->Threads() > 1) {
    return ReadStateRowsParallel<Layout>(reader, plan, target_of, held, locate_of);
  }
  return ReadStateRows<Layout>(reader, plan, target_of, held, locate_of);
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_IO_STATE_THREADS_H_
