// kvring/ops/target_vectors-inl.h: what kvring's kernels may assume of the current target's
// vectors. How many f32 lanes every CPU of the target has (a capped descriptor's lane count
// is a compile-time constant only up to there), and arrays of vectors, which the sizeless
// vectors of scalable targets (SVE, SVE2) cannot form. Internal to
// kvring/ops/attention-inl.h (namespace attention_internal).

#ifndef KVRING_UNROLL
#include "hwy/base.h"
// Unrolls the loop it precedes completely, at every optimisation level: the kernels' loops over
// a block's rows, vectors, chunks, tiles and parts, whose counts are small constants, so that
// the VecArrays they index stay in registers. g++ unrolls such loops only at -O3
// (-fpeel-loops); at -O2 (CMake's RelWithDebInfo) it kept the accumulators in memory, a load
// and a store around every FMA, and BF16 and exact int8 decode took 2.1-2.8x the time.
#define KVRING_UNROLL HWY_UNROLL(64)
#endif

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_TARGET_VECTORS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_TARGET_VECTORS_INL_H_
#undef KVRING_OPS_TARGET_VECTORS_INL_H_
#else
#define KVRING_OPS_TARGET_VECTORS_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// f32 lanes that every CPU running this target has. Fixed-width targets: all of the full
// vector (SVE_256 and SVE2_128 run only where the vector length is theirs). SVE and SVE2 run
// on any vector length from 128 to 2048 bits, and MaxLanes gives the 2048-bit limit, not the
// CPU's: a CappedTag<float, 8> may hold 4 lanes there. Kernels that lay out a tile by lane
// count cap their descriptors here (SureF32<N>).
#if HWY_HAVE_SCALABLE && HWY_MAX_BYTES > 32
static constexpr size_t kSureLanesF32 = 16 / sizeof(float);
#else
static constexpr size_t kSureLanesF32 = hn::MaxLanes(hn::ScalableTag<float>());
#endif

// An f32 descriptor of min(kN, kSureLanesF32) lanes on every CPU of the target: its MaxLanes
// is its Lanes.
template <size_t kN>
using SureF32 = hn::CappedTag<float, (kN < kSureLanesF32 ? kN : kSureLanesF32)>;

// kN vectors of descriptor D, indexed: on fixed-width targets an array of vectors (registers,
// once the loops using it unroll); on scalable targets, whose vectors are sizeless and cannot
// be array elements, aligned memory that each Get loads and each Set stores. The same
// arithmetic on either, so the results are the same bits.
template <class D, size_t kN>
class VecArray {
 public:
  using V = hn::Vec<D>;
  // Every vector set to v. Unrolled: GCC 12 made the loop a memset of the array (a 1 KiB `rep
  // stos` per scored tile), a store nobody read once the vectors were registers.
  HWY_INLINE void SetAll(D d, V v) {
    _Pragma("GCC unroll 64") for (size_t i = 0; i < kN; ++i) Set(d, i, v);
  }
#if HWY_HAVE_SCALABLE
  HWY_INLINE V Get(D d, size_t i) const { return hn::Load(d, lanes_ + i * kStride); }
  HWY_INLINE void Set(D d, size_t i, V v) { hn::Store(v, d, lanes_ + i * kStride); }

 private:
  static constexpr size_t kStride = hn::MaxLanes(D());
  HWY_ALIGN hn::TFromD<D> lanes_[kN * kStride];
#else
  // Declared, so that it has the target's attributes (an implicit one would not, and may not
  // call the vectors' always-inlined constructors on aarch64).
  HWY_INLINE VecArray() {}
  HWY_INLINE V Get(D /*d*/, size_t i) const { return v_[i]; }
  HWY_INLINE void Set(D /*d*/, size_t i, V v) { v_[i] = v; }

 private:
  V v_[kN];
#endif
};

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_TARGET_VECTORS_INL_H_
