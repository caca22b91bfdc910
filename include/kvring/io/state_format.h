// kvring/io/state_format.h: the layout of kvring's state format (docs/design.md, "State
// format"), little-endian:
//   preamble   magic "KVRSTATE", version (u32), zero (u32)
//   section    tag (u32), zero (u32), payload bytes (u64), payload, CRC32C (u32) of the tag
//              through the payload
//   header     a section "KVHD": model id bytes (u32) and the id, the runtime's context, the
//              end position, the number of layers (u64 each), then per layer its kind,
//              format, owner (u32 each), window, chunk (u64 each), num_kv_heads, head_dim,
//              v_head_dim (u32 each)
//   layers     a section "KVLY" per owning layer, in layer order: the layer, its format (u32
//              each), the first and end position it holds (u64 each), then its rows of
//              [first, end) in the order of storage/row_pieces.h
//   states     a section "KVST" per layer with a recurrent state (LayerSpec::state), in layer
//              order, after the layers' (none in a plan without such layers): the layer, its
//              conv format, its recurrent format, zero (u32 each), the positions the state
//              follows (the end), its conv bytes and recurrent bytes (u64 each), then those
//              bytes (the state after the end position, as the engine wrote it)
// The fingerprint (model id, context, every layer's descriptor), the ranges and the states'
// formats and sizes are what a destination must match. Internal.
#ifndef KVRING_IO_STATE_FORMAT_H_
#define KVRING_IO_STATE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvring/base.h"
#include "kvring/detail/checked_math.h"
#include "kvring/formats/format.h"
#include "kvring/layer_plan.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/status.h"
#include "kvring/storage/row_pieces.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvring's state format is little-endian; this host is not"
#endif

namespace kvring {

// The longest model id a state carries.
inline constexpr uint64_t kMaxModelIdBytes = 4096;

namespace detail {

inline constexpr char kStateMagic[8] = {'K', 'V', 'R', 'S', 'T', 'A', 'T', 'E'};
inline constexpr uint32_t kStateVersion = 1;
inline constexpr uint64_t kStatePreambleBytes = 16;  // magic, version, zero
inline constexpr uint64_t kSectionHeaderBytes = 16;  // tag, zero, payload bytes
inline constexpr uint64_t kSectionCrcBytes = 4;
inline constexpr uint32_t kHeaderTag = 0x4448564Bu;     // "KVHD"
inline constexpr uint32_t kLayerTag = 0x594C564Bu;      // "KVLY"
inline constexpr uint32_t kRecurrentTag = 0x5453564Bu;  // "KVST"
// The header payload's fixed fields: model id bytes (u32); context, end, layers (u64 each).
inline constexpr uint64_t kHeaderFixedBytes = 4 + 3 * 8;
// A layer's descriptor: kind, format, owner (u32), window, chunk (u64), three shapes (u32).
inline constexpr uint64_t kLayerDescriptorBytes = 3 * 4 + 2 * 8 + 3 * 4;
// A layer section's fixed fields: layer, format (u32 each), first and end position (u64 each).
inline constexpr uint64_t kLayerFixedBytes = 2 * 4 + 2 * 8;
// A state section's fixed fields: layer, conv format, recurrent format, zero (u32 each);
// positions, conv bytes, recurrent bytes (u64 each).
inline constexpr uint64_t kRecurrentFixedBytes = 4 * 4 + 3 * 8;

// Returns the bytes of the state sections of `plan` (one per layer with a recurrent state:
// LayerInfo's conv_state_bytes and recurrent_state_bytes, which the plan computed without
// overflow); 0 for a plan without them.
inline uint64_t RecurrentSectionsBytes(const LayerPlan& plan) {
  uint64_t total = 0;
  for (const LayerInfo& info : plan.Layers()) {
    if (!info.HasState()) continue;
    total = SaturatingAdd(total, kSectionHeaderBytes + kRecurrentFixedBytes + kSectionCrcBytes);
    total = SaturatingAdd(total, SaturatingAdd(info.conv_state_bytes, info.recurrent_state_bytes));
  }
  return total;
}

// What a state records of one layer of a plan; a state's and a destination plan's are equal.
struct StateLayer {
  static constexpr int kFields = 8;
  // kind, format, owner, window, chunk, num_kv_heads, head_dim, v_head_dim
  uint64_t values[kFields] = {};

  static StateLayer Of(const LayerPlan& plan, size_t layer) {
    const LayerInfo& info = plan.Layer(layer);
    const LayerInfo& owner = plan.Layer(info.owner);
    const KVShape shape = KVShape::Of(owner.spec, owner.num_slots);
    const AttentionKind kind = info.spec.kind;
    return StateLayer{{static_cast<uint64_t>(kind), static_cast<uint64_t>(owner.spec.format),
                       info.owner, kind == AttentionKind::kSliding ? info.spec.window : 0,
                       kind == AttentionKind::kChunked ? info.spec.chunk : 0, shape.num_kv_heads,
                       shape.head_dim, shape.v_head_dim}};
  }
  // The bytes of each field in a descriptor.
  static constexpr uint64_t FieldBytes(int field) { return field == 3 || field == 4 ? 8 : 4; }
};

// Returns kOk, or kBadState naming the first field of layer `layer` whose value in the state
// (`file`) differs from the destination plan's (`plan`).
inline Result CompareStateLayer(uint64_t layer, const StateLayer& file, const StateLayer& plan) {
  // One literal per field: a Result's message takes numbers only.
  static constexpr const char* kMessages[StateLayer::kFields] = {
      ("state: layers[%llu].kind is %llu in the state and %llu in this plan (0 global, 1 "
       "sliding, 2 chunked)"),
      "state: layers[%llu].format is %llu in the state and %llu in this plan (0 bf16, 1 int8, 5 "
      "int8h)",
      "state: layers[%llu].owner is %llu in the state and %llu in this plan",
      "state: layers[%llu].window is %llu in the state and %llu in this plan",
      "state: layers[%llu].chunk is %llu in the state and %llu in this plan",
      "state: layers[%llu].num_kv_heads is %llu in the state and %llu in this plan",
      "state: layers[%llu].head_dim is %llu in the state and %llu in this plan",
      ("state: layers[%llu].v_head_dim (V, or a DSA latent's indexer key) is %llu in the state "
       "and %llu in this plan")};
  for (int field = 0; field < StateLayer::kFields; ++field) {
    if (file.values[field] != plan.values[field]) {
      return Result::Refused(Status::kBadState, kMessages[field], layer, file.values[field],
                             plan.values[field]);
    }
  }
  return Status::kOk;
}

// Returns the bytes of the header section's payload for a model id of `id_bytes` and
// `num_layers` layers (both checked by the caller to fit).
inline uint64_t HeaderPayloadBytes(uint64_t id_bytes, uint64_t num_layers) {
  return kHeaderFixedBytes + id_bytes + num_layers * kLayerDescriptorBytes;
}
// Returns the bytes before a state's first layer section: the preamble and the header section
// (its header, payload and CRC), under the same conditions.
inline uint64_t StateHeadBytes(uint64_t id_bytes, uint64_t num_layers) {
  return kStatePreambleBytes + kSectionHeaderBytes + HeaderPayloadBytes(id_bytes, num_layers) +
         kSectionCrcBytes;
}

// Sets *bytes to the bytes of a state of `plan` with a model id of `id_bytes` whose owning
// layers hold the positions held(layer) returns ({first, end}), its state sections included;
// false on overflow.
template <typename Held>
bool StateBytesOf(const LayerPlan& plan, uint64_t id_bytes, const Held& held, uint64_t* bytes) {
  uint64_t total = 0;
  if (!CheckedMul(plan.NumLayers(), kLayerDescriptorBytes, &total)) return false;
  total = SaturatingAdd(total, kStatePreambleBytes + kSectionHeaderBytes + kHeaderFixedBytes +
                                   id_bytes + kSectionCrcBytes);
  for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
    const LayerInfo& info = plan.Layer(layer);
    if (!info.OwnsKV()) continue;
    const auto range = held(layer);
    uint64_t rows = 0;
    if (!PieceBytes(KVShape::Of(info.spec, info.num_slots), info.spec.format,
                    range.second - range.first, &rows)) {
      return false;
    }
    total = SaturatingAdd(
        total, SaturatingAdd(rows, kSectionHeaderBytes + kLayerFixedBytes + kSectionCrcBytes));
  }
  total = SaturatingAdd(total, RecurrentSectionsBytes(plan));
  *bytes = total;
  return total != ~uint64_t{0};
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_IO_STATE_FORMAT_H_
