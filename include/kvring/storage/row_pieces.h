// kvring/storage/row_pieces.h: a layer's stored rows in an order that depends on no layout, for
// saving, loading and moving them (io/state_io.h). Positions go in chunks of kRowChunk
// aligned to multiples of it; a chunk of n positions [c, c + n) is
//   K        [kv_head][dim][pos]   (BF16, or int8)
//   K scales [kv_head][pos]        (f32; int8 only)
//   V        [kv_head][pos][dim]   (none without V: an MLA latent)
//   V scales [kv_head][pos]        (f32; int8 only)
// the elements exactly as stored. ForEachRowPiece walks the contiguous pieces of a layer's
// buffers (a ring's slots up to where it wraps, a block, a tile) in the order of those bytes,
// so that a writer streams them and a reader fills the buffers from them. Internal.
#ifndef KVRING_STORAGE_ROW_PIECES_H_
#define KVRING_STORAGE_ROW_PIECES_H_

#include <algorithm>
#include <cstdint>

#include "kvring/base.h"
#include "kvring/detail/checked_math.h"
#include "kvring/formats/format.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/storage/layer_rows.h"

namespace kvring {
namespace detail {

// Positions per chunk: a chunk's bytes stay in cache while its pieces are gathered (a
// 128-dim BF16 head's K is 64 KiB), and tiled layouts' pieces come from a few tiles.
inline constexpr uint64_t kRowChunk = 256;

// Returns the bytes one position of a layer of `shape` in `format` takes in the piece order:
// every element and, for int8, each row's scale (RowBytes counts both).
inline uint64_t PositionBytes(const KVShape& shape, Format format) {
  const uint64_t v_bytes = shape.v_head_dim != 0 ? RowBytes(format, shape.v_head_dim) : 0;
  return uint64_t{shape.num_kv_heads} * (RowBytes(format, shape.head_dim) + v_bytes);
}

// Sets *bytes to what `positions` positions take in the piece order; false on overflow.
inline bool PieceBytes(const KVShape& shape, Format format, uint64_t positions, uint64_t* bytes) {
  return CheckedMul(PositionBytes(shape, format), positions, bytes);
}

// Slots [slot, slot + run) of `rows` hold consecutive positions (a ring up to where it wraps,
// or a block of a paged layer).
template <typename Layout>
struct RowSegment {
  LayerRows<Layout> rows;
  uint64_t slot = 0;
  uint64_t run = 0;
};

// The pieces of positions [from, end) of the chunk [chunk_first, end) whose bytes start at
// `base`: ForEachRowPiece's body, below.
template <typename Layout, typename Locate, typename Piece>
void ForEachChunkPiece(const KVShape& shape, Format format, uint64_t base, uint64_t chunk_first,
                       uint64_t from, uint64_t end, const Locate& locate, const Piece& piece) {
  const uint64_t n = end - chunk_first;
  const bool int8 = format == Format::kInt8;
  const uint64_t element = int8 ? 1 : sizeof(BF16);
  const uint32_t heads = shape.num_kv_heads, dims = shape.head_dim, v_dims = shape.v_head_dim;
  // Calls fn(segment, pos, len) for each segment of [from, end).
  const auto segments = [&](const auto& fn) {
    for (uint64_t pos = from; pos < end;) {
      const RowSegment<Layout> segment = locate(pos);
      const uint64_t len = std::min(segment.run, end - pos);
      fn(segment, pos - chunk_first, len);
      pos += len;
    }
  };
  const auto bytes_of = [int8](const LayerRows<Layout>& rows, bool v) {
    return v ? (int8 ? reinterpret_cast<uint8_t*>(rows.v_int8)
                     : reinterpret_cast<uint8_t*>(rows.v_bf16))
             : (int8 ? reinterpret_cast<uint8_t*>(rows.k_int8)
                     : reinterpret_cast<uint8_t*>(rows.k_bf16));
  };
  uint64_t offset = base;
  for (uint32_t head = 0; head < heads; ++head) {
    for (uint32_t dim = 0; dim < dims; ++dim, offset += n * element) {
      segments([&](const RowSegment<Layout>& segment, uint64_t at, uint64_t len) {
        const auto k_map = segment.rows.layout.K();
        uint8_t* k = bytes_of(segment.rows, false);
        for (uint64_t i = 0; i < len;) {
          const uint64_t run = std::min(len - i, k_map.ContiguousSlotsFrom(segment.slot + i));
          piece(offset + (at + i) * element, k + k_map(segment.slot + i, head, dim) * element,
                run * element);
          i += run;
        }
      });
    }
  }
  const auto scales = [&](bool v) {
    for (uint32_t head = 0; head < heads; ++head, offset += n * sizeof(float)) {
      segments([&](const RowSegment<Layout>& segment, uint64_t at, uint64_t len) {
        float* base_scale = v ? segment.rows.v_scales : segment.rows.k_scales;
        piece(offset + at * sizeof(float),
              reinterpret_cast<uint8_t*>(base_scale + segment.rows.ScaleOffset(segment.slot, head)),
              len * sizeof(float));
      });
    }
  };
  if (int8) scales(false);
  if (v_dims == 0) return;
  for (uint32_t head = 0; head < heads; ++head, offset += n * v_dims * element) {
    segments([&](const RowSegment<Layout>& segment, uint64_t at, uint64_t len) {
      piece(offset + at * v_dims * element,
            bytes_of(segment.rows, true) + segment.rows.layout.V()(segment.slot, head, 0) * element,
            len * v_dims * element);
    });
  }
  if (int8) scales(true);
}

// Calls piece(offset, memory, bytes) for every contiguous piece of the stored rows of
// positions [from, end) of a layer of `shape` in `format` whose pieces start at `first`
// (first <= from <= end), in increasing `offset`: the piece's place among the bytes of
// [first, end) in the order above. locate(pos) returns the RowSegment holding `pos`.
// `from` > `first` skips what a smaller ring does not keep.
template <typename Layout, typename Locate, typename Piece>
void ForEachRowPiece(const KVShape& shape, Format format, uint64_t first, uint64_t from,
                     uint64_t end, const Locate& locate, const Piece& piece) {
  KVRING_DASSERT(first <= from && from <= end);
  const uint64_t per_position = PositionBytes(shape, format);
  for (uint64_t begin = from; begin < end;) {
    const uint64_t chunk_end = std::min(end, (begin / kRowChunk + 1) * kRowChunk);
    const uint64_t chunk_first = std::max(first, begin / kRowChunk * kRowChunk);
    ForEachChunkPiece<Layout>(shape, format, (chunk_first - first) * per_position, chunk_first,
                              begin, chunk_end, locate, piece);
    begin = chunk_end;
  }
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_ROW_PIECES_H_
