// kvring/storage/kv_pool.h: KVPool<Layout>, the K/V storage of many sequences of one model in
// one memory budget. Sliding and chunked owners keep a ring per sequence (the capacity rule,
// per sequence); global owners keep their positions in blocks of block_slots positions taken
// from one block store per layer as appends reach them, with one block table per sequence
// that every global owner shares. Forks share blocks by reference count and copy a shared
// block on the first write into it. Engines write each layer separately and attend through
// KVView (paged views for global layers); the read calls are storage/pool_reads.h's. Does no
// attention.
#ifndef KVRING_STORAGE_KV_POOL_H_
#define KVRING_STORAGE_KV_POOL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/index/block_table.h"
#include "kvring/kv_view.h"
#include "kvring/layer_plan.h"
#include "kvring/status.h"
#include "kvring/storage/block_store.h"
#include "kvring/storage/layer_rows.h"
#include "kvring/storage/layer_storage.h"
#include "kvring/storage/layer_table.h"
#include "kvring/storage/pool_budget.h"
#include "kvring/storage/pool_reads.h"
#include "kvring/storage/pool_sequence.h"
#include "kvring/storage/pool_spec.h"
#include "kvring/storage/recurrent_states.h"
#include "kvring/storage/ring_set.h"
#include "kvring/storage/sequence_table.h"
#include "kvring/storage/step_rule.h"
#include "kvring/storage/storage_spec.h"
#include "kvring/visibility.h"

namespace kvring {

template <typename Layout>
class KVPool : public detail::PoolReads<Layout, KVPool<Layout>> {
  static_assert(IsLayout<Layout>::value, "KVPool needs a kvring layout");

 public:
  using detail::PoolReads<Layout, KVPool>::EndPos;  // of a layer (storage/pool_reads.h)

  KVPool() = default;
  KVPool(KVPool&&) noexcept = default;
  KVPool& operator=(KVPool&&) noexcept = default;

  // Returns the pool of `plan` under `spec`, or an Error naming the field: a plan for another
  // backend or tile, a budget of 0 or one that holds no sequence, max_sequences 0, a
  // block_slots that is not a multiple of the tile. Reserves each global owner's block store
  // for the blocks the budget could hold (zeroed with calloc: pages are committed as blocks
  // are first written); rings are allocated as sequences are added.
  static Expected<KVPool> Create(const LayerPlan& plan, const PoolSpec& spec) {
    const Error unfit = detail::ValidatePlanFor<Layout>(plan, "pool", /*holds_states=*/true);
    if (!unfit.field.empty()) return unfit;
    uint64_t block_slots = 0;
    const Error bad_block = detail::ChooseBlockSlots<Layout>(plan.Runtime(), spec, &block_slots);
    if (!bad_block.field.empty()) return bad_block;
    KVPool pool;
    pool.plan_ = plan;
    pool.spec_ = spec;
    pool.spec_.block_slots = block_slots;
    pool.table_ = detail::LayerTable::Of(plan, detail::Residence::kPaged);
    pool.paged_ = detail::BlockStore<Layout>(block_slots);
    pool.rings_ = detail::RingSet<Layout>(plan.Runtime());
    for (size_t layer : pool.table_.Owners()) {
      if (pool.IsPaged(layer)) {
        StorageSpec paged = StorageSpec::Of(plan, layer);
        paged.shape.num_slots = block_slots;
        pool.paged_.AddLayer(layer, paged, block_slots * plan.Layer(layer).slot_bytes);
      } else {
        pool.rings_.Add(plan.Layer(layer), StorageSpec::Of(plan, layer));
      }
      Error error = detail::ValidateStorageSpec<Layout>(StorageSpec::Of(plan, layer));
      if (!error.field.empty()) {
        error.message = "layers[" + std::to_string(layer) + "]: " + error.message;
        return error;
      }
    }
    // The smallest sequence: rings for decode (batch 1) and one block.
    const Error unusable =
        detail::CheckPoolSpec(spec, pool.RingBytesFor(1) + pool.paged_.BlockBytes());
    if (!unusable.field.empty()) return unusable;
    const uint64_t block_bytes = pool.paged_.BlockBytes();
    const uint64_t num_blocks =
        std::min<uint64_t>(block_bytes == 0 ? 0 : spec.budget_bytes / block_bytes,
                           std::numeric_limits<uint32_t>::max());
    size_t failed = 0;
    if (!pool.paged_.Allocate(static_cast<uint32_t>(num_blocks), &failed)) {
      return detail::FieldError("budget_bytes", std::to_string(spec.budget_bytes),
                                "could not be reserved: the block store of layers[" +
                                    std::to_string(failed) + "] failed to allocate");
    }
    pool.sequences_ = detail::SequenceTable<Sequence>(spec.max_sequences);
    pool.budget_ = detail::PoolBudget<Layout>(spec.budget_bytes);
    return pool;
  }

  const LayerPlan& Plan() const { return plan_; }
  const PoolSpec& Spec() const { return spec_; }
  size_t NumLayers() const { return table_.NumLayers(); }
  uint64_t BlockSlots() const { return spec_.block_slots; }
  bool OwnsKV(size_t layer) const { return table_.OwnsKV(layer); }
  size_t Owner(size_t layer) const { return table_.Owner(layer); }
  // Returns whether owning layer `layer` is paged (blocks) rather than a ring per sequence.
  bool IsPaged(size_t layer) const {
    return table_.OwnerEntry(layer).residence == detail::Residence::kPaged;
  }

  // Returns the bytes of one sequence's rings when they hold batches of `batch` tokens
  // (window - 1 + max(batch, rollback) positions per ring, padded, capped by the context).
  uint64_t RingBytesFor(uint64_t batch) const { return rings_.BytesFor(batch); }
  // Returns the bytes of the blocks a sequence of `positions` positions holds alone.
  uint64_t BlockBytesFor(uint64_t positions) const {
    return detail::SaturatingMul(BlocksFor(positions, spec_.block_slots), paged_.BlockBytes());
  }

  // Adds an empty sequence whose rings hold batches of `batch` tokens (0: the plan's batch),
  // with zeroed recurrent states (a hybrid model's: Plan().StateBytes()), and sets *id.
  // Refusals change nothing: kBadArgument (a null id, a batch past the context),
  // kPoolExhausted (max_sequences live, or the budget cannot hold the rings and states: the
  // message says the bytes), kOutOfMemory. Allocates the rings and states.
  Result AddSequence(SequenceId* id, uint64_t batch = 0) {
    if (id == nullptr) return Result::Refused(Status::kBadArgument, "AddSequence: id is null");
    if (batch == 0) batch = plan_.Runtime().batch;
    if (batch > plan_.Runtime().context) {
      return Result::Refused(Status::kBadArgument,
                             "AddSequence: a batch of %llu tokens is past the context of %llu",
                             batch, plan_.Runtime().context);
    }
    if (sequences_.Full()) {
      return Result::Refused(Status::kPoolExhausted,
                             "AddSequence: all %llu sequences are live; free one first",
                             uint64_t{spec_.max_sequences});
    }
    Sequence sequence;
    sequence.ring_bytes = RingBytesFor(batch);
    const Result room = budget_.CheckRoom(
        detail::SaturatingAdd(sequence.ring_bytes, plan_.StateBytes()), 0, paged_);
    if (!room.ok()) return room;
    const Result made = rings_.Make(batch, &sequence.rings);
    if (!made.ok()) return made;
    Expected<detail::RecurrentStates> states = detail::RecurrentStates::Create(plan_);
    if (!states.ok()) {
      return Result::Refused(Status::kOutOfMemory,
                             "AddSequence: the recurrent states (%llu bytes) could not allocate",
                             plan_.StateBytes());
    }
    sequence.states = std::move(states).value();
    sequence.batch = batch;
    sequence.paged_end.assign(paged_.NumLayers(), 0);
    sequence.blocks = BlockTable(spec_.block_slots);
    sequence.step = detail::StepRule(table_.Owners().size(), 0);
    budget_.ChargeRings(0, sequence.ring_bytes);
    budget_.ChargeStates(0, plan_.StateBytes());
    *id = sequences_.Add(std::move(sequence));
    return Status::kOk;
  }

  // Frees `id`: its rings, its states and its hold on every block (blocks no other sequence holds
  // become free). The id is refused afterwards. kUnknownSequence for an id not live.
  Result Free(SequenceId id) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    Sequence& sequence = sequences_.Get(id);
    paged_.ReleaseFrom(&sequence.blocks, 0);
    budget_.ChargeRings(sequence.ring_bytes, 0);
    budget_.ChargeStates(plan_.StateBytes(), 0);
    sequences_.Free(id);  // ends its views (ViewEnd::kFree)
    return Status::kOk;
  }

  // Forgets every position of `id` (property 4), keeping its rings; its blocks are released,
  // its recurrent states zeroed.
  Result Clear(SequenceId id) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    sequences_.Get(id).Clear(&paged_);
    sequences_.EndViews(id, ViewEnd::kClear);
    return Status::kOk;
  }

  // Adds a sequence that holds what `id` holds and sets *fork: it shares every block of
  // `id` (reference counts) and copies its rings and recurrent states, so it costs those,
  // plus later at most one block (the first write into a shared, partly filled block copies it
  // first). Writing either never changes what the other reads (property 3). Refused while `id` is
  // inside a step (kWrongPosition), and as AddSequence.
  Result Fork(SequenceId id, SequenceId* fork) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    if (fork == nullptr) return Result::Refused(Status::kBadArgument, "Fork: fork is null");
    const Sequence& source = sequences_.Get(id);
    if (source.step.InStep()) return source.MidStep(table_);
    if (sequences_.Full()) {
      return Result::Refused(Status::kPoolExhausted,
                             "Fork: all %llu sequences are live; free one first",
                             uint64_t{spec_.max_sequences});
    }
    const Result room =
        budget_.CheckRoom(detail::SaturatingAdd(source.ring_bytes, plan_.StateBytes()), 0, paged_);
    if (!room.ok()) return room;
    Sequence sequence;
    const Result copied = source.ForkInto(&sequence);
    if (!copied.ok()) return copied;
    paged_.Share(sequence.blocks);
    budget_.ChargeRings(0, sequence.ring_bytes);
    budget_.ChargeStates(0, plan_.StateBytes());
    *fork = sequences_.Add(std::move(sequence));
    return Status::kOk;
  }

  // Resizes `id`'s rings to hold batches of `batch` tokens: larger for a prefill, 1 once it
  // decodes (window - 1 + max(1, rollback) positions per ring instead of window - 1 +
  // max(batch, rollback)). Keeps every position a later query or rollback may read; a
  // shrink drops older positions only. Refusals change nothing: kUnknownSequence,
  // kBadArgument (0, past the context), kWrongPosition (a shrink inside a step), kPoolExhausted
  // (the budget cannot hold the larger rings), kOutOfMemory. Allocates the new rings and copies.
  Result Resize(SequenceId id, uint64_t batch) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    if (batch == 0 || batch > plan_.Runtime().context) {
      return Result::Refused(Status::kBadArgument,
                             "Resize to a batch of %llu tokens: from 1 to the context %llu", batch,
                             plan_.Runtime().context);
    }
    Sequence& sequence = sequences_.Get(id);
    if (batch < sequence.batch) {
      // The step's queries still read the positions before it that a shrink would drop.
      if (sequence.step.InStep()) return sequence.MidStep(table_);
    }
    const uint64_t ring_bytes = RingBytesFor(batch);
    if (ring_bytes > sequence.ring_bytes) {
      const Result room = budget_.CheckRoom(ring_bytes - sequence.ring_bytes, 0, paged_);
      if (!room.ok()) return room;
    }
    std::vector<detail::LayerStorage<Layout>> rings;
    const Result resized = rings_.Resized(sequence.rings, batch, &rings);
    if (!resized.ok()) return resized;
    budget_.ChargeRings(sequence.ring_bytes, ring_bytes);
    sequence.ring_bytes = ring_bytes;
    sequence.rings = std::move(rings);
    sequence.batch = batch;
    sequences_.EndViews(id, ViewEnd::kResize);
    return Status::kOk;
  }

  // Prepares `id` for a step of `num_tokens` tokens from EndPos(id): grows its rings if the
  // batch is larger than they hold (Resize) and gives its paged layers their own blocks for
  // the step's positions (taking new ones, copying a shared one). After kOk, appending those
  // tokens to every owning layer is not refused for the budget. Refusals change nothing:
  // kUnknownSequence, kWrongPosition (inside a step), kBadArgument (0 tokens), kContextFull,
  // kPoolExhausted.
  Result Reserve(SequenceId id, uint64_t num_tokens) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    Sequence& sequence = sequences_.Get(id);
    if (sequence.step.InStep()) return sequence.MidStep(table_);
    if (num_tokens == 0) {
      return Result::Refused(Status::kBadArgument, "Reserve of %llu tokens: at least one",
                             num_tokens);
    }
    const uint64_t end = sequence.step.HighEnd(), context = plan_.Runtime().context;
    if (num_tokens > context - end) {
      return Result::Refused(Status::kContextFull,
                             "Reserve of %llu tokens at %llu passes the context of %llu",
                             num_tokens, end, context);
    }
    uint64_t ring_growth = 0, blocks = 0;
    detail::PoolBudget<Layout>::StepCost(sequence, rings_, paged_, end, num_tokens, &ring_growth,
                                         &blocks);
    const Result room = budget_.CheckRoom(ring_growth, blocks, paged_);
    if (!room.ok()) return room;
    if (num_tokens > sequence.batch) {
      const Result grown = Resize(id, num_tokens);
      if (!grown.ok()) return grown;
    }
    if (paged_.Empty() || blocks == 0) return Status::kOk;
    const Result taken =
        budget_.TakeBlocks(&paged_, &sequence.blocks, end, num_tokens, detail::kNoLayer);
    KVRING_DASSERT(taken.ok());  // the room was checked above
    sequences_.EndViews(id, ViewEnd::kReserve);
    return taken;
  }

  // Returns the bytes Reserve(id, num_tokens) would take from the budget now (ring growth,
  // new blocks, a shared block's copy), without taking them: for admission decisions.
  // kUnknownSequence for an id not live.
  ValueResult<uint64_t> ReserveBytes(SequenceId id, uint64_t num_tokens) const {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    const Sequence& sequence = sequences_.Get(id);
    uint64_t ring_growth = 0, blocks = 0;
    detail::PoolBudget<Layout>::StepCost(sequence, rings_, paged_, sequence.step.HighEnd(),
                                         num_tokens, &ring_growth, &blocks);
    return detail::SaturatingAdd(ring_growth, detail::SaturatingMul(blocks, paged_.BlockBytes()));
  }

  // Appends rows k [num_tokens][kv_head][head_dim] and v [num_tokens][kv_head][v_head_dim]
  // (v null for MLA) to owning layer `layer` of `id` at `pos`, as KVCache::AppendF32 does
  // (formats, strides, the owners kept in step). A paged layer takes blocks as the append
  // reaches them, and first copies a block it shares with another sequence; a batch larger
  // than the sequence's rings hold grows them (Resize). Refusals change nothing and name the
  // layer and the values: those of KVCache::AppendF32, kUnknownSequence, and kPoolExhausted
  // when the budget has no block (or no room for grown rings) left: evict, preempt or wait.
  Result AppendF32(SequenceId id, size_t layer, uint64_t pos, const float* k, const float* v,
                   uint64_t num_tokens, RowStrides strides = RowStrides()) {
    return Append(id, layer, pos, k, v, num_tokens, strides);
  }
  // As AppendF32, from BF16 rows.
  Result AppendBF16(SequenceId id, size_t layer, uint64_t pos, const BF16* k, const BF16* v,
                    uint64_t num_tokens, RowStrides strides = RowStrides()) {
    return Append(id, layer, pos, k, v, num_tokens, strides);
  }

  // Discards the newest `num_tokens` positions of every owning layer of `id`, or of none, as
  // KVCache::Rollback does, and returns the blocks it no longer reaches (those no other
  // sequence holds become free).
  RollbackResult Rollback(SequenceId id, uint64_t num_tokens) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return RollbackResult(known, 0);
    Sequence& sequence = sequences_.Get(id);
    const uint64_t end = sequence.EndPos(table_);
    const Result allowed = sequence.CheckRollback(num_tokens, plan_.Runtime().rollback, table_);
    if (!allowed.ok()) return RollbackResult(allowed, end);
    sequence.Rollback(num_tokens, table_, &paged_);
    if (num_tokens != 0) sequences_.EndViews(id, ViewEnd::kRollback);
    return RollbackResult(Status::kOk, end - num_tokens);
  }

  // Returns the most newest positions Rollback(id, n) may discard now: the planned headroom,
  // capped by what is held and by each ring's window; 0 inside a step. kUnknownSequence for an
  // id not live. O(rings).
  ValueResult<uint64_t> RollbackLimit(SequenceId id) const {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    const Sequence& sequence = sequences_.Get(id);
    size_t bound = 0;
    if (sequence.step.InStep()) return uint64_t{0};
    return sequence.RollbackLimit(plan_.Runtime().rollback, table_, &bound);
  }

  // Abandons `id`'s unfinished step: every owning layer ahead of the lowest one goes back to
  // its end, the last position every owner reached (a step refused part way, for example by
  // kPoolExhausted, leaves the owners at different ends, where Rollback, Fork and shrinking
  // Resize are refused), or, for a step whose appends are all in but whose states are not, to
  // the step's start (as KVCache::AbandonStep). Releases the blocks past that end (Reserve
  // again before retrying the step); the rows before it stay bit-identical. Between steps it
  // only forgets the states written past the end (a step abandoned before its first append).
  // Returns the end after the call; kUnknownSequence for an id not live. O(layers x state
  // slots).
  RollbackResult AbandonStep(SequenceId id) {
    return AbandonStep(id, detail::StepRule::kInferStart);
  }
  // The same for a pass that began at `start`, as KVCache::AbandonStep(start): a step whose
  // appends and states are all in is abandoned too; kWrongPosition (nothing changed) unless
  // `start` began the current or last step, or is the end between steps.
  RollbackResult AbandonStep(SequenceId id, uint64_t start) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return RollbackResult(known, 0);
    Sequence& sequence = sequences_.Get(id);
    const uint64_t high_end = sequence.step.HighEnd(), now = sequence.EndPos(table_);
    uint64_t end = 0;
    const Result allowed =
        sequence.step.AbandonTarget(start, now, sequence.states.LastStepUnfinished(high_end), &end);
    if (!allowed.ok()) return RollbackResult(allowed, now);
    if (!sequence.step.InStep() && end == high_end) {
      sequence.states.ForgetAfter(end);  // a next step that appended nothing
      return RollbackResult(Status::kOk, end);
    }
    sequence.AbandonStep(&paged_, end);
    sequences_.EndViews(id, ViewEnd::kRollback);
    return RollbackResult(Status::kOk, end);
  }

  // Returns the recurrent state of `layer` in `id` after EndPos(id) positions, as
  // KVCache::State does; kUnknownSequence for an id not live.
  Expected<StateSlot> State(SequenceId id, size_t layer) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return NotLive(known);
    Sequence& sequence = sequences_.Get(id);
    return sequence.states.Current(layer, sequence.EndPos(table_));
  }
  // As KVCache::State(layer, num_positions): the state after `num_positions` positions, if
  // held.
  Expected<StateSlot> State(SequenceId id, size_t layer, uint64_t num_positions) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return NotLive(known);
    return sequences_.Get(id).states.Current(layer, num_positions);
  }
  // Returns the slot where the engine writes the state of `layer` in `id` after
  // `num_positions` positions, as KVCache::StateAfter does (until the next step begins: the
  // start of the current or last step < num_positions <= the context); kUnknownSequence for an
  // id not live.
  Expected<StateSlot> StateAfter(SequenceId id, size_t layer, uint64_t num_positions) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return NotLive(known);
    Sequence& sequence = sequences_.Get(id);
    return sequence.states.After(layer, num_positions, sequence.step, plan_.Runtime().context);
  }

  // Returns the position `id` has reached in every owning layer; kUnknownSequence for an id
  // not live. O(1) between steps, O(layers) inside one.
  ValueResult<uint64_t> EndPos(SequenceId id) const {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    return sequences_.Get(id).EndPos(table_);
  }
  // Returns the accounting now. O(1).
  PoolUsage Usage() const { return budget_.Usage(paged_, sequences_.NumLive()); }
  // Returns the bytes the pool has allocated: every block store (reserved at creation) and
  // every live sequence's rings and recurrent states.
  uint64_t AllocatedBytes() const {
    return budget_.RingBytes() + budget_.StateBytes() + paged_.AllocatedBytes();
  }

 private:
  friend class detail::PoolReads<Layout, KVPool>;  // storage/pool_reads.h: the read side
  friend struct detail::StateAccess;               // io/state_access.h: saves and loads it
  friend struct detail::PrefixAccess;              // sharing/prefix_cache.h: a checkpoint's blocks
  using Sequence = detail::PoolSequence<Layout>;

  // The Error of a state call for an id not live (`known`, the refusal), naming the field.
  static Error NotLive(const Result& known) {
    const std::string message = known.Message();  // "UnknownSequence: sequence ..."
    const size_t colon = message.find(": ");
    return Error{"id", "id: " + (colon == std::string::npos ? message : message.substr(colon + 2))};
  }

  template <typename T>
  Result Append(SequenceId id, size_t layer, uint64_t pos, const T* k, const T* v,
                uint64_t num_tokens, RowStrides strides) {
    const Result known = sequences_.Check(id);
    if (!known.ok()) return known;
    const Result writable = table_.CheckWritable(layer);
    if (!writable.ok()) return writable;
    Sequence& sequence = sequences_.Get(id);
    const detail::LayerEntry& entry = table_.Entry(layer);
    const bool is_paged = entry.residence == detail::Residence::kPaged;
    const KVShape shape =
        is_paged ? paged_.Spec(entry.storage).shape : rings_.Spec(entry.storage).shape;
    Result check = detail::CheckAppendRows(shape, pos, k, v, num_tokens, strides, layer);
    if (!check.ok()) return check;
    const Result at =
        sequence.CheckAppendAt(entry, layer, pos, num_tokens, plan_.Runtime().context, table_);
    if (!at.ok()) return at;
    if (!is_paged) {
      if (num_tokens > sequence.batch) {
        const Result grown = Resize(id, num_tokens);
        if (!grown.ok()) return grown;
      }
      const Result appended = sequence.rings[entry.storage].Append(pos, k, v, num_tokens, strides,
                                                                   /*may_grow=*/false, layer);
      if (appended.ok()) {
        sequence.step.RecordAppend(pos, num_tokens);
        sequences_.EndViews(id, ViewEnd::kAppend);
      }
      return appended;
    }
    const Result blocks = budget_.TakeBlocks(&paged_, &sequence.blocks, pos, num_tokens, layer);
    if (!blocks.ok()) return blocks;
    const uint64_t k_stride = strides.k != 0 ? strides.k : shape.KRowElements();
    const uint64_t v_stride = strides.v != 0 ? strides.v : shape.VRowElements();
    paged_.Write(entry.storage, sequence.blocks, pos, k, v, num_tokens, k_stride, v_stride);
    sequence.paged_end[entry.storage] += num_tokens;
    sequence.step.RecordAppend(pos, num_tokens);
    sequences_.EndViews(id, ViewEnd::kAppend);
    return Status::kOk;
  }

  LayerPlan plan_;
  PoolSpec spec_;
  detail::LayerTable table_;
  detail::RingSet<Layout> rings_;     // the ring owners (each sequence has its own rings)
  detail::BlockStore<Layout> paged_;  // the paged owners' blocks
  detail::SequenceTable<Sequence> sequences_;
  detail::PoolBudget<Layout> budget_;
};

}  // namespace kvring

#endif  // KVRING_STORAGE_KV_POOL_H_
