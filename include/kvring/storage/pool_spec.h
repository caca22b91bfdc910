// kvring/storage/pool_spec.h: what a KVPool may hold (PoolSpec), the block size it uses unless
// told otherwise, and its accounting at one moment (PoolUsage). Plain data.
#ifndef KVRING_STORAGE_POOL_SPEC_H_
#define KVRING_STORAGE_POOL_SPEC_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "kvring/base.h"
#include "kvring/kinds.h"
#include "kvring/plan/specs.h"

namespace kvring {

// What a pool may hold.
struct PoolSpec {
  // Bytes of K/V (and int8 scales) the pool's rings and blocks in use never pass.
  uint64_t budget_bytes = 0;
  // Live sequences at most.
  uint32_t max_sequences = 0;
  // Positions per block of a global (paged) layer: a multiple of the layout's tile. 0: the
  // layout's DefaultBlockSlots(), or the context rounded up to a tile when that is less.
  uint64_t block_slots = 0;
};

// Returns the block size a pool of `Layout` uses unless told otherwise, as measured (paged
// decode at 32768 positions against flat storage, docs/benchmarks.md): flash 160 slots (five
// 32-slot tiles: 0.93-1.01 of flat on an Intel Xeon host, where 96 measured 1.03-1.09, 0.96 on
// an AVX2 host, 0.89 on a Zen 5 host; an odd number of tiles, so that a block's K rows of
// consecutive dims spread over the cache sets: 128 and 256 are slower), tiled 256 (0.99-1.12
// of flat; a tiled tile's K is contiguous, and shorter runs of tiles cut the hardware
// prefetcher's streams: 128 measured 1.08-1.14, 64 1.14-1.23, 16 1.23-1.72).
template <typename Layout>
constexpr uint64_t DefaultBlockSlots() {
  return Layout::kBackend == Backend::kFlash
             ? 5 * Layout::kTileSlots
             : (256 + Layout::kTileSlots - 1) / Layout::kTileSlots * Layout::kTileSlots;
}

namespace detail {

// Sets *block_slots to the block size of a pool of `Layout` under `spec` for `runtime`:
// spec.block_slots, or by default DefaultBlockSlots(), the context rounded up to a tile when
// that is less. Returns the Error of a size that is not a positive multiple of the layout's
// tile, at most a tile past the context, or an empty field.
template <typename Layout>
Error ChooseBlockSlots(const RuntimeSpec& runtime, const PoolSpec& spec, uint64_t* block_slots) {
  const uint64_t context_tiles =
      (runtime.context + Layout::kTileSlots - 1) / Layout::kTileSlots * Layout::kTileSlots;
  *block_slots = spec.block_slots != 0 ? spec.block_slots
                                       : std::min(DefaultBlockSlots<Layout>(), context_tiles);
  if (*block_slots % Layout::kTileSlots != 0 ||
      *block_slots > runtime.context + Layout::kTileSlots) {
    return FieldError("block_slots", std::to_string(*block_slots),
                      "is invalid: a block holds a positive multiple of the layout's tile of " +
                          std::to_string(Layout::kTileSlots) +
                          " positions, at most a tile past the context");
  }
  return Error{};
}

// Returns the Error of a spec whose max_sequences a pool cannot use, or whose budget cannot
// hold the `smallest` sequence (its decode rings and one block), or an empty field.
inline Error CheckPoolSpec(const PoolSpec& spec, uint64_t smallest) {
  if (spec.max_sequences == 0 || spec.max_sequences == std::numeric_limits<uint32_t>::max()) {
    return FieldError("max_sequences", std::to_string(spec.max_sequences),
                      "is invalid: a pool holds from 1 to 2^32 - 2 sequences");
  }
  if (spec.budget_bytes < smallest) {
    return FieldError("budget_bytes", std::to_string(spec.budget_bytes),
                      "cannot hold one sequence: its decode rings and one block take " +
                          std::to_string(smallest) + " bytes");
  }
  return Error{};
}

}  // namespace detail

// A pool's accounting at one moment (KVPool::Usage). bytes_in_use == ring_bytes +
// blocks_in_use * block_bytes <= budget_bytes at all times.
struct PoolUsage {
  uint64_t budget_bytes = 0;
  uint64_t bytes_in_use = 0;
  uint64_t ring_bytes = 0;   // every live sequence's rings
  uint64_t state_bytes = 0;  // every live sequence's recurrent states (hybrid models)
  uint64_t block_bytes = 0;  // one block of every global owner
  uint64_t num_blocks = 0;   // blocks the budget holds with no rings at all
  uint64_t blocks_in_use = 0;
  uint64_t free_blocks = 0;    // handed out only while the budget allows
  uint64_t shared_blocks = 0;  // held by more than one sequence
  uint64_t live_sequences = 0;
};

}  // namespace kvring

#endif  // KVRING_STORAGE_POOL_SPEC_H_
