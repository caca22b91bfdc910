// kvring/ops/attention_item-inl.h: the item runner of kvring's attention kernels: one work
// item (the rows of a query block that share a kv_head, over one KV split) walks the
// position-aligned tiles of its view in chronological order, register block by register
// block (scores, softmax, V), and writes its output rows or partial states; the merges of a
// split call. Called by kvring/ops/attention-inl.h's entry points; RunAttentionItem and
// MergeAttention are public for engines that schedule items themselves.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_ITEM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_ITEM_INL_H_
#undef KVRING_OPS_ATTENTION_ITEM_INL_H_
#else
#define KVRING_OPS_ATTENTION_ITEM_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/bf16.h"
#include "kvring/detail/transpose.h"
#include "kvring/kv_view.h"
#include "kvring/views.h"

// After highway.h: the parts of the kernels this file puts together.
#include "kvring/ops/append-inl.h"
#include "kvring/ops/attention_products-inl.h"
#include "kvring/ops/attention_scores-inl.h"
#include "kvring/ops/attention_softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

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
  const float* q[kRows];
  const float* p[kRows];
  float* acc[kRows];
  float correction[kRows];
  int32_t lo_off[kRows], hi_off[kRows];
  bool active[kRows];
  bool all_full = true, any_active = false;
  for (size_t r = 0; r < kRows; ++r) {
    q[r] = rows[r].q;
    p[r] = scores + r * kTile;
    acc[r] = rows[r].acc;
    correction[r] = 0.0f;
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
  if (!any_active) return;
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
  if constexpr (std::is_same<T, int8_t>::value) {
    // The score of a position is its K scale times q . q_int8 (exact folding of the format).
    for (size_t r = 0; r < num_real; ++r) {
      if (!active[r]) continue;
      float* HWY_RESTRICT s = scores + r * kTile;
      for (size_t i = 0; i < kTile; ++i) s[i] *= k_scale_lanes[i];
    }
  } else {
    (void)k_scale_lanes;
  }
  for (size_t r = 0; r < num_real; ++r) {
    if (!active[r]) continue;
    correction[r] = SoftmaxRow<kTile>(scores + r * kTile, lane_offsets, lo_off[r], hi_off[r],
                                      soft_cap, rows[r]);
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
    if (all_full) {
      AccumulateTileNative<kRows, false, kTile>(v_tile, v_stride, k_next, ps, v_head_dim, p, acc,
                                                correction, 0, 0);
      return;
    }
    for (size_t r = 0; r < num_real; ++r) {
      if (!active[r]) continue;
      AccumulateTileNative<1, true, kTile>(v_tile, v_stride, k_next, ps, v_head_dim, &p[r], &acc[r],
                                           &correction[r], lo_off[r], hi_off[r]);
    }
    return;
  }
#endif
  if (all_full) {
    AccumulateTile<kRows, false, kTile>(v_tile, v_scales, v_stride, k_next, ps, v_head_dim, p,
                                        index_of_offset, acc, correction, 0, 0);
    return;
  }
  // A partly visible tile: each row reads only the V rows it sees, so that an invisible slot
  // never enters its accumulator (the order over the visible ones is the full path's).
  for (size_t r = 0; r < num_real; ++r) {
    if (!active[r]) continue;
    AccumulateTile<1, true, kTile>(v_tile, v_scales, v_stride, k_next, ps, v_head_dim, &p[r],
                                   index_of_offset, &acc[r], &correction[r], lo_off[r], hi_off[r]);
  }
}

// Calls fn(std::integral_constant<size_t, kRows>(), block) with the num_real (1 to 8) rows
// at `rows` as a register block of kRows rows, num_real rounded up to a power of two: `block`
// is `rows` itself, or `padded` (8 entries) whose extra rows repeat the last real query and
// accumulate into `dummy_acc`; the real rows' states are copied back afterwards.
template <class Fn>
HWY_INLINE void WithRegisterBlock(Row* rows, size_t num_real, Row* padded, float* dummy_acc,
                                  const Fn& fn) {
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
  switch (k_rows) {
    case 1:
      fn(std::integral_constant<size_t, 1>(), block);
      break;
    case 2:
      fn(std::integral_constant<size_t, 2>(), block);
      break;
    case 4:
      fn(std::integral_constant<size_t, 4>(), block);
      break;
    default:
      fn(std::integral_constant<size_t, 8>(), block);
      break;
  }
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
  const float* v_scales = nullptr;
};

// The values of one tile of a latent view (MLA: no V stream, AttentionOptions::latent_v_dims):
// dims [0, v_dims) of the tile's K, which both layouts store [dim][slot] (dims dim_stride
// apart), transposed into dst[slot * v_dims + dim], the [slot][dim] rows AccumulateTile reads.
// Exact (a copy), every slot of the tile: the V pass still reads only the visible rows.
template <uint64_t kTile>
HWY_INLINE void LatentValues(const BF16* HWY_RESTRICT k_tile, size_t dim_stride, size_t v_dims,
                             BF16* HWY_RESTRICT dst) {
  static_assert(kTile % 8 == 0, "tiles are whole 8 x 8 blocks");
  const uint16_t* src = reinterpret_cast<const uint16_t*>(k_tile);
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  for (size_t d0 = 0; d0 < v_dims; d0 += 8) {
    for (size_t s0 = 0; s0 < kTile; s0 += 8) {
      detail::Transpose8x8(src + d0 * dim_stride + s0, dim_stride, out + s0 * v_dims + d0, v_dims);
    }
  }
}

// LatentValues of an int8 latent view: the tile's int8 K dims [0, v_dims) as [slot][dim]
// rows (a copy; the values' scales are the K scales).
template <uint64_t kTile>
HWY_INLINE void LatentValues(const int8_t* HWY_RESTRICT k_tile, size_t dim_stride, size_t v_dims,
                             int8_t* HWY_RESTRICT dst) {
  for (size_t dim = 0; dim < v_dims; ++dim) {
    const int8_t* HWY_RESTRICT row = k_tile + dim * dim_stride;
    for (size_t slot = 0; slot < kTile; ++slot) dst[slot * v_dims + dim] = row[slot];
  }
}

// Returns a 64-byte aligned pointer at or after `p`.
HWY_INLINE float* Align64(float* p) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<float*>((bits + 63) & ~uintptr_t{63});
}

// The body of RunAttentionItem for stored elements of type T (BF16, or int8 with scales),
// reading K and V from k_base and v_base (v_base null for a latent view). kNative: the
// BF16-product mode on vdpbf16ps (PathOf gave ProductPath::kBF16Native).
template <bool kNative, class Layout, typename T>
HWY_INLINE void RunItem(const KVView<Layout>& kv, const AttentionBatch& batch,
                        const AttentionOptions& options, const AttentionWork& work,
                        uint64_t item_index, float* HWY_RESTRICT scratch,
                        float* HWY_RESTRICT partial, const T* k_base, const T* v_base) {
  constexpr uint64_t kTile = Layout::kTileSlots;
  using Shape = TileShape<kTile>;
  const AttentionItem item = work.Item(item_index);
  const size_t head_dim = work.HeadDim();
  const size_t v_head_dim = work.VHeadDim();
  const size_t group = work.Group();
  const size_t num_rows = size_t{item.num_queries} * group;
  const float scale = AttentionScale(options, work.HeadDim());
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const ProductPath path = kNative ? ProductPath::kBF16Native
                           : options.products == Products::kBF16 && std::is_same<T, BF16>::value
                               ? ProductPath::kBF16Widened
                               : ProductPath::kF32;
  const bool round_p = path == ProductPath::kBF16Widened;

  // Scratch: lane tables, scores of one register block, a dummy accumulator, then per row
  // its scaled query and its accumulators.
  const size_t q_stride = (head_dim + 15) / 16 * 16;
  const size_t acc_stride = (v_head_dim + 15) / 16 * 16;
  float* cursor = Align64(scratch);
  int32_t* lane_offsets = reinterpret_cast<int32_t*>(cursor);
  int32_t* index_of_offset = lane_offsets + kTile;
  cursor += (2 * kTile + 15) / 16 * 16;
  float* scores = cursor;  // two tiles' (TwoTileScoresPaired)
  cursor += 2 * Shape::kMaxRegRows * kTile;
  float* dummy_acc = cursor;
  cursor += acc_stride;
  float* q_rows = cursor;
  cursor += num_rows * q_stride;
  float* acc_rows = cursor;
  cursor += num_rows * acc_stride;
  // Int8: a tile's K scales in the scores' lane order.
  float* k_scale_lanes = cursor;
  cursor += (kTile + 15) / 16 * 16;
  // A latent view (no V stream): two tiles' values transposed from K (LatentValues), the
  // second for the tile a pair holds.
  T* latent_values = nullptr;
  if (work.Latent()) {
    latent_values = reinterpret_cast<T*>(cursor);
    cursor += kTile * acc_stride;  // 2 tiles x kTile slots x acc_stride BF16 (or int8)
  }
  KVRING_DASSERT(static_cast<uint64_t>(cursor - scratch) <= work.ScratchFloats());

  // The position offset of each score lane: BF16 pairs interleave even and odd positions
  // (LoadPairs); int8 lanes are in their natural order (LoadInt8Halves).
  for (size_t v = 0; v < Shape::kVectors; ++v) {
    for (size_t j = 0; j < Shape::kLanes; ++j) {
      const size_t offset = std::is_same<T, int8_t>::value
                                ? v * Shape::kLanes + j
                                : (v / 2) * 2 * Shape::kLanes + 2 * j + v % 2;
      lane_offsets[v * Shape::kLanes + j] = static_cast<int32_t>(offset);
      index_of_offset[offset] = static_cast<int32_t>(v * Shape::kLanes + j);
    }
  }

  Row rows[AttentionWork::kTargetRows > 64 ? AttentionWork::kTargetRows : 64];
  Row padded[8];
  // Rows: query-major, then the q heads of the kv_head's group.
  const size_t max_rows_here = sizeof(rows) / sizeof(rows[0]);
  for (size_t row0 = 0; row0 < num_rows; row0 += max_rows_here) {
    const size_t rows_here = num_rows - row0 < max_rows_here ? num_rows - row0 : max_rows_here;
    uint64_t pos_begin = item.pos_end, pos_end = item.pos_begin;
    for (size_t r = 0; r < rows_here; ++r) {
      const size_t row = row0 + r;
      const size_t query = item.first_query + row / group;
      const size_t q_head = size_t{item.kv_head} * group + row % group;
      const uint64_t q_pos = batch.first_q_pos + query;
      Row& state = rows[r];
      float* q = q_rows + row * q_stride;
      const size_t src = static_cast<size_t>(query * work.QRowStride()) + q_head * head_dim;
      if (batch.queries_f32 != nullptr) {
        const float* in = batch.queries_f32 + src;
        WriteQueryRow(
            path, [in](size_t dim) { return in[dim]; }, scale, head_dim, q);
      } else {
        const BF16* in = batch.queries_bf16 + src;
        WriteQueryRow(
            path, [in](size_t dim) { return BF16ToF32(in[dim]); }, scale, head_dim, q);
      }
      state.q = q;
      state.acc = acc_rows + row * acc_stride;
      std::memset(state.acc, 0, acc_stride * sizeof(float));
      const uint64_t first = kv.visibility.FirstVisible(q_pos);
      state.lo = first > item.pos_begin ? first : item.pos_begin;
      state.hi = q_pos + 1 < item.pos_end ? q_pos + 1 : item.pos_end;
      if (state.hi < state.lo) state.hi = state.lo;
      state.m = neg_inf;
      state.l = 0.0f;
      if (state.lo < state.hi) {
        if (state.lo < pos_begin) pos_begin = state.lo;
        if (state.hi > pos_end) pos_end = state.hi;
      }
    }
    if (pos_begin < pos_end) {
      const auto k_mapping = kv.layout.K();
      const auto v_mapping = kv.layout.V();
      const size_t dim_stride = static_cast<size_t>(k_mapping.DimStride());
      const size_t v_stride =
          work.Latent() ? v_head_dim : static_cast<size_t>(v_mapping.SlotStride());
      const PrefetchShape prefetch_shape(kTile, dim_stride, head_dim, v_head_dim, sizeof(T));
      // Tile addresses come from views.h (TileAddresser), for ring, flat and paged storage.
      const TileAddresser<Layout> tile_address(kv, item.kv_head);
      const auto k_of = [&](uint64_t tile_pos) { return k_base + tile_address(tile_pos).k; };
      // The K of the tile `tiles` tiles after the one at `tile_pos`, to prefetch (a ring's
      // slots wrap; past a paged layer's end, its own).
      const auto k_after = [&](uint64_t tile_pos, uint64_t tiles) {
        const uint64_t next = tile_pos + tiles * kTile;
        return k_of(kv.Paged() && next >= kv.end_pos ? tile_pos : next);
      };
      uint64_t latent_tiles = 0;  // tiles transposed so far: alternates the two buffers
      const auto tile_at = [&](uint64_t tile_pos) {
        TileRefs<T> tile;
        tile.pos = tile_pos;
        const TileOffsets at = tile_address(tile_pos);
        tile.k = k_base + at.k;
        if (latent_values != nullptr) {
          T* values = latent_values + (latent_tiles++ % 2) * kTile * v_head_dim;
          LatentValues<kTile>(tile.k, dim_stride, v_head_dim, values);
          tile.v = values;
        } else {
          tile.v = v_base + at.v;
        }
        if constexpr (std::is_same<T, int8_t>::value) {
          // A tile's slots are consecutive, and so are their scales ([kv_head][slot]).
          const float* k_scales = kv.k_scales + at.scales;
          for (size_t i = 0; i < kTile; ++i) k_scale_lanes[i] = k_scales[lane_offsets[i]];
          tile.v_scales = work.Latent() ? k_scales : kv.v_scales + at.scales;
        }
        tile.k_next = k_after(tile_pos, 1);
        return tile;
      };
      // Runs fn(k_rows, block, num_real) for each register block of the rows.
      const auto for_each_block = [&](const auto& fn) {
        for (size_t r0 = 0; r0 < rows_here; r0 += Shape::kMaxRegRows) {
          const size_t num_real =
              rows_here - r0 < Shape::kMaxRegRows ? rows_here - r0 : Shape::kMaxRegRows;
          WithRegisterBlock(rows + r0, num_real, padded, dummy_acc,
                            [&](auto k_rows, Row* block) { fn(k_rows, block, num_real); });
        }
      };
      const auto one_tile = [&](const TileRefs<T>& tile, float* tile_scores, bool scored) {
        return [&, tile_scores, scored](auto k_rows, Row* block, size_t num_real) {
          BlockTile<decltype(k_rows)::value, kTile, kNative>(
              round_p, block, num_real, tile.pos, tile.k, dim_stride, tile.k_next, prefetch_shape,
              tile.v, v_stride, k_scale_lanes, tile.v_scales, head_dim, v_head_dim,
              options.soft_cap, lane_offsets, index_of_offset, tile_scores, scored);
        };
      };
      // Tiles whose scores pair dims (TileScoresPaired) go two at a time, the second
      // buffered here; each row still takes tile after tile, as alone.
      // (Int8 tiles go one at a time: the paired scoring widens BF16 pairs only.)
      const bool two_tiles =
          kPairDims<kTile> && std::is_same<T, BF16>::value && dim_stride == kTile && !kNative;
      TileRefs<T> held;
      bool holding = false;
      ForEachTile<kTile>(pos_begin, pos_end, [&](uint64_t tile_pos) {
        TileRefs<T> tile = tile_at(tile_pos);
        if (!two_tiles) {
          for_each_block(one_tile(tile, scores, false));
          return;
        }
        if (!holding) {
          held = tile;
          holding = true;
          return;
        }
        holding = false;
        // The pair prefetches the next pair: each tile's V pass the K of the tile two after it.
        held.k_next = k_after(tile_pos, 1);
        tile.k_next = k_after(tile_pos, 2);
#if HWY_TARGET != HWY_SCALAR
        if constexpr (kPairDims<kTile> && std::is_same<T, BF16>::value) {
          float* second = scores + Shape::kMaxRegRows * kTile;
          for_each_block([&](auto k_rows, Row* block, size_t num_real) {
            constexpr size_t kRows = decltype(k_rows)::value;
            const float* q[kRows];
            for (size_t r = 0; r < kRows; ++r) q[r] = block[r].q;
            const BF16* k_tiles[2] = {held.k, tile.k};
            const BF16* v_now[2] = {held.v, tile.v};
            float* out[2] = {scores, second};
            TwoTileScoresPaired<kRows, kTile>(q, k_tiles, head_dim, v_now, prefetch_shape, out);
            one_tile(held, scores, true)(k_rows, block, num_real);
            one_tile(tile, second, true)(k_rows, block, num_real);
          });
        }
#endif
      });
      if (holding) for_each_block(one_tile(held, scores, false));
    }
    for (size_t r = 0; r < rows_here; ++r) {
      const size_t row = row0 + r;
      const Row& state = rows[r];
      if (work.Splits()) {
        float* dst = partial + (item_index * work.MaxItemRows() + row) * work.PartialRowFloats();
        dst[0] = state.m;
        dst[1] = state.l;
        std::memcpy(dst + 2, state.acc, v_head_dim * sizeof(float));
        continue;
      }
      const size_t query = item.first_query + row / group;
      const size_t q_head = size_t{item.kv_head} * group + row % group;
      const size_t dst = static_cast<size_t>(query * work.OutRowStride()) + q_head * v_head_dim;
      FinalizeRow(state.m, state.l, state.acc,
                  options.sinks != nullptr ? options.sinks + q_head : nullptr, v_head_dim,
                  dummy_acc, batch.out_f32 != nullptr ? batch.out_f32 + dst : nullptr,
                  batch.out_bf16 != nullptr ? batch.out_bf16 + dst : nullptr, AccOrderOf<T>());
    }
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// RunItem of the BF16-product mode on vdpbf16ps, out of line, so that the exact mode's item
// is inlined alone into RunAttentionItem as before.
template <class Layout>
HWY_NOINLINE void RunNativeItem(const KVView<Layout>& kv, const AttentionBatch& batch,
                                const AttentionOptions& options, const AttentionWork& work,
                                uint64_t item_index, float* HWY_RESTRICT scratch,
                                float* HWY_RESTRICT partial) {
  RunItem<true>(kv, batch, options, work, item_index, scratch, partial, kv.k, kv.v);
}
#endif

}  // namespace attention_internal

// Runs item `item_index` of `work` (AttentionWork::Plan of the same kv, batch and options):
// the rows of one query block that share one kv_head, over one KV split. Writes the block's
// output rows, or, when work.Splits(), the item's partial states into `partial`
// (work.PartialFloats() floats), for MergeAttention. `scratch`: work.ScratchFloats() floats
// owned by the calling thread. Does not allocate; reads each visible K/V tile of its kv_head
// once from memory for all the block's rows.
template <class Layout>
HWY_INLINE void RunAttentionItem(const KVView<Layout>& kv, const AttentionBatch& batch,
                                 const AttentionOptions& options, const AttentionWork& work,
                                 uint64_t item_index, float* HWY_RESTRICT scratch,
                                 float* HWY_RESTRICT partial) {
  // The format is a run-time property of the layer: one switch per item, then the kernels of
  // that element type.
  // (KVRING_ATTENTION_NO_INT8 compiles the BF16 kernels alone; the entry points then refuse
  // int8 views.)
#if !defined(KVRING_ATTENTION_NO_INT8)
  if (kv.format == Format::kInt8) {
    attention_internal::RunItem<false>(kv, batch, options, work, item_index, scratch, partial,
                                       kv.k_int8, kv.v_int8);
    return;
  }
#endif
  KVRING_DASSERT(kv.format == Format::kBF16);
#if HWY_TARGET == HWY_AVX3_DL
  // The BF16-product mode on vdpbf16ps: its own instantiation, so that the exact mode's code
  // has no branch of it.
  if constexpr (attention_internal::kNativeTile<Layout::kTileSlots>) {
    if (attention_internal::PathOf<BF16, Layout::kTileSlots>(
            options.products, static_cast<size_t>(kv.layout.K().DimStride())) ==
        attention_internal::ProductPath::kBF16Native) {
      attention_internal::RunNativeItem(kv, batch, options, work, item_index, scratch, partial);
      return;
    }
  }
#endif
  attention_internal::RunItem<false>(kv, batch, options, work, item_index, scratch, partial, kv.k,
                                     kv.v);
}

// Combines the partial states of merge `merge_index` (< work.NumMerges()) in chronological
// order and writes its output rows. Run after every item of the call. `scratch` and
// `partial` as for RunAttentionItem. Does not allocate.
HWY_INLINE void MergeAttention(const AttentionBatch& batch, const AttentionOptions& options,
                               const AttentionWork& work, uint64_t merge_index,
                               float* HWY_RESTRICT scratch, const float* HWY_RESTRICT partial) {
  const uint64_t first_item = work.MergeFirstItem(merge_index);
  const AttentionItem item = work.Item(first_item);
  const size_t group = work.Group();
  const size_t v_head_dim = work.VHeadDim();
  const size_t num_rows = size_t{item.num_queries} * group;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* acc = attention_internal::Align64(scratch);
  float* tmp = acc + (v_head_dim + 15) / 16 * 16;
  for (size_t row = 0; row < num_rows; ++row) {
    float m = neg_inf;
    for (uint32_t split = 0; split < work.NumSplits(); ++split) {
      const float* src =
          partial + ((first_item + split) * work.MaxItemRows() + row) * work.PartialRowFloats();
      if (src[0] > m) m = src[0];
    }
    float l = 0.0f;
    for (size_t dim = 0; dim < v_head_dim; ++dim) acc[dim] = 0.0f;
    for (uint32_t split = 0; split < work.NumSplits(); ++split) {
      const float* src =
          partial + ((first_item + split) * work.MaxItemRows() + row) * work.PartialRowFloats();
      if (src[0] == neg_inf) continue;  // the split holds nothing this row sees
      const float factor = std::exp(src[0] - m);
      l += src[1] * factor;
      for (size_t dim = 0; dim < v_head_dim; ++dim) acc[dim] += src[2 + dim] * factor;
    }
    const size_t query = item.first_query + row / group;
    const size_t q_head = size_t{item.kv_head} * group + row % group;
    const size_t dst = static_cast<size_t>(query * work.OutRowStride()) + q_head * v_head_dim;
    attention_internal::FinalizeRow(
        m, l, acc, options.sinks != nullptr ? options.sinks + q_head : nullptr, v_head_dim, tmp,
        batch.out_f32 != nullptr ? batch.out_f32 + dst : nullptr,
        batch.out_bf16 != nullptr ? batch.out_bf16 + dst : nullptr,
        work.ElementFormat() == Format::kInt8 ? attention_internal::AccOrder::kNatural
                                              : attention_internal::AccOrder::kPermuted);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_ITEM_INL_H_
