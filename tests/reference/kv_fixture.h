// tests/reference/kv_fixture.h: History, the BF16 K/V rows of attention tests and benchmarks
// (and Int8History, their int8 or int8h format with the decoded values the oracle reads)
// (the oracle's input, and what history_storage.h appends into RingKV and GlobalKV), and
// Storage, the same rows written through a layout's mappings into a ring (pos % num_slots) or
// flat buffer without kvring's storage classes, viewed as a KVView (attention_static_test.cc
// still uses it). Slots that hold no written position are zero unless poisoned. Allocates.
#ifndef KVRING_TESTS_REFERENCE_KV_FIXTURE_H_
#define KVRING_TESTS_REFERENCE_KV_FIXTURE_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/formats/hadamard.h"
#include "kvring/formats/int8.h"
#include "kvring/kv_view.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/visibility.h"
#include "reference/random_floats.h"
#include "reference/reference_attention.h"

namespace kvring {
namespace reference {

// Returns whether `slot` of a ring of `num_slots` holding [first_pos, end_pos) holds a position
// in [keep_begin, keep_end): the newest pos < end_pos with pos % num_slots == slot, if held.
inline bool HeldIn(uint64_t slot, uint64_t num_slots, uint64_t first_pos, uint64_t end_pos,
                   uint64_t keep_begin, uint64_t keep_end) {
  if (end_pos == 0) return false;
  const uint64_t last = end_pos - 1;
  const uint64_t back = (last % num_slots + num_slots - slot) % num_slots;
  if (back > last) return false;
  const uint64_t pos = last - back;
  return pos >= first_pos && pos >= keep_begin && pos < keep_end;
}

// K and V of positions [0, num_positions): rows [pos][kv_head][dim], BF16.
struct History {
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t v_head_dim = 0;
  uint64_t num_positions = 0;
  std::vector<BF16> k, v;

  // Returns a history of values drawn from N(0, 1) (then rounded to BF16).
  static History Random(uint32_t num_kv_heads, uint32_t head_dim, uint32_t v_head_dim,
                        uint64_t num_positions, uint32_t seed) {
    History h;
    h.num_kv_heads = num_kv_heads;
    h.head_dim = head_dim;
    h.v_head_dim = v_head_dim;
    h.num_positions = num_positions;
    std::mt19937 rng(seed);
    kvring::testing::NormalFloats normal(0.0f, 1.0f);
    h.k.resize(num_positions * num_kv_heads * head_dim);
    h.v.resize(num_positions * num_kv_heads * v_head_dim);
    for (BF16& x : h.k) x = BF16FromF32(normal(rng));
    for (BF16& x : h.v) x = BF16FromF32(normal(rng));
    return h;
  }
  BF16& K(uint64_t pos, uint32_t kv_head, uint32_t dim) {
    return k[(pos * num_kv_heads + kv_head) * head_dim + dim];
  }
  BF16& V(uint64_t pos, uint32_t kv_head, uint32_t dim) {
    return v[(pos * num_kv_heads + kv_head) * v_head_dim + dim];
  }
  // Returns the oracle's view of this history.
  ReferenceKV Reference() const {
    ReferenceKV r;
    r.num_kv_heads = num_kv_heads;
    r.head_dim = head_dim;
    r.v_head_dim = v_head_dim;
    const History* self = this;
    r.k = [self](uint64_t pos, uint32_t kv_head, uint32_t dim) {
      return BF16ToF32(self->k[(pos * self->num_kv_heads + kv_head) * self->head_dim + dim]);
    };
    r.v = [self](uint64_t pos, uint32_t kv_head, uint32_t dim) {
      return BF16ToF32(self->v[(pos * self->num_kv_heads + kv_head) * self->v_head_dim + dim]);
    };
    return r;
  }
};

// One layer's K/V buffers in `Layout`, holding positions [first_pos, end_pos) of a History
// in slots pos % num_slots.
template <typename Layout>
struct Storage {
  Layout layout;
  hwy::AlignedFreeUniquePtr<BF16[]> k, v;
  uint64_t first_pos = 0;
  uint64_t end_pos = 0;

  // Returns storage of `num_slots` (a multiple of Layout::kTileSlots) holding the newest
  // min(num_slots, end_pos) positions before end_pos, as a ring that has wrapped would.
  static Storage Make(const History& history, uint64_t num_slots, uint64_t end_pos) {
    Storage s;
    KVShape shape;
    shape.num_slots = num_slots;
    shape.num_kv_heads = history.num_kv_heads;
    shape.head_dim = history.head_dim;
    shape.v_head_dim = history.v_head_dim;
    s.layout = Layout(shape);
    const size_t k_size = static_cast<size_t>(s.layout.K().RequiredSpanSize());
    const size_t v_size = static_cast<size_t>(s.layout.V().RequiredSpanSize());
    s.k = hwy::AllocateAligned<BF16>(k_size);
    s.v = hwy::AllocateAligned<BF16>(v_size);
    std::memset(s.k.get(), 0, k_size * sizeof(BF16));
    std::memset(s.v.get(), 0, v_size * sizeof(BF16));
    s.end_pos = end_pos;
    s.first_pos = end_pos > num_slots ? end_pos - num_slots : 0;
    for (uint64_t pos = s.first_pos; pos < end_pos; ++pos) s.Write(history, pos);
    return s;
  }
  // Copies position `pos` of `history` into its slot.
  void Write(const History& history, uint64_t pos) {
    const KVShape& shape = layout.Shape();
    const uint64_t slot = pos % shape.num_slots;
    const auto km = layout.K();
    const auto vm = layout.V();
    for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
      for (uint32_t d = 0; d < shape.head_dim; ++d) {
        k[km(slot, h, d)] = history.k[(pos * shape.num_kv_heads + h) * shape.head_dim + d];
      }
      for (uint32_t d = 0; d < shape.v_head_dim; ++d) {
        v[vm(slot, h, d)] = history.v[(pos * shape.num_kv_heads + h) * shape.v_head_dim + d];
      }
    }
  }
  // Fills every slot whose position (if any) lies outside [keep_begin, keep_end) with NaN in
  // K and V: what a kernel must never let reach an output.
  void PoisonOutside(uint64_t keep_begin, uint64_t keep_end) {
    const KVShape& shape = layout.Shape();
    BF16 nan = BF16FromF32(std::numeric_limits<float>::quiet_NaN());
    const auto km = layout.K();
    const auto vm = layout.V();
    for (uint64_t slot = 0; slot < shape.num_slots; ++slot) {
      if (HeldIn(slot, shape.num_slots, first_pos, end_pos, keep_begin, keep_end)) continue;
      for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
        for (uint32_t d = 0; d < shape.head_dim; ++d) k[km(slot, h, d)] = nan;
        for (uint32_t d = 0; d < shape.v_head_dim; ++d) v[vm(slot, h, d)] = nan;
      }
    }
  }
  KVView<Layout> View(const Visibility& visibility) const {
    KVView<Layout> view;
    view.k = k.get();
    view.v = v.get();
    view.layout = layout;
    view.first_pos = first_pos;
    view.end_pos = end_pos;
    view.visibility = visibility;
    return view;
  }
};

// The int8 format of a History (kvring/formats/int8.h): each (pos, kv_head) row of K and of V
// encoded with its scale, and the oracle's view of the decoded values (scale * q), which is
// what int8 kernels are compared against.
struct Int8History {
  Format format = Format::kInt8;  // or kInt8Hadamard: k holds each row rotated, then encoded
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t v_head_dim = 0;
  uint64_t num_positions = 0;
  std::vector<int8_t> k, v;             // [pos][kv_head][dim]
  std::vector<float> k_scale, v_scale;  // [pos][kv_head]
  // kInt8Hadamard: K's decoded values rotated back in float64 ([pos][kv_head][dim]), what the
  // oracle reads (the K the model gave, as the format keeps it).
  std::vector<float> k_decoded;

  static Int8History Of(const History& h, Format format = Format::kInt8) {
    Int8History q;
    q.format = format;
    q.num_kv_heads = h.num_kv_heads;
    q.head_dim = h.head_dim;
    q.v_head_dim = h.v_head_dim;
    q.num_positions = h.num_positions;
    q.k.resize(h.k.size());
    q.v.resize(h.v.size());
    q.k_scale.resize(h.num_positions * h.num_kv_heads);
    q.v_scale.resize(h.v_head_dim == 0 ? 0 : h.num_positions * h.num_kv_heads);
    std::vector<float> rotated(h.head_dim);
    std::vector<double> decoded(h.head_dim);
    for (uint64_t row = 0; row < h.num_positions * h.num_kv_heads; ++row) {
      int8_t* k_row = q.k.data() + row * h.head_dim;
      if (RotatesK(format)) {
        // As storage encodes it: widened to f32, rotated in f32, encoded.
        for (uint32_t d = 0; d < h.head_dim; ++d) {
          rotated[d] = BF16ToF32(h.k[row * h.head_dim + d]);
        }
        RotateHadamard(rotated.data(), h.head_dim);
        q.k_scale[row] = EncodeInt8Row(rotated.data(), h.head_dim, k_row);
        for (uint32_t d = 0; d < h.head_dim; ++d) {
          decoded[d] = static_cast<double>(DecodeInt8(q.k_scale[row], k_row[d]));
        }
        RotateHadamard(decoded.data(), h.head_dim);
        for (const double value : decoded) q.k_decoded.push_back(static_cast<float>(value));
      } else {
        q.k_scale[row] = EncodeInt8Row(h.k.data() + row * h.head_dim, h.head_dim, k_row);
      }
      if (h.v_head_dim != 0) {
        q.v_scale[row] = EncodeInt8Row(h.v.data() + row * h.v_head_dim, h.v_head_dim,
                                       q.v.data() + row * h.v_head_dim);
      }
    }
    return q;
  }
  ReferenceKV Reference() const {
    ReferenceKV r;
    r.num_kv_heads = num_kv_heads;
    r.head_dim = head_dim;
    r.v_head_dim = v_head_dim;
    const Int8History* self = this;
    r.k = [self](uint64_t pos, uint32_t kv_head, uint32_t dim) {
      const uint64_t row = pos * self->num_kv_heads + kv_head;
      if (RotatesK(self->format)) return self->k_decoded[row * self->head_dim + dim];
      return DecodeInt8(self->k_scale[row], self->k[row * self->head_dim + dim]);
    };
    r.v = [self](uint64_t pos, uint32_t kv_head, uint32_t dim) {
      const uint64_t row = pos * self->num_kv_heads + kv_head;
      return DecodeInt8(self->v_scale[row], self->v[row * self->v_head_dim + dim]);
    };
    return r;
  }
};

// One int8 layer's buffers in `Layout` (elements at the layout's offsets, scales
// [kv_head][slot]) holding positions of an Int8History in slots pos % num_slots, as Storage
// does for BF16.
template <typename Layout>
struct Int8Storage {
  Format format = Format::kInt8;
  Layout layout;
  std::vector<int8_t> k, v;
  std::vector<float> k_scales, v_scales;
  uint64_t first_pos = 0;
  uint64_t end_pos = 0;

  static Int8Storage Make(const Int8History& history, uint64_t num_slots, uint64_t end_pos) {
    Int8Storage s;
    s.format = history.format;
    KVShape shape;
    shape.num_slots = num_slots;
    shape.num_kv_heads = history.num_kv_heads;
    shape.head_dim = history.head_dim;
    shape.v_head_dim = history.v_head_dim;
    s.layout = Layout(shape);
    s.k.assign(static_cast<size_t>(s.layout.K().RequiredSpanSize()), 0);
    s.v.assign(static_cast<size_t>(s.layout.V().RequiredSpanSize()), 0);
    s.k_scales.assign(num_slots * shape.num_kv_heads, 0.0f);
    s.v_scales.assign(shape.v_head_dim == 0 ? 0 : num_slots * shape.num_kv_heads, 0.0f);
    s.end_pos = end_pos;
    s.first_pos = end_pos > num_slots ? end_pos - num_slots : 0;
    const auto km = s.layout.K();
    const auto vm = s.layout.V();
    for (uint64_t pos = s.first_pos; pos < end_pos; ++pos) {
      const uint64_t slot = pos % num_slots;
      for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
        const uint64_t row = pos * shape.num_kv_heads + h;
        for (uint32_t d = 0; d < shape.head_dim; ++d) {
          s.k[km(slot, h, d)] = history.k[row * shape.head_dim + d];
        }
        s.k_scales[shape.ScaleOffset(slot, h)] = history.k_scale[row];
        if (shape.v_head_dim == 0) continue;
        for (uint32_t d = 0; d < shape.v_head_dim; ++d) {
          s.v[vm(slot, h, d)] = history.v[row * shape.v_head_dim + d];
        }
        s.v_scales[shape.ScaleOffset(slot, h)] = history.v_scale[row];
      }
    }
    return s;
  }
  // Sets the scales of every slot outside the positions [keep_begin, keep_end) to NaN (and
  // their elements to -127): what a kernel must never let reach an output.
  void PoisonOutside(uint64_t keep_begin, uint64_t keep_end) {
    const KVShape& shape = layout.Shape();
    for (uint64_t slot = 0; slot < shape.num_slots; ++slot) {
      if (HeldIn(slot, shape.num_slots, first_pos, end_pos, keep_begin, keep_end)) continue;
      const auto km = layout.K();
      const auto vm = layout.V();
      for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
        k_scales[shape.ScaleOffset(slot, h)] = std::numeric_limits<float>::quiet_NaN();
        for (uint32_t d = 0; d < shape.head_dim; ++d) k[km(slot, h, d)] = -127;
        if (shape.v_head_dim == 0) continue;
        v_scales[shape.ScaleOffset(slot, h)] = std::numeric_limits<float>::quiet_NaN();
        for (uint32_t d = 0; d < shape.v_head_dim; ++d) v[vm(slot, h, d)] = -127;
      }
    }
  }
  KVView<Layout> View(const Visibility& visibility) const {
    KVView<Layout> view;
    view.format = format;
    view.k_int8 = k.data();
    view.k_scales = k_scales.data();
    if (layout.Shape().v_head_dim != 0) {
      view.v_int8 = v.data();
      view.v_scales = v_scales.data();
    }
    view.layout = layout;
    view.first_pos = first_pos;
    view.end_pos = end_pos;
    view.visibility = visibility;
    return view;
  }
};

}  // namespace reference
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_KV_FIXTURE_H_
