// kvring/detail/aligned_buffer.h: an owning, 64-byte aligned, zero-initialised array.
// Internal to kvring's storage. Zeroing comes from calloc (or from the kernel, for a buffer
// mapped for huge pages): the pages of a buffer calloc maps are touched (and cost time) only
// when written; memory calloc reuses (glibc: sizes below its mmap threshold, which a free of up
// to 32 MiB raises) it clears, committing it at creation. Mapping every large buffer instead
// made a cache's Copy, a pool's Fork and a ring's growth 2.3-3.6x slower (page faults on the
// copy; docs/benchmarks.md), so calloc stays.
#ifndef KVRING_DETAIL_ALIGNED_BUFFER_H_
#define KVRING_DETAIL_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace kvring {
namespace detail {

// The size of a transparent huge page (Linux: hpage_pmd_size, 2 MiB on x86-64 and on arm64
// with 4 KiB pages), or 0 where the kernel has none (or the system is not Linux).
inline size_t HugePageBytes() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const size_t bytes = [] {
    unsigned long long value = 0;
    if (std::FILE* file = std::fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "r")) {
      if (std::fscanf(file, "%llu", &value) != 1) value = 0;
      std::fclose(file);
    }
    const long page = ::sysconf(_SC_PAGESIZE);
    // (A power of two, a whole number of base pages.)
    const bool usable = page > 0 && value > static_cast<unsigned long long>(page) &&
                        (value & (value - 1)) == 0 && value <= (1ull << 40);
    return usable ? static_cast<size_t>(value) : size_t{0};
  }();
  return bytes;
#else
  return 0;
#endif
}

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
  ~AlignedBuffer() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (mapped_bytes_ != 0) {
      ::munmap(data_, mapped_bytes_);
      return;
    }
#endif
    std::free(raw_);
  }

  // Returns a buffer of `size` zeroed elements; empty (no allocation) for size 0; empty with
  // Failed() true if the allocation fails or the byte count overflows. huge_pages: a buffer
  // of at least one huge page (HugePageBytes()) is mapped starting on a huge page boundary
  // and advised for transparent huge pages (Linux's madvise(MADV_HUGEPAGE), which the kernel
  // honours when /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise"): its
  // aligned huge pages are then committed whole on first write. Smaller buffers, and systems
  // without transparent huge pages, allocate as without it.
  static AlignedBuffer Zeroed(size_t size, bool huge_pages = false) {
    AlignedBuffer buffer;
    if (size == 0) return buffer;
    if (size > (SIZE_MAX - kAlignment) / sizeof(T)) {
      buffer.failed_ = true;
      return buffer;
    }
    if (huge_pages && buffer.MapHuge(size)) return buffer;
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
  // Whether the buffer was mapped on a huge page boundary and the kernel took the advice
  // (Zeroed's huge_pages); whether it then gets huge pages is the kernel's choice.
  bool HugePages() const { return advised_; }

  void Swap(AlignedBuffer& other) noexcept {
    std::swap(raw_, other.raw_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(mapped_bytes_, other.mapped_bytes_);
    std::swap(advised_, other.advised_);
    std::swap(failed_, other.failed_);
  }

 private:
  // Maps `size` zeroed elements starting on a huge page boundary and advises the mapping for
  // huge pages; returns false, holding nothing, when the buffer is smaller than a huge page,
  // the system has none, or mapping failed (the caller then allocates as usual). The mapping
  // ends at the last base page the elements touch: a partial huge page at the end stays in
  // base pages, and no memory past the buffer is ever committed.
  bool MapHuge(size_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t huge = HugePageBytes();
    const size_t bytes = size * sizeof(T);
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    if (huge == 0 || bytes < huge || bytes > SIZE_MAX - 2 * huge) return false;
    const size_t length = (bytes + page - 1) / page * page;
    const size_t reserved = length + huge;  // room to move the start to a boundary
    void* mapped =
        ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return false;
    const uintptr_t start = reinterpret_cast<uintptr_t>(mapped);
    const uintptr_t aligned = (start + huge - 1) & ~uintptr_t{huge - 1};
    // The reserve's head before the boundary and its tail after the buffer go back.
    if (aligned > start) ::munmap(mapped, aligned - start);
    const size_t tail = start + reserved - (aligned + length);
    if (tail != 0) ::munmap(reinterpret_cast<void*>(aligned + length), tail);
    // (Advice only: without it, as on a kernel built without transparent huge pages, the
    // buffer still works, in base pages.)
    advised_ = ::madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE) == 0;
    data_ = reinterpret_cast<T*>(aligned);
    size_ = size;
    mapped_bytes_ = length;
    return true;
#else
    static_cast<void>(size);
    return false;
#endif
  }

  void* raw_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_bytes_ = 0;  // a huge-page mapping's length (data_ its start), else 0
  bool advised_ = false;
  bool failed_ = false;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_DETAIL_ALIGNED_BUFFER_H_
