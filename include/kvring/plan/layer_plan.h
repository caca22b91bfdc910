// kvring/plan/layer_plan.h: the plan of one model under one runtime: every layer's owner,
// span, capacity, slots and bytes (LayerInfo), the totals, and what a memory budget holds.
// Built by LayerPlan::Builder (plan/builder.h). Plans only: allocates no K/V.
#ifndef KVRING_PLAN_LAYER_PLAN_H_
#define KVRING_PLAN_LAYER_PLAN_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvring/base.h"
#include "kvring/detail/checked_math.h"
#include "kvring/kinds.h"
#include "kvring/plan/capacity.h"
#include "kvring/plan/specs.h"

namespace kvring {

// The plan of one layer.
struct LayerInfo {
  size_t index = 0;
  LayerSpec spec;
  size_t owner = 0;        // the layer whose buffers this layer reads (itself if it owns)
  uint64_t span = 0;       // owners: largest window/chunk among it and its consumers; 0 if
                           // some reader is global
  uint64_t capacity = 0;   // logical slots it must hold; 0 for consumers
  uint64_t num_slots = 0;  // capacity plus the layout's padding (NumSlotsFor); 0 for consumers
  // Bytes of one position, every kv_head, in the layer's format (spec.format; a consumer's is
  // its owner's): K is num_kv_heads * RowBytes(format, head_dim) (MLA: RowBytes(format,
  // latent_dim), one stream), V num_kv_heads * RowBytes(format, v_head_dim) (MLA: 0). An int8
  // row counts its 4-byte scale. With an accounting-only element type, the same in that
  // format instead.
  uint64_t k_slot_bytes = 0;
  uint64_t v_slot_bytes = 0;
  uint64_t indexer_slot_bytes = 0;  // a DSA layer's indexer key (LayerSpec::indexer_dim)
  uint64_t slot_bytes = 0;          // k_slot_bytes + v_slot_bytes + indexer_slot_bytes
  uint64_t bytes = 0;               // num_slots * slot_bytes; 0 for consumers
  uint64_t padding_bytes = 0;  // bytes of the padding slots: (num_slots - capacity) * slot_bytes

  // Recurrent state (spec.state), one copy: conv and recurrent state bytes in their formats.
  uint64_t conv_state_bytes = 0;
  uint64_t recurrent_state_bytes = 0;
  uint64_t state_copies = 0;  // rollback + 1 (+ 1 staged) with a state, else 0
  uint64_t state_bytes = 0;   // (conv_state_bytes + recurrent_state_bytes) * state_copies

  // Whether the layer holds K/V buffers of its own (an attending owner).
  bool OwnsKV() const { return owner == index && spec.attends; }
  bool HasState() const { return state_copies != 0; }
};

// Device memory available to an engine, for LayerPlan::Capacity.
struct MemoryBudget {
  uint64_t device_bytes = 0;
  uint64_t weight_bytes = 0;
  uint64_t workspace_bytes = 0;  // activations, scratch
  uint64_t margin_bytes = 0;     // kept free
};

// How much a budget holds, for a plan's model and runtime.
struct CapacityReport {
  uint64_t usable_bytes = 0;        // device - weights - workspace - margin (0 if negative)
  uint64_t bytes_per_sequence = 0;  // one sequence at the plan's context
  uint64_t max_sequences = 0;       // sequences of the plan's context that fit
  uint64_t max_tokens = 0;          // max_sequences * context
  // Largest context (<= the limit given) at which the plan's num_sequences fit; 0 if none.
  uint64_t max_context = 0;
};

// The capacity and bytes of every layer of one model under one runtime.
// Immutable; copy it freely. Build one with LayerPlan::Builder.
class LayerPlan {
 public:
  class Builder;

  LayerPlan() = default;

  const RuntimeSpec& Runtime() const { return runtime_; }
  size_t NumLayers() const { return layers_.size(); }
  const LayerInfo& Layer(size_t index) const {
    KVRING_CHECK(index < layers_.size());
    return layers_[index];
  }
  const std::vector<LayerInfo>& Layers() const { return layers_; }
  size_t NumOwningLayers() const {
    return static_cast<size_t>(std::count_if(layers_.begin(), layers_.end(),
                                             [](const LayerInfo& l) { return l.OwnsKV(); }));
  }
  // Slots every owning layer's num_slots is a multiple of.
  uint64_t SlotAlignment() const { return kvring::SlotAlignment(runtime_); }
  // Bytes of one element of the runtime's element type (scales aside); a layer's bytes come
  // from its format (LayerInfo::slot_bytes).
  uint64_t ElementBytes() const { return kvring::ElementBytes(runtime_.element_type); }

  // Bytes of one sequence's K/V: the sum of every owning layer's bytes, padding included.
  uint64_t TotalBytes() const { return total_bytes_; }
  // Bytes of one sequence's recurrent states (every layer's state_bytes, every copy
  // included), apart from the K/V: they do not grow with the context.
  uint64_t StateBytes() const { return state_bytes_; }
  // Whether some layer has no attention or holds a recurrent state (a hybrid model).
  bool HasStateLayers() const {
    return std::any_of(layers_.begin(), layers_.end(),
                       [](const LayerInfo& l) { return !l.spec.attends || l.HasState(); });
  }
  // Bytes of Runtime().num_sequences sequences.
  uint64_t TotalBytesAllSequences() const { return total_bytes_all_sequences_; }
  // Bytes of TotalBytes() that are layout padding beyond every layer's capacity.
  uint64_t PaddingBytes() const { return padding_bytes_; }
  // Bytes of one sequence if every owning layer kept the whole context (with padding).
  uint64_t FlatBytes() const { return flat_bytes_; }
  // Bytes one more token of context adds to one sequence (padding aside): the slot bytes
  // of every owning layer whose capacity is the context.
  uint64_t ContextTokenBytes() const { return context_token_bytes_; }

  // Returns the bytes of one sequence (K/V and recurrent states) if the context were
  // `context` (all else the same), or kMaxU64 if that count does not fit 64 bits. Does not
  // allocate. Cost: O(layers).
  uint64_t BytesAtContext(uint64_t context) const {
    uint64_t total = state_bytes_;
    for (const LayerInfo& layer : layers_) {
      if (!layer.OwnsKV()) continue;
      const uint64_t capacity = CapacityOf(layer.span, context, runtime_);
      uint64_t num_slots, bytes;
      if (!NumSlotsFor(runtime_, capacity, &num_slots) ||
          !detail::CheckedMul(num_slots, layer.slot_bytes, &bytes)) {
        return detail::kMaxU64;
      }
      total = detail::SaturatingAdd(total, bytes);
    }
    return total;
  }

  // Returns what `budget` holds for this plan; the largest context searched is
  // `context_limit` (for example the model's maximum). Cost: O(layers * 64).
  CapacityReport Capacity(const MemoryBudget& budget, uint64_t context_limit) const {
    CapacityReport report;
    uint64_t reserved = detail::SaturatingAdd(
        detail::SaturatingAdd(budget.weight_bytes, budget.workspace_bytes), budget.margin_bytes);
    report.usable_bytes = budget.device_bytes > reserved ? budget.device_bytes - reserved : 0;
    report.bytes_per_sequence = detail::SaturatingAdd(total_bytes_, state_bytes_);
    report.max_sequences =
        report.bytes_per_sequence == 0 ? 0 : report.usable_bytes / report.bytes_per_sequence;
    report.max_tokens = detail::SaturatingMul(report.max_sequences, runtime_.context);
    // BytesAtContext is non-decreasing in the context: binary search the last that fits.
    const auto fits = [&](uint64_t context) {
      const uint64_t per_sequence = BytesAtContext(context);
      uint64_t all;
      return detail::CheckedMul(per_sequence, runtime_.num_sequences, &all) &&
             all <= report.usable_bytes;
    };
    uint64_t lo = 0, hi = context_limit;  // invariant: lo fits (or is 0), hi+1 does not
    if (hi != 0 && fits(hi)) {
      lo = hi;
    } else {
      while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (fits(mid)) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
    }
    report.max_context = lo;
    return report;
  }

  // Returns the plan of the same layers under another runtime (for example a larger batch),
  // or the error that runtime has.
  Expected<LayerPlan> WithRuntime(const RuntimeSpec& runtime) const;

  // Returns the capacity rule (docs/design.md) for an owner whose readers' largest
  // window or chunk is `span` (0: some reader is global).
  static uint64_t CapacityOf(uint64_t span, uint64_t context, const RuntimeSpec& runtime) {
    return detail::CapacityFor(span, context, runtime);
  }

 private:
  RuntimeSpec runtime_;
  std::vector<LayerInfo> layers_;
  uint64_t total_bytes_ = 0;
  uint64_t state_bytes_ = 0;
  uint64_t padding_bytes_ = 0;
  uint64_t total_bytes_all_sequences_ = 0;
  uint64_t flat_bytes_ = 0;
  uint64_t context_token_bytes_ = 0;
};

}  // namespace kvring

#endif  // KVRING_PLAN_LAYER_PLAN_H_
