// kvring/attention/check.h: CheckAttention, the checks every attention entry point makes
// before it reads anything: the view, the options and the batch against each other.
#ifndef KVRING_ATTENTION_CHECK_H_
#define KVRING_ATTENTION_CHECK_H_

#include <cmath>
#include <cstdint>
#include <limits>

#include "kvring/attention/options.h"
#include "kvring/kernel_limits.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"

namespace kvring {

namespace detail {

// The view's streams for its format: their pointers set (k, and int8's scales), V's both or
// neither.
template <typename Layout>
Result CheckViewStreams(const KVView<Layout>& kv) {
  if (IsInt8(kv.format)) {
    if (kv.k_int8 == nullptr || kv.k_scales == nullptr) {
      return Result::Refused(Status::kBadArgument,
                             "view: an int8 view needs k_int8 and k_scales (one is null)");
    }
    if ((kv.v_int8 == nullptr) != (kv.v_scales == nullptr)) {
      return Result::Refused(Status::kBadArgument,
                             "view: an int8 view's v_int8 and v_scales are both set or both null");
    }
    if (RotatesK(kv.format) && kv.v_int8 == nullptr) {
      return Result::Refused(Status::kBadArgument,
                             "view: an int8h view needs V (v_int8 is null): its K is rotated, "
                             "so values cannot be read from K as a latent view's are");
    }
  } else if (IsAccountingOnly(kv.format)) {
    return Result::Refused(Status::kBadArgument,
                           "view.format: %llu is for accounting only (kvring::Format kF16, kF32 "
                           "or kFP8): kernels read bf16 or int8",
                           static_cast<uint64_t>(kv.format));
  } else if (kv.format != Format::kBF16) {
    return Result::Refused(Status::kBadArgument, "view.format: %llu is not a kvring::Format",
                           static_cast<uint64_t>(kv.format));
  } else if (kv.k == nullptr) {
    return Result::Refused(Status::kBadArgument, "view.k: is null");
  }
  return Result();
}

// The view's shape (kv_heads, head dims the kernels serve, V or a latent view's values, tiles
// of slots, the range it holds); sets *v_head_dim to the values' dims.
template <typename Layout>
Result CheckViewShape(const KVView<Layout>& kv, const AttentionOptions& options,
                      uint64_t* v_head_dim) {
  const KVShape& shape = kv.layout.Shape();
  const uint64_t head_dim = shape.head_dim;
  if (shape.num_kv_heads == 0) {
    return Result::Refused(Status::kBadArgument, "view: has 0 kv_heads");
  }
  if (!IsAttentionDim(head_dim)) {
    return Result::Refused(Status::kBadArgument,
                           "view head_dim: %llu is not a multiple of %llu from %llu to %llu "
                           "(the kernels' head dims)",
                           head_dim, kAttentionDimMultiple, kAttentionDimMultiple,
                           kMaxAttentionHeadDim);
  }
  *v_head_dim = shape.v_head_dim;
  if (!kv.HasV()) {
    if (shape.v_head_dim != 0) {
      return Result::Refused(Status::kBadArgument,
                             "view.v: is null, but the view's v_head_dim is %llu",
                             shape.v_head_dim);
    }
    *v_head_dim = options.latent_v_dims;
    if (!IsAttentionDim(*v_head_dim) || *v_head_dim > head_dim) {
      return Result::Refused(Status::kBadArgument,
                             "options.latent_v_dims: %llu is not a multiple of %llu from %llu "
                             "to the head_dim %llu (a view without V reads its values from K)",
                             *v_head_dim, kAttentionDimMultiple, kAttentionDimMultiple, head_dim);
    }
  } else {
    if (options.latent_v_dims != 0) {
      return Result::Refused(Status::kBadArgument,
                             "options.latent_v_dims: %llu must be 0 for a view with V",
                             options.latent_v_dims);
    }
    if (!IsAttentionDim(*v_head_dim)) {
      return Result::Refused(
          Status::kBadArgument, "view v_head_dim: %llu is not a multiple of %llu from %llu to %llu",
          *v_head_dim, kAttentionDimMultiple, kAttentionDimMultiple, kMaxAttentionHeadDim);
    }
  }
  if (kv.NumSlots() == 0 || kv.NumSlots() % Layout::kTileSlots != 0) {
    return Result::Refused(Status::kBadArgument,
                           "view num_slots: %llu is not a positive multiple of the layout's "
                           "tile of %llu slots",
                           kv.NumSlots(), Layout::kTileSlots);
  }
  if (kv.first_pos > kv.end_pos || (!kv.Paged() && kv.end_pos - kv.first_pos > kv.NumSlots())) {
    return Result::Refused(Status::kBadArgument,
                           "view: holds [%llu, %llu), more than its %llu slots", kv.first_pos,
                           kv.end_pos, kv.NumSlots());
  }
  return Result();
}

// The options' values: finite soft cap and scale, a Products.
inline Result CheckAttentionOptions(const AttentionOptions& options) {
  if (!(options.soft_cap >= 0.0f) || !std::isfinite(options.soft_cap) ||
      !std::isfinite(options.scale)) {
    return Result::Refused(Status::kBadArgument,
                           "options: soft_cap and scale must be finite and soft_cap >= 0");
  }
  if (options.products != Products::kF32 && options.products != Products::kBF16 &&
      options.products != Products::kInt8) {
    return Result::Refused(Status::kBadArgument,
                           "options.products: %llu is none of Products::kF32 (0), kBF16 (1) "
                           "and kInt8 (2)",
                           static_cast<uint64_t>(options.products));
  }
  return Result();
}

// The batch against the view's shape: q heads per kv_head, head dim, one query and one
// output pointer, strides of at least a row; then its queries against the positions held.
template <typename Layout>
Result CheckBatch(const KVView<Layout>& kv, const AttentionBatch& batch, uint64_t v_head_dim) {
  const KVShape& shape = kv.layout.Shape();
  const uint64_t head_dim = shape.head_dim;
  if (batch.num_q_heads == 0 || batch.num_q_heads % shape.num_kv_heads != 0) {
    return Result::Refused(Status::kBadArgument,
                           "batch.num_q_heads: %llu is not a positive multiple of the view's "
                           "%llu kv_heads",
                           batch.num_q_heads, shape.num_kv_heads);
  }
  if (batch.head_dim != head_dim) {
    return Result::Refused(Status::kBadArgument,
                           "batch.head_dim: %llu, but the view's head_dim is %llu (query rows are "
                           "[num_q_heads][head_dim]; set head_dim to the queries' head size)",
                           uint64_t{batch.head_dim}, head_dim);
  }
  if ((batch.queries_f32 == nullptr) == (batch.queries_bf16 == nullptr)) {
    return Result::Refused(Status::kBadArgument,
                           "batch: exactly one of queries_f32 and queries_bf16 must be set");
  }
  if ((batch.out_f32 == nullptr) == (batch.out_bf16 == nullptr)) {
    return Result::Refused(Status::kBadArgument,
                           "batch: exactly one of out_f32 and out_bf16 must be set");
  }
  const uint64_t q_row = uint64_t{batch.num_q_heads} * head_dim;
  if (batch.q_row_stride != 0 && batch.q_row_stride < q_row) {
    return Result::Refused(Status::kBadArgument,
                           "batch.q_row_stride: %llu is below a query row's %llu elements "
                           "(%llu q heads x %llu)",
                           batch.q_row_stride, q_row, batch.num_q_heads, head_dim);
  }
  const uint64_t out_row = uint64_t{batch.num_q_heads} * v_head_dim;
  if (batch.out_row_stride != 0 && batch.out_row_stride < out_row) {
    return Result::Refused(Status::kBadArgument,
                           "batch.out_row_stride: %llu is below an output row's %llu elements "
                           "(%llu q heads x %llu)",
                           batch.out_row_stride, out_row, batch.num_q_heads, v_head_dim);
  }
  if (batch.num_queries == 0) return Result();
  if (batch.first_q_pos > std::numeric_limits<uint64_t>::max() - batch.num_queries ||
      batch.first_q_pos + batch.num_queries > kv.end_pos) {
    return Result::Refused(Status::kNotLive,
                           "batch: queries at [%llu, %llu + %llu) are past the view's end %llu "
                           "(append their K/V first)",
                           batch.first_q_pos, batch.first_q_pos, batch.num_queries, kv.end_pos);
  }
  // Every rule's first visible position grows with the query, so the first query decides.
  const uint64_t first_visible = kv.visibility.FirstVisible(batch.first_q_pos);
  if (first_visible < kv.first_pos) {
    return Result::Refused(Status::kNotLive,
                           "batch.first_q_pos: a query at %llu sees positions from %llu, but "
                           "the view holds only [%llu, %llu)",
                           batch.first_q_pos, first_visible, kv.first_pos, kv.end_pos);
  }
  return Result();
}

}  // namespace detail

// Returns kOk when attending `batch` over `kv` with `options` is well defined, else a
// kStaleView (a view whose storage changed since it was taken: KVView::stamp), a
// kBadArgument (shapes, head ratio, dims, pointers, strides, options) or kNotLive (a query
// whose K/V the view does not hold, or whose visible positions it no longer holds) whose
// message names the field and the values. O(1); every attention entry point calls it first
// and changes nothing when it refuses. Does not allocate.
template <typename Layout>
Result CheckAttention(const KVView<Layout>& kv, const AttentionBatch& batch,
                      const AttentionOptions& options) {
  const Result current = kv.stamp.Check();
  if (!current.ok()) return current;
  const Result streams = detail::CheckViewStreams(kv);
  if (!streams.ok()) return streams;
  uint64_t v_head_dim = 0;
  const Result view = detail::CheckViewShape(kv, options, &v_head_dim);
  if (!view.ok()) return view;
  const Result set = detail::CheckAttentionOptions(options);
  if (!set.ok()) return set;
  return detail::CheckBatch(kv, batch, v_head_dim);
}

}  // namespace kvring

#endif  // KVRING_ATTENTION_CHECK_H_
