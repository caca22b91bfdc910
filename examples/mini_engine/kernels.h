// The mini engine's vector code, compiled for every Highway target in kernels.cc and chosen at
// run time (dynamic dispatch): kvring's attention over either layout, and the matrix product of
// the model's projections. Plain declarations: the rest of the engine needs no Highway header.
#ifndef KVRING_EXAMPLES_MINI_ENGINE_KERNELS_H_
#define KVRING_EXAMPLES_MINI_ENGINE_KERNELS_H_

#include <cstddef>

#include "kvring/attention.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/thread_pool.h"

namespace mini_engine {

// The tiled layout the example uses: tiles of 16 rows.
using Tiled = kvring::TiledLayout<16>;

// Runs kvring's attention of `batch` over `kv` on the best target the CPU supports, on the
// threads of `pool`.
void Attend(const kvring::KVView<kvring::FlashLayout>& kv, const kvring::AttentionBatch& batch,
            const kvring::AttentionOptions& options, kvring::ThreadPool& pool);
void Attend(const kvring::KVView<Tiled>& kv, const kvring::AttentionBatch& batch,
            const kvring::AttentionOptions& options, kvring::ThreadPool& pool);

// Writes out[t][col] = sum over row of x[t][row] * w[row][col], for t < num_tokens, adding
// rows in order so that a token's result does not depend on the batch it is in.
// x: [num_tokens][num_rows], w: [num_rows][num_cols], out: [num_tokens][num_cols];
// num_cols a multiple of 16. Does not allocate.
void MatMul(const float* x, size_t num_tokens, size_t num_rows, const float* w, size_t num_cols,
            float* out);

// Returns the name of the Highway target the calls above run on ("AVX3_DL", "AVX2", ...).
const char* TargetName();

}  // namespace mini_engine

#endif  // KVRING_EXAMPLES_MINI_ENGINE_KERNELS_H_
