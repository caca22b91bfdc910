// tests/attention_tile_heights.h: attention over TiledLayout<8> and TiledLayout<32> views by
// dynamic dispatch, for the tile-height tests of attention_test.cc. Defined per Highway target in
// attention_tile_heights.cc, a translation unit (and CMake object library) of its own: the
// kernels of these two layouts compile there while kvring::kernels compiles those of
// FlashLayout and TiledLayout<16>.
#ifndef KVRING_TESTS_ATTENTION_TILE_HEIGHTS_H_
#define KVRING_TESTS_ATTENTION_TILE_HEIGHTS_H_

#include "kvring/attention.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/tiled_layout.h"

namespace kvring_test {

// Runs attention on the calling thread with the target dispatch chooses (or the one a test pins
// with hwy::SetSupportedTargetsForTest); fails the calling test if the call is refused.
void RunTiled(const kvring::KVView<kvring::TiledLayout<8>>& kv, const kvring::AttentionBatch& batch,
              const kvring::AttentionOptions& options);
void RunTiled(const kvring::KVView<kvring::TiledLayout<32>>& kv,
              const kvring::AttentionBatch& batch, const kvring::AttentionOptions& options);

}  // namespace kvring_test

#endif  // KVRING_TESTS_ATTENTION_TILE_HEIGHTS_H_
