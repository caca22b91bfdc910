// kvring/io/state_rows.h: writing a state (the header, then every owning layer's rows) and
// reading a checked state's rows into a destination, whole or a step of at most kRowChunk
// positions of one layer at a time, for any storage that says which positions each owning
// layer holds and where they live (io/state_access.h: a KVCache, a KVPool sequence). Internal.
#ifndef KVRING_IO_STATE_ROWS_H_
#define KVRING_IO_STATE_ROWS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

// Returns kOk if a state of `plan` and `model_id` whose owning layers hold held(layer) =
// {first, end} may be written to `sink`; otherwise kBadArgument (a null sink, a model id past
// kMaxModelIdBytes, a size past 64 bits); sets *state_bytes, when given, to its bytes.
template <typename Held>
Result CheckStateWrite(const LayerPlan& plan, const std::string& model_id, const Held& held,
                       const ByteSink* sink, uint64_t* state_bytes = nullptr) {
  if (sink == nullptr) return Result::Refused(Status::kBadArgument, "state: the sink is null");
  if (model_id.size() > kMaxModelIdBytes) {
    return Result::Refused(Status::kBadArgument,
                           "state: a model id of %llu bytes is longer than the %llu a state "
                           "carries",
                           uint64_t{model_id.size()}, kMaxModelIdBytes);
  }
  uint64_t total = 0;
  if (!StateBytesOf(plan, model_id.size(), held, &total)) {
    return Result::Refused(Status::kBadArgument, "state: its size overflows 64 bits");
  }
  if (state_bytes != nullptr) *state_bytes = total;
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

// The fields of a layer section a reader needs: its payload's bytes and its range.
struct LayerSection {
  uint64_t bytes = 0;
  uint64_t first = 0;
  uint64_t end = 0;
  // Reads the section at `offset` of a checked state; false if the source failed.
  bool Read(StateReader* reader, uint64_t offset) {
    const uint64_t at = offset + kSectionHeaderBytes;
    return reader->U64(offset + 8, &bytes) && reader->U64(at + 8, &first) &&
           reader->U64(at + 16, &end);
  }
  // Where the next section starts.
  uint64_t Next(uint64_t offset) const {
    return offset + kSectionHeaderBytes + bytes + kSectionCrcBytes;
  }
};

// How far a state's writer or reader has come: the owning layer it writes or reads, and the
// next position of it. A step moves it over at most kRowChunk positions of one layer.
struct StateCursor {
  size_t layer = 0;   // plan.NumLayers() once every layer is done
  uint64_t pos = 0;   // the layer's next position
  bool open = false;  // the layer's section is begun (written, or its header read)
  // Reading: where the layer's section starts in the source, and its fields once open.
  uint64_t offset = 0;
  LayerSection section;
};

// Moves `cursor` to the next owning layer from its own on; returns false if none is left.
inline bool NextOwner(const LayerPlan& plan, StateCursor* cursor) {
  while (cursor->layer < plan.NumLayers() && !plan.Layer(cursor->layer).OwnsKV()) ++cursor->layer;
  return cursor->layer < plan.NumLayers();
}

// Writes the header of owning layer `layer`'s section (holding [first, end)) to `to`, and
// returns its CRC32C (the section's, so far).
inline uint32_t LayerSectionHeader(const LayerPlan& plan, size_t layer, uint64_t first,
                                   uint64_t end,
                                   uint8_t (&to)[kSectionHeaderBytes + kLayerFixedBytes]) {
  const LayerInfo& info = plan.Layer(layer);
  uint64_t rows = 0;
  (void)PieceBytes(KVShape::Of(info.spec, info.num_slots), info.spec.format, end - first, &rows);
  const uint32_t words[4] = {kLayerTag, 0, static_cast<uint32_t>(layer),
                             static_cast<uint32_t>(info.spec.format)};
  const uint64_t payload = kLayerFixedBytes + rows;
  std::memcpy(to, &words[0], 8);
  std::memcpy(to + 8, &payload, 8);
  std::memcpy(to + 16, &words[2], 8);
  std::memcpy(to + 24, &first, 8);
  std::memcpy(to + 32, &end, 8);
  return Crc32c(0, to, sizeof(to));
}

// Writes the next step of a state's layers to `out`: positions [cursor->pos, the end of their
// chunk) of owning layer cursor->layer, which holds held(layer) = {first, end} at
// locate_of(layer)(pos), opening its section before its first position and closing it after
// its last. Returns false, writing nothing, once every layer is written.
template <typename Layout, typename Held, typename LocateOf>
bool WriteStateStep(const LayerPlan& plan, const Held& held, const LocateOf& locate_of,
                    StateCursor* cursor, StateWriter* out) {
  if (!NextOwner(plan, cursor)) return false;
  const size_t layer = cursor->layer;
  const LayerInfo& info = plan.Layer(layer);
  const auto range = held(layer);
  const KVShape shape = KVShape::Of(info.spec, info.num_slots);
  if (!cursor->open) {
    uint8_t header[kSectionHeaderBytes + kLayerFixedBytes];
    (void)LayerSectionHeader(plan, layer, range.first, range.second, header);
    out->BeginSection(header, sizeof(header));
    cursor->pos = range.first;
    cursor->open = true;
  }
  const uint64_t to = std::min(range.second, (cursor->pos / kRowChunk + 1) * kRowChunk);
  // Each kv_head's K of the chunk is staged whole and filled tile by tile (its bytes go dim by
  // dim); the scales and V follow in order.
  uint8_t* block = nullptr;
  uint64_t block_offset = 0, block_end = 0;
  ForEachRowPiece<PieceOrder::kStaged, Layout>(
      shape, info.spec.format, range.first, cursor->pos, to, locate_of(layer),
      [&](const RowPiece& piece) {
        if (piece.memory == nullptr) {
          block = out->Reserve(piece.bytes);
          block_offset = piece.offset;
          block_end = piece.offset + piece.bytes;
        } else if (piece.offset >= block_offset && piece.offset < block_end) {
          if (block != nullptr) StagePiece(piece, block + (piece.offset - block_offset));
        } else {
          out->PutPiece(piece);
        }
      });
  cursor->pos = to;
  if (to == range.second) {
    out->EndSection();
    cursor->open = false;
    ++cursor->layer;
  }
  return true;
}

// Writes a state of `plan` and `model_id` at `end` to `sink`, whose owning layer `layer`
// holds held(layer) = {first, end} at locate_of(layer)(pos) (a RowSegment).
template <typename Layout, typename Held, typename LocateOf>
Result WriteState(const LayerPlan& plan, const std::string& model_id, uint64_t end,
                  const Held& held, const LocateOf& locate_of, ByteSink* sink) {
  uint64_t bytes = 0;
  Result result = CheckStateWrite(plan, model_id, held, sink, &bytes);
  if (!result.ok()) return result;
  StateWriter out(sink, bytes);
  WriteStateHeader(plan, model_id, end, &out);
  StateCursor cursor;
  while (!out.Failed() && WriteStateStep<Layout>(plan, held, locate_of, &cursor, &out)) {
  }
  return out.Finish();
}

// Returns where the first layer section of a checked state starts, or 0 if the source failed.
inline uint64_t FirstLayerSection(StateReader* reader, const LayerPlan& plan) {
  uint64_t id_bytes = 0;
  if (!reader->U32(kStatePreambleBytes + kSectionHeaderBytes, &id_bytes)) return 0;
  return StateHeadBytes(id_bytes, plan.NumLayers());
}

// Calls begin(layer, first, end) with the range of every layer section of a state CheckState
// accepted (the destination makes the part of it that its slots hold its range). kIOError if
// the source fails to read.
template <typename Begin>
Result RestoreStateRanges(StateReader* reader, const LayerPlan& plan, const Begin& begin) {
  uint64_t offset = FirstLayerSection(reader, plan);
  for (size_t layer = 0; layer < plan.NumLayers() && offset != 0; ++layer) {
    if (!plan.Layer(layer).OwnsKV()) continue;
    LayerSection section;
    if (!section.Read(reader, offset)) return ReadFailed(offset);
    begin(layer, section.first, section.end);
    offset = section.Next(offset);
  }
  if (offset == 0) return ReadFailed(kStatePreambleBytes);
  return Status::kOk;
}

// Copies positions [pos, to) of a layer section holding [first, ...), whose rows start at
// `rows` in the source, into the destination `target` describes at locate(pos), with
// non-temporal stores and a fence after them; false if the source failed to read.
template <typename Layout, typename Locate>
bool ReadStateChunk(StateReader* reader, uint64_t rows, const StateTarget& target, uint64_t first,
                    uint64_t pos, uint64_t to, const Locate& locate) {
  bool ok = true;
  // Consecutive whole K tiles of a tiled layout (each piece one tile's rows, contiguous in
  // memory; the next tile's right after it, its columns next in the source) go as one run.
  RowPiece run;
  uint64_t tiles = 0;
  const auto flush = [&] {
    if (tiles > 1) {
      ok = ok && reader->CopyTiles(rows, run, tiles);
    } else if (tiles == 1) {
      ok = ok && reader->CopyPiece(rows, run);
    }
    tiles = 0;
  };
  ForEachRowPiece<PieceOrder::kStorage, Layout>(
      target.shape, target.format, first, pos, to, locate, [&](const RowPiece& piece) {
        const bool next_tile = tiles != 0 && piece.count > 1 && piece.count == run.count &&
                               piece.bytes == run.bytes && piece.memory_stride == piece.bytes &&
                               run.memory_stride == run.bytes &&
                               piece.offset_stride == run.offset_stride &&
                               piece.offset == run.offset + tiles * run.bytes &&
                               piece.memory == run.memory + tiles * run.count * run.bytes;
        if (next_tile) {
          ++tiles;
          return;
        }
        flush();
        run = piece;
        tiles = 1;
      });
  flush();
  StoreFence();
  return ok;
}

// Reads the next step of a checked state's rows into the destination: positions
// [cursor->pos, the end of their chunk) of owning layer cursor->layer, which keeps held(layer)
// = {from, end} of the section's range (RestoreStateRanges made it) at locate_of(layer)(pos).
// Start with cursor->offset = FirstLayerSection(...). Sets *more to false once every layer
// is read; kIOError if the source fails to read.
template <typename Layout, typename TargetOf, typename Held, typename LocateOf>
Result ReadStateStep(StateReader* reader, const LayerPlan& plan, const TargetOf& target_of,
                     const Held& held, const LocateOf& locate_of, StateCursor* cursor, bool* more) {
  *more = NextOwner(plan, cursor);
  if (!*more) return Status::kOk;
  const size_t layer = cursor->layer;
  LayerSection& section = cursor->section;
  if (!cursor->open) {
    if (!section.Read(reader, cursor->offset)) return ReadFailed(cursor->offset);
    cursor->pos = held(layer).first;
    cursor->open = true;
  }
  const uint64_t rows = cursor->offset + kSectionHeaderBytes + kLayerFixedBytes;
  const uint64_t to = std::min(section.end, (cursor->pos / kRowChunk + 1) * kRowChunk);
  if (!ReadStateChunk<Layout>(reader, rows, target_of(layer), section.first, cursor->pos, to,
                              locate_of(layer))) {
    return ReadFailed(rows);
  }
  cursor->pos = to;
  if (to == section.end) {
    cursor->offset = section.Next(cursor->offset);
    cursor->open = false;
    ++cursor->layer;
  }
  return Status::kOk;
}

// Reads the rows of every layer section of a checked state whose ranges RestoreStateRanges
// gave the destination. kIOError if the source fails to read.
template <typename Layout, typename TargetOf, typename Held, typename LocateOf>
Result ReadStateRows(StateReader* reader, const LayerPlan& plan, const TargetOf& target_of,
                     const Held& held, const LocateOf& locate_of) {
  StateCursor cursor;
  cursor.offset = FirstLayerSection(reader, plan);
  for (bool more = true; more;) {
    const Result read =
        ReadStateStep<Layout>(reader, plan, target_of, held, locate_of, &cursor, &more);
    if (!read.ok()) return read;
  }
  return Status::kOk;
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_IO_STATE_ROWS_H_
