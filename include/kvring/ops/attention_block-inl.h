// kvring/ops/attention_block-inl.h: one register block of an attention item over one tile
// (which rows see it, TileRows and SeenBy; scores, online softmax, V accumulation, BlockTile) or
// over an aligned pair of tiles (BlockTwoTiles), the padding of a block to a power of two rows
// (WithRegisterBlock) and a tile's addresses (TileRefs). Used by the item runner,
// kvring/ops/attention_item-inl.h.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_BLOCK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_BLOCK_INL_H_
#undef KVRING_OPS_ATTENTION_BLOCK_INL_H_
#else
#define KVRING_OPS_ATTENTION_BLOCK_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"
#include "kvring/bf16.h"
#include "kvring/ops/target_vectors-inl.h"

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
    KVRING_UNROLL
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

// Whether `row` sees every position of [pos, pos + span).
HWY_INLINE bool SeesWhole(const Row& row, uint64_t pos, uint64_t span) {
  return row.lo <= pos && row.hi >= pos + span;
}
// Whether each of the num_real rows at `rows` does.
HWY_INLINE bool AllSeeWhole(const Row* rows, size_t num_real, uint64_t pos, uint64_t span) {
  for (size_t r = 0; r < num_real; ++r) {
    if (!SeesWhole(rows[r], pos, span)) return false;
  }
  return true;
}

// The offsets [first, last] of the tile at `tile_pos` that some of the `num` rows see.
template <uint64_t kTile>
HWY_INLINE std::pair<int32_t, int32_t> SeenBy(const Row* rows, size_t num, uint64_t tile_pos) {
  int32_t first = static_cast<int32_t>(kTile), last = -1;
  for (size_t r = 0; r < num; ++r) {
    const uint64_t lo = rows[r].lo > tile_pos ? rows[r].lo : tile_pos;
    const uint64_t hi = rows[r].hi < tile_pos + kTile ? rows[r].hi : tile_pos + kTile;
    if (lo >= hi) continue;
    first = std::min(first, static_cast<int32_t>(lo - tile_pos));
    last = std::max(last, static_cast<int32_t>(hi - 1 - tile_pos));
  }
  return {first, last};
}

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
  KVRING_UNROLL
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

// BlockTwoTiles' merged step: kRows rows (num_real real) that see both tiles whole, their
// raw scores at scores[t] + (row0 + r) * kTile: SoftmaxRow over both tiles (int8: each tile's
// scores times its K scales first), one V pass over both.
template <size_t kRows, uint64_t kTile, typename T>
HWY_INLINE void BlockPairOfTiles(bool round_p, Row* rows, size_t num_real, const TileRefs<T>* tiles,
                                 size_t v_stride, const PrefetchShape& ps, size_t v_head_dim,
                                 float soft_cap, const int32_t* lane_offsets,
                                 const int32_t* index_of_offset, float* const* scores,
                                 size_t row0) {
  float* acc[kRows];
  float correction[kRows];
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    acc[r] = rows[r].acc;
    correction[r] = 0.0f;
  }
  for (size_t r = 0; r < num_real; ++r) {
    float* const parts[2] = {scores[0] + (row0 + r) * kTile, scores[1] + (row0 + r) * kTile};
    for (size_t t = 0; t < 2; ++t) {
      ElementKernel<T>::template ScaleScores<kTile>(parts[t], tiles[t].k_scales);
    }
    correction[r] = SoftmaxRow<kTile, 2>(parts, lane_offsets, 0, static_cast<int32_t>(kTile) - 1,
                                         soft_cap, rows[r]);
    if (round_p) {
      RoundToBF16InPlace(parts[0], kTile);
      RoundToBF16InPlace(parts[1], kTile);
    }
  }
  const VPart<T> v[2] = {
      {tiles[0].v, tiles[0].v_scales, tiles[0].k_next, scores[0] + row0 * kTile},
      {tiles[1].v, tiles[1].v_scales, tiles[1].k_next, scores[1] + row0 * kTile}};
  AccumulateParts<kRows, false, kTile, 2>(v, v_stride, ps, v_head_dim, index_of_offset, acc,
                                          correction, 0, 0);
}

// BlockTwoTiles' rows when some of them do not see both tiles whole (a range's first and last
// pair, a prefill's rows at their windows' edges): each row alone, one softmax step over both
// tiles if it sees them whole (BlockPairOfTiles), else tile after tile (BlockTile, its scores
// given). Out of line, one copy per tile height and element type for every register block
// width: such pairs are few, and inlined copies per width made the pairs' code four times the
// one-tile path's.
template <uint64_t kTile, typename T>
HWY_NOINLINE void RowsOverTwoTiles(bool round_p, Row* rows, size_t num_real,
                                   const TileRefs<T>* tiles, size_t dim_stride,
                                   const PrefetchShape& ps, size_t v_stride, size_t head_dim,
                                   size_t v_head_dim, float soft_cap, const int32_t* lane_offsets,
                                   const int32_t* index_of_offset, float* const* scores) {
  for (size_t r = 0; r < num_real; ++r) {
    if (SeesWhole(rows[r], tiles[0].pos, 2 * kTile)) {
      BlockPairOfTiles<1, kTile, T>(round_p, rows + r, 1, tiles, v_stride, ps, v_head_dim, soft_cap,
                                    lane_offsets, index_of_offset, scores, r);
      continue;
    }
    for (size_t t = 0; t < 2; ++t) {
      BlockTile<1, kTile, false>(round_p, rows + r, 1, tiles[t].pos, tiles[t].k, dim_stride,
                                 tiles[t].k_next, ps, tiles[t].v, v_stride, tiles[t].k_scales,
                                 tiles[t].v_scales, head_dim, v_head_dim, soft_cap, lane_offsets,
                                 index_of_offset, scores[t] + r * kTile, true);
    }
  }
}

// One register block over an aligned pair of consecutive tiles (the first at an even tile),
// both scored into scores[0] and scores[1] (row stride kTile: TileScoresPaired). A row that sees
// both tiles whole takes them as one softmax step and one V pass over their positions in
// chronological order (BlockPairOfTiles: the steps of a tile twice as tall, one max, one
// correction and one reload of the accumulators per pair); every other row takes tile after tile
// (RowsOverTwoTiles). Which rows merge depends on each row's own range and the tiles' positions
// only, never on the storage, the call or the block (a row's bits as alone). `round_p` and T
// (BF16, or int8 in the exact mode): BlockTile's.
template <size_t kRows, uint64_t kTile, typename T>
HWY_INLINE void BlockTwoTiles(bool round_p, Row* rows, size_t num_real, const TileRefs<T>* tiles,
                              size_t dim_stride, const PrefetchShape& ps, size_t v_stride,
                              size_t head_dim, size_t v_head_dim, float soft_cap,
                              const int32_t* lane_offsets, const int32_t* index_of_offset,
                              float* const* scores) {
  KVRING_DASSERT(tiles[0].pos % (2 * kTile) == 0 && tiles[1].pos == tiles[0].pos + kTile);
  if (!AllSeeWhole(rows, num_real, tiles[0].pos, 2 * kTile)) {
    return RowsOverTwoTiles<kTile, T>(round_p, rows, num_real, tiles, dim_stride, ps, v_stride,
                                      head_dim, v_head_dim, soft_cap, lane_offsets, index_of_offset,
                                      scores);
  }
  BlockPairOfTiles<kRows, kTile, T>(round_p, rows, num_real, tiles, v_stride, ps, v_head_dim,
                                    soft_cap, lane_offsets, index_of_offset, scores, 0);
}

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
