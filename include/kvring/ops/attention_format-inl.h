// kvring/ops/attention_format-inl.h: what the attention kernels do differently for each
// stored format (kvring/formats/format.h), in one place: how a vector of stored elements is
// loaded and in which lane order, the order of a row's V accumulators, whether a tile can be
// scored two dims per vector or with BF16 products, how the format's scales enter scores and
// probabilities, and a latent view's values. The item loop (ops/attention_item-inl.h and the
// parts it puts together) asks ElementKernel<T> and has no branch on the element type.
// Internal to kvring/ops/attention-inl.h (namespace attention_internal).

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_FORMAT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_FORMAT_INL_H_
#undef KVRING_OPS_ATTENTION_FORMAT_INL_H_
#else
#define KVRING_OPS_ATTENTION_FORMAT_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "kvring/bf16.h"
#include "kvring/detail/transpose.h"
#include "kvring/formats/format.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// Loads 2 * Lanes(df) consecutive BF16 at `p` as two f32 vectors: elements 0, 2, 4, ... in
// `even` and 1, 3, 5, ... in `odd`. A shift and a mask: cheaper than PromoteTo, which
// crosses lanes. BF16 -> f32 is exact.
template <class DF>
HWY_INLINE void LoadPairs(DF df, const BF16* HWY_RESTRICT p, hn::Vec<DF>& even, hn::Vec<DF>& odd) {
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  even = hn::BitCast(df, hn::ShiftLeft<16>(bits));
  odd = hn::BitCast(df, hn::And(bits, hn::Set(du, 0xFFFF0000u)));
}

// Loads 2 * Lanes(df) consecutive int8 at `p` (Format::kInt8) as two f32 vectors in their
// natural order: elements [0, Lanes) in `first` and [Lanes, 2 * Lanes) in `second` (each a
// sign-extending widening load and a conversion, exact: |q| <= 127). Int8 tiles and
// accumulators use this natural lane order; BF16 ones the even/odd order of LoadPairs.
template <class DF>
HWY_INLINE void LoadInt8Halves(DF df, const int8_t* HWY_RESTRICT p, hn::Vec<DF>& first,
                               hn::Vec<DF>& second) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int32_t, DF> d32;
  const size_t lanes = hn::Lanes(df);
  first = hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, p)));
  second = hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, p + lanes)));
}

// The order of a row's V accumulators: BF16 V accumulates its dims permuted (PermutedChunkLanes,
// the even/odd order of LoadPairs), int8 V in their natural order (LoadInt8Halves).
enum class AccOrder : uint8_t { kPermuted, kNatural };

// The kernels' traits of a stored element type T: BF16 (Format::kBF16) or int8
// (Format::kInt8, one f32 scale per (pos, kv_head) and stream, formats/int8.h).
template <typename T>
struct ElementKernel;

template <>
struct ElementKernel<BF16> {
  static constexpr Format kFormat = Format::kBF16;
  static constexpr AccOrder kAccOrder = AccOrder::kPermuted;
  // Scoring may pair dims in one vector (TileScoresPaired widens BF16 pairs), and the
  // BF16-product mode (Products::kBF16) applies.
  static constexpr bool kPairedScores = true;
  static constexpr bool kBF16Products = true;

  // The two vectors of 2 * Lanes(df) elements at `p` (LoadPairs' lane order).
  template <class DF>
  static HWY_INLINE void Load(DF df, const BF16* HWY_RESTRICT p, hn::Vec<DF>& a, hn::Vec<DF>& b) {
    LoadPairs(df, p, a, b);
  }

  // The tile offset of lane j of score vector v, vectors of `lanes` lanes: pairs of vectors
  // interleave even and odd positions.
  static constexpr size_t LaneOffset(size_t v, size_t j, size_t lanes) {
    return (v / 2) * 2 * lanes + 2 * j + v % 2;
  }

  // No scales: the tile's score scales and V scales are none.
  template <uint64_t kTile>
  static HWY_INLINE const float* TileScales(const float*, const float*, size_t, bool,
                                            const float** k_lanes) {
    *k_lanes = nullptr;
    return nullptr;
  }
  template <uint64_t kTile>
  static HWY_INLINE void ScaleScores(float*, const float*) {}
  static HWY_INLINE float Weight(float p, const float*, int32_t) { return p; }

  // The values of one tile of a latent view (MLA: no V stream, AttentionOptions::
  // latent_v_dims): dims [0, v_dims) of the tile's K, which both layouts store [dim][slot]
  // (dims dim_stride apart), transposed into dst[slot * v_dims + dim], the [slot][dim] rows
  // AccumulateTile reads. Exact (a copy), every slot of the tile: the V pass still reads only
  // the visible rows.
  template <uint64_t kTile>
  static HWY_INLINE void LatentValues(const BF16* HWY_RESTRICT k_tile, size_t dim_stride,
                                      size_t v_dims, BF16* HWY_RESTRICT dst) {
    static_assert(kTile % 8 == 0, "tiles are whole 8 x 8 blocks");
    const uint16_t* src = reinterpret_cast<const uint16_t*>(k_tile);
    uint16_t* out = reinterpret_cast<uint16_t*>(dst);
    for (size_t d0 = 0; d0 < v_dims; d0 += 8) {
      for (size_t s0 = 0; s0 < kTile; s0 += 8) {
        detail::Transpose8x8(src + d0 * dim_stride + s0, dim_stride, out + s0 * v_dims + d0,
                             v_dims);
      }
    }
  }
};

template <>
struct ElementKernel<int8_t> {
  static constexpr Format kFormat = Format::kInt8;
  static constexpr AccOrder kAccOrder = AccOrder::kNatural;
  // Int8 tiles score one dim per vector and take f32 products only.
  static constexpr bool kPairedScores = false;
  static constexpr bool kBF16Products = false;

  // The two vectors of 2 * Lanes(df) elements at `p` (natural lane order).
  template <class DF>
  static HWY_INLINE void Load(DF df, const int8_t* HWY_RESTRICT p, hn::Vec<DF>& a, hn::Vec<DF>& b) {
    LoadInt8Halves(df, p, a, b);
  }

  static constexpr size_t LaneOffset(size_t v, size_t j, size_t lanes) { return v * lanes + j; }

  // Sets *k_lanes to the K scales of the tile whose scales start at `offset` in the view's
  // k_scales and v_scales, in the scores' lane order: a tile's slots are consecutive, and so
  // are their scales ([kv_head][slot]), and int8 score lanes are in natural order
  // (LaneOffset), so they are read in place. Returns the tile's V scales by offset (a latent
  // view's values are its K: their scales too).
  template <uint64_t kTile>
  static HWY_INLINE const float* TileScales(const float* k_scales, const float* v_scales,
                                            size_t offset, bool latent, const float** k_lanes) {
    static_assert(LaneOffset(1, 2, 8) == 10, "int8 score lanes are in natural order");
    *k_lanes = k_scales + offset;
    return latent ? k_scales + offset : v_scales + offset;
  }

  // The score of a position is its K scale times q . q_int8 (exact folding of the format).
  template <uint64_t kTile>
  static HWY_INLINE void ScaleScores(float* HWY_RESTRICT scores,
                                     const float* HWY_RESTRICT k_scale_lanes) {
    for (size_t i = 0; i < kTile; ++i) scores[i] *= k_scale_lanes[i];
  }

  // The weight of the V row at tile offset `off` for probability p: p times its V scale.
  static HWY_INLINE float Weight(float p, const float* v_scales, int32_t off) {
    return p * v_scales[off];
  }

  // LatentValues of an int8 latent view: the tile's int8 K dims [0, v_dims) as [slot][dim]
  // rows (a copy; the values' scales are the K scales).
  template <uint64_t kTile>
  static HWY_INLINE void LatentValues(const int8_t* HWY_RESTRICT k_tile, size_t dim_stride,
                                      size_t v_dims, int8_t* HWY_RESTRICT dst) {
    for (size_t dim = 0; dim < v_dims; ++dim) {
      const int8_t* HWY_RESTRICT row = k_tile + dim * dim_stride;
      for (size_t slot = 0; slot < kTile; ++slot) dst[slot * v_dims + dim] = row[slot];
    }
  }
};

// Returns the accumulator order of a layer stored in `format`.
HWY_INLINE AccOrder AccOrderOf(Format format) {
  return IsInt8(format) ? ElementKernel<int8_t>::kAccOrder : ElementKernel<BF16>::kAccOrder;
}

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_FORMAT_INL_H_
