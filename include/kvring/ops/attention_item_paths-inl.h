// kvring/ops/attention_item_paths-inl.h: RunAttentionItem, one work item of an attention
// call by its layer's format (BF16 or int8) and the call's product path (the exact mode,
// vdpbf16ps, the integer products on AVX-512 VNNI or AVX-VNNI), each an instantiation of the
// item runner (attention_item-inl.h). Called by kvring/ops/attention-inl.h's entry points;
// RunAttentionItem and MergeAttention are public for engines that schedule items themselves.

// Per-target include guard (the toggle pattern of hwy/contrib/dot/dot-inl.h).
#if defined(KVRING_OPS_ATTENTION_ITEM_PATHS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVRING_OPS_ATTENTION_ITEM_PATHS_INL_H_
#undef KVRING_OPS_ATTENTION_ITEM_PATHS_INL_H_
#else
#define KVRING_OPS_ATTENTION_ITEM_PATHS_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kvring/attention.h"
#include "kvring/kv_view.h"

// After highway.h: the item runner, and the merges engines call after the items.
#include "kvring/ops/attention_item-inl.h"
#include "kvring/ops/attention_merge-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace attention_internal {

// The body of RunAttentionItem for stored elements of type T.
template <ProductPath kPath, class Layout, typename T>
HWY_INLINE void RunItem(const KVView<Layout>& kv, const AttentionBatch& batch,
                        const AttentionOptions& options, const AttentionWork& work,
                        uint64_t item_index, float* HWY_RESTRICT scratch,
                        float* HWY_RESTRICT partial, const T* k_base, const T* v_base) {
  ItemRunner<kPath, Layout, T> runner(kv, batch, options, work, item_index, scratch, k_base,
                                      v_base);
  runner.Run(item_index, partial);
}

// RunItem of a product path other than the exact mode's, out of line, so that the exact mode's
// item is inlined alone into RunAttentionItem as before: kBF16Native (vdpbf16ps) over BF16
// K/V, kInt8 and kInt8AvxVnni (the integer-product mode) over int8.
template <ProductPath kPath, class Layout>
HWY_NOINLINE void RunItemOutOfLine(const KVView<Layout>& kv, const AttentionBatch& batch,
                                   const AttentionOptions& options, const AttentionWork& work,
                                   uint64_t item_index, float* HWY_RESTRICT scratch,
                                   float* HWY_RESTRICT partial) {
  if constexpr (kPath == ProductPath::kBF16Native) {
    RunItem<kPath>(kv, batch, options, work, item_index, scratch, partial, kv.k, kv.v);
  } else {
    RunItem<kPath>(kv, batch, options, work, item_index, scratch, partial, kv.k_int8, kv.v_int8);
  }
}

// The item of the integer-product mode (int8 layers): on AVX-VNNI where the AVX2 target runs
// on a CPU that has it.
template <class Layout>
HWY_INLINE void RunInt8ProductsItem(const KVView<Layout>& kv, const AttentionBatch& batch,
                                    const AttentionOptions& options, const AttentionWork& work,
                                    uint64_t item_index, float* HWY_RESTRICT scratch,
                                    float* HWY_RESTRICT partial) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (kAvxVnniTile<Layout::kTileSlots>) {
    if (AvxVnniUsable()) {
      RunItemOutOfLine<ProductPath::kInt8AvxVnni>(kv, batch, options, work, item_index, scratch,
                                                  partial);
      return;
    }
  }
#endif
  RunItemOutOfLine<ProductPath::kInt8>(kv, batch, options, work, item_index, scratch, partial);
}

}  // namespace attention_internal

// Runs item `item_index` of `work` (AttentionWork::Plan of the same kv, batch and options):
// the rows of one query block that share one kv_head, over one KV split. Writes the block's
// output rows, or, when work.Splits(), the item's partial states into `partial`
// (work.PartialFloats() floats), for MergeAttention. `scratch`: work.ScratchFloats() floats
// owned by the calling thread. Does not allocate; reads each visible K/V tile of its kv_head
// once from memory for all the block's rows.
template <class Layout>
inline void RunAttentionItem(const KVView<Layout>& kv, const AttentionBatch& batch,
                             const AttentionOptions& options, const AttentionWork& work,
                             uint64_t item_index, float* HWY_RESTRICT scratch,
                             float* HWY_RESTRICT partial) {
  // The format is a run-time property of the layer: one switch per item, then the kernels of
  // that element type.
  // (KVRING_ATTENTION_NO_INT8 compiles the BF16 kernels alone; the entry points then refuse
  // int8 views.)
#if !defined(KVRING_ATTENTION_NO_INT8)
  if (IsInt8(kv.format)) {
    if (options.products == Products::kInt8) {
      attention_internal::RunInt8ProductsItem(kv, batch, options, work, item_index, scratch,
                                              partial);
      return;
    }
    attention_internal::RunItem<attention_internal::ProductPath::kF32>(
        kv, batch, options, work, item_index, scratch, partial, kv.k_int8, kv.v_int8);
    return;
  }
#endif
  KVRING_DASSERT(kv.format == Format::kBF16);
#if HWY_TARGET == HWY_AVX3_DL
  // The BF16-product mode on vdpbf16ps: its own instantiation, so that the exact mode's code
  // has no branch of it.
  if constexpr (attention_internal::kNativeTile<Layout::kTileSlots>) {
    if (attention_internal::PathOf<BF16, Layout::kTileSlots>(
            options.products, static_cast<size_t>(kv.layout.K().DimStride())) ==
        attention_internal::ProductPath::kBF16Native) {
      attention_internal::RunItemOutOfLine<attention_internal::ProductPath::kBF16Native>(
          kv, batch, options, work, item_index, scratch, partial);
      return;
    }
  }
#endif
  attention_internal::RunItem<attention_internal::ProductPath::kF32>(
      kv, batch, options, work, item_index, scratch, partial, kv.k, kv.v);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring
HWY_AFTER_NAMESPACE();

#endif  // KVRING_OPS_ATTENTION_ITEM_PATHS_INL_H_
