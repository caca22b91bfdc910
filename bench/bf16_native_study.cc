// What a native AVX512-BF16 q . k (vdpbf16ps) would gain over the kernels' widening path, at
// the kernels' accuracy. Scores one flash tile (32 slots of K as [dim][slot], 128 dims) for R
// query rows, the tile in L1 (decode from the L3 or memory only adds loads both paths share):
// - widen: each BF16 K vector widened to f32 by a shift and a mask, one f32 FMA per row and
//   dim (the kernels' path, ops/attention-inl.h);
// - native hi+lo: dims d and d + 1 interleaved per slot (two unpacks per dim pair), q split
//   into a BF16 high part and a BF16 low part (q - high), two vdpbf16ps per row and dim pair
//   (same accuracy class as f32: the products of BF16 values are exact in f32);
// - native lossy: q rounded to BF16, one vdpbf16ps per row and dim pair (the speed the
//   rounding would buy; bf16_rounding_study measures its error, over the 1e-3 tolerance).
// Prints ns per tile, each native variant's time over the widening path's, and the normwise
// relative error of the scores against float64.
//
//   build/release/bench/kvring_bf16_native_study
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kvring/bf16.h"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#include <immintrin.h>
#define KVRING_STUDY_X86 1
#endif

namespace {

#ifdef KVRING_STUDY_X86

constexpr int kDims = 128;
constexpr int kSlots = 32;
constexpr int kStride = 4128;  // slots between two dims, as a flash ring of 4128 slots
constexpr int kTiles = 2;      // tiles cycled through (32 KiB of K: in L1)

#define KVRING_STUDY_WIDEN __attribute__((target("avx512f,avx512bw"), noinline))
#define KVRING_STUDY_NATIVE __attribute__((target("avx512f,avx512bw,avx512bf16"), noinline))

// kSplit interleaved partial sums per row (enough FMA chains for R rows, within registers).
template <int R, int kSplit>
KVRING_STUDY_WIDEN void Widen(const uint16_t* k, const float* q, float* out, int tiles) {
  for (int t = 0; t < tiles; ++t) {
    const uint16_t* tile = k + (t % kTiles) * kSlots;
    __m512 acc[kSplit][R][2];
    for (auto& s : acc)
      for (auto& r : s) r[0] = r[1] = _mm512_setzero_ps();
    for (int d0 = 0; d0 < kDims; d0 += kSplit) {
      for (int s = 0; s < kSplit; ++s) {
        const __m512i bits = _mm512_loadu_si512(tile + (d0 + s) * kStride);
        // (The maskz form: GCC 12 warns about _mm512_slli_epi32's undefined source.)
        const __m512 even =
            _mm512_castsi512_ps(_mm512_maskz_slli_epi32(static_cast<__mmask16>(0xFFFF), bits, 16));
        const __m512 odd = _mm512_castsi512_ps(
            _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
        for (int r = 0; r < R; ++r) {
          const __m512 qd = _mm512_set1_ps(q[r * kDims + d0 + s]);
          acc[s][r][0] = _mm512_fmadd_ps(qd, even, acc[s][r][0]);
          acc[s][r][1] = _mm512_fmadd_ps(qd, odd, acc[s][r][1]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int e = 0; e < 2; ++e) {
        __m512 sum = acc[0][r][e];
        for (int s = 1; s < kSplit; ++s) sum = _mm512_add_ps(sum, acc[s][r][e]);
        _mm512_storeu_ps(out + r * kSlots + e * 16, sum);
      }
    }
  }
}

// q_pairs: per row and dim pair, the high parts of q[d], q[d + 1] as one u32, then the low
// parts. kLo: add the low parts (hi+lo) or not (lossy); kFold: the low part's products go
// into the high part's accumulators (fewer registers, for many rows).
template <int R, int kSplit, bool kLo, bool kFold = false>
KVRING_STUDY_NATIVE void Native(const uint16_t* k, const uint32_t* q_pairs, float* out, int tiles) {
  constexpr int kParts = kLo ? 2 : 1;
  constexpr int kAccParts = kLo && !kFold ? 2 : 1;
  for (int t = 0; t < tiles; ++t) {
    const uint16_t* tile = k + (t % kTiles) * kSlots;
    __m512 acc[kSplit][R][kAccParts][2];
    for (auto& s : acc)
      for (auto& r : s)
        for (auto& part : r) part[0] = part[1] = _mm512_setzero_ps();
    for (int d0 = 0; d0 < kDims; d0 += 2 * kSplit) {
      for (int s = 0; s < kSplit; ++s) {
        const int d = d0 + 2 * s;
        const __m512i a = _mm512_loadu_si512(tile + d * kStride);
        const __m512i b = _mm512_loadu_si512(tile + (d + 1) * kStride);
        const __m512bh lo = (__m512bh)_mm512_unpacklo_epi16(a, b);
        const __m512bh hi = (__m512bh)_mm512_unpackhi_epi16(a, b);
        for (int r = 0; r < R; ++r) {
          const uint32_t* pair = q_pairs + (r * kDims / 2 + d / 2) * 2;
          for (int part = 0; part < kParts; ++part) {
            const __m512bh qp = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair[part]));
            const int at = kAccParts == 1 ? 0 : part;
            acc[s][r][at][0] = _mm512_dpbf16_ps(acc[s][r][at][0], lo, qp);
            acc[s][r][at][1] = _mm512_dpbf16_ps(acc[s][r][at][1], hi, qp);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int e = 0; e < 2; ++e) {
        __m512 sum = acc[0][r][0][e];
        for (int s = 0; s < kSplit; ++s) {
          if (s != 0) sum = _mm512_add_ps(sum, acc[s][r][0][e]);
          if (kAccParts == 2) sum = _mm512_add_ps(sum, acc[s][r][1][e]);
        }
        _mm512_storeu_ps(out + r * kSlots + e * 16, sum);
      }
    }
  }
}

uint16_t Bits(float x) {
  const kvring::BF16 b = kvring::BF16FromF32(x);
  uint16_t bits;
  std::memcpy(&bits, &b, sizeof(bits));
  return bits;
}
float Value(uint16_t bits) {
  kvring::BF16 b;
  std::memcpy(&b, &bits, sizeof(bits));
  return kvring::BF16ToF32(b);
}

// Normwise relative error of the last tile's scores; `lane` maps (row, slot) to out's index.
template <class Lane>
double Error(const std::vector<uint16_t>& k, const std::vector<float>& q,
             const std::vector<float>& out, int rows, int last_tile, const Lane& lane) {
  double worst = 0.0;
  for (int r = 0; r < rows; ++r) {
    double diff = 0.0, norm = 0.0;
    for (int i = 0; i < kSlots; ++i) {
      double ref = 0.0;
      for (int d = 0; d < kDims; ++d) {
        ref += double{q[r * kDims + d]} * Value(k[(last_tile % kTiles) * kSlots + d * kStride + i]);
      }
      const double got = out[static_cast<size_t>(lane(r, i))];
      diff += (got - ref) * (got - ref);
      norm += ref * ref;
    }
    worst = std::max(worst, std::sqrt(diff / norm));
  }
  return worst;
}

template <int R, int kSplitWiden, int kSplitHiLo, int kSplitLossy, bool kFold = false>
void Study() {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> k(static_cast<size_t>(kDims) * kStride);
  for (uint16_t& x : k) x = Bits(normal(rng));
  std::vector<float> q(R * kDims);
  for (float& x : q) x = normal(rng) / std::sqrt(static_cast<float>(kDims));
  std::vector<uint32_t> q_hilo(R * kDims), q_lossy(R * kDims);
  for (int r = 0; r < R; ++r) {
    for (int d = 0; d < kDims; d += 2) {
      const float q0 = q[r * kDims + d], q1 = q[r * kDims + d + 1];
      const uint16_t h0 = Bits(q0), h1 = Bits(q1);
      const uint16_t l0 = Bits(q0 - Value(h0)), l1 = Bits(q1 - Value(h1));
      const size_t at = static_cast<size_t>(r * kDims / 2 + d / 2) * 2;
      q_hilo[at] = q_lossy[at] = h0 | uint32_t{h1} << 16;
      q_hilo[at + 1] = l0 | uint32_t{l1} << 16;
    }
  }
  std::vector<float> widen(R * kSlots), hilo(R * kSlots), lossy(R * kSlots);
  constexpr int kCalls = 20000;
  double best[3] = {1e30, 1e30, 1e30};
  for (int repeat = 0; repeat < 40; ++repeat) {  // alternating, best of each
    const auto t0 = std::chrono::steady_clock::now();
    Widen<R, kSplitWiden>(k.data(), q.data(), widen.data(), kCalls);
    const auto t1 = std::chrono::steady_clock::now();
    Native<R, kSplitHiLo, true, kFold>(k.data(), q_hilo.data(), hilo.data(), kCalls);
    const auto t2 = std::chrono::steady_clock::now();
    Native<R, kSplitLossy, false>(k.data(), q_lossy.data(), lossy.data(), kCalls);
    const auto t3 = std::chrono::steady_clock::now();
    best[0] = std::min(best[0], std::chrono::duration<double>(t1 - t0).count());
    best[1] = std::min(best[1], std::chrono::duration<double>(t2 - t1).count());
    best[2] = std::min(best[2], std::chrono::duration<double>(t3 - t2).count());
  }
  // Lane orders: widen puts even slots in the first vector and odd ones in the second; an
  // unpack puts slots 8j..8j+3 of 128-bit block j in the first, 8j+4..8j+7 in the second.
  const auto widen_lane = [](int r, int i) { return r * kSlots + (i % 2) * 16 + i / 2; };
  const auto native_lane = [](int r, int i) {
    return r * kSlots + (i % 8 / 4) * 16 + i / 8 * 4 + i % 4;
  };
  const double ns = 1e9 / kCalls;
  std::printf("| %d | %.0f | %.0f (%.2f) | %.0f (%.2f) | %.1e | %.1e | %.1e |\n", R, best[0] * ns,
              best[1] * ns, best[1] / best[0], best[2] * ns, best[2] / best[0],
              Error(k, q, widen, R, kCalls - 1, widen_lane),
              Error(k, q, hilo, R, kCalls - 1, native_lane),
              Error(k, q, lossy, R, kCalls - 1, native_lane));
}

#endif  // KVRING_STUDY_X86

}  // namespace

int main() {
#ifdef KVRING_STUDY_X86
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::printf("this CPU has no AVX512-BF16: nothing to measure\n");
    return 0;
  }
  std::printf("q . k of one 32-slot flash tile, 128 dims, in L1; ns per tile (time / widen)\n\n");
  std::printf(
      "| rows | widen (kernels) | native hi+lo | native lossy | error widen | error "
      "hi+lo | error lossy |\n|---|---|---|---|---|---|---|\n");
  // Partial sums per row: 16 accumulators where the rows allow (as the kernels' FMA chains).
  Study<1, 8, 4, 8>();
  Study<2, 4, 2, 4>();
  Study<4, 2, 1, 2>();
  Study<8, 1, 1, 1, /*kFold=*/true>();
#else
  std::printf("not an x86-64 build with AVX512-BF16 intrinsics: nothing to measure\n");
#endif
  return 0;
}
