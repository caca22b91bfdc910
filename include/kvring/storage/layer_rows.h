// kvring/storage/layer_rows.h: the one home of a layer's row code. LayerRows<Layout> addresses
// the K and V elements (BF16, or int8 with f32 scales) of one layout of num_slots slots and
// writes token rows into it, reads a slot's row back (one read function, RowRead, over a
// codec per format), and copies slots to another LayerRows; LayerBuffers
// (storage/layer_buffers.h) owns the memory. RingKV, GlobalKV (one block, through
// LayerStorage) and KVPool's paged layers (many blocks) all write, read and copy through
// these. Internal; its only vector code is detail/transpose.h's.
#ifndef KVRING_STORAGE_LAYER_ROWS_H_
#define KVRING_STORAGE_LAYER_ROWS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/detail/transpose.h"
#include "kvring/formats/format.h"
#include "kvring/formats/hadamard.h"
#include "kvring/formats/int8.h"
#include "kvring/kernel_limits.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/storage/storage_spec.h"

namespace kvring {
namespace detail {

// The elements of one layout of layout.Shape().num_slots slots in `format`: BF16 k_bf16 and
// v_bf16, or int8 k_int8 and v_int8 with scales [kv_head][slot] (KVShape::ScaleOffset); the
// other format's pointers are null, and so are the V pointers without a V stream (MLA). Does
// not own them. Slot ranges passed to its methods never wrap (callers split them).
// Marks a storage used on its own (a RingKV or GlobalKV outside a KVCache): its refusals name
// no layer.
inline constexpr uint64_t kNoLayer = ~uint64_t{0};

// Returns the refusal Result::Refused(status, format, ...) whose message starts with
// "layers[<layer>]: " unless `layer` is kNoLayer. `format` is a string literal with up to three
// %llu conversions, and at least one value follows it.
#define KVRING_DETAIL_REFUSED(layer, status, format, ...)         \
  ((layer) == ::kvring::detail::kNoLayer                          \
       ? ::kvring::Result::Refused((status), format, __VA_ARGS__) \
       : ::kvring::Result::Refused((status), "layers[%llu]: " format, (layer), __VA_ARGS__))

// Returns kOk if rows k and v of `num_tokens` positions with row strides `strides` are
// well formed for a layer of `shape`: at least one token, k not null, v null exactly when
// the layer has no V stream, nonzero strides at least a packed row. Otherwise the refusal,
// naming `layer` and saying the append's position `pos`.
inline Result CheckAppendRows(const KVShape& shape, uint64_t pos, const void* k, const void* v,
                              uint64_t num_tokens, RowStrides strides, uint64_t layer) {
  if (num_tokens == 0) {
    return KVRING_DETAIL_REFUSED(layer, Status::kEmptyBatch,
                                 "append at %llu of no tokens: a batch holds at least one", pos);
  }
  if (k == nullptr) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument, "append at %llu: k is null", pos);
  }
  if (v == nullptr && shape.v_head_dim != 0) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                 "append at %llu: v is null, but the layer stores V rows (a "
                                 "DSA latent: its indexer keys) of %llu elements",
                                 pos, shape.VRowElements());
  }
  if (v != nullptr && shape.v_head_dim == 0) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                 "append at %llu: v is not null, but the layer stores no V "
                                 "(an MLA latent without a DSA indexer)",
                                 pos);
  }
  if (strides.k != 0 && strides.k < shape.KRowElements()) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                 "append at %llu: k row stride %llu is below the %llu elements "
                                 "of a K row (kv_heads x head_dim)",
                                 pos, strides.k, shape.KRowElements());
  }
  if (shape.v_head_dim != 0 && strides.v != 0 && strides.v < shape.VRowElements()) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                 "append at %llu: v row stride %llu is below the %llu elements "
                                 "of a V row (kv_heads x v_head_dim)",
                                 pos, strides.v, shape.VRowElements());
  }
  return Status::kOk;
}

// One read of a stored position: its BF16 row as stored (ReadRow), its int8 row and scales
// as stored (ReadRowInt8), or its values as f32 in either format (ReadRowF32), and where
// they go: k [kv_head][head_dim] and k_scales [kv_head]; v and v_scales likewise, or null.
struct RowRead {
  enum class As : uint8_t { kBF16, kInt8, kF32 };
  As as = As::kF32;
  void* k = nullptr;
  float* k_scales = nullptr;
  void* v = nullptr;
  float* v_scales = nullptr;

  static RowRead BF16s(BF16* k_out, BF16* v_out) {
    return RowRead{As::kBF16, k_out, nullptr, v_out, nullptr};
  }
  static RowRead Int8s(int8_t* k_out, float* k_scales_out, int8_t* v_out, float* v_scales_out) {
    return RowRead{As::kInt8, k_out, k_scales_out, v_out, v_scales_out};
  }
  static RowRead F32s(float* k_out, float* v_out) {
    return RowRead{As::kF32, k_out, nullptr, v_out, nullptr};
  }
};

// Returns kOk if `read` of `pos` fits a layer stored in `format` that holds [first, end);
// otherwise the first refusal, naming `layer`: a stored row of the other format, a position
// not held (kNotLive, saying the live range), a null k, an int8 read's null k_scales.
inline Result CheckRowRead(Format format, const RowRead& read, uint64_t pos, uint64_t first,
                           uint64_t end, uint64_t layer) {
  if (read.as == RowRead::As::kBF16 && format != Format::kBF16) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                 "BF16 read of %llu, but the layer stores int8; read it with "
                                 "ReadRowInt8 (stored bytes and scales) or ReadRowF32 (decoded)",
                                 pos);
  }
  if (read.as == RowRead::As::kInt8 && !IsInt8(format)) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument,
                                 "int8 read of %llu, but the layer stores bf16; read it with "
                                 "ReadRow (stored) or ReadRowF32 (widened)",
                                 pos);
  }
  if (pos < first || pos >= end) {
    return KVRING_DETAIL_REFUSED(layer, Status::kNotLive,
                                 "read of %llu, but the held positions are [%llu, %llu)", pos,
                                 first, end);
  }
  if (read.k == nullptr) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument, "read of %llu: k_out is null", pos);
  }
  if (read.as == RowRead::As::kInt8 && read.k_scales == nullptr) {
    return KVRING_DETAIL_REFUSED(layer, Status::kBadArgument, "read of %llu: k_scales_out is null",
                                 pos);
  }
  return Status::kOk;
}

template <typename Layout>
struct LayerRows {
  Layout layout;
  Format format = Format::kBF16;
  BF16* k_bf16 = nullptr;
  BF16* v_bf16 = nullptr;
  int8_t* k_int8 = nullptr;
  int8_t* v_int8 = nullptr;
  float* k_scales = nullptr;
  float* v_scales = nullptr;

  uint64_t ScaleOffset(uint64_t slot, uint32_t kv_head) const {
    return layout.Shape().ScaleOffset(slot, kv_head);
  }

  // Writes `len` token rows into slots [slot, slot + len): K rows k_stride elements apart and
  // V rows v_stride apart (v null without V), BF16 rounded to nearest even or int8 encoded
  // per (token, kv_head) row (EncodeInt8Row). `stream`: a BF16 K may go out with non-temporal
  // stores (the caller fences with StoreFence).
  template <typename T>
  void Write(uint64_t slot, const T* k, const T* v, uint64_t k_stride, uint64_t v_stride,
             uint64_t len, bool stream) const {
    KVRING_DASSERT(slot + len <= layout.Shape().num_slots);
    if (IsInt8(format)) {
      WriteKInt8(slot, k, k_stride, len);
      if (v != nullptr) WriteVInt8(slot, v, v_stride, len);
      return;
    }
    WriteK(slot, k, k_stride, len, stream);
    if (v != nullptr) WriteV(slot, v, v_stride, len);
  }

  // Copies the row of `slot` as `read` asks (CheckRowRead allowed it): the one read of
  // stored rows, whose codecs per format follow.
  void Read(uint64_t slot, const RowRead& read) const {
    switch (read.as) {
      case RowRead::As::kBF16:
        ReadRow(slot, static_cast<BF16*>(read.k), static_cast<BF16*>(read.v));
        return;
      case RowRead::As::kInt8:
        ReadRowInt8(slot, static_cast<int8_t*>(read.k), read.k_scales, static_cast<int8_t*>(read.v),
                    read.v_scales);
        return;
      case RowRead::As::kF32:
        ReadRowF32(slot, static_cast<float*>(read.k), static_cast<float*>(read.v));
        return;
    }
  }

  // Copies the BF16 row of `slot` into k_out [kv_head][head_dim] and, if not null, v_out
  // [kv_head][v_head_dim]. A BF16 layer's only.
  void ReadRow(uint64_t slot, BF16* k_out, BF16* v_out) const {
    KVRING_DASSERT(format == Format::kBF16);
    const KVShape& shape = layout.Shape();
    const auto k_map = layout.K();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
        *k_out++ = k_bf16[k_map(slot, kv_head, dim)];
      }
    }
    if (v_out == nullptr || shape.v_head_dim == 0) return;
    const auto v_map = layout.V();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      std::memcpy(v_out + uint64_t{kv_head} * shape.v_head_dim, v_bf16 + v_map(slot, kv_head, 0),
                  shape.v_head_dim * sizeof(BF16));
    }
  }

  // Copies the int8 row of `slot` exactly: k_out [kv_head][head_dim], k_scales_out [kv_head],
  // and if not null v_out [kv_head][v_head_dim] and v_scales_out [kv_head]. An int8 layer's
  // only.
  void ReadRowInt8(uint64_t slot, int8_t* k_out, float* k_scales_out, int8_t* v_out,
                   float* v_scales_out) const {
    KVRING_DASSERT(IsInt8(format));
    const KVShape& shape = layout.Shape();
    const auto k_map = layout.K();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
        *k_out++ = k_int8[k_map(slot, kv_head, dim)];
      }
      k_scales_out[kv_head] = k_scales[ScaleOffset(slot, kv_head)];
    }
    if (shape.v_head_dim == 0) return;
    const auto v_map = layout.V();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      if (v_out != nullptr) {
        std::memcpy(v_out + uint64_t{kv_head} * shape.v_head_dim, v_int8 + v_map(slot, kv_head, 0),
                    shape.v_head_dim);
      }
      if (v_scales_out != nullptr) v_scales_out[kv_head] = v_scales[ScaleOffset(slot, kv_head)];
    }
  }

  // Copies the values of `slot` as f32 into k_out [kv_head][head_dim] and, if not null, v_out
  // [kv_head][v_head_dim]: BF16 widened exactly, int8 decoded as DecodeInt8(scale, q), and a
  // rotated K (kInt8Hadamard) rotated back (RotateHadamard).
  void ReadRowF32(uint64_t slot, float* k_out, float* v_out) const {
    const KVShape& shape = layout.Shape();
    const auto k_map = layout.K();
    const auto v_map = layout.V();
    const bool int8 = IsInt8(format);
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      const float k_scale = int8 ? k_scales[ScaleOffset(slot, kv_head)] : 0.0f;
      for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
        const uint64_t offset = k_map(slot, kv_head, dim);
        k_out[dim] = int8 ? DecodeInt8(k_scale, k_int8[offset]) : BF16ToF32(k_bf16[offset]);
      }
      if (RotatesK(format)) RotateHadamard(k_out, shape.head_dim);
      k_out += shape.head_dim;
    }
    if (v_out == nullptr || shape.v_head_dim == 0) return;
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      const float v_scale = int8 ? v_scales[ScaleOffset(slot, kv_head)] : 0.0f;
      const uint64_t offset = v_map(slot, kv_head, 0);
      for (uint32_t dim = 0; dim < shape.v_head_dim; ++dim) {
        *v_out++ =
            int8 ? DecodeInt8(v_scale, v_int8[offset + dim]) : BF16ToF32(v_bf16[offset + dim]);
      }
    }
  }

  // Sets the element and scale pointers of `view` (format, k, v, k_int8, ... and layout).
  void FillView(KVView<Layout>* view) const {
    view->format = format;
    view->layout = layout;
    const bool has_v = layout.Shape().v_head_dim != 0;
    if (IsInt8(format)) {
      view->k_int8 = k_int8;
      view->v_int8 = has_v ? v_int8 : nullptr;
      view->k_scales = k_scales;
      view->v_scales = has_v ? v_scales : nullptr;
    } else {
      view->k = k_bf16;
      view->v = has_v ? v_bf16 : nullptr;
    }
  }

  // Encodes `len` K rows, `row_stride` elements apart, into slots [slot, slot + len), which
  // do not wrap, and their scales. Each (token, kv_head) row is encoded into a staging block
  // [token][dim] first, then 16 tokens x 16 dims at a time transposed into K, which is
  // slot-major per dim in both layouts.
  // The parts of Write and CopySlotsTo.
  template <typename T>
  void WriteKInt8(uint64_t slot, const T* rows, uint64_t row_stride, uint64_t len) const {
    constexpr uint64_t kBlock = 16;
    const KVShape& shape = layout.Shape();
    const auto map = layout.K();
    const uint64_t head_dim = shape.head_dim;
    alignas(64) int8_t stage[kBlock * kMaxAttentionHeadDim];
    KVRING_DASSERT(head_dim <= kMaxAttentionHeadDim);
    for (uint64_t i = 0; i < len;) {
      const uint64_t run = std::min({len - i, map.ContiguousSlotsFrom(slot + i), kBlock});
      for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
        const T* src = rows + i * row_stride + uint64_t{kv_head} * head_dim;
        float* scales = k_scales + ScaleOffset(slot + i, kv_head);
        if (RotatesK(format)) {
          EncodeRotatedRows(src, row_stride, head_dim, run, stage, scales);
        } else {
          EncodeRows(src, row_stride, head_dim, run, stage, head_dim, scales);
        }
        const uint8_t* from = reinterpret_cast<const uint8_t*>(stage);
        uint8_t* to = reinterpret_cast<uint8_t*>(k_int8 + map(slot + i, kv_head, 0));
        const uint64_t dim_stride = map.DimStride();
        uint64_t dim = 0;
        if (run == kBlock) {
          // head_dim is a multiple of 16 (ValidateAttentionDim).
          for (; dim + kBlock <= head_dim; dim += kBlock) {
            Transpose16x16Bytes(from + dim, head_dim, to + dim * dim_stride, dim_stride);
          }
        }
        for (; dim < head_dim; ++dim) {
          for (uint64_t t = 0; t < run; ++t) to[dim * dim_stride + t] = from[t * head_dim + dim];
        }
      }
      i += run;
    }
  }

  // Encodes `len` V rows, `row_stride` elements apart, into slots [slot, slot + len) and
  // their scales; V is [kv_head][slot][dim], so each row is encoded in place.
  template <typename T>
  void WriteVInt8(uint64_t slot, const T* rows, uint64_t row_stride, uint64_t len) const {
    const KVShape& shape = layout.Shape();
    const auto map = layout.V();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      EncodeRows(rows + uint64_t{kv_head} * shape.v_head_dim, row_stride, shape.v_head_dim, len,
                 v_int8 + map(slot, kv_head, 0), map.SlotStride(),
                 v_scales + ScaleOffset(slot, kv_head));
    }
  }

  // EncodeRows of K rows rotated first (kInt8Hadamard): each row widened to f32 in a buffer
  // of its own and rotated (RotateHadamard), then encoded into q (rows n apart).
  template <typename T>
  static void EncodeRotatedRows(const T* src, uint64_t src_stride, uint64_t n, uint64_t num_rows,
                                int8_t* q, float* scales) {
    alignas(64) float row[kMaxAttentionHeadDim];
    KVRING_DASSERT(n <= kMaxAttentionHeadDim);
    for (uint64_t r = 0; r < num_rows; ++r) {
      for (uint64_t e = 0; e < n; ++e) row[e] = detail::ToF32(src[r * src_stride + e]);
      RotateHadamard(row, n);
      EncodeRows(row, n, n, 1, q + r * n, n, scales + r);
    }
  }

  // Encodes `num_rows` rows of `n` elements, `src_stride` apart, with EncodeInt8Row into q
  // (rows `q_stride` apart) and scales[0, num_rows).
  template <typename T>
  static void EncodeRowsScalar(const T* src, uint64_t src_stride, uint64_t n, uint64_t num_rows,
                               int8_t* q, uint64_t q_stride, float* scales) {
    for (uint64_t r = 0; r < num_rows; ++r) {
      scales[r] = EncodeInt8Row(src + r * src_stride, n, q + r * q_stride);
    }
  }
#if KVRING_TRANSPOSE_AVX2
  // The same, compiled for AVX2: EncodeInt8Row inlines here and its loops vectorise 8 lanes
  // wide (twice SSE2's divisions per cycle). Bit-identical: each lane does the same IEEE
  // operations, and without the fma target no multiply-add is contracted.
  template <typename T>
  __attribute__((target("avx2"))) static void EncodeRowsAvx2(const T* src, uint64_t src_stride,
                                                             uint64_t n, uint64_t num_rows,
                                                             int8_t* q, uint64_t q_stride,
                                                             float* scales) {
    for (uint64_t r = 0; r < num_rows; ++r) {
      scales[r] = EncodeInt8Row(src + r * src_stride, n, q + r * q_stride);
    }
  }
#endif
  template <typename T>
  static void EncodeRows(const T* src, uint64_t src_stride, uint64_t n, uint64_t num_rows,
                         int8_t* q, uint64_t q_stride, float* scales) {
#if KVRING_TRANSPOSE_AVX2
    if (CpuHasAvx2()) {
      EncodeRowsAvx2(src, src_stride, n, num_rows, q, q_stride, scales);
      return;
    }
#endif
    EncodeRowsScalar(src, src_stride, n, num_rows, q, q_stride, scales);
  }

  // Writes `len` K rows, `row_stride` elements apart, into slots [slot, slot + len), which do
  // not wrap. K is slot-major per dim in both layouts, so rows are transposed in blocks
  // (TransposeRowsToBF16, transpose.h).
  template <typename T>
  void WriteK(uint64_t slot, const T* rows, uint64_t row_stride, uint64_t len, bool stream) const {
    const KVShape& shape = layout.Shape();
    const auto map = layout.K();
    for (uint64_t i = 0; i < len;) {
      // Slots stay adjacent up to the end of a tile (tiled) or of the buffer (flash).
      const uint64_t run = std::min(len - i, map.ContiguousSlotsFrom(slot + i));
      for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
        TransposeRowsToBF16(rows + i * row_stride + uint64_t{kv_head} * shape.head_dim, row_stride,
                            k_bf16 + map(slot + i, kv_head, 0), map.DimStride(), run,
                            shape.head_dim, stream);
      }
      i += run;
    }
  }

  // Copies `count` BF16 from `from` to `to` (not overlapping) in 16-byte pieces: rows are a
  // few hundred bytes, too short to amortise a call to memcpy per row.
  static void CopyRow(const BF16* from, BF16* to, uint64_t count) {
    uint64_t i = 0;
    for (; i + 8 <= count; i += 8) std::memcpy(to + i, from + i, 8 * sizeof(BF16));
    for (; i < count; ++i) to[i] = from[i];
  }

  // Writes `len` V rows, `row_stride` elements apart, into slots [slot, slot + len); V is
  // [kv_head][slot][dim].
  template <typename T>
  void WriteV(uint64_t slot, const T* rows, uint64_t row_stride, uint64_t len) const {
    const KVShape& shape = layout.Shape();
    const auto map = layout.V();
    for (uint64_t t = 0; t < len; ++t) {
      for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
        BF16* dst = v_bf16 + map(slot + t, kv_head, 0);
        const T* src = rows + t * row_stride + uint64_t{kv_head} * shape.v_head_dim;
        if constexpr (std::is_same<T, BF16>::value) {
          CopyRow(src, dst, shape.v_head_dim);
        } else {
          for (uint32_t dim = 0; dim < shape.v_head_dim; ++dim) dst[dim] = ToBF16(src[dim]);
        }
      }
    }
  }

  // Copies slots [from_slot, +len) to `to`'s [to_slot, +len); neither range wraps, and
  // both start at the same position, so they share their offset inside a tile.
  void CopySlotsTo(uint64_t from_slot, const LayerRows& to, uint64_t to_slot, uint64_t len) const {
    if (format == Format::kBF16) {
      CopyElements(k_bf16, v_bf16, from_slot, to.layout, to.k_bf16, to.v_bf16, to_slot, len);
      return;
    }
    CopyElements(k_int8, v_int8, from_slot, to.layout, to.k_int8, to.v_int8, to_slot, len);
    const KVShape& shape = layout.Shape();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      std::memcpy(to.k_scales + to.ScaleOffset(to_slot, kv_head),
                  k_scales + ScaleOffset(from_slot, kv_head), len * sizeof(float));
      if (shape.v_head_dim != 0) {
        std::memcpy(to.v_scales + to.ScaleOffset(to_slot, kv_head),
                    v_scales + ScaleOffset(from_slot, kv_head), len * sizeof(float));
      }
    }
  }

  // Copies the K and V elements (BF16 or int8) of CopySlots from this layout's buffers `k`,
  // `v` to `to_layout`'s `to_k`, `to_v`.
  template <typename T>
  void CopyElements(const T* k, const T* v, uint64_t from_slot, const Layout& to_layout, T* to_k,
                    T* to_v, uint64_t to_slot, uint64_t len) const {
    const KVShape& shape = layout.Shape();
    const auto from_k = layout.K();
    const auto to_k_map = to_layout.K();
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (uint64_t i = 0; i < len;) {
        const uint64_t run = std::min({len - i, from_k.ContiguousSlotsFrom(from_slot + i),
                                       to_k_map.ContiguousSlotsFrom(to_slot + i)});
        const T* src = k + from_k(from_slot + i, kv_head, 0);
        T* dst = to_k + to_k_map(to_slot + i, kv_head, 0);
        if (run == from_k.DimStride() && run == to_k_map.DimStride()) {
          // Whole rows of every dim: one block (a full tile, or a whole flash ring).
          std::memcpy(dst, src, run * shape.head_dim * sizeof(T));
        } else {
          for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
            std::memcpy(dst + dim * to_k_map.DimStride(), src + dim * from_k.DimStride(),
                        run * sizeof(T));
          }
        }
        i += run;
      }
      if (shape.v_head_dim != 0) {
        std::memcpy(to_v + to_layout.V()(to_slot, kv_head, 0),
                    v + layout.V()(from_slot, kv_head, 0), len * shape.v_head_dim * sizeof(T));
      }
    }
  }
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_LAYER_ROWS_H_
