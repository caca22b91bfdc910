// kvring/detail/aligned_buffer.h: an owning, 64-byte aligned, zero-initialised array.
// Internal to kvring's storage. Zeroing comes from calloc, so the pages of a large buffer
// are touched (and cost time) only when written.
#ifndef KVRING_DETAIL_ALIGNED_BUFFER_H_
#define KVRING_DETAIL_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace kvring {
namespace detail {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept { Swap(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    AlignedBuffer(std::move(other)).Swap(*this);
    return *this;
  }
  ~AlignedBuffer() { std::free(raw_); }

  // Returns a buffer of `size` zeroed elements; empty (no allocation) for size 0; empty with
  // Failed() true if the allocation fails or the byte count overflows.
  static AlignedBuffer Zeroed(size_t size) {
    AlignedBuffer buffer;
    if (size == 0) return buffer;
    if (size > (SIZE_MAX - kAlignment) / sizeof(T)) {
      buffer.failed_ = true;
      return buffer;
    }
    buffer.raw_ = std::calloc(size * sizeof(T) + kAlignment, 1);
    if (buffer.raw_ == nullptr) {
      buffer.failed_ = true;
      return buffer;
    }
    const uintptr_t address = reinterpret_cast<uintptr_t>(buffer.raw_);
    const uintptr_t aligned = (address + kAlignment - 1) & ~uintptr_t{kAlignment - 1};
    buffer.data_ = reinterpret_cast<T*>(aligned);
    buffer.size_ = size;
    return buffer;
  }

  // Returns an empty buffer that reports Failed(), for an allocation that did not happen.
  static AlignedBuffer Failure() {
    AlignedBuffer buffer;
    buffer.failed_ = true;
    return buffer;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool Failed() const { return failed_; }

  void Swap(AlignedBuffer& other) noexcept {
    std::swap(raw_, other.raw_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(failed_, other.failed_);
  }

 private:
  void* raw_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
  bool failed_ = false;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_DETAIL_ALIGNED_BUFFER_H_
