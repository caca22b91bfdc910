// Dynamic dispatch of kvring's attention kernels: this one translation unit compiles them for
// every Highway target (foreach_target), exports a wrapper, and calls the best one the CPU
// supports at run time. Static dispatch is simpler (include kvring/ops/attention-inl.h and call
// kvring::HWY_NAMESPACE::Attention), but compiles only the target of the compiler flags:
// SCALAR under default flags.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

// Highway 1.0.3 compiles AVX-512 with BF16/VNNI (AVX3_DL) only on request.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
// foreach_target re-includes this file once per target; it must come before any kvring
// -inl.h header.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "dynamic_dispatch.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kvring/ops/attention-inl.h"

// Per-target wrappers: plain (non-template) functions, which HWY_EXPORT can name.
HWY_BEFORE_NAMESPACE();
namespace example {
namespace HWY_NAMESPACE {

void FlashAttention(const kvring::KVView<kvring::FlashLayout>& kv,
                    const kvring::AttentionBatch& batch, const kvring::AttentionOptions& options) {
  kvring::HWY_NAMESPACE::Attention(kv, batch, options);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace example
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace example {
HWY_EXPORT(FlashAttention);  // the table of every target's FlashAttention
}  // namespace example

int main() {
  // One sliding-window layer (window 64), 2 kv_heads of 64 dims, 8 q heads, in a 96-slot ring
  // that has wrapped: positions 104 .. 199 are held.
  constexpr uint32_t kKVHeads = 2, kDim = 64, kQHeads = 8;
  kvring::KVShape shape;
  shape.num_slots = 96;
  shape.num_kv_heads = kKVHeads;
  shape.head_dim = kDim;
  shape.v_head_dim = kDim;
  const kvring::FlashLayout layout(shape);
  std::vector<kvring::BF16> k(layout.K().RequiredSpanSize()), v(layout.V().RequiredSpanSize());
  for (uint64_t pos = 104; pos < 200; ++pos) {
    for (uint32_t h = 0; h < kKVHeads; ++h) {
      for (uint32_t d = 0; d < kDim; ++d) {
        const uint64_t slot = pos % shape.num_slots;
        k[layout.K()(slot, h, d)] =
            kvring::BF16FromF32(std::sin(0.1f * static_cast<float>(pos + d + h)));
        v[layout.V()(slot, h, d)] =
            kvring::BF16FromF32(std::cos(0.05f * static_cast<float>(pos * d)));
      }
    }
  }
  kvring::KVView<kvring::FlashLayout> view;
  view.k = k.data();
  view.v = v.data();
  view.layout = layout;
  view.first_pos = 104;
  view.end_pos = 200;
  view.visibility = kvring::Visibility{kvring::AttentionKind::kSliding, 64};

  // Decode the query at position 199.
  std::vector<float> q(kQHeads * kDim, 0.25f), out(kQHeads * kDim);
  kvring::AttentionBatch batch;
  batch.queries_f32 = q.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = 199;
  batch.num_queries = 1;
  batch.num_q_heads = kQHeads;
  HWY_DYNAMIC_DISPATCH(example::FlashAttention)(view, batch, kvring::AttentionOptions());
  // The best compiled target this CPU supports is the one dispatched to.
  std::printf("target %s: out[0][0] = %f\n",
              hwy::TargetName(hwy::SupportedAndGeneratedTargets()[0]), static_cast<double>(out[0]));
  return std::isfinite(out[0]) ? 0 : 1;
}
#endif  // HWY_ONCE
