// kvring/ops/attention_item-inl.h: the item runner of kvring's attention kernels: one work
// item (the rows of a query block that share a kv_head, over one KV split) walks the
// position-aligned tiles of its view in chronological order, register block by register
// block (attention_block-inl.h; 16-row blocks on AMX tiles, attention_amx-inl.h), and writes
// its output rows or partial states. RunAttentionItem (attention_item_paths-inl.h) runs one
// item by its layer's format and the call's product path; the merges of a split call are in
// attention_merge-inl.h.

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
#include "kvring/kernel_limits.h"
#include "kvring/kv_view.h"
#include "kvring/ops/target_vectors-inl.h"
#include "kvring/views.h"

// After highway.h: the parts of the kernels this file puts together.
#include "kvring/ops/attention_amx-inl.h"
#include "kvring/ops/attention_block-inl.h"
#include "kvring/ops/attention_int8_products-inl.h"
#include "kvring/ops/attention_merge-inl.h"
#include "kvring/ops/attention_products-inl.h"
#include "kvring/ops/attention_scores-inl.h"
#include "kvring/ops/attention_softmax-inl.h"
#include "kvring/ops/bf16_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// One item of stored elements T (BF16, or int8 with scales), reading K and V from k_base and v_base
// (v_base null for a latent view): its rows, its scratch (the layout AttentionWork::ScratchLayout()
// gives), and its walk over the tiles. kPath: kF32 (the exact mode, or the BF16-product mode on the
// widening path, chosen at run time), kBF16Native (on vdpbf16ps: PathOf gave it), kInt8 (the
// integer-product mode of int8 layers) or kInt8AvxVnni (that mode on AVX-VNNI).
template <ProductPath kPath, class Layout, typename T>
class ItemRunner {
 public:
  static constexpr bool kNative = kPath == ProductPath::kBF16Native;
  static constexpr bool kInt8Products =
      kPath == ProductPath::kInt8 || kPath == ProductPath::kInt8AvxVnni;
  static_assert(!kInt8Products || std::is_same<T, int8_t>::value, "kInt8: int8 layers only");
  static constexpr uint64_t kTile = Layout::kTileSlots;
  // The integer-product mode sums on vpdpbusd: AVX-512 VNNI's, or AVX-VNNI's.
  static constexpr bool kIntDot =
      kPath == ProductPath::kInt8AvxVnni || (kPath == ProductPath::kInt8 && kVnniTile<kTile>);
  using Shape = TileShape<kTile>;
  using Element = ElementKernel<T>;
  // Tiles of 16 positions or fewer go in aligned pairs (TwoTiles), but not on vdpbf16ps, the
  // fallbacks or pre-AVX2 x86 (pairs doubled those kernels' compile time); integer products
  // only on vpdpbusd (kIntPairs).
  static constexpr bool kTilePairs = HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128 &&
                                     HWY_TARGET != HWY_SSSE3 && HWY_TARGET != HWY_SSE4 &&
                                     kTile <= 16 && !kNative && !kInt8Products;
  static constexpr bool kIntPairs = kInt8Products && kIntDot && kTile <= 16;
  static_assert(Shape::kMaxRegRows <= kMaxRegisterRows, "the scratch holds 8 rows of scores");

  ItemRunner(const KVView<Layout>& kv, const AttentionBatch& batch, const AttentionOptions& options,
             const AttentionWork& work, uint64_t item_index, float* HWY_RESTRICT scratch,
             const T* k_base, const T* v_base)
      : kv_(kv),
        batch_(batch),
        options_(options),
        work_(work),
        item_(work.Item(item_index)),
        k_base_(k_base),
        v_base_(v_base),
        head_dim_(work.HeadDim()),
        v_head_dim_(work.VHeadDim()),
        group_(work.Group()),
        num_rows_(size_t{item_.num_queries} * work.Group()) {
    path_ = kPath != ProductPath::kF32 ? kPath
            : options.products == Products::kBF16 && Element::kBF16Products
                ? ProductPath::kBF16Widened
                : ProductPath::kF32;
    int_ahead_ = IntTilesAhead(head_dim_);
    const ItemScratchLayout layout = work.ScratchLayout();
    float* base = Align64(scratch);
    KVRING_DASSERT(static_cast<uint64_t>(base - scratch) + layout.end <= work.ScratchFloats());
    q_stride_ = static_cast<size_t>(layout.q_stride);
    acc_stride_ = static_cast<size_t>(layout.acc_stride);
    lane_offsets_ = reinterpret_cast<int32_t*>(base + layout.lane_tables);
    index_of_offset_ = lane_offsets_ + kTile;
    scores_ = base + layout.scores;
    dummy_acc_ = base + layout.dummy_acc;
    q_rows_ = base + layout.q_rows;
    acc_rows_ = base + layout.acc_rows;
    latent_values_ = work.Latent() ? reinterpret_cast<T*>(base + layout.latent) : nullptr;
    // The BF16-product mode's 16-row blocks on AMX tiles, where the CPU and OS allow them and
    // the shapes fit (attention_amx-inl.h).
#if HWY_TARGET == HWY_AVX3_DL && KVRING_AMX_OS
    if constexpr (kNative && kAmxTile<kTile>) {
      if (layout.amx_blocks && num_rows_ >= 16 && head_dim_ % 32 == 0 && v_head_dim_ % 32 == 0 &&
          AmxUsable()) {
        amx_config_ = base + layout.amx;
        amx_k_pairs_ = reinterpret_cast<uint16_t*>(base + layout.amx_k_pairs);
        amx_v_pairs_ = reinterpret_cast<uint16_t*>(base + layout.amx_v_pairs);
      }
    }
#endif
    // The position offset of each score lane: BF16 pairs interleave even and odd positions
    // (LoadPairs); int8 lanes are in their natural order (LoadInt8Halves): ElementKernel.
    for (size_t v = 0; v < Shape::kVectors; ++v) {
      for (size_t j = 0; j < Shape::kLanes; ++j) {
        const size_t offset = Element::LaneOffset(v, j, Shape::kLanes);
        lane_offsets_[v * Shape::kLanes + j] = static_cast<int32_t>(offset);
        index_of_offset_[offset] = static_cast<int32_t>(v * Shape::kLanes + j);
      }
    }
  }

  // Runs the item: its rows in groups of at most kRowsAtOnce, each group over every tile its
  // rows see, then writes their output rows or partial states.
  HWY_INLINE void Run(uint64_t item_index, float* HWY_RESTRICT partial) {
    Row rows[kRowsAtOnce];
#if HWY_TARGET == HWY_AVX3_DL && KVRING_AMX_OS
    if (amx_config_ != nullptr) AmxStart(amx_config_);
#endif
    for (size_t row0 = 0; row0 < num_rows_; row0 += kRowsAtOnce) {
      const size_t rows_here = num_rows_ - row0 < kRowsAtOnce ? num_rows_ - row0 : kRowsAtOnce;
      uint64_t pos_begin = 0, pos_end = 0;
      InitRows(row0, rows_here, rows, &pos_begin, &pos_end);
      if (pos_begin < pos_end) WalkTiles(rows, rows_here, pos_begin, pos_end);
      WriteRows(item_index, partial, rows, row0, rows_here);
    }
#if HWY_TARGET == HWY_AVX3_DL && KVRING_AMX_OS
    if (amx_config_ != nullptr) AmxEnd();
#endif
  }

 private:
  static constexpr size_t kRowsAtOnce =
      AttentionWork::kTargetRows > 64 ? AttentionWork::kTargetRows : 64;

  // The integer-product mode's prefetch distance: tiles of about 8 KiB of K ahead, one or two
  // (measured on Zen 5, D128 decode: flash tiles of 4 KiB 1.6x faster two ahead than one at
  // 32768 positions, three ahead slower again; tiled 16 the same at one, two or three; tiled 64,
  // 8 KiB, slower two ahead).
  static uint64_t IntTilesAhead(size_t head_dim) {
    const uint64_t tile_bytes = kTile * head_dim;
    return tile_bytes * 2 <= 8192 ? 2 : 1;
  }

  // How many tiles ahead a BF16 tile's V pass prefetches K: two where the newest query sees
  // 8192 positions or more, a dim's lines lie 16 KiB or more apart and a tile holds at most 8
  // KiB of K, else one (docs/attention.md, "Prefetch": measured on an Intel Xeon host).
  uint64_t KTilesAhead(size_t dim_stride) const {
    const uint64_t end = batch_.first_q_pos + batch_.num_queries;
    const uint64_t first = kv_.visibility.FirstVisible(end - 1);
    const uint64_t seen = end > first ? end - first : 0;
    const uint64_t line_gap = uint64_t{dim_stride} * sizeof(T);
    const uint64_t tile_bytes = kTile * head_dim_ * sizeof(T);
    return seen >= 8192 && line_gap >= 16384 && tile_bytes <= 8192 ? 2 : 1;
  }

  // Writes the scaled queries of rows [row0, row0 + rows_here) and starts their states; sets
  // [*pos_begin, *pos_end) to the positions any of them sees (empty when none).
  HWY_INLINE void InitRows(size_t row0, size_t rows_here, Row* rows, uint64_t* pos_begin,
                           uint64_t* pos_end) const {
    const float scale = AttentionScale(options_, work_.HeadDim());
    *pos_begin = item_.pos_end;
    *pos_end = item_.pos_begin;
    for (size_t r = 0; r < rows_here; ++r) {
      const size_t row = row0 + r;
      const size_t query = item_.first_query + row / group_;
      const size_t q_head = size_t{item_.kv_head} * group_ + row % group_;
      const uint64_t q_pos = batch_.first_q_pos + query;
      Row& state = rows[r];
      float* q = q_rows_ + row * q_stride_;
      WriteItemQuery<kInt8Products, kIntDot>(
          batch_, static_cast<size_t>(query * work_.QRowStride()) + q_head * head_dim_, scale,
          kv_.format, path_, head_dim_, q, state);
      state.q = q;
      state.acc = acc_rows_ + row * acc_stride_;
      std::memset(state.acc, 0, acc_stride_ * sizeof(float));
      const uint64_t first = kv_.visibility.FirstVisible(q_pos);
      state.lo = first > item_.pos_begin ? first : item_.pos_begin;
      state.hi = q_pos + 1 < item_.pos_end ? q_pos + 1 : item_.pos_end;
      if (state.hi < state.lo) state.hi = state.lo;
      state.m = -std::numeric_limits<float>::infinity();
      state.l = 0.0f;
      if (state.lo < state.hi) {
        if (state.lo < *pos_begin) *pos_begin = state.lo;
        if (state.hi > *pos_end) *pos_end = state.hi;
      }
    }
  }

  // What the walk over one group's tiles shares.
  struct Walk {
    Row* rows;
    size_t rows_here;
    size_t dim_stride;
    size_t v_stride;
    PrefetchShape prefetch;
    TileAddresser<Layout> address;
    uint64_t latent_tiles;  // tiles transposed so far: alternates the two buffers
    uint64_t k_ahead;       // BF16: the tiles ahead a V pass prefetches K (KTilesAhead)
  };

  // The K of the tile `tiles` tiles after the one at `tile_pos`, to prefetch (a ring's slots
  // wrap; past a paged layer's end, its own).
  HWY_INLINE const T* KAfter(const Walk& walk, uint64_t tile_pos, uint64_t tiles) const {
    const uint64_t next = tile_pos + tiles * kTile;
    return k_base_ + walk.address(kv_.Paged() && next >= kv_.end_pos ? tile_pos : next).k;
  }

  // Returns the addresses of the tile at `tile_pos` (its values transposed from K for a latent
  // view; its K scales in lane order for int8).
  HWY_INLINE TileRefs<T> TileAt(Walk& walk, uint64_t tile_pos) {
    TileRefs<T> tile;
    tile.pos = tile_pos;
    const TileOffsets at = walk.address(tile_pos);
    tile.k = k_base_ + at.k;
    if (latent_values_ != nullptr) {
      T* values = latent_values_ + (walk.latent_tiles++ % 2) * kTile * v_head_dim_;
      Element::template LatentValues<kTile>(tile.k, walk.dim_stride, v_head_dim_, values);
      tile.v = values;
    } else {
      tile.v = v_base_ + at.v;
    }
    tile.v_scales = Element::template TileScales<kTile>(kv_.k_scales, kv_.v_scales, at.scales,
                                                        work_.Latent(), &tile.k_scales);
    if constexpr (std::is_same<T, int8_t>::value) {
      // Int8, both modes: the scales of the tile IntTilesAhead ahead (a line each).
      const uint64_t next = tile_pos + int_ahead_ * kTile;
      const TileOffsets next_at = walk.address(next < kv_.end_pos ? next : tile_pos);
      hwy::Prefetch(kv_.k_scales + next_at.scales);
      if (kv_.v_scales != nullptr) hwy::Prefetch(kv_.v_scales + next_at.scales);
      if constexpr (kInt8Products) {
        // The integer passes read a tile's bytes faster than memory brings them: the K pass
        // prefetches the V of that tile ahead, the V pass the K of the tile after it.
        const uint64_t after = next + kTile;
        tile.v_ahead = latent_values_ != nullptr ? tile.v : v_base_ + next_at.v;
        tile.k_next =
            after < kv_.end_pos ? k_base_ + walk.address(after).k : KAfter(walk, tile_pos, 1);
        return tile;
      }
    }
    // BF16: KTilesAhead; int8: IntTilesAhead (a flash int8 tile's K is half of each dim's line).
    tile.k_next =
        KAfter(walk, tile_pos, std::is_same<T, int8_t>::value ? int_ahead_ : walk.k_ahead);
    return tile;
  }

  // Runs fn(k_rows, block, num_real) on each register block of rows [begin, end) (default: all).
  template <class Fn>
  HWY_INLINE void ForEachBlock(const Walk& walk, const Fn& fn, size_t begin = 0,
                               size_t end = ~size_t{0}) {
    if (end > walk.rows_here) end = walk.rows_here;
    constexpr size_t kMax = Shape::kMaxRegRows;
    for (size_t r0 = begin; r0 < end; r0 += kMax) {
      const size_t num_real = end - r0 < kMax ? end - r0 : kMax;
      WithRegisterBlock<kMax>(walk.rows + r0, num_real, padded_, dummy_acc_,
                              [&](auto k_rows, Row* block) { fn(k_rows, block, num_real); });
    }
  }

  // Runs one register block over `tile`, scoring it into scores_.
  template <size_t kRows>
  HWY_INLINE void BlockOver(const Walk& walk, const TileRefs<T>& tile, Row* block,
                            size_t num_real) const {
    if constexpr (kInt8Products) {
      BlockTileInt8<kRows, kTile, kIntDot>(
          block, num_real, tile.pos, tile.k, walk.dim_stride, tile.k_next, walk.prefetch, tile.v,
          tile.v_ahead, walk.v_stride, tile.k_scales, tile.v_scales, head_dim_, v_head_dim_,
          options_.soft_cap, lane_offsets_, index_of_offset_, scores_);
    } else {
      BlockTile<kRows, kTile, kNative>(
          path_ == ProductPath::kBF16Widened, block, num_real, tile.pos, tile.k, walk.dim_stride,
          tile.k_next, walk.prefetch, tile.v, walk.v_stride, tile.k_scales, tile.v_scales,
          head_dim_, v_head_dim_, options_.soft_cap, lane_offsets_, index_of_offset_, scores_);
    }
  }

  // Runs every register block over `tile` alone.
  HWY_INLINE void OneTile(const Walk& walk, const TileRefs<T>& tile) {
    if constexpr (kNative && kAmxTile<kTile>) {
      if (amx_config_ != nullptr) return AmxTile(walk, tile);
    }
    BlocksOver(walk, tile, 0, walk.rows_here);
  }
  // Runs the register blocks of the walk's rows [begin, end) over `tile` alone.
  HWY_INLINE void BlocksOver(const Walk& walk, const TileRefs<T>& tile, size_t begin, size_t end) {
    ForEachBlock(
        walk,
        [&](auto k_rows, Row* block, size_t num_real) {
          BlockOver<decltype(k_rows)::value>(walk, tile, block, num_real);
        },
        begin, end);
  }

  // OneTile of the BF16-product mode with AMX: each 16 rows take the tile on AMX tiles (the K
  // and V pairs built once for all of them), unless they see it only partly and some V element
  // a row sees is not finite; those, and the rows past the last 16, as without AMX.
  HWY_INLINE void AmxTile(const Walk& walk, const TileRefs<T>& tile) {
#if HWY_TARGET == HWY_AVX3_DL && KVRING_AMX_OS
    if constexpr (kNative && kAmxTile<kTile>) {
      bool paired = false, v_finite = false;
      size_t r0 = 0;
      for (; r0 + 16 <= walk.rows_here; r0 += 16) {
        const TileRows<16, kTile> seen(walk.rows + r0, 16, tile.pos);
        if (!seen.any_active) continue;
        if (!paired) {
          AmxKPairs<kTile>(tile.k, walk.dim_stride, head_dim_, amx_k_pairs_);
          v_finite =
              AmxVPairs<kTile>(tile.v, walk.v_stride, v_head_dim_,
                               SeenBy<kTile>(walk.rows, walk.rows_here, tile.pos), amx_v_pairs_);
          paired = true;
        }
        // A tile some of the rows see only partly: a row's products take every slot, at
        // probability 0 where it does not see one, which is 0 only for a finite V.
        if (!seen.all_full && !v_finite) {
          BlocksOver(walk, tile, r0, r0 + 16);
          continue;
        }
        AmxBlock(walk.rows + r0, seen);
      }
      if (r0 < walk.rows_here) BlocksOver(walk, tile, r0, walk.rows_here);
    }
#else
    static_cast<void>(walk);
    static_cast<void>(tile);
#endif
  }

  // 16 rows over the tile, on AMX (AmxBlockTile); `seen`: which of its slots each row sees.
  HWY_INLINE void AmxBlock(Row* rows, const TileRows<16, kTile>& seen) {
#if HWY_TARGET == HWY_AVX3_DL && KVRING_AMX_OS
    if constexpr (kNative && kAmxTile<kTile>) {
      AmxBlockTile<kTile>(rows, seen.active, seen.lo_off, seen.hi_off, q_stride_ * sizeof(float),
                          acc_stride_ * sizeof(float), head_dim_, v_head_dim_, amx_k_pairs_,
                          amx_v_pairs_, lane_offsets_, options_.soft_cap, scores_);
    }
#else
    static_cast<void>(rows);
    static_cast<void>(seen);
#endif
  }

  // Runs every register block over an aligned pair of tiles, scored together where their
  // scores pair dims (TwoTileScoresPaired: only the first block prefetches their V), else one
  // by one (TileScores); then BlockTwoTiles: a row that sees both whole takes one softmax step
  // (integer products: BlockTwoTilesInt8).
  HWY_INLINE void TwoTiles(const Walk& walk, const TileRefs<T>& first, const TileRefs<T>& second) {
#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
    if constexpr (kIntPairs) {
      const TileRefs<T> pair[2] = {first, second};
      float* out[2] = {scores_, scores_ + Shape::kMaxRegRows * kTile};
      return ForEachBlock(walk, [&](auto k_rows, Row* block, size_t num_real) {
        BlockTwoTilesInt8<decltype(k_rows)::value, kTile>(
            block, num_real, pair, walk.dim_stride, walk.prefetch, walk.v_stride, head_dim_,
            v_head_dim_, options_.soft_cap, lane_offsets_, index_of_offset_, out);
      });
    }
#endif
#if HWY_TARGET != HWY_SCALAR
    if constexpr (kTilePairs) {
      const TileRefs<T> pair[2] = {first, second};
      ForEachBlock(walk, [&](auto k_rows, Row* block, size_t num_real) {
        constexpr size_t kRows = decltype(k_rows)::value;
        const float* q[kRows];
        KVRING_UNROLL
        for (size_t r = 0; r < kRows; ++r) q[r] = block[r].q;
        float* out[2] = {scores_, scores_ + Shape::kMaxRegRows * kTile};
        if constexpr (kPairDims<kTile> && Element::kPairedScores) {
          const bool lead = block[0].q == walk.rows[0].q;  // (`block` may be the padded copy)
          const BF16* v_now[2] = {lead ? first.v : nullptr, lead ? second.v : nullptr};
          const BF16* k_tiles[2] = {first.k, second.k};
          TwoTileScoresPaired<kRows, kTile>(q, k_tiles, head_dim_, v_now, walk.prefetch, out);
        } else {
          for (size_t t = 0; t < 2; ++t) {
            TileScores<kRows, kTile>(q, pair[t].k, walk.dim_stride, head_dim_, pair[t].v,
                                     walk.prefetch, out[t]);
          }
        }
        BlockTwoTiles<kRows, kTile>(path_ == ProductPath::kBF16Widened, block, num_real, pair,
                                    walk.dim_stride, walk.prefetch, walk.v_stride, head_dim_,
                                    v_head_dim_, options_.soft_cap, lane_offsets_, index_of_offset_,
                                    out);
      });
      return;
    }
#endif
    OneTile(walk, first);
    OneTile(walk, second);
  }

  // Runs the rows over every tile of [pos_begin, pos_end), in chronological order.
  HWY_INLINE void WalkTiles(Row* rows, size_t rows_here, uint64_t pos_begin, uint64_t pos_end) {
    const size_t dim_stride = static_cast<size_t>(kv_.layout.K().DimStride());
    Walk walk{rows, rows_here, dim_stride,
              work_.Latent() ? v_head_dim_ : static_cast<size_t>(kv_.layout.V().SlotStride()),
              PrefetchShape(kTile, dim_stride, head_dim_, v_head_dim_, sizeof(T)),
              // Tile addresses come from views.h, for ring, flat and paged storage.
              TileAddresser<Layout>(kv_, item_.kv_head), 0, KTilesAhead(dim_stride)};
    // kTilePairs: tiles go two at a time, each pair from an even tile (a tile before it
    // alone), the second held here.
    const bool two_tiles = (kTilePairs || kIntPairs) && dim_stride == kTile;
    TileRefs<T> held;
    bool holding = false;
    ForEachTile<kTile>(pos_begin, pos_end, [&](uint64_t tile_pos) {
      TileRefs<T> tile = TileAt(walk, tile_pos);
      if (!two_tiles) return OneTile(walk, tile);
      if (!holding) {
        if (tile_pos / kTile % 2 != 0) return OneTile(walk, tile);
        held = tile;
        holding = true;
        return;
      }
      holding = false;
      // The pair prefetches the next pair: each tile's V pass the K of the tile two after it
      // (integer products: as TileAt set them).
      if (!kIntPairs) {
        held.k_next = KAfter(walk, tile_pos, 1);
        tile.k_next = KAfter(walk, tile_pos, 2);
      }
      TwoTiles(walk, held, tile);
    });
    if (holding) OneTile(walk, held);
  }

  // Writes rows [row0, row0 + rows_here): their output rows, or their partial states when
  // the call splits.
  HWY_INLINE void WriteRows(uint64_t item_index, float* HWY_RESTRICT partial, const Row* rows,
                            size_t row0, size_t rows_here) const {
    for (size_t r = 0; r < rows_here; ++r) {
      const size_t row = row0 + r;
      const Row& state = rows[r];
      if (work_.Splits()) {
        float* dst = partial + work_.PartialOffset(item_index, row);
        dst[0] = state.m;
        dst[1] = state.l;
        std::memcpy(dst + 2, state.acc, v_head_dim_ * sizeof(float));
        continue;
      }
      WriteOutputRow(batch_, options_, work_, item_, row, state.m, state.l, state.acc, dummy_acc_,
                     Element::kAccOrder);
    }
  }

  const KVView<Layout>& kv_;
  const AttentionBatch& batch_;
  const AttentionOptions& options_;
  const AttentionWork& work_;
  const AttentionItem item_;
  const T* k_base_;
  const T* v_base_;
  const size_t head_dim_, v_head_dim_, group_, num_rows_;
  ProductPath path_;
  uint64_t int_ahead_ = 1;  // the integer-product mode's prefetch distance, in tiles
  size_t q_stride_ = 0, acc_stride_ = 0;
  int32_t* lane_offsets_ = nullptr;     // per score lane, its position offset in the tile
  int32_t* index_of_offset_ = nullptr;  // the inverse
  float* scores_ = nullptr;             // two tiles' scores of one register block
  float* dummy_acc_ = nullptr;
  Row padded_[8];  // a block padded to a power of two rows (a local array was zeroed per tile)
  float* q_rows_ = nullptr;
  float* acc_rows_ = nullptr;
  T* latent_values_ = nullptr;       // latent views: two tiles' values transposed from K
  float* amx_config_ = nullptr;      // AMX blocks: the tile configuration, or null without them
  uint16_t* amx_k_pairs_ = nullptr;  // AMX blocks: one tile's K pairs (AmxKPairs)
  uint16_t* amx_v_pairs_ = nullptr;  // and V pairs (AmxVPairs)
};

}  // namespace attention_internal

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_ITEM_INL_H_
