// kvring/ops/bf16_convert-inl.h: vectorised f32 -> BF16 conversion with round to nearest even
// (NaN stays NaN), bit-identical to kvring::BF16FromF32, for engines that write K/V (or read
// BF16 attention output) from f32 rows. Highway per-target code: include it after hwy/highway.h's
// foreach_target.h in a dispatch unit, or include and call it (static dispatch).
// Highway 1.0.3's DemoteTo(bf16 <- f32) truncates, hence the integer rounding here.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_BF16_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_BF16_CONVERT_INL_H_
#undef KVRING_OPS_BF16_CONVERT_INL_H_
#else
#define KVRING_OPS_BF16_CONVERT_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "kvring/bf16.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// Returns the f32 bit patterns `bits` rounded to BF16 (BF16FromF32) in the upper half of each
// lane, the lower half zero: as f32, the BF16 value itself. Round to nearest even, NaN
// quieted with its sign and top payload kept.
template <class DU>
HWY_INLINE hn::Vec<DU> RoundedToBF16Bits(DU du, hn::Vec<DU> bits) {
  const hn::RebindToSigned<DU> di;
  const auto upper = hn::ShiftRight<16>(bits);
  const auto rounded =
      hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(upper, hn::Set(du, 1u))));
  const auto is_nan = hn::Gt(hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7FFFFFFFu))),
                             hn::BitCast(di, hn::Set(du, 0x7F800000u)));
  return hn::And(
      hn::IfThenElse(hn::RebindMask(du, is_nan), hn::Or(bits, hn::Set(du, 0x00400000u)), rounded),
      hn::Set(du, 0xFFFF0000u));
}
#endif

// Writes `out[i] = BF16FromF32(in[i])` for i < count: round to nearest even, NaN quieted
// with its sign and top payload kept. In and out may be unaligned and must not overlap.
// Does not allocate; one pass over the data.
static inline HWY_MAYBE_UNUSED void F32ToBF16(const float* HWY_RESTRICT in, BF16* HWY_RESTRICT out,
                                              size_t count) {
#if HWY_TARGET == HWY_SCALAR
  for (size_t i = 0; i < count; ++i) out[i] = BF16FromF32(in[i]);
#else
  const hn::ScalableTag<uint32_t> du32;
  const hn::Rebind<uint16_t, decltype(du32)> du16;
  const hn::RebindToSigned<decltype(du32)> di32;
  const size_t num_lanes = hn::Lanes(du32);
  size_t i = 0;
  for (; i + num_lanes <= count; i += num_lanes) {
    const auto bits = hn::LoadU(du32, reinterpret_cast<const uint32_t*>(in + i));
    const auto result = hn::ShiftRight<16>(RoundedToBF16Bits(du32, bits));
    // Every lane is below 0x10000, so the saturating demotion keeps it exactly.
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, result)), du16,
               reinterpret_cast<uint16_t*>(out + i));
  }
  for (; i < count; ++i) out[i] = BF16FromF32(in[i]);
#endif
}

// Rounds `x[i]` to its BF16 value in place (BF16ToF32(BF16FromF32(x[i]))) for i < count.
static HWY_INLINE HWY_MAYBE_UNUSED void RoundToBF16InPlace(float* HWY_RESTRICT x, size_t count) {
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<uint32_t> du32;
  const size_t num_lanes = hn::Lanes(du32);
  uint32_t* bits = reinterpret_cast<uint32_t*>(x);
  for (; i + num_lanes <= count; i += num_lanes) {
    hn::StoreU(RoundedToBF16Bits(du32, hn::LoadU(du32, bits + i)), du32, bits + i);
  }
#endif
  for (; i < count; ++i) x[i] = BF16ToF32(BF16FromF32(x[i]));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_BF16_CONVERT_INL_H_
