// kvring/ops/attention_merge-inl.h: the merges of a call that splits its KV: each combines
// the partial states of one query block and kv_head, split by split in chronological order,
// and writes the output rows. Run after every item of the call.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_MERGE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_MERGE_INL_H_
#undef KVRING_OPS_ATTENTION_MERGE_INL_H_
#else
#define KVRING_OPS_ATTENTION_MERGE_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/formats/format.h"

// After highway.h: FinalizeRow and Align64.
#include "kvring/ops/attention_block-inl.h"
#include "kvring/ops/attention_softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {

namespace attention_internal {

// Writes the output row of row `row` (query, q head) of `item` from its merged state (max m,
// sum l, acc in `order`): the one output write of items that do not split and of merges.
// `tmp`: v_head_dim floats of scratch (a BF16 output is rounded from them).
HWY_INLINE void WriteOutputRow(const AttentionBatch& batch, const AttentionOptions& options,
                               const AttentionWork& work, const AttentionItem& item, size_t row,
                               float m, float l, const float* acc, float* tmp, AccOrder order) {
  const size_t group = work.Group();
  const size_t v_head_dim = work.VHeadDim();
  const size_t query = item.first_query + row / group;
  const size_t q_head = size_t{item.kv_head} * group + row % group;
  const size_t dst = static_cast<size_t>(query * work.OutRowStride()) + q_head * v_head_dim;
  FinalizeRow(m, l, acc, options.sinks != nullptr ? options.sinks + q_head : nullptr, v_head_dim,
              tmp, batch.out_f32 != nullptr ? batch.out_f32 + dst : nullptr,
              batch.out_bf16 != nullptr ? batch.out_bf16 + dst : nullptr, order);
}

}  // namespace attention_internal

// Combines the partial states of merge `merge_index` (< work.NumMerges()) in chronological
// order and writes its output rows. Run after every item of the call. `scratch` and
// `partial` as for RunAttentionItem. Does not allocate.
inline void MergeAttention(const AttentionBatch& batch, const AttentionOptions& options,
                           const AttentionWork& work, uint64_t merge_index,
                           float* HWY_RESTRICT scratch, const float* HWY_RESTRICT partial) {
  const uint64_t first_item = work.MergeFirstItem(merge_index);
  const AttentionItem item = work.Item(first_item);
  const size_t v_head_dim = work.VHeadDim();
  const size_t num_rows = size_t{item.num_queries} * work.Group();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const ItemScratchLayout layout = work.ScratchLayout();
  float* base = attention_internal::Align64(scratch);
  KVRING_DASSERT(static_cast<uint64_t>(base - scratch) + layout.merge_end <= work.ScratchFloats());
  float* acc = base + layout.merge_acc;
  float* tmp = base + layout.merge_out;
  for (size_t row = 0; row < num_rows; ++row) {
    const auto state_of = [&](uint32_t split) {
      return partial + work.PartialOffset(first_item + split, row);
    };
    float m = neg_inf;
    for (uint32_t split = 0; split < work.NumSplits(); ++split) {
      const float split_max = state_of(split)[0];
      if (split_max > m) m = split_max;
    }
    float l = 0.0f;
    for (size_t dim = 0; dim < v_head_dim; ++dim) acc[dim] = 0.0f;
    for (uint32_t split = 0; split < work.NumSplits(); ++split) {
      const float* src = state_of(split);
      if (src[0] == neg_inf) continue;  // the split holds nothing this row sees
      const float factor = std::exp(src[0] - m);
      l += src[1] * factor;
      for (size_t dim = 0; dim < v_head_dim; ++dim) acc[dim] += src[2 + dim] * factor;
    }
    attention_internal::WriteOutputRow(batch, options, work, item, row, m, l, acc, tmp,
                                       attention_internal::AccOrderOf(work.ElementFormat()));
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_MERGE_INL_H_
