// Dynamic dispatch of the mini engine's own vector code: foreach_target compiles this
// translation unit once per Highway target, HWY_EXPORT tables the per-target functions and the
// plain functions at the end call the best one the CPU supports. (kvring's attention needs no
// such unit: the engine links kvring::kernels.)
#include <cstddef>

// Highway 1.0.3 compiles AVX-512 with BF16/VNNI (AVX3_DL) only on request.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
// foreach_target re-includes this file once per target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mini_engine/kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "mini_engine/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace mini_engine {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A plain (non-template) function, which HWY_EXPORT can name.
void MatMulTarget(const float* HWY_RESTRICT x, size_t num_tokens, size_t num_rows,
                  const float* HWY_RESTRICT w, size_t num_cols, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  // Tokens in groups of four share each loaded row of w (the weights dominate the traffic).
  constexpr size_t kGroup = 4;
  for (size_t t0 = 0; t0 < num_tokens; t0 += kGroup) {
    const size_t group = num_tokens - t0 < kGroup ? num_tokens - t0 : kGroup;
    for (size_t col = 0; col < num_cols; col += lanes) {
      auto acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
      for (size_t row = 0; row < num_rows; ++row) {
        const auto w_row = hn::LoadU(d, w + row * num_cols + col);
        const float* x_row = x + t0 * num_rows + row;
        acc0 = hn::MulAdd(hn::Set(d, x_row[0]), w_row, acc0);
        if (group > 1) acc1 = hn::MulAdd(hn::Set(d, x_row[num_rows]), w_row, acc1);
        if (group > 2) acc2 = hn::MulAdd(hn::Set(d, x_row[2 * num_rows]), w_row, acc2);
        if (group > 3) acc3 = hn::MulAdd(hn::Set(d, x_row[3 * num_rows]), w_row, acc3);
      }
      float* out_col = out + t0 * num_cols + col;
      hn::StoreU(acc0, d, out_col);
      if (group > 1) hn::StoreU(acc1, d, out_col + num_cols);
      if (group > 2) hn::StoreU(acc2, d, out_col + 2 * num_cols);
      if (group > 3) hn::StoreU(acc3, d, out_col + 3 * num_cols);
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace mini_engine
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mini_engine {

HWY_EXPORT(MatMulTarget);

void MatMul(const float* x, size_t num_tokens, size_t num_rows, const float* w, size_t num_cols,
            float* out) {
  HWY_DYNAMIC_DISPATCH(MatMulTarget)(x, num_tokens, num_rows, w, num_cols, out);
}

const char* TargetName() { return hwy::TargetName(hwy::SupportedAndGeneratedTargets()[0]); }

}  // namespace mini_engine
#endif  // HWY_ONCE
