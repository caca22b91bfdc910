// kvring/storage/kv_pool.h: KVPool<Layout>, the K/V storage of many sequences of one model in
// one memory budget. Sliding and chunked owners keep a ring per sequence (the capacity rule,
// per sequence); global owners keep their positions in blocks of block_slots positions taken
// from one block store per layer as appends reach them, with one block table per sequence
// that every global owner shares. Forks share blocks by reference count and copy a shared
// block on the first write into it. Engines write each layer separately and attend through
// KVView (paged views for global layers). Does no attention.
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
#include "kvring/kv_view.h"
#include "kvring/layer_plan.h"
#include "kvring/status.h"
#include "kvring/storage/block_allocator.h"
#include "kvring/storage/layer_rows.h"
#include "kvring/storage/layer_storage.h"
#include "kvring/storage/layer_table.h"
#include "kvring/storage/step_rule.h"
#include "kvring/storage/storage_spec.h"
#include "kvring/visibility.h"

namespace kvring {

// A sequence of a KVPool. Ids of freed sequences are refused (kUnknownSequence), even after
// their slot serves a new sequence.
struct SequenceId {
  uint32_t index = std::numeric_limits<uint32_t>::max();
  uint32_t generation = 0;
};
inline bool operator==(SequenceId a, SequenceId b) {
  return a.index == b.index && a.generation == b.generation;
}
inline bool operator!=(SequenceId a, SequenceId b) { return !(a == b); }

// What a pool may hold.
struct PoolSpec {
  // Bytes of K/V (and int8 scales) the pool's rings and blocks in use never pass.
  uint64_t budget_bytes = 0;
  // Live sequences at most.
  uint32_t max_sequences = 0;
  // Positions per block of a global (paged) layer: a multiple of the layout's tile. 0: the
  // layout's DefaultBlockSlots(), or the context rounded up to a tile when that is less.
  uint64_t block_slots = 0;
};

// Returns the block size a pool of `Layout` uses unless told otherwise, as measured (paged
// decode at 32768 positions against flat storage, docs/benchmarks.md): flash 96 slots (three
// 32-slot tiles, 1.01 of flat: an odd number of tiles, so that a block's K rows of
// consecutive dims, 192 bytes apart, spread over the cache sets; 64 to 256 measure alike, 32
// and 512 are slower), tiled 256 (0.99 of flat; a tiled tile's K is contiguous, and shorter
// runs of tiles cut the hardware prefetcher's streams: 128 measured 1.08, 64 1.18, 16 1.72).
template <typename Layout>
constexpr uint64_t DefaultBlockSlots() {
  return Layout::kBackend == Backend::kFlash
             ? 3 * Layout::kTileSlots
             : (256 + Layout::kTileSlots - 1) / Layout::kTileSlots * Layout::kTileSlots;
}

// A pool's accounting at one moment (KVPool::Usage). bytes_in_use == ring_bytes +
// blocks_in_use * block_bytes <= budget_bytes at all times.
struct PoolUsage {
  uint64_t budget_bytes = 0;
  uint64_t bytes_in_use = 0;
  uint64_t ring_bytes = 0;   // every live sequence's rings
  uint64_t block_bytes = 0;  // one block of every global owner
  uint64_t num_blocks = 0;   // blocks the budget holds with no rings at all
  uint64_t blocks_in_use = 0;
  uint64_t free_blocks = 0;    // handed out only while the budget allows
  uint64_t shared_blocks = 0;  // held by more than one sequence
  uint64_t live_sequences = 0;
};

template <typename Layout>
class KVPool {
  static_assert(IsLayout<Layout>::value, "KVPool needs a kvring layout");

 public:
  KVPool() = default;
  KVPool(KVPool&&) noexcept = default;
  KVPool& operator=(KVPool&&) noexcept = default;

  // Returns the pool of `plan` under `spec`, or an Error naming the field: a plan for another
  // backend or tile, a budget of 0 or one that holds no sequence, max_sequences 0, a
  // block_slots that is not a multiple of the tile. Reserves each global owner's block store
  // for the blocks the budget could hold (zeroed with calloc: pages are committed as blocks
  // are first written); rings are allocated as sequences are added.
  static Expected<KVPool> Create(const LayerPlan& plan, const PoolSpec& spec) {
    const RuntimeSpec& runtime = plan.Runtime();
    const Error unfit = detail::ValidatePlanFor<Layout>(plan, "pool");
    if (!unfit.field.empty()) return unfit;
    if (spec.max_sequences == 0 || spec.max_sequences == std::numeric_limits<uint32_t>::max()) {
      return detail::FieldError("max_sequences", std::to_string(spec.max_sequences),
                                "is invalid: a pool holds from 1 to 2^32 - 2 sequences");
    }
    // The default, for a context shorter than it: the context rounded up to a tile.
    const uint64_t context_tiles =
        (runtime.context + Layout::kTileSlots - 1) / Layout::kTileSlots * Layout::kTileSlots;
    const uint64_t block_slots = spec.block_slots != 0
                                     ? spec.block_slots
                                     : std::min(DefaultBlockSlots<Layout>(), context_tiles);
    if (block_slots % Layout::kTileSlots != 0 ||
        block_slots > runtime.context + Layout::kTileSlots) {
      return detail::FieldError(
          "block_slots", std::to_string(block_slots),
          "is invalid: a block holds a positive multiple of the layout's tile of " +
              std::to_string(Layout::kTileSlots) + " positions, at most a tile past the context");
    }
    KVPool pool;
    pool.plan_ = plan;
    pool.spec_ = spec;
    pool.spec_.block_slots = block_slots;
    pool.table_ = detail::LayerTable::Of(plan, detail::Residence::kPaged);
    for (size_t layer : pool.table_.Owners()) {
      if (pool.IsPaged(layer)) {
        Paged paged;
        paged.layer = layer;
        paged.spec = StorageSpec::Of(plan, layer);
        paged.spec.shape.num_slots = block_slots;
        pool.block_bytes_ += block_slots * plan.Layer(layer).slot_bytes;
        pool.paged_.push_back(std::move(paged));
      } else {
        pool.ring_specs_.push_back(StorageSpec::Of(plan, layer));
      }
      Error error = detail::ValidateStorageSpec<Layout>(StorageSpec::Of(plan, layer));
      if (!error.field.empty()) {
        error.message = "layers[" + std::to_string(layer) + "]: " + error.message;
        return error;
      }
    }
    // The smallest sequence: rings for decode (batch 1) and one block.
    const uint64_t smallest = pool.RingBytesFor(1) + pool.block_bytes_;
    if (spec.budget_bytes < smallest) {
      return detail::FieldError("budget_bytes", std::to_string(spec.budget_bytes),
                                "cannot hold one sequence: its decode rings and one block take " +
                                    std::to_string(smallest) + " bytes");
    }
    uint64_t num_blocks = pool.block_bytes_ == 0 ? 0 : spec.budget_bytes / pool.block_bytes_;
    num_blocks = std::min<uint64_t>(num_blocks, std::numeric_limits<uint32_t>::max());
    for (Paged& paged : pool.paged_) {
      if (!paged.store.Allocate(paged.spec.shape, paged.spec.format, num_blocks)) {
        return detail::FieldError("budget_bytes", std::to_string(spec.budget_bytes),
                                  "could not be reserved: the block store of layers[" +
                                      std::to_string(paged.layer) + "] failed to allocate");
      }
    }
    pool.blocks_ = detail::BlockAllocator(static_cast<uint32_t>(num_blocks));
    pool.sequences_.resize(spec.max_sequences);
    for (uint32_t index = spec.max_sequences; index > 0; --index) {
      pool.free_sequences_.push_back(index - 1);
    }
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
  uint64_t RingBytesFor(uint64_t batch) const {
    uint64_t bytes = 0;
    const std::vector<size_t>& rings = table_.RingOwners();
    for (size_t i = 0; i < rings.size(); ++i) {
      bytes = detail::SaturatingAdd(
          bytes, detail::SaturatingMul(RingSlotsFor(i, batch), plan_.Layer(rings[i]).slot_bytes));
    }
    return bytes;
  }
  // Returns the bytes of the blocks a sequence of `positions` positions holds alone.
  uint64_t BlockBytesFor(uint64_t positions) const {
    return detail::SaturatingMul(BlocksFor(positions), block_bytes_);
  }

  // Adds an empty sequence whose rings hold batches of `batch` tokens (0: the plan's batch),
  // and sets *id. Refusals change nothing: kBadArgument (a null id, a batch past the context),
  // kPoolExhausted (max_sequences live, or the budget cannot hold the rings: the message says
  // the bytes). Allocates the rings.
  Result AddSequence(SequenceId* id, uint64_t batch = 0) {
    if (id == nullptr) return Result::Refused(Status::kBadArgument, "AddSequence: id is null");
    if (batch == 0) batch = plan_.Runtime().batch;
    if (batch > plan_.Runtime().context) {
      return Result::Refused(Status::kBadArgument,
                             "AddSequence: a batch of %llu tokens is past the context of %llu",
                             batch, plan_.Runtime().context);
    }
    if (free_sequences_.empty()) {
      return Result::Refused(Status::kPoolExhausted,
                             "AddSequence: all %llu sequences are live; free one first",
                             uint64_t{spec_.max_sequences});
    }
    const uint64_t ring_bytes = RingBytesFor(batch);
    const Result room = CheckRoom(ring_bytes, 0);
    if (!room.ok()) return room;
    std::vector<detail::LayerStorage<Layout>> rings;
    const Result made = MakeRings(batch, &rings);
    if (!made.ok()) return made;
    const uint32_t index = free_sequences_.back();
    free_sequences_.pop_back();
    Sequence& sequence = sequences_[index];
    sequence.live = true;
    sequence.batch = batch;
    sequence.rings = std::move(rings);
    sequence.ring_bytes = ring_bytes;
    sequence.paged_end.assign(paged_.size(), 0);
    sequence.blocks.clear();
    sequence.step = detail::StepRule(table_.Owners().size(), 0);
    ring_bytes_ += ring_bytes;
    ++live_;
    *id = SequenceId{index, sequence.generation};
    return Status::kOk;
  }

  // Frees `id`: its rings and its hold on every block (blocks no other sequence holds become
  // free). The id is refused afterwards. kUnknownSequence for an id not live.
  Result Free(SequenceId id) {
    const Result known = CheckSequence(id);
    if (!known.ok()) return known;
    Sequence& sequence = sequences_[id.index];
    ReleaseBlocksFrom(&sequence, 0);
    ring_bytes_ -= sequence.ring_bytes;
    const uint32_t generation = sequence.generation + 1;
    sequence = Sequence();
    sequence.generation = generation;
    free_sequences_.push_back(id.index);
    --live_;
    return Status::kOk;
  }

  // Forgets every position of `id` (property 4), keeping its rings; its blocks are released.
  Result Clear(SequenceId id) {
    const Result known = CheckSequence(id);
    if (!known.ok()) return known;
    Sequence& sequence = sequences_[id.index];
    for (auto& ring : sequence.rings) ring.Clear();
    std::fill(sequence.paged_end.begin(), sequence.paged_end.end(), 0);
    ReleaseBlocksFrom(&sequence, 0);
    sequence.step.Reset(0);
    return Status::kOk;
  }

  // Adds a sequence that holds what `id` holds and sets *fork: it shares every block of
  // `id` (reference counts) and copies its rings, so it costs the rings, plus later at most
  // one block (the first write into a shared, partly filled block copies it first). Writing
  // either never changes what the other reads (property 3). Refused while `id` is inside a
  // step (kWrongPosition), and as AddSequence.
  Result Fork(SequenceId id, SequenceId* fork) {
    const Result known = CheckSequence(id);
    if (!known.ok()) return known;
    if (fork == nullptr) return Result::Refused(Status::kBadArgument, "Fork: fork is null");
    if (sequences_[id.index].step.InStep()) return MidStep(sequences_[id.index]);
    if (free_sequences_.empty()) {
      return Result::Refused(Status::kPoolExhausted,
                             "Fork: all %llu sequences are live; free one first",
                             uint64_t{spec_.max_sequences});
    }
    const Sequence& source = sequences_[id.index];
    const Result room = CheckRoom(source.ring_bytes, 0);
    if (!room.ok()) return room;
    std::vector<detail::LayerStorage<Layout>> rings;
    rings.reserve(source.rings.size());
    for (const auto& ring : source.rings) {
      detail::LayerStorage<Layout> copy = ring.CopyWithSlots(ring.Index().NumSlots());
      if (copy.Failed()) {
        return Result::Refused(Status::kOutOfMemory, "Fork: %llu rings could not be allocated",
                               uint64_t{source.rings.size()});
      }
      rings.push_back(std::move(copy));
    }
    const uint32_t index = free_sequences_.back();
    free_sequences_.pop_back();
    Sequence& sequence = sequences_[index];
    const Sequence& from = sequences_[id.index];  // (sequences_ does not reallocate)
    sequence.live = true;
    sequence.batch = from.batch;
    sequence.rings = std::move(rings);
    sequence.ring_bytes = from.ring_bytes;
    sequence.paged_end = from.paged_end;
    sequence.blocks = from.blocks;
    sequence.step = from.step;
    for (uint32_t block : sequence.blocks) blocks_.Share(block);
    ring_bytes_ += sequence.ring_bytes;
    ++live_;
    *fork = SequenceId{index, sequence.generation};
    return Status::kOk;
  }

  // Resizes `id`'s rings to hold batches of `batch` tokens: larger for a prefill, 1 once it
  // decodes (window - 1 + max(1, rollback) positions per ring instead of window - 1 +
  // max(batch, rollback)). Keeps every position a later query or rollback may read; a
  // shrink drops older positions only. Refusals change nothing: kUnknownSequence,
  // kBadArgument (0, past the context), kWrongPosition (a shrink inside a step), kPoolExhausted
  // (the budget cannot hold the larger rings), kOutOfMemory. Allocates the new rings and copies.
  Result Resize(SequenceId id, uint64_t batch) {
    const Result known = CheckSequence(id);
    if (!known.ok()) return known;
    if (batch == 0 || batch > plan_.Runtime().context) {
      return Result::Refused(Status::kBadArgument,
                             "Resize to a batch of %llu tokens: from 1 to the context %llu", batch,
                             plan_.Runtime().context);
    }
    Sequence& sequence = sequences_[id.index];
    if (batch < sequence.batch) {
      // The step's queries still read the positions before it that a shrink would drop.
      if (sequence.step.InStep()) return MidStep(sequence);
    }
    const uint64_t ring_bytes = RingBytesFor(batch);
    if (ring_bytes > sequence.ring_bytes) {
      const Result room = CheckRoom(ring_bytes - sequence.ring_bytes, 0);
      if (!room.ok()) return room;
    }
    std::vector<detail::LayerStorage<Layout>> rings;
    rings.reserve(sequence.rings.size());
    for (size_t i = 0; i < sequence.rings.size(); ++i) {
      rings.push_back(sequence.rings[i].CopyWithSlots(RingSlotsFor(i, batch)));
      if (rings.back().Failed()) {
        return Result::Refused(Status::kOutOfMemory,
                               "Resize: the ring of layers[%llu] could not be allocated",
                               uint64_t{table_.RingOwners()[i]});
      }
    }
    ring_bytes_ = ring_bytes_ - sequence.ring_bytes + ring_bytes;
    sequence.ring_bytes = ring_bytes;
    sequence.rings = std::move(rings);
    sequence.batch = batch;
    return Status::kOk;
  }

  // Prepares `id` for a step of `num_tokens` tokens from EndPos(id): grows its rings if the
  // batch is larger than they hold (Resize) and gives its paged layers their own blocks for
  // the step's positions (taking new ones, copying a shared one). After kOk, appending those
  // tokens to every owning layer is not refused for the budget. Refusals change nothing:
  // kUnknownSequence, kWrongPosition (inside a step), kBadArgument (0 tokens), kContextFull,
  // kPoolExhausted.
  Result Reserve(SequenceId id, uint64_t num_tokens) {
    const Result known = CheckSequence(id);
    if (!known.ok()) return known;
    Sequence& sequence = sequences_[id.index];
    if (sequence.step.InStep()) return MidStep(sequence);
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
    StepCost(sequence, end, num_tokens, &ring_growth, &blocks);
    const Result room = CheckRoom(ring_growth, blocks);
    if (!room.ok()) return room;
    if (num_tokens > sequence.batch) {
      const Result grown = Resize(id, num_tokens);
      if (!grown.ok()) return grown;
    }
    if (paged_.empty()) return Status::kOk;
    const Result taken = TakeBlocks(&sequence, end, num_tokens, detail::kNoLayer);
    KVRING_DASSERT(taken.ok());  // the room was checked above
    return taken;
  }

  // Returns the bytes Reserve(id, num_tokens) would take from the budget now (ring growth,
  // new blocks, a shared block's copy), without taking them: for admission decisions. 0 for
  // an id not live.
  uint64_t ReserveBytes(SequenceId id, uint64_t num_tokens) const {
    if (!CheckSequence(id).ok()) return 0;
    const Sequence& sequence = sequences_[id.index];
    uint64_t ring_growth = 0, blocks = 0;
    StepCost(sequence, sequence.step.HighEnd(), num_tokens, &ring_growth, &blocks);
    return detail::SaturatingAdd(ring_growth, detail::SaturatingMul(blocks, block_bytes_));
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
    const Result known = CheckSequence(id);
    if (!known.ok()) return RollbackResult(known, 0);
    Sequence& sequence = sequences_[id.index];
    if (sequence.step.InStep()) return RollbackResult(MidStep(sequence), EndPos(id));
    const uint64_t end = sequence.step.HighEnd();
    // Paged layers hold every position; the planned headroom bounds them as it bounds rings.
    uint64_t limit = std::min(end, plan_.Runtime().rollback);
    const std::vector<size_t>& ring_layers = table_.RingOwners();
    size_t bound = paged_.empty() ? 0 : paged_[0].layer;
    for (size_t i = 0; i < sequence.rings.size(); ++i) {
      const uint64_t ring_limit = sequence.rings[i].Index().RollbackLimit();
      if (paged_.empty() && i == 0) bound = ring_layers[0];
      if (ring_limit < limit) {
        limit = ring_limit;
        bound = ring_layers[i];
      }
    }
    if (num_tokens > limit) {
      return RollbackResult(
          Result::Refused(Status::kRollbackTooFar,
                          "layers[%llu]: rollback of %llu positions, but at most %llu are allowed "
                          "now (planned headroom %llu; the next query's window stays held)",
                          uint64_t{bound}, num_tokens, limit, plan_.Runtime().rollback),
          end);
    }
    for (size_t i = 0; i < sequence.rings.size(); ++i) {
      const Result result = sequence.rings[i].Rollback(num_tokens, ring_layers[i]);
      KVRING_DASSERT(result.ok());
      (void)result;
    }
    for (uint64_t& paged_end : sequence.paged_end) paged_end -= num_tokens;
    ReleaseBlocksFrom(&sequence, BlocksFor(end - num_tokens));
    sequence.step.Reset(end - num_tokens);
    return RollbackResult(Status::kOk, end - num_tokens);
  }

  // Returns the position `id` has reached in every owning layer (0 for an unknown id). O(1)
  // between steps, O(layers) inside one.
  uint64_t EndPos(SequenceId id) const {
    if (!CheckSequence(id).ok()) return 0;
    const Sequence& sequence = sequences_[id.index];
    return sequence.step.InStep() ? StepOf(sequence).low_end : sequence.step.HighEnd();
  }
  // Live range of `layer` (its owner's) in `id`: [FirstPos, EndPos). Requires a live id.
  uint64_t FirstPos(SequenceId id, size_t layer) const {
    const Sequence& sequence = Live(id);
    const detail::LayerEntry& entry = table_.OwnerEntry(layer);
    return IsPaged(layer) ? 0 : sequence.rings[entry.storage].Index().FirstPos();
  }
  uint64_t EndPos(SequenceId id, size_t layer) const {
    return OwnerEnd(Live(id), Owner(layer));
  }
  Format GetFormat(size_t layer) const {
    const detail::LayerEntry& entry = table_.OwnerEntry(layer);
    return IsPaged(layer) ? paged_[entry.storage].spec.format : ring_specs_[entry.storage].format;
  }

  // Copies the stored BF16 row of `pos` of `layer` (its owner's) in `id`, as
  // KVCache::ReadRow does; kUnknownSequence for an id not live. Cost: one row.
  Result ReadRow(SequenceId id, size_t layer, uint64_t pos, BF16* k_out, BF16* v_out) const {
    detail::LayerRows<Layout> rows;
    uint64_t slot = 0;
    const Result result = Locate(id, layer, pos, Format::kBF16, k_out, &rows, &slot);
    if (result.ok()) rows.ReadRow(slot, k_out, v_out);
    return result;
  }
  // As KVCache::ReadRowInt8.
  Result ReadRowInt8(SequenceId id, size_t layer, uint64_t pos, int8_t* k_out, float* k_scales_out,
                     int8_t* v_out, float* v_scales_out) const {
    detail::LayerRows<Layout> rows;
    uint64_t slot = 0;
    Result result = Locate(id, layer, pos, Format::kInt8, k_out, &rows, &slot);
    if (result.ok()) result = detail::CheckScalesOut(k_scales_out, pos, layer);
    if (result.ok()) rows.ReadRowInt8(slot, k_out, k_scales_out, v_out, v_scales_out);
    return result;
  }
  // As KVCache::ReadRowF32.
  Result ReadRowF32(SequenceId id, size_t layer, uint64_t pos, float* k_out, float* v_out) const {
    detail::LayerRows<Layout> rows;
    uint64_t slot = 0;
    const Result known = table_.CheckLayer(layer);  // (before GetFormat)
    if (!known.ok()) return known;
    const Result result = Locate(id, layer, pos, GetFormat(layer), k_out, &rows, &slot);
    if (result.ok()) rows.ReadRowF32(slot, k_out, v_out);
    return result;
  }

  // Returns the view `layer` of `id` attends over: a ring's, or a paged layer's blocks
  // (KVView::blocks), under the layer's own visibility. Valid until the next write to `id`
  // (an append, rollback, resize, clear or free) or to a sequence sharing its blocks.
  // Requires a live id (checked).
  KVView<Layout> View(SequenceId id, size_t layer) const {
    const Sequence& sequence = Live(id);
    const detail::LayerEntry& entry = table_.OwnerEntry(layer);
    const Visibility visibility = table_.Entry(layer).visibility;
    if (!IsPaged(layer)) return sequence.rings[entry.storage].View(visibility);
    KVView<Layout> view;
    paged_[entry.storage].store.Rows(0).FillView(&view);
    view.first_pos = 0;
    view.end_pos = sequence.paged_end[entry.storage];
    view.visibility = visibility;
    view.blocks = sequence.blocks.empty() ? nullptr : sequence.blocks.data();
    if (view.blocks == nullptr) view.end_pos = 0;
    return view;
  }

  // Returns the accounting now. O(1).
  PoolUsage Usage() const {
    PoolUsage usage;
    usage.budget_bytes = spec_.budget_bytes;
    usage.ring_bytes = ring_bytes_;
    usage.block_bytes = block_bytes_;
    usage.num_blocks = blocks_.NumBlocks();
    usage.blocks_in_use = blocks_.NumInUse();
    usage.free_blocks = blocks_.NumFree();
    usage.shared_blocks = blocks_.NumShared();
    usage.bytes_in_use = ring_bytes_ + usage.blocks_in_use * block_bytes_;
    usage.live_sequences = live_;
    return usage;
  }
  // Returns the blocks `id`'s table holds (shared ones included); 0 for an unknown id.
  uint64_t BlocksOf(SequenceId id) const {
    return CheckSequence(id).ok() ? sequences_[id.index].blocks.size() : 0;
  }
  // Returns the bytes `id`'s rings take now; 0 for an unknown id.
  uint64_t RingBytesOf(SequenceId id) const {
    return CheckSequence(id).ok() ? sequences_[id.index].ring_bytes : 0;
  }
  // Returns the reference count of block `block` (0: free), for tests and diagnostics.
  uint32_t BlockRefCount(uint32_t block) const { return blocks_.RefCount(block); }
  // Returns the bytes the pool has allocated: every block store (reserved at creation) and
  // every live sequence's rings.
  uint64_t AllocatedBytes() const {
    uint64_t bytes = ring_bytes_;
    for (const Paged& paged : paged_) bytes += paged.store.AllocatedBytes();
    return bytes;
  }

 private:
  struct Paged {
    size_t layer = 0;
    StorageSpec spec;  // shape.num_slots: one block's
    detail::LayerBuffers<Layout> store;
  };
  struct Sequence {
    bool live = false;
    uint32_t generation = 0;
    uint64_t batch = 0;
    uint64_t ring_bytes = 0;
    std::vector<detail::LayerStorage<Layout>> rings;  // per ring owner (RingOwners() order)
    std::vector<uint64_t> paged_end;                  // per paged owner
    std::vector<uint32_t> blocks;                     // block i holds [i, i + 1) * block_slots
    detail::StepRule step;
  };

  uint64_t RingSlotsFor(size_t ring, uint64_t batch) const {
    RuntimeSpec runtime = plan_.Runtime();
    runtime.batch = batch;
    const LayerInfo& info = plan_.Layer(table_.RingOwners()[ring]);
    uint64_t num_slots = 0;
    const uint64_t capacity = LayerPlan::CapacityOf(info.span, runtime.context, runtime);
    if (!Layout::NumSlotsFor(capacity, &num_slots)) return std::numeric_limits<uint64_t>::max();
    return num_slots;
  }
  uint64_t BlocksFor(uint64_t positions) const {
    return (positions + spec_.block_slots - 1) / spec_.block_slots;
  }

  Result MakeRings(uint64_t batch, std::vector<detail::LayerStorage<Layout>>* rings) const {
    rings->reserve(ring_specs_.size());
    for (size_t i = 0; i < ring_specs_.size(); ++i) {
      StorageSpec spec = ring_specs_[i];
      spec.shape.num_slots = RingSlotsFor(i, batch);
      detail::LayerStorage<Layout> ring;
      if (!ring.Allocate(spec)) {
        return Result::Refused(Status::kOutOfMemory,
                               "layers[%llu]: a ring of %llu slots could not be allocated",
                               uint64_t{table_.RingOwners()[i]}, spec.shape.num_slots);
      }
      rings->push_back(std::move(ring));
    }
    return Status::kOk;
  }

  // kPoolExhausted unless the budget holds `ring_bytes` more ring bytes and `blocks` more
  // blocks (and the store has the blocks).
  Result CheckRoom(uint64_t ring_bytes, uint64_t blocks) const {
    const uint64_t in_use = ring_bytes_ + blocks_.NumInUse() * block_bytes_;
    const uint64_t wanted = detail::SaturatingAdd(ring_bytes, blocks * block_bytes_);
    if (blocks > blocks_.NumFree() || wanted > spec_.budget_bytes - in_use) {
      return Result::Refused(Status::kPoolExhausted,
                             "the budget of %llu bytes has %llu in use and cannot give %llu more; "
                             "free, preempt or wait for a sequence",
                             spec_.budget_bytes, in_use, wanted);
    }
    return Status::kOk;
  }

  Result CheckSequence(SequenceId id) const {
    if (id.index >= sequences_.size() || !sequences_[id.index].live ||
        sequences_[id.index].generation != id.generation) {
      return Result::Refused(Status::kUnknownSequence,
                             "sequence %llu (generation %llu) is not live in this pool",
                             uint64_t{id.index}, uint64_t{id.generation});
    }
    return Status::kOk;
  }
  const Sequence& Live(SequenceId id) const {
    KVRING_CHECK(CheckSequence(id).ok());
    return sequences_[id.index];
  }

  // Returns the end of owning layer `owner` in `sequence`.
  uint64_t OwnerEnd(const Sequence& sequence, size_t owner) const {
    const detail::LayerEntry& entry = table_.Entry(owner);
    return entry.residence == detail::Residence::kPaged
               ? sequence.paged_end[entry.storage]
               : sequence.rings[entry.storage].Index().EndPos();
  }
  // The owners of `sequence` at the lowest and highest ends. O(layers).
  detail::StepEnds StepOf(const Sequence& sequence) const {
    return detail::ScanStep(table_.Owners(),
                            [&](size_t owner) { return OwnerEnd(sequence, owner); });
  }
  Result MidStep(const Sequence& sequence) const {
    return detail::StepRule::MidStep(StepOf(sequence),
                                     "layers[%llu] is at %llu and layers[%llu] at %llu; append "
                                     "every owning layer to the same position first");
  }

  // Drops `sequence`'s hold on its blocks from table index `first` on.
  void ReleaseBlocksFrom(Sequence* sequence, uint64_t first) {
    while (sequence->blocks.size() > first) {
      blocks_.Release(sequence->blocks.back());
      sequence->blocks.pop_back();
    }
  }

  // Checks a read of `pos` of `layer` in `id` as `read` (kBF16 or kInt8 rows; the layer's own
  // format for f32) into k_out, and sets *rows and *slot to where the row lives.
  Result Locate(SequenceId id, size_t layer, uint64_t pos, Format read, const void* k_out,
                detail::LayerRows<Layout>* rows, uint64_t* slot) const {
    const Result known = CheckSequence(id);
    if (!known.ok()) return known;
    const Result in_model = table_.CheckLayer(layer);
    if (!in_model.ok()) return in_model;
    const Sequence& sequence = sequences_[id.index];
    const detail::LayerEntry& entry = table_.OwnerEntry(layer);
    const Result format = detail::CheckReadFormat(GetFormat(layer), read, pos, layer);
    if (!format.ok()) return format;
    const uint64_t first = FirstPos(id, layer), end = EndPos(id, layer);
    if (pos < first || pos >= end) {
      return Result::Refused(Status::kNotLive,
                             "layers[%llu]: read of %llu, but the held positions are [%llu, %llu)",
                             uint64_t{layer}, pos, first, end);
    }
    if (k_out == nullptr) {
      return Result::Refused(Status::kBadArgument, "layers[%llu]: read of %llu: k_out is null",
                             uint64_t{layer}, pos);
    }
    if (IsPaged(layer)) {
      const uint64_t block_slots = spec_.block_slots;
      *rows = paged_[entry.storage].store.Rows(sequence.blocks[pos / block_slots]);
      *slot = pos % block_slots;
    } else {
      const detail::LayerStorage<Layout>& ring = sequence.rings[entry.storage];
      *rows = ring.Rows();
      *slot = ring.Index().SlotOf(pos);
    }
    return Status::kOk;
  }

  // Sets what a step of `num_tokens` from `end` costs `sequence`: the bytes its rings grow by
  // and the blocks it takes (new ones, and copies of shared ones it writes into).
  void StepCost(const Sequence& sequence, uint64_t end, uint64_t num_tokens, uint64_t* ring_growth,
                uint64_t* blocks) const {
    *ring_growth = 0;
    if (num_tokens > sequence.batch) {
      const uint64_t grown = RingBytesFor(num_tokens);
      if (grown > sequence.ring_bytes) *ring_growth = grown - sequence.ring_bytes;
    }
    *blocks = paged_.empty() ? 0 : BlocksToTake(sequence, end, num_tokens);
  }
  // Returns the blocks writing [pos, pos + num_tokens) takes: those the table lacks, and a
  // copy of each shared one it writes into (only a table's last block can be partly filled,
  // so at most one).
  uint64_t BlocksToTake(const Sequence& sequence, uint64_t pos, uint64_t num_tokens) const {
    const uint64_t needed = BlocksFor(pos + num_tokens);
    const uint64_t held = sequence.blocks.size();
    uint64_t blocks = needed > held ? needed - held : 0;
    for (uint64_t i = pos / spec_.block_slots; i < std::min(needed, held); ++i) {
      blocks += blocks_.RefCount(sequence.blocks[i]) > 1;
    }
    return blocks;
  }

  // Makes `sequence`'s table cover [pos, pos + num_tokens) with blocks of its own: takes the
  // blocks it lacks and copies a block it shares with another sequence (only the last block
  // of a table can be partly filled, so at most one). kPoolExhausted, changing nothing, when
  // the budget cannot give them; the refusal names `layer` (kNoLayer: none).
  Result TakeBlocks(Sequence* sequence, uint64_t pos, uint64_t num_tokens, uint64_t layer) {
    const uint64_t blocks = BlocksToTake(*sequence, pos, num_tokens);
    if (blocks == 0) return Status::kOk;
    if (!CheckRoom(0, blocks).ok()) {
      return KVRING_DETAIL_REFUSED(layer, Status::kPoolExhausted,
                                   "%llu tokens at %llu need %llu more blocks than the budget "
                                   "can give; free, preempt or wait",
                                   num_tokens, pos, blocks);
    }
    const uint64_t needed = BlocksFor(pos + num_tokens);
    const uint64_t first = pos / spec_.block_slots;
    const uint64_t last = std::min<uint64_t>(needed, sequence->blocks.size());
    for (uint64_t i = first; i < last; ++i) {
      if (blocks_.RefCount(sequence->blocks[i]) > 1) CopyOnWrite(sequence, i);
    }
    while (sequence->blocks.size() < needed) sequence->blocks.push_back(blocks_.Take());
    return Status::kOk;
  }

  // Gives `sequence` its own copy of table entry `index` (a block another sequence holds):
  // takes a free block and copies every paged layer's rows of the shared one into it.
  void CopyOnWrite(Sequence* sequence, uint64_t index) {
    const uint32_t shared = sequence->blocks[index];
    const uint32_t own = blocks_.Take();
    for (const Paged& paged : paged_) {
      paged.store.Rows(shared).CopySlotsTo(0, paged.store.Rows(own), 0, spec_.block_slots);
    }
    blocks_.Release(shared);
    sequence->blocks[index] = own;
  }

  template <typename T>
  Result Append(SequenceId id, size_t layer, uint64_t pos, const T* k, const T* v,
                uint64_t num_tokens, RowStrides strides) {
    const Result known = CheckSequence(id);
    if (!known.ok()) return known;
    const Result writable = table_.CheckWritable(layer);
    if (!writable.ok()) return writable;
    Sequence& sequence = sequences_[id.index];
    const detail::LayerEntry& entry = table_.Entry(layer);
    const bool is_paged = entry.residence == detail::Residence::kPaged;
    const KVShape shape =
        is_paged ? paged_[entry.storage].spec.shape : ring_specs_[entry.storage].shape;
    Result check = detail::CheckAppendRows(shape, pos, k, v, num_tokens, strides, layer);
    if (!check.ok()) return check;
    const uint64_t end = OwnerEnd(sequence, layer);
    if (pos != end) {
      return Result::Refused(Status::kWrongPosition,
                             "layers[%llu]: append at %llu, but its next position is %llu",
                             uint64_t{layer}, pos, end);
    }
    const uint64_t context = plan_.Runtime().context;
    if (num_tokens > context - pos) {
      return Result::Refused(Status::kContextFull,
                             "layers[%llu]: append at %llu of %llu tokens passes the context of "
                             "%llu positions",
                             uint64_t{layer}, pos, num_tokens, context);
    }
    const Result in_step =
        sequence.step.CheckAppend(layer, pos, num_tokens, [&] { return StepOf(sequence); });
    if (!in_step.ok()) return in_step;
    if (!is_paged) {
      if (num_tokens > sequence.batch) {
        const Result grown = Resize(id, num_tokens);
        if (!grown.ok()) return grown;
      }
      const Result appended = sequence.rings[entry.storage].Append(pos, k, v, num_tokens, strides,
                                                                   /*may_grow=*/false, layer);
      if (appended.ok()) sequence.step.RecordAppend(pos, num_tokens);
      return appended;
    }
    const Result blocks = TakeBlocks(&sequence, pos, num_tokens, layer);
    if (!blocks.ok()) return blocks;
    const uint64_t block_slots = spec_.block_slots;
    const Paged& paged = paged_[entry.storage];
    const uint64_t k_stride = strides.k != 0 ? strides.k : shape.KRowElements();
    const uint64_t v_stride = strides.v != 0 ? strides.v : shape.VRowElements();
    for (uint64_t i = 0; i < num_tokens;) {
      const uint64_t at = pos + i;
      const uint64_t slot = at % block_slots;
      const uint64_t len = std::min(num_tokens - i, block_slots - slot);
      paged.store.Rows(sequence.blocks[at / block_slots])
          .Write(slot, k + i * k_stride, v != nullptr ? v + i * v_stride : v, k_stride, v_stride,
                 len, /*stream=*/false);
      i += len;
    }
    sequence.paged_end[entry.storage] += num_tokens;
    sequence.step.RecordAppend(pos, num_tokens);
    return Status::kOk;
  }

  LayerPlan plan_;
  PoolSpec spec_;
  detail::LayerTable table_;
  std::vector<StorageSpec> ring_specs_;  // per ring owner
  std::vector<Paged> paged_;             // per paged owner
  uint64_t block_bytes_ = 0;             // one block of every paged owner
  detail::BlockAllocator blocks_;
  std::vector<Sequence> sequences_;
  std::vector<uint32_t> free_sequences_;
  uint64_t ring_bytes_ = 0;
  uint64_t live_ = 0;
};

}  // namespace kvring

#endif  // KVRING_STORAGE_KV_POOL_H_
