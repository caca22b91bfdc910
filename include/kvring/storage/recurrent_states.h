// kvring/storage/recurrent_states.h: the recurrent states of one sequence's layers that hold
// one (LayerSpec::state: Gated DeltaNet, Mamba, ...), as a KVCache keeps them: per such layer
// rollback + 1 slots of a conv state and a recurrent state (one more with
// RuntimeSpec::stage_states), zeroed and 64-byte aligned. Each slot remembers which n it holds
// the state after, so that a read of a state that was not written, or a rollback to one that
// was overwritten, is refused instead of trusted; a new state takes the slot of the oldest
// (staged: never the one its step starts from). Storage only: the engine computes the states.
#ifndef KVRING_STORAGE_RECURRENT_STATES_H_
#define KVRING_STORAGE_RECURRENT_STATES_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/base.h"
#include "kvring/detail/aligned_buffer.h"
#include "kvring/detail/checked_math.h"
#include "kvring/layer_plan.h"
#include "kvring/status.h"
#include "kvring/storage/step_rule.h"

namespace kvring {

// One layer's state in one slot: plain spans the engine reads and writes in place.
struct StateSlot {
  uint8_t* conv = nullptr;  // conv_bytes bytes of conv_format elements
  uint64_t conv_bytes = 0;
  Format conv_format = Format::kBF16;
  uint8_t* recurrent = nullptr;  // recurrent_bytes bytes of recurrent_format elements
  uint64_t recurrent_bytes = 0;
  Format recurrent_format = Format::kBF16;
};

namespace detail {

class RecurrentStates {
 public:
  // Marks a slot that holds no written state.
  static constexpr uint64_t kUnwritten = ~uint64_t{0};

  RecurrentStates() = default;

  // Returns the states of `plan`'s layers that hold one (their slots zeroed; the zero state
  // counts as the state after 0 positions), or an Error naming the layer whose buffer could
  // not be allocated.
  static Expected<RecurrentStates> Create(const LayerPlan& plan) {
    RecurrentStates states;
    states.slot_of_layer_.assign(plan.NumLayers(), kNone);
    states.staged_ = plan.Runtime().stage_states;
    for (const LayerInfo& layer : plan.Layers()) {
      if (!layer.HasState()) continue;
      // The plan's copies (PlanState), the same for every layer with a state.
      KVRING_DASSERT(states.layers_.empty() || layer.state_copies == states.copies_);
      states.copies_ = layer.state_copies;
      Layer entry;
      entry.conv_bytes = layer.conv_state_bytes;
      entry.recurrent_bytes = layer.recurrent_state_bytes;
      entry.conv_format = layer.spec.state.conv_format;
      entry.recurrent_format = layer.spec.state.recurrent_format;
      // Each slot's two states start at multiples of 64 bytes.
      entry.stride = RoundUp64(entry.conv_bytes) + RoundUp64(entry.recurrent_bytes);
      uint64_t bytes = 0;
      if (!CheckedMul(entry.stride, states.copies_, &bytes) || bytes > SIZE_MAX) {
        return Error{LayerField(layer.index, "state"),
                     LayerField(layer.index, "state") + ": its slots overflow the address space"};
      }
      entry.buffer = AlignedBuffer<uint8_t>::Zeroed(static_cast<size_t>(bytes));
      if (entry.buffer.Failed()) {
        return Error{LayerField(layer.index, "state"),
                     LayerField(layer.index, "state") + ": could not allocate its slots"};
      }
      entry.stamps.assign(states.copies_, kUnwritten);
      entry.stamps[0] = 0;
      states.slot_of_layer_[layer.index] = states.layers_.size();
      states.layers_.push_back(std::move(entry));
    }
    return states;
  }

  bool HasState(size_t layer) const {
    return layer < slot_of_layer_.size() && slot_of_layer_[layer] != kNone;
  }
  bool Empty() const { return layers_.empty(); }

  // The calls of a cache or a pool sequence at `end` positions (EndPos), for `layer`:
  // Current returns its state after `end` (KVCache::State), After the slot of its state after
  // `num_positions` for the engine to write (KVCache::StateAfter: step.StepStart() <
  // num_positions <= context; a staged layer keeps the state the step that writes it starts
  // from, step.StartOfStepAt(num_positions)). Errors name the layer or the range.
  Expected<StateSlot> Current(size_t layer, uint64_t end) {
    const Error bad = CheckLayer(layer);
    if (!bad.field.empty()) return bad;
    return Read(layer, end);
  }
  Expected<StateSlot> After(size_t layer, uint64_t num_positions, const StepRule& step,
                            uint64_t context) {
    const Error bad = CheckLayer(layer);
    if (!bad.field.empty()) return bad;
    const uint64_t step_start = step.StepStart();
    if (num_positions <= step_start || num_positions > context) {
      return Error{"num_positions",
                   "num_positions: " + std::to_string(num_positions) + " is not in (" +
                       std::to_string(step_start) + ", " + std::to_string(context) +
                       "]: past the start of the current or last step, within the context" +
                       (num_positions <= step_start
                            ? std::string(" (a step's states are written before the next step "
                                          "begins)")
                            : std::string())};
    }
    return Write(layer, num_positions, step.StartOfStepAt(num_positions));
  }

  // Returns the slot of the state after `num_positions` positions of `layer` and marks it as
  // holding that state: the engine writes it now. The slot that holds it already, else the
  // oldest (one never written or forgotten first), but with stage_states never the one that
  // holds the state after `keep` positions. (The caller checks the position.)
  StateSlot Write(size_t layer, uint64_t num_positions, uint64_t keep) {
    Layer& entry = layers_[slot_of_layer_[layer]];
    uint64_t slot = Find(entry, num_positions);
    if (slot == kNoSlot) {
      for (uint64_t i = 0; i < copies_; ++i) {
        if (staged_ && entry.stamps[i] == keep) continue;
        // kUnwritten + 1 wraps to 0: a slot that holds nothing is the oldest.
        if (slot == kNoSlot || entry.stamps[i] + 1 < entry.stamps[slot] + 1) slot = i;
      }
      KVRING_DASSERT(slot != kNoSlot);  // (staged: at least two slots, one kept)
      entry.stamps[slot] = num_positions;
    }
    return SlotOf(entry, slot);
  }

  // Returns the state after `num_positions` positions of `layer`, or kNotLive when its slot
  // holds another (never written, or overwritten since).
  Expected<StateSlot> Read(size_t layer, uint64_t num_positions) {
    Layer& entry = layers_[slot_of_layer_[layer]];
    const uint64_t slot = Find(entry, num_positions);
    if (slot == kNoSlot) {
      return Error{LayerField(layer, "state"),
                   LayerField(layer, "state") + ": the state after " +
                       std::to_string(num_positions) +
                       " positions was not written (StateAfter), or was overwritten since"};
    }
    return SlotOf(entry, slot);
  }

  // Returns the first layer (of every layer with a state, in order) whose slots do not hold
  // the state after `num_positions` positions, or kAllHeld.
  static constexpr size_t kAllHeld = ~size_t{0};
  size_t FirstNotHolding(uint64_t num_positions) const {
    for (size_t layer = 0; layer < slot_of_layer_.size(); ++layer) {
      if (slot_of_layer_[layer] == kNone) continue;
      if (Find(layers_[slot_of_layer_[layer]], num_positions) == kNoSlot) return layer;
    }
    return kAllHeld;
  }

  // Returns the largest r <= `limit` such that every layer holds the states after end - n for
  // every n <= r (how far a rollback from `end` may go, as the states go); sets *layer to the
  // first layer that stops it (unchanged if none does). O(limit x layers x slots).
  uint64_t HeldBack(uint64_t end, uint64_t limit, size_t* layer) const {
    if (layers_.empty()) return limit;
    for (uint64_t n = 1; n <= limit && n <= end; ++n) {
      const size_t missing = FirstNotHolding(end - n);
      if (missing != kAllHeld) {
        *layer = missing;
        return n - 1;
      }
    }
    return limit;
  }

  // Returns the state after `num_positions` positions of `layer`, which holds it
  // (FirstNotHolding), to read: saving it.
  StateSlot Held(size_t layer, uint64_t num_positions) const {
    const Layer& entry = layers_[slot_of_layer_[layer]];
    const uint64_t slot = Find(entry, num_positions);
    KVRING_DASSERT(slot != kNoSlot);
    return SlotOf(const_cast<Layer&>(entry), slot);
  }

  // Returns kOk if every layer holds the state after `num_positions` positions (a rollback's
  // target), else kRollbackTooFar naming the first layer that does not.
  Result CheckHeld(uint64_t num_positions) const {
    const size_t layer = FirstNotHolding(num_positions);
    if (layer == kAllHeld) return Status::kOk;
    return Result::Refused(Status::kRollbackTooFar,
                           "rollback to %llu positions: layers[%llu] holds no state after them "
                           "(write each position's state with StateAfter)",
                           num_positions, uint64_t{layer});
  }

  // Whether the step that brought every owning layer to `end` is unfinished as the states go:
  // some layer does not hold its state after `end` (a state layer after the step's last
  // append failed, or never ran) while none holds one past it (which a next step's state
  // layers before its first append would have written). O(layers x slots).
  bool LastStepUnfinished(uint64_t end) const {
    for (const Layer& entry : layers_) {
      for (const uint64_t stamp : entry.stamps) {
        if (stamp > end && stamp != kUnwritten) return false;
      }
    }
    return FirstNotHolding(end) != kAllHeld;
  }

  // Forgets the states after more than `end` positions (a rollback or an abandoned step
  // discarded them): a later rollback never finds a discarded draft's state as if it were
  // held.
  void ForgetAfter(uint64_t end) {
    for (Layer& entry : layers_) {
      for (uint64_t& stamp : entry.stamps) {
        if (stamp > end) stamp = kUnwritten;  // (kUnwritten itself is past every end)
      }
    }
  }

  // Forgets every state: the slots are zeroed and only the state after 0 positions is held.
  void Clear() {
    for (Layer& entry : layers_) {
      if (entry.buffer.size() != 0) std::memset(entry.buffer.data(), 0, entry.buffer.size());
      entry.stamps.assign(copies_, kUnwritten);
      entry.stamps[0] = 0;
    }
  }

  // Copies every slot and stamp into *copy (made by Create of the same plan); false if it
  // could not allocate.
  bool CopyTo(RecurrentStates* copy) const {
    copy->slot_of_layer_ = slot_of_layer_;
    copy->copies_ = copies_;
    copy->staged_ = staged_;
    copy->layers_.clear();
    for (const Layer& entry : layers_) {
      Layer duplicate;
      static_cast<Slots&>(duplicate) = entry;
      duplicate.buffer = AlignedBuffer<uint8_t>::Zeroed(entry.buffer.size());
      if (duplicate.buffer.Failed()) return false;
      if (entry.buffer.size() != 0) {
        std::memcpy(duplicate.buffer.data(), entry.buffer.data(), entry.buffer.size());
      }
      copy->layers_.push_back(std::move(duplicate));
    }
    return true;
  }

  // Returns the bytes of the states' slots as the plan counts them (without the alignment
  // between a slot's two states).
  uint64_t PlannedBytes() const {
    uint64_t bytes = 0;
    for (const Layer& entry : layers_) {
      bytes += (entry.conv_bytes + entry.recurrent_bytes) * copies_;
    }
    return bytes;
  }

 private:
  static constexpr size_t kNone = ~size_t{0};
  static constexpr uint64_t kNoSlot = ~uint64_t{0};

  // A layer's slots as described (copyable), and the layer: its slots' description and their
  // bytes.
  struct Slots {
    uint64_t conv_bytes = 0;
    uint64_t recurrent_bytes = 0;
    Format conv_format = Format::kBF16;
    Format recurrent_format = Format::kBF16;
    uint64_t stride = 0;           // bytes of one slot
    std::vector<uint64_t> stamps;  // per slot: the positions its state follows, or kUnwritten
  };
  struct Layer : Slots {
    AlignedBuffer<uint8_t> buffer;
  };

  static uint64_t RoundUp64(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

  // The slot of `entry` that holds the state after `num_positions` positions, or kNoSlot.
  uint64_t Find(const Slots& entry, uint64_t num_positions) const {
    for (uint64_t i = 0; i < copies_; ++i) {
      if (entry.stamps[i] == num_positions) return i;
    }
    return kNoSlot;
  }

  Error CheckLayer(size_t layer) const {
    if (HasState(layer)) return Error{};
    return Error{"layer", "layer: " + std::to_string(layer) +
                              " is not a layer with a recurrent state (of " +
                              std::to_string(slot_of_layer_.size()) + " layers)"};
  }

  static StateSlot SlotOf(Layer& entry, uint64_t slot) {
    uint8_t* base = entry.buffer.data() + slot * entry.stride;
    StateSlot view;
    view.conv = entry.conv_bytes != 0 ? base : nullptr;
    view.conv_bytes = entry.conv_bytes;
    view.conv_format = entry.conv_format;
    view.recurrent = entry.recurrent_bytes != 0 ? base + RoundUp64(entry.conv_bytes) : nullptr;
    view.recurrent_bytes = entry.recurrent_bytes;
    view.recurrent_format = entry.recurrent_format;
    return view;
  }

  std::vector<size_t> slot_of_layer_;
  std::vector<Layer> layers_;
  uint64_t copies_ = 1;
  bool staged_ = false;  // RuntimeSpec::stage_states: a step keeps the state it starts from
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_RECURRENT_STATES_H_
