// kvring/formats/hadamard.h: the rotation of Format::kInt8Hadamard. A K row of one kv_head is
// rotated by the orthonormal Hadamard transform before it is encoded as int8, so that a few
// channels many times larger than the others (the shape real K caches have) spread over the
// whole row instead of setting its scale; attention rotates each query row the same way, and
// since the transform is orthonormal, q.k is unchanged. Portable scalar code, the same
// operations in the same order on every CPU and compiler (additions, subtractions and one
// multiply: nothing a compiler may contract), so storage and every kernel target agree bit
// for bit. No Highway.
#ifndef KVRING_FORMATS_HADAMARD_H_
#define KVRING_FORMATS_HADAMARD_H_

#include <cmath>
#include <cstddef>

namespace kvring {

// Returns the length of the blocks RotateHadamard works in for a row of `n` elements: the
// largest power of two dividing n (n itself for 64, 128, 256, 512; 64 for 192 and 576; 32 for
// 96), 0 for n = 0.
inline size_t HadamardBlock(size_t n) { return n & (~n + 1); }

// Rotates x[0, n) in place: each block of HadamardBlock(n) elements is multiplied by the
// Sylvester-Hadamard matrix of that order divided by the square root of the order (a fast
// Walsh-Hadamard transform, block * log2(block) additions and subtractions, then one
// multiply per element). The matrix is orthonormal and symmetric, so the transform is its own
// inverse: rotating twice gives x back up to rounding. T is float (storage, kernels) or double
// (references).
template <typename T>
inline void RotateHadamard(T* x, size_t n) {
  const size_t block = HadamardBlock(n);
  if (block < 2) return;
  const T norm = T{1} / std::sqrt(static_cast<T>(block));
  for (size_t first = 0; first < n; first += block) {
    T* b = x + first;
    for (size_t half = 1; half < block; half *= 2) {
      for (size_t i = 0; i < block; i += 2 * half) {
        for (size_t j = i; j < i + half; ++j) {
          const T a = b[j], c = b[j + half];
          b[j] = a + c;
          b[j + half] = a - c;
        }
      }
    }
    for (size_t i = 0; i < block; ++i) b[i] *= norm;
  }
}

}  // namespace kvring

#endif  // KVRING_FORMATS_HADAMARD_H_
