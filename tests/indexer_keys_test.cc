// Tests of the DSA indexer keys (DeepSeek V3.2, GLM-5) a KVCache or KVPool keeps beside an MLA
// latent: appended as the latent's v, read through IndexerKeys (ring, flat and paged, BF16 and
// int8), never seen by attention's view, and carried by rings, rollbacks, snapshots, growth,
// forks and state files exactly as the latent is; the bytes are the plan's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kvring/kvring.h"

namespace kvring {
namespace {

constexpr uint32_t kLatent = 64;
constexpr uint32_t kIndexer = 32;
constexpr uint64_t kWindow = 8;
constexpr uint64_t kRollback = 2;

// Values exact in BF16: the latent of position p, and its indexer key in a run seeded `seed`.
float LatentValue(uint64_t pos, uint32_t dim) {
  return static_cast<float>(static_cast<int>((pos * 7 + dim * 3) % 64) - 32) / 8.0f;
}
float KeyValue(uint64_t pos, uint32_t dim, uint32_t seed) {
  return static_cast<float>(static_cast<int>((pos * 5 + dim * 11 + seed * 13) % 61) - 30) / 4.0f;
}

// Layer 0: a global DSA latent; 1: a sliding DSA latent (a ring); 2: a latent without an
// indexer; 3: a sliding layer of half the window reading layer 1's latent. `indexer_dim` 0:
// the same latents without indexers.
template <typename Layout>
LayerPlan DsaPlan(Format format, uint32_t indexer_dim = kIndexer) {
  LayerSpec sliding = LayerSpec::Latent(kLatent).WithIndexer(indexer_dim);
  sliding.kind = AttentionKind::kSliding;
  sliding.window = kWindow;
  LayerSpec reader = LayerSpec::Latent(kLatent).SharedFrom(1);
  reader.kind = AttentionKind::kSliding;
  reader.window = kWindow / 2;
  Expected<LayerPlan> plan = LayerPlan::Builder()
                                 .AddLayer(LayerSpec::Latent(kLatent).WithIndexer(indexer_dim))
                                 .AddLayer(sliding)
                                 .AddLayer(LayerSpec::Latent(kLatent))
                                 .AddLayer(reader)
                                 .SetContext(256)
                                 .SetBatch(4)
                                 .SetRollback(kRollback)
                                 .SetElementType(format)
                                 .SetLayout<Layout>()
                                 .Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.value();
}

struct Rows {
  std::vector<float> latent, keys;
};
Rows RowsOf(uint64_t pos, uint64_t count, uint32_t seed) {
  Rows rows;
  for (uint64_t p = pos; p < pos + count; ++p) {
    for (uint32_t d = 0; d < kLatent; ++d) rows.latent.push_back(LatentValue(p, d));
    for (uint32_t d = 0; d < kIndexer; ++d) rows.keys.push_back(KeyValue(p, d, seed));
  }
  return rows;
}

// Appends positions [pos, pos + count) of a run seeded `seed` to every owner of `cache`.
template <typename Layout>
void Step(KVCache<Layout>* cache, uint64_t pos, uint64_t count, uint32_t seed) {
  const Rows rows = RowsOf(pos, count, seed);
  ASSERT_TRUE(cache->AppendF32(0, pos, rows.latent.data(), rows.keys.data(), count).ok());
  ASSERT_TRUE(cache->AppendF32(1, pos, rows.latent.data(), rows.keys.data(), count).ok());
  ASSERT_TRUE(cache->AppendF32(2, pos, rows.latent.data(), nullptr, count).ok());
}
template <typename Layout>
void Step(KVPool<Layout>* pool, SequenceId id, uint64_t pos, uint64_t count, uint32_t seed) {
  const Rows rows = RowsOf(pos, count, seed);
  ASSERT_TRUE(pool->AppendF32(id, 0, pos, rows.latent.data(), rows.keys.data(), count).ok());
  ASSERT_TRUE(pool->AppendF32(id, 1, pos, rows.latent.data(), rows.keys.data(), count).ok());
  ASSERT_TRUE(pool->AppendF32(id, 2, pos, rows.latent.data(), nullptr, count).ok());
}

// Returns "" if `keys` holds [first, end) with the keys of `seed` (of `later_seed` from
// `later` on; int8: within half a step of the row's scale), else what differs.
std::string CheckKeys(const IndexerKeysView& keys, uint64_t first, uint64_t end, uint32_t seed,
                      uint64_t later = ~uint64_t{0}, uint32_t later_seed = 0) {
  if (keys.dim != kIndexer) return "dim " + std::to_string(keys.dim);
  if (keys.first_pos != first || keys.end_pos != end) {
    return "range [" + std::to_string(keys.first_pos) + ", " + std::to_string(keys.end_pos) + ")";
  }
  for (uint64_t pos = first; pos < end; ++pos) {
    if (pos == later) seed = later_seed;
    float max_abs = 0;
    for (uint32_t d = 0; d < kIndexer; ++d)
      max_abs = std::fmax(max_abs, std::fabs(KeyValue(pos, d, seed)));
    for (uint32_t d = 0; d < kIndexer; ++d) {
      const float want = KeyValue(pos, d, seed);
      float got;
      float bound = 0;
      if (keys.format == Format::kBF16) {
        if (keys.Row(pos) == nullptr || keys.RowInt8(pos) != nullptr) return "BF16 rows";
        got = BF16ToF32(keys.Row(pos)[d]);
      } else {
        if (keys.RowInt8(pos) == nullptr || keys.Row(pos) != nullptr) return "int8 rows";
        got = DecodeInt8(keys.Scale(pos), keys.RowInt8(pos)[d]);
        bound = max_abs / 254 * 1.0001f;
      }
      if (!(std::fabs(got - want) <= bound)) {
        return "pos " + std::to_string(pos) + " dim " + std::to_string(d) + ": " +
               std::to_string(got) + " for " + std::to_string(want);
      }
    }
  }
  return "";
}

template <typename Layout>
class IndexerKeysTest : public ::testing::Test {};
using Layouts = ::testing::Types<FlashLayout, TiledLayout<16>>;
TYPED_TEST_SUITE(IndexerKeysTest, Layouts);

TYPED_TEST(IndexerKeysTest, ACacheKeepsEachPositionsKeyBesideItsLatent) {
  using Layout = TypeParam;
  for (Format format : {Format::kBF16, Format::kInt8}) {
    SCOPED_TRACE(ToString(format));
    const LayerPlan plan = DsaPlan<Layout>(format);
    EXPECT_EQ(plan.Layer(0).indexer_slot_bytes, RowBytes(format, kIndexer));
    Expected<KVCache<Layout>> created = KVCache<Layout>::Create(plan);
    ASSERT_TRUE(created.ok()) << created.error().message;
    KVCache<Layout>& cache = *created;
    EXPECT_EQ(cache.AllocatedBytes(), plan.TotalBytes());  // the keys are the plan's bytes
    for (uint64_t pos = 0; pos < 40; pos += 4) Step(&cache, pos, 4, 1);
    // Flat and ring keys; the reader of the ring sees them under its own window.
    EXPECT_EQ(CheckKeys(cache.IndexerKeys(0), 0, 40, 1), "");
    const uint64_t ring_first = cache.FirstPos(1);
    EXPECT_LT(ring_first, 40u - kWindow + 1);
    EXPECT_EQ(CheckKeys(cache.IndexerKeys(1), ring_first, 40, 1), "");
    EXPECT_EQ(CheckKeys(cache.IndexerKeys(3), ring_first, 40, 1), "");
    EXPECT_EQ(cache.IndexerKeys(3).visibility.span, kWindow / 2);
    EXPECT_EQ(cache.IndexerKeys(2).dim, 0u);  // a latent without an indexer keeps none
    // Attention sees the latent alone; row reads give the key as v.
    const KVView<Layout> view = cache.View(0);
    EXPECT_FALSE(view.HasV());
    EXPECT_EQ(view.layout.Shape().v_head_dim, 0u);
    EXPECT_EQ(view.layout.Shape().head_dim, kLatent);
    std::vector<float> latent(kLatent), key(kIndexer);
    ASSERT_TRUE(cache.ReadRowF32(1, 39, latent.data(), key.data()).ok());
    EXPECT_EQ(latent[5], LatentValue(39, 5));
    EXPECT_NEAR(key[7], KeyValue(39, 7, 1), format == Format::kBF16 ? 0 : 0.07);
    // A step without its keys is refused, changing nothing.
    const Rows rows = RowsOf(40, 1, 1);
    const Result refused = cache.AppendF32(0, 40, rows.latent.data(), nullptr, 1);
    EXPECT_EQ(refused, Status::kBadArgument);
    EXPECT_NE(refused.Message().find("v is null, but the layer stores V rows (a DSA latent: its "
                                     "indexer keys) of 32 elements"),
              std::string::npos)
        << refused.Message();
    EXPECT_EQ(cache.EndPos(0), 40u);
    // Keys taken before a write are refused after it.
    const IndexerKeysView before = cache.IndexerKeys(1);
    EXPECT_TRUE(before.stamp.Check().ok());
    // A snapshot keeps them; drafts rolled back leave the earlier keys, rewritten anew.
    Expected<KVCache<Layout>> snapshot = cache.Copy();
    ASSERT_TRUE(snapshot.ok());
    Step(&cache, 40, 2, 2);
    EXPECT_EQ(before.stamp.Check(), Status::kStaleView);
    ASSERT_TRUE(cache.Rollback(2).ok());
    EXPECT_EQ(CheckKeys(cache.IndexerKeys(1), cache.FirstPos(1), 40, 1), "");
    Step(&cache, 40, 4, 3);
    EXPECT_EQ(CheckKeys(cache.IndexerKeys(0), 0, 44, 1, 40, 3), "");
    EXPECT_EQ(CheckKeys(snapshot->IndexerKeys(0), 0, 40, 1), "");
    EXPECT_EQ(CheckKeys(snapshot->IndexerKeys(1), ring_first, 40, 1), "");
    // Growth keeps them; Clear drops them with the latent.
    ASSERT_TRUE(cache.Grow(16).ok());
    EXPECT_EQ(CheckKeys(cache.IndexerKeys(1), cache.FirstPos(1), 44, 1, 40, 3), "");
    cache.Clear();
    EXPECT_EQ(cache.IndexerKeys(0).end_pos, 0u);
  }
}

template <typename Layout>
KVPool<Layout> MakePool(const LayerPlan& plan) {
  PoolSpec spec;
  spec.budget_bytes = 4 << 20;
  spec.max_sequences = 4;
  spec.block_slots = 2 * Layout::kTileSlots;
  Expected<KVPool<Layout>> pool = KVPool<Layout>::Create(plan, spec);
  EXPECT_TRUE(pool.ok()) << pool.error().message;
  return std::move(pool).value();
}

TYPED_TEST(IndexerKeysTest, PagesForksAndStateFilesCarryTheKeys) {
  using Layout = TypeParam;
  for (Format format : {Format::kBF16, Format::kInt8}) {
    SCOPED_TRACE(ToString(format));
    const LayerPlan plan = DsaPlan<Layout>(format);
    KVPool<Layout> pool = MakePool<Layout>(plan);
    // A block holds its slots of both paged layers, latents and keys: the plan's slot bytes.
    EXPECT_EQ(pool.Usage().block_bytes,
              2 * Layout::kTileSlots * (plan.Layer(0).slot_bytes + plan.Layer(2).slot_bytes));
    SequenceId a, fork;
    ASSERT_TRUE(pool.AddSequence(&a).ok());
    const uint64_t end = 3 * Layout::kTileSlots + 5;  // over two blocks and into a third
    for (uint64_t pos = 0; pos < end; pos += 1) Step(&pool, a, pos, 1, 1);
    ValueResult<IndexerKeysView> paged = pool.IndexerKeys(a, 0);
    ASSERT_TRUE(paged.ok());
    EXPECT_NE(paged->blocks, nullptr);
    EXPECT_EQ(CheckKeys(*paged, 0, end, 1), "");
    EXPECT_FALSE(pool.View(a, 0)->HasV());
    // A fork shares the blocks; its own drafts never reach the source.
    ASSERT_TRUE(pool.Fork(a, &fork).ok());
    Step(&pool, fork, end, 3, 2);
    EXPECT_EQ(CheckKeys(*pool.IndexerKeys(a, 0), 0, end, 1), "");
    EXPECT_EQ(CheckKeys(*pool.IndexerKeys(a, 1), pool.IndexerKeys(a, 1)->first_pos, end, 1), "");
    EXPECT_EQ(CheckKeys(*pool.IndexerKeys(fork, 0), 0, end + 3, 1, end, 2), "");
    ASSERT_TRUE(pool.Rollback(fork, 2).ok());
    EXPECT_EQ(CheckKeys(*pool.IndexerKeys(fork, 0), 0, end + 1, 1, end, 2), "");
    // A state file of the sequence loads into a cache of either layout, keys and all.
    std::vector<uint8_t> saved;
    VectorSink sink(&saved);
    ASSERT_TRUE(SaveState(pool, a, "dsa", &sink).ok());
    Expected<KVCache<TiledLayout<16>>> tiled =
        KVCache<TiledLayout<16>>::Create(DsaPlan<TiledLayout<16>>(format));
    ASSERT_TRUE(tiled.ok());
    MemorySource source(saved);
    ASSERT_TRUE(LoadState(&source, "dsa", &*tiled).ok());
    EXPECT_EQ(CheckKeys(tiled->IndexerKeys(0), 0, end, 1), "");
    EXPECT_EQ(CheckKeys(tiled->IndexerKeys(1), tiled->FirstPos(1), end, 1), "");
    SequenceId b;
    ASSERT_TRUE(pool.AddSequence(&b).ok());
    ASSERT_TRUE(LoadState(&source, "dsa", &pool, b).ok());
    EXPECT_EQ(CheckKeys(*pool.IndexerKeys(b, 0), 0, end, 1), "");
    // A plan whose latents keep no indexer refuses the state, naming the stream.
    Expected<KVCache<Layout>> other = KVCache<Layout>::Create(DsaPlan<Layout>(format, 0));
    ASSERT_TRUE(other.ok());
    const Result refused = LoadState(&source, "dsa", &*other);
    EXPECT_EQ(refused, Status::kBadState);
    EXPECT_NE(refused.Message().find("layers[0].v_head_dim (V, or a DSA latent's indexer key) is "
                                     "32 in the state and 0 in this plan"),
              std::string::npos)
        << refused.Message();
    // Refusals of a bad id or layer, as View's.
    ASSERT_TRUE(pool.Free(b).ok());
    EXPECT_EQ(pool.IndexerKeys(b, 0).status(), Status::kUnknownSequence);
    EXPECT_EQ(pool.IndexerKeys(a, 9).status(), Status::kBadArgument);
  }
}

}  // namespace
}  // namespace kvring
