// kvring/ops/attention_softmax-inl.h: the online-softmax state of kvring's attention kernels
// and the V accumulation: a row's running max and sum, the masking of invisible lanes, the
// accumulators (dims permuted as the pair loads give them) updated tile by tile in
// chronological order, and the final division. Internal to kvring/ops/attention-inl.h.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_SOFTMAX_INL_H_
#undef KVRING_OPS_ATTENTION_SOFTMAX_INL_H_
#else
#define KVRING_OPS_ATTENTION_SOFTMAX_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"
#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/ops/target_vectors-inl.h"

// After highway.h: per-target helpers this file uses.
#include "hwy/contrib/math/math-inl.h"
#include "kvring/ops/attention_scores-inl.h"
#include "kvring/ops/bf16_convert-inl.h"
#include "kvring/ops/softmax_exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// The accumulators of a row hold V's dims permuted: each chunk of 2 * Lanes dims stores its
// even dims, then its odd dims (what LoadPairs yields). Chunks are 2 * Lanes(ScalableTag)
// dims, then (only where a vector holds 16 lanes or more, for the dims past the last whole
// chunk) 2 * Lanes(CappedTag<float, 8>): head dims are multiples of 16, which those chunks (16
// dims at most) divide.
using DVTail = hn::CappedTag<float, 8>;

// Returns the lanes of the permuted chunk that starts at dim `begin` of a row of `num_dims`
// (a chunk boundary): its first that many accumulators hold its even dims, the next its odd.
HWY_INLINE size_t PermutedChunkLanes(size_t begin, size_t num_dims) {
  const size_t lanes = hn::Lanes(DV());
  return begin < num_dims / (2 * lanes) * (2 * lanes) ? lanes : hn::Lanes(DVTail());
}

// Where a row's query and state live while an item runs.
struct Row {
  const float* q = nullptr;  // [head_dim], pre-scaled (kInt8: quantized)
  float* acc = nullptr;      // [v_head_dim], permuted
  uint64_t lo = 0;           // first visible position (inclusive)
  uint64_t hi = 0;           // one past the last visible position
  float m = 0.0f;            // running max
  float l = 0.0f;            // running sum
  // The integer-product mode (Products::kInt8): the query's scale and 128 * the sum of its
  // int8 elements (WriteInt8QueryRow).
  float q_scale = 0.0f;
  int32_t q_bias = 0;
};

// f(x) for the lanes of x that are numbers, x itself (NaN) for the others. Highway 1.0.3's
// emulated targets (EMU128, SCALAR) convert NaN to int in plain C++ inside Exp and Tanh, which
// is undefined behaviour (clang's -fsanitize=float-cast-overflow stops there): on them, NaN
// lanes enter f as 0. The other targets convert with instructions that define the result.
template <class V, class F>
HWY_INLINE V WhereNumber(V x, const F& f) {
  const auto is_number = hn::Eq(x, x);
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  return hn::IfThenElse(is_number, f(hn::IfThenElseZero(is_number, x)), x);
#else
  return hn::IfThenElse(is_number, f(x), x);
#endif
}

// Turns one row's raw scores of a tile into probabilities in place and updates the row's
// running max and sum; returns the factor the row's accumulators must be multiplied by.
// Lanes outside [lo_off, hi_off] (offsets in the tile) are invisible: their score becomes
// -inf by selection, whatever the slot holds, so they contribute exactly 0. A NaN score of a
// visible lane stays NaN (Exp would flush it to 0) so that NaN in K reaches the output.
// kParts > 1: the row's scores of that many consecutive tiles it sees whole, at parts[0], ...,
// as one softmax step (one max and one correction for all their positions: BlockPairOfTiles).
template <uint64_t kTile, size_t kParts = 1>
HWY_INLINE float SoftmaxRow(float* const* HWY_RESTRICT parts,
                            const int32_t* HWY_RESTRICT lane_offsets, int32_t lo_off,
                            int32_t hi_off, float soft_cap, Row& row) {
  // The row's kTile scores in the widest vectors a tile fills (the softmax does not care
  // which position a lane holds: the lane order of TileShape only numbers them).
  const SureF32<static_cast<size_t>(kTile)> dk;
  constexpr size_t kLanes = hn::MaxLanes(decltype(dk)());
  constexpr size_t kVectors = static_cast<size_t>(kTile) / kLanes;
  const hn::RebindToSigned<decltype(dk)> di;
  using V = hn::Vec<decltype(dk)>;
  const V neg_inf = hn::Set(dk, -std::numeric_limits<float>::infinity());
  const auto lo = hn::Set(di, lo_off - 1);
  const auto hi = hn::Set(di, hi_off + 1);
  const bool full = lo_off == 0 && hi_off == static_cast<int32_t>(kTile) - 1;  // no masking
  KVRING_DASSERT(kParts == 1 || full);
  V max = neg_inf;
  KVRING_UNROLL
  for (size_t i = 0; i < kParts * kVectors; ++i) {
    float* HWY_RESTRICT s = parts[i / kVectors] + i % kVectors * kLanes;
    V x = hn::LoadU(dk, s);
    if (soft_cap > 0.0f) {
      x = WhereNumber(x, [&](V y) {
        return hn::Mul(hn::Set(dk, soft_cap),
                       hn::Tanh(dk, hn::Mul(y, hn::Set(dk, 1.0f / soft_cap))));
      });
    }
    if (!full) {
      const auto offsets = hn::LoadU(di, lane_offsets + i * kLanes);
      const auto visible = hn::RebindMask(dk, hn::And(hn::Gt(offsets, lo), hn::Lt(offsets, hi)));
      x = hn::IfThenElse(visible, x, neg_inf);
    }
    hn::StoreU(x, dk, s);
    max = hn::Max(max, x);
  }
  // Most steps leave the max where it was: then no lane of `max` exceeds it, the reduction
  // could not give more (its result is one of those lanes, or NaN) and is skipped, and the
  // exponentials wait for the scores only, not for the reduction's chain of shuffles.
  float m_new = row.m;
  if (!hn::AllFalse(dk, hn::Gt(max, hn::Set(dk, row.m)))) {
    const float tile_max = hn::GetLane(hn::MaxOfLanes(dk, max));
    m_new = tile_max > row.m ? tile_max : row.m;
  }
  // (exp(0) is exactly 1: most tiles leave the max where it was and skip the call.)
  const float correction = row.m == -std::numeric_limits<float>::infinity() ? 0.0f
                           : m_new == row.m                                 ? 1.0f
                                            : std::exp(row.m - m_new);
  const V vm = hn::Set(dk, m_new);
  V sum = hn::Zero(dk);
  KVRING_UNROLL
  for (size_t i = 0; i < kParts * kVectors; ++i) {
    float* HWY_RESTRICT s = parts[i / kVectors] + i % kVectors * kLanes;
    const V x = hn::Sub(hn::LoadU(dk, s), vm);
    const V p = WhereNumber(x, [&](V y) { return SoftmaxExp(dk, y); });
    hn::StoreU(p, dk, s);
    sum = hn::Add(sum, p);
  }
  row.l = row.l * correction + hn::GetLane(hn::SumOfLanes(dk, sum));
  row.m = m_new;
  return correction;
}
template <uint64_t kTile>
HWY_INLINE float SoftmaxRow(float* HWY_RESTRICT s, const int32_t* HWY_RESTRICT lane_offsets,
                            int32_t lo_off, int32_t hi_off, float soft_cap, Row& row) {
  float* const parts[1] = {s};
  return SoftmaxRow<kTile, 1>(parts, lane_offsets, lo_off, hi_off, soft_cap, row);
}

// One tile of a V pass (AccumulateTile): its V rows, its V scales by offset (int8), the K to
// prefetch meanwhile (PrefetchShape) and the rows' probabilities, kTile apart (one base
// register for every row's broadcasts).
template <typename T>
struct VPart {
  const T* HWY_RESTRICT v;
  const float* HWY_RESTRICT v_scales;
  const T* k_next;
  const float* HWY_RESTRICT p;
};

// acc[r] = acc[r] * correction[r] + sum over the positions of kParts consecutive tiles of
// p[r][pos] * V[pos] for kChunks consecutive chunks of 2 * Lanes(df) dims starting at `dim0`.
// Positions run in chronological order, tile after tile; each dim's sum has the same order
// whatever kChunks is (more chunks at once only give blocks of few rows more independent FMA
// chains). kMasked: one row of one tile, positions outside [lo_off, hi_off] skipped (never
// read: a slot outside the visible range may hold anything, NaN included, and NaN * 0 is NaN).
// v_stride is v_head_dim. T: the stored element, BF16 or int8; for int8 each position's weight
// is p * scale (the design's (p * scale_v) * v_int8).
template <size_t kRows, size_t kChunks, bool kMasked, uint64_t kTile, size_t kParts, class DF,
          typename T>
HWY_INLINE void AccumulateChunks(DF df, size_t dim0, const VPart<T>* parts, size_t v_stride,
                                 const PrefetchShape& ps,
                                 const int32_t* HWY_RESTRICT index_of_offset, float* const* acc,
                                 const float* correction, int32_t lo_off, int32_t hi_off) {
  static_assert(!kMasked || kParts == 1, "a masked pass covers one tile");
  using V = hn::Vec<DF>;
  const size_t lanes = hn::Lanes(df);
  // even_acc, odd_acc: chunk ch of row r at ch * kRows + r.
  VecArray<DF, kChunks * kRows> even_acc, odd_acc;
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    const V c = hn::Set(df, correction[r]);
    KVRING_UNROLL
    for (size_t ch = 0; ch < kChunks; ++ch) {
      const size_t d = dim0 + ch * 2 * lanes;
      even_acc.Set(df, ch * kRows + r, hn::Mul(hn::LoadU(df, acc[r] + d), c));
      odd_acc.Set(df, ch * kRows + r, hn::Mul(hn::LoadU(df, acc[r] + d + lanes), c));
    }
  }
  const int32_t first = kMasked ? lo_off : 0;
  const int32_t last = kMasked ? hi_off : static_cast<int32_t>(kTile) - 1;
  // Each line of the next tile's K once: position `off` stands for V lines off * lines_per_pos
  // and on (its V row's, counted as if V rows started on line boundaries), each V line for
  // `per_line` K lines (PrefetchShape::k_per_v_line; BF16: 1); a chunk that starts a V line
  // prefetches the K lines it stands for, while there are some. The address steps by a fixed
  // amount per position, so the loop adds instead of computing it (the computation, with its
  // multiply and its reloads of the shape, took scalar ops from the ports the FMAs use:
  // measured on Intel AVX-512).
  constexpr size_t kPerLine = 64 / sizeof(T);
  const size_t lines_per_pos = (v_stride + kPerLine - 1) / kPerLine;
  const size_t per_line = sizeof(T) == 1 ? ps.k_per_v_line : 1;
  // (Addresses as integers: past the last line the address is never used, nor formed as a
  // pointer.)
  const uintptr_t line_bytes = ps.k_line_stride * sizeof(T);
  const uintptr_t step = lines_per_pos * per_line * line_bytes;
  for (size_t part = 0; part < kParts; ++part) {
    const T* HWY_RESTRICT v_tile = parts[part].v;
    const float* HWY_RESTRICT v_scales = parts[part].v_scales;
    const float* HWY_RESTRICT p = parts[part].p;
    uintptr_t fetch_at[kChunks];
    // Positions before them prefetch a V line's first K line, and its second (int8).
    int32_t fetch_end[kChunks], second_end[kChunks];
    // The positions whose V line `line` stands for K lines below `lines` (groups of per_line).
    const auto end_for = [&](size_t line, size_t lines) {
      const size_t groups = (lines + per_line - 1) / per_line;
      if (line >= groups) return first;
      const size_t positions = (groups - line + lines_per_pos - 1) / lines_per_pos;
      return positions < static_cast<size_t>(last) + 1 ? static_cast<int32_t>(positions) : last + 1;
    };
    KVRING_UNROLL
    for (size_t ch = 0; ch < kChunks; ++ch) {
      const size_t d = dim0 + ch * 2 * lanes;
      const size_t line = d / kPerLine;
      const bool starts = d % kPerLine == 0;
      fetch_end[ch] = starts ? end_for(line, ps.k_lines) : first;
      // (A second line exists for the groups below k_lines / 2.)
      second_end[ch] = starts && per_line == 2 ? end_for(line, ps.k_lines / 2 * 2) : first;
      fetch_at[ch] = reinterpret_cast<uintptr_t>(parts[part].k_next) +
                     (static_cast<size_t>(first) * lines_per_pos + line) * per_line * line_bytes;
    }
    for (int32_t off = first; off <= last; ++off) {
      const T* HWY_RESTRICT v_row = v_tile + static_cast<size_t>(off) * v_stride + dim0;
      const size_t index = static_cast<size_t>(index_of_offset[off]);
      KVRING_UNROLL
      for (size_t ch = 0; ch < kChunks; ++ch) {
        if (off < fetch_end[ch]) PrefetchLine(reinterpret_cast<const T*>(fetch_at[ch]), ps.to_l2);
        if constexpr (sizeof(T) == 1) {
          if (off < second_end[ch]) {
            PrefetchLine(reinterpret_cast<const T*>(fetch_at[ch] + line_bytes), ps.to_l2);
          }
        }
        fetch_at[ch] += step;
      }
      VecArray<DF, kRows> pr;
      KVRING_UNROLL
      for (size_t r = 0; r < kRows; ++r) {
        pr.Set(df, r, hn::Set(df, ElementKernel<T>::Weight(p[r * kTile + index], v_scales, off)));
      }
      KVRING_UNROLL
      for (size_t ch = 0; ch < kChunks; ++ch) {
        V even, odd;
        ElementKernel<T>::Load(df, v_row + ch * 2 * lanes, even, odd);
        KVRING_UNROLL
        for (size_t r = 0; r < kRows; ++r) {
          const size_t i = ch * kRows + r;
          even_acc.Set(df, i, hn::MulAdd(pr.Get(df, r), even, even_acc.Get(df, i)));
          odd_acc.Set(df, i, hn::MulAdd(pr.Get(df, r), odd, odd_acc.Get(df, i)));
        }
      }
    }
  }
  KVRING_UNROLL
  for (size_t r = 0; r < kRows; ++r) {
    KVRING_UNROLL
    for (size_t ch = 0; ch < kChunks; ++ch) {
      const size_t d = dim0 + ch * 2 * lanes;
      hn::StoreU(even_acc.Get(df, ch * kRows + r), df, acc[r] + d);
      hn::StoreU(odd_acc.Get(df, ch * kRows + r), df, acc[r] + d + lanes);
    }
  }
}

// The V pass of kRows rows over kParts consecutive tiles (AccumulateChunks), chunk by chunk.
template <size_t kRows, bool kMasked, uint64_t kTile, size_t kParts, typename T>
HWY_INLINE void AccumulateParts(const VPart<T>* parts, size_t v_stride, const PrefetchShape& ps,
                                size_t v_head_dim, const int32_t* HWY_RESTRICT index_of_offset,
                                float* const* acc, const float* correction, int32_t lo_off,
                                int32_t hi_off) {
  // Chunks at once: enough FMA chains (2 per row and chunk), within the registers; blocks of
  // one or two rows take all the registers allow, so that each position's p is broadcast
  // once per wider pass (measured: decode GQA 2 0.96-0.99 of the time with AtOnce's chunks).
  constexpr size_t kMaxChunks = kScoreRegisters >= 20 ? 4 : 2;
  constexpr size_t kWide =
      kRows <= 2 || AtOnce(2 * kRows) >= kMaxChunks ? kMaxChunks : AtOnce(2 * kRows);
  const DV dv;
  const size_t chunk = 2 * hn::Lanes(dv);
  size_t dim0 = 0;
  for (; dim0 + kWide * chunk <= v_head_dim; dim0 += kWide * chunk) {
    AccumulateChunks<kRows, kWide, kMasked, kTile, kParts>(
        dv, dim0, parts, v_stride, ps, index_of_offset, acc, correction, lo_off, hi_off);
  }
  for (; dim0 + chunk <= v_head_dim; dim0 += chunk) {
    AccumulateChunks<kRows, 1, kMasked, kTile, kParts>(
        dv, dim0, parts, v_stride, ps, index_of_offset, acc, correction, lo_off, hi_off);
  }
  const DVTail dt;
  const size_t tail_chunk = 2 * hn::Lanes(dt);
  for (; dim0 + tail_chunk <= v_head_dim; dim0 += tail_chunk) {
    AccumulateChunks<kRows, 1, kMasked, kTile, kParts>(
        dt, dim0, parts, v_stride, ps, index_of_offset, acc, correction, lo_off, hi_off);
  }
}

// The V pass of kRows rows over one tile (AccumulateParts of one part). kMasked: one row,
// positions outside [lo_off, hi_off] skipped. `p`: the rows' probabilities, kTile apart.
template <size_t kRows, bool kMasked, uint64_t kTile, typename T>
HWY_INLINE void AccumulateTile(const T* HWY_RESTRICT v_tile, const float* HWY_RESTRICT v_scales,
                               size_t v_stride, const T* k_next, const PrefetchShape& ps,
                               size_t v_head_dim, const float* HWY_RESTRICT p,
                               const int32_t* HWY_RESTRICT index_of_offset, float* const* acc,
                               const float* correction, int32_t lo_off, int32_t hi_off) {
  const VPart<T> part[1] = {{v_tile, v_scales, k_next, p}};
  AccumulateParts<kRows, kMasked, kTile, 1>(part, v_stride, ps, v_head_dim, index_of_offset, acc,
                                            correction, lo_off, hi_off);
}

// Writes one output row from a row's merged state (max m, sum l, acc in `order`): divides by
// the softmax denominator, after adding the sink's exp(sink - max) to it when there is one.
HWY_INLINE void FinalizeRow(float m, float l, const float* acc, const float* sink,
                            size_t v_head_dim, float* tmp, float* out_f32, BF16* out_bf16,
                            AccOrder order) {
  float factor = 1.0f;
  if (sink != nullptr) {
    const float m_new = *sink > m ? *sink : m;
    factor = m == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m - m_new);
    l = l * factor + std::exp(*sink - m_new);
  }
  const float scale = l != 0.0f ? factor / l : 0.0f;
  float* dst = out_f32 != nullptr ? out_f32 : tmp;
  if (order == AccOrder::kNatural) {
    for (size_t dim = 0; dim < v_head_dim; ++dim) dst[dim] = acc[dim] * scale;
  } else {
    // Chunk by chunk: its even dims, then its odd dims.
    for (size_t begin = 0; begin < v_head_dim;) {
      const size_t n = PermutedChunkLanes(begin, v_head_dim);
      for (size_t i = 0; i < n; ++i) {
        dst[begin + 2 * i] = acc[begin + i] * scale;
        dst[begin + 2 * i + 1] = acc[begin + n + i] * scale;
      }
      begin += 2 * n;
    }
  }
  if (out_bf16 != nullptr) F32ToBF16(tmp, out_bf16, v_head_dim);
}

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_SOFTMAX_INL_H_
