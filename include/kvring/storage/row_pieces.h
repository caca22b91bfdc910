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

// The order ForEachRowPiece gives the pieces in. Both follow the storage within each kv_head's
// K of a chunk (whole tiles in turn: a reader's non-temporal stores write whole lines, a
// writer reads each tile once), and the bytes elsewhere. kStaged announces each kv_head's K of
// a chunk first, with a piece without memory (its offset and bytes), so that a writer stages
// that block whole and fills it in any order.
enum class PieceOrder : uint8_t { kStorage, kStaged };

// `count` contiguous pieces of `bytes` bytes each: piece r is at offset + r * offset_stride
// among the bytes of the order above and at memory + r * memory_stride in storage.
struct RowPiece {
  uint64_t offset = 0;
  uint8_t* memory = nullptr;
  uint64_t bytes = 0;
  uint64_t count = 1;
  uint64_t offset_stride = 0;
  uint64_t memory_stride = 0;
};

// Calls piece(RowPiece) for the K of `head` in slots [slot, slot + len) of `rows` (positions
// `at` onwards of a chunk of n): per run of slots contiguous in storage, every dim at once.
// `offset` is where the chunk's K starts.
template <typename Layout, typename Piece>
void ForEachKPiece(const LayerRows<Layout>& rows, uint8_t* k, uint64_t element, uint32_t head,
                   uint32_t dims, uint64_t slot, uint64_t at, uint64_t len, uint64_t n,
                   uint64_t offset, const Piece& piece) {
  const auto map = rows.layout.K();
  for (uint64_t i = 0; i < len;) {
    const uint64_t run = std::min(len - i, map.ContiguousSlotsFrom(slot + i));
    piece(RowPiece{offset + (uint64_t{head} * dims * n + at + i) * element,
                   k + map(slot + i, head, 0) * element, run * element, dims, n * element,
                   map.DimStride() * element});
    i += run;
  }
}

// The pieces of positions [from, end) of the chunk [chunk_first, end) whose bytes start at
// `base`: ForEachRowPiece's body, below.
template <PieceOrder kOrder, typename Layout, typename Locate, typename Piece>
void ForEachChunkPiece(const KVShape& shape, Format format, uint64_t base, uint64_t chunk_first,
                       uint64_t from, uint64_t end, const Locate& locate, const Piece& piece) {
  const uint64_t n = end - chunk_first;
  const bool int8 = IsInt8(format);
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
  const uint64_t k_block = uint64_t{dims} * n * element;  // one kv_head's K of the chunk
  // A staged block is filled whole: a writer's pieces cover the chunk from its start.
  KVRING_DASSERT(kOrder != PieceOrder::kStaged || from == chunk_first);
  for (uint32_t head = 0; head < heads; ++head) {
    if (kOrder == PieceOrder::kStaged) piece(RowPiece{offset + head * k_block, nullptr, k_block});
    segments([&](const RowSegment<Layout>& segment, uint64_t at, uint64_t len) {
      ForEachKPiece(segment.rows, bytes_of(segment.rows, false), element, head, dims, segment.slot,
                    at, len, n, offset, piece);
    });
  }
  offset += uint64_t{heads} * dims * n * element;
  const auto scales = [&](bool v) {
    for (uint32_t head = 0; head < heads; ++head, offset += n * sizeof(float)) {
      segments([&](const RowSegment<Layout>& segment, uint64_t at, uint64_t len) {
        float* base_scale = v ? segment.rows.v_scales : segment.rows.k_scales;
        piece(RowPiece{
            offset + at * sizeof(float),
            reinterpret_cast<uint8_t*>(base_scale + segment.rows.ScaleOffset(segment.slot, head)),
            len * sizeof(float)});
      });
    }
  };
  if (int8) scales(false);
  if (v_dims == 0) return;
  for (uint32_t head = 0; head < heads; ++head, offset += n * v_dims * element) {
    segments([&](const RowSegment<Layout>& segment, uint64_t at, uint64_t len) {
      piece(RowPiece{
          offset + at * v_dims * element,
          bytes_of(segment.rows, true) + segment.rows.layout.V()(segment.slot, head, 0) * element,
          len * v_dims * element});
    });
  }
  if (int8) scales(true);
}

// Calls piece(RowPiece) for the contiguous pieces of the stored rows of positions [from, end)
// of a layer of `shape` in `format` whose bytes start at `first` (first <= from <= end):
// offsets are places among the bytes of [first, end) in the order above. locate(pos) returns
// the RowSegment holding `pos`.
// `from` > `first` skips what a smaller ring does not keep.
template <PieceOrder kOrder, typename Layout, typename Locate, typename Piece>
void ForEachRowPiece(const KVShape& shape, Format format, uint64_t first, uint64_t from,
                     uint64_t end, const Locate& locate, const Piece& piece) {
  KVRING_DASSERT(first <= from && from <= end);
  const uint64_t per_position = PositionBytes(shape, format);
  for (uint64_t begin = from; begin < end;) {
    const uint64_t chunk_end = std::min(end, (begin / kRowChunk + 1) * kRowChunk);
    const uint64_t chunk_first = std::max(first, begin / kRowChunk * kRowChunk);
    ForEachChunkPiece<kOrder, Layout>(shape, format, (chunk_first - first) * per_position,
                                      chunk_first, begin, chunk_end, locate, piece);
    begin = chunk_end;
  }
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_ROW_PIECES_H_
