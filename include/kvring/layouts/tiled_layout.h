// kvring/layouts/tiled_layout.h: the memory order the tiled-attention kernels read.
// Slots are grouped in tiles of kTileRows; K is [kv_head][tile][dim][row] (one tile of one
// kv_head is a contiguous kTileRows x head_dim block), V is [kv_head][tile][row][dim], which
// is the same as [kv_head][slot][dim]. Maps offsets only: owns no memory.
#ifndef KVRING_LAYOUTS_TILED_LAYOUT_H_
#define KVRING_LAYOUTS_TILED_LAYOUT_H_

#include <cstdint>

#include "kvring/kinds.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/layouts/padding.h"

namespace kvring {

template <uint32_t kTileRows>
class TiledLayout {
  static_assert(IsTileRows(kTileRows),
                "TiledLayout: kTileRows must be a power of two from 8 to 64");

 public:
  static constexpr Backend kBackend = Backend::kTiled;
  static constexpr uint64_t kSlotAlignment = kTileRows;
  static constexpr uint64_t kTileSlots = kTileRows;
  static constexpr uint32_t kRows = kTileRows;

  // K: [kv_head][tile][dim][row], slot = tile * kTileRows + row.
  class KMapping {
   public:
    explicit KMapping(const KVShape& shape) : shape_(shape) {}
    uint64_t operator()(uint64_t slot, uint32_t kv_head, uint32_t dim) const {
      const uint64_t num_tiles = shape_.num_slots / kTileRows;
      const uint64_t tile = slot / kTileRows, row = slot % kTileRows;
      return ((uint64_t{kv_head} * num_tiles + tile) * shape_.head_dim + dim) * kTileRows + row;
    }
    uint64_t RequiredSpanSize() const { return shape_.num_slots * shape_.KRowElements(); }
    static constexpr bool IsExhaustive() { return true; }
    uint64_t ContiguousSlotsFrom(uint64_t slot) const { return kTileRows - slot % kTileRows; }
    uint64_t DimStride() const { return kTileRows; }
    uint64_t SlotStride() const { return 1; }

   private:
    KVShape shape_;
  };
  using VMapping = detail::HeadSlotDimMapping;

  // Sets *num_slots to the slots that hold `capacity` positions (whole tiles); false on
  // overflow.
  static bool NumSlotsFor(uint64_t capacity, uint64_t* num_slots) {
    return detail::TiledNumSlots(capacity, kTileRows, num_slots);
  }

  TiledLayout() = default;
  explicit TiledLayout(const KVShape& shape) : shape_(shape) {}

  const KVShape& Shape() const { return shape_; }
  KMapping K() const { return KMapping(shape_); }
  VMapping V() const { return VMapping(shape_); }

 private:
  KVShape shape_;
};
static_assert(IsLayout<TiledLayout<8>>::value, "TiledLayout<8> must satisfy kvring::IsLayout");
static_assert(IsLayout<TiledLayout<16>>::value, "TiledLayout<16> must satisfy kvring::IsLayout");
static_assert(IsLayout<TiledLayout<32>>::value, "TiledLayout<32> must satisfy kvring::IsLayout");
static_assert(IsLayout<TiledLayout<64>>::value, "TiledLayout<64> must satisfy kvring::IsLayout");

}  // namespace kvring

#endif  // KVRING_LAYOUTS_TILED_LAYOUT_H_
