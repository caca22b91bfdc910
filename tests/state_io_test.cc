// The state format (kvring/io/state_io.h): CRC32C against known values; saved caches and
// pool sequences load back bit for bit into every layout, into caches and pools, and keep
// appending as the original does; more than 30 distinct bad states are refused with a
// message naming what differs while the destination keeps every row; files go through a
// temporary name, and FileSink writes every byte it is given, in order, or says it failed.
#include "kvring/io/state_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kvring/detail/crc32c.h"
#include "kvring/kvring.h"

#if defined(__linux__)
#include <unistd.h>  // symlink to /dev/full, for a sink whose writes fail
#endif

namespace kvring {
namespace {

const char kModel[] = "test-model weights sha256:0123";

TEST(Crc32c, MatchesKnownValuesAndJoinsSplits) {
  EXPECT_EQ(detail::Crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(detail::Crc32c(0, "", 0), 0u);
  const uint8_t zeros[32] = {};
  EXPECT_EQ(detail::Crc32c(0, zeros, 32), 0x8A9136AAu);  // RFC 3720 B.4
  uint8_t ones[32];
  std::memset(ones, 0xFF, 32);
  EXPECT_EQ(detail::Crc32c(0, ones, 32), 0x62A8AB43u);
  // Long inputs (the folding paths, in four streams from 64 KiB, and the three-stream path)
  // against the table-driven loop, and any split of them against the whole.
  std::mt19937 rng(5);
  std::vector<uint8_t> data(2 * 65536 + 1234);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(rng());
  for (size_t size : {size_t{1023}, size_t{1024}, size_t{1279}, size_t{1280}, size_t{1537},
                      size_t{12287}, size_t{12288}, size_t{12289}, size_t{65535}, size_t{65536},
                      size_t{65536 + 1023}, size_t{65536 + 1024}, data.size()}) {
    const uint32_t whole = detail::Crc32c(0, data.data(), size);
    EXPECT_EQ(whole, ~detail::Crc32cSoftware(~0u, data.data(), size)) << size;
    // The crc32 instruction's loop, forced where folding would run; the table-driven loop,
    // forced where the instruction would run.
    detail::Crc32cFoldAllowed() = false;
    EXPECT_EQ(detail::Crc32c(0, data.data(), size), whole) << size;
    EXPECT_EQ(detail::Crc32c(0x5A5A5A5Au, data.data(), size),
              ~detail::Crc32cSoftware(~0x5A5A5A5Au, data.data(), size))
        << size;
    detail::Crc32cFoldAllowed() = true;
    EXPECT_EQ(detail::Crc32c(0x5A5A5A5Au, data.data(), size),
              ~detail::Crc32cSoftware(~0x5A5A5A5Au, data.data(), size))
        << size;
    detail::Crc32cHardwareAllowed() = false;
    EXPECT_EQ(detail::Crc32c(0, data.data(), size), whole) << size;
    EXPECT_EQ(detail::Crc32c(0, "123456789", 9), 0xE3069283u);
    detail::Crc32cHardwareAllowed() = true;
    for (size_t split : {size_t{1}, size_t{7}, size_t{4096}, size / 2}) {
      if (split > size) continue;
      EXPECT_EQ(
          detail::Crc32c(detail::Crc32c(0, data.data(), split), data.data() + split, size - split),
          whole)
          << size << " split at " << split;
    }
  }
}

// Crc32cCopy gives the table-driven loop's value and copies every byte, and nothing past them,
// on each loop (folding, the crc32 instruction's, the tables'), into a destination on and off
// an 8-byte and a 64-byte boundary.
TEST(Crc32c, CopyChecksumsAndCopiesInOnePass) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(3 * 4096 * 3 + 1234);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(rng());
  for (int path = 0; path < 3; ++path) {
    detail::Crc32cFoldAllowed() = path == 0;
    detail::Crc32cHardwareAllowed() = path != 2;
    for (size_t size : {size_t{0}, size_t{5}, size_t{1023}, size_t{1024}, size_t{1087},
                        size_t{1300}, size_t{12287}, size_t{12288}, size_t{12289}, data.size()}) {
      for (size_t misalign : {size_t{0}, size_t{3}, size_t{8}, size_t{61}}) {
        std::vector<uint8_t> out(data.size() + 128, 0xEE);
        // From a 64-byte boundary of the buffer on.
        const size_t start = (64 - (reinterpret_cast<uintptr_t>(out.data()) & 63)) & 63;
        uint8_t* to = out.data() + start + misalign;
        const uint32_t crc = detail::Crc32cCopy(0x1234u, to, data.data(), size);
        detail::StoreFence();
        EXPECT_EQ(crc, ~detail::Crc32cSoftware(~0x1234u, data.data(), size))
            << size << " path " << path;
        EXPECT_TRUE(std::equal(data.begin(), data.begin() + size, to)) << size << " " << path;
        for (size_t i = 0; i < out.size(); ++i) {
          if (out.data() + i < to || out.data() + i >= to + size) {
            ASSERT_EQ(out[i], 0xEE) << size << " path " << path << " at " << i;
          }
        }
      }
    }
  }
  detail::Crc32cFoldAllowed() = true;
  detail::Crc32cHardwareAllowed() = true;
}

// Crc32cCombine joins the CRCs of two parts as the CRC of both: every split of random data,
// empty parts included; a StateReader on two threads gives a long range's CRC32C in parts.
TEST(Crc32c, CombinesPartsAndRunsOnAThreadPool) {
  std::mt19937 rng(6);
  std::vector<uint8_t> data((9u << 20) + 777);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(rng());
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{70000}}) {
    const uint32_t whole = detail::Crc32c(0, data.data(), size);
    for (size_t split : {size_t{0}, size / 3, size}) {
      const uint32_t a = detail::Crc32c(0, data.data(), split);
      const uint32_t b = detail::Crc32c(0, data.data() + split, size - split);
      EXPECT_EQ(detail::Crc32cCombine(a, b, size - split), whole) << size << " at " << split;
    }
  }
  ThreadPool threads(2);
  MemorySource source(data);
  detail::StateReader alone(&source), parallel(&source, threads.Runner());
  EXPECT_EQ(alone.Threads(), 1u);
  EXPECT_EQ(parallel.Threads(), 2u);
  for (uint64_t offset : {uint64_t{0}, uint64_t{13}}) {
    for (uint64_t bytes : {uint64_t{5} << 20, data.size() - offset}) {
      uint32_t one = 0, two = 0;
      ASSERT_TRUE(alone.Crc(offset, bytes, &one));
      ASSERT_TRUE(parallel.Crc(offset, bytes, &two));
      EXPECT_EQ(one, two) << offset << " " << bytes;
      EXPECT_EQ(one, detail::Crc32c(0, data.data() + offset, bytes));
    }
  }
}

// Layers: 0 sliding (window 7), 1 global, 2 chunked (chunk 12) int8, 3 reads 0 (window 5),
// 4 global int8h (K rotated; or `global_format`), 5 an MLA latent (global), 6 reads 1.
LayerPlan::Builder Model(Format global_format = Format::kInt8Hadamard) {
  LayerSpec chunked = LayerSpec::Chunked(12, 2, 32);
  chunked.format = Format::kInt8;
  LayerSpec global_int8 = LayerSpec::Global(1, 16);
  global_int8.format = global_format;
  return LayerPlan::Builder()
      .AddLayer(LayerSpec::Sliding(7, 2, 16))
      .AddLayer(LayerSpec::Global(2, 32))
      .AddLayer(chunked)
      .AddLayer(LayerSpec::Sliding(5, 2, 16).SharedFrom(0))
      .AddLayer(global_int8)
      .AddLayer(LayerSpec::Latent(48))
      .AddLayer(LayerSpec::Global(2, 32).SharedFrom(1));
}

template <typename Layout>
LayerPlan PlanFor(uint64_t context, uint64_t batch, LayerPlan::Builder builder = Model()) {
  Expected<LayerPlan> plan =
      builder.SetContext(context).SetBatch(batch).SetRollback(2).SetLayout<Layout>().Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.value();
}

// Deterministic rows of `pos` for a layer: values that int8 and BF16 both keep distinct.
std::vector<float> RowsOf(uint64_t pos, uint64_t num_tokens, uint64_t elements, size_t layer,
                          float v) {
  std::vector<float> rows(num_tokens * elements);
  for (uint64_t t = 0; t < num_tokens; ++t) {
    for (uint64_t e = 0; e < elements; ++e) {
      rows[t * elements + e] =
          static_cast<float>(((pos + t) * 131 + e * 17 + layer * 7) % 251) / 25.0f - 5.0f + v;
    }
  }
  return rows;
}

// Appends positions [from, to) to every owning layer of a KVCache or pool sequence, in steps of
// `step` tokens; `append(layer, pos, k, v, n)` does one append.
void AppendRange(
    const LayerPlan& plan, uint64_t from, uint64_t to, uint64_t step,
    const std::function<Result(size_t, uint64_t, const float*, const float*, uint64_t)>& append) {
  for (uint64_t pos = from; pos < to; pos += step) {
    const uint64_t n = std::min(step, to - pos);
    for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
      const LayerInfo& info = plan.Layer(layer);
      if (!info.OwnsKV()) continue;
      const KVShape shape = KVShape::Of(info.spec, info.num_slots);
      const std::vector<float> k = RowsOf(pos, n, shape.KRowElements(), layer, 0.0f);
      const std::vector<float> v = RowsOf(pos, n, shape.VRowElements(), layer, 0.5f);
      const Result result =
          append(layer, pos, k.data(), shape.v_head_dim == 0 ? nullptr : v.data(), n);
      ASSERT_TRUE(result.ok()) << result.Message();
    }
  }
}

// Everything a cache or pool sequence holds, as bytes: per owning layer its range and the
// stored rows of every held position (BF16, or int8 with scales).
struct Held {
  std::vector<uint64_t> ranges;
  std::vector<uint8_t> rows;
  bool operator==(const Held& other) const { return ranges == other.ranges && rows == other.rows; }
};

// `read(layer, pos, k, k_scales, v, v_scales)` reads one stored row (ReadRow or ReadRowInt8).
template <typename Store>
Held HeldBy(const LayerPlan& plan, const Store& store, uint64_t from_pos = 0) {
  Held held;
  for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
    const LayerInfo& info = plan.Layer(layer);
    if (!info.OwnsKV()) continue;
    const uint64_t first = std::max(store.first(layer), from_pos), end = store.end(layer);
    held.ranges.push_back(first);
    held.ranges.push_back(end);
    const KVShape shape = KVShape::Of(info.spec, info.num_slots);
    for (uint64_t pos = first; pos < end; ++pos) {
      std::vector<uint8_t> k(shape.KRowElements() * 2), v(shape.VRowElements() * 2 + 1);
      std::vector<uint8_t> scales(2 * sizeof(float) * shape.num_kv_heads);
      const Result result = store.read(layer, pos, k.data(), v.data(), scales.data());
      EXPECT_TRUE(result.ok()) << result.Message();
      held.rows.insert(held.rows.end(), k.begin(), k.end());
      held.rows.insert(held.rows.end(), v.begin(), v.end());
      if (IsInt8(info.spec.format)) {
        held.rows.insert(held.rows.end(), scales.begin(), scales.end());
      }
    }
  }
  return held;
}

template <typename Layout>
struct CacheStore {
  const KVCache<Layout>& cache;
  uint64_t first(size_t layer) const { return cache.FirstPos(layer); }
  uint64_t end(size_t layer) const { return cache.EndPos(layer); }
  Result read(size_t layer, uint64_t pos, uint8_t* k, uint8_t* v, uint8_t* scales) const {
    const bool has_v = cache.View(layer).layout.Shape().v_head_dim != 0;
    if (IsInt8(cache.GetFormat(layer))) {
      float* s = reinterpret_cast<float*>(scales);
      const uint32_t heads = cache.View(layer).layout.Shape().num_kv_heads;
      return cache.ReadRowInt8(layer, pos, reinterpret_cast<int8_t*>(k), s,
                               has_v ? reinterpret_cast<int8_t*>(v) : nullptr,
                               has_v ? s + heads : nullptr);
    }
    return cache.ReadRow(layer, pos, reinterpret_cast<BF16*>(k),
                         has_v ? reinterpret_cast<BF16*>(v) : nullptr);
  }
};

template <typename Layout>
struct PoolStore {
  const KVPool<Layout>& pool;
  SequenceId id;
  uint64_t first(size_t layer) const { return *pool.FirstPos(id, layer); }
  uint64_t end(size_t layer) const { return *pool.EndPos(id, layer); }
  Result read(size_t layer, uint64_t pos, uint8_t* k, uint8_t* v, uint8_t* scales) const {
    const bool has_v = pool.View(id, layer)->layout.Shape().v_head_dim != 0;
    if (IsInt8(pool.GetFormat(layer))) {
      float* s = reinterpret_cast<float*>(scales);
      const uint32_t heads = pool.View(id, layer)->layout.Shape().num_kv_heads;
      return pool.ReadRowInt8(id, layer, pos, reinterpret_cast<int8_t*>(k), s,
                              has_v ? reinterpret_cast<int8_t*>(v) : nullptr,
                              has_v ? s + heads : nullptr);
    }
    return pool.ReadRow(id, layer, pos, reinterpret_cast<BF16*>(k),
                        has_v ? reinterpret_cast<BF16*>(v) : nullptr);
  }
};

template <typename Layout>
KVCache<Layout> FilledCache(const LayerPlan& plan, uint64_t end, uint64_t step) {
  KVCache<Layout> cache = KVCache<Layout>::Create(plan).value();
  AppendRange(plan, 0, end, step,
              [&](size_t layer, uint64_t pos, const float* k, const float* v, uint64_t n) {
                return cache.AppendF32(layer, pos, k, v, n);
              });
  return cache;
}

template <typename Layout>
Held HeldByCache(const KVCache<Layout>& cache, uint64_t from_pos = 0) {
  return HeldBy(cache.Plan(), CacheStore<Layout>{cache}, from_pos);
}

// The positions every layout's copy shares: from the newest position a query still reads.
constexpr uint64_t kContext = 400;
constexpr uint64_t kEnd = 157;  // wraps the rings many times; not a multiple of any block

template <typename From, typename To>
void CacheLoadsIntoCache(uint64_t to_batch) {
  const KVCache<From> source = FilledCache<From>(PlanFor<From>(kContext, 16), kEnd, 9);
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  const Result saved = SaveState(source, kModel, &sink);
  ASSERT_TRUE(saved.ok()) << saved.Message();
  EXPECT_EQ(bytes.size(), StateBytes(source, kModel));

  const LayerPlan to_plan = PlanFor<To>(kContext, to_batch);
  KVCache<To> loaded = FilledCache<To>(to_plan, 33, 5);  // replaced whole by the load
  MemorySource input(bytes);
  const Result result = LoadState(&input, kModel, &loaded);
  ASSERT_TRUE(result.ok()) << result.Message();
  EXPECT_EQ(loaded.EndPos(), kEnd);
  // The newest positions the smaller rings keep (at least every window) are the source's.
  uint64_t from = 0;
  for (size_t layer = 0; layer < to_plan.NumLayers(); ++layer) {
    from = std::max(from, loaded.FirstPos(layer));
    EXPECT_LE(loaded.FirstPos(layer),
              std::max(source.FirstPos(layer),
                       kEnd - std::min(kEnd, to_plan.Layer(to_plan.Layer(layer).owner).capacity)));
  }
  EXPECT_EQ(HeldByCache(loaded, from), HeldByCache(source, from));
  // Both go on alike: the same appends give the same rows.
  KVCache<To> reference = FilledCache<To>(to_plan, kEnd + 40, 9);
  AppendRange(to_plan, kEnd, kEnd + 40, 4,
              [&](size_t layer, uint64_t pos, const float* k, const float* v, uint64_t n) {
                return loaded.AppendF32(layer, pos, k, v, n);
              });
  uint64_t after = 0;
  for (size_t layer = 0; layer < to_plan.NumLayers(); ++layer) {
    after = std::max(after, loaded.FirstPos(layer));
  }
  EXPECT_EQ(HeldByCache(loaded, after), HeldByCache(reference, after));
}

TEST(StateIO, FlashCacheLoadsIntoEveryLayout) {
  CacheLoadsIntoCache<FlashLayout, FlashLayout>(16);
  CacheLoadsIntoCache<FlashLayout, TiledLayout<16>>(16);
  CacheLoadsIntoCache<FlashLayout, TiledLayout<32>>(1);
}

TEST(StateIO, TiledCacheLoadsIntoEveryLayout) {
  CacheLoadsIntoCache<TiledLayout<16>, FlashLayout>(1);
  CacheLoadsIntoCache<TiledLayout<8>, TiledLayout<16>>(64);
  CacheLoadsIntoCache<TiledLayout<32>, TiledLayout<32>>(16);
}

// A state of one layout is byte-identical to the state of another holding the same rows.
TEST(StateIO, TheBytesDoNotDependOnTheLayout) {
  std::vector<uint8_t> flash, tiled;
  VectorSink flash_sink(&flash), tiled_sink(&tiled);
  ASSERT_TRUE(SaveState(FilledCache<FlashLayout>(PlanFor<FlashLayout>(kContext, 16), kEnd, 9),
                        kModel, &flash_sink)
                  .ok());
  ASSERT_TRUE(
      SaveState(FilledCache<TiledLayout<16>>(PlanFor<TiledLayout<16>>(kContext, 16), kEnd, 3),
                kModel, &tiled_sink)
          .ok());
  EXPECT_EQ(flash, tiled);
}

template <typename Layout>
KVPool<Layout> PoolOf(const LayerPlan& plan, uint64_t budget, uint64_t block_slots) {
  PoolSpec spec;
  spec.budget_bytes = budget;
  spec.max_sequences = 8;
  spec.block_slots = block_slots;
  Expected<KVPool<Layout>> pool = KVPool<Layout>::Create(plan, spec);
  EXPECT_TRUE(pool.ok()) << pool.error().message;
  return std::move(pool).value();
}

template <typename Layout>
void AppendToSequence(KVPool<Layout>* pool, SequenceId id, uint64_t from, uint64_t to,
                      uint64_t step) {
  AppendRange(pool->Plan(), from, to, step,
              [&](size_t layer, uint64_t pos, const float* k, const float* v, uint64_t n) {
                return pool->AppendF32(id, layer, pos, k, v, n);
              });
}

template <typename From, typename To>
void PoolRoundTrip() {
  const LayerPlan from_plan = PlanFor<From>(kContext, 16);
  KVPool<From> from_pool = PoolOf<From>(from_plan, 1 << 22, 2 * From::kTileSlots);
  SequenceId a, fork;
  ASSERT_TRUE(from_pool.AddSequence(&a).ok());
  AppendToSequence(&from_pool, a, 0, 100, 7);
  ASSERT_TRUE(from_pool.Fork(a, &fork).ok());  // shares a's blocks
  AppendToSequence(&from_pool, fork, 100, kEnd, 5);
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  ASSERT_TRUE(SaveState(from_pool, fork, kModel, &sink).ok());

  // Into a cache: the same rows as a cache filled directly.
  const LayerPlan cache_plan = PlanFor<To>(kContext, 16);
  KVCache<To> cache = KVCache<To>::Create(cache_plan).value();
  MemorySource input(bytes);
  Result result = LoadState(&input, kModel, &cache);
  ASSERT_TRUE(result.ok()) << result.Message();
  const KVCache<To> direct = FilledCache<To>(cache_plan, kEnd, 16);
  EXPECT_EQ(HeldByCache(cache), HeldByCache(direct));

  // Into a pool sequence of another layout and block size, replacing a sequence that shares
  // blocks with another: the other keeps its rows.
  const LayerPlan to_plan = PlanFor<To>(kContext, 16);
  KVPool<To> to_pool = PoolOf<To>(to_plan, 1 << 22, 3 * To::kTileSlots);
  SequenceId b, b_fork;
  ASSERT_TRUE(to_pool.AddSequence(&b).ok());
  AppendToSequence(&to_pool, b, 0, 60, 60);
  ASSERT_TRUE(to_pool.Fork(b, &b_fork).ok());
  const Held fork_before = HeldBy(to_plan, PoolStore<To>{to_pool, b_fork});
  result = LoadState(&input, kModel, &to_pool, b);
  ASSERT_TRUE(result.ok()) << result.Message();
  EXPECT_EQ(HeldBy(to_plan, PoolStore<To>{to_pool, b}), HeldByCache(direct));
  EXPECT_EQ(HeldBy(to_plan, PoolStore<To>{to_pool, b_fork}), fork_before);
  // And the loaded sequence goes on as the cache does.
  KVCache<To> longer = FilledCache<To>(cache_plan, kEnd + 30, 16);
  AppendToSequence(&to_pool, b, kEnd, kEnd + 30, 6);
  uint64_t from = 0;  // (b's rings grew for its 60-token append: they hold more)
  for (size_t layer = 0; layer < to_plan.NumLayers(); ++layer) {
    from = std::max(from, longer.FirstPos(layer));
  }
  EXPECT_EQ(HeldBy(to_plan, PoolStore<To>{to_pool, b}, from), HeldByCache(longer, from));
  ASSERT_TRUE(to_pool.Free(b).ok());
  ASSERT_TRUE(to_pool.Free(b_fork).ok());
  EXPECT_EQ(to_pool.Usage().blocks_in_use, 0u);
}

TEST(StateIO, PoolSequencesLoadIntoCachesAndPools) {
  PoolRoundTrip<FlashLayout, TiledLayout<16>>();
  PoolRoundTrip<TiledLayout<16>, FlashLayout>();
  PoolRoundTrip<FlashLayout, FlashLayout>();
}

// A source whose views may not be used from several threads (the default of ByteSource).
class SequentialSource final : public ByteSource {
 public:
  explicit SequentialSource(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  uint64_t Size() const override { return bytes_.size(); }
  const uint8_t* View(uint64_t offset, uint64_t bytes) override {
    return offset + bytes <= bytes_.size() ? bytes_.data() + offset : nullptr;
  }

 private:
  const std::vector<uint8_t>& bytes_;
};

// A load on two threads gives what a load on the calling thread gives: into caches of both
// layouts and into a pool sequence; a damaged state is refused as before, the cache unchanged;
// a source without concurrent views is read on the calling thread.
TEST(StateIO, LoadsOnAThreadPoolAsOnTheCallingThread) {
  ThreadPool threads(2);
  const LayerPlan flash_plan = PlanFor<FlashLayout>(kContext, 16);
  const KVCache<FlashLayout> source = FilledCache<FlashLayout>(flash_plan, kEnd, 9);
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  ASSERT_TRUE(SaveState(source, kModel, &sink).ok());
  MemorySource input(bytes);
  KVCache<FlashLayout> one = KVCache<FlashLayout>::Create(flash_plan).value();
  KVCache<FlashLayout> two = KVCache<FlashLayout>::Create(flash_plan).value();
  ASSERT_TRUE(LoadState(&input, kModel, &one).ok());
  const Result loaded = LoadState(&input, kModel, &two, threads.Runner());
  ASSERT_TRUE(loaded.ok()) << loaded.Message();
  EXPECT_EQ(HeldByCache(two), HeldByCache(one));
  EXPECT_EQ(HeldByCache(two), HeldByCache(source));
  const LayerPlan tiled_plan = PlanFor<TiledLayout<16>>(kContext, 16);
  KVCache<TiledLayout<16>> tiled = KVCache<TiledLayout<16>>::Create(tiled_plan).value();
  ASSERT_TRUE(LoadState(&input, kModel, &tiled, threads.Runner()).ok());
  EXPECT_EQ(HeldByCache(tiled), HeldByCache(source));
  KVPool<TiledLayout<16>> pool = PoolOf<TiledLayout<16>>(tiled_plan, 1 << 22, 32);
  SequenceId id;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  ASSERT_TRUE(LoadState(&input, kModel, &pool, id, threads.Runner()).ok());
  EXPECT_EQ(HeldBy(tiled_plan, PoolStore<TiledLayout<16>>{pool, id}), HeldByCache(source));
  // A flipped bit in the last section: refused on two threads as on one.
  std::vector<uint8_t> damaged = bytes;
  damaged[damaged.size() - 10] ^= 1;
  MemorySource bad(damaged);
  const Held before = HeldByCache(two);
  EXPECT_EQ(LoadState(&bad, kModel, &two, threads.Runner()), Status::kBadState);
  EXPECT_EQ(HeldByCache(two), before);
  SequentialSource sequential(bytes);
  KVCache<FlashLayout> three = KVCache<FlashLayout>::Create(flash_plan).value();
  ASSERT_TRUE(LoadState(&sequential, kModel, &three, threads.Runner()).ok());
  EXPECT_EQ(HeldByCache(three), HeldByCache(source));
}

// A sink that takes `room` bytes, then fails.
class FailingSink final : public ByteSink {
 public:
  explicit FailingSink(uint64_t room) : room_(room) {}
  Result Write(const uint8_t*, uint64_t bytes) override {
    ++writes_;
    if (bytes > room_) return Result::Refused(Status::kIOError, "failing sink: full");
    room_ -= bytes;
    return Status::kOk;
  }
  uint64_t writes_ = 0;

 private:
  uint64_t room_;
};

// A save on a ThreadPool of 2 and 3 threads writes the bytes a save on the calling thread
// writes: caches of both layouts (sliding, chunked int8, global, MLA layers), an empty cache,
// a pool sequence sharing blocks with a fork; a failing sink stops it with kIOError.
TEST(StateIO, SavesOnAThreadPoolAsOnTheCallingThread) {
  // Sinks with memory of their own (VectorSink::Reserve: rows written in place) and without
  // (Write only: batches written in order while the next is gathered).
  class WriteOnlySink final : public ByteSink {
   public:
    explicit WriteOnlySink(std::vector<uint8_t>* bytes) : sink_(bytes) {}
    Result Write(const uint8_t* data, uint64_t bytes) override { return sink_.Write(data, bytes); }

   private:
    VectorSink sink_;
  };
  const auto same = [](const auto& save) {
    std::vector<uint8_t> one, two, three, written;
    VectorSink sink_one(&one), sink_two(&two), sink_three(&three);
    WriteOnlySink write_only(&written);
    ThreadPool pair(2), trio(3);
    EXPECT_TRUE(save(&sink_one, TaskRunner::Inline()).ok());
    const Result saved = save(&sink_two, pair.Runner());
    EXPECT_TRUE(saved.ok()) << saved.Message();
    EXPECT_TRUE(save(&sink_three, trio.Runner()).ok());
    EXPECT_TRUE(save(&write_only, trio.Runner()).ok());
    EXPECT_EQ(two, one);
    EXPECT_EQ(three, one);
    EXPECT_EQ(written, one);
    return one.size();
  };
  const KVCache<FlashLayout> flash =
      FilledCache<FlashLayout>(PlanFor<FlashLayout>(kContext, 16), kEnd, 9);
  same([&](ByteSink* sink, const TaskRunner& runner) {
    return SaveState(flash, kModel, sink, runner);
  });
  const KVCache<FlashLayout> large =
      FilledCache<FlashLayout>(PlanFor<FlashLayout>(1200, 16), 1150, 13);
  EXPECT_GT(same([&](ByteSink* sink, const TaskRunner& runner) {
              return SaveState(large, kModel, sink, runner);
            }),
            3 * ByteSink::kMaxWrite);
  const KVCache<TiledLayout<16>> tiled =
      FilledCache<TiledLayout<16>>(PlanFor<TiledLayout<16>>(kContext, 16), kEnd, 3);
  same([&](ByteSink* sink, const TaskRunner& runner) {
    return SaveState(tiled, kModel, sink, runner);
  });
  const KVCache<FlashLayout> empty =
      KVCache<FlashLayout>::Create(PlanFor<FlashLayout>(kContext, 4)).value();
  same([&](ByteSink* sink, const TaskRunner& runner) {
    return SaveState(empty, kModel, sink, runner);
  });
  const LayerPlan plan = PlanFor<TiledLayout<16>>(kContext, 16);
  KVPool<TiledLayout<16>> pool = PoolOf<TiledLayout<16>>(plan, 1 << 22, 32);
  SequenceId a, fork;
  ASSERT_TRUE(pool.AddSequence(&a).ok());
  AppendToSequence(&pool, a, 0, 100, 7);
  ASSERT_TRUE(pool.Fork(a, &fork).ok());
  AppendToSequence(&pool, fork, 100, kEnd, 5);
  same([&](ByteSink* sink, const TaskRunner& runner) {
    return SaveState(pool, fork, kModel, sink, runner);
  });
  ThreadPool pair(2);
  FailingSink failing(ByteSink::kMaxWrite);
  EXPECT_EQ(SaveState(large, kModel, &failing, pair.Runner()), Status::kIOError);
}

TEST(StateIO, EmptyCacheRoundTrips) {
  const LayerPlan plan = PlanFor<FlashLayout>(kContext, 4);
  const KVCache<FlashLayout> empty = KVCache<FlashLayout>::Create(plan).value();
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  ASSERT_TRUE(SaveState(empty, "", &sink).ok());
  KVCache<FlashLayout> loaded = FilledCache<FlashLayout>(plan, 20, 4);
  MemorySource input(bytes);
  ASSERT_TRUE(LoadState(&input, "", &loaded).ok());
  EXPECT_EQ(loaded.EndPos(), 0u);
  EXPECT_EQ(HeldByCache(loaded), HeldByCache(empty));
}

// A load ends the views taken before it, and their refusal names LoadState.
TEST(StateIO, LoadEndsTheViewsTakenBefore) {
  const LayerPlan plan = PlanFor<FlashLayout>(kContext, 16);
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  ASSERT_TRUE(SaveState(FilledCache<FlashLayout>(plan, 40, 8), kModel, &sink).ok());
  MemorySource input(bytes);
  KVCache<FlashLayout> cache = FilledCache<FlashLayout>(plan, 20, 4);
  const KVView<FlashLayout> view = cache.View(1);
  ASSERT_TRUE(view.stamp.Check().ok());
  ASSERT_TRUE(LoadState(&input, kModel, &cache).ok());
  Result stale = view.stamp.Check();
  EXPECT_EQ(stale.status(), Status::kStaleView);
  EXPECT_NE(stale.Message().find("LoadState"), std::string::npos) << stale.Message();
  EXPECT_TRUE(cache.View(1).stamp.Check().ok());

  KVPool<FlashLayout> pool = PoolOf<FlashLayout>(plan, 1 << 22, 32);
  SequenceId id;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  AppendToSequence(&pool, id, 0, 10, 5);
  const KVView<FlashLayout> pool_view = *pool.View(id, 0);
  ASSERT_TRUE(LoadState(&input, kModel, &pool, id).ok());
  stale = pool_view.stamp.Check();
  EXPECT_EQ(stale.status(), Status::kStaleView);
  EXPECT_NE(stale.Message().find("LoadState"), std::string::npos) << stale.Message();
  EXPECT_EQ(*pool.EndPos(id), 40u);
  EXPECT_EQ(HeldBy(plan, PoolStore<FlashLayout>{pool, id}), HeldByCache(cache));
}

TEST(StateIO, SaveIsRefusedMidStepAndForLongModelIds) {
  const LayerPlan plan = PlanFor<FlashLayout>(kContext, 4);
  KVCache<FlashLayout> cache = FilledCache<FlashLayout>(plan, 8, 4);
  const std::vector<float> k = RowsOf(8, 1, 32, 0, 0), v = RowsOf(8, 1, 32, 0, 0);
  ASSERT_TRUE(cache.AppendF32(0, 8, k.data(), v.data(), 1).ok());
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  EXPECT_EQ(SaveState(cache, kModel, &sink), Status::kWrongPosition);
  EXPECT_TRUE(bytes.empty());
  const KVCache<FlashLayout> whole = FilledCache<FlashLayout>(plan, 8, 4);
  EXPECT_EQ(SaveState(whole, std::string(kMaxModelIdBytes + 1, 'x'), &sink), Status::kBadArgument);
  EXPECT_EQ(SaveState(whole, kModel, nullptr), Status::kBadArgument);
}

// Every sink writes the same bytes; a sink that fails stops the save with its kIOError; loads
// with and without non-temporal stores (the memcpy of other architectures) fill the same rows.
TEST(StateIO, SinksAndBothCopiesAgree) {
  const LayerPlan plan = PlanFor<TiledLayout<16>>(1200, 16);
  const KVCache<TiledLayout<16>> source = FilledCache<TiledLayout<16>>(plan, 1150, 13);
  std::vector<uint8_t> bytes;
  VectorSink vector_sink(&bytes);
  ASSERT_TRUE(SaveState(source, kModel, &vector_sink).ok());
  ASSERT_EQ(bytes.size(), StateBytes(source, kModel));
  ASSERT_GT(bytes.size(), 3 * ByteSink::kMaxWrite);  // several writes
  std::vector<uint8_t> memory(bytes.size() + 7, 0xEE);
  MemorySink exact(memory.data() + 3, bytes.size());  // unaligned on purpose
  ASSERT_TRUE(SaveState(source, kModel, &exact).ok());
  EXPECT_EQ(exact.Size(), bytes.size());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), memory.begin() + 3));
  EXPECT_EQ(memory[2], 0xEE);
  EXPECT_EQ(memory[bytes.size() + 3], 0xEE);
  MemorySink short_by_one(memory.data(), bytes.size() - 1);
  EXPECT_EQ(SaveState(source, kModel, &short_by_one), Status::kIOError);
  FailingSink failing(ByteSink::kMaxWrite);
  const Result failed = SaveState(source, kModel, &failing);
  EXPECT_EQ(failed, Status::kIOError) << failed.Message();
  EXPECT_EQ(failing.writes_, 2u);  // stopped at the first refusal

  KVCache<TiledLayout<16>> streamed = KVCache<TiledLayout<16>>::Create(plan).value();
  KVCache<TiledLayout<16>> copied = KVCache<TiledLayout<16>>::Create(plan).value();
  MemorySource input(bytes);
  ASSERT_TRUE(LoadState(&input, kModel, &streamed).ok());
  detail::StreamCopyAllowed() = false;
  const Result plain = LoadState(&input, kModel, &copied);
  detail::StreamCopyAllowed() = true;
  ASSERT_TRUE(plain.ok()) << plain.Message();
  EXPECT_EQ(HeldByCache(streamed), HeldByCache(source));
  EXPECT_EQ(HeldByCache(copied), HeldByCache(source));
}

// The stage a writer starts with (the bytes its caller expects: at least 4 KiB, at most
// 512 KiB) changes no byte it writes: puts longer than the stage and staged blocks larger than
// it (Reserve grows it) come out as with the whole stage, each section's CRC32C right, to a
// sink with memory of its own and to one without.
TEST(StateIO, TheWritersStageChangesNoByte) {
  constexpr uint64_t kStage = detail::StateWriter::kStage;
  std::mt19937 rng(11);
  std::vector<uint8_t> data(3 << 20);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(rng());
  // Per section: puts (> 0) and staged blocks (< 0) of these many bytes.
  const std::vector<std::vector<int64_t>> sections = {
      {3, 8, 100},
      {4101, -40000, 1, 200000},
      {-static_cast<int64_t>(kStage), 7, -64, 700000},
      {-5000, 2 * static_cast<int64_t>(kStage) + 13, -9000}};
  const auto write = [&](uint64_t expected, ByteSink* sink) {
    detail::StateWriter out(sink, expected);
    uint64_t at = 0;
    for (size_t section = 0; section < sections.size(); ++section) {
      uint64_t payload = 0;
      for (const int64_t bytes : sections[section]) payload += std::abs(bytes);
      out.BeginSection(0x51u + static_cast<uint32_t>(section), payload);
      for (const int64_t bytes : sections[section]) {
        const uint64_t length = std::abs(bytes);
        if (bytes > 0) {
          out.Put(data.data() + at, length);
        } else {
          uint8_t* block = out.Reserve(length);
          if (block == nullptr) return Result(Status::kOutOfMemory);
          std::memcpy(block, data.data() + at, length);
        }
        at = (at + 4099) % (1 << 20);
      }
      out.EndSection();
    }
    return out.Finish();
  };
  std::vector<uint8_t> reference;
  VectorSink reference_sink(&reference);
  ASSERT_TRUE(write(kStage, &reference_sink).ok());
  uint64_t offset = 0;
  for (size_t section = 0; section < sections.size(); ++section) {
    uint64_t payload;
    ASSERT_LE(offset + 16, reference.size());
    std::memcpy(&payload, reference.data() + offset + 8, 8);
    ASSERT_LE(offset + 16 + payload + 4, reference.size());
    uint32_t crc;
    std::memcpy(&crc, reference.data() + offset + 16 + payload, 4);
    EXPECT_EQ(crc, detail::Crc32c(0, reference.data() + offset, 16 + payload)) << section;
    offset += 16 + payload + 4;
  }
  EXPECT_EQ(offset, reference.size());
  for (const uint64_t expected : {uint64_t{0}, uint64_t{64}, uint64_t{5000}, uint64_t{70000},
                                  uint64_t{300000}, ~uint64_t{0}}) {
    std::vector<uint8_t> bytes;
    VectorSink vector_sink(&bytes);
    ASSERT_TRUE(write(expected, &vector_sink).ok()) << expected;
    EXPECT_TRUE(bytes == reference) << expected;
    std::vector<uint8_t> memory(reference.size());
    MemorySink memory_sink(memory.data(), memory.size());
    ASSERT_TRUE(write(expected, &memory_sink).ok()) << expected;
    EXPECT_EQ(memory_sink.Size(), reference.size()) << expected;
    EXPECT_TRUE(memory == reference) << expected;
  }
}

// ---- Bad states ----

// Rewrites the CRC32C of every section of a state (after a test edits a field on purpose).
void FixCrcs(std::vector<uint8_t>* bytes) {
  uint64_t offset = 16;
  while (offset + 16 <= bytes->size()) {
    uint64_t payload;
    std::memcpy(&payload, bytes->data() + offset + 8, 8);
    if (payload > bytes->size() - offset - 16 - 4) return;
    const uint32_t crc = detail::Crc32c(0, bytes->data() + offset, 16 + payload);
    std::memcpy(bytes->data() + offset + 16 + payload, &crc, 4);
    offset += 16 + payload + 4;
  }
}

// The offsets of each section of a well-formed state.
std::vector<uint64_t> Sections(const std::vector<uint8_t>& bytes) {
  std::vector<uint64_t> offsets;
  for (uint64_t offset = 16; offset + 16 <= bytes.size();) {
    offsets.push_back(offset);
    uint64_t payload;
    std::memcpy(&payload, bytes.data() + offset + 8, 8);
    offset += 16 + payload + 4;
  }
  return offsets;
}

template <typename T>
void Poke(std::vector<uint8_t>* bytes, uint64_t offset, T value) {
  std::memcpy(bytes->data() + offset, &value, sizeof(T));
}

// The rows of a layer section follow the documented order (storage/row_pieces.h): chunks of
// 256 positions aligned to multiples of 256; in each, K [kv_head][dim][pos], the K scales
// [kv_head][pos] (int8), V [kv_head][pos][dim], the V scales [kv_head][pos] (int8).
TEST(StateIO, RowsFollowTheDocumentedOrder) {
  LayerSpec sliding_int8 = LayerSpec::Sliding(300, 2, 16);
  sliding_int8.format = Format::kInt8;
  const LayerPlan plan = PlanFor<TiledLayout<16>>(
      1024, 16, LayerPlan::Builder().AddLayer(sliding_int8).AddLayer(LayerSpec::Global(2, 32)));
  const KVCache<TiledLayout<16>> cache = FilledCache<TiledLayout<16>>(plan, 700, 16);
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  ASSERT_TRUE(SaveState(cache, kModel, &sink).ok());
  const std::vector<uint64_t> sections = Sections(bytes);
  ASSERT_EQ(sections.size(), 3u);
  for (size_t layer = 0; layer < 2; ++layer) {
    SCOPED_TRACE(layer);
    const bool int8 = layer == 0;
    const uint64_t heads = 2, dims = int8 ? 16 : 32, element = int8 ? 1 : 2;
    const uint64_t first = cache.FirstPos(layer), end = cache.EndPos(layer);
    ASSERT_EQ(first, int8 ? 700u - cache.View(0).layout.Shape().num_slots : 0u);
    std::vector<uint8_t> expected;
    const auto put = [&](const void* data, uint64_t size) {
      const uint8_t* from = static_cast<const uint8_t*>(data);
      expected.insert(expected.end(), from, from + size);
    };
    for (uint64_t chunk = first; chunk < end; chunk = (chunk / 256 + 1) * 256) {
      const uint64_t chunk_end = std::min(end, (chunk / 256 + 1) * 256);
      // Each position's stored row: K [head][dim], V [head][dim], scales [head] (int8).
      std::vector<std::vector<uint8_t>> k, v;
      std::vector<std::vector<float>> k_scales, v_scales;
      for (uint64_t pos = chunk; pos < chunk_end; ++pos) {
        k.emplace_back(heads * dims * element);
        v.emplace_back(heads * dims * element);
        k_scales.emplace_back(heads);
        v_scales.emplace_back(heads);
        const Result read =
            int8 ? cache.ReadRowInt8(layer, pos, reinterpret_cast<int8_t*>(k.back().data()),
                                     k_scales.back().data(),
                                     reinterpret_cast<int8_t*>(v.back().data()),
                                     v_scales.back().data())
                 : cache.ReadRow(layer, pos, reinterpret_cast<BF16*>(k.back().data()),
                                 reinterpret_cast<BF16*>(v.back().data()));
        ASSERT_TRUE(read.ok()) << read.Message();
      }
      const uint64_t n = chunk_end - chunk;
      for (uint64_t head = 0; head < heads; ++head) {
        for (uint64_t dim = 0; dim < dims; ++dim) {
          for (uint64_t i = 0; i < n; ++i) put(&k[i][(head * dims + dim) * element], element);
        }
      }
      for (uint64_t head = 0; int8 && head < heads; ++head) {
        for (uint64_t i = 0; i < n; ++i) put(&k_scales[i][head], sizeof(float));
      }
      for (uint64_t head = 0; head < heads; ++head) {
        for (uint64_t i = 0; i < n; ++i) put(&v[i][head * dims * element], dims * element);
      }
      for (uint64_t head = 0; int8 && head < heads; ++head) {
        for (uint64_t i = 0; i < n; ++i) put(&v_scales[i][head], sizeof(float));
      }
    }
    const uint64_t rows = sections[1 + layer] + 16 + 24;
    ASSERT_EQ(sections[1 + layer] + 16 + 24 + expected.size() + 4,
              layer == 0 ? sections[2] : bytes.size());
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), bytes.begin() + rows));
  }
}

struct BadState {
  const char* name;
  std::function<void(std::vector<uint8_t>*)> edit;
  const char* message;  // a fragment of the refusal
  Status status = Status::kBadState;
  std::string model_id = kModel;
  LayerPlan::Builder builder = Model();
  uint64_t context = kContext;
};

TEST(StateIO, BadStatesAreRefusedAndChangeNothing) {
  const LayerPlan plan = PlanFor<FlashLayout>(kContext, 16);
  std::vector<uint8_t> good;
  VectorSink sink(&good);
  ASSERT_TRUE(SaveState(FilledCache<FlashLayout>(plan, kEnd, 9), kModel, &sink).ok());
  const std::vector<uint64_t> sections = Sections(good);
  ASSERT_EQ(sections.size(), 6u);            // the header and five owners
  const uint64_t header = sections[0] + 16;  // the header payload
  const uint64_t descriptors = header + 4 + sizeof(kModel) - 1 + 24;
  const uint64_t layer1 = sections[2] + 16;  // layers[1]'s payload (the global BF16 owner)
  const auto descriptor = [&](uint64_t layer, uint64_t field) {
    return descriptors + layer * 40 + field;
  };

  const auto swap_sections = [&](std::vector<uint8_t>* bytes) {
    // layers[1]'s and layers[2]'s sections change places.
    std::vector<uint8_t> a(good.begin() + sections[2], good.begin() + sections[3]);
    std::vector<uint8_t> b(good.begin() + sections[3], good.begin() + sections[4]);
    bytes->erase(bytes->begin() + sections[2], bytes->begin() + sections[4]);
    bytes->insert(bytes->begin() + sections[2], a.begin(), a.end());
    bytes->insert(bytes->begin() + sections[2], b.begin(), b.end());
  };
  std::vector<BadState> bad = {
      {"empty", [](auto* b) { b->clear(); }, "shorter than the 16-byte preamble"},
      {"cut in the preamble", [](auto* b) { b->resize(15); }, "shorter than the 16-byte"},
      {"wrong magic", [](auto* b) { (*b)[0] = 'G'; }, "not a kvring state"},
      {"gguf file", [](auto* b) { std::memcpy(b->data(), "GGUF\3\0\0\0", 8); },
       "not a kvring state"},
      {"version 2", [](auto* b) { Poke<uint32_t>(b, 8, 2); }, "format version 2"},
      {"reserved preamble word", [](auto* b) { Poke<uint32_t>(b, 12, 1); }, "reserved word 1"},
      {"no sections", [](auto* b) { b->resize(16); }, "section 0 at byte 16 is cut off"},
      {"header tag", [&](auto* b) { Poke<uint32_t>(b, sections[0], 0x12345678); },
       "section 0 at byte 16 has tag 305419896"},
      {"section reserved word", [&](auto* b) { Poke<uint32_t>(b, sections[0] + 4, 9); }, "has tag"},
      {"header size past the end", [&](auto* b) { Poke<uint64_t>(b, sections[0] + 8, 1 << 30); },
       "past the end"},
      {"header size overflows", [&](auto* b) { Poke<uint64_t>(b, sections[0] + 8, ~0ull - 3); },
       "past the end"},
      {"flipped bit in the header", [&](auto* b) { (*b)[descriptor(1, 32)] ^= 4; },
       "section 0 (bytes 16 to"},
      {"flipped bit in the rows", [&](auto* b) { (*b)[layer1 + 24 + 100] ^= 1; },
       "section 2 (bytes"},
      {"flipped bit in a CRC", [&](auto* b) { (*b)[sections[3] - 1] ^= 0x80; },
       "fails its CRC32C check"},
      {"cut in a layer section", [&](auto* b) { b->resize(sections[3] + 20); },
       "section 3 at byte"},
      {"last section missing", [&](auto* b) { b->resize(sections[5]); }, "section 5 at byte"},
      {"last CRC cut", [&](auto* b) { b->pop_back(); }, "past the end"},
      {"trailing bytes", [](auto* b) { b->push_back(0); }, "1 bytes follow its last section"},
      {"another model id", [](auto*) {}, "written for another model", Status::kBadState,
       "test-model weights sha256:0124"},
      {"a longer model id", [](auto*) {}, "written for another model", Status::kBadState,
       std::string(kModel) + "x"},
      {"model id length past the limit",
       [&](auto* b) {
         Poke<uint32_t>(b, header, 5000);
         FixCrcs(b);
       },
       "a model id of 5000 bytes"},
      {"header shorter than its layers",
       [&](auto* b) {
         Poke<uint64_t>(b, sections[0] + 8, 30);
         FixCrcs(b);
       },
       "the header section holds 30 bytes"},
      {"another context", [](auto*) {}, "runtime.context is 400 in the state and 512",
       Status::kBadState, kModel, Model(), 512},
      {"more layers", [](auto*) {}, "this plan's 8 layers", Status::kBadState, kModel,
       Model().AddLayer(LayerSpec::Global(2, 32))},
      {"another kind",
       [&](auto* b) {
         Poke<uint32_t>(b, descriptor(1, 0), 1);
         FixCrcs(b);
       },
       "layers[1].kind is 1 in the state and 0"},
      {"another format",
       [&](auto* b) {
         Poke<uint32_t>(b, descriptor(1, 4), 1);
         FixCrcs(b);
       },
       "layers[1].format is 1"},
      {"another owner",
       [&](auto* b) {
         Poke<uint32_t>(b, descriptor(6, 8), 4);
         FixCrcs(b);
       },
       "layers[6].owner is 4 in the state and 1"},
      {"another window",
       [&](auto* b) {
         Poke<uint64_t>(b, descriptor(3, 12), 6);
         FixCrcs(b);
       },
       "layers[3].window is 6 in the state and 5"},
      {"another chunk",
       [&](auto* b) {
         Poke<uint64_t>(b, descriptor(2, 20), 16);
         FixCrcs(b);
       },
       "layers[2].chunk is 16"},
      {"other head counts",
       [&](auto* b) {
         Poke<uint32_t>(b, descriptor(0, 28), 4);
         FixCrcs(b);
       },
       "layers[0].num_kv_heads is 4"},
      {"another head dim",
       [&](auto* b) {
         Poke<uint32_t>(b, descriptor(5, 32), 64);
         FixCrcs(b);
       },
       "layers[5].head_dim is 64 in the state and 48"},
      {"a V stream on MLA",
       [&](auto* b) {
         Poke<uint32_t>(b, descriptor(5, 36), 48);
         FixCrcs(b);
       },
       "layers[5].v_head_dim (V, or a DSA latent's indexer key) is 48 in the state and 0"},
      {"another plan's format (int8 globals)", [](auto*) {}, "layers[1].format is 0",
       Status::kBadState, kModel, Model().SetFormat(AttentionKind::kGlobal, Format::kInt8)},
      {"int8 where the state's K is rotated (int8h)", [](auto*) {},
       "layers[4].format is 5 in the state and 1", Status::kBadState, kModel, Model(Format::kInt8)},
      {"end past the context",
       [&](auto* b) {
         Poke<uint64_t>(b, descriptors - 16, 401);
         FixCrcs(b);
       },
       "end position 401 is past the context"},
      {"sections out of order", [&](auto* b) { swap_sections(b); },
       "holds layers[2] where the section of layers[1]"},
      {"layer section tag", [&](auto* b) { Poke<uint32_t>(b, sections[4], 0x4448564B); },
       "section 4 at byte"},
      {"layer section's format",
       [&](auto* b) {
         Poke<uint32_t>(b, layer1 + 4, 1);
         FixCrcs(b);
       },
       "layers[1] section's format is 1"},
      {"layer end differs",
       [&](auto* b) {
         Poke<uint64_t>(b, layer1 + 16, kEnd - 1);
         FixCrcs(b);
       },
       "does not end at the state's end 157"},
      {"first past end",
       [&](auto* b) {
         Poke<uint64_t>(b, layer1 + 8, kEnd + 1);
         FixCrcs(b);
       },
       "holds [158, 157)"},
      {"a global layer missing its start",
       [&](auto* b) {
         Poke<uint64_t>(b, layer1 + 8, 1);
         FixCrcs(b);
       },
       "layers[1] holds [1, 157), but this layer needs every position from 0"},
      {"a ring missing its window",
       [&](auto* b) {
         Poke<uint64_t>(b, sections[1] + 16 + 8, kEnd - 3);
         FixCrcs(b);
       },
       "layers[0] holds [154, 157), but this layer needs every position from 151"},
      {"rows shorter than the range",
       [&](auto* b) {
         uint64_t payload;
         std::memcpy(&payload, b->data() + sections[2] + 8, 8);
         Poke<uint64_t>(b, sections[2] + 8, payload - 8);
         b->erase(b->begin() + sections[3] - 12, b->begin() + sections[3] - 4);
         FixCrcs(b);
       },
       "layers[1] section holds"},
  };
  ASSERT_GE(bad.size(), 30u);
  for (const BadState& state : bad) {
    SCOPED_TRACE(state.name);
    std::vector<uint8_t> bytes = good;
    state.edit(&bytes);
    Expected<LayerPlan> built = LayerPlan::Builder(state.builder)
                                    .SetContext(state.context)
                                    .SetBatch(16)
                                    .SetRollback(2)
                                    .SetLayout<FlashLayout>()
                                    .Build();
    ASSERT_TRUE(built.ok()) << built.error().message;
    KVCache<FlashLayout> cache = FilledCache<FlashLayout>(built.value(), 41, 8);
    const Held before = HeldByCache(cache);
    MemorySource input(bytes);
    const Result result = LoadState(&input, state.model_id, &cache);
    EXPECT_EQ(result.status(), state.status) << result.Message();
    EXPECT_NE(result.Message().find(state.message), std::string::npos) << result.Message();
    EXPECT_TRUE(HeldByCache(cache) == before) << "the cache changed";
    // A pool sequence refuses it too, and keeps its rows and blocks.
    KVPool<FlashLayout> pool = PoolOf<FlashLayout>(built.value(), 1 << 22, 64);
    SequenceId id;
    ASSERT_TRUE(pool.AddSequence(&id).ok());
    AppendToSequence(&pool, id, 0, 70, 7);
    const Held pool_before = HeldBy(built.value(), PoolStore<FlashLayout>{pool, id});
    const uint64_t blocks = pool.Usage().blocks_in_use;
    EXPECT_EQ(LoadState(&input, state.model_id, &pool, id).status(), state.status);
    EXPECT_TRUE(HeldBy(built.value(), PoolStore<FlashLayout>{pool, id}) == pool_before);
    EXPECT_EQ(pool.Usage().blocks_in_use, blocks);
  }
}

// Every single-bit flip and every truncation of a small state is refused (the CRCs and sizes
// catch each), and the cache keeps its rows.
TEST(StateIO, EveryBitFlipAndTruncationIsRefused) {
  LayerSpec int8 = LayerSpec::Sliding(3, 1, 16);
  int8.format = Format::kInt8;
  const auto builder = LayerPlan::Builder().AddLayer(int8).AddLayer(LayerSpec::Global(1, 16));
  const LayerPlan plan = PlanFor<FlashLayout>(64, 1, builder);
  std::vector<uint8_t> good;
  VectorSink sink(&good);
  ASSERT_TRUE(SaveState(FilledCache<FlashLayout>(plan, 5, 1), "m", &sink).ok());
  KVCache<FlashLayout> cache = FilledCache<FlashLayout>(plan, 9, 3);
  const Held before = HeldByCache(cache);
  for (size_t bit = 0; bit < good.size() * 8; ++bit) {
    std::vector<uint8_t> bytes = good;
    bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    MemorySource input(bytes);
    ASSERT_EQ(LoadState(&input, "m", &cache), Status::kBadState) << "bit " << bit;
  }
  for (size_t size = 0; size < good.size(); ++size) {
    MemorySource input(good.data(), size);
    ASSERT_EQ(LoadState(&input, "m", &cache), Status::kBadState) << "size " << size;
  }
  EXPECT_TRUE(HeldByCache(cache) == before);
}

TEST(StateIO, PoolLoadNeedsItsBlocksOrChangesNothing) {
  const LayerPlan plan = PlanFor<FlashLayout>(kContext, 16);
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  ASSERT_TRUE(SaveState(FilledCache<FlashLayout>(plan, 300, 16), kModel, &sink).ok());
  // A budget that holds the sequence's rings and a few blocks only.
  KVPool<FlashLayout> probe = PoolOf<FlashLayout>(plan, 1 << 22, 32);
  const uint64_t budget = probe.RingBytesFor(16) + probe.BlockBytesFor(200);
  KVPool<FlashLayout> pool = PoolOf<FlashLayout>(plan, budget, 32);
  SequenceId id;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  AppendToSequence(&pool, id, 0, 50, 10);
  const Held before = HeldBy(plan, PoolStore<FlashLayout>{pool, id});
  MemorySource input(bytes);
  const Result result = LoadState(&input, kModel, &pool, id);
  EXPECT_EQ(result.status(), Status::kPoolExhausted) << result.Message();
  EXPECT_TRUE(HeldBy(plan, PoolStore<FlashLayout>{pool, id}) == before);
  EXPECT_EQ(LoadState(&input, kModel, &pool, SequenceId{}), Status::kUnknownSequence);
}

TEST(StateIO, FilesRoundTripThroughATemporaryName) {
  const LayerPlan plan = PlanFor<TiledLayout<16>>(kContext, 16);
  const KVCache<TiledLayout<16>> source = FilledCache<TiledLayout<16>>(plan, kEnd, 9);
  const std::string path = ::testing::TempDir() + "kvring_state_io_test.kvstate";
  std::remove(path.c_str());
  ASSERT_TRUE(SaveStateFile(source, kModel, path).ok());
  EXPECT_EQ(std::fopen((path + ".tmp").c_str(), "rb"), nullptr);
  KVCache<TiledLayout<16>> loaded = KVCache<TiledLayout<16>>::Create(plan).value();
  const Result result = LoadStateFile(path, kModel, &loaded);
  ASSERT_TRUE(result.ok()) << result.Message();
  EXPECT_EQ(HeldByCache(loaded), HeldByCache(source));
  EXPECT_EQ(LoadStateFile(path + ".missing", kModel, &loaded), Status::kIOError);
  EXPECT_EQ(SaveStateFile(source, kModel, "/nonexistent-dir/x.kvstate"), Status::kIOError);
  // A save refused mid-way leaves no temporary file and the old file as it was.
  std::FILE* file = std::fopen(path.c_str(), "rb");
  ASSERT_NE(file, nullptr);
  std::fclose(file);
  EXPECT_EQ(SaveStateFile(source, std::string(kMaxModelIdBytes + 1, 'x'), path),
            Status::kBadArgument);
  EXPECT_EQ(std::fopen((path + ".tmp").c_str(), "rb"), nullptr);
  ASSERT_TRUE(LoadStateFile(path, kModel, &loaded).ok());
  std::remove(path.c_str());
}

// FileSink gathers what it is given into whole 2 MiB pieces (the last excepted): pieces of
// every size, on both sides of the piece boundaries and straight through (several whole
// pieces at once), reach the file as the same bytes in the same order.
TEST(StateIO, FileSinkWritesTheBytesItIsGivenInOrder) {
  const std::string path = ::testing::TempDir() + "kvring_file_sink_test.bin";
  std::remove((path + ".tmp").c_str());  // (a link an interrupted run left)
  const uint64_t piece = FileSink::kFilePiece;
  const std::vector<uint64_t> sizes = {
      1, 100,  ByteSink::kMaxWrite, 3 * piece + 17, piece - 5, 7, 2 * piece, piece, 0, piece - 1,
      1, 12345};
  uint64_t total = 0;
  for (uint64_t size : sizes) total += size;
  std::vector<uint8_t> bytes(total);
  uint32_t seed = 12345;
  for (uint8_t& byte : bytes) {
    seed = seed * 1664525u + 1013904223u;
    byte = static_cast<uint8_t>(seed >> 24);
  }
  FileSink sink;
  ASSERT_TRUE(sink.Open(path).ok());
  uint64_t at = 0;
  for (uint64_t size : sizes) {
    ASSERT_TRUE(sink.Write(bytes.data() + at, size).ok()) << size;
    at += size;
  }
  ASSERT_TRUE(sink.Finish().ok());
  std::FILE* file = std::fopen(path.c_str(), "rb");
  ASSERT_NE(file, nullptr);
  std::vector<uint8_t> read(total + 1);
  EXPECT_EQ(std::fread(read.data(), 1, read.size(), file), total);
  std::fclose(file);
  read.resize(total);
  EXPECT_TRUE(read == bytes);
  // A sink destroyed unfinished leaves neither the temporary file nor a file at the path.
  std::remove(path.c_str());
  {
    FileSink unfinished;
    ASSERT_TRUE(unfinished.Open(path).ok());
    ASSERT_TRUE(unfinished.Write(bytes.data(), piece + 3).ok());
  }
  EXPECT_EQ(std::fopen((path + ".tmp").c_str(), "rb"), nullptr);
  EXPECT_EQ(std::fopen(path.c_str(), "rb"), nullptr);
  // A write the system refuses (the temporary name made a link to /dev/full: no space) is
  // reported by that Write or, for bytes still gathered, by Finish, which leaves no file.
#if defined(__linux__)
  if (::symlink("/dev/full", (path + ".tmp").c_str()) == 0) {
    FileSink full;
    ASSERT_TRUE(full.Open(path).ok());
    EXPECT_TRUE(full.Write(bytes.data(), 10).ok());  // gathered, not yet written
    EXPECT_EQ(full.Finish(), Status::kIOError);
    EXPECT_EQ(std::fopen(path.c_str(), "rb"), nullptr);
    ASSERT_EQ(::symlink("/dev/full", (path + ".tmp").c_str()), 0);
    FileSink whole;
    ASSERT_TRUE(whole.Open(path).ok());
    EXPECT_EQ(whole.Write(bytes.data(), 2 * piece), Status::kIOError);
    EXPECT_EQ(whole.Write(bytes.data(), 1), Status::kIOError);  // and stays refused
    EXPECT_EQ(whole.Finish(), Status::kIOError);
    EXPECT_EQ(std::fopen(path.c_str(), "rb"), nullptr);
    std::remove((path + ".tmp").c_str());
  }
#endif
  // Writing to a sink that is not open is refused.
  FileSink closed;
  EXPECT_EQ(closed.Write(bytes.data(), 1), Status::kIOError);
  EXPECT_EQ(closed.Finish(), Status::kIOError);
}

}  // namespace
}  // namespace kvring
