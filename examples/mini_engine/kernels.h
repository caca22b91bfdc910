// The mini engine's own vector code, compiled for every Highway target in kernels.cc and chosen
// at run time (dynamic dispatch): the matrix product of the model's projections. kvring's
// attention comes from kvring/dispatch.h (the engine links kvring::kernels). Plain
// declarations: the rest of the engine needs no Highway header.
#ifndef KVRING_EXAMPLES_MINI_ENGINE_KERNELS_H_
#define KVRING_EXAMPLES_MINI_ENGINE_KERNELS_H_

#include <cstddef>

#include "kvring/layouts/tiled_layout.h"

namespace mini_engine {

// The tiled layout the example uses: tiles of 16 rows.
using Tiled = kvring::TiledLayout<16>;

// Writes out[t][col] = sum over row of x[t][row] * w[row][col], for t < num_tokens, adding
// rows in order so that a token's result does not depend on the batch it is in.
// x: [num_tokens][num_rows], w: [num_rows][num_cols], out: [num_tokens][num_cols];
// num_cols a multiple of 16. Does not allocate.
void MatMul(const float* x, size_t num_tokens, size_t num_rows, const float* w, size_t num_cols,
            float* out);

// Returns the name of the Highway target MatMul runs on ("AVX3_DL", "AVX2", ...).
const char* TargetName();

}  // namespace mini_engine

#endif  // KVRING_EXAMPLES_MINI_ENGINE_KERNELS_H_
