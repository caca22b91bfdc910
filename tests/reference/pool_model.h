// tests/reference/pool_model.h: a reference model of a KVPool (plain per-sequence vectors
// of every position's stored rows) and a driver of random operations against it, shared by
// the unit tests (a random generator) and the libFuzzer target (fuzz bytes). After each
// operation the model checks the sequence it touched, the pool's accounting, and now and
// then every sequence: every position each layer's next query sees reads back as the
// reference holds it, refused calls change nothing, and freeing every sequence frees every
// block. No gtest: failures are strings.
#ifndef KVRING_TESTS_REFERENCE_POOL_MODEL_H_
#define KVRING_TESTS_REFERENCE_POOL_MODEL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kvring/formats/int8.h"
#include "kvring/kvring.h"
#include "kvring/storage/kv_pool.h"
#include "reference/random_floats.h"
#include "reference/storage_model.h"

namespace kvring {
namespace testing {

// Five layers: a sliding and a chunked ring owner, a global paged owner (int8 when asked),
// and shared-KV consumers of the sliding and the global one. `hybrid`: the chunked owner also
// keeps a recurrent state, and a sixth layer is recurrent only; `staged`: their states staged
// (RuntimeSpec::stage_states). `dsa`: two MLA latents that keep DSA indexer keys follow, a
// global one (paged) and a sliding one (a ring).
template <typename Layout>
LayerPlan PoolTestPlan(Format global_format, uint64_t batch, bool hybrid = false, bool dsa = false,
                       bool staged = false) {
  StateSpec state;
  state.conv_elements = 24;  // BF16
  state.recurrent_elements = 10;
  state.recurrent_format = Format::kF32;
  const LayerSpec chunked = LayerSpec::Chunked(32, 1, 16);
  LayerPlan::Builder builder;
  builder.AddLayer(LayerSpec::Sliding(24, 2, 16))
      .AddLayer(LayerSpec::Global(1, 32))
      .AddLayer(LayerSpec::Sliding(16, 2, 16).SharedFrom(0))
      .AddLayer(hybrid ? chunked.WithState(state) : chunked)
      .AddLayer(LayerSpec::Global(1, 32).SharedFrom(1));
  if (hybrid) builder.AddLayer(LayerSpec::Recurrent(state));
  if (dsa) {
    LayerSpec sliding = LayerSpec::Latent(48).WithIndexer(16);
    sliding.kind = AttentionKind::kSliding;
    sliding.window = 12;
    builder.AddLayer(LayerSpec::Latent(64).WithIndexer(32)).AddLayer(sliding);
  }
  Expected<LayerPlan> plan = builder.SetContext(320)
                                 .SetBatch(batch)
                                 .SetRollback(4)
                                 .SetStageStates(staged)
                                 .SetFormat(AttentionKind::kGlobal, global_format)
                                 .SetLayout<Layout>()
                                 .Build();
  return std::move(plan).value();
}

// Appends to *out what the pool must read back for an input row of one layer (`size`
// elements at `row`): BF16 rounding, or int8 encoding per kv_head row then decoding (through
// *bytes, at least a kv_head row long).
inline void AppendStored(const float* row, size_t size, Format format, uint32_t kv_heads,
                         std::vector<int8_t>* bytes, std::vector<float>* out) {
  if (format == Format::kBF16) {
    for (size_t i = 0; i < size; ++i) out->push_back(BF16ToF32(BF16FromF32(row[i])));
    return;
  }
  const size_t dim = size / kv_heads;
  for (uint32_t head = 0; head < kv_heads; ++head) {
    const float scale = EncodeInt8Row(row + head * dim, dim, bytes->data());
    for (size_t i = 0; i < dim; ++i) out->push_back(DecodeInt8(scale, (*bytes)[i]));
  }
}

// Expects `condition`, else records it (and what is streamed after it) as the failure.
#define KVRING_MODEL_EXPECT(condition) \
  if (condition) {                     \
  } else                               \
    FailureStream(&failure_, #condition)

template <typename Layout>
class PoolModel {
 public:
  PoolModel(const LayerPlan& plan, const PoolSpec& spec, uint64_t seed)
      : pool_(KVPool<Layout>::Create(plan, spec).value()), rng_(seed) {}

  // The first disagreement with the reference, or empty.
  const std::string& Failure() const { return failure_; }

  struct Ref {
    uint64_t end = 0;
    // per owning layer: per position, the stored K then V values
    std::map<size_t, std::vector<std::vector<float>>> rows;
    // per layer with a recurrent state: per n in [0, end], the state after n positions
    // (conv bytes, then recurrent bytes)
    std::map<size_t, std::vector<std::vector<uint8_t>>> states;
  };

  KVPool<Layout>& Pool() { return pool_; }
  size_t Live() const { return live_.size(); }

  bool Add(uint64_t batch) {
    SequenceId id;
    const PoolUsage before = pool_.Usage();
    const Result result = pool_.AddSequence(&id, batch);
    if (!result.ok()) {
      KVRING_MODEL_EXPECT((result.status()) == (Status::kPoolExhausted)) << result.Message();
      ExpectUnchanged(before);
      return false;
    }
    live_.push_back(id);
    refs_[Key(id)] = FreshRef();
    return true;
  }

  // Appends one step of num_tokens to sequence `which`: Reserve first, or (for a batch its
  // rings hold) the paged layer first without one, so that an exhausted pool refuses before
  // any layer moved.
  bool Step(size_t which, uint64_t num_tokens, bool reserve) {
    const SequenceId id = live_[which];
    Ref& ref = refs_[Key(id)];
    const PoolUsage before = pool_.Usage();
    if (!MayStep(id, ref, num_tokens, reserve)) return false;
    // The step's recurrent states, written once nothing can refuse the step (after Reserve,
    // or after the first, paged, append of an unreserved one) and before the append that
    // completes it: a step of more positions than the state slots overwrites the current
    // state's slot, which a refused step would then have lost. Kept in the reference once
    // every append is in.
    std::map<size_t, std::vector<std::vector<uint8_t>>> states;
    if (reserve && !WriteStates(id, ref, num_tokens, &states)) return false;
    std::vector<size_t> order;
    for (size_t layer = 0; layer < pool_.NumLayers(); ++layer) {
      if (pool_.OwnsKV(layer)) order.push_back(layer);
    }
    std::stable_partition(order.begin(), order.end(),
                          [&](size_t layer) { return pool_.IsPaged(layer); });
    std::map<size_t, std::vector<std::vector<float>>> rows;
    for (size_t layer : order) {
      const Result result = AppendRows(id, ref, layer, num_tokens, &rows[layer]);
      if (!result.ok()) {
        // Only the first (paged) append of an unreserved step may be refused, for the budget.
        KVRING_MODEL_EXPECT(!(reserve)) << result.Message();
        KVRING_MODEL_EXPECT((result.status()) == (Status::kPoolExhausted)) << result.Message();
        KVRING_MODEL_EXPECT((layer) == (order[0]));
        ExpectUnchanged(before);
        return false;
      }
      if (!reserve && layer == order[0] && !WriteStates(id, ref, num_tokens, &states)) {
        return false;
      }
    }
    Commit(&ref, num_tokens, &rows, &states);
    return true;
  }

  // A step as an engine runs it on a plan whose states are staged: layer after layer in the
  // model's order, each state layer writing the step's states when its turn comes (a hybrid
  // layer before or after its own K/V, by a coin), so states are written before appends that
  // may still be refused: an unreserved step's paged append (kPoolExhausted), or the engine
  // itself failing before layer `fail_at` (NumLayers(): after the last layer, every append
  // and state in; past it: it does not). Either way the engine calls AbandonStep (with the
  // step's start, or without for a failure before a layer that still had to append or write
  // its states, by a coin: a failure after the last such layer, in a consumer layer, leaves a
  // step whose appends and states are all in, which only the start takes back), and the
  // sequence must read as before the step, its states included. Returns whether the step
  // completed.
  bool StagedStep(size_t which, uint64_t num_tokens, bool reserve, size_t fail_at) {
    const SequenceId id = live_[which];
    Ref& ref = refs_[Key(id)];
    if (!MayStep(id, ref, num_tokens, reserve)) return false;
    std::map<size_t, std::vector<std::vector<float>>> rows;
    std::map<size_t, std::vector<std::vector<uint8_t>>> states;
    for (size_t layer = 0; layer < pool_.NumLayers(); ++layer) {
      if (layer == fail_at) {
        bool behind = false;  // a layer from here on still appends or writes states
        for (size_t later = layer; later < pool_.NumLayers(); ++later) {
          behind = behind || pool_.OwnsKV(later) || ref.states.count(later) != 0;
        }
        return Abandon(which, /*with_start=*/!behind);
      }
      const bool has_state = ref.states.count(layer) != 0;
      const bool state_first = has_state && rng_() % 2 == 0;
      if (state_first && !WriteLayerStates(id, ref, layer, num_tokens, &states)) return false;
      if (pool_.OwnsKV(layer)) {
        const Result result = AppendRows(id, ref, layer, num_tokens, &rows[layer]);
        if (!result.ok()) {
          // Only a paged append of an unreserved step may be refused, for the budget.
          KVRING_MODEL_EXPECT(!(reserve)) << result.Message();
          KVRING_MODEL_EXPECT((result.status()) == (Status::kPoolExhausted)) << result.Message();
          KVRING_MODEL_EXPECT(pool_.IsPaged(layer)) << "layer " << layer;
          ++refused_appends_;
          return Abandon(which);
        }
      }
      if (has_state && !state_first && !WriteLayerStates(id, ref, layer, num_tokens, &states)) {
        return false;
      }
    }
    if (fail_at == pool_.NumLayers()) return Abandon(which, /*with_start=*/true);
    Commit(&ref, num_tokens, &rows, &states);
    return true;
  }
  uint64_t abandoned_steps() const { return abandoned_; }
  uint64_t refused_appends() const { return refused_appends_; }

  // Whether a step of num_tokens may begin: Reserve succeeds (else refused for the budget or
  // the context, changing nothing), or without one, the step fits in the context.
  bool MayStep(SequenceId id, const Ref& ref, uint64_t num_tokens, bool reserve) {
    if (!reserve) return ref.end + num_tokens <= pool_.Plan().Runtime().context;
    const PoolUsage before = pool_.Usage();
    const Result reserved = pool_.Reserve(id, num_tokens);
    if (reserved.ok()) return true;
    KVRING_MODEL_EXPECT(reserved == Status::kPoolExhausted || reserved == Status::kContextFull)
        << reserved.Message();
    ExpectUnchanged(before);
    return false;
  }

  // Abandons sequence `which`'s unfinished step (AbandonStep, given the step's start or, by a
  // coin, not): its end and every row and state it held before the step read back (the
  // caller's Check); false.
  bool Abandon(size_t which, bool with_start = false) {
    const SequenceId id = live_[which];
    if (!with_start) with_start = rng_() % 2 == 0;
    const RollbackResult abandoned =
        with_start ? pool_.AbandonStep(id, refs_[Key(id)].end) : pool_.AbandonStep(id);
    KVRING_MODEL_EXPECT(abandoned.ok()) << abandoned.Message();
    KVRING_MODEL_EXPECT((abandoned.EndPos()) == (refs_[Key(id)].end));
    ++abandoned_;
    return false;
  }

  // Appends num_tokens random rows to `layer` of sequence `id` after ref.end; on success adds
  // to *stored_rows what the pool must read back for them (the caller keeps them in the
  // reference once the step completes).
  Result AppendRows(SequenceId id, const Ref& ref, size_t layer, uint64_t num_tokens,
                    std::vector<std::vector<float>>* stored_rows) {
    const LayerInfo& info = pool_.Plan().Layer(layer);
    // The stored rows: an MLA latent's K, and a DSA latent's indexer keys as its V.
    const KVShape shape = KVShape::Of(info.spec, info.num_slots);
    const uint32_t kv_heads = shape.num_kv_heads;
    const size_t k_elems = shape.KRowElements();
    const size_t v_elems = shape.VRowElements();
    std::vector<float> k(num_tokens * k_elems), v(num_tokens * v_elems);
    for (float& x : k) x = Value();
    for (float& x : v) x = Value();
    const Result result = pool_.AppendF32(id, layer, ref.end, k.data(),
                                          v_elems == 0 ? nullptr : v.data(), num_tokens);
    if (!result.ok()) return result;
    // (One vector per stored row, kept by the reference; no other allocation per row: under
    // ASan each one records its stack.)
    std::vector<int8_t> bytes(k_elems + v_elems);
    for (uint64_t t = 0; t < num_tokens; ++t) {
      std::vector<float> stored;
      stored.reserve(k_elems + v_elems);
      AppendStored(k.data() + t * k_elems, k_elems, info.spec.format, kv_heads, &bytes, &stored);
      AppendStored(v.data() + t * v_elems, v_elems, info.spec.format, kv_heads, &bytes, &stored);
      stored_rows->push_back(std::move(stored));
    }
    return result;
  }

  // Keeps a completed step's rows and states in the reference.
  void Commit(Ref* ref, uint64_t num_tokens,
              std::map<size_t, std::vector<std::vector<float>>>* rows,
              std::map<size_t, std::vector<std::vector<uint8_t>>>* states) {
    for (auto& [layer, added] : *rows) {
      for (auto& row : added) ref->rows[layer].push_back(std::move(row));
    }
    for (auto& [layer, written] : *states) {
      for (auto& bytes : written) ref->states[layer].push_back(std::move(bytes));
    }
    ref->end += num_tokens;
  }

  // Writes the states of `ref`'s layers after the positions (end, end + num_tokens] of
  // sequence `id` into the pool and into *states; false (a failure recorded) if refused.
  bool WriteStates(SequenceId id, const Ref& ref, uint64_t num_tokens,
                   std::map<size_t, std::vector<std::vector<uint8_t>>>* states) {
    for (const auto& entry : ref.states) {
      if (!WriteLayerStates(id, ref, entry.first, num_tokens, states)) return false;
    }
    return true;
  }
  // The same for one layer.
  bool WriteLayerStates(SequenceId id, const Ref& ref, size_t layer, uint64_t num_tokens,
                        std::map<size_t, std::vector<std::vector<uint8_t>>>* states) {
    for (uint64_t n = ref.end + 1; n <= ref.end + num_tokens; ++n) {
      const Expected<StateSlot> slot = pool_.StateAfter(id, layer, n);
      KVRING_MODEL_EXPECT(slot.ok()) << "layer " << layer << ": " << slot.error().message;
      if (!slot.ok()) return false;
      std::vector<uint8_t> bytes(slot->conv_bytes + slot->recurrent_bytes);
      for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(rng_());
      std::memcpy(slot->conv, bytes.data(), slot->conv_bytes);
      std::memcpy(slot->recurrent, bytes.data() + slot->conv_bytes, slot->recurrent_bytes);
      (*states)[layer].push_back(std::move(bytes));
    }
    return true;
  }

  bool Fork(size_t which) {
    SequenceId fork;
    const PoolUsage before = pool_.Usage();
    const Result result = pool_.Fork(live_[which], &fork);
    if (!result.ok()) {
      KVRING_MODEL_EXPECT((result.status()) == (Status::kPoolExhausted)) << result.Message();
      ExpectUnchanged(before);
      return false;
    }
    refs_[Key(fork)] = refs_[Key(live_[which])];
    live_.push_back(fork);
    return true;
  }

  void Rollback(size_t which, uint64_t num_tokens) {
    const SequenceId id = live_[which];
    Ref& ref = refs_[Key(id)];
    const PoolUsage before = pool_.Usage();
    const RollbackResult result = pool_.Rollback(id, num_tokens);
    if (!result.ok()) {
      KVRING_MODEL_EXPECT((result.status()) == (Status::kRollbackTooFar)) << result.Message();
      KVRING_MODEL_EXPECT((result.EndPos()) == (ref.end));
      ExpectUnchanged(before);
      return;
    }
    ref.end -= num_tokens;
    KVRING_MODEL_EXPECT((result.EndPos()) == (ref.end));
    for (auto& [layer, rows] : ref.rows) rows.resize(ref.end);
    for (auto& [layer, held] : ref.states) held.resize(ref.end + 1);
  }

  void Clear(size_t which) {
    KVRING_MODEL_EXPECT(pool_.Clear(live_[which]).ok());
    refs_[Key(live_[which])] = FreshRef();
  }

  void Free(size_t which) {
    const SequenceId id = live_[which];
    KVRING_MODEL_EXPECT(pool_.Free(id).ok());
    refs_.erase(Key(id));
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(which));
    // A freed id is refused from now on.
    KVRING_MODEL_EXPECT((pool_.Free(id).status()) == (Status::kUnknownSequence));
    SequenceId ignored;
    KVRING_MODEL_EXPECT((pool_.Fork(id, &ignored).status()) == (Status::kUnknownSequence));
  }

  // Saves sequence `which` (SaveState) and loads the bytes into sequence `into` (LoadState),
  // replacing what it held: both then read the same, and the blocks `into` held alone come
  // back first. A pool that cannot give the blocks refuses, changing nothing.
  bool Move(size_t which, size_t into) {
    std::vector<uint8_t> bytes;
    VectorSink sink(&bytes);
    const Result saved = SaveState(pool_, live_[which], "pool model", &sink);
    KVRING_MODEL_EXPECT(saved.ok()) << saved.Message();
    const PoolUsage before = pool_.Usage();
    MemorySource source(bytes);
    const Result loaded = LoadState(&source, "pool model", &pool_, live_[into]);
    if (!loaded.ok()) {
      KVRING_MODEL_EXPECT((loaded.status()) == (Status::kPoolExhausted)) << loaded.Message();
      ExpectUnchanged(before);
      return false;
    }
    refs_[Key(live_[into])] = refs_[Key(live_[which])];
    return true;
  }

  void Resize(size_t which, uint64_t batch) {
    const PoolUsage before = pool_.Usage();
    const Result result = pool_.Resize(live_[which], batch);
    if (!result.ok()) {
      KVRING_MODEL_EXPECT((result.status()) == (Status::kPoolExhausted)) << result.Message();
      ExpectUnchanged(before);
    }
  }

  // Every position the next query of each layer of sequence `which` sees reads back as the
  // reference holds it, and so does each recurrent state (CheckStates).
  void Check(size_t which) {
    const SequenceId id = live_[which];
    const Ref& ref = refs_[Key(id)];
    KVRING_MODEL_EXPECT((*pool_.EndPos(id)) == (ref.end));
    for (size_t layer = 0; layer < pool_.NumLayers(); ++layer) {
      if (!pool_.Plan().Layer(layer).spec.attends) continue;  // a recurrent layer: below
      const size_t owner = pool_.Owner(layer);
      const LayerInfo& info = pool_.Plan().Layer(owner);
      const KVView<Layout> view = *pool_.View(id, layer);
      const IndexerKeysView keys = *pool_.IndexerKeys(id, layer);
      KVRING_MODEL_EXPECT((view.end_pos) == (ref.end));
      // A DSA latent's keys: beside the latent, never in attention's view.
      KVRING_MODEL_EXPECT((keys.dim) == (info.spec.indexer_dim)) << "layer " << layer;
      KVRING_MODEL_EXPECT(!(keys.dim != 0 && view.HasV())) << "layer " << layer;
      if (ref.end == 0) continue;
      const uint64_t first = view.visibility.FirstVisible(ref.end);
      KVRING_MODEL_EXPECT((*pool_.FirstPos(id, layer)) <= (first)) << "layer " << layer;
      const KVShape shape = KVShape::Of(info.spec, info.num_slots);
      const size_t k_elems = shape.KRowElements();
      const size_t v_elems = shape.VRowElements();
      std::vector<float> k(k_elems), v(v_elems);
      const auto found = ref.rows.find(owner);
      KVRING_MODEL_EXPECT((found) != (ref.rows.end())) << "no rows of layer " << owner;
      if (found == ref.rows.end()) return;
      for (uint64_t pos = first; pos < ref.end && failure_.empty(); ++pos) {
        const Result read = pool_.ReadRowF32(id, layer, pos, k.data(), v.data());
        KVRING_MODEL_EXPECT(read.ok()) << read.Message();
        const std::vector<float>& want = found->second[pos];
        KVRING_MODEL_EXPECT(std::equal(k.begin(), k.end(), want.begin()))
            << "sequence " << id.index << " layer " << layer << " pos " << pos;
        KVRING_MODEL_EXPECT(std::equal(v.begin(), v.end(), want.begin() + k_elems))
            << "sequence " << id.index << " layer " << layer << " pos " << pos;
        for (uint32_t d = 0; d < keys.dim && failure_.empty(); ++d) {
          const float key = keys.format == Format::kBF16
                                ? BF16ToF32(keys.Row(pos)[d])
                                : DecodeInt8(keys.Scale(pos), keys.RowInt8(pos)[d]);
          KVRING_MODEL_EXPECT((key) == (want[k_elems + d]))
              << "sequence " << id.index << " layer " << layer << " indexer key of " << pos;
        }
      }
    }
    CheckStates(which);
  }
  // And the current recurrent state of each layer that keeps one.
  void CheckStates(size_t which) {
    const SequenceId id = live_[which];
    const Ref& ref = refs_[Key(id)];
    for (const auto& [layer, held] : ref.states) {
      const Expected<StateSlot> state = pool_.State(id, layer);
      KVRING_MODEL_EXPECT(state.ok()) << "layer " << layer << ": " << state.error().message;
      if (!state.ok()) return;
      const std::vector<uint8_t>& want = held[ref.end];
      KVRING_MODEL_EXPECT(std::memcmp(state->conv, want.data(), state->conv_bytes) == 0 &&
                          std::memcmp(state->recurrent, want.data() + state->conv_bytes,
                                      state->recurrent_bytes) == 0)
          << "sequence " << id.index << " layer " << layer << " state after " << ref.end;
    }
  }
  void CheckAll() {
    for (size_t i = 0; i < live_.size() && failure_.empty(); ++i) Check(i);
  }

  // A new sequence's reference: no positions, zero states.
  Ref FreshRef() const {
    Ref ref;
    for (const LayerInfo& info : pool_.Plan().Layers()) {
      if (!info.HasState()) continue;
      ref.states[info.index].push_back(
          std::vector<uint8_t>(info.conv_state_bytes + info.recurrent_state_bytes, 0));
    }
    return ref;
  }

  // Bytes in use are the rings, the states and the blocks in use; every block's reference
  // count is the number of tables holding it.
  void CheckAccounting() {
    const PoolUsage usage = pool_.Usage();
    uint64_t ring_bytes = 0;
    std::map<uint32_t, uint32_t> holders;
    for (const SequenceId id : live_) {
      ring_bytes += *pool_.RingBytesOf(id);
      const KVView<Layout> view = *pool_.View(id, 1);
      for (uint64_t i = 0; i < *pool_.BlocksOf(id); ++i) ++holders[view.blocks[i]];
    }
    KVRING_MODEL_EXPECT((usage.ring_bytes) == (ring_bytes));
    KVRING_MODEL_EXPECT((usage.state_bytes) == (live_.size() * pool_.Plan().StateBytes()));
    KVRING_MODEL_EXPECT((usage.blocks_in_use) == (holders.size()));
    KVRING_MODEL_EXPECT((usage.bytes_in_use) ==
                        (ring_bytes + usage.state_bytes + usage.blocks_in_use * usage.block_bytes));
    KVRING_MODEL_EXPECT((usage.bytes_in_use) <= (usage.budget_bytes));
    KVRING_MODEL_EXPECT((usage.blocks_in_use + usage.free_blocks) == (usage.num_blocks));
    uint64_t shared = 0;
    for (const auto& [block, count] : holders) {
      KVRING_MODEL_EXPECT((pool_.BlockRefCount(block)) == (count)) << "block " << block;
      shared += count > 1;
    }
    KVRING_MODEL_EXPECT((usage.shared_blocks) == (shared));
  }

  void FreeAll() {
    while (!live_.empty()) Free(live_.size() - 1);
    const PoolUsage usage = pool_.Usage();
    KVRING_MODEL_EXPECT((usage.free_blocks) == (usage.num_blocks));
    KVRING_MODEL_EXPECT((usage.bytes_in_use) == (0u));
    KVRING_MODEL_EXPECT((usage.shared_blocks) == (0u));
  }

  std::mt19937_64& Rng() { return rng_; }

 private:
  static uint64_t Key(SequenceId id) { return uint64_t{id.index} << 32 | id.generation; }
  float Value() { return UniformFloats(-2.0f, 2.0f)(rng_); }
  void ExpectUnchanged(const PoolUsage& before) {
    const PoolUsage after = pool_.Usage();
    KVRING_MODEL_EXPECT((after.bytes_in_use) == (before.bytes_in_use));
    KVRING_MODEL_EXPECT((after.blocks_in_use) == (before.blocks_in_use));
    KVRING_MODEL_EXPECT((after.shared_blocks) == (before.shared_blocks));
    KVRING_MODEL_EXPECT((after.live_sequences) == (before.live_sequences));
  }

  // Records the message streamed into it as the model's failure (the first one) when it
  // goes out of scope.
  class FailureStream {
   public:
    FailureStream(std::string* failure, const char* condition) : failure_(failure) {
      message_ << condition;
    }
    ~FailureStream() {
      if (failure_->empty()) *failure_ = message_.str();
    }
    template <typename T>
    FailureStream& operator<<(const T& value) {
      message_ << ": " << value;
      return *this;
    }

   private:
    std::string* failure_;
    std::ostringstream message_;
  };

  std::string failure_;
  KVPool<Layout> pool_;
  std::mt19937_64 rng_;
  std::vector<SequenceId> live_;
  std::map<uint64_t, Ref> refs_;
  uint64_t abandoned_ = 0, refused_appends_ = 0;
};

// Runs random operations on a pool of PoolTestPlan over 32 to 48 live sequences, on a budget
// that runs out: adds, steps of 1 to 20 tokens (reserved, or paged layer first), forks,
// rollbacks, clears, frees and resizes, choices from `choices`. Returns the first failure,
// or empty. Counts what happened, so that tests can require that it did.
template <typename Layout>
class PoolDriver {
 public:
  // `moves`: every 50th step also moves a sequence (SaveState into LoadState), besides the
  // step's operation; the other operations' mix and choices stay those of a run without.
  // `hybrid`: PoolTestPlan's hybrid plan, whose states every step writes and every check reads;
  // `dsa`: its DSA latents, whose indexer keys every check reads. `staged`: the hybrid plan's
  // states staged, and every step a StagedStep, which fails before a random layer or after the
  // last one time in four (and an unreserved one whose paged append is refused): AbandonStep
  // must keep the sequence as it was.
  PoolDriver(ChoiceSource* choices, Format global_format, uint64_t seed, bool moves = false,
             bool hybrid = false, bool dsa = false, bool staged = false)
      : choices_(choices),
        global_format_(global_format),
        seed_(seed),
        moves_enabled_(moves),
        hybrid_(hybrid),
        dsa_(dsa),
        staged_(staged) {}

  std::string Run(uint64_t steps) {
    const LayerPlan plan = PoolTestPlan<Layout>(global_format_, 8, hybrid_, dsa_, staged_);
    PoolSpec spec;
    spec.max_sequences = 48;
    spec.block_slots = Layout::kTileSlots;  // small blocks: appends cross them often
    {
      // The budget: rings for 40 sequences and a fifth of their full contexts (staged: a tenth,
      // so that unreserved steps meet it after their ring appends, whatever the blocks).
      Expected<KVPool<Layout>> probe = KVPool<Layout>::Create(plan, PoolSpec{4ull << 20, 1, 0});
      if (!probe.ok()) return probe.error().message;
      spec.budget_bytes = 40 * probe->RingBytesFor(8) +
                          40 * probe->BlockBytesFor(320) / (staged_ ? 10 : 5) +
                          40 * plan.StateBytes();
    }
    PoolModel<Layout> model(plan, spec, seed_);
    for (int i = 0; i < 32; ++i) {
      if (!model.Add(0)) return "the first 32 sequences did not fit";
    }
    for (uint64_t step = 0; step < steps && !choices_->Done(); ++step) {
      const uint64_t op = choices_->Below(100);
      const size_t live = model.Live();
      const size_t which = live == 0 ? 0 : static_cast<size_t>(choices_->Below(live));
      size_t checked = which;
      if (live < 32 || (op < 4 && live < 48)) {
        const uint64_t batches[] = {0, 1, 8, 16};
        model.Add(batches[choices_->Below(4)]);
        checked = model.Live() - 1;
      } else if (op < 60) {
        const uint64_t num_tokens =
            choices_->Below(4) == 0 ? choices_->Between(1, 20) : choices_->Between(1, 6);
        const bool reserve = num_tokens > 8 || choices_->Below(2) == 0;
        // (Unstaged runs take no more choices than before.)
        const size_t layers = model.Pool().NumLayers();
        const size_t fail_at = staged_ && choices_->Below(4) == 0
                                   ? static_cast<size_t>(choices_->Below(layers + 1))
                                   : layers + 1;
        const uint64_t refused_before = model.refused_appends();
        const uint64_t abandoned_before = model.abandoned_steps();
        if (staged_ ? model.StagedStep(which, num_tokens, reserve, fail_at)
                    : model.Step(which, num_tokens, reserve)) {
          ++steps_;
        } else if (model.abandoned_steps() != abandoned_before &&
                   model.refused_appends() == refused_before) {
          ++failed_steps_;  // the engine failed: the budget has room
        } else {
          ++refused_steps_;
          // Make room the way an engine would: free a sequence (not the one stepping).
          if (live > 1) model.Free(which == 0 ? 1 : 0);
          checked = std::min(which, model.Live() - 1);
        }
      } else if (op < 70) {
        forks_ += model.Fork(which);
      } else if (op < 80) {
        model.Rollback(which, choices_->Below(7));
      } else if (op < 84) {
        model.Clear(which);
      } else if (op < 92) {
        model.Free(which);
        checked = model.Live() == 0 ? 0 : std::min(which, model.Live() - 1);
      } else {
        model.Resize(which, choices_->Between(1, 16));
      }
      // With moves, every 50th step also moves a sequence: into a new sequence, as a copy that
      // shares nothing, or into a live one, replacing what it held.
      if (moves_enabled_ && step % 50 == 49 && model.Live() > 1) {
        const size_t from = static_cast<size_t>(choices_->Below(model.Live()));
        if (step % 100 == 49 && model.Live() < 48 && model.Add(0)) {
          moves_ += model.Move(from, model.Live() - 1);
          model.Check(model.Live() - 1);
        } else {
          const size_t into = static_cast<size_t>(choices_->Below(model.Live()));
          moves_ += model.Move(from, into);
          model.Check(into);
        }
      }
      if (model.Live() > 0) model.Check(std::min(checked, model.Live() - 1));
      model.CheckAccounting();
      // Writes into one sequence must not show in another (shared blocks, copied rings): a
      // sweep of every sequence now and then, and at the end.
      if (step % 64 == 0) model.CheckAll();
      if (!model.Failure().empty()) return "step " + std::to_string(step) + ": " + model.Failure();
    }
    model.CheckAll();
    model.FreeAll();
    abandoned_ = model.abandoned_steps();
    refused_appends_ = model.refused_appends();
    return model.Failure();
  }
  uint64_t steps() const { return steps_; }
  uint64_t refused_steps() const { return refused_steps_; }
  uint64_t forks() const { return forks_; }
  uint64_t moves() const { return moves_; }
  uint64_t abandoned_steps() const { return abandoned_; }
  uint64_t refused_appends() const { return refused_appends_; }
  uint64_t failed_steps() const { return failed_steps_; }

 private:
  ChoiceSource* choices_;
  Format global_format_;
  uint64_t seed_;
  bool moves_enabled_;
  bool hybrid_;
  bool dsa_;
  bool staged_;
  uint64_t steps_ = 0, refused_steps_ = 0, forks_ = 0, moves_ = 0;
  uint64_t abandoned_ = 0, refused_appends_ = 0, failed_steps_ = 0;
};

#undef KVRING_MODEL_EXPECT

}  // namespace testing
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_POOL_MODEL_H_
