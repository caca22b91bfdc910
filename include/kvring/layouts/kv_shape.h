// kvring/layouts/kv_shape.h: the shape every layout maps, and the trait that checks a type
// is a kvring layout. See flash_layout.h and tiled_layout.h for the layouts themselves.
#ifndef KVRING_LAYOUTS_KV_SHAPE_H_
#define KVRING_LAYOUTS_KV_SHAPE_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kvring/plan/specs.h"

namespace kvring {

// The extents of one layer's K and V buffers.
struct KVShape {
  uint64_t num_slots = 0;     // a multiple of the layout's kSlotAlignment
  uint32_t num_kv_heads = 0;  // 1 for MLA
  uint32_t head_dim = 0;      // K elements per kv_head (the latent for MLA)
  // V elements per kv_head; 0: no V stream (MLA). A DSA latent's V stream holds its indexer
  // key (indexer_dim elements per position), which attention never reads as values.
  uint32_t v_head_dim = 0;

  // Returns the shape of a layer of `spec` stored in `num_slots` slots (for an owning layer of
  // a plan: KVShape::Of(info.spec, info.num_slots)). Storage only: an MLA latent with a DSA
  // indexer keeps the indexer's key in the V stream (attention views drop it).
  static KVShape Of(const LayerSpec& spec, uint64_t num_slots) {
    KVShape shape;
    shape.num_slots = num_slots;
    if (spec.IsLatent()) {
      shape.num_kv_heads = 1;
      shape.head_dim = spec.latent_dim;
      shape.v_head_dim = spec.indexer_dim;
    } else {
      shape.num_kv_heads = spec.num_kv_heads;
      shape.head_dim = spec.head_dim;
      shape.v_head_dim = spec.VHeadDim();
    }
    return shape;
  }
  // Elements of one position's K (or V) over all kv_heads.
  uint64_t KRowElements() const { return uint64_t{num_kv_heads} * head_dim; }
  uint64_t VRowElements() const { return uint64_t{num_kv_heads} * v_head_dim; }
  // Returns where the f32 scale of `slot` of `kv_head` sits in an int8 stream's scales, which
  // every layout keeps [kv_head][slot] (a tile's scales are then contiguous).
  uint64_t ScaleOffset(uint64_t slot, uint32_t kv_head) const {
    return uint64_t{kv_head} * num_slots + slot;
  }
};

inline bool operator==(const KVShape& a, const KVShape& b) {
  return a.num_slots == b.num_slots && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.v_head_dim == b.v_head_dim;
}

namespace detail {

template <typename Mapping, typename = void>
struct IsMapping : std::false_type {};
template <typename Mapping>
struct IsMapping<
    Mapping,
    std::void_t<decltype(std::declval<const Mapping&>()(uint64_t{}, uint32_t{}, uint32_t{})),
                decltype(std::declval<const Mapping&>().RequiredSpanSize()),
                decltype(std::declval<const Mapping&>().ContiguousSlotsFrom(0)),
                decltype(std::declval<const Mapping&>().DimStride()),
                decltype(Mapping::IsExhaustive())>> : std::true_type {};

}  // namespace detail

// True for a kvring layout: a value type built from a KVShape with K() and V() mappings
// (slot, kv_head, dim) -> element offset, a slot alignment, the rule NumSlotsFor(capacity)
// that pads a capacity to its slots, and the backend it serves.
template <typename Layout, typename = void>
struct IsLayout : std::false_type {};
template <typename Layout>
struct IsLayout<Layout, std::void_t<decltype(Layout::kSlotAlignment), decltype(Layout::kBackend),
                                    decltype(Layout::kTileSlots),
                                    decltype(Layout::NumSlotsFor(uint64_t{}, nullptr)),
                                    decltype(Layout(std::declval<const KVShape&>())),
                                    decltype(std::declval<const Layout&>().Shape()),
                                    decltype(std::declval<const Layout&>().K()),
                                    decltype(std::declval<const Layout&>().V())>>
    : std::integral_constant<
          bool, detail::IsMapping<decltype(std::declval<const Layout&>().K())>::value &&
                    detail::IsMapping<decltype(std::declval<const Layout&>().V())>::value &&
                    std::is_trivially_copyable<Layout>::value> {};

namespace detail {

// V of both layouts: [kv_head][slot][dim], so one position's V of a kv_head is contiguous
// and so is a run of positions.
class HeadSlotDimMapping {
 public:
  explicit HeadSlotDimMapping(const KVShape& shape) : shape_(shape) {}
  // Returns the element offset of V (slot, kv_head, dim).
  uint64_t operator()(uint64_t slot, uint32_t kv_head, uint32_t dim) const {
    return (uint64_t{kv_head} * shape_.num_slots + slot) * shape_.v_head_dim + dim;
  }
  uint64_t RequiredSpanSize() const { return shape_.num_slots * shape_.VRowElements(); }
  static constexpr bool IsExhaustive() { return true; }
  // Slots from `slot` on whose elements of one (kv_head, dim) advance by one slot stride.
  uint64_t ContiguousSlotsFrom(uint64_t slot) const { return shape_.num_slots - slot; }
  // Elements between dim d and d + 1 of one slot.
  uint64_t DimStride() const { return 1; }
  // Elements between slot s and s + 1 inside a contiguous run.
  uint64_t SlotStride() const { return shape_.v_head_dim; }

 private:
  KVShape shape_;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_LAYOUTS_KV_SHAPE_H_
