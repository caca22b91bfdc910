// The per-target attention of tests/attention_tile_heights.h: TiledLayout<8> (half a 256-bit K
// vector) and TiledLayout<32>, compiled for every Highway target attention_test.cc compiles.
#include <cstdint>

// Compile AVX3_DL (AVX-512 with BF16/VNNI) too, as attention_test.cc does.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/attention_tile_heights.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kvring/ops/attention-inl.h"
#include "reference/started_threads.h"

HWY_BEFORE_NAMESPACE();
namespace kvring_test {
namespace HWY_NAMESPACE {

void Tiled8Attention(const kvring::KVView<kvring::TiledLayout<8>>& kv,
                     const kvring::AttentionBatch& batch, const kvring::AttentionOptions& options) {
  kvring_testing::ExpectAttended(kvring::HWY_NAMESPACE::Attention(kv, batch, options));
}
void Tiled32Attention(const kvring::KVView<kvring::TiledLayout<32>>& kv,
                      const kvring::AttentionBatch& batch,
                      const kvring::AttentionOptions& options) {
  kvring_testing::ExpectAttended(kvring::HWY_NAMESPACE::Attention(kv, batch, options));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring_test
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "attention_tile_heights.h"

namespace kvring_test {
HWY_EXPORT(Tiled8Attention);
HWY_EXPORT(Tiled32Attention);

void RunTiled(const kvring::KVView<kvring::TiledLayout<8>>& kv, const kvring::AttentionBatch& batch,
              const kvring::AttentionOptions& options) {
  HWY_DYNAMIC_DISPATCH(Tiled8Attention)(kv, batch, options);
}
void RunTiled(const kvring::KVView<kvring::TiledLayout<32>>& kv,
              const kvring::AttentionBatch& batch, const kvring::AttentionOptions& options) {
  HWY_DYNAMIC_DISPATCH(Tiled32Attention)(kv, batch, options);
}

}  // namespace kvring_test
#endif  // HWY_ONCE
