// kvring/ops/attention_int8_products-inl.h: the integer-product mode of kvring's attention
// kernels for int8 layers (Products::kInt8): each pre-scaled query row quantized to int8 with
// a scale of its own, each softmax step's V weights (probability times V scale) to 16 bits
// with a scale per row and step (a tile, or a pair of 16-slot tiles on vpdpbusd), and both
// passes summed over the stored int8 K and V, then scaled once. It also holds the item's query
// writing for every mode (WriteItemQuery), the first header that sees both the integer and the
// float row writers. Internal to kvring/ops/attention-inl.h (namespace attention_internal).
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
#include "kvring/attention.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/formats/hadamard.h"
#include "kvring/kernel_limits.h"
#include "kvring/ops/target_vectors-inl.h"

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
// all-zero query scale 0. The same bits on every target: the maximum is exact, each level is
// one product rounded half to even, the sum exact in int32. For vpdpbusd whole vectors go at
// once (the scalar loops were 8 % of a decode call at 512 positions), rounded by the CPU's
// instruction; elsewhere (the f32 integers, which keep nearbyint's sign of zero) and for the
// last dims, one at a time.
template <bool kDot, class Get>
HWY_INLINE void WriteInt8QueryRow(const Get& get, float scale, size_t head_dim,
                                  float* HWY_RESTRICT q, Row& row) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(di)> d8;
  using V = hn::Vec<decltype(df)>;
  const size_t lanes = hn::Lanes(df);
  // (Not on the emulated targets, whose Round rounds 0.49999997 up: kDot is never theirs.)
  const size_t vector_dims = kDot ? head_dim / lanes * lanes : 0;
  HWY_ALIGN float values[kMaxAttentionHeadDim];
  for (size_t dim = 0; dim < head_dim; ++dim) values[dim] = get(dim) * scale;
  const V largest = hn::Set(df, std::numeric_limits<float>::max());
  V max_v = hn::Zero(df);
  auto beyond = hn::FirstN(df, 0);  // lanes that met a NaN or an infinity
  for (size_t dim = 0; dim < vector_dims; dim += lanes) {
    const V magnitude = hn::Abs(hn::Load(df, values + dim));
    beyond = hn::Or(beyond, hn::Not(hn::Le(magnitude, largest)));
    max_v = hn::Max(max_v, magnitude);  // (NaN lanes: the scale is NaN whatever max_abs is)
  }
  float max_abs = vector_dims == 0 ? 0.0f : hn::GetLane(hn::MaxOfLanes(df, max_v));
  bool finite = hn::AllFalse(df, beyond);
  for (size_t dim = vector_dims; dim < head_dim; ++dim) {
    const float magnitude = std::fabs(values[dim]);
    finite &= magnitude <= std::numeric_limits<float>::max();
    if (magnitude > max_abs) max_abs = magnitude;
  }
  const bool zero = !finite || max_abs == 0.0f;
  row.q_scale = !finite ? std::numeric_limits<float>::quiet_NaN() : max_abs / kQueryLevels;
  int8_t* bytes = reinterpret_cast<int8_t*>(q);
  if (zero) {  // (a non-finite query's levels are 0: NaN never reaches the integer conversion)
    if constexpr (kDot) {
      std::memset(bytes, 0, head_dim);
    } else {
      std::memset(q, 0, head_dim * sizeof(float));
    }
    row.q_bias = 0;
    return;
  }
  const float inverse = kQueryLevels / max_abs;
  const V inverse_v = hn::Set(df, inverse);
  const V top = hn::Set(df, kQueryLevels);
  const V bottom = hn::Set(df, -kQueryLevels);
  auto sum_v = hn::Zero(di);
  for (size_t dim = 0; dim < vector_dims; dim += lanes) {
    const V level =
        hn::Max(hn::Min(hn::Round(hn::Mul(hn::Load(df, values + dim), inverse_v)), top), bottom);
    const auto level_i = hn::ConvertTo(di, level);
    sum_v = hn::Add(sum_v, level_i);
    hn::StoreU(hn::DemoteTo(d8, level_i), d8, bytes + dim);
  }
  int32_t sum = vector_dims == 0 ? 0 : hn::GetLane(hn::SumOfLanes(di, sum_v));
  for (size_t dim = vector_dims; dim < head_dim; ++dim) {
    float level = std::nearbyint(values[dim] * inverse);
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

// RotateHadamard (kvring/formats/hadamard.h) of a query row, its stages whose pairs lie a
// vector or more apart in vectors: every element takes the same additions in the same order,
// so the bits are RotateHadamard's (the scalar stages were 9 % of an int8h decode call at 512
// positions).
HWY_INLINE void RotateHadamardRow(float* HWY_RESTRICT x, size_t n) {
  const size_t block = HadamardBlock(n);
  if (block < 2) return;
  const hn::ScalableTag<float> df;
  const size_t lanes = hn::Lanes(df);
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (size_t first = 0; first < n; first += block) {
    float* HWY_RESTRICT b = x + first;
    kvring::detail::HadamardStagesBelow(b, block, lanes);
    for (size_t half = lanes; half < block; half *= 2) {
      for (size_t i = 0; i < block; i += 2 * half) {
        for (size_t j = i; j < i + half; j += lanes) {
          const auto a = hn::LoadU(df, b + j);
          const auto c = hn::LoadU(df, b + j + half);
          hn::StoreU(hn::Add(a, c), df, b + j);
          hn::StoreU(hn::Sub(a, c), df, b + j + half);
        }
      }
    }
    size_t i = 0;
    for (; i + lanes <= block; i += lanes) {
      hn::StoreU(hn::Mul(hn::LoadU(df, b + i), hn::Set(df, norm)), df, b + i);
    }
    for (; i < block; ++i) b[i] *= norm;
  }
}

// Writes the query row at element `src` of the batch's queries, times `scale`, into q as the
// item's path reads it (a row of an ItemRunner with kInt8Products and kIntDot). A rotated K
// (Format::kInt8Hadamard) has its query rotated alike first (RotateHadamardRow), so that q.k is
// the product with K as it was given. The integer-product mode quantizes the row
// (WriteInt8QueryRow: its scale into `row`); the others write it as WriteQueryRow.
template <bool kInt8Products, bool kIntDot>
HWY_INLINE void WriteItemQuery(const AttentionBatch& batch, size_t src, float scale, Format format,
                               ProductPath path, size_t head_dim, float* HWY_RESTRICT q, Row& row) {
  const auto write = [&](const auto& get) {
    if constexpr (kInt8Products) {
      WriteInt8QueryRow<kIntDot>(get, scale, head_dim, q, row);
    } else {
      WriteQueryRow(path, get, scale, head_dim, q);
    }
  };
  const float* in_f32 = batch.queries_f32 == nullptr ? nullptr : batch.queries_f32 + src;
  const BF16* in_bf16 = batch.queries_bf16 == nullptr ? nullptr : batch.queries_bf16 + src;
  if (RotatesK(format)) {
    float rotated[kMaxAttentionHeadDim];
    for (size_t dim = 0; dim < head_dim; ++dim) {
      rotated[dim] = in_f32 != nullptr ? in_f32[dim] : BF16ToF32(in_bf16[dim]);
    }
    RotateHadamardRow(rotated, head_dim);
    write([&rotated](size_t dim) { return rotated[dim]; });
  } else if (in_f32 != nullptr) {
    write([in_f32](size_t dim) { return in_f32[dim]; });
  } else {
    write([in_bf16](size_t dim) { return BF16ToF32(in_bf16[dim]); });
  }
}

// Turns one row's probabilities of a tile (natural lane order: int8's) into its V weights:
// w = p * v_scale for the offsets in [lo_off, hi_off], 0 for the others (their slots are never
// weighed), quantized to 0..65535 with the scale max(w) / 65535, which it returns. On
// vpdpbusd (kDot) the weights go to `bytes` as their high bytes (kTile of them) then their
// low bytes (kTile): the V pass sums each half exactly and adds 256 * high + low; elsewhere
// they replace p, times the scale (the quantized weights, for the exact mode's V pass). A NaN
// weight (a NaN score or V scale), or an infinite one, makes the scale NaN: the row's output
// is NaN. kParts > 1: the row's probabilities of that many tiles it sees whole (a softmax step
// over a pair: BlockPairInt8), at p[t] with v_scales[t] and bytes[t], under one scale.
template <uint64_t kTile, bool kDot, size_t kParts>
HWY_INLINE float Int8Weights(float* const* HWY_RESTRICT p, const float* const* v_scales,
                             int32_t lo_off, int32_t hi_off, uint8_t* const* bytes) {
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
  for (size_t t = 0; t < kParts; ++t) {
    for (size_t i = 0; i < kTile; i += kLanes) {
      const auto offsets = hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(i)));
      const auto visible = hn::RebindMask(df, hn::And(hn::Gt(offsets, lo), hn::Lt(offsets, hi)));
      const V w = hn::IfThenElseZero(
          visible, hn::Mul(hn::LoadU(df, p[t] + i), hn::LoadU(df, v_scales[t] + i)));
      nan |= !hn::AllTrue(df, hn::Eq(w, w));
      max = hn::Max(max, hn::IfThenElseZero(hn::Eq(w, w), w));
      hn::StoreU(w, df, p[t] + i);
    }
  }
  const float max_w = hn::GetLane(hn::MaxOfLanes(df, max));
  const bool finite = !nan && max_w <= std::numeric_limits<float>::max();
  const V inverse = hn::Set(df, finite && max_w > 0.0f ? kWeightLevels / max_w : 0.0f);
  const V top = hn::Set(df, kWeightLevels);
  const float scale = !finite        ? std::numeric_limits<float>::quiet_NaN()
                      : max_w > 0.0f ? max_w / kWeightLevels
                                     : 0.0f;
  for (size_t t = 0; t < kParts; ++t) {
    for (size_t i = 0; i < kTile; i += kLanes) {
#if HWY_TARGET == HWY_AVX3_DL
      if constexpr (kDot) {
        // The same bytes in four instructions: vcvtps2dq rounds to nearest even as Round does
        // (the Min first still gives 65535 for 65535.5 and for NaN), and each vpmovdb keeps
        // the low byte of every level (weights are never negative: nor are V scales), in place
        // of the saturating packs and the lane permutation of DemoteTo.
        static_assert(kLanes == 16, "vpdpbusd tiles fill 512-bit vectors");
        const V capped = hn::Min(hn::Mul(hn::LoadU(df, p[t] + i), inverse), top);
        const __m512i bits = _mm512_cvtps_epi32(capped.raw);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes[t] + i),
                         _mm512_cvtepi32_epi8(_mm512_srli_epi32(bits, 8)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes[t] + kTile + i),
                         _mm512_cvtepi32_epi8(bits));
        continue;
      }
#endif
      const V level = hn::Min(hn::Round(hn::Mul(hn::LoadU(df, p[t] + i), inverse)), top);
      if constexpr (kDot) {
        const auto bits = hn::ConvertTo(di, level);
        hn::StoreU(hn::DemoteTo(d8, hn::ShiftRight<8>(bits)), d8, bytes[t] + i);
        hn::StoreU(hn::DemoteTo(d8, hn::And(bits, hn::Set(di, 255))), d8, bytes[t] + kTile + i);
      } else {
        hn::StoreU(hn::Mul(level, hn::Set(df, scale)), df, p[t] + i);
      }
    }
  }
  return scale;
}
template <uint64_t kTile, bool kDot>
HWY_INLINE float Int8Weights(float* HWY_RESTRICT p, const float* HWY_RESTRICT v_scales,
                             int32_t lo_off, int32_t hi_off, uint8_t* HWY_RESTRICT bytes) {
  float* const parts[1] = {p};
  const float* const scales[1] = {v_scales};
  uint8_t* const outs[1] = {bytes};
  return Int8Weights<kTile, kDot, 1>(parts, scales, lo_off, hi_off, outs);
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
  KVRING_UNROLL
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
    KVRING_UNROLL
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
    KVRING_UNROLL
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
      KVRING_UNROLL
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

#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// BlockTwoTilesInt8's merged step: kRows rows (num_real real) that see both tiles of an aligned
// pair whole, on vpdpbusd (AVX-512 VNNI's, or AVX-VNNI's). Each tile is scored as alone
// (Int8TileScoresVnni), then a row takes both as one softmax step (SoftmaxRow over 2 * kTile
// positions) whose V weights share one scale (Int8Weights over both), and the V pass sums each
// tile exactly in int32 (the first applies the step's correction). One max, one correction and
// one weight scale per pair: a tile's fixed steps were about 40 % of a 16-slot tile's time
// (Zen 5, decode).
template <size_t kRows, uint64_t kTile>
HWY_INLINE void BlockPairInt8(Row* rows, size_t num_real, const TileRefs<int8_t>* tiles,
                              size_t dim_stride, const PrefetchShape& ps, size_t v_stride,
                              size_t head_dim, size_t v_head_dim, float soft_cap,
                              const int32_t* lane_offsets, float* const* scores) {
  static_assert(kVnniTile<kTile> || kAvxVnniTile<kTile>, "vpdpbusd: its tiles only");
  const int8_t* q[kRows];
  int32_t q_bias[kRows];
  float q_scale[kRows], w_scale[kRows], correction[kRows], unchanged[kRows];
  float* acc[kRows];
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    q[r] = reinterpret_cast<const int8_t*>(rows[r].q);
    q_bias[r] = rows[r].q_bias;
    q_scale[r] = rows[r].q_scale;
    w_scale[r] = 0.0f;
    correction[r] = unchanged[r] = 1.0f;
    acc[r] = rows[r].acc;
  }
  KVRING_UNROLL
  for (size_t t = 0; t < 2; ++t) {
    Int8TileScoresVnni<kRows, kTile>(q, q_bias, q_scale, tiles[t].k_scales, tiles[t].k, dim_stride,
                                     head_dim, tiles[t].v_ahead, ps, scores[t]);
  }
  alignas(64) uint8_t weight_bytes[2][kRows][2 * kTile];  // per tile: high bytes, then low
  for (size_t r = 0; r < kRows; ++r) {
    uint8_t* const bytes[2] = {weight_bytes[0][r], weight_bytes[1][r]};
    if (r >= num_real) {  // the block's padding weighs every position 0
      for (size_t i = 0; i < 2 * kTile; ++i) bytes[0][i] = bytes[1][i] = 0;
      continue;
    }
    float* const p[2] = {scores[0] + r * kTile, scores[1] + r * kTile};
    const float* const v_scales[2] = {tiles[0].v_scales, tiles[1].v_scales};
    const int32_t last = static_cast<int32_t>(kTile) - 1;
    correction[r] = SoftmaxRow<kTile, 2>(p, lane_offsets, 0, last, soft_cap, rows[r]);
    w_scale[r] = Int8Weights<kTile, true, 2>(p, v_scales, 0, last, bytes);
  }
  KVRING_UNROLL
  for (size_t t = 0; t < 2; ++t) {
    const uint8_t* w[kRows];
    KVRING_UNROLL
    for (size_t r = 0; r < kRows; ++r) w[r] = weight_bytes[t][r];
    AccumulateInt8TileVnni<kRows, kTile>(tiles[t].v, v_stride, tiles[t].k_next, ps, v_head_dim, w,
                                         w_scale, acc, t == 0 ? correction : unchanged);
  }
}

// BlockTwoTilesInt8's rows when some of them do not see both tiles whole (a range's first and
// last pair, a prefill's rows at their windows' edges): each row alone, one step over both
// tiles if it sees them whole, else tile after tile. Out of line, as RowsOverTwoTiles.
template <uint64_t kTile>
HWY_NOINLINE void RowsOverTwoTilesInt8(Row* rows, size_t num_real, const TileRefs<int8_t>* tiles,
                                       size_t dim_stride, const PrefetchShape& ps, size_t v_stride,
                                       size_t head_dim, size_t v_head_dim, float soft_cap,
                                       const int32_t* lane_offsets, const int32_t* index_of_offset,
                                       float* const* scores) {
  for (size_t r = 0; r < num_real; ++r) {
    if (SeesWhole(rows[r], tiles[0].pos, 2 * kTile)) {
      BlockPairInt8<1, kTile>(rows + r, 1, tiles, dim_stride, ps, v_stride, head_dim, v_head_dim,
                              soft_cap, lane_offsets, scores);
      continue;
    }
    KVRING_UNROLL
    for (size_t t = 0; t < 2; ++t) {
      BlockTileInt8<1, kTile, true>(rows + r, 1, tiles[t].pos, tiles[t].k, dim_stride,
                                    tiles[t].k_next, ps, tiles[t].v, tiles[t].v_ahead, v_stride,
                                    tiles[t].k_scales, tiles[t].v_scales, head_dim, v_head_dim,
                                    soft_cap, lane_offsets, index_of_offset, scores[t]);
    }
  }
}

// The integer-product mode's BlockTwoTiles (on vpdpbusd): one register block over an aligned pair
// of consecutive tiles; rows that see both whole take them as one softmax step
// (BlockPairInt8), every other row tile after tile (RowsOverTwoTilesInt8). Which rows merge
// depends on each row's own range and the tiles' positions only (a row's bits as alone).
template <size_t kRows, uint64_t kTile>
HWY_INLINE void BlockTwoTilesInt8(Row* rows, size_t num_real, const TileRefs<int8_t>* tiles,
                                  size_t dim_stride, const PrefetchShape& ps, size_t v_stride,
                                  size_t head_dim, size_t v_head_dim, float soft_cap,
                                  const int32_t* lane_offsets, const int32_t* index_of_offset,
                                  float* const* scores) {
  KVRING_DASSERT(tiles[0].pos % (2 * kTile) == 0 && tiles[1].pos == tiles[0].pos + kTile);
  if (!AllSeeWhole(rows, num_real, tiles[0].pos, 2 * kTile)) {
    return RowsOverTwoTilesInt8<kTile>(rows, num_real, tiles, dim_stride, ps, v_stride, head_dim,
                                       v_head_dim, soft_cap, lane_offsets, index_of_offset, scores);
  }
  BlockPairInt8<kRows, kTile>(rows, num_real, tiles, dim_stride, ps, v_stride, head_dim, v_head_dim,
                              soft_cap, lane_offsets, scores);
}
#endif  // HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_INT8_PRODUCTS_INL_H_
