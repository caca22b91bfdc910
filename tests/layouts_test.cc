// Tests of kvring/layouts/: every layout maps (slot, kv_head, dim) one-to-one onto its span,
// for K and V, over several shapes; strides and contiguity are what the layout declares.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kvring/detail/transpose.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"

namespace kvring {
namespace {

template <typename Layout>
class LayoutTest : public ::testing::Test {};
using Layouts = ::testing::Types<FlashLayout, TiledLayout<8>, TiledLayout<16>, TiledLayout<32>,
                                 TiledLayout<64>>;
TYPED_TEST_SUITE(LayoutTest, Layouts);

// Checks that `mapping` over the shape is one-to-one, inside its span and exhaustive, and
// that DimStride/SlotStride/ContiguousSlotsFrom describe it.
template <typename Mapping>
void ExpectBijective(const Mapping& mapping, const KVShape& shape, uint32_t dims,
                     const char* what) {
  const uint64_t span = mapping.RequiredSpanSize();
  ASSERT_EQ(span, shape.num_slots * shape.num_kv_heads * dims) << what;
  std::vector<bool> seen(span, false);
  for (uint64_t slot = 0; slot < shape.num_slots; ++slot) {
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (uint32_t dim = 0; dim < dims; ++dim) {
        const uint64_t offset = mapping(slot, kv_head, dim);
        ASSERT_LT(offset, span) << what << " slot " << slot << " head " << kv_head << " dim "
                                << dim;
        ASSERT_FALSE(seen[offset]) << what << ": offset " << offset << " mapped twice";
        seen[offset] = true;
        if (dim + 1 < dims) {
          ASSERT_EQ(mapping(slot, kv_head, dim + 1), offset + mapping.DimStride()) << what;
        }
        if (mapping.ContiguousSlotsFrom(slot) > 1) {
          ASSERT_EQ(mapping(slot + 1, kv_head, dim), offset + mapping.SlotStride()) << what;
        }
      }
    }
  }
  if (Mapping::IsExhaustive()) {
    for (uint64_t offset = 0; offset < span; ++offset) {
      ASSERT_TRUE(seen[offset]) << what << ": offset " << offset << " unmapped";
    }
  }
}

TYPED_TEST(LayoutTest, MappingsAreOneToOneAndInsideTheirSpan) {
  using Layout = TypeParam;
  for (uint32_t head_dim : {1u, 16u, 64u, 80u, 96u, 128u, 256u, 576u}) {
    for (uint32_t num_kv_heads : {1u, 3u, 8u}) {
      for (uint64_t tiles : {1u, 3u}) {
        KVShape shape;
        shape.num_slots = tiles * Layout::kSlotAlignment;
        shape.num_kv_heads = num_kv_heads;
        shape.head_dim = head_dim;
        shape.v_head_dim = head_dim == 576 ? 0 : head_dim + 16;  // MLA-like: no V
        const Layout layout(shape);
        EXPECT_EQ(layout.Shape(), shape);
        ExpectBijective(layout.K(), shape, shape.head_dim, "K");
        ExpectBijective(layout.V(), shape, shape.v_head_dim, "V");
      }
    }
  }
}

TYPED_TEST(LayoutTest, PositionAlignedTilesAreContiguousAndSlotAlignedToThem) {
  using Layout = TypeParam;
  EXPECT_EQ(Layout::kSlotAlignment % Layout::kTileSlots, 0u);
  KVShape shape{4 * Layout::kSlotAlignment, 2, 64, 64};
  const auto k = Layout(shape).K();
  for (uint64_t tile_start = 0; tile_start < shape.num_slots; tile_start += Layout::kTileSlots) {
    EXPECT_GE(k.ContiguousSlotsFrom(tile_start), Layout::kTileSlots);
  }
}

TEST(FlashLayout, KIsTransposedAndVIsRowMajor) {
  const FlashLayout layout(KVShape{64, 2, 128, 96});
  // K [kv_head][dim][slot]
  EXPECT_EQ(layout.K()(5, 1, 3), (1u * 128 + 3) * 64 + 5);
  // V [kv_head][slot][dim]
  EXPECT_EQ(layout.V()(5, 1, 3), (1u * 64 + 5) * 96 + 3);
}

TEST(TiledLayout, KIsTilesOfDimByRow) {
  const TiledLayout<16> layout(KVShape{64, 2, 128, 128});
  // K [kv_head][tile][dim][row]: slot 37 is tile 2, row 5.
  EXPECT_EQ(layout.K()(37, 1, 3), ((1u * 4 + 2) * 128 + 3) * 16 + 5);
  EXPECT_EQ(layout.V()(37, 1, 3), (1u * 64 + 37) * 128 + 3);
}

// Every path of the K transposition (detail/transpose.h): AVX2 whole tiles and 32-token
// streams, AVX2 16 x 16 blocks, 8 x 8 blocks (SSE2, and the plain C++ of other
// architectures) and the scalar edges, each turned on or off by the test hooks, against the
// element-by-element rule, for f32 and BF16 rows of many shapes, strides and destination
// offsets.
template <typename T>
void CheckTransposePaths() {
  for (int path = 0; path < 3; ++path) {
    const bool avx2 = path == 0, sse2 = path != 2;
    detail::TransposeAvx2Allowed() = avx2;
    detail::TransposeSse2Allowed() = sse2;
    for (uint64_t tokens : {1u, 7u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 64u, 100u}) {
      for (uint64_t dims : {16u, 24u, 64u, 72u}) {
        for (uint64_t dst_stride : {16u, 32u, 128u, 160u}) {
          if (dst_stride < tokens && dst_stride != 16) continue;
          for (bool stream : {false, true}) {
            const uint64_t src_stride = dims + 8;
            std::vector<T> src(tokens * src_stride);
            for (size_t i = 0; i < src.size(); ++i) {
              const float value = static_cast<float>(i % 251) * 0.37f - 40.0f;
              if constexpr (std::is_same<T, float>::value) {
                src[i] = value;
              } else {
                src[i] = BF16FromF32(value);
              }
            }
            const uint64_t written = dst_stride == 16 ? std::min<uint64_t>(tokens, 16) : tokens;
            // 64-byte aligned rows (the streaming paths' condition), and an offset of 8
            // elements (the cached way for the first tokens).
            for (uint64_t offset : {0u, 8u}) {
              std::vector<BF16> dst_storage(dims * dst_stride + offset + 64);
              const uintptr_t base = reinterpret_cast<uintptr_t>(dst_storage.data());
              BF16* dst = dst_storage.data() + ((64 - base % 64) % 64) / 2 + offset;
              detail::TransposeRowsToBF16(src.data(), src_stride, dst, dst_stride, written, dims,
                                          stream);
              detail::StoreFence();
              for (uint64_t d = 0; d < dims; ++d) {
                for (uint64_t t = 0; t < written; ++t) {
                  ASSERT_EQ(dst[d * dst_stride + t].bits,
                            detail::ToBF16(src[t * src_stride + d]).bits)
                      << "avx2 " << avx2 << " sse2 " << sse2 << " tokens " << written << " dims "
                      << dims << " stride " << dst_stride << " stream " << stream << " offset "
                      << offset;
                }
              }
            }
          }
        }
      }
    }
  }
  detail::TransposeAvx2Allowed() = true;
  detail::TransposeSse2Allowed() = true;
}

TEST(Transpose, EveryPathWritesEveryElementOfF32AndBF16Rows) {
  CheckTransposePaths<float>();
  CheckTransposePaths<BF16>();
}

TEST(Transpose, BothPathsOfTheBlocksMoveEveryElement) {
  // The 8 x 8 (16-bit) and 16 x 16 (8-bit) blocks, SSE2 and plain C++, with strides past the
  // block (a row of K in a layout), against the element-by-element rule.
  for (bool sse2 : {true, false}) {
    detail::TransposeSse2Allowed() = sse2;
    std::vector<uint16_t> src16(8 * 40), dst16(8 * 24, 0);
    for (size_t i = 0; i < src16.size(); ++i) src16[i] = static_cast<uint16_t>(i * 2654435761u);
    detail::Transpose8x8(src16.data(), 40, dst16.data(), 24);
    std::vector<uint8_t> src8(16 * 48), dst8(16 * 32, 0);
    for (size_t i = 0; i < src8.size(); ++i) src8[i] = static_cast<uint8_t>(i * 40503u >> 3);
    detail::Transpose16x16Bytes(src8.data(), 48, dst8.data(), 32);
    for (uint64_t d = 0; d < 16; ++d) {
      for (uint64_t t = 0; t < 16; ++t) {
        if (d < 8 && t < 8) {
          ASSERT_EQ(dst16[d * 24 + t], src16[t * 40 + d]) << "sse2 " << sse2;
        }
        ASSERT_EQ(dst8[d * 32 + t], src8[t * 48 + d]) << "sse2 " << sse2;
      }
      // Past the block, nothing is written.
      for (uint64_t t = 16; t < 32; ++t) ASSERT_EQ(dst8[d * 32 + t], 0) << "sse2 " << sse2;
    }
  }
  detail::TransposeSse2Allowed() = true;
}

TEST(Transpose, StreamGatherTilesCopiesEveryRowOfEveryTileAndNothingElse) {
  // Runs of tiles from a state chunk's rows (a source row per dim, the tiles' columns side by
  // side), on the line-at-a-time path (rows of 16, 32 and 64 bytes into a 64-byte aligned
  // destination) and every other (rows of 8, 48 and 128 bytes, a destination off a line, an
  // odd number of rows per line, the plain copy), against the element-by-element rule.
  for (bool streams : {true, false}) {
    detail::StreamCopyAllowed() = streams;
    for (uint64_t row_bytes : {8, 16, 32, 48, 64, 128}) {
      for (uint64_t rows : {1, 3, 4, 8, 12}) {
        for (uint64_t tiles : {1, 2, 5}) {
          for (uint64_t misalign : {0, 16}) {
            const uint64_t stride = tiles * row_bytes + 24;  // the chunk's row: more columns
            std::vector<uint8_t> src(rows * stride);
            for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 40503u >> 5);
            const uint64_t bytes = tiles * rows * row_bytes;
            std::vector<uint8_t> memory(bytes + 128 + 64, 0xEE);
            uint8_t* dst =
                memory.data() + (64 - reinterpret_cast<uintptr_t>(memory.data()) % 64) + misalign;
            detail::StreamGatherTiles(dst, src.data(), stride, row_bytes, rows, tiles);
            detail::StoreFence();
            const std::string what = "streams " + std::to_string(streams) + " row_bytes " +
                                     std::to_string(row_bytes) + " rows " + std::to_string(rows) +
                                     " tiles " + std::to_string(tiles) + " misalign " +
                                     std::to_string(misalign);
            for (uint64_t t = 0; t < tiles; ++t) {
              for (uint64_t r = 0; r < rows; ++r) {
                for (uint64_t i = 0; i < row_bytes; ++i) {
                  ASSERT_EQ(dst[(t * rows + r) * row_bytes + i],
                            src[r * stride + t * row_bytes + i])
                      << what << " tile " << t << " row " << r << " byte " << i;
                }
              }
            }
            for (const uint8_t* p = memory.data(); p < dst; ++p) ASSERT_EQ(*p, 0xEE) << what;
            for (const uint8_t* p = dst + bytes; p < memory.data() + memory.size(); ++p) {
              ASSERT_EQ(*p, 0xEE) << what;
            }
          }
        }
      }
    }
  }
  detail::StreamCopyAllowed() = true;
}

TEST(Transpose, StreamCopyCopiesEveryByteAndNothingElse) {
  // Short copies, copies of whole blocks of four pages and more (the interleaved path of
  // copies from memory) with ragged ends, into a destination on and off a 16-byte boundary;
  // from cache and from memory, streams on and off.
  std::vector<uint8_t> src(3 * 16384 + 1000 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (bool streams : {true, false}) {
    detail::StreamCopyAllowed() = streams;
    for (uint64_t bytes : {0, 15, 16, 63, 64, 100, 16383, 16384, 16384 + 17, 3 * 16384 + 1000}) {
      for (uint64_t misalign : {0, 1, 8, 15}) {
        std::vector<uint8_t> memory(bytes + 128, 0xEE);
        uint8_t* dst =
            memory.data() + (64 - reinterpret_cast<uintptr_t>(memory.data()) % 64) + misalign;
        for (bool from_memory : {false, true}) {
          std::fill(memory.begin(), memory.end(), 0xEE);
          if (from_memory) {
            detail::StreamCopy<true>(dst, src.data() + 7, bytes);
          } else {
            detail::StreamCopy(dst, src.data() + 7, bytes);
          }
          detail::StoreFence();
          const std::string what = "streams " + std::to_string(streams) + " from memory " +
                                   std::to_string(from_memory) + " bytes " + std::to_string(bytes) +
                                   " misalign " + std::to_string(misalign);
          for (uint64_t i = 0; i < bytes; ++i) ASSERT_EQ(dst[i], src[7 + i]) << what << " at " << i;
          for (const uint8_t* p = memory.data(); p < dst; ++p) ASSERT_EQ(*p, 0xEE) << what;
          for (const uint8_t* p = dst + bytes; p < memory.data() + memory.size(); ++p) {
            ASSERT_EQ(*p, 0xEE) << what;
          }
        }
      }
    }
  }
  detail::StreamCopyAllowed() = true;
}

}  // namespace
}  // namespace kvring
