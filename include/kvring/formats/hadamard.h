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

namespace detail {

// The stages of one block's transform whose pairs lie less than `end_half` apart (1, 2, 4,
// ... below end_half; every stage for end_half >= block), in place: RotateHadamard's, and
// the kernels' before they take the wider stages in vectors (the same additions on every
// element, so the same bits).
template <typename T>
inline void HadamardStagesBelow(T* b, size_t block, size_t end_half) {
  size_t half = 1;
  if (block >= 8 && end_half >= 8) {
    // The first three stages (pairs 1, 2 and 4 apart) in registers, 8 elements at a time:
    // the same additions in the same order as the loop below, without its short inner
    // loops, which compilers do not vectorise.
    for (size_t i = 0; i < block; i += 8) {
      T* e = b + i;
      const T c0 = e[0] + e[1], c1 = e[0] - e[1], c2 = e[2] + e[3], c3 = e[2] - e[3];
      const T c4 = e[4] + e[5], c5 = e[4] - e[5], c6 = e[6] + e[7], c7 = e[6] - e[7];
      const T d0 = c0 + c2, d2 = c0 - c2, d1 = c1 + c3, d3 = c1 - c3;
      const T d4 = c4 + c6, d6 = c4 - c6, d5 = c5 + c7, d7 = c5 - c7;
      e[0] = d0 + d4;
      e[4] = d0 - d4;
      e[1] = d1 + d5;
      e[5] = d1 - d5;
      e[2] = d2 + d6;
      e[6] = d2 - d6;
      e[3] = d3 + d7;
      e[7] = d3 - d7;
    }
    half = 8;
  }
  for (; half < block && half < end_half; half *= 2) {
    for (size_t i = 0; i < block; i += 2 * half) {
      T* lo = b + i;
      T* hi = b + i + half;
      for (size_t j = 0; j < half; ++j) {
        const T a = lo[j], c = hi[j];
        lo[j] = a + c;
        hi[j] = a - c;
      }
    }
  }
}

}  // namespace detail

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
    detail::HadamardStagesBelow(b, block, block);
    for (size_t i = 0; i < block; ++i) b[i] *= norm;
  }
}

}  // namespace kvring

#endif  // KVRING_FORMATS_HADAMARD_H_
