// Dynamic dispatch of kvring's attention kernels in one line: including
// kvring/ops/dispatch_unit.h compiles them for every Highway target in this translation unit
// (the one unit of the program that does), and kvring::Attention of kvring/dispatch.h runs the
// best one the CPU supports. Programs that would rather link than compile Highway code link
// kvring::kernels instead. Static dispatch (include kvring/ops/attention-inl.h and call
// kvring::HWY_NAMESPACE::Attention) compiles only the target of the compiler flags: SCALAR
// under default flags.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kvring/dispatch.h"
#include "kvring/kvring.h"
#include "kvring/ops/dispatch_unit.h"  // before any other Highway header

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
  batch.head_dim = kDim;
  kvring::AttentionWorkspace workspace;  // reused by every call; grows on the first
  const kvring::Result result =
      kvring::Attention(view, batch, kvring::AttentionOptions(), workspace);
  if (!result.ok()) {
    std::fprintf(stderr, "attention refused: %s\n", result.Message().c_str());
    return 1;
  }
  // A query whose K/V was never appended is refused with a message, and writes nothing.
  batch.first_q_pos = 200;
  const kvring::Result refused =
      kvring::Attention(view, batch, kvring::AttentionOptions(), workspace);
  std::printf("target %s: out[0][0] = %f; a query at 200: %s\n", kvring::DispatchedTargetName(),
              static_cast<double>(out[0]), refused.Message().c_str());
  return std::isfinite(out[0]) && refused.status() == kvring::Status::kNotLive ? 0 : 1;
}
