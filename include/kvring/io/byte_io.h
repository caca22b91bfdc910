// kvring/io/byte_io.h: where saved state goes and comes from. A ByteSink takes bytes in
// order (a file, a growing buffer, memory the caller owns, or an engine's own: a socket); a
// ByteSource gives read access to a whole saved state by offset (a file mapped into memory,
// a buffer). kvring's state format (io/state_io.h) writes and reads through these only.
#ifndef KVRING_IO_BYTE_IO_H_
#define KVRING_IO_BYTE_IO_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "kvring/detail/transpose.h"
#include "kvring/status.h"

#if defined(__unix__) || defined(__APPLE__)
#define KVRING_BYTE_IO_MMAP 1
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#else
#define KVRING_BYTE_IO_MMAP 0
#endif

namespace kvring {

// Takes bytes in order: Write(data, bytes) is called with consecutive pieces of the state (of
// up to kMaxWrite bytes; `data` is valid during the call only). Implement it to send state
// elsewhere (a socket, a host arena, another process).
class ByteSink {
 public:
  static constexpr uint64_t kMaxWrite = uint64_t{1} << 17;
  virtual ~ByteSink() = default;
  // Takes the next `bytes` bytes. kIOError (saying why) if they could not be written; the
  // writer then stops.
  virtual Result Write(const uint8_t* data, uint64_t bytes) = 0;
  // Takes the next `bytes` bytes as memory the writer fills itself, in any order and from
  // several threads, before the sink's next call; null where the sink has no such memory
  // (then the writer uses Write). A save on several threads writes its rows there.
  virtual uint8_t* Reserve(uint64_t bytes) {
    (void)bytes;
    return nullptr;
  }
  // Whether Reserve gives memory for what fits: a save on the calling thread then copies its
  // staged bytes there in the pass that checksums them, instead of through Write.
  virtual bool HasMemory() const { return false; }
};

// Gives read access to a saved state of Size() bytes. View(offset, bytes) returns the
// bytes [offset, offset + bytes), bytes <= kMaxView, valid until the next View call; null if
// they could not be read (the reader reports kIOError). Readers ask for ranges inside
// [0, Size()) only. Implement it to load state from elsewhere.
class ByteSource {
 public:
  static constexpr uint64_t kMaxView = uint64_t{1} << 20;
  virtual ~ByteSource() = default;
  virtual uint64_t Size() const = 0;
  virtual const uint8_t* View(uint64_t offset, uint64_t bytes) = 0;
  // Whether View may be called from several threads at once, each view staying valid while
  // the source lives (a load with a TaskRunner of several threads then reads in parallel).
  virtual bool ConcurrentViews() const { return false; }
};

// Appends to a std::vector<uint8_t> the caller owns (grown as needed, so it allocates).
class VectorSink final : public ByteSink {
 public:
  explicit VectorSink(std::vector<uint8_t>* bytes) : bytes_(bytes) {}
  Result Write(const uint8_t* data, uint64_t bytes) override {
    bytes_->insert(bytes_->end(), data, data + bytes);
    return Status::kOk;
  }
  uint8_t* Reserve(uint64_t bytes) override {
    bytes_->resize(bytes_->size() + bytes);
    return bytes_->data() + bytes_->size() - bytes;
  }

 private:
  std::vector<uint8_t>* bytes_;
};

// Writes into memory the caller owns and keeps alive (a host arena, a pinned buffer), without
// allocating: a state larger than `capacity` bytes is refused with kIOError. Size() is what
// was written.
class MemorySink final : public ByteSink {
 public:
  MemorySink(void* data, uint64_t capacity)
      : data_(static_cast<uint8_t*>(data)), capacity_(capacity) {}
  // Copies with non-temporal stores (detail::StreamCopy): the bytes go to memory, not to the
  // caches the caller's next work uses.
  Result Write(const uint8_t* data, uint64_t bytes) override {
    if (bytes > capacity_ - size_) {
      return Result::Refused(Status::kIOError,
                             "memory sink: %llu more bytes do not fit its %llu (%llu written)",
                             bytes, capacity_, size_);
    }
    detail::StreamCopy(data_ + size_, data, bytes);
    detail::StoreFence();
    size_ += bytes;
    return Status::kOk;
  }
  // Null when `bytes` do not fit (the writer's Write then refuses them).
  uint8_t* Reserve(uint64_t bytes) override {
    if (bytes > capacity_ - size_) return nullptr;
    size_ += bytes;
    return data_ + size_ - bytes;
  }
  bool HasMemory() const override { return true; }
  uint64_t Size() const { return size_; }

 private:
  uint8_t* data_;
  uint64_t capacity_;
  uint64_t size_ = 0;
};

// Reads a buffer the caller keeps alive; no copy.
class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, uint64_t size)
      : data_(static_cast<const uint8_t*>(data)), size_(size) {}
  explicit MemorySource(const std::vector<uint8_t>& bytes)
      : MemorySource(bytes.data(), bytes.size()) {}
  uint64_t Size() const override { return size_; }
  bool ConcurrentViews() const override { return true; }
  const uint8_t* View(uint64_t offset, uint64_t bytes) override {
    if (offset > size_ || bytes > size_ - offset) return nullptr;
    return data_ + offset;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
};

// Reads bytes [offset, offset + size) of another source as a source of its own (a state
// inside a larger file). The other source outlives it.
class SliceSource final : public ByteSource {
 public:
  SliceSource(ByteSource* source, uint64_t offset, uint64_t size)
      : source_(source), offset_(offset), size_(size) {}
  uint64_t Size() const override { return size_; }
  bool ConcurrentViews() const override { return source_->ConcurrentViews(); }
  const uint8_t* View(uint64_t offset, uint64_t bytes) override {
    if (offset > size_ || bytes > size_ - offset) return nullptr;
    return source_->View(offset_ + offset, bytes);
  }

 private:
  ByteSource* source_;
  uint64_t offset_;
  uint64_t size_;
};

// Writes a file: bytes go to "<path>.tmp", and Finish() renames it to `path`, so that a crash
// or an error never leaves a half-written file under the name (the previous file stays until
// then). Destroying a sink that was not finished removes the temporary file. Not synced to
// the disk (call fsync on the path for that).
//
// The file is written in whole pieces of kFilePiece bytes at multiples of it (the last piece
// excepted), gathered in a buffer of that size: where the page cache holds a file in large
// folios (ext4 and XFS on Linux 6.x), such writes leave 2 MiB folios, which a load's mapping
// (FileSource) takes a whole folio per page fault. Written as the writer's 128 KiB pieces, the
// file was cached in folios of at most that size and its first pass took a fault per 64 KiB:
// on a virtual machine whose faults cost ~30 us, a 292 MiB load from the page cache took
// 166-198 ms instead of 36-44 (docs/benchmarks.md).
class FileSink final : public ByteSink {
 public:
  static constexpr uint64_t kFilePiece = uint64_t{2} << 20;

  FileSink() = default;
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  ~FileSink() override { Discard(); }

  // Opens "<path>.tmp" for writing; kIOError if it cannot.
  Result Open(const std::string& path) {
    Discard();
    path_ = path;
    temp_ = path + ".tmp";
    if (piece_ == nullptr) piece_.reset(new (std::nothrow) uint8_t[kFilePiece]);
    if (piece_ == nullptr) {
      return Result::Refused(Status::kOutOfMemory,
                             "state file: no memory for the %llu-byte write buffer", kFilePiece);
    }
    held_ = 0;
    failed_ = false;
    file_ = std::fopen(temp_.c_str(), "wb");
    if (file_ == nullptr) {
      return Result::Refused(Status::kIOError,
                             "state file: cannot create the temporary file <path>.tmp (no such "
                             "directory, or no permission?)");
    }
    std::setvbuf(file_, nullptr, _IONBF, 0);  // whole pieces only: no stdio buffer
    return Status::kOk;
  }

  Result Write(const uint8_t* data, uint64_t bytes) override {
    while (bytes != 0 && !failed_ && file_ != nullptr) {
      if (held_ == 0 && bytes >= kFilePiece) {  // whole pieces straight from `data`
        const uint64_t whole = bytes / kFilePiece * kFilePiece;
        failed_ = std::fwrite(data, 1, whole, file_) != whole;
        data += whole;
        bytes -= whole;
        continue;
      }
      const uint64_t len = std::min(bytes, kFilePiece - held_);
      std::memcpy(piece_.get() + held_, data, len);
      held_ += len;
      data += len;
      bytes -= len;
      if (held_ == kFilePiece) WriteHeld();
    }
    if (failed_ || file_ == nullptr) return WriteFailed();
    return Status::kOk;
  }

  // Writes what is held, closes the file and renames it to the path. kIOError if a write, the
  // close or the rename failed (the temporary file is removed then).
  Result Finish() {
    if (file_ == nullptr) return WriteFailed();
    WriteHeld();
    const bool closed = std::fclose(file_) == 0 && !failed_;
    file_ = nullptr;
    if (!closed || std::rename(temp_.c_str(), path_.c_str()) != 0) {
      std::remove(temp_.c_str());
      return WriteFailed();
    }
    return Status::kOk;
  }

 private:
  static Result WriteFailed() {
    return Result::Refused(Status::kIOError,
                           "state file: writing, closing or renaming the temporary file failed "
                           "(disk full, or no permission?)");
  }
  void WriteHeld() {
    if (held_ != 0 && !failed_) failed_ = std::fwrite(piece_.get(), 1, held_, file_) != held_;
    held_ = 0;
  }
  void Discard() {
    if (file_ != nullptr) {
      std::fclose(file_);
      file_ = nullptr;
      std::remove(temp_.c_str());
    }
  }

  std::string path_, temp_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<uint8_t[]> piece_;  // the piece being gathered: held_ bytes
  uint64_t held_ = 0;
  bool failed_ = false;
};

// Reads a file: mapped read-only into memory where the system can (no copy), else read
// whole into a buffer.
class FileSource final : public ByteSource {
 public:
  FileSource() = default;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  ~FileSource() override { Close(); }

  // Opens `path`; kIOError if it cannot be opened or read.
  Result Open(const std::string& path) {
    Close();
#if KVRING_BYTE_IO_MMAP
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return CannotRead();
    struct stat info;
    if (::fstat(fd, &info) != 0 || info.st_size < 0) {
      ::close(fd);
      return CannotRead();
    }
    size_ = static_cast<uint64_t>(info.st_size);
    if (size_ != 0) {
      // Not MAP_POPULATE: it maps every page on the calling thread before the load begins,
      // where the faults of the first pass (the CRC32Cs, on the runner's threads) map 16
      // pages each, spread over the threads: 2-thread loads of 292 MiB from the page cache
      // took 52 ms with it and 38-46 ms without (docs/benchmarks.md).
      void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (mapped == MAP_FAILED) {
        ::close(fd);
        size_ = 0;
        return CannotRead();
      }
      mapped_ = static_cast<const uint8_t*>(mapped);
      ::madvise(mapped, size_, MADV_SEQUENTIAL);
    }
    ::close(fd);
    return Status::kOk;
#else
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) return CannotRead();
    std::vector<uint8_t> bytes;
    uint8_t chunk[1 << 16];
    for (size_t got; (got = std::fread(chunk, 1, sizeof(chunk), file)) > 0;) {
      bytes.insert(bytes.end(), chunk, chunk + got);
    }
    const bool failed = std::ferror(file) != 0;
    std::fclose(file);
    if (failed) return CannotRead();
    bytes_ = std::move(bytes);
    size_ = bytes_.size();
    return Status::kOk;
#endif
  }

  uint64_t Size() const override { return size_; }
  bool ConcurrentViews() const override { return true; }  // the whole file, mapped or read
  const uint8_t* View(uint64_t offset, uint64_t bytes) override {
    if (offset > size_ || bytes > size_ - offset) return nullptr;
#if KVRING_BYTE_IO_MMAP
    return mapped_ + offset;
#else
    return bytes_.data() + offset;
#endif
  }

 private:
  static Result CannotRead() {
    return Result::Refused(Status::kIOError, "state file: cannot open or read the file");
  }
  void Close() {
#if KVRING_BYTE_IO_MMAP
    if (mapped_ != nullptr) ::munmap(const_cast<uint8_t*>(mapped_), size_);
    mapped_ = nullptr;
#else
    bytes_.clear();
#endif
    size_ = 0;
  }

#if KVRING_BYTE_IO_MMAP
  const uint8_t* mapped_ = nullptr;
#else
  std::vector<uint8_t> bytes_;
#endif
  uint64_t size_ = 0;
};

}  // namespace kvring

#endif  // KVRING_IO_BYTE_IO_H_
