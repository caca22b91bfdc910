// Tests of kvring/layouts/: every layout maps (slot, kv_head, dim) one-to-one onto its span,
// for K and V, over several shapes; strides and contiguity are what the layout declares.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

}  // namespace
}  // namespace kvring
