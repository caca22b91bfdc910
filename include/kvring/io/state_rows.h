// kvring/io/state_rows.h: writing a whole state (the header and every owning layer's rows)
// and reading a checked state's rows into a destination, for any storage that says which
// positions each owning layer holds and where they live (io/state_access.h: a KVCache, a
// KVPool sequence). Internal.
#ifndef KVRING_IO_STATE_ROWS_H_
#define KVRING_IO_STATE_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvring/base.h"
#include "kvring/io/byte_io.h"
#include "kvring/io/state_check.h"
#include "kvring/io/state_format.h"
#include "kvring/io/state_stream.h"
#include "kvring/layer_plan.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/storage/row_pieces.h"

namespace kvring {
namespace detail {

// Returns kOk if a state of `model_id` may be written to `sink`; otherwise kBadArgument.
inline Result CheckStateSink(const std::string& model_id, const ByteSink* sink) {
  if (sink == nullptr) return Result::Refused(Status::kBadArgument, "state: the sink is null");
  if (model_id.size() > kMaxModelIdBytes) {
    return Result::Refused(Status::kBadArgument,
                           "state: a model id of %llu bytes is longer than the %llu a state "
                           "carries",
                           uint64_t{model_id.size()}, kMaxModelIdBytes);
  }
  return Status::kOk;
}

// Writes the preamble and the header section of a state of `plan` and `model_id` at `end`.
inline void WriteStateHeader(const LayerPlan& plan, const std::string& model_id, uint64_t end,
                             StateWriter* out) {
  out->Put(kStateMagic, 8);
  out->PutU32(kStateVersion);
  out->PutU32(0);
  out->BeginSection(kHeaderTag, HeaderPayloadBytes(model_id.size(), plan.NumLayers()));
  out->PutU32(static_cast<uint32_t>(model_id.size()));
  out->Put(model_id.data(), model_id.size());
  out->PutU64(plan.Runtime().context);
  out->PutU64(end);
  out->PutU64(plan.NumLayers());
  for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
    const StateLayer state = StateLayer::Of(plan, layer);
    for (int i = 0; i < StateLayer::kFields; ++i) {
      if (StateLayer::FieldBytes(i) == 8) {
        out->PutU64(state.values[i]);
      } else {
        out->PutU32(static_cast<uint32_t>(state.values[i]));
      }
    }
  }
  out->EndSection();
}

// Writes a state of `plan` and `model_id` at `end` to `sink`, whose owning layer `layer`
// holds held(layer) = {first, end} at locate_of(layer)(pos) (a RowSegment).
template <typename Layout, typename Held, typename LocateOf>
Result WriteState(const LayerPlan& plan, const std::string& model_id, uint64_t end,
                  const Held& held, const LocateOf& locate_of, ByteSink* sink) {
  const Result allowed = CheckStateSink(model_id, sink);
  if (!allowed.ok()) return allowed;
  uint64_t total = 0;
  if (!StateBytesOf(plan, model_id.size(), held, &total)) {
    return Result::Refused(Status::kBadArgument, "state: its size overflows 64 bits");
  }
  StateWriter out(sink);
  WriteStateHeader(plan, model_id, end, &out);
  for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
    const LayerInfo& info = plan.Layer(layer);
    if (!info.OwnsKV()) continue;
    const auto range = held(layer);
    const KVShape shape = KVShape::Of(info.spec, info.num_slots);
    uint64_t rows = 0;
    const bool fits = PieceBytes(shape, info.spec.format, range.second - range.first, &rows);
    KVRING_DASSERT(fits);  // StateBytesOf checked it
    (void)fits;
    out.BeginSection(kLayerTag, kLayerFixedBytes + rows);
    out.PutU32(static_cast<uint32_t>(layer));
    out.PutU32(static_cast<uint32_t>(info.spec.format));
    out.PutU64(range.first);
    out.PutU64(range.second);
    ForEachRowPiece<PieceOrder::kBytes, Layout>(shape, info.spec.format, range.first, range.first,
                                                range.second, locate_of(layer),
                                                [&out](const RowPiece& piece) {
                                                  out.PutPiece(piece);  // in order, no gaps
                                                });
    out.EndSection();
    if (out.Failed()) break;  // the sink failed: the rest would be dropped
  }
  return out.Finish();
}

// Reads the rows of every layer section of a state CheckState accepted into the destination,
// whose owning layer `layer` keeps begin(layer, first, end) onwards of the section's [first,
// end) (it makes that the layer's range and returns where it starts) at
// locate_of(layer)(pos). kIOError if the source fails to read.
template <typename Layout, typename TargetOf, typename Begin, typename LocateOf>
Result ReadStateRows(StateReader* reader, const LayerPlan& plan, const TargetOf& target_of,
                     const Begin& begin, const LocateOf& locate_of) {
  uint64_t id_bytes = 0;
  const uint64_t header = kStatePreambleBytes + kSectionHeaderBytes;
  if (!reader->U32(header, &id_bytes)) return ReadFailed(header);
  uint64_t offset = header + HeaderPayloadBytes(id_bytes, plan.NumLayers()) + kSectionCrcBytes;
  for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
    if (!plan.Layer(layer).OwnsKV()) continue;
    uint64_t bytes = 0, first = 0, end = 0;
    const uint64_t at = offset + kSectionHeaderBytes;
    if (!reader->U64(offset + 8, &bytes) || !reader->U64(at + 8, &first) ||
        !reader->U64(at + 16, &end)) {
      return ReadFailed(offset);
    }
    const StateTarget target = target_of(layer);
    const uint64_t from = begin(layer, first, end);
    const uint64_t rows = at + kLayerFixedBytes;
    bool ok = true;
    ForEachRowPiece<PieceOrder::kStorage, Layout>(
        target.shape, target.format, first, from, end, locate_of(layer),
        [&](const RowPiece& piece) { ok = ok && reader->CopyPiece(rows, piece); });
    StoreFence();
    if (!ok) return ReadFailed(rows);
    offset += kSectionHeaderBytes + bytes + kSectionCrcBytes;
  }
  return Status::kOk;
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_IO_STATE_ROWS_H_
