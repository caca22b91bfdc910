// kvring/kv_cache.h: KVCache<Layout>, the K/V storage of one sequence of one model, built
// from a LayerPlan: a RingKV or GlobalKV per owning layer, nothing for shared-KV consumers.
// Engines write each layer separately and read layers through KVView. Does no attention.
#ifndef KVRING_KV_CACHE_H_
#define KVRING_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/global_kv.h"
#include "kvring/kv_view.h"
#include "kvring/layer_plan.h"
#include "kvring/ring_kv.h"
#include "kvring/status.h"
#include "kvring/storage_spec.h"
#include "kvring/visibility.h"

namespace kvring {

template <typename Layout>
class KVCache {
  static_assert(IsLayout<Layout>::value, "KVCache needs a kvring layout");

 public:
  KVCache() = default;
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;

  // Returns the cache of `plan`, or an Error: a plan for another backend or tile height, or
  // an allocation failure. Allocates exactly plan.TotalBytes() (zeroed, 64-byte aligned).
  static Expected<KVCache> Create(const LayerPlan& plan) {
    const RuntimeSpec& runtime = plan.Runtime();
    if (plan.NumLayers() == 0) {
      return Error{"plan", "plan: is empty; build it with LayerPlan::Builder"};
    }
    if (runtime.backend != Layout::kBackend) {
      return detail::FieldError("runtime.backend", ToString(runtime.backend),
                                std::string("does not match the cache's layout, which serves ") +
                                    ToString(Layout::kBackend));
    }
    if (runtime.element_type != ElementType::kBF16) {
      return detail::FieldError("runtime.element_type", ToString(runtime.element_type),
                                "is not stored: kvring caches hold BF16 (other element types are "
                                "for what-if accounting only)");
    }
    if (SlotAlignment(runtime) != Layout::kSlotAlignment) {
      return detail::FieldError("runtime.tile_rows", std::to_string(runtime.tile_rows),
                                "does not match the layout's tile of " +
                                    std::to_string(Layout::kSlotAlignment) + " rows");
    }
    KVCache cache;
    cache.plan_ = plan;
    cache.entries_.resize(plan.NumLayers());
    for (const LayerInfo& layer : plan.Layers()) {
      Entry& entry = cache.entries_[layer.index];
      entry.owner = layer.owner;
      entry.visibility = Visibility::Of(layer.spec);
      if (!layer.OwnsKV()) continue;
      entry.flat = layer.capacity >= runtime.context;
      Error error = entry.flat ? cache.AddStorage(&cache.globals_, plan, layer.index, &entry)
                               : cache.AddStorage(&cache.rings_, plan, layer.index, &entry);
      if (!error.field.empty()) {
        error.message = "layers[" + std::to_string(layer.index) + "]: " + error.message;
        return error;
      }
    }
    return cache;
  }

  const LayerPlan& Plan() const { return plan_; }
  size_t NumLayers() const { return entries_.size(); }
  // Returns whether `layer` owns its buffers (else it reads Owner(layer)'s).
  bool OwnsKV(size_t layer) const { return Owner(layer) == layer; }
  size_t Owner(size_t layer) const {
    KVRING_CHECK(layer < entries_.size());
    return entries_[layer].owner;
  }
  // Returns whether owning layer `layer` is stored flat (GlobalKV) rather than as a ring.
  bool IsFlat(size_t layer) const { return entries_[Owner(layer)].flat; }

  // Appends rows k [num_tokens][kv_head][head_dim] and v [num_tokens][kv_head][v_head_dim]
  // (v null for MLA) to owning layer `layer` at `pos` (its EndPos()), rounding to nearest
  // even. A batch larger than planned first grows every ring (Grow); a consumer layer is
  // kNotOwner. Refused calls change nothing.
  Status AppendF32(size_t layer, uint64_t pos, const float* k, const float* v,
                   uint64_t num_tokens) {
    return Append(layer, pos, k, v, num_tokens);
  }
  Status AppendBF16(size_t layer, uint64_t pos, const BF16* k, const BF16* v, uint64_t num_tokens) {
    return Append(layer, pos, k, v, num_tokens);
  }

  // Live range of `layer` (its owner's for a consumer): [FirstPos, EndPos).
  uint64_t FirstPos(size_t layer) const {
    return Visit(Owner(layer), [](const auto& kv) { return kv.FirstPos(); });
  }
  uint64_t EndPos(size_t layer) const {
    return Visit(Owner(layer), [](const auto& kv) { return kv.EndPos(); });
  }
  // Copies the stored row of `pos` of `layer` (its owner's) into k_out and v_out.
  Status ReadRow(size_t layer, uint64_t pos, BF16* k_out, BF16* v_out) const {
    return Visit(Owner(layer), [&](const auto& kv) { return kv.ReadRow(pos, k_out, v_out); });
  }

  // Returns the view `layer` attends over: its owner's storage under its own visibility.
  KVView<Layout> View(size_t layer) const {
    const size_t owner = Owner(layer);  // checks `layer`
    const Visibility visibility = entries_[layer].visibility;
    return Visit(owner, [&](const auto& kv) { return kv.View(visibility); });
  }

  // Discards the newest `num_tokens` positions of every owning layer, or of none: if any
  // layer refuses (kRollbackTooFar), nothing changes.
  Status Rollback(uint64_t num_tokens) {
    for (size_t layer = 0; layer < entries_.size(); ++layer) {
      if (!OwnsKV(layer)) continue;
      const Status status =
          Visit(layer, [&](const auto& kv) { return kv.Index().CheckRollback(num_tokens); });
      if (status != Status::kOk) return status;
    }
    for (size_t layer = 0; layer < entries_.size(); ++layer) {
      if (!OwnsKV(layer)) continue;
      const Status status = Visit(layer, [&](auto& kv) { return kv.Rollback(num_tokens); });
      KVRING_DASSERT(status == Status::kOk);
      (void)status;
    }
    return Status::kOk;
  }

  // Re-plans for appends of up to `batch` tokens and grows every ring whose capacity rises,
  // keeping every held position; other layers are untouched. A batch at or below the planned
  // one changes nothing; kBadArgument for 0 or a batch the plan rejects (past the context);
  // kOutOfMemory leaves the cache as it was.
  Status Grow(uint64_t batch) {
    if (batch == 0) return Status::kBadArgument;
    if (batch <= plan_.Runtime().batch) return Status::kOk;
    RuntimeSpec runtime = plan_.Runtime();
    runtime.batch = batch;
    Expected<LayerPlan> grown_plan = plan_.WithRuntime(runtime);
    if (!grown_plan.ok()) return Status::kBadArgument;
    // Grow copies first, then move them in, so that a failure leaves every ring as it was.
    std::vector<std::pair<size_t, RingKV<Layout>>> grown;
    for (size_t layer = 0; layer < entries_.size(); ++layer) {
      if (!OwnsKV(layer) || entries_[layer].flat) continue;
      const RingKV<Layout>& ring = rings_[entries_[layer].storage];
      if (grown_plan->Layer(layer).num_slots <= ring.NumSlots()) continue;
      Expected<RingKV<Layout>> copy = ring.GrownCopy(grown_plan->Layer(layer).capacity);
      if (!copy.ok()) return Status::kOutOfMemory;
      grown.emplace_back(entries_[layer].storage, std::move(copy).value());
    }
    for (auto& [index, ring] : grown) rings_[index] = std::move(ring);
    plan_ = std::move(grown_plan).value();
    return Status::kOk;
  }

  // Returns an independent copy of every layer (property 3, docs/design.md). Allocates; copies the
  // held positions only.
  Expected<KVCache> Copy() const {
    KVCache copy;
    copy.plan_ = plan_;
    copy.entries_ = entries_;
    if (!CopyAll(rings_, &copy.rings_) || !CopyAll(globals_, &copy.globals_)) {
      return Error{"plan", "plan: the snapshot could not be allocated"};
    }
    return copy;
  }

  // Forgets every position of every layer, for a new sequence; keeps the buffers.
  void Clear() {
    for (auto& ring : rings_) ring.Clear();
    for (auto& flat : globals_) flat.Clear();
  }

  // Returns the bytes of every K and V buffer; equals Plan().TotalBytes() for BF16 plans.
  uint64_t AllocatedBytes() const {
    uint64_t bytes = 0;
    for (const auto& ring : rings_) bytes += ring.AllocatedBytes();
    for (const auto& flat : globals_) bytes += flat.AllocatedBytes();
    return bytes;
  }

 private:
  struct Entry {
    size_t owner = 0;
    Visibility visibility;
    bool flat = false;   // owners: GlobalKV (else RingKV)
    size_t storage = 0;  // owners: index into globals_ or rings_
  };

  template <typename Storage>
  Error AddStorage(std::vector<Storage>* storages, const LayerPlan& plan, size_t layer,
                   Entry* entry) {
    Expected<Storage> storage = Storage::Create(plan, layer);
    if (!storage.ok()) return storage.error();
    entry->storage = storages->size();
    storages->push_back(std::move(storage).value());
    return Error{};
  }

  template <typename Storage>
  static bool CopyAll(const std::vector<Storage>& from, std::vector<Storage>* to) {
    to->reserve(from.size());
    for (const Storage& storage : from) {
      Expected<Storage> copy = storage.Copy();
      if (!copy.ok()) return false;
      to->push_back(std::move(copy).value());
    }
    return true;
  }

  // Calls fn with the RingKV or GlobalKV of owning layer `layer`.
  template <typename Fn>
  auto Visit(size_t layer, Fn&& fn) const {
    const Entry& entry = entries_[layer];
    KVRING_DASSERT(entry.owner == layer);
    return entry.flat ? fn(globals_[entry.storage]) : fn(rings_[entry.storage]);
  }
  template <typename Fn>
  auto Visit(size_t layer, Fn&& fn) {
    const Entry& entry = entries_[layer];
    KVRING_DASSERT(entry.owner == layer);
    return entry.flat ? fn(globals_[entry.storage]) : fn(rings_[entry.storage]);
  }

  template <typename T>
  Status Append(size_t layer, uint64_t pos, const T* k, const T* v, uint64_t num_tokens) {
    if (layer >= entries_.size()) return Status::kBadArgument;
    if (!OwnsKV(layer)) return Status::kNotOwner;
    if (num_tokens > plan_.Runtime().batch) {
      // Check the append itself first, so that a refused call does not grow anything.
      const Status check =
          Visit(layer, [&](const auto& kv) { return kv.CheckAppend(pos, k, v, num_tokens); });
      if (check != Status::kOk && check != Status::kBatchTooLarge) return check;
      const Status grown = Grow(num_tokens);
      if (grown != Status::kOk) return grown;
    }
    return Visit(layer, [&](auto& kv) {
      if constexpr (std::is_same<T, float>::value) {
        return kv.AppendF32(pos, k, v, num_tokens);
      } else {
        return kv.AppendBF16(pos, k, v, num_tokens);
      }
    });
  }

  LayerPlan plan_;
  std::vector<Entry> entries_;
  std::vector<RingKV<Layout>> rings_;
  std::vector<GlobalKV<Layout>> globals_;
};

}  // namespace kvring

#endif  // KVRING_KV_CACHE_H_
