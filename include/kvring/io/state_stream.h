// kvring/io/state_stream.h: the byte streams of kvring's state format: StateWriter writes
// sections (a header, then the payload, then a CRC32C of both) through a staging buffer to a
// ByteSink; StateReader reads a ByteSource by offset through views, copying or checksumming
// ranges.
// Internal.
#ifndef KVRING_IO_STATE_STREAM_H_
#define KVRING_IO_STATE_STREAM_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/detail/crc32c.h"
#include "kvring/detail/transpose.h"
#include "kvring/io/byte_io.h"
#include "kvring/kernel_limits.h"
#include "kvring/status.h"
#include "kvring/storage/row_pieces.h"
#include "kvring/task_runner.h"

namespace kvring {
namespace detail {

// Copies `bytes` bytes from `from` to `to`: the piece sizes of tiled K rows without a call.
inline void CopySmall(void* to, const void* from, uint64_t bytes) {
  switch (bytes) {
    case 16:
      std::memcpy(to, from, 16);
      return;
    case 32:
      std::memcpy(to, from, 32);
      return;
    default:
      std::memcpy(to, from, bytes);
  }
}

// Copies the parts of `piece` to `to` + r * offset_stride, prefetching the parts a few ahead
// (a flash K's dims are num_slots apart, beyond what the hardware prefetcher follows).
inline void StagePiece(const RowPiece& piece, uint8_t* to) {
  constexpr uint64_t kAhead = 4;
  const uint8_t* from = piece.memory;
  for (uint64_t r = 0; r < piece.count; ++r, from += piece.memory_stride) {
    if (r + kAhead < piece.count) {
      const uint8_t* ahead = from + kAhead * piece.memory_stride;
      for (uint64_t line = 0; line < piece.bytes; line += 64) __builtin_prefetch(ahead + line);
    }
    CopySmall(to + r * piece.offset_stride, from, piece.bytes);
  }
}

// Writes sections to a ByteSink: bytes gather in a staging buffer of up to kStage bytes,
// which stays in cache while each section's CRC32C is computed over it, and go to the sink
// when it is full. After a failure (the sink's, or no memory for the buffer) it takes and
// drops bytes, and Finish() returns the failure.
class StateWriter {
 public:
  // Room for one kv_head's K of a chunk of the widest head in BF16 (a staged block).
  static constexpr uint64_t kStage = uint64_t{1} << 19;
  static_assert(kStage >= uint64_t{kMaxAttentionHeadDim} * kRowChunk * sizeof(BF16),
                "a staged block must fit");
  // The smallest stage: what a header or a record needs, from the allocator's cached sizes.
  static constexpr uint64_t kMinStage = uint64_t{1} << 12;

  // `expected`: the bytes the writer is to take, where the caller knows them. The stage holds
  // them up to kStage, so a small state, a header or a record costs no 512 KiB buffer (a
  // fresh mapping and its page faults in most allocators); a staged block larger than the
  // stage (Reserve) grows it.
  explicit StateWriter(ByteSink* sink, uint64_t expected = kStage)
      : sink_(sink),
        capacity_(StageBytes(expected)),
        stage_(new (std::nothrow) uint8_t[capacity_]) {
    if (stage_ == nullptr) {
      failed_ = Result::Refused(Status::kOutOfMemory,
                                "state: no memory for the %llu-byte staging buffer", capacity_);
    }
  }

  // Pieces of at least this many contiguous bytes go from storage straight to a sink with
  // memory (PutDirect).
  static constexpr uint64_t kDirectBytes = uint64_t{1} << 14;

  // Puts the `count` parts of `piece`, whose offsets follow each other.
  void PutPiece(const RowPiece& piece) {
    if (piece.count == 1 && piece.bytes >= kDirectBytes && PutDirect(piece.memory, piece.bytes)) {
      return;
    }
    const uint8_t* memory = piece.memory;
    for (uint64_t r = 0; r < piece.count; ++r, memory += piece.memory_stride) {
      Put(memory, piece.bytes);
    }
  }
  // Returns where the next `bytes` bytes (at most kStage) go, for the caller to fill in any
  // order before its next call; null after a failure.
  uint8_t* Reserve(uint64_t bytes) {
    KVRING_DASSERT(bytes <= kStage);
    if (stage_ == nullptr) return nullptr;
    if (bytes > capacity_ - used_) Flush();
    if (bytes > capacity_ && !Grow(bytes)) return nullptr;
    uint8_t* at = stage_.get() + used_;
    used_ += bytes;
    return at;
  }
  void PutU32(uint32_t value) { Put(&value, 4); }
  void PutU64(uint64_t value) { Put(&value, 8); }
  void Put(const void* data, uint64_t bytes) {
    if (bytes <= capacity_ - used_ && stage_ != nullptr) {  // the common case: it fits
      CopySmall(stage_.get() + used_, data, bytes);
      used_ += bytes;
      return;
    }
    const uint8_t* from = static_cast<const uint8_t*>(data);
    while (bytes != 0 && stage_ != nullptr) {
      if (used_ == capacity_) Flush();
      const uint64_t len = std::min(bytes, capacity_ - used_);
      std::memcpy(stage_.get() + used_, from, len);
      used_ += len;
      from += len;
      bytes -= len;
    }
  }

  void BeginSection(uint32_t tag, uint64_t payload_bytes) {
    crc_ = 0;
    crc_from_ = used_;
    PutU32(tag);
    PutU32(0);
    PutU64(payload_bytes);
  }
  // Begins a section with its header and leading payload fields encoded already.
  void BeginSection(const void* header, uint64_t bytes) {
    crc_ = 0;
    crc_from_ = used_;
    Put(header, bytes);
  }
  void EndSection() {
    CrcStage();
    const uint32_t crc = crc_;
    Put(&crc, 4);
    crc_from_ = used_;
  }
  // Hands the last bytes to the sink. Returns the first failure, if any.
  Result Finish() {
    if (used_ != 0) Flush();
    return failed_;
  }
  bool Failed() const { return !failed_.ok(); }

 private:
  static uint64_t StageBytes(uint64_t expected) {
    if (expected >= kStage) return kStage;
    return std::max(kMinStage, (expected + 63) & ~uint64_t{63});
  }
  // Replaces the empty stage (after a Flush) with one of StageBytes(bytes); false, keeping
  // the old one and failing the writer with kOutOfMemory, without the memory.
  bool Grow(uint64_t bytes) {
    const uint64_t capacity = StageBytes(bytes);
    std::unique_ptr<uint8_t[]> stage(new (std::nothrow) uint8_t[capacity]);
    if (stage == nullptr) {
      if (failed_.ok()) {
        failed_ = Result::Refused(Status::kOutOfMemory,
                                  "state: no memory for the %llu-byte staging buffer", capacity);
      }
      return false;
    }
    stage_ = std::move(stage);
    capacity_ = capacity;
    return true;
  }
  // Where the sink has memory (HasMemory), copies `bytes` bytes from `data` into it in the pass
  // that checksums them, after what is staged: one pass over bytes that need no gathering (a
  // V piece), where the stage would take two (into the stage, then out of it). False, taking
  // nothing, where the sink has no memory or no room for them.
  bool PutDirect(const uint8_t* data, uint64_t bytes) {
    if (stage_ == nullptr || !failed_.ok() || !sink_->HasMemory()) return false;
    if (used_ != 0) Flush();
    uint8_t* memory = failed_.ok() ? sink_->Reserve(bytes) : nullptr;
    if (memory == nullptr) return false;
    crc_ = Crc32cCopy(crc_, memory, data, bytes);
    StoreFence();
    return true;
  }
  void CrcStage() {
    crc_ = Crc32c(crc_, stage_.get() + crc_from_, used_ - crc_from_);
    crc_from_ = used_;
  }
  // Hands the staged bytes to the sink in pieces of up to ByteSink::kMaxWrite; into its
  // memory where it has some, the bytes not yet checksummed copied in the checksum's pass.
  void Flush() {
    uint8_t* memory = failed_.ok() && sink_->HasMemory() ? sink_->Reserve(used_) : nullptr;
    if (memory != nullptr) {
      StreamCopy(memory, stage_.get(), crc_from_);
      crc_ = Crc32cCopy(crc_, memory + crc_from_, stage_.get() + crc_from_, used_ - crc_from_);
      StoreFence();
      used_ = crc_from_ = 0;
      return;
    }
    CrcStage();
    for (uint64_t at = 0; at < used_ && failed_.ok(); at += ByteSink::kMaxWrite) {
      const Result written =
          sink_->Write(stage_.get() + at, std::min(ByteSink::kMaxWrite, used_ - at));
      if (!written.ok()) failed_ = written;
    }
    used_ = crc_from_ = 0;
  }

  ByteSink* sink_;
  uint64_t capacity_;  // of the stage
  std::unique_ptr<uint8_t[]> stage_;
  uint64_t used_ = 0, crc_from_ = 0;
  uint32_t crc_ = 0;
  Result failed_;
};

// Reads a ByteSource by offset through views of up to kMaxView bytes.
class StateReader {
 public:
  StateReader() = default;
  explicit StateReader(ByteSource* source) : source_(source), size_(source->Size()) {}
  // A reader whose long passes (CRC32Cs, a load's rows) run on `runner`'s threads when the
  // source's views are concurrent.
  StateReader(ByteSource* source, const TaskRunner& runner) : StateReader(source) {
    if (source->ConcurrentViews()) runner_ = runner;
  }
  uint64_t Size() const { return size_; }
  ByteSource* Source() const { return source_; }
  // The threads the reader's passes run on (1: the calling thread).
  uint32_t Threads() const { return runner_.NumThreads(); }
  const TaskRunner& Runner() const { return runner_; }

  // Copies bytes [offset, offset + bytes) to `to`; false if the source failed to read them.
  bool Copy(uint64_t offset, void* to, uint64_t bytes) {
    return CopyWith(offset, to, bytes, false);
  }
  // Copies the bytes of `piece` at `base` + its offsets into its memory, with non-temporal
  // stores (StreamCopy; StoreFence() after the last); false if the source failed to read them.
  bool CopyPiece(uint64_t base, const RowPiece& piece) {
    const uint64_t span = (piece.count - 1) * piece.offset_stride + piece.bytes;
    const uint8_t* view = span <= ByteSource::kMaxView ? Bytes(base + piece.offset, span) : nullptr;
    if (view != nullptr && piece.count > 1 && piece.memory_stride == piece.bytes) {
      // A tile's rows of every dim: contiguous in memory, gathered in one loop.
      StreamGather(piece.memory, view, piece.offset_stride, piece.bytes, piece.count);
      return true;
    }
    for (uint64_t r = 0; r < piece.count; ++r) {
      uint8_t* to = piece.memory + r * piece.memory_stride;
      const uint64_t offset = r * piece.offset_stride;
      if (view != nullptr) {
        StreamCopy</*kFromMemory=*/true>(to, view + offset, piece.bytes);
      } else if (!CopyWith(base + piece.offset + offset, to, piece.bytes, true)) {
        return false;
      }
    }
    return true;
  }
  // Copies `tiles` pieces of consecutive K tiles of a tiled layout, `piece` the first (the
  // others follow it in the source by piece.bytes, in memory by piece.count * piece.bytes), in
  // one pass over their rows (StreamGatherTiles; StoreFence() after the last); false if the
  // source failed to read them.
  bool CopyTiles(uint64_t base, const RowPiece& piece, uint64_t tiles) {
    const uint64_t span = (piece.count - 1) * piece.offset_stride + tiles * piece.bytes;
    const uint8_t* view = span <= ByteSource::kMaxView ? Bytes(base + piece.offset, span) : nullptr;
    if (view != nullptr) {
      StreamGatherTiles(piece.memory, view, piece.offset_stride, piece.bytes, piece.count, tiles);
      return true;
    }
    RowPiece tile = piece;
    for (uint64_t t = 0; t < tiles; ++t) {
      tile.offset = piece.offset + t * piece.bytes;
      tile.memory = piece.memory + t * piece.count * piece.bytes;
      if (!CopyPiece(base, tile)) return false;
    }
    return true;
  }
  bool U32(uint64_t offset, uint64_t* value) {
    uint32_t word;
    if (!Copy(offset, &word, 4)) return false;
    *value = word;
    return true;
  }
  bool U64(uint64_t offset, uint64_t* value) { return Copy(offset, value, 8); }
  // Sets *crc to the CRC32C of bytes [offset, offset + bytes); false on a read failure. On
  // several threads a long range is cut into one part per thread, their CRCs combined.
  bool Crc(uint64_t offset, uint64_t bytes, uint32_t* crc) {
    const uint32_t threads = Threads();
    if (threads > 1 && bytes >= kParallelBytes) {
      const uint64_t part = (bytes / threads + 4095) / 4096 * 4096;
      uint32_t crcs[kMaxCrcParts] = {};
      bool ok[kMaxCrcParts] = {};
      const uint32_t parts = std::min<uint32_t>(threads, kMaxCrcParts);
      runner_.Run(parts, [&](uint64_t task, uint32_t) {
        const uint64_t from = task * part;
        const uint64_t len = task + 1 == parts ? bytes - from : std::min(part, bytes - from);
        StateReader alone(source_);
        ok[task] = alone.Crc(offset + from, len, &crcs[task]);
      });
      *crc = crcs[0];
      const Crc32cZeros zeros(part);
      for (uint32_t task = 0; task < parts; ++task) {
        if (!ok[task]) return false;
        if (task == 0) continue;
        const uint64_t from = task * part;
        const uint64_t len = task + 1 == parts ? bytes - from : std::min(part, bytes - from);
        *crc = (len == part ? zeros.Apply(*crc) : Crc32cZeros(len).Apply(*crc)) ^ crcs[task];
      }
      return true;
    }
    *crc = 0;
    while (bytes != 0) {
      const uint64_t len = std::min(bytes, ByteSource::kMaxView);
      const uint8_t* view = Bytes(offset, len);
      if (view == nullptr) return false;
      *crc = Crc32c(*crc, view, len);
      offset += len;
      bytes -= len;
    }
    return true;
  }

 private:
  bool CopyWith(uint64_t offset, void* to, uint64_t bytes, bool stream) {
    uint8_t* out = static_cast<uint8_t*>(to);
    while (bytes != 0) {
      const uint8_t* view = Bytes(offset, std::min(bytes, ByteSource::kMaxView));
      if (view == nullptr) return false;
      const uint64_t len = std::min(bytes, view_end_ - offset);
      if (stream) {
        StreamCopy</*kFromMemory=*/true>(out, view, len);
      } else {
        std::memcpy(out, view, len);
      }
      out += len;
      offset += len;
      bytes -= len;
    }
    return true;
  }

  // Returns bytes [offset, offset + bytes) (bytes <= kMaxView, inside the source), reusing the
  // current view when it holds them.
  const uint8_t* Bytes(uint64_t offset, uint64_t bytes) {
    if (view_ != nullptr && offset >= view_begin_ && offset + bytes <= view_end_) {
      return view_ + (offset - view_begin_);
    }
    const uint64_t len = std::min(ByteSource::kMaxView, size_ - offset);
    view_ = source_->View(offset, len);
    view_begin_ = offset;
    view_end_ = view_ == nullptr ? offset : offset + len;
    return view_;
  }

  static constexpr uint64_t kParallelBytes = uint64_t{4} << 20;
  static constexpr uint32_t kMaxCrcParts = 64;

  ByteSource* source_ = nullptr;
  TaskRunner runner_;
  uint64_t size_ = 0;
  const uint8_t* view_ = nullptr;
  uint64_t view_begin_ = 0, view_end_ = 0;
};

// Returns the refusal of a source that failed to give bytes at `offset`.
inline Result ReadFailed(uint64_t offset) {
  return Result::Refused(Status::kIOError, "state: the source failed to read byte %llu", offset);
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_IO_STATE_STREAM_H_
