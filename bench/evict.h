// bench/evict.h: clflush of the K/V lines a call reads, so that a benchmark's decode calls
// meet their K/V in memory, as an engine's do (every other layer passes through the caches
// between two calls of one layer). No vector code.
#ifndef KVRING_BENCH_EVICT_H_
#define KVRING_BENCH_EVICT_H_

#include <algorithm>
#include <cstdint>

#include "hwy/cache_control.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"

namespace kvring_bench {

// Evicts the cache lines of [p, p + bytes) from every cache level (clflush).
inline void Evict(const void* p, uint64_t bytes) {
  const char* bytes_p = static_cast<const char*>(p);
  for (uint64_t i = 0; i < bytes; i += 64) hwy::FlushCacheline(bytes_p + i);
  if (bytes != 0) hwy::FlushCacheline(bytes_p + bytes - 1);
}

// Evicts the K and V lines of positions [first, end) of every kv_head of `kv`: the bytes a
// call over those positions reads (elements, and an int8 view's scales), wherever the layout,
// a ring's wrap or a paged layer's blocks put them.
template <typename Layout>
void EvictPositions(const kvring::KVView<Layout>& kv, uint64_t first, uint64_t end) {
  const bool int8 = kvring::IsInt8(kv.format);
  const char* k =
      int8 ? reinterpret_cast<const char*>(kv.k_int8) : reinterpret_cast<const char*>(kv.k);
  const char* v =
      int8 ? reinterpret_cast<const char*>(kv.v_int8) : reinterpret_cast<const char*>(kv.v);
  const uint64_t element_bytes = int8 ? 1 : sizeof(kvring::BF16);
  const auto k_mapping = kv.layout.K();
  const auto v_mapping = kv.layout.V();
  const kvring::KVShape& shape = kv.layout.Shape();
  const uint64_t num_slots = kv.NumSlots();
  while (first < end) {
    // A run of slots that neither wraps nor leaves its block.
    const uint64_t slot0 = first % num_slots;
    const uint64_t run = std::min(end - first, num_slots - slot0);
    const uint64_t block = kv.BlockOf(first);
    const char* k_block = k + block * kv.KBlockStride() * element_bytes;
    const char* v_block = v != nullptr ? v + block * kv.VBlockStride() * element_bytes : nullptr;
    const uint64_t scales = block * kv.ScaleBlockStride();
    for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
      for (uint32_t d = 0; d < shape.head_dim; ++d) {
        for (uint64_t s = slot0; s < slot0 + run;) {
          const uint64_t n = std::min(k_mapping.ContiguousSlotsFrom(s), slot0 + run - s);
          Evict(k_block + k_mapping(s, h, d) * element_bytes,
                n * k_mapping.SlotStride() * element_bytes);
          s += n;
        }
      }
      if (v_block != nullptr) {  // (an MLA view has no V)
        Evict(v_block + v_mapping(slot0, h, 0) * element_bytes,
              run * v_mapping.SlotStride() * element_bytes);
      }
      if (int8) {
        Evict(kv.k_scales + scales + kv.ScaleOffset(slot0, h), run * sizeof(float));
        if (kv.v_scales != nullptr) {
          Evict(kv.v_scales + scales + kv.ScaleOffset(slot0, h), run * sizeof(float));
        }
      }
    }
    first += run;
  }
}

}  // namespace kvring_bench

#endif  // KVRING_BENCH_EVICT_H_
