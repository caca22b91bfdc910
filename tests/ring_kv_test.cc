// Tests of kvring/ring_kv.h and kvring/global_kv.h used directly: creation errors, appends,
// reads after wraps, growth, snapshots, clearing, and refused calls that change nothing.
#include "kvring/ring_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvring/global_kv.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"

namespace kvring {
namespace {

// Elements of one position's K (and of its V) in RingSpec: 2 kv_heads x 16 dims.
constexpr uint64_t kRow = 32;

// A spec of a sliding layer: 2 kv_heads x 16 dims, window 10 (keep 9), 32 slots.
StorageSpec RingSpec(uint64_t num_slots = 32, uint64_t max_rollback = 4) {
  StorageSpec spec;
  spec.shape = KVShape{num_slots, 2, 16, 16};
  spec.keep = 9;
  spec.max_rollback = max_rollback;
  spec.context = 10000;
  return spec;
}

// Rows of `num_tokens` positions from `pos` on whose every element encodes (pos, element).
std::vector<float> Rows(uint64_t pos, uint64_t num_tokens, float stream) {
  std::vector<float> rows(num_tokens * kRow);
  for (uint64_t t = 0; t < num_tokens; ++t) {
    for (uint64_t e = 0; e < kRow; ++e) {
      rows[t * kRow + e] =
          stream + static_cast<float>((pos + t) % 200) + static_cast<float>(e) / kRow;
    }
  }
  return rows;
}

template <typename Storage>
void Append(Storage* kv, uint64_t num_tokens) {
  const uint64_t pos = kv->EndPos();
  const std::vector<float> k = Rows(pos, num_tokens, 0), v = Rows(pos, num_tokens, 1000);
  ASSERT_EQ(kv->AppendF32(pos, k.data(), v.data(), num_tokens), Status::kOk);
}

template <typename Storage>
void ExpectHolds(const Storage& kv, uint64_t first, uint64_t end) {
  ASSERT_EQ(kv.FirstPos(), first);
  ASSERT_EQ(kv.EndPos(), end);
  std::vector<BF16> k(kRow), v(kRow);
  for (uint64_t pos = first; pos < end; ++pos) {
    ASSERT_EQ(kv.ReadRow(pos, k.data(), v.data()), Status::kOk) << pos;
    const std::vector<float> k_want = Rows(pos, 1, 0), v_want = Rows(pos, 1, 1000);
    for (size_t e = 0; e < kRow; ++e) {
      ASSERT_EQ(k[e].bits, BF16FromF32(k_want[e]).bits) << pos << " " << e;
      ASSERT_EQ(v[e].bits, BF16FromF32(v_want[e]).bits) << pos << " " << e;
    }
  }
}

// The slots a layout holds `capacity` positions in, worked out here: whole tiles; for the
// flash layout an odd number of 32-slot tiles.
template <typename Layout>
uint64_t SlotsFor(uint64_t capacity) {
  uint64_t tiles = (capacity + Layout::kSlotAlignment - 1) / Layout::kSlotAlignment;
  if (Layout::kBackend == Backend::kFlash && tiles % 2 == 0) ++tiles;
  return tiles * Layout::kSlotAlignment;
}

template <typename Layout>
class RingKVTest : public ::testing::Test {};
using Layouts = ::testing::Types<FlashLayout, TiledLayout<8>, TiledLayout<16>, TiledLayout<32>>;
TYPED_TEST_SUITE(RingKVTest, Layouts);

TYPED_TEST(RingKVTest, ViewAfterWrapReturnsLastWindowPositions) {
  Expected<RingKV<TypeParam>> created = RingKV<TypeParam>::Create(RingSpec());
  ASSERT_TRUE(created.ok()) << created.error().message;
  RingKV<TypeParam> ring = std::move(created).value();
  EXPECT_EQ(ring.AllocatedBytes(), 32u * kRow * 2 * 2);
  for (int i = 0; i < 13; ++i) Append(&ring, 7);  // 91 positions: wraps twice
  ExpectHolds(ring, 91 - 32, 91);
  const KVView<TypeParam> view = ring.View(Visibility{AttentionKind::kSliding, 10});
  EXPECT_TRUE(view.CanServe(90));
  EXPECT_EQ(view.SlotOf(90), 90u % 32);
  EXPECT_EQ(view.k[view.layout.K()(view.SlotOf(85), 1, 3)].bits,
            BF16FromF32(Rows(85, 1, 0)[16 + 3]).bits);
}

TYPED_TEST(RingKVTest, ABatchLargerThanPlannedGrowsAndKeepsHistory) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(RingSpec()).value();
  Append(&ring, 20);
  Append(&ring, 20);  // holds [8, 40)
  Append(&ring, 40);  // keep 9 + 40 > 32 slots: grows to 49, padded, keeping [8, 40)
  const uint64_t num_slots = SlotsFor<TypeParam>(49);
  EXPECT_EQ(ring.NumSlots(), num_slots);
  ExpectHolds(ring, 80 > num_slots + 8 ? 80 - num_slots : 8, 80);
  EXPECT_EQ(ring.AllocatedBytes(), ring.NumSlots() * kRow * 2 * 2);
}

TYPED_TEST(RingKVTest, GrowKeepsEveryHeldPositionInOrder) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(RingSpec()).value();
  for (int i = 0; i < 9; ++i) Append(&ring, 5);  // [13, 45), wrapped
  ASSERT_EQ(ring.Grow(100), Status::kOk);
  EXPECT_EQ(ring.NumSlots(), SlotsFor<TypeParam>(100));
  ExpectHolds(ring, 13, 45);
  Append(&ring, 50);
  ExpectHolds(ring, 13, 95);                          // nothing overwritten yet
  EXPECT_EQ(ring.Grow(10), Status::kOk);              // smaller: nothing changes
  EXPECT_EQ(ring.Grow(20000), Status::kBadArgument);  // past the context
  ExpectHolds(ring, 13, 95);
}

TYPED_TEST(RingKVTest, SnapshotSharesNothingWithItsSource) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(RingSpec()).value();
  for (int i = 0; i < 6; ++i) Append(&ring, 9);  // [22, 54)
  RingKV<TypeParam> snapshot = ring.Copy().value();
  Append(&ring, 20);
  ring.Clear();
  ExpectHolds(snapshot, 22, 54);
  Append(&snapshot, 3);
  ExpectHolds(snapshot, 25, 57);
  EXPECT_EQ(ring.EndPos(), 0u);
}

TYPED_TEST(RingKVTest, ClearThenReuseSeesOnlyNewPositions) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(RingSpec()).value();
  Append(&ring, 25);
  const uint64_t bytes = ring.AllocatedBytes();
  ring.Clear();
  EXPECT_EQ(ring.AllocatedBytes(), bytes);
  std::vector<BF16> k(kRow);
  EXPECT_EQ(ring.ReadRow(3, k.data(), nullptr), Status::kNotLive);
  Append(&ring, 4);
  ExpectHolds(ring, 0, 4);
}

TYPED_TEST(RingKVTest, RefusedCallsChangeNothing) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(RingSpec(32, 4)).value();
  for (int i = 0; i < 5; ++i) Append(&ring, 8);  // [8, 40)
  const std::vector<float> rows = Rows(0, 2, 0);
  EXPECT_EQ(ring.AppendF32(39, rows.data(), rows.data(), 2), Status::kWrongPosition);
  EXPECT_EQ(ring.AppendF32(41, rows.data(), rows.data(), 2), Status::kWrongPosition);
  EXPECT_EQ(ring.AppendF32(40, rows.data(), rows.data(), 0), Status::kEmptyBatch);
  EXPECT_EQ(ring.AppendF32(40, rows.data(), nullptr, 2), Status::kBadArgument);
  EXPECT_EQ(ring.AppendF32(40, nullptr, rows.data(), 2), Status::kBadArgument);
  EXPECT_EQ(ring.Rollback(5), Status::kRollbackTooFar);
  std::vector<BF16> k(kRow);
  EXPECT_EQ(ring.ReadRow(7, k.data(), nullptr), Status::kNotLive);
  EXPECT_EQ(ring.ReadRow(40, k.data(), nullptr), Status::kNotLive);
  ExpectHolds(ring, 8, 40);
  EXPECT_EQ(ring.Rollback(4), Status::kOk);
  ExpectHolds(ring, 8, 36);
}

TYPED_TEST(RingKVTest, CreateRejectsSpecsNoRingCanHold) {
  StorageSpec spec = RingSpec();
  spec.shape.num_slots = TypeParam::kSlotAlignment + 1;
  EXPECT_EQ(RingKV<TypeParam>::Create(spec).error().field, "shape.num_slots");
  spec = RingSpec();
  spec.shape.num_kv_heads = 0;
  EXPECT_EQ(RingKV<TypeParam>::Create(spec).error().field, "shape.num_kv_heads");
  spec = RingSpec();
  spec.shape.head_dim = 0;
  EXPECT_EQ(RingKV<TypeParam>::Create(spec).error().field, "shape.head_dim");
  spec = RingSpec();
  spec.context = 0;
  EXPECT_EQ(RingKV<TypeParam>::Create(spec).error().field, "context");
  spec = RingSpec();
  spec.keep = 32;  // no room for the new token itself
  EXPECT_EQ(RingKV<TypeParam>::Create(spec).error().field, "shape.num_slots");
  spec = RingSpec();
  spec.shape.num_slots = uint64_t{1} << 62;  // past what can be addressed
  EXPECT_EQ(RingKV<TypeParam>::Create(spec).error().field, "shape.num_slots");
}

TYPED_TEST(RingKVTest, CreateRefusesHeadDimsTheAttentionKernelsCannotServe) {
  StorageSpec spec = RingSpec();
  spec.shape.head_dim = 72;
  Expected<RingKV<TypeParam>> ring = RingKV<TypeParam>::Create(spec);
  ASSERT_FALSE(ring.ok());
  EXPECT_EQ(ring.error().field, "shape.head_dim");
  EXPECT_EQ(ring.error().message,
            "shape.head_dim: 72 is not a multiple of 16 (the attention kernels need head dims in "
            "multiples of 16, at most 576)");
  spec.shape.head_dim = 592;
  EXPECT_EQ(RingKV<TypeParam>::Create(spec).error().field, "shape.head_dim");
  spec = RingSpec();
  spec.shape.v_head_dim = 40;
  EXPECT_EQ(RingKV<TypeParam>::Create(spec).error().field, "shape.v_head_dim");
  spec.shape.v_head_dim = 0;  // no V stream (an MLA latent) is served
  EXPECT_TRUE(RingKV<TypeParam>::Create(spec).ok());
  spec = RingSpec(64);
  spec.context = 50;
  spec.shape.head_dim = 8;
  EXPECT_EQ(GlobalKV<TypeParam>::Create(spec).error().field, "shape.head_dim");
  spec.shape.head_dim = kMaxAttentionHeadDim;
  EXPECT_TRUE(GlobalKV<TypeParam>::Create(spec).ok());
}

TYPED_TEST(RingKVTest, RefusalsSayWhatWasWrongWithTheValues) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(RingSpec(32, 4)).value();
  for (int i = 0; i < 5; ++i) Append(&ring, 8);  // [8, 40)
  const std::vector<float> rows = Rows(40, 2, 0);
  EXPECT_EQ(ring.AppendF32(41, rows.data(), rows.data(), 2).Message(),
            "WrongPosition: append at 41, but its next position is 40");
  EXPECT_EQ(ring.AppendF32(40, rows.data(), nullptr, 2).Message(),
            "BadArgument: append at 40: v is null, but the layer stores V rows of 32 elements");
  EXPECT_EQ(ring.AppendF32(40, rows.data(), rows.data(), 2, {31, 0}).Message(),
            "BadArgument: append at 40: k row stride 31 is below the 32 elements of a K row "
            "(kv_heads x head_dim)");
  EXPECT_EQ(ring.AppendF32(40, rows.data(), rows.data(), 0).Message(),
            "EmptyBatch: append at 40 of no tokens: a batch holds at least one");
  std::vector<BF16> k(kRow);
  EXPECT_EQ(ring.ReadRow(7, k.data(), nullptr).Message(),
            "NotLive: read of 7, but the held positions are [8, 40)");
  EXPECT_EQ(ring.Rollback(5).Message(),
            "RollbackTooFar: rollback of 5 positions, but at most 4 are allowed now (planned "
            "headroom 4; the next query's window stays held)");
  EXPECT_EQ(ring.Grow(20000).Message(), "BadArgument: capacity 20000 is past the context 10000");
  ExpectHolds(ring, 8, 40);
  const RollbackResult rolled = ring.Rollback(3);
  EXPECT_TRUE(rolled.ok());
  EXPECT_EQ(rolled.EndPos(), 37u);
  // With room to spare in the headroom, the window before the new end bounds a rollback:
  // [8, 40) less the 9 positions the next query reads leaves 23.
  RingKV<TypeParam> deep = RingKV<TypeParam>::Create(RingSpec(32, 30)).value();
  for (int i = 0; i < 5; ++i) Append(&deep, 8);
  EXPECT_EQ(deep.Rollback(24).Message(),
            "RollbackTooFar: rollback of 24 positions, but at most 23 are allowed now (planned "
            "headroom 30; the next query's window stays held)");
  EXPECT_EQ(deep.Rollback(23).EndPos(), 17u);

  StorageSpec spec = RingSpec(64);
  spec.context = 50;
  spec.keep = 50;
  GlobalKV<TypeParam> flat = GlobalKV<TypeParam>::Create(spec).value();
  Append(&flat, 45);
  const std::vector<float> more = Rows(45, 6, 0);
  EXPECT_EQ(flat.AppendF32(45, more.data(), more.data(), 6).Message(),
            "ContextFull: append at 45 of 6 tokens passes the context of 50 positions");
  ExpectHolds(flat, 0, 45);
}

// Returns `rows` ([token][row_elements]) laid out `stride` elements apart, the gaps filled
// with a value that must never be read.
template <typename T>
std::vector<T> Strided(const std::vector<T>& rows, uint64_t row_elements, uint64_t stride,
                       T filler) {
  const uint64_t num_tokens = rows.size() / row_elements;
  std::vector<T> strided(num_tokens * stride, filler);
  for (uint64_t t = 0; t < num_tokens; ++t) {
    std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(t * row_elements), row_elements,
                strided.begin() + static_cast<std::ptrdiff_t>(t * stride));
  }
  return strided;
}

TYPED_TEST(RingKVTest, StridedRowsAreStoredAsTheSameRowsPacked) {
  // Rings and flat storage, f32 and BF16, one token and 300 (streamed K lines in a ring),
  // K and V strides that differ and are not multiples of a vector.
  StorageSpec ring_spec = RingSpec();
  ring_spec.shape.num_slots = 0;
  ASSERT_TRUE(TypeParam::NumSlotsFor(400, &ring_spec.shape.num_slots));
  StorageSpec flat_spec = ring_spec;
  flat_spec.context = 2000;
  flat_spec.keep = 2000;
  ASSERT_TRUE(TypeParam::NumSlotsFor(2000, &flat_spec.shape.num_slots));
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(ring_spec).value();
  RingKV<TypeParam> packed_ring = RingKV<TypeParam>::Create(ring_spec).value();
  GlobalKV<TypeParam> flat = GlobalKV<TypeParam>::Create(flat_spec).value();
  GlobalKV<TypeParam> packed_flat = GlobalKV<TypeParam>::Create(flat_spec).value();
  const RowStrides strides{kRow + 7, 3 * kRow};
  for (uint64_t num_tokens : {1u, 300u, 1u, 300u, 300u}) {
    const uint64_t pos = ring.EndPos();
    const std::vector<float> k = Rows(pos, num_tokens, 0), v = Rows(pos, num_tokens, 1000);
    const std::vector<float> k_strided = Strided(k, kRow, strides.k, -1e30f);
    const std::vector<float> v_strided = Strided(v, kRow, strides.v, -1e30f);
    if (num_tokens % 2 == 0) {
      ASSERT_EQ(ring.AppendF32(pos, k_strided.data(), v_strided.data(), num_tokens, strides),
                Status::kOk);
      ASSERT_EQ(flat.AppendF32(pos, k_strided.data(), v_strided.data(), num_tokens, strides),
                Status::kOk);
      ASSERT_EQ(packed_ring.AppendF32(pos, k.data(), v.data(), num_tokens), Status::kOk);
      ASSERT_EQ(packed_flat.AppendF32(pos, k.data(), v.data(), num_tokens), Status::kOk);
    } else {
      std::vector<BF16> k16(k.size()), v16(v.size());
      for (size_t i = 0; i < k.size(); ++i) k16[i] = BF16FromF32(k[i]);
      for (size_t i = 0; i < v.size(); ++i) v16[i] = BF16FromF32(v[i]);
      const BF16 nan{0x7FC1};
      const std::vector<BF16> k_strided16 = Strided(k16, kRow, strides.k, nan);
      const std::vector<BF16> v_strided16 = Strided(v16, kRow, strides.v, nan);
      ASSERT_EQ(ring.AppendBF16(pos, k_strided16.data(), v_strided16.data(), num_tokens, strides),
                Status::kOk);
      ASSERT_EQ(flat.AppendBF16(pos, k_strided16.data(), v_strided16.data(), num_tokens, strides),
                Status::kOk);
      ASSERT_EQ(packed_ring.AppendBF16(pos, k16.data(), v16.data(), num_tokens), Status::kOk);
      ASSERT_EQ(packed_flat.AppendBF16(pos, k16.data(), v16.data(), num_tokens), Status::kOk);
    }
  }
  ExpectHolds(ring, ring.EndPos() - std::min(ring.EndPos(), ring.NumSlots()), ring.EndPos());
  ExpectHolds(flat, 0, flat.EndPos());
  std::vector<BF16> k(kRow), v(kRow), k_packed(kRow), v_packed(kRow);
  for (uint64_t pos = ring.FirstPos(); pos < ring.EndPos(); ++pos) {
    ASSERT_EQ(ring.ReadRow(pos, k.data(), v.data()), Status::kOk);
    ASSERT_EQ(packed_ring.ReadRow(pos, k_packed.data(), v_packed.data()), Status::kOk);
    for (size_t e = 0; e < kRow; ++e) {
      ASSERT_EQ(k[e].bits, k_packed[e].bits) << pos;
      ASSERT_EQ(v[e].bits, v_packed[e].bits) << pos;
    }
  }
  for (uint64_t pos = 0; pos < flat.EndPos(); ++pos) {
    ASSERT_EQ(flat.ReadRow(pos, k.data(), v.data()), Status::kOk);
    ASSERT_EQ(packed_flat.ReadRow(pos, k_packed.data(), v_packed.data()), Status::kOk);
    for (size_t e = 0; e < kRow; ++e) {
      ASSERT_EQ(k[e].bits, k_packed[e].bits) << pos;
      ASSERT_EQ(v[e].bits, v_packed[e].bits) << pos;
    }
  }
}

TYPED_TEST(RingKVTest, GlobalKVHoldsTheContextAndRefusesPastIt) {
  StorageSpec spec = RingSpec(64);
  spec.context = 50;
  spec.keep = 50;
  Expected<GlobalKV<TypeParam>> created = GlobalKV<TypeParam>::Create(spec);
  ASSERT_TRUE(created.ok()) << created.error().message;
  GlobalKV<TypeParam> flat = std::move(created).value();
  Append(&flat, 30);
  Append(&flat, 20);
  ExpectHolds(flat, 0, 50);
  const std::vector<float> rows = Rows(50, 1, 0);
  EXPECT_EQ(flat.AppendF32(50, rows.data(), rows.data(), 1), Status::kContextFull);
  ExpectHolds(flat, 0, 50);
  GlobalKV<TypeParam> snapshot = flat.Copy().value();
  flat.Clear();
  ExpectHolds(snapshot, 0, 50);

  spec.shape.num_slots = TypeParam::kSlotAlignment;  // below the context
  spec.context = 4 * TypeParam::kSlotAlignment;
  EXPECT_EQ(GlobalKV<TypeParam>::Create(spec).error().field, "shape.num_slots");
}

TYPED_TEST(RingKVTest, WideRowsOfAnyBatchReadBackExactly) {
  // Head dims and batches that hit every path of the K transposition: 16 x 16 and 8 x 8
  // blocks, partial blocks of tokens, f32 and BF16 rows, and batches of 128 or
  // more (streamed K lines) starting on and off a 64-byte boundary and split by the wrap.
  const uint32_t dims[][2] = {{16, 16}, {48, 16}, {64, 32}, {128, 64}, {144, 96}};
  for (const auto& [head_dim, v_head_dim] : dims) {
    StorageSpec spec;
    spec.shape = KVShape{0, 3, head_dim, v_head_dim};
    ASSERT_TRUE(TypeParam::NumSlotsFor(400, &spec.shape.num_slots));
    spec.keep = 50;
    spec.context = 100000;
    RingKV<TypeParam> ring = RingKV<TypeParam>::Create(spec).value();
    const uint64_t k_row = 3 * head_dim, v_row = 3 * v_head_dim;
    std::vector<std::vector<uint16_t>> k_bits, v_bits;  // by position
    uint32_t seed = 1;
    const auto next = [&seed] {
      seed = seed * 1664525u + 1013904223u;
      return static_cast<float>(seed >> 8) / 65536.0f - 128.0f;
    };
    for (uint64_t num_tokens :
         {1u, 7u, 16u, 33u, 100u, 17u, 64u, 128u, 300u, 131u, 5u, 257u, 200u}) {
      std::vector<float> k(num_tokens * k_row), v(num_tokens * v_row);
      for (float& x : k) x = next();
      for (float& x : v) x = next();
      std::vector<BF16> k16(k.size()), v16(v.size());
      for (size_t i = 0; i < k.size(); ++i) k16[i] = BF16FromF32(k[i]);
      for (size_t i = 0; i < v.size(); ++i) v16[i] = BF16FromF32(v[i]);
      const Status status =
          num_tokens % 2 ? ring.AppendF32(ring.EndPos(), k.data(), v.data(), num_tokens)
                         : ring.AppendBF16(ring.EndPos(), k16.data(), v16.data(), num_tokens);
      ASSERT_EQ(status, Status::kOk);
      for (uint64_t t = 0; t < num_tokens; ++t) {
        k_bits.emplace_back();
        v_bits.emplace_back();
        for (uint64_t e = 0; e < k_row; ++e) k_bits.back().push_back(k16[t * k_row + e].bits);
        for (uint64_t e = 0; e < v_row; ++e) v_bits.back().push_back(v16[t * v_row + e].bits);
      }
    }
    std::vector<BF16> k_out(k_row), v_out(v_row);
    for (uint64_t pos = ring.FirstPos(); pos < ring.EndPos(); ++pos) {
      ASSERT_EQ(ring.ReadRow(pos, k_out.data(), v_out.data()), Status::kOk);
      for (uint64_t e = 0; e < k_row; ++e) {
        ASSERT_EQ(k_out[e].bits, k_bits[pos][e]) << head_dim << " " << pos << " " << e;
      }
      for (uint64_t e = 0; e < v_row; ++e) {
        ASSERT_EQ(v_out[e].bits, v_bits[pos][e]) << head_dim << " " << pos << " " << e;
      }
    }
  }
}

TEST(RingKV, BF16RowsAreStoredAsTheyAre) {
  RingKV<FlashLayout> ring = RingKV<FlashLayout>::Create(RingSpec()).value();
  std::vector<BF16> k(kRow), v(kRow);
  for (size_t e = 0; e < kRow; ++e) {
    k[e].bits = static_cast<uint16_t>(0x7FC1 + e);  // NaN payloads survive too
    v[e].bits = static_cast<uint16_t>(0x3F80 + e);
  }
  ASSERT_EQ(ring.AppendBF16(0, k.data(), v.data(), 1), Status::kOk);
  std::vector<BF16> k_out(kRow), v_out(kRow);
  ASSERT_EQ(ring.ReadRow(0, k_out.data(), v_out.data()), Status::kOk);
  for (size_t e = 0; e < kRow; ++e) {
    EXPECT_EQ(k_out[e].bits, k[e].bits);
    EXPECT_EQ(v_out[e].bits, v[e].bits);
  }
}

}  // namespace
}  // namespace kvring
