// Tests of huge pages for K/V storage (RuntimeSpec::huge_pages, kvring/detail/aligned_buffer.h):
// buffers of a huge page or more start on a huge page boundary, zeroed, advised for huge
// pages (Linux: "hg" in the mapping's VmFlags), and hold what buffers without them hold; a
// KVCache (its rings, flat layers, copies and grown rings) and a KVPool (its block store and
// rings) built with them store and read every row as the same plan without them does.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "kvring/detail/aligned_buffer.h"
#include "kvring/kvring.h"

namespace kvring {
namespace {

using detail::AlignedBuffer;
using detail::HugePageBytes;

// Whether madvise reaches a kernel that checks it: qemu-user answers every madvise with
// success without passing it on, and shows smaps of its own making; Linux refuses advice for
// an unmapped page (ENOMEM).
bool AdviceReachesTheKernel() {
#if defined(__linux__)
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  ::munmap(p, page);
  return ::madvise(p, page, MADV_HUGEPAGE) != 0;
#else
  return false;
#endif
}

// The VmFlags line of the mapping of /proc/self/smaps that holds `p`, or "" when there is no
// such file, mapping or line, or the advice never reaches the kernel (AdviceReachesTheKernel).
std::string VmFlagsOf(const void* p) {
  static const bool checked = AdviceReachesTheKernel();
  if (!checked) return "";
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-' &&
        line.find(':') > line.find(' ')) {
      inside = address >= begin && address < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line + " ";
  }
  return "";
}

// Whether `p` sits on a huge page boundary and (where smaps says) its mapping is advised.
::testing::AssertionResult OnHugePages(const void* p) {
  const size_t huge = HugePageBytes();
  if (huge == 0) return ::testing::AssertionSuccess();  // nothing to ask for here
  if (reinterpret_cast<uintptr_t>(p) % huge != 0) {
    return ::testing::AssertionFailure() << p << " is not on a boundary of " << huge << " bytes";
  }
  const std::string flags = VmFlagsOf(p);
  if (!flags.empty() && flags.find(" hg ") == std::string::npos) {
    return ::testing::AssertionFailure() << "its mapping is not advised: " << flags;
  }
  return ::testing::AssertionSuccess();
}

TEST(HugePages, BuffersOfAHugePageOrMoreStartOnOneZeroedAndAdvised) {
  const size_t huge = HugePageBytes();
  if (huge == 0) GTEST_SKIP() << "no transparent huge pages on this system";
  // One huge page and a half: the tail stays in base pages, within the buffer.
  const size_t size = huge / sizeof(uint16_t) * 3 / 2 + 5;
  AlignedBuffer<uint16_t> buffer = AlignedBuffer<uint16_t>::Zeroed(size, true);
  ASSERT_FALSE(buffer.Failed());
  ASSERT_EQ(buffer.size(), size);
  EXPECT_TRUE(buffer.HugePages());
  EXPECT_TRUE(OnHugePages(buffer.data()));
  const std::vector<uint16_t> zeros(size, 0);
  EXPECT_EQ(std::memcmp(buffer.data(), zeros.data(), size * sizeof(uint16_t)), 0);
  for (size_t i = 0; i < size; i += 4099) buffer.data()[i] = static_cast<uint16_t>(i);
  buffer.data()[size - 1] = 7;
  // A move keeps the mapping; the moved-from buffer holds nothing.
  AlignedBuffer<uint16_t> moved(std::move(buffer));
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_FALSE(buffer.HugePages());
  ASSERT_EQ(moved.size(), size);
  EXPECT_TRUE(moved.HugePages());
  EXPECT_EQ(moved.data()[size - 1], 7);
  EXPECT_EQ(moved.data()[4099], 4099);
}

TEST(HugePages, SmallBuffersAndBuffersNotAskingAllocateAsBefore) {
  const size_t huge = HugePageBytes() != 0 ? HugePageBytes() : size_t{2} << 20;
  AlignedBuffer<float> small = AlignedBuffer<float>::Zeroed(huge / sizeof(float) - 16, true);
  ASSERT_FALSE(small.Failed());
  EXPECT_FALSE(small.HugePages());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % AlignedBuffer<float>::kAlignment, 0u);
  AlignedBuffer<float> large = AlignedBuffer<float>::Zeroed(4 * huge / sizeof(float), false);
  ASSERT_FALSE(large.Failed());
  EXPECT_FALSE(large.HugePages());
  EXPECT_TRUE(AlignedBuffer<float>::Zeroed(0, true).size() == 0);
  EXPECT_TRUE(AlignedBuffer<float>::Zeroed(SIZE_MAX / 2, true).Failed());
}

// A sliding layer whose ring takes less than a huge page and a global one of several, for
// `backend` in `format`, with or without huge pages.
LayerPlan PlanWith(bool huge_pages, Backend backend, Format format) {
  return LayerPlan::Builder()
      .AddLayer(LayerSpec::Sliding(256, 4, 128))
      .AddLayer(LayerSpec::Global(8, 128))
      .SetContext(4096)
      .SetBatch(16)
      .SetBackend(backend)
      .SetFormat(format)
      .SetHugePages(huge_pages)
      .Build()
      .value();
}

// Appends the same rows (pseudo-random, from the layer and position) through `append`.
template <typename Append>
void AppendRows(uint64_t begin, uint64_t end, const Append& append) {
  for (uint64_t pos = begin; pos < end; pos += 16) {
    for (size_t layer : {0, 1}) {
      const size_t width = layer == 0 ? 4 * 128 : 8 * 128;
      std::vector<float> rows(16 * width);
      for (size_t i = 0; i < rows.size(); ++i) {
        rows[i] =
            static_cast<float>((layer * 7919 + pos * 131 + i) * 2654435761u % 4001) / 997.0f - 2.0f;
      }
      ASSERT_TRUE(append(layer, pos, rows.data()).ok()) << "layer " << layer << " pos " << pos;
    }
  }
}

// Expects read(false, ...) and read(true, ...) (the storage and its twin) to answer alike for
// every position of [begin, end) of both layers, and the rows they give to be equal.
template <typename Read>
void ExpectSameRows(uint64_t begin, uint64_t end, const Read& read) {
  for (size_t layer : {0, 1}) {
    const size_t width = layer == 0 ? 4 * 128 : 8 * 128;
    std::vector<float> k(width), v(width), k_twin(width), v_twin(width);
    for (uint64_t pos = begin; pos < end; ++pos) {
      const Status status = read(false, layer, pos, k.data(), v.data());
      ASSERT_EQ(status, read(true, layer, pos, k_twin.data(), v_twin.data())) << pos;
      if (status != Status::kOk) continue;
      ASSERT_EQ(std::memcmp(k.data(), k_twin.data(), width * sizeof(float)), 0) << pos;
      ASSERT_EQ(std::memcmp(v.data(), v_twin.data(), width * sizeof(float)), 0) << pos;
    }
  }
}

template <typename Layout>
class HugePagesTest : public ::testing::Test {};
using Layouts = ::testing::Types<FlashLayout, TiledLayout<16>>;
TYPED_TEST_SUITE(HugePagesTest, Layouts);

TYPED_TEST(HugePagesTest, ACacheStoresAndReadsAsWithoutThem) {
  for (Format format : {Format::kBF16, Format::kInt8}) {
    const LayerPlan plan = PlanWith(true, TypeParam::kBackend, format);
    KVCache<TypeParam> cache = KVCache<TypeParam>::Create(plan).value();
    KVCache<TypeParam> twin =
        KVCache<TypeParam>::Create(PlanWith(false, TypeParam::kBackend, format)).value();
    EXPECT_EQ(cache.AllocatedBytes(), plan.TotalBytes());
    EXPECT_EQ(cache.AllocatedBytes(), twin.AllocatedBytes());
    const auto append_both = [&](uint64_t begin, uint64_t end) {
      for (KVCache<TypeParam>* kv : {&cache, &twin}) {
        AppendRows(begin, end, [kv](size_t layer, uint64_t pos, const float* rows) {
          return kv->AppendF32(layer, pos, rows, rows, 16);
        });
      }
    };
    append_both(0, 1024);
    // The global layer's buffers (8 MiB of BF16 K) start on huge pages; the ring's, smaller
    // than one, as before.
    const KVView<TypeParam> global = cache.View(1);
    EXPECT_TRUE(OnHugePages(format == Format::kBF16 ? static_cast<const void*>(global.k)
                                                    : static_cast<const void*>(global.k_int8)));
    EXPECT_TRUE(OnHugePages(format == Format::kBF16 ? static_cast<const void*>(global.v)
                                                    : static_cast<const void*>(global.v_int8)));
    // A copy and a grown ring (of more than a huge page) ask for them too.
    KVCache<TypeParam> copy = cache.Copy().value();
    EXPECT_TRUE(OnHugePages(format == Format::kBF16
                                ? static_cast<const void*>(copy.View(1).k)
                                : static_cast<const void*>(copy.View(1).k_int8)));
    ASSERT_TRUE(cache.Grow(4096 - 256).ok());
    ASSERT_TRUE(twin.Grow(4096 - 256).ok());
    EXPECT_TRUE(OnHugePages(format == Format::kBF16
                                ? static_cast<const void*>(cache.View(0).k)
                                : static_cast<const void*>(cache.View(0).k_int8)));
    append_both(1024, 4096);
    const auto read = [&](bool of_twin, size_t layer, uint64_t pos, float* k, float* v) {
      return (of_twin ? twin : cache).ReadRowF32(layer, pos, k, v).status();
    };
    ExpectSameRows(0, 4096, read);
    const auto read_copy = [&](bool of_twin, size_t layer, uint64_t pos, float* k, float* v) {
      return (of_twin ? cache : copy).ReadRowF32(layer, pos, k, v).status();
    };
    ExpectSameRows(0, 1024, read_copy);
  }
}

TYPED_TEST(HugePagesTest, APoolStoresAndReadsAsWithoutThem) {
  PoolSpec spec;
  spec.budget_bytes = uint64_t{64} << 20;
  spec.max_sequences = 4;
  KVPool<TypeParam> pool =
      KVPool<TypeParam>::Create(PlanWith(true, TypeParam::kBackend, Format::kBF16), spec).value();
  KVPool<TypeParam> twin =
      KVPool<TypeParam>::Create(PlanWith(false, TypeParam::kBackend, Format::kBF16), spec).value();
  EXPECT_EQ(pool.AllocatedBytes(), twin.AllocatedBytes());
  SequenceId id{}, twin_id{};
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  ASSERT_TRUE(twin.AddSequence(&twin_id).ok());
  AppendRows(0, 2048, [&](size_t layer, uint64_t pos, const float* rows) {
    return pool.AppendF32(id, layer, pos, rows, rows, 16);
  });
  AppendRows(0, 2048, [&](size_t layer, uint64_t pos, const float* rows) {
    return twin.AppendF32(twin_id, layer, pos, rows, rows, 16);
  });
  // The block store of the paged layer starts on a huge page (the view's k is block 0's).
  EXPECT_TRUE(OnHugePages(pool.View(id, 1).value().k));
  ExpectSameRows(0, 2048, [&](bool of_twin, size_t layer, uint64_t pos, float* k, float* v) {
    return of_twin ? twin.ReadRowF32(twin_id, layer, pos, k, v).status()
                   : pool.ReadRowF32(id, layer, pos, k, v).status();
  });
}

}  // namespace
}  // namespace kvring
