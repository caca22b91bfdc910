// kvring/io/state_stream.h: the byte streams of kvring's state format: StateWriter writes
// sections (a header, then the payload, then a CRC32C of both) through a ByteSink's windows;
// StateReader reads a ByteSource by offset through views, copying or checksumming ranges.
// Internal.
#ifndef KVRING_IO_STATE_STREAM_H_
#define KVRING_IO_STATE_STREAM_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kvring/detail/crc32c.h"
#include "kvring/io/byte_io.h"
#include "kvring/status.h"

namespace kvring {
namespace detail {

// Writes sections to a ByteSink through windows of up to ByteSource::kMaxView bytes, each
// section's CRC32C computed over the window while it is in cache.
class StateWriter {
 public:
  StateWriter(ByteSink* sink, uint64_t total_bytes) : sink_(sink), left_(total_bytes) {}

  void PutU32(uint32_t value) { Put(&value, 4); }
  void PutU64(uint64_t value) { Put(&value, 8); }
  void Put(const void* data, uint64_t bytes) {
    const uint8_t* from = static_cast<const uint8_t*>(data);
    while (bytes != 0 && failed_.ok()) {
      if (used_ == room_ && !NextWindow()) return;
      const uint64_t len = std::min(bytes, room_ - used_);
      std::memcpy(window_ + used_, from, len);
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
  void EndSection() {
    CrcWindow();
    const uint32_t crc = crc_;
    Put(&crc, 4);
    crc_from_ = used_;
  }
  // Hands over the last window. Returns the first failure, if any.
  Result Finish() {
    if (failed_.ok() && room_ != 0) Commit();
    return failed_;
  }

 private:
  void CrcWindow() {
    crc_ = Crc32c(crc_, window_ + crc_from_, used_ - crc_from_);
    crc_from_ = used_;
  }
  void Commit() {
    CrcWindow();
    const Result committed = sink_->Commit(used_);
    if (!committed.ok()) failed_ = committed;
  }
  bool NextWindow() {
    if (room_ != 0) Commit();
    if (!failed_.ok()) return false;
    const uint64_t room = std::min(left_, ByteSource::kMaxView);
    window_ = room == 0 ? nullptr : sink_->Acquire(room);
    if (window_ == nullptr) {
      failed_ =
          Result::Refused(Status::kIOError, "state: the sink refused a window of %llu bytes", room);
      room_ = 0;
      return false;
    }
    left_ -= room;
    room_ = room;
    used_ = crc_from_ = 0;
    return true;
  }

  ByteSink* sink_;
  uint64_t left_;  // bytes of the state not yet given a window
  uint8_t* window_ = nullptr;
  uint64_t room_ = 0, used_ = 0, crc_from_ = 0;
  uint32_t crc_ = 0;
  Result failed_;
};

// Reads a ByteSource by offset through views of up to kMaxView bytes.
class StateReader {
 public:
  explicit StateReader(ByteSource* source) : source_(source), size_(source->Size()) {}
  uint64_t Size() const { return size_; }

  // Copies bytes [offset, offset + bytes) to `to`; false if the source failed to read them.
  bool Copy(uint64_t offset, void* to, uint64_t bytes) {
    uint8_t* out = static_cast<uint8_t*>(to);
    while (bytes != 0) {
      const uint8_t* view = Bytes(offset, std::min(bytes, ByteSource::kMaxView));
      if (view == nullptr) return false;
      const uint64_t len = std::min(bytes, view_end_ - offset);
      std::memcpy(out, view, len);
      out += len;
      offset += len;
      bytes -= len;
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
  // Sets *crc to the CRC32C of bytes [offset, offset + bytes); false on a read failure.
  bool Crc(uint64_t offset, uint64_t bytes, uint32_t* crc) {
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

  ByteSource* source_;
  uint64_t size_;
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
