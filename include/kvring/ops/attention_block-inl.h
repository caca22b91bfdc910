// kvring/ops/attention_block-inl.h: one register block of an attention item over one tile
// (which rows see it, TileRows; scores, online softmax, V accumulation, BlockTile), the
// padding of a block to a power of two rows (WithRegisterBlock) and a tile's addresses
// (TileRefs). Used by the item runner, kvring/ops/attention_item-inl.h.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_BLOCK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_BLOCK_INL_H_
#undef KVRING_OPS_ATTENTION_BLOCK_INL_H_
#else
#define KVRING_OPS_ATTENTION_BLOCK_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "kvring/bf16.h"

// After highway.h: the parts of the kernels a block puts together.
#include "kvring/ops/attention_products-inl.h"
#include "kvring/ops/attention_scores-inl.h"
#include "kvring/ops/attention_softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// Which rows of a register block see the tile at `tile_pos`, and which of its offsets each
// sees: [lo_off[r], hi_off[r]] (rows past num_real, the block's padding, see none).
template <size_t kRows, uint64_t kTile>
struct TileRows {
  int32_t lo_off[kRows], hi_off[kRows];
  bool active[kRows];
  bool all_full = true;  // every real row sees the whole tile
  bool any_active = false;

  HWY_INLINE TileRows(const Row* rows, size_t num_real, uint64_t tile_pos) {
    for (size_t r = 0; r < kRows; ++r) {
      const uint64_t lo = rows[r].lo > tile_pos ? rows[r].lo : tile_pos;
      const uint64_t hi = rows[r].hi < tile_pos + kTile ? rows[r].hi : tile_pos + kTile;
      active[r] = r < num_real && lo < hi;
      lo_off[r] = active[r] ? static_cast<int32_t>(lo - tile_pos) : 0;
      hi_off[r] = active[r] ? static_cast<int32_t>(hi - 1 - tile_pos) : -1;
      if (r < num_real) {
        any_active |= active[r];
        all_full &= active[r] && lo_off[r] == 0 && hi_off[r] == static_cast<int32_t>(kTile) - 1;
      }
    }
  }
};

// The V pass of one row over a tile it sees only in part, offsets [lo_off, hi_off]
// (AccumulateTile<1, true>): out of line, one copy per tile height and element type for every
// register block width that calls it (such tiles are the first and last of a row's range).
template <uint64_t kTile, typename T>
HWY_NOINLINE void AccumulatePartOfTile(const T* HWY_RESTRICT v_tile,
                                       const float* HWY_RESTRICT v_scales, size_t v_stride,
                                       const T* k_next, const PrefetchShape& ps, size_t v_head_dim,
                                       const float* HWY_RESTRICT p,
                                       const int32_t* HWY_RESTRICT index_of_offset, float* acc,
                                       float correction, int32_t lo_off, int32_t hi_off) {
  AccumulateTile<1, true, kTile>(v_tile, v_scales, v_stride, k_next, ps, v_head_dim, p,
                                 index_of_offset, &acc, &correction, lo_off, hi_off);
}

// Scores, softmax and V accumulation of one register block of kRows rows over one tile.
// `rows` has kRows entries; entries past num_real are padding (they repeat a real row's
// query and write to a scratch accumulator nobody reads). `scored`: `scores` already holds
// the tile's raw scores (TwoTileScoresPaired). T: the stored element, BF16 or int8; for int8,
// k_scale_lanes holds the tile's K scales in the scores' lane order and v_scales its V scales
// by offset (both unused for BF16). kNative: the item runs vdpbf16ps (ProductPath::kBF16Native,
// the rows' queries in pairs: WriteQueryRow); else round_p: the BF16-product mode on the
// widening path (kBF16Widened). The exact mode is neither, and has no branch of the others.
template <size_t kRows, uint64_t kTile, bool kNative, typename T>
HWY_INLINE void BlockTile(bool round_p, Row* rows, size_t num_real, uint64_t tile_pos,
                          const T* HWY_RESTRICT k_tile, size_t dim_stride, const T* k_next,
                          const PrefetchShape& ps, const T* HWY_RESTRICT v_tile, size_t v_stride,
                          const float* HWY_RESTRICT k_scale_lanes,
                          const float* HWY_RESTRICT v_scales, size_t head_dim, size_t v_head_dim,
                          float soft_cap, const int32_t* lane_offsets,
                          const int32_t* index_of_offset, float* HWY_RESTRICT scores,
                          bool scored = false) {
  const TileRows<kRows, kTile> seen(rows, num_real, tile_pos);
  if (!seen.any_active) return;
  const float* q[kRows];
  const float* p[kRows];
  float* acc[kRows];
  float correction[kRows];
  for (size_t r = 0; r < kRows; ++r) {
    q[r] = rows[r].q;
    p[r] = scores + r * kTile;
    acc[r] = rows[r].acc;
    correction[r] = 0.0f;
  }
  if (!scored) {
#if HWY_TARGET == HWY_AVX3_DL
    if constexpr (kNative) {
      TileScoresNative<kRows, kTile>(q, k_tile, dim_stride, head_dim, v_tile, ps, scores);
    } else {
      TileScores<kRows, kTile>(q, k_tile, dim_stride, head_dim, v_tile, ps, scores);
    }
#else
    static_assert(!kNative, "vdpbf16ps runs in the AVX3_DL target only");
    TileScores<kRows, kTile>(q, k_tile, dim_stride, head_dim, v_tile, ps, scores);
#endif
  }
  for (size_t r = 0; r < num_real; ++r) {
    if (!seen.active[r]) continue;
    ElementKernel<T>::template ScaleScores<kTile>(scores + r * kTile, k_scale_lanes);
    correction[r] = SoftmaxRow<kTile>(scores + r * kTile, lane_offsets, seen.lo_off[r],
                                      seen.hi_off[r], soft_cap, rows[r]);
    // The BF16-product mode's V pass weighs positions by BF16 probabilities (the sum above
    // took the f32 ones).
#if HWY_TARGET == HWY_AVX3_DL
    if constexpr (kNative) {
      PackProbabilityPairs<kTile>(scores + r * kTile);
    } else if (round_p) {
      RoundToBF16InPlace(scores + r * kTile, kTile);
    }
#else
    if (round_p) RoundToBF16InPlace(scores + r * kTile, kTile);
#endif
  }
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (kNative) {
    if (seen.all_full) {
      AccumulateTileNative<kRows, false, kTile>(v_tile, v_stride, k_next, ps, v_head_dim, p, acc,
                                                correction, 0, 0);
      return;
    }
    for (size_t r = 0; r < num_real; ++r) {
      if (!seen.active[r]) continue;
      AccumulateTileNative<1, true, kTile>(v_tile, v_stride, k_next, ps, v_head_dim, &p[r], &acc[r],
                                           &correction[r], seen.lo_off[r], seen.hi_off[r]);
    }
    return;
  }
#endif
  if (seen.all_full) {
    AccumulateTile<kRows, false, kTile>(v_tile, v_scales, v_stride, k_next, ps, v_head_dim, scores,
                                        index_of_offset, acc, correction, 0, 0);
    return;
  }
  // A partly visible tile: each row reads only the V rows it sees, so that an invisible slot
  // never enters its accumulator (the order over the visible ones is the full path's).
  for (size_t r = 0; r < num_real; ++r) {
    if (!seen.active[r]) continue;
    AccumulatePartOfTile<kTile>(v_tile, v_scales, v_stride, k_next, ps, v_head_dim, p[r],
                                index_of_offset, acc[r], correction[r], seen.lo_off[r],
                                seen.hi_off[r]);
  }
}

// Calls fn(std::integral_constant<size_t, kRows>(), block) with the num_real (1 to kMaxRows,
// at most 8) rows at `rows` as a register block of kRows rows, num_real rounded up to a power
// of two: `block` is `rows` itself, or `padded` (8 entries) whose extra rows repeat the last
// real query and accumulate into `dummy_acc`; the real rows' states are copied back
// afterwards. Blocks wider than kMaxRows (the target's TileShape::kMaxRegRows) are never
// instantiated: their code would be dead, and the 4- and 8-row blocks are the costliest to
// compile.
template <size_t kMaxRows, class Fn>
HWY_INLINE void WithRegisterBlock(Row* rows, size_t num_real, Row* padded, float* dummy_acc,
                                  const Fn& fn) {
  static_assert(kMaxRows == 1 || kMaxRows == 2 || kMaxRows == 4 || kMaxRows == 8,
                "register blocks are a power of two rows, at most 8");
  KVRING_DASSERT(num_real >= 1 && num_real <= kMaxRows);
  size_t k_rows = 1;
  while (k_rows < num_real) k_rows *= 2;
  Row* block = rows;
  if (k_rows != num_real) {
    for (size_t r = 0; r < k_rows; ++r) {
      padded[r] = r < num_real ? rows[r] : rows[num_real - 1];
      if (r >= num_real) padded[r].acc = dummy_acc;
    }
    block = padded;
  }
  if constexpr (kMaxRows >= 8) {
    if (k_rows == 8) fn(std::integral_constant<size_t, 8>(), block);
  }
  if constexpr (kMaxRows >= 4) {
    if (k_rows == 4) fn(std::integral_constant<size_t, 4>(), block);
  }
  if constexpr (kMaxRows >= 2) {
    if (k_rows == 2) fn(std::integral_constant<size_t, 2>(), block);
  }
  if (k_rows == 1) fn(std::integral_constant<size_t, 1>(), block);
  if (block == padded) {
    for (size_t r = 0; r < num_real; ++r) rows[r] = padded[r];
  }
}

// The K and V of one tile of an item, its first position, the K to prefetch while its V is
// accumulated (PrefetchShape), and for int8 its V scales by offset.
template <typename T>
struct TileRefs {
  uint64_t pos = 0;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* k_next = nullptr;
  const T* v_ahead = nullptr;  // the integer-product mode: the V its K pass prefetches
  const float* v_scales = nullptr;
  const float* k_scales = nullptr;  // int8: the tile's K scales in the scores' lane order
};

// Returns a 64-byte aligned pointer at or after `p`.
HWY_INLINE float* Align64(float* p) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<float*>((bits + 63) & ~uintptr_t{63});
}

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_BLOCK_INL_H_
