// kvring/storage/kv_cache.h: KVCache<Layout>, the K/V storage of one sequence of one model, built
// from a LayerPlan: a RingKV or GlobalKV per owning layer, nothing for shared-KV consumers.
// Engines write each layer separately and read layers through KVView. Does no attention.
#ifndef KVRING_STORAGE_KV_CACHE_H_
#define KVRING_STORAGE_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/indexer_view.h"
#include "kvring/kv_view.h"
#include "kvring/layer_plan.h"
#include "kvring/status.h"
#include "kvring/storage/global_kv.h"
#include "kvring/storage/layer_table.h"
#include "kvring/storage/recurrent_states.h"
#include "kvring/storage/ring_kv.h"
#include "kvring/storage/step_rule.h"
#include "kvring/storage/storage_spec.h"
#include "kvring/visibility.h"

namespace kvring {

template <typename Layout>
class KVCache {
  static_assert(IsLayout<Layout>::value, "KVCache needs a kvring layout");

 public:
  KVCache() = default;
  // Views of `other` stay current: they read the buffers this cache now owns.
  KVCache(KVCache&&) noexcept = default;
  // A restore (`cache = std::move(snapshot)`): ends the views of both caches (ViewEnd::kRestore).
  KVCache& operator=(KVCache&& other) noexcept {
    if (this == &other) return *this;
    std::unique_ptr<ViewEpoch> epoch = std::move(epoch_);
    plan_ = std::move(other.plan_);
    table_ = std::move(other.table_);
    step_ = std::move(other.step_);
    rings_ = std::move(other.rings_);
    globals_ = std::move(other.globals_);
    states_ = std::move(other.states_);
    if (epoch == nullptr) {
      epoch_ = std::move(other.epoch_);
    } else {
      epoch_ = std::move(epoch);
    }
    EndViews(ViewEnd::kRestore);
    other.EndViews(ViewEnd::kRestore);
    return *this;
  }

  // Returns the cache of `plan`, or an Error: a plan for another backend or tile height, or
  // an allocation failure. Allocates plan.TotalBytes() for the K/V and the recurrent states'
  // slots (plan.StateBytes(), each state 64-byte aligned), all zeroed.
  static Expected<KVCache> Create(const LayerPlan& plan) {
    const Error unfit = detail::ValidatePlanFor<Layout>(plan, "cache", /*holds_states=*/true);
    if (!unfit.field.empty()) return unfit;
    Expected<detail::RecurrentStates> states = detail::RecurrentStates::Create(plan);
    if (!states.ok()) return states.error();
    KVCache cache;
    cache.epoch_ = std::make_unique<ViewEpoch>();
    cache.plan_ = plan;
    cache.table_ = detail::LayerTable::Of(plan, detail::Residence::kFlat);
    cache.step_ = detail::StepRule(cache.table_.Owners().size(), 0);
    cache.states_ = std::move(states).value();
    for (size_t layer : cache.table_.Owners()) {
      Error error = cache.IsFlat(layer) ? AddStorage(&cache.globals_, plan, layer)
                                        : AddStorage(&cache.rings_, plan, layer);
      if (!error.field.empty()) {
        error.message = "layers[" + std::to_string(layer) + "]: " + error.message;
        return error;
      }
    }
    return cache;
  }

  const LayerPlan& Plan() const { return plan_; }
  size_t NumLayers() const { return table_.NumLayers(); }
  // Returns whether `layer` owns its buffers (else it reads Owner(layer)'s).
  bool OwnsKV(size_t layer) const { return table_.OwnsKV(layer); }
  size_t Owner(size_t layer) const { return table_.Owner(layer); }
  // Returns whether owning layer `layer` is stored flat (GlobalKV) rather than as a ring.
  bool IsFlat(size_t layer) const {
    return table_.OwnerEntry(layer).residence == detail::Residence::kFlat;
  }

  // Appends rows k [num_tokens][kv_head][head_dim] and v [num_tokens][kv_head][v_head_dim]
  // (v null for MLA; a DSA latent's v: its indexer keys [num_tokens][indexer_dim], read back
  // with IndexerKeys) to owning layer `layer` at `pos`, in the layer's format: BF16 rounding to
  // nearest even, or int8 encoding each (pos, kv_head) row (EncodeInt8Row). Token t's
  // rows start at k + t * strides.k and v + t * strides.v (elements; 0: packed), so that the K
  // and V of a fused QKV buffer [token][q heads | k heads | v heads] append without a copy.
  // The owning layers append in step: `pos` must be the layer's EndPos(layer), and while some
  // layers are ahead (a step begun but not finished), a layer already at the furthest end, or
  // an append that would pass it, is refused with kWrongPosition. A batch larger than planned
  // first grows every ring (Grow). Refusals change nothing and name the layer and the values:
  // kBadArgument (a layer past the model, null rows, a nonzero stride below the packed row),
  // kNotOwner (a consumer layer), kEmptyBatch, kWrongPosition, kContextFull, kOutOfMemory.
  // Cost: the bytes of the rows; the step check is O(1).
  Result AppendF32(size_t layer, uint64_t pos, const float* k, const float* v, uint64_t num_tokens,
                   RowStrides strides = RowStrides()) {
    return Append(layer, pos, k, v, num_tokens, strides);
  }
  // As AppendF32, from BF16 rows (copied as they are into a BF16 layer).
  Result AppendBF16(size_t layer, uint64_t pos, const BF16* k, const BF16* v, uint64_t num_tokens,
                    RowStrides strides = RowStrides()) {
    return Append(layer, pos, k, v, num_tokens, strides);
  }

  // Returns the position of the sequence: the one every owning layer has reached (the lowest
  // EndPos(layer) of the owners; 0 when empty). Between the appends of one step it lags the
  // layers already appended. O(1) between steps, O(layers) inside one.
  uint64_t EndPos() const { return step_.InStep() ? StepOf().low_end : step_.HighEnd(); }

  // Live range of `layer` (its owner's for a consumer): [FirstPos, EndPos); a layer without
  // attention holds no position: both are the cache's EndPos().
  uint64_t FirstPos(size_t layer) const {
    return table_.Attends(layer) ? StorageOf(Owner(layer)).Index().FirstPos() : EndPos();
  }
  uint64_t EndPos(size_t layer) const {
    return table_.Attends(layer) ? StorageOf(Owner(layer)).Index().EndPos() : EndPos();
  }

  // Copies the stored BF16 row of `pos` of `layer` (its owner's) into k_out
  // [kv_head][head_dim] and, if not null, v_out [kv_head][v_head_dim] (a DSA latent: its
  // indexer key), exactly as stored.
  // kNotLive (saying the live range) for a position not held; kBadArgument for a layer past
  // the model, a null k_out, or an int8 layer (use ReadRowInt8 or ReadRowF32). Does not
  // allocate. Cost: one row.
  Result ReadRow(size_t layer, uint64_t pos, BF16* k_out, BF16* v_out) const {
    return Read(layer, pos, detail::RowRead::BF16s(k_out, v_out));
  }

  // As ReadRow, for an int8 or int8h layer (its owner's): copies k_out [kv_head][head_dim] and
  // k_scales_out [kv_head], and if not null v_out [kv_head][v_head_dim] and v_scales_out
  // [kv_head], exactly as stored (int8h: K rotated). kBadArgument also for a BF16 layer.
  // Cost: one row.
  Result ReadRowInt8(size_t layer, uint64_t pos, int8_t* k_out, float* k_scales_out, int8_t* v_out,
                     float* v_scales_out) const {
    return Read(layer, pos, detail::RowRead::Int8s(k_out, k_scales_out, v_out, v_scales_out));
  }

  // As ReadRow, as f32 values in any format: BF16 widened exactly, int8 decoded as
  // DecodeInt8(scale, q), int8h's K decoded and rotated back (RotateHadamard). Cost: one row.
  Result ReadRowF32(size_t layer, uint64_t pos, float* k_out, float* v_out) const {
    return Read(layer, pos, detail::RowRead::F32s(k_out, v_out));
  }

  // Returns the format `layer`'s K and V are stored in (its owner's; a layer without attention
  // its spec's, storing none).
  Format GetFormat(size_t layer) const {
    return table_.Attends(layer) ? StorageOf(Owner(layer)).GetFormat()
                                 : plan_.Layer(layer).spec.format;
  }

  // Returns the view `layer` attends over: its owner's storage under its own visibility. The
  // view ends at the next call that writes the cache (an append to any layer, Rollback,
  // Clear, Grow, a move-assignment into it) or at its destruction; attention refuses an ended
  // view (kStaleView, naming the call) in O(1). O(1); does not allocate.
  KVView<Layout> View(size_t layer) const {
    const size_t owner = Owner(layer);                    // checks `layer`
    if (!table_.Attends(layer)) return KVView<Layout>();  // attention refuses it: no K/V
    const KVView<Layout> view = StoredView(layer);
    return table_.Entry(owner).indexer_dim != 0 ? detail::WithoutIndexer(view) : view;
  }

  // Returns the DSA indexer keys of `layer` (its owner's; LayerSpec::indexer_dim, appended as
  // the latent's v), under its visibility, with View's lifetime and stamp; keys.dim is 0 for a
  // layer without an indexer (nothing held). O(1); does not allocate.
  IndexerKeysView IndexerKeys(size_t layer) const {
    const size_t owner = Owner(layer);  // checks `layer`
    if (!table_.Attends(layer) || table_.Entry(owner).indexer_dim == 0) return IndexerKeysView();
    return detail::IndexerKeysOf(StoredView(layer));
  }

  // Discards the newest `num_tokens` positions of every owning layer, or of none, and returns
  // the result with the cache's EndPos() after the call (the new end; unchanged if refused).
  // Refused with kRollbackTooFar (saying how many positions may be discarded now, and which
  // layer bounds it) past the planned headroom or what a layer holds, and with kWrongPosition
  // in the middle of a step (the owning layers not all at one end). O(layers).
  RollbackResult Rollback(uint64_t num_tokens) {
    if (step_.InStep()) {
      const detail::StepEnds step = StepOf();
      return RollbackResult(
          detail::StepRule::MidStep(step,
                                    "rollback while layers[%llu] is at %llu and layers[%llu] at "
                                    "%llu; append every owning layer to the same position first"),
          step.low_end);
    }
    const uint64_t end = step_.HighEnd();
    if (table_.Owners().empty()) {  // a default-made cache holds nothing
      if (num_tokens == 0) return RollbackResult(Status::kOk, 0);
      return RollbackResult(
          Result::Refused(Status::kRollbackTooFar, "rollback of %llu positions of an empty cache",
                          num_tokens),
          0);
    }
    // The layer that allows the shortest rollback decides, and names itself if it refuses.
    size_t bound = table_.Owners().front();
    for (size_t layer : table_.Owners()) {
      if (StorageOf(layer).Index().RollbackLimit() < StorageOf(bound).Index().RollbackLimit()) {
        bound = layer;
      }
    }
    if (num_tokens > StorageOf(bound).Index().RollbackLimit()) {
      return RollbackResult(StorageOf(bound).CheckRollback(num_tokens, bound), end);
    }
    if (num_tokens != 0) {  // the recurrent states after end - num_tokens must be held too
      const Result held = states_.CheckHeld(end - num_tokens);
      if (!held.ok()) return RollbackResult(held, end);
    }
    for (size_t layer : table_.Owners()) {
      const Result result = StorageOf(layer).Rollback(num_tokens, layer);
      KVRING_DASSERT(result.ok());
      (void)result;
    }
    if (num_tokens != 0) {  // Rollback(0) changes nothing
      states_.ForgetAfter(end - num_tokens);
      step_.Reset(end - num_tokens);
      EndViews(ViewEnd::kRollback);
    }
    return RollbackResult(Status::kOk, end - num_tokens);
  }

  // Abandons an unfinished step: every owning layer ahead of the lowest one goes back to its
  // end, the last position every owner reached (a step refused part way leaves the owners at
  // different ends, where Rollback is refused). The rows before it stay bit-identical. A step
  // whose appends are all in but whose states are not (a recurrent layer after the last
  // attention layer failed: some state layer holds no state after the end, none one past it)
  // is abandoned whole: every owner goes back to the step's start. Between steps it only
  // forgets the states written past the end (a step abandoned before its first append).
  // Returns the end after the call. O(layers x state slots).
  RollbackResult AbandonStep() { return Abandon(detail::StepRule::kInferStart); }
  // The same for a pass that began at `start` (EndPos() then), wherever it failed: every owner
  // and state back to `start`, a step whose appends and states are all in included (a later
  // layer failed). kWrongPosition (nothing changed) unless `start` began the current or last
  // step, or is the end between steps.
  RollbackResult AbandonStep(uint64_t start) { return Abandon(start); }

  // Re-plans for appends of up to `batch` tokens and grows every ring whose capacity rises,
  // keeping every held position; other layers are untouched. A batch at or below the planned
  // one changes nothing; kBadArgument for 0 or a batch the plan rejects (past the context);
  // kOutOfMemory (naming the layer) leaves the cache as it was. Allocates the grown rings
  // and copies their held positions.
  Result Grow(uint64_t batch) {
    if (batch == 0) {
      return Result::Refused(Status::kBadArgument,
                             "grow to a batch of %llu tokens: a batch holds at least one", batch);
    }
    if (batch <= plan_.Runtime().batch) return Status::kOk;
    RuntimeSpec runtime = plan_.Runtime();
    runtime.batch = batch;
    Expected<LayerPlan> grown_plan = plan_.WithRuntime(runtime);
    if (!grown_plan.ok()) {
      if (batch > runtime.context) {
        return Result::Refused(Status::kBadArgument,
                               "grow to a batch of %llu tokens: past the context of %llu", batch,
                               runtime.context);
      }
      return Result::Refused(Status::kBadArgument,
                             "grow to a batch of %llu tokens: the plan's bytes overflow 64 bits",
                             batch);
    }
    // Grow copies first, then move them in, so that a failure leaves every ring as it was.
    std::vector<std::pair<size_t, RingKV<Layout>>> grown;
    for (size_t layer : table_.RingOwners()) {
      const RingKV<Layout>& ring = rings_[table_.Entry(layer).storage];
      if (grown_plan->Layer(layer).num_slots <= ring.NumSlots()) continue;
      Expected<RingKV<Layout>> copy = ring.GrownCopy(grown_plan->Layer(layer).capacity);
      if (!copy.ok()) {
        return Result::Refused(Status::kOutOfMemory,
                               "layers[%llu]: growing to %llu slots could not allocate", layer,
                               grown_plan->Layer(layer).num_slots);
      }
      grown.emplace_back(table_.Entry(layer).storage, std::move(copy).value());
    }
    for (auto& [index, ring] : grown) rings_[index] = std::move(ring);
    plan_ = std::move(grown_plan).value();
    if (!grown.empty()) EndViews(ViewEnd::kGrow);
    return Status::kOk;
  }

  // Returns an independent copy of every layer (property 3, docs/design.md). Allocates; copies the
  // held positions only.
  Expected<KVCache> Copy() const {
    KVCache copy;
    copy.epoch_ = std::make_unique<ViewEpoch>();
    copy.plan_ = plan_;
    copy.table_ = table_;
    copy.step_ = step_;
    if (!CopyAll(rings_, &copy.rings_) || !CopyAll(globals_, &copy.globals_) ||
        !states_.CopyTo(&copy.states_)) {
      return Error{"plan", "plan: the snapshot could not be allocated"};
    }
    return copy;
  }

  // Forgets every position of every layer, for a new sequence: EndPos() and every
  // EndPos(layer) are 0 afterwards. Keeps the buffers. O(layers).
  void Clear() {
    for (auto& ring : rings_) ring.Clear();
    for (auto& flat : globals_) flat.Clear();
    states_.Clear();
    step_.Reset(0);
    EndViews(ViewEnd::kClear);
  }

  // Returns the state of `layer` after EndPos() positions (the one its next position continues
  // from; zeros for a new sequence), as spans to read; the engine reads it before writing the
  // states of the positions it appends (StateAfter: with rollback 0 and no stage_states, the
  // same slot, updated in place; staged, never this one). An Error (naming the layer) for a
  // layer without a state, or when that state was not written (StateAfter) or was overwritten
  // since: never a stale state.
  Expected<StateSlot> State(size_t layer) { return states_.Current(layer, EndPos()); }
  // The state of `layer` after `num_positions` positions, if its slot holds it: a layer that
  // writes its states after the step's appends (StateAfter) continues from the state after
  // the step's start.
  Expected<StateSlot> State(size_t layer, uint64_t num_positions) {
    return states_.Current(layer, num_positions);
  }

  // Returns the slot where the engine writes `layer`'s state after `num_positions` positions,
  // in the forward pass that appends them, before or after its appends, until the next step
  // begins (a layer after the last attention layer writes its states once the step is
  // complete): a position of the current step or of the next (the start of the current or
  // last step < num_positions <= the context). A later Rollback(n) makes the state after
  // EndPos() - n the current one, so with speculative decoding write every position's state
  // (the plan keeps rollback + 1 slots, the oldest state's reused first; one more with
  // RuntimeSpec::stage_states, where a step never overwrites the state it starts from).
  // An Error outside that range or for a layer without a state.
  Expected<StateSlot> StateAfter(size_t layer, uint64_t num_positions) {
    return states_.After(layer, num_positions, step_, plan_.Runtime().context);
  }

  // Returns the bytes of every K and V buffer and int8 scale (for each owning layer num_slots x
  // num_kv_heads x (RowBytes(format, head_dim) + RowBytes(format, v_head_dim)), the V term 0
  // without V) and of the recurrent states' slots: Plan().TotalBytes() + Plan().StateBytes().
  uint64_t AllocatedBytes() const {
    uint64_t bytes = states_.PlannedBytes();
    for (const auto& ring : rings_) bytes += ring.AllocatedBytes();
    for (const auto& flat : globals_) bytes += flat.AllocatedBytes();
    return bytes;
  }

 private:
  // AbandonStep(start) (kInferStart: AbandonStep()).
  RollbackResult Abandon(uint64_t start) {
    uint64_t end = 0;
    const Result allowed = step_.AbandonTarget(start, step_.InStep() ? StepOf().low_end : 0,
                                               states_.LastStepUnfinished(step_.HighEnd()), &end);
    if (!allowed.ok()) return RollbackResult(allowed, EndPos());
    if (!step_.InStep() && end == step_.HighEnd()) {
      states_.ForgetAfter(end);  // a next step that appended nothing
      return RollbackResult(Status::kOk, end);
    }
    for (size_t layer : table_.Owners()) {
      detail::LayerStorage<Layout>& storage = StorageOf(layer);
      if (storage.Index().EndPos() > end) storage.DiscardTo(end);
    }
    states_.ForgetAfter(end);
    step_.Reset(end);
    EndViews(ViewEnd::kRollback);
    return RollbackResult(Status::kOk, end);
  }

  friend struct detail::StateAccess;  // io/state_access.h: saves and loads it

  // Creates the storage of owning layer `layer` at the end of `storages` (its index in the
  // table: owners of one residence are numbered in layer order).
  template <typename Storage>
  static Error AddStorage(std::vector<Storage>* storages, const LayerPlan& plan, size_t layer) {
    Expected<Storage> storage = Storage::Create(plan, layer);
    if (!storage.ok()) return storage.error();
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

  // Calls fn with the RingKV or GlobalKV of owning layer `layer` of `self` (const or not).
  template <class Self, typename Fn>
  static decltype(auto) VisitIn(Self& self, size_t layer, Fn&& fn) {
    const detail::LayerEntry& entry = self.table_.Entry(layer);
    KVRING_DASSERT(entry.owner == layer);
    return entry.residence == detail::Residence::kFlat ? fn(self.globals_[entry.storage])
                                                       : fn(self.rings_[entry.storage]);
  }
  // Returns the storage of attending layer `layer`'s owner under `layer`'s own visibility,
  // stamped: a DSA latent's indexer keys as its V stream (View drops them, IndexerKeys reads
  // them).
  KVView<Layout> StoredView(size_t layer) const {
    const Visibility visibility = table_.Entry(layer).visibility;
    KVView<Layout> view = Visit(Owner(layer), [&](const auto& kv) { return kv.View(visibility); });
    if (epoch_ != nullptr) view.stamp = ViewStamp::Of(*epoch_, layer);
    return view;
  }
  template <typename Fn>
  decltype(auto) Visit(size_t layer, Fn&& fn) const {
    return VisitIn(*this, layer, std::forward<Fn>(fn));
  }

  // The one read behind ReadRow, ReadRowInt8 and ReadRowF32.
  Result Read(size_t layer, uint64_t pos, const detail::RowRead& read) const {
    const Result known = table_.CheckAttends(layer);
    if (!known.ok()) return known;
    return StorageOf(Owner(layer)).Read(pos, read, layer);
  }

  // The owning layers at the lowest and at the highest end position. O(layers).
  detail::StepEnds StepOf() const {
    return detail::ScanStep(table_.Owners(),
                            [this](size_t layer) { return StorageOf(layer).Index().EndPos(); });
  }

  // Returns the storage of owning layer `layer` (const as the cache is).
  const detail::LayerStorage<Layout>& StorageOf(size_t layer) const {
    return VisitIn(
        *this, layer, [](const auto& kv) -> const auto& { return OwnedStorage(kv); });
  }
  detail::LayerStorage<Layout>& StorageOf(size_t layer) {
    return VisitIn(
        *this, layer, [](auto& kv) -> auto& { return OwnedStorage(kv); });
  }
  static const detail::LayerStorage<Layout>& OwnedStorage(const detail::OwnedLayerKV<Layout>& kv) {
    return kv.storage_;
  }
  static detail::LayerStorage<Layout>& OwnedStorage(detail::OwnedLayerKV<Layout>& kv) {
    return kv.storage_;
  }

  template <typename T>
  Result Append(size_t layer, uint64_t pos, const T* k, const T* v, uint64_t num_tokens,
                RowStrides strides) {
    const Result writable = table_.CheckWritable(layer);
    if (!writable.ok()) return writable;
    // Check the append itself first, so that a refused call does not grow anything.
    const Result check = StorageOf(layer).CheckAppend(pos, k, v, num_tokens, strides, layer);
    if (check == Status::kEmptyBatch || check == Status::kBadArgument ||
        check == Status::kWrongPosition) {
      return check;
    }
    // pos is the layer's end here. Every owner sees the same positions' queries, so no layer
    // may start a step before the others finish the last one.
    const Result in_step = step_.CheckAppend(layer, pos, num_tokens, [this] { return StepOf(); });
    if (!in_step.ok()) return in_step;
    if (!check.ok() && check != Status::kBatchTooLarge) return check;
    if (num_tokens > plan_.Runtime().batch) {
      const Result grown = Grow(num_tokens);
      if (!grown.ok()) return grown;
    }
    // The plan now holds this batch in every ring: no ring grows on its own.
    const Result appended =
        StorageOf(layer).Append(pos, k, v, num_tokens, strides, /*may_grow=*/false, layer);
    if (appended.ok()) {
      step_.RecordAppend(pos, num_tokens);
      EndViews(ViewEnd::kAppend);
    }
    return appended;
  }

  void EndViews(ViewEnd call) {
    if (epoch_ != nullptr) epoch_->Advance(call);
  }

  // The epoch of this cache's views, on the heap so that a moved cache keeps its views current.
  std::unique_ptr<ViewEpoch> epoch_;
  LayerPlan plan_;
  detail::LayerTable table_;
  detail::StepRule step_;
  std::vector<RingKV<Layout>> rings_;
  std::vector<GlobalKV<Layout>> globals_;
  detail::RecurrentStates states_;  // the layers' recurrent states (LayerSpec::state)
};

}  // namespace kvring

#endif  // KVRING_STORAGE_KV_CACHE_H_
