// tests/reference/reference_attention.h: the float64 oracle of every attention kernel test.
// Computes attention from the same BF16 K/V and the same queries the kernels see, in double,
// straight from the definitions of docs/design.md and docs/attention.md (visibility asked of
// kvring::Visibility). Simple on purpose; allocates.
#ifndef KVRING_TESTS_REFERENCE_REFERENCE_ATTENTION_H_
#define KVRING_TESTS_REFERENCE_REFERENCE_ATTENTION_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "kvring/visibility.h"

namespace kvring {
namespace reference {

// K/V of every position by value: k(pos, kv_head, dim) and v(pos, kv_head, dim) as the
// kernels read them (BF16 widened to float).
struct ReferenceKV {
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t v_head_dim = 0;
  std::function<float(uint64_t, uint32_t, uint32_t)> k;
  std::function<float(uint64_t, uint32_t, uint32_t)> v;
};

struct ReferenceOptions {
  double scale = 0.0;     // the scale the kernel uses (not 0)
  double soft_cap = 0.0;  // 0: off
  const float* sinks = nullptr;
};

// Returns out[num_queries][num_q_heads][v_head_dim] for queries
// [num_queries][num_q_heads][head_dim] (as floats) at positions first_q_pos + i.
inline std::vector<double> ReferenceAttention(const ReferenceKV& kv, const Visibility& visibility,
                                              const std::vector<float>& queries,
                                              uint64_t first_q_pos, uint32_t num_queries,
                                              uint32_t num_q_heads,
                                              const ReferenceOptions& options) {
  const uint32_t group = num_q_heads / kv.num_kv_heads;
  std::vector<double> out(size_t{num_queries} * num_q_heads * kv.v_head_dim, 0.0);
  if (num_queries == 0) return out;
  // K and V of every position a query can see, read once: [pos - lowest][kv_head][dim].
  uint64_t lowest = first_q_pos;
  for (uint32_t query = 0; query < num_queries; ++query) {
    lowest = std::min(lowest, visibility.FirstVisible(first_q_pos + query));
  }
  const uint64_t end = first_q_pos + num_queries;
  std::vector<float> k, v;
  k.reserve((end - lowest) * kv.num_kv_heads * kv.head_dim);
  v.reserve((end - lowest) * kv.num_kv_heads * kv.v_head_dim);
  for (uint64_t pos = lowest; pos < end; ++pos) {
    for (uint32_t kv_head = 0; kv_head < kv.num_kv_heads; ++kv_head) {
      for (uint32_t dim = 0; dim < kv.head_dim; ++dim) k.push_back(kv.k(pos, kv_head, dim));
      for (uint32_t dim = 0; dim < kv.v_head_dim; ++dim) v.push_back(kv.v(pos, kv_head, dim));
    }
  }
  std::vector<double> scores;
  for (uint32_t query = 0; query < num_queries; ++query) {
    const uint64_t q_pos = first_q_pos + query;
    const uint64_t first = visibility.FirstVisible(q_pos);
    for (uint32_t q_head = 0; q_head < num_q_heads; ++q_head) {
      const uint32_t kv_head = q_head / group;
      const float* q = &queries[(size_t{query} * num_q_heads + q_head) * kv.head_dim];
      scores.clear();
      double max = -std::numeric_limits<double>::infinity();
      for (uint64_t pos = first; pos <= q_pos; ++pos) {
        if (!visibility.Visible(q_pos, pos)) continue;
        const float* k_row = &k[((pos - lowest) * kv.num_kv_heads + kv_head) * kv.head_dim];
        double dot = 0.0;
        for (uint32_t dim = 0; dim < kv.head_dim; ++dim) dot += double{q[dim]} * double{k_row[dim]};
        double score = dot * options.scale;
        if (options.soft_cap > 0.0) score = options.soft_cap * std::tanh(score / options.soft_cap);
        scores.push_back(score);
        if (score > max) max = score;
      }
      const bool has_sink = options.sinks != nullptr;
      const double sink = has_sink ? double{options.sinks[q_head]} : 0.0;
      if (has_sink && sink > max) max = sink;
      double denominator = has_sink ? std::exp(sink - max) : 0.0;
      double* o = &out[(size_t{query} * num_q_heads + q_head) * kv.v_head_dim];
      size_t i = 0;
      for (uint64_t pos = first; pos <= q_pos; ++pos) {
        if (!visibility.Visible(q_pos, pos)) continue;
        const double weight = std::exp(scores[i++] - max);
        denominator += weight;
        const float* v_row = &v[((pos - lowest) * kv.num_kv_heads + kv_head) * kv.v_head_dim];
        for (uint32_t dim = 0; dim < kv.v_head_dim; ++dim) o[dim] += weight * double{v_row[dim]};
      }
      for (uint32_t dim = 0; dim < kv.v_head_dim; ++dim) o[dim] /= denominator;
    }
  }
  return out;
}

// Returns ||a - b||_2 / ||b||_2 of one row (0 when both are 0).
inline double NormwiseRelativeError(const float* a, const double* b, size_t n) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double{a[i]} - b[i];
    diff += d * d;
    norm += b[i] * b[i];
  }
  if (norm == 0.0) return diff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff / norm);
}

}  // namespace reference
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_REFERENCE_ATTENTION_H_
