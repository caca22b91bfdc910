// kvring/ops/softmax_exp-inl.h: exp of the online softmax's lanes (SoftmaxExp), per target.
// Internal to kvring/ops/attention-inl.h (namespace attention_internal); tests compare it with
// Highway's Exp on every target.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_SOFTMAX_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_SOFTMAX_EXP_INL_H_
#undef KVRING_OPS_SOFTMAX_EXP_INL_H_
#else
#define KVRING_OPS_SOFTMAX_EXP_INL_H_
#endif

#include "hwy/highway.h"

// After highway.h: per-target helpers this file uses.
#include "hwy/contrib/math/math-inl.h"

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Rounding toward zero as a float (vrndscaleps), and a * 2^e (vscalefps), at the three vector
// widths of the AVX-512 targets.
HWY_INLINE __m512 TruncateF32(__m512 v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
HWY_INLINE __m256 TruncateF32(__m256 v) {
  return _mm256_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
HWY_INLINE __m128 TruncateF32(__m128 v) {
  return _mm_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
HWY_INLINE __m512 ScaleF32(__m512 a, __m512 e) { return _mm512_scalef_ps(a, e); }
HWY_INLINE __m256 ScaleF32(__m256 a, __m256 e) { return _mm256_scalef_ps(a, e); }
HWY_INLINE __m128 ScaleF32(__m128 a, __m128 e) { return _mm_scalef_ps(a, e); }
#endif

// exp(x) for the softmax's lanes (x <= 0, -inf or NaN). On the AVX-512 targets it is Highway
// 1.0.3's Exp (hwy/contrib/math: the same reduction by ln 2 in two parts, then its own
// ExpPoly) with a shorter chain at both ends: the quotient q truncated as a float (vrndscaleps,
// not a conversion to int32 and back) and 2^q applied by vscalefps (not two integer shifts and
// two multiplies). Both round (poly + 1) * 2^q once, so the bits are Exp's for every x up to 88
// (compared for every float; above it Exp's own range ends). The softmax waits for this chain
// before the V pass can start. Other targets call Exp.
template <class D, class V>
HWY_INLINE V SoftmaxExp(D d, V x) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  const V half_away = hn::Or(hn::Set(d, 0.5f), hn::And(x, hn::Set(d, -0.0f)));
  const V q{TruncateF32(hn::MulAdd(x, hn::Set(d, 1.442695040888963407359924681f), half_away).raw)};
  V r = hn::MulAdd(q, hn::Set(d, -0.693145751953125f), x);
  r = hn::MulAdd(q, hn::Set(d, -1.428606765330187045e-6f), r);
  // Highway's own polynomial (its Exp's, called as Exp calls it).
  const V y = hn::Add(hn::impl::ExpImpl<float>().ExpPoly(d, r), hn::Set(d, 1.0f));
  return hn::IfThenElseZero(hn::Ge(x, hn::Set(d, -104.0f)), V{ScaleF32(y.raw, q.raw)});
#else
  return hn::Exp(d, x);
#endif
}

}  // namespace attention_internal
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_SOFTMAX_EXP_INL_H_
