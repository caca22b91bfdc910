// kvring/ops/attention_int8_products-inl.h: the integer-product mode of kvring's attention
// kernels for int8 layers (Products::kInt8): each pre-scaled query row quantized to int8 with
// a scale of its own, each tile's V weights (probability times V scale) to 16 bits with a
// scale per row and tile, and both passes summed over the stored int8 K and V, then scaled
// once. Internal to kvring/ops/attention-inl.h (namespace attention_internal).
//
// The AVX3_DL target (AVX-512 VNNI), and the AVX2 target on CPUs with AVX-VNNI (chosen at
// run time: attention_int8_avx_vnni-inl.h), sum exactly in int32 with vpdpbusd, which multiplies
// unsigned by signed bytes: K enters as k + 128 (its sign bit flipped) and 128 * sum(q) is
// subtracted per row; the weights enter as their high and low bytes (two sums joined as
// 256 * high + low, below 2^31), rounded once to f32. The layouts stay those of the exact
// mode: vpdpbusd takes four dims of a slot (K) or four slots of a dim (V) per 32-bit lane,
// which byte permutations build from the stored rows in registers (those loops are in
// attention_int8_vnni-inl.h). The other targets (and
// 8-slot tiles, and AVX2 CPUs without AVX-VNNI) run the exact mode's f32 loops on the same
// quantized values: q . k is exact there too (|q|, |k| <= 127 and at most 576 dims keep every
// partial sum below 2^24); the V pass weighs positions by their 16-bit weights times the scale,
// summed in f32. Each target's bits are its own; within a target, ring, flat and paged storage and
// every thread count give the same bits.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_INT8_PRODUCTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_INT8_PRODUCTS_INL_H_
#undef KVRING_OPS_ATTENTION_INT8_PRODUCTS_INL_H_
#else
#define KVRING_OPS_ATTENTION_INT8_PRODUCTS_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/highway.h"
#include "kvring/kernel_limits.h"

// After highway.h: per-target helpers this file uses.
#include "kvring/ops/attention_block-inl.h"
#include "kvring/ops/attention_int8_avx_vnni-inl.h"
#include "kvring/ops/attention_int8_vnni-inl.h"
#include "kvring/ops/attention_scores-inl.h"
#include "kvring/ops/attention_softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// The largest |q| of a quantized query, and the largest weight (16 bits: two bytes).
static constexpr float kQueryLevels = 127.0f;
static constexpr float kWeightLevels = 65535.0f;

// Writes a row's pre-scaled query (get(dim) * scale for head_dim dims) quantized to int8 with
// the row's scale max|q| / 127 (row.q_scale): for vpdpbusd (kDot) as head_dim bytes at q with
// row.q_bias = 128 * sum(q_int8), elsewhere as head_dim f32 integers. A query with a NaN or
// infinite element gets scale NaN (its scores, and output, are NaN, as the exact mode's); an
// all-zero query scale 0. Scalar code, the same bits on every target.
template <bool kDot, class Get>
HWY_INLINE void WriteInt8QueryRow(const Get& get, float scale, size_t head_dim,
                                  float* HWY_RESTRICT q, Row& row) {
  float values[kMaxAttentionHeadDim];
  float max_abs = 0.0f;
  bool finite = true;
  for (size_t dim = 0; dim < head_dim; ++dim) {
    values[dim] = get(dim) * scale;
    const float magnitude = std::fabs(values[dim]);
    finite &= magnitude <= std::numeric_limits<float>::max();
    if (magnitude > max_abs) max_abs = magnitude;
  }
  const bool zero = !finite || max_abs == 0.0f;
  row.q_scale = !finite ? std::numeric_limits<float>::quiet_NaN() : max_abs / kQueryLevels;
  const float inverse = zero ? 0.0f : kQueryLevels / max_abs;
  int32_t sum = 0;
  int8_t* bytes = reinterpret_cast<int8_t*>(q);
  for (size_t dim = 0; dim < head_dim; ++dim) {
    // (A non-finite query's levels are 0: NaN never reaches the integer conversion.)
    float level = zero ? 0.0f : std::nearbyint(values[dim] * inverse);
    level = level > kQueryLevels ? kQueryLevels : level < -kQueryLevels ? -kQueryLevels : level;
    sum += static_cast<int32_t>(level);
    if constexpr (kDot) {
      bytes[dim] = static_cast<int8_t>(level);
    } else {
      q[dim] = level;
    }
  }
  row.q_bias = 128 * sum;
}

// Turns one row's probabilities of a tile (natural lane order: int8's) into its V weights:
// w = p * v_scale for the offsets in [lo_off, hi_off], 0 for the others (their slots are never
// weighed), quantized to 0..65535 with the scale max(w) / 65535, which it returns. On
// vpdpbusd (kDot) the weights go to `bytes` as their high bytes (kTile of them) then their
// low bytes (kTile): the V pass sums each half exactly and adds 256 * high + low; elsewhere
// they replace p, times the scale (the quantized weights, for the exact mode's V pass). A NaN
// weight (a NaN score or V scale), or an infinite one, makes the scale NaN: the row's output
// is NaN.
template <uint64_t kTile, bool kDot>
HWY_INLINE float Int8Weights(float* HWY_RESTRICT p, const float* HWY_RESTRICT v_scales,
                             int32_t lo_off, int32_t hi_off, uint8_t* HWY_RESTRICT bytes) {
  static_assert(ElementKernel<int8_t>::LaneOffset(1, 2, 8) == 10, "natural lane order");
  const SureF32<static_cast<size_t>(kTile)> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  using V = hn::Vec<decltype(df)>;
  constexpr size_t kLanes = hn::MaxLanes(decltype(df)());
  const auto lo = hn::Set(di, lo_off - 1);
  const auto hi = hn::Set(di, hi_off + 1);
  V max = hn::Zero(df);
  bool nan = false;
  for (size_t i = 0; i < kTile; i += kLanes) {
    const auto offsets = hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(i)));
    const auto visible = hn::RebindMask(df, hn::And(hn::Gt(offsets, lo), hn::Lt(offsets, hi)));
    const V w =
        hn::IfThenElseZero(visible, hn::Mul(hn::LoadU(df, p + i), hn::LoadU(df, v_scales + i)));
    nan |= !hn::AllTrue(df, hn::Eq(w, w));
    max = hn::Max(max, hn::IfThenElseZero(hn::Eq(w, w), w));
    hn::StoreU(w, df, p + i);
  }
  const float max_w = hn::GetLane(hn::MaxOfLanes(df, max));
  const bool finite = !nan && max_w <= std::numeric_limits<float>::max();
  const V inverse = hn::Set(df, finite && max_w > 0.0f ? kWeightLevels / max_w : 0.0f);
  const V top = hn::Set(df, kWeightLevels);
  const float scale = !finite        ? std::numeric_limits<float>::quiet_NaN()
                      : max_w > 0.0f ? max_w / kWeightLevels
                                     : 0.0f;
  for (size_t i = 0; i < kTile; i += kLanes) {
    const V level = hn::Min(hn::Round(hn::Mul(hn::LoadU(df, p + i), inverse)), top);
    if constexpr (kDot) {
      const auto bits = hn::ConvertTo(di, level);
      hn::StoreU(hn::DemoteTo(d8, hn::ShiftRight<8>(bits)), d8, bytes + i);
      hn::StoreU(hn::DemoteTo(d8, hn::And(bits, hn::Set(di, 255))), d8, bytes + kTile + i);
    } else {
      hn::StoreU(hn::Mul(level, hn::Set(df, scale)), df, p + i);
    }
  }
  return scale;
}

// One register block of kRows rows over one int8 tile in the integer-product mode (see
// BlockTile for the arguments; v_ahead: the V the K pass prefetches): integer scores, the K scales,
// the online softmax, the V weights quantized per row, the integer V pass. Every position of the
// tile is read; a row's invisible positions score -inf and weigh 0. A row that sees none of the
// tile is left as it is. kDot: on vpdpbusd (AVX3_DL, or AVX2 where the CPU has AVX-VNNI).
template <size_t kRows, uint64_t kTile, bool kDot>
HWY_INLINE void BlockTileInt8(Row* rows, size_t num_real, uint64_t tile_pos,
                              const int8_t* HWY_RESTRICT k_tile, size_t dim_stride,
                              const int8_t* k_next, const PrefetchShape& ps,
                              const int8_t* HWY_RESTRICT v_tile, const int8_t* v_ahead,
                              size_t v_stride, const float* HWY_RESTRICT k_scale_lanes,
                              const float* HWY_RESTRICT v_scales, size_t head_dim,
                              size_t v_head_dim, float soft_cap, const int32_t* lane_offsets,
                              const int32_t* index_of_offset, float* HWY_RESTRICT scores) {
  static_assert(!kDot || kVnniTile<kTile> || kAvxVnniTile<kTile>, "vpdpbusd: its tiles only");
  const TileRows<kRows, kTile> seen(rows, num_real, tile_pos);
  if (!seen.any_active) return;
  float q_scale[kRows], w_scale[kRows], correction[kRows];
  float* acc[kRows];
  bool all_active = true;
  for (size_t r = 0; r < kRows; ++r) {
    q_scale[r] = rows[r].q_scale;
    w_scale[r] = 0.0f;
    correction[r] = 1.0f;
    acc[r] = rows[r].acc;
    if (r < num_real) all_active &= seen.active[r];
  }
#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  if constexpr (kDot) {
    const int8_t* q[kRows];
    int32_t q_bias[kRows];
    for (size_t r = 0; r < kRows; ++r) {
      q[r] = reinterpret_cast<const int8_t*>(rows[r].q);
      q_bias[r] = rows[r].q_bias;
    }
    Int8TileScoresVnni<kRows, kTile>(q, q_bias, q_scale, k_scale_lanes, k_tile, dim_stride,
                                     head_dim, v_ahead, ps, scores);
  }
#endif
  if constexpr (!kDot) {
    const float* q[kRows];
    for (size_t r = 0; r < kRows; ++r) q[r] = rows[r].q;
    TileScores<kRows, kTile>(q, k_tile, dim_stride, head_dim, v_ahead, ps, scores);
    for (size_t r = 0; r < kRows; ++r) {
      for (size_t i = 0; i < kTile; ++i) scores[r * kTile + i] *= q_scale[r];
    }
  }
  alignas(64) uint8_t weight_bytes[kRows][2 * kTile];  // high bytes, then low bytes
  for (size_t r = 0; r < kRows; ++r) {
    // Rows that do not see the tile (padding included) weigh every position 0.
    float* p = scores + r * kTile;
    if (r >= num_real || !seen.active[r]) {
      if constexpr (kDot) {
        for (size_t i = 0; i < 2 * kTile; ++i) weight_bytes[r][i] = 0;
      } else {
        for (size_t i = 0; i < kTile; ++i) p[i] = 0.0f;
      }
      continue;
    }
    // (The vpdpbusd scores have their K scales already.)
    if constexpr (!kDot) {
      ElementKernel<int8_t>::template ScaleScores<kTile>(p, k_scale_lanes);
    }
    correction[r] =
        SoftmaxRow<kTile>(p, lane_offsets, seen.lo_off[r], seen.hi_off[r], soft_cap, rows[r]);
    w_scale[r] =
        Int8Weights<kTile, kDot>(p, v_scales, seen.lo_off[r], seen.hi_off[r], weight_bytes[r]);
  }
  // A block of rows that all see the tile goes at once; otherwise each row that sees it alone
  // (a row's bits do not depend on its block: its sums are its own).
  const auto accumulate = [&](auto k_rows, size_t first) {
    constexpr size_t kN = decltype(k_rows)::value;
#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
    if constexpr (kDot) {
      const uint8_t* w[kN];
      for (size_t r = 0; r < kN; ++r) w[r] = weight_bytes[first + r];
      AccumulateInt8TileVnni<kN, kTile>(v_tile, v_stride, k_next, ps, v_head_dim, w,
                                        w_scale + first, acc + first, correction + first);
    }
#endif
    if constexpr (!kDot) {
      // The exact mode's V pass over the quantized weights (V scales of 1).
      alignas(64) static constexpr float kOnes[64] = {
          1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
          1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
          1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
      static_assert(kTile <= 64, "the table covers a tile");
      static_cast<void>(w_scale);  // the weights carry their scale here
      AccumulateTile<kN, false, kTile>(v_tile, kOnes, v_stride, k_next, ps, v_head_dim,
                                       scores + first * kTile, index_of_offset, acc + first,
                                       correction + first, 0, 0);
    }
  };
  if (all_active) {
    accumulate(std::integral_constant<size_t, kRows>(), 0);
    return;
  }
  for (size_t r = 0; r < num_real; ++r) {
    if (seen.active[r]) accumulate(std::integral_constant<size_t, 1>(), r);
  }
}

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_INT8_PRODUCTS_INL_H_
