// KVPool against a reference model: plain per-sequence vectors of every position's stored
// rows. Random operations over at least 32 live sequences (add, appends of random sizes across
// block and ring boundaries, forks of forks, rollbacks, clears, frees, ring resizes, pool
// exhaustion) keep every sequence's visible positions identical to the reference, refused
// calls change nothing, the accounting adds up after every step, and freeing every sequence
// frees every block.
#include "kvring/storage/kv_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "kvring/formats/int8.h"
#include "kvring/kvring.h"

namespace kvring {
namespace {

#ifndef KVRING_POOL_TEST_STEPS
#define KVRING_POOL_TEST_STEPS 100000
#endif

// Five layers: a sliding and a chunked ring owner, a global paged owner (int8 when asked),
// and shared-KV consumers of the sliding and the global one.
template <typename Layout>
LayerPlan PoolTestPlan(Format global_format, uint64_t batch) {
  Expected<LayerPlan> plan = LayerPlan::Builder()
                                 .AddLayer(LayerSpec::Sliding(24, 2, 16))
                                 .AddLayer(LayerSpec::Global(1, 32))
                                 .AddLayer(LayerSpec::Sliding(16, 2, 16).SharedFrom(0))
                                 .AddLayer(LayerSpec::Chunked(32, 1, 16))
                                 .AddLayer(LayerSpec::Global(1, 32).SharedFrom(1))
                                 .SetContext(320)
                                 .SetBatch(batch)
                                 .SetRollback(4)
                                 .SetFormat(AttentionKind::kGlobal, global_format)
                                 .SetLayout<Layout>()
                                 .Build();
  return std::move(plan).value();
}

// What the pool must read back for an input row of one layer: BF16 rounding, or int8
// encoding per kv_head row then decoding.
std::vector<float> Stored(const std::vector<float>& row, Format format, uint32_t kv_heads) {
  std::vector<float> out(row.size());
  if (format == Format::kBF16) {
    for (size_t i = 0; i < row.size(); ++i) out[i] = BF16ToF32(BF16FromF32(row[i]));
    return out;
  }
  const size_t dim = row.size() / kv_heads;
  std::vector<int8_t> q(dim);
  for (uint32_t head = 0; head < kv_heads; ++head) {
    const float scale = EncodeInt8Row(row.data() + head * dim, dim, q.data());
    for (size_t i = 0; i < dim; ++i) out[head * dim + i] = DecodeInt8(scale, q[i]);
  }
  return out;
}

template <typename Layout>
class PoolModel {
 public:
  PoolModel(const LayerPlan& plan, const PoolSpec& spec, uint64_t seed)
      : pool_(KVPool<Layout>::Create(plan, spec).value()), rng_(seed) {}

  struct Ref {
    uint64_t end = 0;
    // per owning layer: per position, the stored K then V values
    std::map<size_t, std::vector<std::vector<float>>> rows;
  };

  KVPool<Layout>& Pool() { return pool_; }
  size_t Live() const { return live_.size(); }

  bool Add(uint64_t batch) {
    SequenceId id;
    const PoolUsage before = pool_.Usage();
    const Result result = pool_.AddSequence(&id, batch);
    if (!result.ok()) {
      EXPECT_EQ(result.status(), Status::kPoolExhausted) << result.Message();
      ExpectUnchanged(before);
      return false;
    }
    live_.push_back(id);
    refs_[Key(id)] = Ref();
    return true;
  }

  // Appends one step of num_tokens to sequence `which`: Reserve first, or (for a batch its
  // rings hold) the paged layer first without one, so that an exhausted pool refuses before
  // any layer moved.
  bool Step(size_t which, uint64_t num_tokens, bool reserve) {
    const SequenceId id = live_[which];
    Ref& ref = refs_[Key(id)];
    const PoolUsage before = pool_.Usage();
    if (reserve) {
      const Result reserved = pool_.Reserve(id, num_tokens);
      if (!reserved.ok()) {
        EXPECT_TRUE(reserved == Status::kPoolExhausted || reserved == Status::kContextFull)
            << reserved.Message();
        ExpectUnchanged(before);
        return false;
      }
    } else if (ref.end + num_tokens > pool_.Plan().Runtime().context) {
      return false;
    }
    std::vector<size_t> order;
    for (size_t layer = 0; layer < pool_.NumLayers(); ++layer) {
      if (pool_.OwnsKV(layer)) order.push_back(layer);
    }
    std::stable_partition(order.begin(), order.end(),
                          [&](size_t layer) { return pool_.IsPaged(layer); });
    for (size_t layer : order) {
      const LayerInfo& info = pool_.Plan().Layer(layer);
      const uint32_t kv_heads = info.spec.num_kv_heads;
      const size_t k_elems = size_t{kv_heads} * info.spec.head_dim;
      const size_t v_elems = size_t{kv_heads} * info.spec.VHeadDim();
      std::vector<float> k(num_tokens * k_elems), v(num_tokens * v_elems);
      for (float& x : k) x = Value();
      for (float& x : v) x = Value();
      const Result result = pool_.AppendF32(id, layer, ref.end, k.data(), v.data(), num_tokens);
      if (!result.ok()) {
        // Only the first (paged) append of an unreserved step may be refused, for the budget.
        EXPECT_FALSE(reserve) << result.Message();
        EXPECT_EQ(result.status(), Status::kPoolExhausted) << result.Message();
        EXPECT_EQ(layer, order[0]);
        ExpectUnchanged(before);
        return false;
      }
      auto& rows = ref.rows[layer];
      for (uint64_t t = 0; t < num_tokens; ++t) {
        std::vector<float> kr(k.begin() + t * k_elems, k.begin() + (t + 1) * k_elems);
        std::vector<float> vr(v.begin() + t * v_elems, v.begin() + (t + 1) * v_elems);
        std::vector<float> stored = Stored(kr, info.spec.format, kv_heads);
        const std::vector<float> stored_v = Stored(vr, info.spec.format, kv_heads);
        stored.insert(stored.end(), stored_v.begin(), stored_v.end());
        rows.push_back(std::move(stored));
      }
    }
    ref.end += num_tokens;
    return true;
  }

  bool Fork(size_t which) {
    SequenceId fork;
    const PoolUsage before = pool_.Usage();
    const Result result = pool_.Fork(live_[which], &fork);
    if (!result.ok()) {
      EXPECT_EQ(result.status(), Status::kPoolExhausted) << result.Message();
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
      EXPECT_EQ(result.status(), Status::kRollbackTooFar) << result.Message();
      EXPECT_EQ(result.EndPos(), ref.end);
      ExpectUnchanged(before);
      return;
    }
    ref.end -= num_tokens;
    EXPECT_EQ(result.EndPos(), ref.end);
    for (auto& [layer, rows] : ref.rows) rows.resize(ref.end);
  }

  void Clear(size_t which) {
    ASSERT_TRUE(pool_.Clear(live_[which]).ok());
    refs_[Key(live_[which])] = Ref();
  }

  void Free(size_t which) {
    const SequenceId id = live_[which];
    ASSERT_TRUE(pool_.Free(id).ok());
    refs_.erase(Key(id));
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(which));
    // A freed id is refused from now on.
    EXPECT_EQ(pool_.Free(id).status(), Status::kUnknownSequence);
    SequenceId ignored;
    EXPECT_EQ(pool_.Fork(id, &ignored).status(), Status::kUnknownSequence);
  }

  void Resize(size_t which, uint64_t batch) {
    const PoolUsage before = pool_.Usage();
    const Result result = pool_.Resize(live_[which], batch);
    if (!result.ok()) {
      EXPECT_EQ(result.status(), Status::kPoolExhausted) << result.Message();
      ExpectUnchanged(before);
    }
  }

  // Every position the next query of each layer of sequence `which` sees reads back as the
  // reference holds it.
  void Check(size_t which) {
    const SequenceId id = live_[which];
    const Ref& ref = refs_[Key(id)];
    ASSERT_EQ(pool_.EndPos(id), ref.end);
    for (size_t layer = 0; layer < pool_.NumLayers(); ++layer) {
      const size_t owner = pool_.Owner(layer);
      const LayerInfo& info = pool_.Plan().Layer(owner);
      const KVView<Layout> view = pool_.View(id, layer);
      ASSERT_EQ(view.end_pos, ref.end);
      if (ref.end == 0) continue;
      const uint64_t first = view.visibility.FirstVisible(ref.end);
      ASSERT_LE(pool_.FirstPos(id, layer), first) << "layer " << layer;
      const size_t k_elems = size_t{info.spec.num_kv_heads} * info.spec.head_dim;
      const size_t v_elems = size_t{info.spec.num_kv_heads} * info.spec.VHeadDim();
      std::vector<float> k(k_elems), v(v_elems);
      const auto found = ref.rows.find(owner);
      ASSERT_NE(found, ref.rows.end());
      for (uint64_t pos = first; pos < ref.end; ++pos) {
        const Result read = pool_.ReadRowF32(id, layer, pos, k.data(), v.data());
        ASSERT_TRUE(read.ok()) << read.Message();
        const std::vector<float>& want = found->second[pos];
        ASSERT_TRUE(std::equal(k.begin(), k.end(), want.begin()))
            << "sequence " << id.index << " layer " << layer << " pos " << pos;
        ASSERT_TRUE(std::equal(v.begin(), v.end(), want.begin() + k_elems))
            << "sequence " << id.index << " layer " << layer << " pos " << pos;
      }
    }
  }
  void CheckAll() {
    for (size_t i = 0; i < live_.size(); ++i) Check(i);
  }

  // Bytes in use are the rings plus the blocks in use; every block's reference count is the
  // number of tables holding it.
  void CheckAccounting() {
    const PoolUsage usage = pool_.Usage();
    uint64_t ring_bytes = 0;
    std::map<uint32_t, uint32_t> holders;
    for (const SequenceId id : live_) {
      ring_bytes += pool_.RingBytesOf(id);
      const KVView<Layout> view = pool_.View(id, 1);
      for (uint64_t i = 0; i < pool_.BlocksOf(id); ++i) ++holders[view.blocks[i]];
    }
    ASSERT_EQ(usage.ring_bytes, ring_bytes);
    ASSERT_EQ(usage.blocks_in_use, holders.size());
    ASSERT_EQ(usage.bytes_in_use, ring_bytes + usage.blocks_in_use * usage.block_bytes);
    ASSERT_LE(usage.bytes_in_use, usage.budget_bytes);
    ASSERT_EQ(usage.blocks_in_use + usage.free_blocks, usage.num_blocks);
    uint64_t shared = 0;
    for (const auto& [block, count] : holders) {
      ASSERT_EQ(pool_.BlockRefCount(block), count) << "block " << block;
      shared += count > 1;
    }
    ASSERT_EQ(usage.shared_blocks, shared);
  }

  void FreeAll() {
    while (!live_.empty()) Free(live_.size() - 1);
    const PoolUsage usage = pool_.Usage();
    EXPECT_EQ(usage.free_blocks, usage.num_blocks);
    EXPECT_EQ(usage.bytes_in_use, 0u);
    EXPECT_EQ(usage.shared_blocks, 0u);
  }

  std::mt19937_64& Rng() { return rng_; }

 private:
  static uint64_t Key(SequenceId id) { return uint64_t{id.index} << 32 | id.generation; }
  float Value() { return std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng_); }
  void ExpectUnchanged(const PoolUsage& before) {
    const PoolUsage after = pool_.Usage();
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
    EXPECT_EQ(after.blocks_in_use, before.blocks_in_use);
    EXPECT_EQ(after.shared_blocks, before.shared_blocks);
    EXPECT_EQ(after.live_sequences, before.live_sequences);
  }

  KVPool<Layout> pool_;
  std::mt19937_64 rng_;
  std::vector<SequenceId> live_;
  std::map<uint64_t, Ref> refs_;
};

template <typename Layout>
class KVPoolTest : public ::testing::Test {};
using PoolLayouts = ::testing::Types<FlashLayout, TiledLayout<16>>;
TYPED_TEST_SUITE(KVPoolTest, PoolLayouts);

// Runs `steps` random operations over 32 to 48 live sequences on a budget that runs out.
template <typename Layout>
void RandomOperations(Format global_format, uint64_t steps, uint64_t seed) {
  const LayerPlan plan = PoolTestPlan<Layout>(global_format, 8);
  PoolSpec spec;
  spec.max_sequences = 48;
  spec.block_slots = Layout::kTileSlots;  // small blocks: appends cross them often
  {
    // The budget: decode-sized rings for 40 sequences and a third of their full contexts.
    Expected<KVPool<Layout>> probe = KVPool<Layout>::Create(plan, PoolSpec{1ull << 30, 1, 0});
    ASSERT_TRUE(probe.ok()) << probe.error().message;
    spec.budget_bytes = 40 * probe->RingBytesFor(8) + 40 * probe->BlockBytesFor(320) / 3;
  }
  PoolModel<Layout> model(plan, spec, seed);
  std::mt19937_64& rng = model.Rng();
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(model.Add(0));
  uint64_t refused_steps = 0, forks = 0;
  for (uint64_t step = 0; step < steps; ++step) {
    const uint64_t op = rng() % 100;
    const size_t live = model.Live();
    const size_t which = live == 0 ? 0 : rng() % live;
    size_t checked = which;
    if (live < 32 || (op < 4 && live < 48)) {
      model.Add(std::vector<uint64_t>{0, 1, 8, 16}[rng() % 4]);
      checked = model.Live() - 1;
    } else if (op < 60) {
      const uint64_t num_tokens = rng() % 4 == 0 ? 1 + rng() % 20 : 1 + rng() % 6;
      const bool reserve = num_tokens > 8 || rng() % 2 == 0;
      if (!model.Step(which, num_tokens, reserve)) {
        ++refused_steps;
        // Make room the way an engine would: free a sequence (not the one stepping).
        if (live > 1) model.Free(which == 0 ? 1 : 0);
        checked = std::min(which, model.Live() - 1);
      }
    } else if (op < 70) {
      forks += model.Fork(which);
    } else if (op < 80) {
      model.Rollback(which, rng() % 7);
    } else if (op < 84) {
      model.Clear(which);
    } else if (op < 92) {
      model.Free(which);
      checked = model.Live() == 0 ? 0 : std::min(which, model.Live() - 1);
    } else {
      model.Resize(which, 1 + rng() % 16);
    }
    if (::testing::Test::HasFailure()) return;
    if (model.Live() > 0) model.Check(checked);
    model.CheckAccounting();
    // Writes into one sequence must not show in another (shared blocks, copied rings): a
    // sweep of every sequence now and then, and at the end.
    if (step % 64 == 0) model.CheckAll();
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "at step " << step;
      return;
    }
  }
  model.CheckAll();
  EXPECT_GT(refused_steps, 0u) << "the budget never ran out";
  EXPECT_GT(forks, 100u);
  model.FreeAll();
}

TYPED_TEST(KVPoolTest, RandomOperationsMatchTheReference) {
  RandomOperations<TypeParam>(Format::kBF16, KVRING_POOL_TEST_STEPS, 7);
}

TYPED_TEST(KVPoolTest, RandomOperationsInt8Globals) {
  RandomOperations<TypeParam>(Format::kInt8, KVRING_POOL_TEST_STEPS / 5, 11);
}

TYPED_TEST(KVPoolTest, ForkSharesBlocksAndCopiesOnWrite) {
  const LayerPlan plan = PoolTestPlan<TypeParam>(Format::kBF16, 8);
  PoolSpec spec{64ull << 20, 4, 2 * TypeParam::kTileSlots};
  PoolModel<TypeParam> model(plan, spec, 3);
  ASSERT_TRUE(model.Add(0));
  const uint64_t block_slots = model.Pool().BlockSlots();
  // 2.5 blocks of history, then a fork: every block shared, nothing copied.
  uint64_t pos = 0;
  while (pos < block_slots * 5 / 2) {
    ASSERT_TRUE(model.Step(0, 8, true));
    pos += 8;
  }
  const PoolUsage before = model.Pool().Usage();
  ASSERT_TRUE(model.Fork(0));
  PoolUsage after = model.Pool().Usage();
  EXPECT_EQ(after.blocks_in_use, before.blocks_in_use);
  EXPECT_EQ(after.shared_blocks, before.blocks_in_use);
  // The fork's first step copies the partly filled last block only.
  ASSERT_TRUE(model.Step(1, 1, true));
  after = model.Pool().Usage();
  EXPECT_EQ(after.blocks_in_use, before.blocks_in_use + 1);
  EXPECT_EQ(after.shared_blocks, before.blocks_in_use - 1);
  // The source's step writes its own block (no longer shared): no copy.
  ASSERT_TRUE(model.Step(0, 1, true));
  EXPECT_EQ(model.Pool().Usage().blocks_in_use, before.blocks_in_use + 1);
  model.CheckAll();
  model.CheckAccounting();
  model.FreeAll();
}

TYPED_TEST(KVPoolTest, RefusalsNameTheFieldAndChangeNothing) {
  const LayerPlan plan = PoolTestPlan<TypeParam>(Format::kBF16, 8);
  Expected<KVPool<TypeParam>> no_sequences =
      KVPool<TypeParam>::Create(plan, PoolSpec{1 << 20, 0, 0});
  ASSERT_FALSE(no_sequences.ok());
  EXPECT_EQ(no_sequences.error().field, "max_sequences");
  Expected<KVPool<TypeParam>> tiny = KVPool<TypeParam>::Create(plan, PoolSpec{1000, 4, 0});
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.error().field, "budget_bytes");
  Expected<KVPool<TypeParam>> odd_block =
      KVPool<TypeParam>::Create(plan, PoolSpec{1 << 20, 4, TypeParam::kTileSlots + 1});
  ASSERT_FALSE(odd_block.ok());
  EXPECT_EQ(odd_block.error().field, "block_slots");
  Expected<KVPool<TypeParam>> other_layout = KVPool<TypeParam>::Create(
      PoolTestPlan<TiledLayout<32>>(Format::kBF16, 8), PoolSpec{1 << 20, 4, 0});
  EXPECT_FALSE(other_layout.ok());

  PoolModel<TypeParam> model(plan, PoolSpec{8ull << 20, 2, 0}, 5);
  KVPool<TypeParam>& pool = model.Pool();
  ASSERT_TRUE(model.Add(0));
  ASSERT_TRUE(model.Step(0, 8, true));
  const SequenceId id{0, 0};  // the first sequence a pool adds
  std::vector<float> k(64 * 32, 0.5f), v(64 * 32, 0.5f);
  EXPECT_EQ(pool.AppendF32(id, 2, 8, k.data(), v.data(), 1).status(), Status::kNotOwner);
  EXPECT_EQ(pool.AppendF32(id, 9, 8, k.data(), v.data(), 1).status(), Status::kBadArgument);
  EXPECT_EQ(pool.AppendF32(id, 0, 7, k.data(), v.data(), 1).status(), Status::kWrongPosition);
  EXPECT_EQ(pool.AppendF32(id, 0, 8, nullptr, v.data(), 1).status(), Status::kBadArgument);
  EXPECT_EQ(pool.AppendF32(id, 0, 8, k.data(), v.data(), 0).status(), Status::kEmptyBatch);
  EXPECT_EQ(pool.AppendF32(SequenceId{1, 0}, 0, 0, k.data(), v.data(), 1).status(),
            Status::kUnknownSequence);
  // A step begun: fork, shrink and rollback wait for it to finish.
  ASSERT_TRUE(pool.AppendF32(id, 0, 8, k.data(), v.data(), 1).ok());
  SequenceId fork;
  EXPECT_EQ(pool.Fork(id, &fork).status(), Status::kWrongPosition);
  EXPECT_EQ(pool.Rollback(id, 1).status(), Status::kWrongPosition);
  EXPECT_EQ(pool.Resize(id, 1).status(), Status::kWrongPosition);
  const Result ahead = pool.AppendF32(id, 0, 9, k.data(), v.data(), 1);
  EXPECT_EQ(ahead.status(), Status::kWrongPosition);
  EXPECT_NE(ahead.Message().find("layers[0]"), std::string::npos) << ahead.Message();
  EXPECT_EQ(pool.Rollback(id, 5).status(), Status::kWrongPosition);
  ASSERT_TRUE(pool.AppendF32(id, 1, 8, k.data(), v.data(), 1).ok());
  ASSERT_TRUE(pool.AppendF32(id, 3, 8, k.data(), v.data(), 1).ok());
  EXPECT_EQ(pool.EndPos(id), 9u);
  const RollbackResult too_far = pool.Rollback(id, 5);
  EXPECT_EQ(too_far.status(), Status::kRollbackTooFar);
  EXPECT_EQ(too_far.EndPos(), 9u);
  EXPECT_EQ(pool.Resize(id, 0).status(), Status::kBadArgument);
  EXPECT_EQ(pool.AddSequence(nullptr).status(), Status::kBadArgument);
}

TYPED_TEST(KVPoolTest, ExhaustionIsRefusedUntilASequenceIsFreed) {
  const LayerPlan plan = PoolTestPlan<TypeParam>(Format::kBF16, 8);
  // Two sequences' rings and four blocks.
  const uint64_t block_slots = 2 * TypeParam::kTileSlots;
  Expected<KVPool<TypeParam>> sized =
      KVPool<TypeParam>::Create(plan, PoolSpec{1ull << 30, 1, block_slots});
  ASSERT_TRUE(sized.ok());
  PoolModel<TypeParam> model(
      plan, PoolSpec{2 * sized->RingBytesFor(8) + 4 * sized->Usage().block_bytes, 4, block_slots},
      9);
  ASSERT_TRUE(model.Add(0));
  ASSERT_TRUE(model.Add(0));
  uint64_t appended = 0;
  while (model.Step(0, 8, true)) appended += 8;
  EXPECT_EQ(appended, 4 * block_slots);
  EXPECT_FALSE(model.Add(0));  // every byte is in use: no room for a third sequence's rings
  EXPECT_EQ(model.Pool().Reserve(SequenceId{1, 0}, 1).status(), Status::kPoolExhausted);
  model.CheckAll();
  model.Free(0);
  EXPECT_TRUE(model.Step(0, 8, true));  // the survivor (sequence 1) steps now
  model.CheckAll();
  model.FreeAll();
}

TYPED_TEST(KVPoolTest, DecodingSequencesShrinkTheirRings) {
  const LayerPlan plan = PoolTestPlan<TypeParam>(Format::kBF16, 64);
  PoolModel<TypeParam> model(plan, PoolSpec{64ull << 20, 2, 0}, 13);
  ASSERT_TRUE(model.Add(64));
  const uint64_t prefill = model.Pool().RingBytesOf(SequenceId{0, 0});
  ASSERT_TRUE(model.Step(0, 64, true));
  model.Resize(0, 1);
  const uint64_t decode = model.Pool().RingBytesOf(SequenceId{0, 0});
  EXPECT_LT(decode, prefill);
  EXPECT_EQ(decode, model.Pool().RingBytesFor(1));
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(model.Step(0, 1, false));
  model.Rollback(0, 4);
  model.CheckAll();
  model.CheckAccounting();
}

}  // namespace
}  // namespace kvring
