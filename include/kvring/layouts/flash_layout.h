// kvring/layouts/flash_layout.h: the memory order the flash-attention kernels read.
// K is transposed, [kv_head][dim][slot], so one vector load reads one dim of consecutive
// slots; V is [kv_head][slot][dim]. Maps offsets only: owns no memory.
#ifndef KVRING_LAYOUTS_FLASH_LAYOUT_H_
#define KVRING_LAYOUTS_FLASH_LAYOUT_H_

#include <cstdint>

#include "kvring/kinds.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/layouts/padding.h"

namespace kvring {

class FlashLayout {
 public:
  static constexpr Backend kBackend = Backend::kFlash;
  // num_slots is a multiple of this: one 64-byte vector of BF16 K per (kv_head, dim).
  static constexpr uint64_t kSlotAlignment = kFlashSlotAlignment;
  // Position-aligned groups of slots that kernels read as a unit.
  static constexpr uint64_t kTileSlots = kFlashSlotAlignment;

  // K: [kv_head][dim][slot].
  class KMapping {
   public:
    explicit KMapping(const KVShape& shape) : shape_(shape) {}
    uint64_t operator()(uint64_t slot, uint32_t kv_head, uint32_t dim) const {
      return (uint64_t{kv_head} * shape_.head_dim + dim) * shape_.num_slots + slot;
    }
    uint64_t RequiredSpanSize() const { return shape_.num_slots * shape_.KRowElements(); }
    static constexpr bool IsExhaustive() { return true; }
    uint64_t ContiguousSlotsFrom(uint64_t slot) const { return shape_.num_slots - slot; }
    uint64_t DimStride() const { return shape_.num_slots; }
    uint64_t SlotStride() const { return 1; }

   private:
    KVShape shape_;
  };
  using VMapping = detail::HeadSlotDimMapping;

  // Sets *num_slots to the slots that hold `capacity` positions (an odd number of tiles, see
  // detail::FlashNumSlots); false on overflow.
  static bool NumSlotsFor(uint64_t capacity, uint64_t* num_slots) {
    return detail::FlashNumSlots(capacity, num_slots);
  }

  FlashLayout() = default;
  explicit FlashLayout(const KVShape& shape) : shape_(shape) {}

  const KVShape& Shape() const { return shape_; }
  KMapping K() const { return KMapping(shape_); }
  VMapping V() const { return VMapping(shape_); }

 private:
  KVShape shape_;
};
static_assert(IsLayout<FlashLayout>::value, "FlashLayout must satisfy kvring::IsLayout");

}  // namespace kvring

#endif  // KVRING_LAYOUTS_FLASH_LAYOUT_H_
