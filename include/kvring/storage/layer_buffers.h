// kvring/storage/layer_buffers.h: LayerBuffers<Layout>, the memory of one layer's rows: the
// zeroed, 64-byte aligned K and V elements (BF16, or int8 with f32 scales) of one layout, or
// of a run of equal blocks of it, addressed through LayerRows (storage/layer_rows.h).
// Internal to kvring's storage.
#ifndef KVRING_STORAGE_LAYER_BUFFERS_H_
#define KVRING_STORAGE_LAYER_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvring/bf16.h"
#include "kvring/detail/aligned_buffer.h"
#include "kvring/detail/checked_math.h"
#include "kvring/formats/format.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/storage/layer_rows.h"

namespace kvring {
namespace detail {

// The zeroed, 64-byte aligned buffers of `num_blocks` equal blocks of one layout (block b's
// K elements start b x the K span of a block past the first's, and likewise V and the
// scales), in one format. One block is a ring's or a flat layer's storage; many are a paged
// layer's block store.
template <typename Layout>
class LayerBuffers {
 public:
  // Allocates the buffers of `num_blocks` blocks of `block_shape` in `format` (only that
  // format's), those of a huge page or more for huge pages if `huge_pages` (AlignedBuffer).
  // Returns false, holding nothing, if the sizes overflow or allocation failed.
  bool Allocate(const KVShape& block_shape, Format format, uint64_t num_blocks, bool huge_pages) {
    *this = LayerBuffers();
    layout_ = Layout(block_shape);
    format_ = format;
    num_blocks_ = num_blocks;
    huge_pages_ = huge_pages;
    uint64_t k_size, v_size, scales;
    if (!CheckedMul(layout_.K().RequiredSpanSize(), num_blocks, &k_size) ||
        !CheckedMul(layout_.V().RequiredSpanSize(), num_blocks, &v_size) ||
        !CheckedMul(BlockScales(), num_blocks, &scales) || k_size > SIZE_MAX / 2 ||
        v_size > SIZE_MAX / 2 || scales > SIZE_MAX / sizeof(float)) {
      *this = LayerBuffers();
      return false;
    }
    const bool has_v = block_shape.v_head_dim != 0;
    if (IsInt8(format)) {
      k_int8_ = AlignedBuffer<int8_t>::Zeroed(static_cast<size_t>(k_size), huge_pages);
      v_int8_ = AlignedBuffer<int8_t>::Zeroed(static_cast<size_t>(v_size), huge_pages);
      k_scales_ = AlignedBuffer<float>::Zeroed(static_cast<size_t>(scales), huge_pages);
      v_scales_ = AlignedBuffer<float>::Zeroed(has_v ? static_cast<size_t>(scales) : 0, huge_pages);
    } else {
      k_ = AlignedBuffer<BF16>::Zeroed(static_cast<size_t>(k_size), huge_pages);
      v_ = AlignedBuffer<BF16>::Zeroed(static_cast<size_t>(v_size), huge_pages);
    }
    // (An empty K can only come from a zero shape or no blocks, which callers reject.)
    const bool ok = !Failed() &&
                    (IsInt8(format) ? k_int8_.size() != 0 && k_scales_.size() != 0 &&
                                          (!has_v || (v_int8_.size() != 0 && v_scales_.size() != 0))
                                    : k_.size() != 0 && (!has_v || v_.size() != 0));
    if (!ok) *this = LayerBuffers();
    return ok;
  }

  const Layout& BlockLayout() const { return layout_; }
  Format GetFormat() const { return format_; }
  // Whether Allocate was asked for huge pages (a copy asks alike).
  bool HugePagesAsked() const { return huge_pages_; }
  uint64_t NumBlocks() const { return num_blocks_; }
  // Returns the bytes of every buffer: blocks x slots x num_kv_heads x (RowBytes(format,
  // head_dim) + RowBytes(format, v_head_dim)).
  uint64_t AllocatedBytes() const {
    return (k_.size() + v_.size()) * sizeof(BF16) + k_int8_.size() + v_int8_.size() +
           (k_scales_.size() + v_scales_.size()) * sizeof(float);
  }
  bool Failed() const {
    return k_.Failed() || v_.Failed() || k_int8_.Failed() || v_int8_.Failed() ||
           k_scales_.Failed() || v_scales_.Failed();
  }

  // Returns whether blocks `a` and `b` hold the same bytes (elements and scales).
  bool SameBlocks(uint64_t a, uint64_t b) const {
    const uint64_t k_span = layout_.K().RequiredSpanSize(), v_span = layout_.V().RequiredSpanSize();
    const uint64_t scales = BlockScales();
    if (IsInt8(format_)) {
      return Same(k_int8_, k_span, a, b) && Same(v_int8_, v_span, a, b) &&
             Same(k_scales_, scales, a, b) && Same(v_scales_, scales, a, b);
    }
    return Same(k_, k_span, a, b) && Same(v_, v_span, a, b);
  }

  // Returns the rows of block `block`. The pointers are the buffers' own (writes through
  // them change this object's contents, const or not: callers write only through a storage
  // they may change).
  LayerRows<Layout> Rows(uint64_t block = 0) const {
    KVRING_DASSERT(block < num_blocks_);
    LayerRows<Layout> rows;
    rows.layout = layout_;
    rows.format = format_;
    const uint64_t k_span = layout_.K().RequiredSpanSize();
    const uint64_t v_span = layout_.V().RequiredSpanSize();
    const uint64_t scales = BlockScales();
    if (IsInt8(format_)) {
      rows.k_int8 = const_cast<int8_t*>(k_int8_.data()) + block * k_span;
      if (v_int8_.size() != 0) rows.v_int8 = const_cast<int8_t*>(v_int8_.data()) + block * v_span;
      rows.k_scales = const_cast<float*>(k_scales_.data()) + block * scales;
      if (v_scales_.size() != 0) {
        rows.v_scales = const_cast<float*>(v_scales_.data()) + block * scales;
      }
    } else {
      rows.k_bf16 = const_cast<BF16*>(k_.data()) + block * k_span;
      if (v_.size() != 0) rows.v_bf16 = const_cast<BF16*>(v_.data()) + block * v_span;
    }
    return rows;
  }

 private:
  // Compares elements [a * span, (a + 1) * span) of `buffer` with block b's (true when the
  // format has no such buffer).
  template <typename T>
  static bool Same(const AlignedBuffer<T>& buffer, uint64_t span, uint64_t a, uint64_t b) {
    if (buffer.size() == 0) return true;
    return std::memcmp(buffer.data() + a * span, buffer.data() + b * span, span * sizeof(T)) == 0;
  }
  uint64_t BlockScales() const { return layout_.Shape().num_slots * layout_.Shape().num_kv_heads; }

  Layout layout_;
  Format format_ = Format::kBF16;
  uint64_t num_blocks_ = 0;
  bool huge_pages_ = false;
  // Format::kBF16: the elements at the layout's offsets (V empty without V).
  AlignedBuffer<BF16> k_;
  AlignedBuffer<BF16> v_;
  // Format::kInt8: the elements at the same offsets, and the scales [kv_head][slot].
  AlignedBuffer<int8_t> k_int8_;
  AlignedBuffer<int8_t> v_int8_;
  AlignedBuffer<float> k_scales_;
  AlignedBuffer<float> v_scales_;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_LAYER_BUFFERS_H_
