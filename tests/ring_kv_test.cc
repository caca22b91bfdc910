// Tests of kvring/storage/ring_kv.h and kvring/storage/global_kv.h used directly: creation errors,
// appends, reads after wraps, growth, snapshots, clearing, and refused calls that change nothing.
#include "kvring/storage/ring_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kvring/formats/format.h"
#include "kvring/formats/hadamard.h"
#include "kvring/formats/int8.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/storage/global_kv.h"

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
            "BadArgument: append at 40: v is null, but the layer stores V rows (a DSA latent: its "
            "indexer keys) of 32 elements");
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

// Sets *ring to `ring`'s shape over 400 positions, and *flat to the same layer holding a
// context of 2000 flat: the storages of the strided-rows tests. Returns false if the layout
// cannot hold them.
template <typename Layout>
bool StridedSpecs(StorageSpec* ring, StorageSpec* flat) {
  ring->shape.num_slots = 0;
  if (!Layout::NumSlotsFor(400, &ring->shape.num_slots)) return false;
  *flat = *ring;
  flat->context = 2000;
  flat->keep = 2000;
  return Layout::NumSlotsFor(2000, &flat->shape.num_slots);
}

TYPED_TEST(RingKVTest, StridedRowsAreStoredAsTheSameRowsPacked) {
  // Rings and flat storage, f32 and BF16, one token and 300 (streamed K lines in a ring),
  // K and V strides that differ and are not multiples of a vector.
  StorageSpec ring_spec = RingSpec(), flat_spec;
  ASSERT_TRUE(StridedSpecs<TypeParam>(&ring_spec, &flat_spec));
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

// The int8 encoding of one position's rows, worked out with EncodeInt8Row per kv_head (for
// kInt8Hadamard, of each K row rotated with RotateHadamard first).
struct Int8Row {
  Format format = Format::kInt8;
  std::vector<int8_t> k, v;
  std::vector<float> k_scales, v_scales;
};

template <typename T>
Int8Row EncodeRow(const T* k, const T* v, const KVShape& shape, Format format = Format::kInt8) {
  Int8Row row;
  row.format = format;
  row.k.resize(shape.KRowElements());
  row.v.resize(shape.VRowElements());
  for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
    std::vector<float> k_row(shape.head_dim);
    for (uint32_t d = 0; d < shape.head_dim; ++d) {
      k_row[d] = kvring::detail::ToF32(k[uint64_t{h} * shape.head_dim + d]);
    }
    if (RotatesK(format)) RotateHadamard(k_row.data(), k_row.size());
    row.k_scales.push_back(
        EncodeInt8Row(k_row.data(), shape.head_dim, row.k.data() + uint64_t{h} * shape.head_dim));
    if (shape.v_head_dim == 0) continue;
    row.v_scales.push_back(EncodeInt8Row(v + uint64_t{h} * shape.v_head_dim, shape.v_head_dim,
                                         row.v.data() + uint64_t{h} * shape.v_head_dim));
  }
  return row;
}

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Checks that `kv` holds `want` at `pos` through ReadRowInt8 (the bytes and scale bits),
// ReadRowF32 (DecodeInt8 of them, K rotated back for kInt8Hadamard) and its view (k_int8,
// v_int8 at the layout's offsets, the scales at ScaleOffset).
template <typename Storage>
void ExpectInt8Row(const Storage& kv, uint64_t pos, const Int8Row& want) {
  const auto view = kv.View(Visibility{});
  const KVShape shape = view.layout.Shape();
  ASSERT_EQ(view.format, want.format);
  ASSERT_EQ(view.k, nullptr);
  ASSERT_EQ(view.v, nullptr);
  std::vector<int8_t> k(shape.KRowElements()), v(shape.VRowElements());
  std::vector<float> k_scales(shape.num_kv_heads), v_scales(shape.num_kv_heads);
  std::vector<float> k_f32(k.size()), v_f32(v.size());
  ASSERT_EQ(kv.ReadRowInt8(pos, k.data(), k_scales.data(), v.data(), v_scales.data()), Status::kOk);
  ASSERT_EQ(kv.ReadRowF32(pos, k_f32.data(), v_f32.data()), Status::kOk);
  const uint64_t slot = view.SlotOf(pos);
  for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
    ASSERT_EQ(Bits(k_scales[h]), Bits(want.k_scales[h])) << pos << " " << h;
    ASSERT_EQ(Bits(view.k_scales[view.ScaleOffset(slot, h)]), Bits(want.k_scales[h])) << pos;
    std::vector<float> decoded(shape.head_dim);
    for (uint32_t d = 0; d < shape.head_dim; ++d) {
      decoded[d] = DecodeInt8(want.k_scales[h], want.k[uint64_t{h} * shape.head_dim + d]);
    }
    if (RotatesK(want.format)) RotateHadamard(decoded.data(), decoded.size());
    for (uint32_t d = 0; d < shape.head_dim; ++d) {
      const uint64_t e = uint64_t{h} * shape.head_dim + d;
      ASSERT_EQ(k[e], want.k[e]) << pos << " " << e;
      ASSERT_EQ(view.k_int8[view.layout.K()(slot, h, d)], want.k[e]) << pos << " " << e;
      ASSERT_EQ(Bits(k_f32[e]), Bits(decoded[d])) << pos;
    }
    if (shape.v_head_dim == 0) continue;
    ASSERT_EQ(Bits(v_scales[h]), Bits(want.v_scales[h])) << pos << " " << h;
    ASSERT_EQ(Bits(view.v_scales[view.ScaleOffset(slot, h)]), Bits(want.v_scales[h])) << pos;
    for (uint32_t d = 0; d < shape.v_head_dim; ++d) {
      const uint64_t e = uint64_t{h} * shape.v_head_dim + d;
      ASSERT_EQ(v[e], want.v[e]) << pos << " " << e;
      ASSERT_EQ(view.v_int8[view.layout.V()(slot, h, d)], want.v[e]) << pos << " " << e;
      ASSERT_EQ(Bits(v_f32[e]), Bits(DecodeInt8(want.v_scales[h], want.v[e]))) << pos;
    }
  }
}

// Checks that `kv` holds exactly [first, end), each position as Append (f32 Rows) wrote it.
template <typename Storage>
void ExpectHoldsInt8(const Storage& kv, uint64_t first, uint64_t end) {
  ASSERT_EQ(kv.FirstPos(), first);
  ASSERT_EQ(kv.EndPos(), end);
  const KVShape shape = kv.GetLayout().Shape();
  for (uint64_t pos = first; pos < end; ++pos) {
    const std::vector<float> k = Rows(pos, 1, 0), v = Rows(pos, 1, 1000);
    ExpectInt8Row(kv, pos, EncodeRow(k.data(), v.data(), shape, kv.GetFormat()));
  }
}

StorageSpec Int8Spec(uint64_t num_slots = 32, uint64_t max_rollback = 4,
                     Format format = Format::kInt8) {
  StorageSpec spec = RingSpec(num_slots, max_rollback);
  spec.format = format;
  return spec;
}

TYPED_TEST(RingKVTest, Int8RowsReadBackAsTheirEncodingAndItsDecodedValues) {
  Expected<RingKV<TypeParam>> created = RingKV<TypeParam>::Create(Int8Spec());
  ASSERT_TRUE(created.ok()) << created.error().message;
  RingKV<TypeParam> ring = std::move(created).value();
  EXPECT_EQ(ring.GetFormat(), Format::kInt8);
  // 2 kv_heads: K and V rows of 16 int8 elements and a 4-byte scale each.
  EXPECT_EQ(ring.AllocatedBytes(), 32u * 2 * (RowBytes(Format::kInt8, 16) * 2));
  EXPECT_EQ(ring.AllocatedBytes(), 32u * 2 * 40);
  Append(&ring, 1);
  ExpectHoldsInt8(ring, 0, 1);
  for (int i = 0; i < 13; ++i) Append(&ring, 7);  // 92 positions: wraps twice
  ExpectHoldsInt8(ring, 92 - 32, 92);
  const KVView<TypeParam> view = ring.View(Visibility{AttentionKind::kSliding, 10});
  EXPECT_TRUE(view.HasV());
  EXPECT_TRUE(view.CanServe(91));
  // A BF16 read of an int8 layer is refused, pointing to the int8 reads; and the reverse.
  std::vector<BF16> k16(kRow);
  const Result refused = ring.ReadRow(91, k16.data(), nullptr);
  EXPECT_EQ(refused, Status::kBadArgument);
  EXPECT_NE(refused.Message().find("ReadRowInt8"), std::string::npos) << refused.Message();
  RingKV<TypeParam> bf16 = RingKV<TypeParam>::Create(RingSpec()).value();
  Append(&bf16, 3);
  std::vector<int8_t> q(kRow);
  std::vector<float> scales(2), f32(kRow);
  EXPECT_EQ(bf16.ReadRowInt8(1, q.data(), scales.data(), nullptr, nullptr), Status::kBadArgument);
  EXPECT_EQ(ring.ReadRowInt8(91, q.data(), nullptr, nullptr, nullptr), Status::kBadArgument);
  EXPECT_EQ(ring.ReadRowInt8(91, nullptr, scales.data(), nullptr, nullptr), Status::kBadArgument);
  EXPECT_EQ(ring.ReadRowInt8(59, q.data(), scales.data(), nullptr, nullptr), Status::kNotLive);
  EXPECT_EQ(ring.ReadRowF32(92, f32.data(), nullptr), Status::kNotLive);
  EXPECT_EQ(ring.ReadRowF32(91, nullptr, nullptr), Status::kBadArgument);
  // ReadRowF32 of a BF16 layer widens the stored BF16 exactly.
  ASSERT_EQ(bf16.ReadRowF32(2, f32.data(), nullptr), Status::kOk);
  const std::vector<float> want = Rows(2, 1, 0);
  for (size_t e = 0; e < kRow; ++e) {
    EXPECT_EQ(Bits(f32[e]), Bits(BF16ToF32(BF16FromF32(want[e])))) << e;
  }
}

TYPED_TEST(RingKVTest, Int8RingGrowsAndRollsBackKeepingRowsAndScales) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(Int8Spec()).value();
  for (int i = 0; i < 9; ++i) Append(&ring, 5);  // [13, 45), wrapped
  ASSERT_EQ(ring.Grow(100), Status::kOk);
  EXPECT_EQ(ring.NumSlots(), SlotsFor<TypeParam>(100));
  EXPECT_EQ(ring.AllocatedBytes(), ring.NumSlots() * 2 * 40);
  ExpectHoldsInt8(ring, 13, 45);
  Append(&ring, 300);  // larger than planned: grows again, as BF16 rings do
  EXPECT_EQ(ring.NumSlots(), SlotsFor<TypeParam>(9 + 300));
  // The oldest position held: 13, unless the ring has come round since.
  const auto first = [&ring](uint64_t end) {
    return std::max<uint64_t>(13, end - std::min(end, ring.NumSlots()));
  };
  ExpectHoldsInt8(ring, first(345), 345);
  ASSERT_EQ(ring.Rollback(4), Status::kOk);
  ExpectHoldsInt8(ring, first(345), 341);
  Append(&ring, 1);  // the same values again at 341
  ExpectHoldsInt8(ring, first(345), 342);
}

// Format::kInt8Hadamard: the same bytes as int8, each K row rotated before it is encoded; the
// rows read back as their encoding and, in f32, rotated back; the ring wraps, grows, rolls
// back and copies as int8's does. A row with an outlier channel loses far less to int8h than
// to int8; a layer without V is refused (a latent's values are its K).
TYPED_TEST(RingKVTest, Int8hRotatesKBeforeEncodingAndReadsItBackRotatedBack) {
  Expected<RingKV<TypeParam>> created =
      RingKV<TypeParam>::Create(Int8Spec(32, 4, Format::kInt8Hadamard));
  ASSERT_TRUE(created.ok()) << created.error().message;
  RingKV<TypeParam> ring = std::move(created).value();
  EXPECT_EQ(ring.GetFormat(), Format::kInt8Hadamard);
  EXPECT_EQ(ring.AllocatedBytes(), 32u * 2 * 40);  // as int8
  for (int i = 0; i < 13; ++i) Append(&ring, 7);   // 91 positions: wraps twice
  ExpectHoldsInt8(ring, 91 - 32, 91);
  ASSERT_EQ(ring.Grow(100), Status::kOk);
  ASSERT_EQ(ring.Rollback(3), Status::kOk);
  ExpectHoldsInt8(ring, 91 - 32, 88);
  RingKV<TypeParam> copy = ring.Copy().value();
  Append(&copy, 5);
  ExpectHoldsInt8(copy, 91 - 32, 93);
  EXPECT_EQ(ring.View(Visibility{}).format, Format::kInt8Hadamard);

  // One K row of each kv_head with channel 5 fifty times the others: the error of the values
  // read back in f32, against the row given, in both formats.
  RingKV<TypeParam> int8 = RingKV<TypeParam>::Create(Int8Spec()).value();
  std::vector<float> k(kRow), v(kRow, 1.0f);
  for (uint64_t e = 0; e < kRow; ++e) k[e] = std::sin(static_cast<float>(e) * 0.7f);
  k[5] = k[16 + 5] = 50.0f;
  const uint64_t pos = copy.EndPos();
  ASSERT_EQ(copy.AppendF32(pos, k.data(), v.data(), 1), Status::kOk);
  ASSERT_EQ(int8.AppendF32(0, k.data(), v.data(), 1), Status::kOk);
  std::vector<float> rotated_back(kRow), decoded(kRow);
  ASSERT_EQ(copy.ReadRowF32(pos, rotated_back.data(), nullptr), Status::kOk);
  ASSERT_EQ(int8.ReadRowF32(0, decoded.data(), nullptr), Status::kOk);
  double err_int8h = 0.0, err_int8 = 0.0;
  for (uint64_t e = 0; e < kRow; ++e) {
    if (e % 16 == 5) continue;  // the outlier itself: exact enough in both
    err_int8h += std::pow(rotated_back[e] - k[e], 2.0);
    err_int8 += std::pow(decoded[e] - k[e], 2.0);
  }
  EXPECT_LT(err_int8h * 4.0, err_int8) << err_int8h << " " << err_int8;
  EXPECT_LT(std::sqrt(err_int8h / 30.0), 50.0 / 127.0) << err_int8h;

  StorageSpec latent = Int8Spec(32, 4, Format::kInt8Hadamard);
  latent.shape.v_head_dim = 0;
  const Expected<RingKV<TypeParam>> refused = RingKV<TypeParam>::Create(latent);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, "format") << refused.error().message;
  EXPECT_NE(refused.error().message.find("int8h"), std::string::npos) << refused.error().message;
}

TYPED_TEST(RingKVTest, Int8SnapshotSharesNothingAndClearForgets) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(Int8Spec()).value();
  for (int i = 0; i < 6; ++i) Append(&ring, 9);  // [22, 54)
  RingKV<TypeParam> snapshot = ring.Copy().value();
  EXPECT_EQ(snapshot.GetFormat(), Format::kInt8);
  EXPECT_EQ(snapshot.AllocatedBytes(), ring.AllocatedBytes());
  // Different rows at the same positions in the source must not reach the snapshot.
  ASSERT_EQ(ring.Rollback(4), Status::kOk);
  const std::vector<float> other(4 * kRow, -3.5f);
  ASSERT_EQ(ring.AppendF32(50, other.data(), other.data(), 4), Status::kOk);
  Append(&ring, 20);
  const uint64_t bytes = ring.AllocatedBytes();
  ring.Clear();
  EXPECT_EQ(ring.AllocatedBytes(), bytes);
  EXPECT_EQ(ring.EndPos(), 0u);
  std::vector<int8_t> q(kRow);
  std::vector<float> scales(2);
  EXPECT_EQ(ring.ReadRowInt8(3, q.data(), scales.data(), nullptr, nullptr), Status::kNotLive);
  ExpectHoldsInt8(snapshot, 22, 54);
  Append(&snapshot, 3);
  ExpectHoldsInt8(snapshot, 25, 57);
  Append(&ring, 4);
  ExpectHoldsInt8(ring, 0, 4);
}

TYPED_TEST(RingKVTest, Int8StridedRowsAreStoredAsTheSameRowsPacked) {
  // As for BF16: rings and flat storage, f32 and BF16 rows, one token and 300.
  StorageSpec ring_spec = Int8Spec(), flat_spec;
  ASSERT_TRUE(StridedSpecs<TypeParam>(&ring_spec, &flat_spec));
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(ring_spec).value();
  GlobalKV<TypeParam> flat = GlobalKV<TypeParam>::Create(flat_spec).value();
  EXPECT_EQ(flat.AllocatedBytes(), flat.NumSlots() * 2 * 40);
  const KVShape shape = ring_spec.shape;
  const RowStrides strides{kRow + 7, 3 * kRow};
  std::vector<Int8Row> want;  // by position
  for (uint64_t num_tokens : {1u, 300u, 1u, 300u, 300u}) {
    const uint64_t pos = ring.EndPos();
    const std::vector<float> k = Rows(pos, num_tokens, 0), v = Rows(pos, num_tokens, 1000);
    if (num_tokens % 2 == 0) {
      const std::vector<float> k_strided = Strided(k, kRow, strides.k, -1e30f);
      const std::vector<float> v_strided = Strided(v, kRow, strides.v, -1e30f);
      ASSERT_EQ(ring.AppendF32(pos, k_strided.data(), v_strided.data(), num_tokens, strides),
                Status::kOk);
      ASSERT_EQ(flat.AppendF32(pos, k_strided.data(), v_strided.data(), num_tokens, strides),
                Status::kOk);
      for (uint64_t t = 0; t < num_tokens; ++t) {
        want.push_back(EncodeRow(k.data() + t * kRow, v.data() + t * kRow, shape));
      }
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
      for (uint64_t t = 0; t < num_tokens; ++t) {
        want.push_back(EncodeRow(k16.data() + t * kRow, v16.data() + t * kRow, shape));
      }
    }
  }
  ASSERT_EQ(ring.FirstPos(), ring.EndPos() - std::min(ring.EndPos(), ring.NumSlots()));
  for (uint64_t pos = ring.FirstPos(); pos < ring.EndPos(); ++pos) {
    ExpectInt8Row(ring, pos, want[pos]);
  }
  for (uint64_t pos = 0; pos < flat.EndPos(); ++pos) ExpectInt8Row(flat, pos, want[pos]);
}

TYPED_TEST(RingKVTest, Int8RowsWithNaNOrInfinityGetScaleNaNAndAZeroRowScaleZero) {
  RingKV<TypeParam> ring = RingKV<TypeParam>::Create(Int8Spec()).value();
  // K: kv_head 0 holds a NaN, kv_head 1 is all zeros; V: an infinity, then ordinary values.
  std::vector<float> k(kRow, 0.0f), v(kRow, 0.25f);
  for (size_t e = 0; e < 16; ++e) k[e] = static_cast<float>(e);
  k[5] = std::numeric_limits<float>::quiet_NaN();
  v[3] = -std::numeric_limits<float>::infinity();
  ASSERT_EQ(ring.AppendF32(0, k.data(), v.data(), 1), Status::kOk);
  std::vector<int8_t> k_q(kRow, 1), v_q(kRow, 1);
  std::vector<float> k_scales(2), v_scales(2), k_f32(kRow), v_f32(kRow);
  ASSERT_EQ(ring.ReadRowInt8(0, k_q.data(), k_scales.data(), v_q.data(), v_scales.data()),
            Status::kOk);
  ASSERT_EQ(ring.ReadRowF32(0, k_f32.data(), v_f32.data()), Status::kOk);
  EXPECT_TRUE(std::isnan(k_scales[0]));
  EXPECT_EQ(Bits(k_scales[1]), Bits(0.0f));
  EXPECT_TRUE(std::isnan(v_scales[0]));
  EXPECT_EQ(v_scales[1], 0.25f / 127.0f);
  for (size_t e = 0; e < kRow; ++e) {
    EXPECT_EQ(k_q[e], 0) << e;
    EXPECT_EQ(std::isnan(k_f32[e]), e < 16) << e;
    if (e >= 16) EXPECT_EQ(Bits(k_f32[e]), Bits(0.0f)) << e;
    EXPECT_EQ(v_q[e], e < 16 ? 0 : 127) << e;
    EXPECT_EQ(std::isnan(v_f32[e]), e < 16) << e;
  }
  ExpectInt8Row(ring, 0, EncodeRow(k.data(), v.data(), ring.GetLayout().Shape()));
}

TYPED_TEST(RingKVTest, Int8LatentWithoutVStoresOneStreamAndItsScales) {
  StorageSpec spec;
  spec.shape = KVShape{0, 1, 64, 0};
  spec.context = 100;
  spec.keep = 100;
  spec.format = Format::kInt8;
  ASSERT_TRUE(TypeParam::NumSlotsFor(100, &spec.shape.num_slots));
  GlobalKV<TypeParam> flat = GlobalKV<TypeParam>::Create(spec).value();
  // One stream: 64 int8 elements and one scale per position, no V scales.
  EXPECT_EQ(flat.AllocatedBytes(), flat.NumSlots() * RowBytes(Format::kInt8, 64));
  std::vector<float> k(3 * 64);
  for (size_t e = 0; e < k.size(); ++e) k[e] = static_cast<float>(e % 37) - 18.0f;
  ASSERT_EQ(flat.AppendF32(0, k.data(), nullptr, 3), Status::kOk);
  const KVView<TypeParam> view = flat.View(Visibility{});
  EXPECT_FALSE(view.HasV());
  EXPECT_EQ(view.v_int8, nullptr);
  EXPECT_EQ(view.v_scales, nullptr);
  for (uint64_t pos = 0; pos < 3; ++pos) {
    ExpectInt8Row(flat, pos, EncodeRow(k.data() + pos * 64, k.data(), spec.shape));
  }
}

TYPED_TEST(RingKVTest, Int8WideRowsOfAnyBatchReadBackAsTheirEncoding) {
  // Head dims and batches that hit every path of the int8 K transposition: whole 16 x 16
  // blocks, partial blocks of tokens, runs cut by a tile or the wrap, f32 and BF16 rows.
  const uint32_t dims[][2] = {{16, 16}, {48, 16}, {128, 64}, {144, 96}};
  for (const auto& [head_dim, v_head_dim] : dims) {
    StorageSpec spec;
    spec.shape = KVShape{0, 3, head_dim, v_head_dim};
    ASSERT_TRUE(TypeParam::NumSlotsFor(400, &spec.shape.num_slots));
    spec.keep = 50;
    spec.context = 100000;
    spec.format = Format::kInt8;
    RingKV<TypeParam> ring = RingKV<TypeParam>::Create(spec).value();
    const uint64_t k_row = 3 * head_dim, v_row = 3 * v_head_dim;
    std::vector<Int8Row> want;  // by position
    uint32_t seed = 1;
    const auto next = [&seed] {
      seed = seed * 1664525u + 1013904223u;
      return static_cast<float>(seed >> 8) / 65536.0f - 128.0f;
    };
    for (uint64_t num_tokens : {1u, 7u, 16u, 33u, 100u, 17u, 64u, 128u, 300u, 131u, 5u, 257u}) {
      std::vector<float> k(num_tokens * k_row), v(num_tokens * v_row);
      for (float& x : k) x = next();
      for (float& x : v) x = next();
      std::vector<BF16> k16(k.size()), v16(v.size());
      for (size_t i = 0; i < k.size(); ++i) k16[i] = BF16FromF32(k[i]);
      for (size_t i = 0; i < v.size(); ++i) v16[i] = BF16FromF32(v[i]);
      const bool f32 = num_tokens % 2 == 1;
      const Status status =
          f32 ? ring.AppendF32(ring.EndPos(), k.data(), v.data(), num_tokens)
              : ring.AppendBF16(ring.EndPos(), k16.data(), v16.data(), num_tokens);
      ASSERT_EQ(status, Status::kOk);
      for (uint64_t t = 0; t < num_tokens; ++t) {
        want.push_back(f32 ? EncodeRow(k.data() + t * k_row, v.data() + t * v_row, spec.shape)
                           : EncodeRow(k16.data() + t * k_row, v16.data() + t * v_row, spec.shape));
      }
    }
    for (uint64_t pos = ring.FirstPos(); pos < ring.EndPos(); ++pos) {
      ExpectInt8Row(ring, pos, want[pos]);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace kvring
