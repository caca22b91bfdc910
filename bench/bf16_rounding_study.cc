// What a native AVX512-BF16 dot path (vdpbf16ps) would cost in accuracy. The instruction
// multiplies BF16 pairs, so its speed-up over the f32 FMA path needs the query (for q . k) or
// the probabilities (for p . V) rounded to BF16; splitting them into a BF16 high and low part
// keeps the accuracy but doubles the dot instructions, which is the f32 path's count again.
// This program measures, against a float64 computation from the same BF16 K/V, the normwise
// relative error of one attention row when q or p is rounded to BF16 (random N(0, 1) q, K, V,
// scale 1/sqrt(D), as the kernel tests draw them). The kernels' tolerance is 1e-3.
//
//   build/release/bench/kvring_bf16_rounding_study
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kvring/bf16.h"

namespace {

float RoundToBF16(float x) { return kvring::BF16ToF32(kvring::BF16FromF32(x)); }

// One attention row over n positions of dimension d, in float64: q scaled, optionally rounded
// to BF16 first; probabilities optionally rounded to BF16 (and summed as rounded).
std::vector<double> Attend(const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, size_t n, size_t d, bool round_q,
                           bool round_p) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> scores(n);
  double max = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (size_t j = 0; j < d; ++j) {
      const double qj = round_q ? RoundToBF16(static_cast<float>(q[j] * scale)) : q[j] * scale;
      s += qj * k[i * d + j];
    }
    scores[i] = s;
    max = std::max(max, s);
  }
  std::vector<double> out(d, 0.0);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double p = std::exp(scores[i] - max);
    if (round_p) p = RoundToBF16(static_cast<float>(p));
    sum += p;
    for (size_t j = 0; j < d; ++j) out[j] += p * v[i * d + j];
  }
  for (double& x : out) x /= sum;
  return out;
}

double RelativeError(const std::vector<double>& a, const std::vector<double>& ref) {
  double err = 0.0, norm = 0.0;
  for (size_t j = 0; j < ref.size(); ++j) {
    err += (a[j] - ref[j]) * (a[j] - ref[j]);
    norm += ref[j] * ref[j];
  }
  return std::sqrt(err / norm);
}

}  // namespace

int main() {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kTrials = 21;
  std::printf("%5s %6s  %-28s  %-28s\n", "D", "N", "q as BF16: median / max",
              "p as BF16: median / max");
  const size_t shapes[][2] = {{64, 1024}, {128, 64}, {128, 4096}, {256, 4096}};
  for (const auto& shape : shapes) {
    const size_t d = shape[0], n = shape[1];
    std::vector<double> err_q, err_p;
    for (int trial = 0; trial < kTrials; ++trial) {
      std::vector<float> q(d), k(n * d), v(n * d);
      for (float& x : q) x = normal(rng);
      for (float& x : k) x = RoundToBF16(normal(rng));
      for (float& x : v) x = RoundToBF16(normal(rng));
      const std::vector<double> exact = Attend(q, k, v, n, d, false, false);
      err_q.push_back(RelativeError(Attend(q, k, v, n, d, true, false), exact));
      err_p.push_back(RelativeError(Attend(q, k, v, n, d, false, true), exact));
    }
    std::sort(err_q.begin(), err_q.end());
    std::sort(err_p.begin(), err_p.end());
    std::printf("%5zu %6zu  %.2e / %.2e           %.2e / %.2e\n", d, n, err_q[kTrials / 2],
                err_q.back(), err_p[kTrials / 2], err_p.back());
  }
  return 0;
}
