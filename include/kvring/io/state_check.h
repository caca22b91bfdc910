// kvring/io/state_check.h: checking a saved state against a destination before anything is
// written: the preamble, every section's tag, size and CRC32C, the model id, the plan's
// fingerprint and each layer's range. Reads the whole source, writes nothing, allocates
// nothing. Internal.
#ifndef KVRING_IO_STATE_CHECK_H_
#define KVRING_IO_STATE_CHECK_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "kvring/detail/checked_math.h"
#include "kvring/detail/crc32c.h"
#include "kvring/formats/format.h"
#include "kvring/io/state_format.h"
#include "kvring/io/state_recurrent.h"
#include "kvring/io/state_stream.h"
#include "kvring/layer_plan.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/storage/row_pieces.h"

namespace kvring {
namespace detail {

// What a destination needs of one owning layer's section: its shape and format, the positions
// before the end that the next query reads (`keep`), and whether it is paged (then it holds
// every position from 0).
struct StateTarget {
  KVShape shape;
  Format format = Format::kBF16;
  uint64_t keep = 0;
  bool paged = false;
};

// Walks the sections of a state in order, checking each one's tag, size and CRC32C.
class SectionCursor {
 public:
  explicit SectionCursor(StateReader* reader)
      : reader_(reader), size_(reader->Size()), offset_(kStatePreambleBytes) {}

  // Where the next section would start; once every section is read, where the state should end.
  uint64_t Offset() const { return offset_; }

  // Moves past `bytes` bytes that are not a section (the caller checked they are there).
  void Skip(uint64_t bytes) { offset_ += bytes; }

  // Checks section `index` at Offset(), which should carry `tag`, and moves past it; sets
  // *payload (its offset) and *payload_bytes.
  Result Next(uint64_t index, uint32_t tag, uint64_t* payload, uint64_t* payload_bytes) {
    if (size_ - offset_ < kSectionHeaderBytes) {
      return Result::Refused(Status::kBadState,
                             "state: section %llu at byte %llu is cut off: the state ends at "
                             "byte %llu",
                             index, offset_, size_);
    }
    uint64_t file_tag = 0, reserved = 0, bytes = 0;
    if (!reader_->U32(offset_, &file_tag) || !reader_->U32(offset_ + 4, &reserved) ||
        !reader_->U64(offset_ + 8, &bytes)) {
      return ReadFailed(offset_);
    }
    if (file_tag != tag || reserved != 0) {
      return Result::Refused(Status::kBadState,
                             "state: section %llu at byte %llu has tag %llu where tag %llu "
                             "belongs (sections out of order, or a damaged state)",
                             index, offset_, file_tag, uint64_t{tag});
    }
    const uint64_t room = size_ - offset_ - kSectionHeaderBytes;
    if (bytes > room || room - bytes < kSectionCrcBytes) {
      return Result::Refused(Status::kBadState,
                             "state: section %llu at byte %llu holds %llu bytes, past the end of "
                             "the %llu-byte state",
                             index, offset_, bytes, size_);
    }
    uint32_t crc = 0;
    uint64_t stored = 0;
    if (!reader_->Crc(offset_, kSectionHeaderBytes + bytes, &crc) ||
        !reader_->U32(offset_ + kSectionHeaderBytes + bytes, &stored)) {
      return ReadFailed(offset_);
    }
    if (crc != stored) {
      return Result::Refused(Status::kBadState,
                             "state: section %llu (bytes %llu to %llu) fails its CRC32C check: "
                             "the state is damaged",
                             index, offset_, offset_ + kSectionHeaderBytes + bytes);
    }
    *payload = offset_ + kSectionHeaderBytes;
    *payload_bytes = bytes;
    offset_ += kSectionHeaderBytes + bytes + kSectionCrcBytes;
    return Status::kOk;
  }

 private:
  StateReader* reader_;
  uint64_t size_;
  uint64_t offset_;
};

// Checks the preamble: the magic, this build's version and the reserved word.
inline Result CheckStatePreamble(StateReader* reader) {
  const uint64_t size = reader->Size();
  if (size < kStatePreambleBytes) {
    return Result::Refused(Status::kBadState,
                           "state: %llu bytes is shorter than the %llu-byte preamble", size,
                           kStatePreambleBytes);
  }
  char magic[8];
  uint64_t version = 0, zero = 0;
  if (!reader->Copy(0, magic, 8) || !reader->U32(8, &version) || !reader->U32(12, &zero)) {
    return ReadFailed(0);
  }
  if (std::memcmp(magic, kStateMagic, 8) != 0) {
    return Result::Refused(Status::kBadState,
                           "state: not a kvring state (its first %llu bytes are not the magic "
                           "KVRSTATE)",
                           uint64_t{8});
  }
  if (version != kStateVersion || zero != 0) {
    return Result::Refused(Status::kBadState,
                           "state: format version %llu (reserved word %llu); this build reads "
                           "version %llu",
                           version, zero, uint64_t{kStateVersion});
  }
  return Status::kOk;
}

// Compares the model id of `id_bytes` bytes at `at` with `model_id`, in pieces (no allocation).
inline Result CheckStateModelId(StateReader* reader, uint64_t at, uint64_t id_bytes,
                                const std::string& model_id) {
  uint32_t file_crc = 0;
  bool same = id_bytes == model_id.size();
  for (uint64_t i = 0; i < id_bytes;) {
    char piece[256];
    const uint64_t len = std::min<uint64_t>(sizeof(piece), id_bytes - i);
    if (!reader->Copy(at + i, piece, len)) return ReadFailed(at + i);
    file_crc = Crc32c(file_crc, piece, len);
    same = same && std::memcmp(piece, model_id.data() + i, len) == 0;
    i += len;
  }
  if (same) return Status::kOk;
  return Result::Refused(Status::kBadState,
                         "state: written for another model: its model id (%llu bytes, CRC32C "
                         "%llu) is not this one's (%llu bytes, CRC32C %llu)",
                         id_bytes, uint64_t{file_crc}, uint64_t{model_id.size()},
                         uint64_t{Crc32c(0, model_id.data(), model_id.size())});
}

// Checks the header section's payload (`bytes` at `at`) against `plan` and `model_id`; sets
// *end to the state's end position.
inline Result CheckStateHeader(StateReader* reader, uint64_t at, uint64_t bytes,
                               const std::string& model_id, const LayerPlan& plan, uint64_t* end) {
  uint64_t id_bytes = 0;
  if (bytes < kHeaderFixedBytes || !reader->U32(at, &id_bytes)) {
    return Result::Refused(Status::kBadState,
                           "state: the header section holds %llu bytes, fewer than the %llu of "
                           "its fixed fields",
                           bytes, kHeaderFixedBytes);
  }
  const uint64_t layers = plan.NumLayers();
  const uint64_t expected = HeaderPayloadBytes(std::min(id_bytes, kMaxModelIdBytes), layers);
  if (id_bytes > kMaxModelIdBytes || expected != bytes) {
    return Result::Refused(Status::kBadState,
                           "state: the header section holds %llu bytes; a model id of %llu bytes "
                           "and this plan's %llu layers take %llu",
                           bytes, id_bytes, layers, expected);
  }
  Result result = CheckStateModelId(reader, at + 4, id_bytes, model_id);
  if (!result.ok()) return result;
  uint64_t field = at + 4 + id_bytes, context = 0, num_layers = 0;
  if (!reader->U64(field, &context) || !reader->U64(field + 8, end) ||
      !reader->U64(field + 16, &num_layers)) {
    return ReadFailed(field);
  }
  if (context != plan.Runtime().context) {
    return Result::Refused(Status::kBadState,
                           "state: runtime.context is %llu in the state and %llu in this plan",
                           context, plan.Runtime().context);
  }
  if (num_layers != layers) {
    return Result::Refused(Status::kBadState,
                           "state: the state's model has %llu layers and this plan %llu",
                           num_layers, layers);
  }
  if (*end > context) {
    return Result::Refused(Status::kBadState,
                           "state: its end position %llu is past the context of %llu", *end,
                           context);
  }
  field += 24;
  for (uint64_t layer = 0; layer < layers; ++layer) {
    StateLayer file;
    for (int i = 0; i < StateLayer::kFields; ++i) {
      const bool read = StateLayer::FieldBytes(i) == 8 ? reader->U64(field, &file.values[i])
                                                       : reader->U32(field, &file.values[i]);
      if (!read) return ReadFailed(field);
      field += StateLayer::FieldBytes(i);
    }
    result = CompareStateLayer(layer, file, StateLayer::Of(plan, layer));
    if (!result.ok()) return result;
  }
  return Status::kOk;
}

// Checks the section payload of owning layer `layer` (`bytes` at `at`) of a state that ends at
// `end`, for a destination layer `target` describes.
inline Result CheckStateLayer(StateReader* reader, uint64_t at, uint64_t bytes, uint64_t layer,
                              uint64_t end, const StateTarget& target) {
  if (bytes < kLayerFixedBytes) {
    return Result::Refused(Status::kBadState,
                           "state: the section of layers[%llu] holds %llu bytes, fewer than the "
                           "%llu of its fixed fields",
                           layer, bytes, kLayerFixedBytes);
  }
  uint64_t file_layer = 0, format = 0, first = 0, file_end = 0;
  if (!reader->U32(at, &file_layer) || !reader->U32(at + 4, &format) ||
      !reader->U64(at + 8, &first) || !reader->U64(at + 16, &file_end)) {
    return ReadFailed(at);
  }
  if (file_layer != layer) {
    return Result::Refused(Status::kBadState,
                           "state: a section holds layers[%llu] where the section of "
                           "layers[%llu] belongs (sections out of order)",
                           file_layer, layer);
  }
  if (format != static_cast<uint64_t>(target.format)) {
    return Result::Refused(Status::kBadState,
                           "state: layers[%llu] section's format is %llu and the layer's %llu",
                           layer, format, static_cast<uint64_t>(target.format));
  }
  if (file_end != end || first > end) {
    return Result::Refused(Status::kBadState,
                           "state: layers[%llu] holds [%llu, %llu), which does not end at the "
                           "state's end %llu",
                           layer, first, file_end, end);
  }
  // A query at `end` reads the `keep` positions before it: they must all be there.
  const uint64_t needed_from = target.paged ? 0 : end - std::min(end, target.keep);
  if (first > needed_from) {
    return Result::Refused(Status::kBadState,
                           "state: layers[%llu] holds [%llu, %llu), but this layer needs every "
                           "position from %llu",
                           layer, first, end, needed_from);
  }
  uint64_t rows = 0;
  if (!PieceBytes(target.shape, target.format, end - first, &rows) ||
      rows != bytes - kLayerFixedBytes) {
    return Result::Refused(Status::kBadState,
                           "state: layers[%llu] section holds %llu bytes of rows; %llu positions "
                           "take %llu",
                           layer, bytes - kLayerFixedBytes, end - first, rows);
  }
  return Status::kOk;
}

// Returns the layers of `plan` with a recurrent state.
inline size_t NumStateLayers(const LayerPlan& plan) {
  size_t count = 0;
  for (const LayerInfo& info : plan.Layers()) count += info.HasState() ? size_t{1} : size_t{0};
  return count;
}

// Checks the whole state `reader` reads against a destination of `plan` and `model_id` whose
// owning layer `layer` target_of(layer) describes, and the state sections of the layers with
// a recurrent state; sets *end to the state's end. Reads every byte (each section's CRC32C)
// and writes nothing.
template <typename TargetOf>
Result CheckState(StateReader* reader, const std::string& model_id, const LayerPlan& plan,
                  const TargetOf& target_of, uint64_t* end) {
  Result result = CheckStatePreamble(reader);
  if (!result.ok()) return result;
  SectionCursor sections(reader);
  uint64_t at = 0, bytes = 0;
  result = sections.Next(0, kHeaderTag, &at, &bytes);
  if (!result.ok()) return result;
  result = CheckStateHeader(reader, at, bytes, model_id, plan, end);
  if (!result.ok()) return result;
  uint64_t index = 1;
  for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
    if (!plan.Layer(layer).OwnsKV()) continue;
    result = sections.Next(index++, kLayerTag, &at, &bytes);
    if (!result.ok()) return result;
    result = CheckStateLayer(reader, at, bytes, layer, *end, target_of(layer));
    if (!result.ok()) return result;
  }
  for (const LayerInfo& info : plan.Layers()) {
    if (!info.HasState()) continue;
    if (sections.Offset() == reader->Size()) {
      return Result::Refused(Status::kBadState,
                             "state: it ends without the recurrent state of layers[%llu], which "
                             "this plan keeps",
                             uint64_t{info.index});
    }
    result = sections.Next(index++, kRecurrentTag, &at, &bytes);
    if (!result.ok()) return result;
    result = CheckRecurrentSection(reader, at, bytes, info, *end);
    if (!result.ok()) return result;
  }
  if (sections.Offset() != reader->Size()) {
    uint64_t tag = 0;
    if (reader->Size() - sections.Offset() >= 4 && reader->U32(sections.Offset(), &tag) &&
        tag == kRecurrentTag) {
      return Result::Refused(Status::kBadState,
                             "state: it holds recurrent states (a section at byte %llu) and "
                             "this plan has %llu layers with one",
                             sections.Offset(), uint64_t{NumStateLayers(plan)});
    }
    return Result::Refused(Status::kBadState,
                           "state: %llu bytes follow its last section (at byte %llu)",
                           reader->Size() - sections.Offset(), sections.Offset());
  }
  return Status::kOk;
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_IO_STATE_CHECK_H_
