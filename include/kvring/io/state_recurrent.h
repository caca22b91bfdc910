// kvring/io/state_recurrent.h: the state sections of kvring's state format (io/state_format.h):
// a KVCache's or a pool sequence's recurrent states (LayerSpec::state), the one after the end of
// every layer that keeps one, written after the layers' rows, checked with them and read back
// into the slot of that position. Internal; io/state_io.h is the API.
#ifndef KVRING_IO_STATE_RECURRENT_H_
#define KVRING_IO_STATE_RECURRENT_H_

#include <cstddef>
#include <cstdint>

#include "kvring/formats/format.h"
#include "kvring/io/byte_io.h"
#include "kvring/io/state_format.h"
#include "kvring/io/state_stream.h"
#include "kvring/layer_plan.h"
#include "kvring/status.h"
#include "kvring/storage/recurrent_states.h"

namespace kvring {
namespace detail {

// Puts the state section of every layer of `plan` with a recurrent state into `out`: its state
// after `end` positions in `states`, which holds them (CheckStatesHeld).
inline void PutRecurrentSections(const LayerPlan& plan, uint64_t end, const RecurrentStates& states,
                                 StateWriter* out) {
  for (const LayerInfo& info : plan.Layers()) {
    if (!info.HasState()) continue;
    const StateSlot slot = states.Held(info.index, end);
    out->BeginSection(kRecurrentTag, kRecurrentFixedBytes + slot.conv_bytes + slot.recurrent_bytes);
    out->PutU32(static_cast<uint32_t>(info.index));
    out->PutU32(static_cast<uint32_t>(slot.conv_format));
    out->PutU32(static_cast<uint32_t>(slot.recurrent_format));
    out->PutU32(0);
    out->PutU64(end);
    out->PutU64(slot.conv_bytes);
    out->PutU64(slot.recurrent_bytes);
    if (slot.conv_bytes != 0) out->Put(slot.conv, slot.conv_bytes);
    if (slot.recurrent_bytes != 0) out->Put(slot.recurrent, slot.recurrent_bytes);
    out->EndSection();
  }
}

// As PutRecurrentSections, to `sink`; returns the sink's failure, if any.
inline Result WriteRecurrentSections(const LayerPlan& plan, uint64_t end,
                                     const RecurrentStates& states, ByteSink* sink) {
  StateWriter out(sink, RecurrentSectionsBytes(plan));
  PutRecurrentSections(plan, end, states, &out);
  return out.Finish();
}

// Returns kOk if every layer of `states` holds the state after `end` positions (what a save
// writes), else kWrongPosition naming the first that does not.
inline Result CheckStatesHeld(const RecurrentStates& states, uint64_t end) {
  const size_t layer = states.FirstNotHolding(end);
  if (layer == RecurrentStates::kAllHeld) return Status::kOk;
  return Result::Refused(Status::kWrongPosition,
                         "state: layers[%llu] holds no recurrent state after %llu positions, the "
                         "end of its K/V (write it with StateAfter before the next step "
                         "begins)",
                         uint64_t{layer}, end);
}

// Checks the state section payload of layer `info` (`bytes` at `at`, its CRC32C checked) of a
// state that ends at `end` against the plan's state of that layer.
inline Result CheckRecurrentSection(StateReader* reader, uint64_t at, uint64_t bytes,
                                    const LayerInfo& info, uint64_t end) {
  const uint64_t layer = info.index;
  if (bytes < kRecurrentFixedBytes) {
    return Result::Refused(Status::kBadState,
                           "state: the state section of layers[%llu] holds %llu bytes, fewer "
                           "than the %llu of its fixed fields",
                           layer, bytes, kRecurrentFixedBytes);
  }
  // layer, conv format, recurrent format, zero, positions, conv bytes, recurrent bytes
  uint64_t fields[7] = {};
  for (uint64_t i = 0; i < 7; ++i) {
    const uint64_t offset = i < 4 ? at + 4 * i : at + 16 + 8 * (i - 4);
    if (!(i < 4 ? reader->U32(offset, &fields[i]) : reader->U64(offset, &fields[i]))) {
      return ReadFailed(offset);
    }
  }
  if (fields[0] != layer || fields[3] != 0) {
    return Result::Refused(Status::kBadState,
                           "state: a state section holds layers[%llu] (reserved word %llu) where "
                           "the state of layers[%llu] belongs (sections out of order)",
                           fields[0], fields[3], layer);
  }
  const StateSpec& spec = info.spec.state;
  const uint64_t plan_fields[7] = {layer,
                                   static_cast<uint64_t>(spec.conv_format),
                                   static_cast<uint64_t>(spec.recurrent_format),
                                   0,
                                   end,
                                   info.conv_state_bytes,
                                   info.recurrent_state_bytes};
  static constexpr const char* kMessages[7] = {
      nullptr,
      "state: layers[%llu].state.conv_format is %llu in the state and %llu in this plan (0 "
      "bf16, 3 f32)",
      "state: layers[%llu].state.recurrent_format is %llu in the state and %llu in this plan (0 "
      "bf16, 3 f32)",
      nullptr,
      "state: the recurrent state of layers[%llu] follows %llu positions, not the state's end "
      "%llu",
      "state: layers[%llu]'s conv state is %llu bytes in the state and %llu in this plan",
      "state: layers[%llu]'s recurrent state is %llu bytes in the state and %llu in this plan"};
  for (size_t i = 1; i < 7; ++i) {
    if (i != 3 && fields[i] != plan_fields[i]) {
      return Result::Refused(Status::kBadState, kMessages[i], layer, fields[i], plan_fields[i]);
    }
  }
  const uint64_t payload = kRecurrentFixedBytes + fields[5] + fields[6];
  if (bytes != payload) {
    return Result::Refused(Status::kBadState,
                           "state: the state section of layers[%llu] holds %llu bytes; its "
                           "states take %llu",
                           layer, bytes, payload);
  }
  return Status::kOk;
}

// Reads the state sections of a state CheckState accepted, which start at `offset`, into
// slot_for(layer) (a StateSlot to write: the state after the state's end). kIOError if the
// source fails to read.
template <typename SlotFor>
Result ReadRecurrentSections(StateReader* reader, uint64_t offset, const LayerPlan& plan,
                             const SlotFor& slot_for) {
  for (const LayerInfo& info : plan.Layers()) {
    if (!info.HasState()) continue;
    const StateSlot slot = slot_for(info.index);
    const uint64_t at = offset + kSectionHeaderBytes + kRecurrentFixedBytes;
    if ((slot.conv_bytes != 0 && !reader->Copy(at, slot.conv, slot.conv_bytes)) ||
        (slot.recurrent_bytes != 0 &&
         !reader->Copy(at + slot.conv_bytes, slot.recurrent, slot.recurrent_bytes))) {
      return ReadFailed(at);
    }
    offset = at + slot.conv_bytes + slot.recurrent_bytes + kSectionCrcBytes;
  }
  return Status::kOk;
}

// Reads the state sections of a state CheckState accepted (the last RecurrentSectionsBytes of
// the source) into the states after `end` of `states` (cleared first: the only ones held).
// kIOError if the source fails to read.
inline Result ReadRecurrentStates(StateReader* reader, const LayerPlan& plan, uint64_t end,
                                  RecurrentStates* states) {
  if (states->Empty()) return Status::kOk;
  states->Clear();
  return ReadRecurrentSections(reader, reader->Size() - RecurrentSectionsBytes(plan), plan,
                               [&](size_t layer) { return states->Write(layer, end, end); });
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_IO_STATE_RECURRENT_H_
