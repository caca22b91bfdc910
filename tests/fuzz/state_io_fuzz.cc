// libFuzzer target: the state loader (kvring/io/state_io.h) reads arbitrary bytes, and
// valid states with fuzzed edits whose section checksums are then made right again (so the
// checks behind the CRC are reached), into a filled KVCache and a filled pool sequence that
// shares blocks with a fork. A refused load leaves both byte for byte as they were; a load
// that succeeds leaves a destination that saves and loads again to the same state.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/detail/crc32c.h"
#include "kvring/kvring.h"

namespace {

using kvring::FlashLayout;
using kvring::KVCache;
using kvring::KVPool;
using kvring::LayerPlan;
using kvring::LayerSpec;
using kvring::SequenceId;
using kvring::TiledLayout;

const char kModel[] = "fuzz-model";

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "kvring state fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

template <typename Layout>
LayerPlan Plan() {
  LayerSpec chunked = LayerSpec::Chunked(6, 1, 16);
  chunked.format = kvring::Format::kInt8;
  kvring::Expected<LayerPlan> plan = LayerPlan::Builder()
                                         .AddLayer(LayerSpec::Sliding(5, 2, 16))
                                         .AddLayer(LayerSpec::Global(1, 16))
                                         .AddLayer(chunked)
                                         .AddLayer(LayerSpec::Latent(16).WithIndexer(16))
                                         .AddLayer(LayerSpec::Sliding(3, 2, 16).SharedFrom(0))
                                         .SetContext(64)
                                         .SetBatch(4)
                                         .SetRollback(1)
                                         .SetLayout<Layout>()
                                         .Build();
  if (!plan.ok()) Fail("plan", plan.error().message);
  return plan.value();
}

// Appends positions [from, to) to every owning layer through append(layer, pos, k, v, n).
template <typename Append>
void Fill(const LayerPlan& plan, uint64_t from, uint64_t to, float salt, const Append& append) {
  for (uint64_t pos = from; pos < to; pos += 3) {
    const uint64_t n = std::min<uint64_t>(3, to - pos);
    for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
      if (!plan.Layer(layer).OwnsKV()) continue;
      const kvring::LayerInfo& info = plan.Layer(layer);
      const kvring::KVShape shape = kvring::KVShape::Of(info.spec, info.num_slots);
      std::vector<float> k(n * shape.KRowElements()), v(n * shape.VRowElements());
      for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>((pos * 7 + i) % 13) + salt;
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((pos * 5 + i) % 11) - salt;
      const kvring::Result result =
          append(layer, pos, k.data(), shape.v_head_dim == 0 ? nullptr : v.data(), n);
      if (!result.ok()) Fail("fill", result.Message());
    }
  }
}

template <typename Store>
std::vector<uint8_t> Saved(const Store& save) {
  std::vector<uint8_t> bytes;
  kvring::VectorSink sink(&bytes);
  const kvring::Result result = save(&sink);
  if (!result.ok()) Fail("save", result.Message());
  return bytes;
}

// Recomputes the CRC32C of every section whose header still fits the bytes.
void FixChecksums(std::vector<uint8_t>* bytes) {
  uint64_t offset = kvring::detail::kStatePreambleBytes;
  while (bytes->size() - offset >= kvring::detail::kSectionHeaderBytes) {
    uint64_t payload;
    std::memcpy(&payload, bytes->data() + offset + 8, 8);
    const uint64_t room = bytes->size() - offset - kvring::detail::kSectionHeaderBytes;
    if (payload > room || room - payload < kvring::detail::kSectionCrcBytes) return;
    const uint64_t crc_at = offset + kvring::detail::kSectionHeaderBytes + payload;
    const uint32_t crc = kvring::detail::Crc32c(0, bytes->data() + offset, crc_at - offset);
    std::memcpy(bytes->data() + crc_at, &crc, 4);
    offset = crc_at + kvring::detail::kSectionCrcBytes;
  }
}

// The input as a state: raw bytes (mode 0), or the valid `state` with edits (offset, byte)
// from the input, optionally truncated, and with its checksums fixed (mode 2) or not.
std::vector<uint8_t> StateFrom(const uint8_t* data, size_t size,
                               const std::vector<uint8_t>& state) {
  const uint8_t mode = data[0] % 3;
  if (mode == 0) return std::vector<uint8_t>(data + 1, data + size);
  std::vector<uint8_t> bytes = state;
  size_t i = 1;
  if (i < size && (data[i] & 1)) {  // truncate or extend
    const size_t new_size = (static_cast<size_t>(data[i]) * bytes.size()) / 256 + (data[i] & 2);
    bytes.resize(std::min(new_size, bytes.size() + 16), 0);
  }
  ++i;
  for (; i + 2 < size && !bytes.empty(); i += 3) {
    const size_t at = (static_cast<size_t>(data[i]) << 8 | data[i + 1]) % bytes.size();
    bytes[at] ^= data[i + 2];
  }
  if (mode == 2) FixChecksums(&bytes);
  return bytes;
}

template <typename Layout>
struct Destinations {
  LayerPlan plan = Plan<Layout>();
  KVCache<Layout> cache = KVCache<Layout>::Create(plan).value();
  KVPool<Layout> pool = KVPool<Layout>::Create(plan, PoolSpecFor()).value();
  SequenceId target, fork;

  static kvring::PoolSpec PoolSpecFor() {
    kvring::PoolSpec spec;
    spec.budget_bytes = 1 << 20;
    spec.max_sequences = 4;
    spec.block_slots = Layout::kTileSlots;
    return spec;
  }
  Destinations() {
    Fill(plan, 0, 21, 0.25f,
         [&](size_t layer, uint64_t pos, const float* k, const float* v, uint64_t n) {
           return cache.AppendF32(layer, pos, k, v, n);
         });
    if (!pool.AddSequence(&target).ok()) Fail("pool", "AddSequence");
    Fill(plan, 0, 17, 0.5f,
         [&](size_t layer, uint64_t pos, const float* k, const float* v, uint64_t n) {
           return pool.AppendF32(target, layer, pos, k, v, n);
         });
    if (!pool.Fork(target, &fork).ok()) Fail("pool", "Fork");
  }
  std::vector<uint8_t> CacheState() const {
    return Saved([&](kvring::ByteSink* sink) { return SaveState(cache, kModel, sink); });
  }
  std::vector<uint8_t> PoolState(SequenceId id) const {
    return Saved([&](kvring::ByteSink* sink) { return SaveState(pool, id, kModel, sink); });
  }
};

// The valid state every edit starts from: a cache whose rings have wrapped.
std::vector<uint8_t> ValidState() {
  const LayerPlan plan = Plan<FlashLayout>();
  KVCache<FlashLayout> cache = KVCache<FlashLayout>::Create(plan).value();
  Fill(plan, 0, 29, 1.0f,
       [&](size_t layer, uint64_t pos, const float* k, const float* v, uint64_t n) {
         return cache.AppendF32(layer, pos, k, v, n);
       });
  return Saved([&](kvring::ByteSink* sink) { return SaveState(cache, kModel, sink); });
}

template <typename Layout>
void LoadInto(const std::vector<uint8_t>& bytes) {
  Destinations<Layout> to;
  const std::vector<uint8_t> cache_before = to.CacheState();
  const std::vector<uint8_t> pool_before = to.PoolState(to.target);
  const std::vector<uint8_t> fork_before = to.PoolState(to.fork);
  kvring::MemorySource source(bytes);
  const kvring::Result cache_loaded = LoadState(&source, kModel, &to.cache);
  const kvring::Result pool_loaded = LoadState(&source, kModel, &to.pool, to.target);
  if (cache_loaded.ok() != pool_loaded.ok()) {
    Fail("cache and pool disagree", cache_loaded.Message() + " / " + pool_loaded.Message());
  }
  if (to.PoolState(to.fork) != fork_before) Fail("load", "the fork's rows changed");
  if (!cache_loaded.ok()) {
    if (cache_loaded.Message().empty()) Fail("refusal", "no message");
    if (to.CacheState() != cache_before) Fail("refused load", "the cache changed");
    if (to.PoolState(to.target) != pool_before) Fail("refused load", "the sequence changed");
    return;
  }
  // Accepted: both hold the same state, and it loads again to itself.
  const std::vector<uint8_t> cache_after = to.CacheState();
  if (to.PoolState(to.target) != cache_after) Fail("accepted load", "cache and pool differ");
  kvring::MemorySource again(cache_after);
  const kvring::Result reloaded = LoadState(&again, kModel, &to.cache);
  if (!reloaded.ok()) Fail("reload", reloaded.Message());
  if (to.CacheState() != cache_after) Fail("reload", "a second load changed the state");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::vector<uint8_t> state = ValidState();
  const std::vector<uint8_t> bytes = StateFrom(data, size, state);
  if (data[0] & 4) {
    LoadInto<TiledLayout<8>>(bytes);
  } else {
    LoadInto<FlashLayout>(bytes);
  }
  return 0;
}
