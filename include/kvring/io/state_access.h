// kvring/io/state_access.h: what the state format reads and writes of a KVCache and of a
// KVPool sequence (a friend of both): which positions each owning layer holds, where they
// live, and loading a checked state into them. Internal; io/state_io.h is the API.
#ifndef KVRING_IO_STATE_ACCESS_H_
#define KVRING_IO_STATE_ACCESS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "kvring/index/positions.h"
#include "kvring/io/byte_io.h"
#include "kvring/io/state_check.h"
#include "kvring/io/state_recurrent.h"
#include "kvring/io/state_rows.h"
#include "kvring/io/state_stream.h"
#include "kvring/io/state_threads.h"
#include "kvring/kv_view.h"
#include "kvring/status.h"
#include "kvring/storage/kv_cache.h"
#include "kvring/storage/kv_pool.h"
#include "kvring/storage/layer_storage.h"
#include "kvring/storage/layer_table.h"
#include "kvring/storage/row_pieces.h"

namespace kvring {
namespace detail {

struct StateAccess {
  // The segment of `pos` in a ring or flat layer: its slot up to where the buffer wraps.
  template <typename Layout>
  static RowSegment<Layout> RingSegment(const LayerStorage<Layout>& storage, uint64_t pos) {
    const uint64_t num_slots = storage.Index().NumSlots();
    return RowSegment<Layout>{storage.Rows(), pos % num_slots, num_slots - pos % num_slots};
  }
  template <typename Layout>
  static StateTarget TargetOf(const LayerStorage<Layout>& storage) {
    return StateTarget{storage.GetLayout().Shape(), storage.GetFormat(), storage.Index().Keep(),
                       !storage.Index().Wraps()};
  }

  // ---- KVCache ----

  // Returns held(layer): the {first, end} positions owning layer `layer` of `cache` holds.
  template <typename Layout>
  static auto HeldBy(const KVCache<Layout>& cache) {
    return [&cache](size_t layer) {
      const RingIndex& index = cache.StorageOf(layer).Index();
      return std::make_pair(index.FirstPos(), index.EndPos());
    };
  }

  // Returns locate_of(layer): owning layer `layer`'s locate(pos) (RingSegment of its storage).
  template <typename Layout>
  static auto LocatorsOf(const KVCache<Layout>& cache) {
    return [&cache](size_t layer) {
      const LayerStorage<Layout>* storage = &cache.StorageOf(layer);
      return [storage](uint64_t pos) { return RingSegment(*storage, pos); };
    };
  }

  template <typename Layout>
  static Result Save(const KVCache<Layout>& cache, const std::string& model_id, ByteSink* sink,
                     const TaskRunner& runner) {
    if (cache.step_.InStep()) {
      return StepRule::MidStep(cache.StepOf(),
                               "state: layers[%llu] is at %llu and layers[%llu] at %llu; append "
                               "every owning layer to the same position before saving");
    }
    const uint64_t end = cache.step_.HighEnd();
    const Result states = CheckStatesHeld(cache.states_, end);
    if (!states.ok()) return states;
    return WriteWithStates<Layout>(runner, cache.Plan(), model_id, end, HeldBy(cache),
                                   LocatorsOf(cache), cache.states_, sink);
  }

  // Writes a state (WriteStateOn: the header, the layers' rows) and then the state sections
  // of `states` after `end` (none without recurrent states): a cache's or a pool sequence's.
  template <typename Layout, typename Held, typename LocateOf>
  static Result WriteWithStates(const TaskRunner& runner, const LayerPlan& plan,
                                const std::string& model_id, uint64_t end, const Held& held,
                                const LocateOf& locate_of, const RecurrentStates& states,
                                ByteSink* sink) {
    const Result written = WriteStateOn<Layout>(runner, plan, model_id, end, held, locate_of, sink);
    if (!written.ok() || states.Empty()) return written;
    return WriteRecurrentSections(plan, end, states, sink);
  }

  template <typename Layout>
  static Result Load(ByteSource* source, const std::string& model_id, KVCache<Layout>* cache,
                     const TaskRunner& runner) {
    if (source == nullptr || cache == nullptr) {
      return Result::Refused(Status::kBadArgument, "state: the source or the cache is null");
    }
    if (cache->NumLayers() == 0) {
      return Result::Refused(Status::kBadArgument, "state: the cache is empty (default-made)");
    }
    const auto target_of = [&](size_t layer) { return TargetOf(cache->StorageOf(layer)); };
    StateReader reader(source, runner);
    uint64_t end = 0;
    Result result = CheckState(&reader, model_id, cache->Plan(), target_of, &end);
    if (!result.ok()) return result;
    const auto begin = [&](size_t layer, uint64_t first, uint64_t layer_end) {
      cache->StorageOf(layer).RestoreRange(first, layer_end);
    };
    result = RestoreStateRanges(&reader, cache->Plan(), begin);
    if (result.ok()) {
      result = ReadStateRowsOn<Layout>(&reader, cache->Plan(), target_of, HeldBy(*cache),
                                       LocatorsOf(*cache));
    }
    if (result.ok()) result = ReadRecurrentStates(&reader, cache->Plan(), end, &cache->states_);
    // The state was read whole and checked: only a source failing now stops the copy, and the
    // cache is then cleared rather than left half loaded.
    if (!result.ok()) {
      cache->Clear();
      return result;
    }
    cache->step_.Reset(end);
    cache->EndViews(ViewEnd::kLoad);
    return Status::kOk;
  }

  template <typename Layout>
  static uint64_t Bytes(const KVCache<Layout>& cache, const std::string& model_id) {
    uint64_t bytes = 0;
    if (cache.step_.InStep() || !CheckStatesHeld(cache.states_, cache.step_.HighEnd()).ok() ||
        !StateBytesOf(cache.Plan(), model_id.size(), HeldBy(cache), &bytes)) {
      return 0;
    }
    return bytes;
  }

  // ---- KVPool sequences ----

  // Returns held(layer) for `sequence` of `pool`: a paged owner holds [0, its end).
  template <typename Layout, typename Sequence>
  static auto HeldBy(const KVPool<Layout>& pool, const Sequence& sequence) {
    return [&pool, &sequence](size_t layer) {
      const LayerEntry& entry = pool.table_.Entry(layer);
      const uint64_t first = entry.residence == Residence::kPaged
                                 ? 0
                                 : sequence.rings[entry.storage].Index().FirstPos();
      return std::make_pair(first, sequence.OwnerEnd(entry));
    };
  }

  // Returns locate_of(layer) for `sequence` of `pool`: owning layer `layer`'s locate(pos),
  // its ring's segment or its block's.
  template <typename Layout, typename Sequence>
  static auto LocatorsOf(const KVPool<Layout>& pool, const Sequence& sequence) {
    return [&pool, &sequence](size_t layer) {
      const LayerEntry entry = pool.table_.Entry(layer);
      return [&pool, &sequence, entry](uint64_t pos) {
        if (entry.residence != Residence::kPaged) {
          return RingSegment(sequence.rings[entry.storage], pos);
        }
        RowSegment<Layout> segment;
        segment.rows = pool.paged_.RowsOf(entry.storage, sequence.blocks, pos, &segment.slot);
        segment.run = pool.spec_.block_slots - segment.slot;
        return segment;
      };
    };
  }

  // Returns target_of(layer) for `sequence` of `pool`: what CheckState needs of each owner.
  template <typename Layout, typename Sequence>
  static auto PoolTargets(const KVPool<Layout>& pool, const Sequence& sequence) {
    return [&pool, &sequence](size_t layer) {
      const LayerEntry& entry = pool.table_.Entry(layer);
      if (entry.residence != Residence::kPaged) return TargetOf(sequence.rings[entry.storage]);
      const StorageSpec& spec = pool.paged_.Spec(entry.storage);
      return StateTarget{spec.shape, spec.format, spec.keep, true};
    };
  }
  template <typename Layout>
  static bool IsLive(const KVPool<Layout>& pool, SequenceId id) {
    return pool.sequences_.Check(id).ok();
  }
  // Returns the stamp of sequence `id`'s views now: Check() refuses once a call changed it.
  template <typename Layout>
  static ViewStamp StampOf(const KVPool<Layout>& pool, SequenceId id) {
    return ViewStamp::Of(pool.sequences_.Epoch(id), 0, id.index, id.generation);
  }

  // Returns kOk if sequence `id` of `pool` may be saved now: live (kUnknownSequence), between
  // steps and holding its recurrent states after the end (kWrongPosition).
  template <typename Layout>
  static Result CheckSavable(const KVPool<Layout>& pool, SequenceId id) {
    const Result known = pool.sequences_.Check(id);
    if (!known.ok()) return known;
    const auto& sequence = pool.sequences_.Get(id);
    if (sequence.step.InStep()) return sequence.MidStep(pool.table_);
    return CheckStatesHeld(sequence.states, sequence.step.HighEnd());
  }
  // CheckSavable, and CheckStateWrite's rules for `model_id` and `sink` (which sets
  // *state_bytes, when given, to the state's bytes).
  template <typename Layout>
  static Result CheckSave(const KVPool<Layout>& pool, SequenceId id, const std::string& model_id,
                          const ByteSink* sink, uint64_t* state_bytes = nullptr) {
    const Result savable = CheckSavable(pool, id);
    if (!savable.ok()) return savable;
    return CheckStateWrite(pool.Plan(), model_id, HeldBy(pool, pool.sequences_.Get(id)), sink,
                           state_bytes);
  }
  // Writes the header of sequence `id` (CheckSave allowed it) to `out`.
  template <typename Layout>
  static void SaveHeader(const KVPool<Layout>& pool, SequenceId id, const std::string& model_id,
                         StateWriter* out) {
    WriteStateHeader(pool.Plan(), model_id, pool.sequences_.Get(id).step.HighEnd(), out);
  }
  // Writes the next step of sequence `id`'s rows (WriteStateStep); false when none is left.
  template <typename Layout>
  static bool SaveStep(const KVPool<Layout>& pool, SequenceId id, StateCursor* cursor,
                       StateWriter* out) {
    const auto& sequence = pool.sequences_.Get(id);
    return WriteStateStep<Layout>(pool.Plan(), HeldBy(pool, sequence), LocatorsOf(pool, sequence),
                                  cursor, out);
  }

  // Writes the state sections of sequence `id` (CheckSave allowed it) to `out`: after its
  // rows, before the writer finishes.
  template <typename Layout>
  static void SaveStates(const KVPool<Layout>& pool, SequenceId id, StateWriter* out) {
    const auto& sequence = pool.sequences_.Get(id);
    PutRecurrentSections(pool.Plan(), sequence.step.HighEnd(), sequence.states, out);
  }

  template <typename Layout>
  static Result Save(const KVPool<Layout>& pool, SequenceId id, const std::string& model_id,
                     ByteSink* sink, const TaskRunner& runner) {
    const Result savable = CheckSavable(pool, id);
    if (!savable.ok()) return savable;
    const auto& sequence = pool.sequences_.Get(id);
    return WriteWithStates<Layout>(runner, pool.Plan(), model_id, sequence.step.HighEnd(),
                                   HeldBy(pool, sequence), LocatorsOf(pool, sequence),
                                   sequence.states, sink);
  }

  // Checks the state `reader` reads against sequence `id` of `pool` (every refusal changes
  // nothing), then empties the sequence, gives it the state's blocks and ranges and ends its
  // views; sets *end to the state's end. The rows follow in LoadSteps.
  template <typename Layout>
  static Result LoadBegin(StateReader* reader, const std::string& model_id, KVPool<Layout>* pool,
                          SequenceId id, uint64_t* end) {
    const Result known = pool->sequences_.Check(id);
    if (!known.ok()) return known;
    auto& sequence = pool->sequences_.Get(id);
    Result result = CheckState(reader, model_id, pool->Plan(), PoolTargets(*pool, sequence), end);
    if (!result.ok()) return result;
    result = TakeStateBlocks(pool, &sequence, *end);
    if (!result.ok()) return result;
    const auto begin = [&](size_t layer, uint64_t first, uint64_t layer_end) {
      const LayerEntry& entry = pool->table_.Entry(layer);
      if (entry.residence == Residence::kPaged) {
        sequence.paged_end[entry.storage] = layer_end;  // from 0: CheckState allowed no other
      } else {
        sequence.rings[entry.storage].RestoreRange(first, layer_end);
      }
    };
    result = RestoreStateRanges(reader, pool->Plan(), begin);
    if (!result.ok()) {
      LoadFailed(pool, id);
      return result;
    }
    pool->sequences_.EndViews(id, ViewEnd::kLoad);
    return Status::kOk;
  }
  // Reads the next step of the rows (ReadStateStep) into sequence `id`; sets *more to false
  // when none is left. A failing source leaves the sequence cleared.
  template <typename Layout>
  static Result LoadStep(StateReader* reader, KVPool<Layout>* pool, SequenceId id,
                         StateCursor* cursor, bool* more) {
    const auto& sequence = pool->sequences_.Get(id);
    const Result read =
        ReadStateStep<Layout>(reader, pool->Plan(), PoolTargets(*pool, sequence),
                              HeldBy(*pool, sequence), LocatorsOf(*pool, sequence), cursor, more);
    if (!read.ok()) LoadFailed(pool, id);
    return read;
  }
  // Ends a load whose rows are all read: reads the recurrent states after `end`, and the
  // sequence is at `end`; its views end again. A failing source leaves the sequence cleared.
  template <typename Layout>
  static Result LoadDone(StateReader* reader, KVPool<Layout>* pool, SequenceId id, uint64_t end) {
    auto& sequence = pool->sequences_.Get(id);
    const Result states = ReadRecurrentStates(reader, pool->Plan(), end, &sequence.states);
    if (!states.ok()) {
      LoadFailed(pool, id);
      return states;
    }
    sequence.step.Reset(end);
    pool->sequences_.EndViews(id, ViewEnd::kLoad);
    return Status::kOk;
  }
  // Clears sequence `id` after a load that could not finish (never left half loaded).
  template <typename Layout>
  static void LoadFailed(KVPool<Layout>* pool, SequenceId id) {
    pool->sequences_.Get(id).Clear(&pool->paged_);
    pool->sequences_.EndViews(id, ViewEnd::kClear);
  }

  template <typename Layout>
  static Result Load(ByteSource* source, const std::string& model_id, KVPool<Layout>* pool,
                     SequenceId id, const TaskRunner& runner) {
    if (source == nullptr || pool == nullptr) {
      return Result::Refused(Status::kBadArgument, "state: the source or the pool is null");
    }
    StateReader reader(source, runner);
    uint64_t end = 0;
    Result result = LoadBegin(&reader, model_id, pool, id, &end);
    if (!result.ok()) return result;
    const auto& sequence = pool->sequences_.Get(id);
    result = ReadStateRowsOn<Layout>(&reader, pool->Plan(), PoolTargets(*pool, sequence),
                                     HeldBy(*pool, sequence), LocatorsOf(*pool, sequence));
    if (!result.ok()) {
      LoadFailed(pool, id);
      return result;
    }
    return LoadDone(&reader, pool, id, end);
  }

  // Empties `sequence` and gives its paged layers the blocks of [0, end): the blocks it holds
  // alone come back to the pool first. kPoolExhausted, changing nothing, if the budget cannot
  // give the rest.
  template <typename Layout, typename Sequence>
  static Result TakeStateBlocks(KVPool<Layout>* pool, Sequence* sequence, uint64_t end) {
    const uint64_t needed = pool->paged_.Empty() ? 0 : BlocksFor(end, pool->spec_.block_slots);
    uint64_t own = 0;
    for (uint32_t block : sequence->blocks.Blocks()) own += pool->BlockRefCount(block) == 1;
    if (needed > own && !pool->budget_.CheckRoom(0, needed - own, pool->paged_).ok()) {
      return Result::Refused(Status::kPoolExhausted,
                             "state: its %llu positions need %llu blocks; the sequence holds %llu "
                             "alone and the budget cannot give the rest: free, preempt or wait",
                             end, needed, own);
    }
    sequence->Clear(&pool->paged_);
    if (needed != 0) pool->paged_.Cover(&sequence->blocks, 0, end);
    return Status::kOk;
  }

  template <typename Layout>
  static uint64_t Bytes(const KVPool<Layout>& pool, SequenceId id, const std::string& model_id) {
    if (!CheckSavable(pool, id).ok()) return 0;
    const auto& sequence = pool.sequences_.Get(id);
    uint64_t bytes = 0;
    if (!StateBytesOf(pool.Plan(), model_id.size(), HeldBy(pool, sequence), &bytes)) {
      return 0;
    }
    return bytes;
  }
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_IO_STATE_ACCESS_H_
