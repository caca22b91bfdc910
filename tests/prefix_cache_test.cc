// PrefixCache over a KVPool: the match rule against a brute-force oracle (also with a hash
// that collides on every block: only equal content matches), conversations resumed after their
// rings wrapped and prompts that part inside a block, bit for bit against prefilling from zero;
// eviction by priority then least recent use, never of a block a live sequence holds; stale
// matches and refusals that change nothing.
#include "kvring/sharing/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvring/sharing/prefix_index.h"
#include "reference/pool_model.h"

namespace kvring {
namespace {

// --- The rule against an oracle ----------------------------------------------------------

struct OracleCheckpoint {
  uint64_t salt;
  std::vector<TokenId> tokens;
  uint64_t rollback;
  uint32_t id;
};

// The longest point any checkpoint resumes, trying every one (docs/prefix_cache.md's rule).
uint64_t OracleLongest(const std::vector<OracleCheckpoint>& all, uint64_t salt,
                       const std::vector<TokenId>& prompt) {
  uint64_t best = 0;
  for (const OracleCheckpoint& c : all) {
    if (c.salt != salt) continue;
    uint64_t shared = 0;
    while (shared < c.tokens.size() && shared < prompt.size() &&
           c.tokens[shared] == prompt[shared]) {
      ++shared;
    }
    if (c.tokens.size() - shared <= c.rollback) best = std::max(best, shared);
  }
  return best;
}

uint64_t CollidingMix(uint64_t, uint64_t) { return 42; }

void RandomIndexOperations(detail::PrefixIndex::Mix mix, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    const uint64_t block = 1 + rng() % 5;
    detail::PrefixIndex index(block, mix);
    std::vector<OracleCheckpoint> all;
    // Prompts from a few stems over a 3-token alphabet share long prefixes and part anywhere.
    std::vector<std::vector<TokenId>> stems(4);
    for (auto& stem : stems) {
      for (int i = 0; i < 24; ++i) stem.push_back(static_cast<TokenId>(rng() % 3));
    }
    auto random_prompt = [&] {
      std::vector<TokenId> prompt = stems[rng() % stems.size()];
      prompt.resize(1 + rng() % prompt.size());
      if (rng() % 2 == 0) prompt[rng() % prompt.size()] = static_cast<TokenId>(rng() % 3);
      return prompt;
    };
    for (int step = 0; step < 400; ++step) {
      const uint64_t salt = rng() % 2;
      const uint64_t op = rng() % 10;
      if (op < 3) {
        std::vector<TokenId> tokens = random_prompt();
        const uint32_t found = index.Find(salt, tokens.data(), tokens.size());
        const auto held = std::find_if(all.begin(), all.end(), [&](const OracleCheckpoint& c) {
          return c.salt == salt && c.tokens == tokens;
        });
        ASSERT_EQ(found == detail::PrefixIndex::kNone, held == all.end());
        if (held != all.end()) {
          ASSERT_EQ(found, held->id);
          continue;
        }
        const uint64_t rollback = rng() % 6;
        const uint32_t id = index.Add(salt, tokens.data(), tokens.size(), rollback);
        all.push_back({salt, tokens, rollback, id});
      } else if (op < 5 && !all.empty()) {
        const size_t which = rng() % all.size();
        index.Remove(all[which].id);
        all.erase(all.begin() + static_cast<std::ptrdiff_t>(which));
      } else {
        const std::vector<TokenId> prompt = random_prompt();
        const detail::PrefixPoint point = index.Longest(salt, prompt.data(), prompt.size());
        ASSERT_EQ(point.length, OracleLongest(all, salt, prompt)) << "round " << round;
        if (point.length == 0) continue;
        // The point is real: its checkpoint holds the prompt's first `length` tokens and may
        // discard the rest.
        const auto c = std::find_if(all.begin(), all.end(), [&](const OracleCheckpoint& x) {
          return x.id == point.checkpoint;
        });
        ASSERT_NE(c, all.end());
        ASSERT_EQ(c->salt, salt);
        ASSERT_EQ(c->tokens.size(), point.length + point.rollback);
        ASSERT_LE(point.rollback, c->rollback);
        ASSERT_TRUE(std::equal(prompt.begin(), prompt.begin() + point.length, c->tokens.begin()));
      }
      ASSERT_EQ(index.NumCheckpoints(), all.size());
    }
    for (const OracleCheckpoint& c : all) index.Remove(c.id);
    EXPECT_EQ(index.NumNodes(), 0u);
  }
}

TEST(PrefixIndex, LongestMatchesABruteForceOracle) {
  RandomIndexOperations(detail::MixPrefixHash, 1);
}

// Every block's hash equal: lookups find candidates only; equal tokens and salt decide.
TEST(PrefixIndex, OnlyEqualContentMatchesWhenEveryHashCollides) {
  RandomIndexOperations(CollidingMix, 2);
}

// --- Over a pool ---------------------------------------------------------------------------

template <typename Layout>
class PrefixCacheTest : public ::testing::Test {};
using PrefixLayouts = ::testing::Types<FlashLayout, TiledLayout<16>>;
TYPED_TEST_SUITE(PrefixCacheTest, PrefixLayouts);

// A toy model: the K/V of position p of layer l depend on every token up to p (a chain hash),
// as a transformer's do, so two prompts' rows are equal exactly as far as their tokens are.
template <typename Layout>
class ToyModel {
 public:
  explicit ToyModel(KVPool<Layout>* pool) : pool_(pool) {}

  // Appends tokens[EndPos(id), tokens.size()) to `id` in steps of at most `batch`, each
  // reserved first.
  Result Prefill(SequenceId id, const std::vector<TokenId>& tokens, uint64_t batch = 8) {
    uint64_t pos = *pool_->EndPos(id);
    while (pos < tokens.size()) {
      const uint64_t n = std::min<uint64_t>(batch, tokens.size() - pos);
      const Result reserved = pool_->Reserve(id, n);
      if (!reserved.ok()) return reserved;
      for (size_t layer = 0; layer < pool_->NumLayers(); ++layer) {
        if (!pool_->OwnsKV(layer)) continue;
        std::vector<float> k, v;
        Rows(tokens, layer, pos, n, &k, &v);
        const Result appended =
            pool_->AppendF32(id, layer, pos, k.data(), v.empty() ? nullptr : v.data(), n);
        if (!appended.ok()) return appended;
      }
      pos += n;
    }
    return Status::kOk;
  }

  // Expects `a` and `b` at the same end, each holding every position the next query of each
  // layer sees, with the same bits.
  void ExpectSame(SequenceId a, SequenceId b) const {
    const uint64_t end = *pool_->EndPos(a);
    ASSERT_EQ(*pool_->EndPos(b), end);
    for (size_t layer = 0; layer < pool_->NumLayers(); ++layer) {
      const KVShape shape = StoredShape(pool_->Owner(layer));
      const uint64_t first = pool_->View(a, layer)->visibility.FirstVisible(end);
      ASSERT_LE(*pool_->FirstPos(a, layer), first) << "layer " << layer;
      ASSERT_LE(*pool_->FirstPos(b, layer), first) << "layer " << layer;
      std::vector<float> ka(shape.KRowElements()), va(shape.VRowElements());
      std::vector<float> kb(ka.size()), vb(va.size());
      for (uint64_t pos = first; pos < end; ++pos) {
        ASSERT_TRUE(pool_->ReadRowF32(a, layer, pos, ka.data(), va.data()).ok());
        ASSERT_TRUE(pool_->ReadRowF32(b, layer, pos, kb.data(), vb.data()).ok());
        ASSERT_EQ(0, std::memcmp(ka.data(), kb.data(), ka.size() * sizeof(float)))
            << "layer " << layer << " pos " << pos;
        ASSERT_EQ(0, std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)))
            << "layer " << layer << " pos " << pos;
      }
    }
  }

  // Prefills `tokens` into a new sequence from zero.
  SequenceId FromScratch(const std::vector<TokenId>& tokens) {
    SequenceId id;
    EXPECT_TRUE(pool_->AddSequence(&id).ok());
    EXPECT_TRUE(Prefill(id, tokens).ok());
    return id;
  }

 private:
  // The rows owning layer `layer` stores per position: K (an MLA latent), and V (a DSA
  // latent's indexer key).
  KVShape StoredShape(size_t layer) const {
    const LayerInfo& info = pool_->Plan().Layer(layer);
    return KVShape::Of(info.spec, info.num_slots);
  }
  void Rows(const std::vector<TokenId>& tokens, size_t layer, uint64_t pos, uint64_t n,
            std::vector<float>* k, std::vector<float>* v) const {
    const KVShape shape = StoredShape(layer);
    uint64_t h = 0;
    for (uint64_t p = 0; p < pos; ++p)
      h = detail::MixPrefixHash(h, static_cast<uint32_t>(tokens[p]));
    for (uint64_t i = 0; i < n; ++i) {
      h = detail::MixPrefixHash(h, static_cast<uint32_t>(tokens[pos + i]));
      for (uint64_t e = 0; e < shape.KRowElements(); ++e) k->push_back(Value(h, layer, e));
      for (uint64_t e = 0; e < shape.VRowElements(); ++e) v->push_back(Value(h, layer, ~e));
    }
  }
  static float Value(uint64_t h, size_t layer, uint64_t e) {
    const uint64_t x = detail::MixPrefixHash(h + layer, e);
    return static_cast<float>(x % 4001) / 1000.0f - 2.0f;
  }

  KVPool<Layout>* pool_;
};

// `dsa`: PoolTestPlan's DSA latents too (a paged one and a ring, keeping indexer keys).
template <typename Layout>
KVPool<Layout> MakePool(uint32_t max_sequences = 16, uint64_t budget = 8ull << 20,
                        bool dsa = false) {
  const LayerPlan plan = testing::PoolTestPlan<Layout>(Format::kBF16, 8, false, dsa);
  return std::move(
             KVPool<Layout>::Create(plan, PoolSpec{budget, max_sequences, Layout::kTileSlots}))
      .value();
}

std::vector<TokenId> Tokens(uint64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> tokens(count);
  for (TokenId& t : tokens) t = static_cast<TokenId>(rng() % 50000);
  return tokens;
}

// A conversation's second turn after its rings wrapped (window 24, chunk 32, 105 positions):
// the checkpoint of the first turn resumes it, and only the new tokens are prefilled.
template <typename Layout>
void ResumeAfterTheRingsWrapped(bool dsa) {
  KVPool<Layout> pool = MakePool<Layout>(16, 8ull << 20, dsa);
  ToyModel<Layout> model(&pool);
  PrefixCache<Layout> cache(&pool);
  std::vector<TokenId> turn = Tokens(105, 1);  // the prompt and the reply
  const SequenceId first = model.FromScratch(turn);
  ASSERT_TRUE(cache.Insert(first, turn.data(), turn.size()).ok());
  ASSERT_TRUE(pool.Free(first).ok());
  std::vector<TokenId> next = turn;
  const std::vector<TokenId> more = Tokens(40, 2);
  next.insert(next.end(), more.begin(), more.end());
  const PrefixMatch match = cache.Match(next.data(), next.size());
  EXPECT_EQ(match.length, 105u);
  EXPECT_EQ(match.rollback, 0u);
  EXPECT_EQ(*cache.AttachBytes(match), pool.RingBytesFor(1));
  SequenceId resumed;
  ASSERT_TRUE(cache.Attach(match, &resumed).ok());
  EXPECT_EQ(*pool.EndPos(resumed), 105u);
  ASSERT_TRUE(model.Prefill(resumed, next).ok());
  const SequenceId scratch = model.FromScratch(next);
  model.ExpectSame(resumed, scratch);
  const PrefixCacheStats stats = cache.Stats();
  EXPECT_EQ(stats.checkpoints, 1u);
  EXPECT_EQ(stats.inserts, 1u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.matched_tokens, 105u);
  EXPECT_EQ(stats.ring_bytes, pool.RingBytesFor(1));
}

TYPED_TEST(PrefixCacheTest, ResumesAConversationAfterItsRingsWrapped) {
  ResumeAfterTheRingsWrapped<TypeParam>(/*dsa=*/false);
}

// The same with DSA latents: the checkpoint's ring and the shared blocks carry the indexer
// keys beside the latents (ExpectSame reads them as v).
TYPED_TEST(PrefixCacheTest, ResumesADsaConversationWithItsIndexerKeys) {
  ResumeAfterTheRingsWrapped<TypeParam>(/*dsa=*/true);
}

// Checkpoints every block of a prefill and at its end; prompts that part from it anywhere
// resume from the last usable point (a checkpoint at or before the parting, or one that may
// discard its newest positions back to it), as the oracle says, and then read as prefilled
// from zero.
TYPED_TEST(PrefixCacheTest, APromptThatPartsResumesFromTheLastUsablePoint) {
  KVPool<TypeParam> pool = MakePool<TypeParam>(64, 32ull << 20);
  ToyModel<TypeParam> model(&pool);
  PrefixCache<TypeParam> cache(&pool);
  const uint64_t block = pool.BlockSlots();
  const std::vector<TokenId> prompt = Tokens(150, 3);
  SequenceId id;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  std::vector<OracleCheckpoint> taken;
  for (uint64_t end = block; end <= prompt.size();
       end = std::min<uint64_t>(end + block, prompt.size())) {
    const std::vector<TokenId> head(prompt.begin(),
                                    prompt.begin() + static_cast<std::ptrdiff_t>(end));
    ASSERT_TRUE(model.Prefill(id, head).ok());
    ASSERT_TRUE(cache.Insert(id, head.data(), head.size()).ok());
    // The checkpoint may discard what a fork of the sequence at decode size may.
    SequenceId fork;
    ASSERT_TRUE(pool.Fork(id, &fork).ok());
    ASSERT_TRUE(pool.Resize(fork, 1).ok());
    taken.push_back({0, head, *pool.RollbackLimit(fork), 0});
    ASSERT_TRUE(pool.Free(fork).ok());
    if (end == prompt.size()) break;
  }
  ASSERT_TRUE(pool.Free(id).ok());
  for (uint64_t part :
       {uint64_t{1}, block - 1, block, block + 1, 2 * block + 3, uint64_t{149}, uint64_t{150}}) {
    std::vector<TokenId> next(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(part));
    const std::vector<TokenId> rest = Tokens(20, 100 + part);
    next.insert(next.end(), rest.begin(), rest.end());
    const PrefixMatch match = cache.Match(next.data(), next.size());
    ASSERT_EQ(match.length, OracleLongest(taken, 0, next)) << "parting at " << part;
    if (match.length == 0) continue;
    SequenceId resumed;
    ASSERT_TRUE(cache.Attach(match, &resumed).ok());
    ASSERT_EQ(*pool.EndPos(resumed), match.length);
    ASSERT_TRUE(model.Prefill(resumed, next).ok());
    const SequenceId scratch = model.FromScratch(next);
    model.ExpectSame(resumed, scratch);
    ASSERT_TRUE(pool.Free(resumed).ok());
    ASSERT_TRUE(pool.Free(scratch).ok());
  }
  EXPECT_EQ(cache.Stats().checkpoints, taken.size());
}

// Tenants never share: the same tokens under another salt miss.
TYPED_TEST(PrefixCacheTest, SaltsNeverShare) {
  KVPool<TypeParam> pool = MakePool<TypeParam>();
  ToyModel<TypeParam> model(&pool);
  PrefixCache<TypeParam> cache(&pool);
  const std::vector<TokenId> prompt = Tokens(70, 4);
  const SequenceId id = model.FromScratch(prompt);
  ASSERT_TRUE(cache.Insert(id, prompt.data(), prompt.size(), /*salt=*/7).ok());
  EXPECT_EQ(cache.Match(prompt.data(), prompt.size(), 8).length, 0u);
  EXPECT_EQ(cache.Match(prompt.data(), prompt.size(), 7).length, 70u);
  // The same prefix again takes no second checkpoint.
  ASSERT_TRUE(cache.Insert(id, prompt.data(), prompt.size(), 7).ok());
  const PrefixCacheStats stats = cache.Stats();
  EXPECT_EQ(stats.checkpoints, 1u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 1u);
}

// Eviction takes the lowest priority first, then the least recently used; it frees the
// checkpoint's rings and the blocks only it held, never a block a live sequence holds; Stats'
// bytes are what evicting everything frees.
TYPED_TEST(PrefixCacheTest, EvictionOrderAndLiveSequencesKeepTheirBlocks) {
  KVPool<TypeParam> pool = MakePool<TypeParam>();
  ToyModel<TypeParam> model(&pool);
  PrefixCache<TypeParam> cache(&pool);
  const std::vector<TokenId> a = Tokens(90, 5), b = Tokens(60, 6), c = Tokens(75, 7);
  const SequenceId live = model.FromScratch(a);  // stays live: shares a's blocks
  const SequenceId sb = model.FromScratch(b), sc = model.FromScratch(c);
  ASSERT_TRUE(cache.Insert(live, a.data(), a.size(), 0, /*priority=*/1).ok());
  ASSERT_TRUE(cache.Insert(sb, b.data(), b.size(), 0, 0).ok());
  ASSERT_TRUE(cache.Insert(sc, c.data(), c.size(), 0, 0).ok());
  ASSERT_TRUE(pool.Free(sb).ok());
  ASSERT_TRUE(pool.Free(sc).ok());
  // b was used last: c goes first among priority 0, then b, then a (priority 1).
  SequenceId touched;
  const PrefixMatch mb = cache.Match(b.data(), b.size());
  ASSERT_TRUE(cache.Attach(mb, &touched).ok());
  ASSERT_TRUE(pool.Free(touched).ok());
  const SequenceId reference = model.FromScratch(a);
  const PrefixCacheStats before = cache.Stats();
  const PoolUsage usage = pool.Usage();
  const uint64_t free_now = usage.budget_bytes - usage.bytes_in_use;
  // One checkpoint's worth: c's rings and blocks.
  ASSERT_TRUE(cache.MakeRoom(free_now + 1).ok());
  EXPECT_EQ(cache.Stats().evictions, 1u);
  EXPECT_EQ(cache.Match(c.data(), c.size()).length, 0u);
  EXPECT_EQ(cache.Match(b.data(), b.size()).length, b.size());
  // live, reference and the checkpoints of a and b are live: freeing one slot evicts b.
  ASSERT_TRUE(cache.MakeRoom(0, /*sequences=*/16 - 3).ok());
  EXPECT_EQ(cache.Stats().evictions, 2u);
  EXPECT_EQ(cache.Match(b.data(), b.size()).length, 0u);
  EXPECT_EQ(cache.Match(a.data(), a.size()).length, a.size());
  // a's checkpoint shares every block with the live sequence: evicting it frees its rings only.
  const PrefixCacheStats last = cache.Stats();
  EXPECT_EQ(last.exclusive_blocks, 0u);
  EXPECT_GT(last.blocks, 0u);
  const uint64_t in_use = pool.Usage().bytes_in_use;
  cache.Clear();
  EXPECT_EQ(in_use - pool.Usage().bytes_in_use, last.bytes);
  model.ExpectSame(live, reference);
  EXPECT_EQ(before.checkpoints, 3u);
  // Nothing left to evict: MakeRoom says so.
  EXPECT_EQ(cache.MakeRoom(usage.budget_bytes).status(), Status::kPoolExhausted);
}

// A match whose checkpoint was evicted since is refused (kStaleView), and so are bad calls;
// none changes the pool or the cache.
TYPED_TEST(PrefixCacheTest, StaleMatchesAndBadCallsAreRefusedAndChangeNothing) {
  KVPool<TypeParam> pool = MakePool<TypeParam>(3);
  ToyModel<TypeParam> model(&pool);
  PrefixCache<TypeParam> cache(&pool);
  const std::vector<TokenId> a = Tokens(50, 8);
  const SequenceId id = model.FromScratch(a);
  ASSERT_TRUE(cache.Insert(id, a.data(), a.size()).ok());
  const PrefixMatch match = cache.Match(a.data(), a.size());
  ASSERT_TRUE(cache.MakeRoom(0, 3 - 1).ok());  // evicts the checkpoint
  SequenceId out;
  Result refused = cache.Attach(match, &out);
  EXPECT_EQ(refused.status(), Status::kStaleView);
  EXPECT_NE(refused.Message().find("evicted"), std::string::npos) << refused.Message();
  // Its id taken by a new checkpoint of other tokens: still stale.
  const std::vector<TokenId> b = Tokens(50, 9);
  const SequenceId other = model.FromScratch(b);
  ASSERT_TRUE(cache.Insert(other, b.data(), b.size()).ok());
  EXPECT_EQ(cache.Attach(match, &out).status(), Status::kStaleView);
  EXPECT_EQ(cache.Attach(PrefixMatch(), &out).status(), Status::kBadArgument);
  EXPECT_EQ(cache.Attach(cache.Match(b.data(), b.size()), nullptr).status(), Status::kBadArgument);
  const PrefixCacheStats stats = cache.Stats();
  const PoolUsage before = pool.Usage();
  EXPECT_EQ(cache.Insert(id, nullptr, 50).status(), Status::kBadArgument);
  refused = cache.Insert(id, a.data(), 49);
  EXPECT_EQ(refused.status(), Status::kBadArgument);
  EXPECT_NE(refused.Message().find("49 tokens, but the sequence holds 50"), std::string::npos)
      << refused.Message();
  EXPECT_EQ(cache.Insert(SequenceId{77, 0}, a.data(), 50).status(), Status::kUnknownSequence);
  // Three sequences live (id, other, the checkpoint): no slot for another checkpoint.
  const Result full = cache.Insert(id, a.data(), a.size());
  EXPECT_EQ(full.status(), Status::kPoolExhausted) << full.Message();
  // Inside a step (one owner appended, the others not): the fork is refused.
  std::vector<TokenId> longer = a;
  longer.push_back(1);
  ASSERT_TRUE(pool.Free(other).ok());
  ASSERT_TRUE(pool.Reserve(id, 1).ok());
  std::vector<float> rows(pool.Plan().Layer(0).spec.KElementsPerSlot(), 0.5f);
  ASSERT_TRUE(pool.AppendF32(id, 0, 50, rows.data(), rows.data(), 1).ok());
  EXPECT_EQ(cache.Insert(id, longer.data(), 51).status(), Status::kBadArgument);
  EXPECT_EQ(cache.Insert(id, a.data(), 50).status(), Status::kWrongPosition);
  EXPECT_EQ(cache.Stats().checkpoints, stats.checkpoints);
  EXPECT_EQ(cache.Stats().inserts, stats.inserts);
  EXPECT_EQ(pool.Usage().live_sequences, before.live_sequences - 1);
}

// Evict(match) takes a checkpoint out at once (an engine whose newer checkpoint holds all of
// it); a second Evict of the same match is stale.
TYPED_TEST(PrefixCacheTest, EvictingAMatchFreesItsCheckpoint) {
  KVPool<TypeParam> pool = MakePool<TypeParam>();
  ToyModel<TypeParam> model(&pool);
  PrefixCache<TypeParam> cache(&pool);
  const std::vector<TokenId> a = Tokens(45, 15);
  const SequenceId id = model.FromScratch(a);
  ASSERT_TRUE(cache.Insert(id, a.data(), a.size()).ok());
  const uint64_t live = pool.Usage().live_sequences;
  const PrefixMatch match = cache.Match(a.data(), a.size());
  ASSERT_TRUE(cache.Evict(match).ok());
  EXPECT_EQ(pool.Usage().live_sequences, live - 1);
  EXPECT_EQ(cache.Stats().evictions, 1u);
  EXPECT_EQ(cache.Evict(match).status(), Status::kStaleView);
  EXPECT_EQ(cache.Match(a.data(), a.size()).length, 0u);
}

// A moved cache keeps its checkpoints; the moved-from one frees nothing twice.
TYPED_TEST(PrefixCacheTest, MovesKeepTheCheckpoints) {
  KVPool<TypeParam> pool = MakePool<TypeParam>();
  ToyModel<TypeParam> model(&pool);
  const std::vector<TokenId> a = Tokens(40, 10);
  const SequenceId id = model.FromScratch(a);
  PrefixCache<TypeParam> first(&pool);
  ASSERT_TRUE(first.Insert(id, a.data(), a.size()).ok());
  PrefixCache<TypeParam> second(std::move(first));
  EXPECT_EQ(second.Match(a.data(), a.size()).length, a.size());
  EXPECT_EQ(pool.Usage().live_sequences, 2u);
  second.Clear();
  EXPECT_EQ(pool.Usage().live_sequences, 1u);
  // The moved-from cache refuses, it does not crash.
  EXPECT_EQ(first.Insert(id, a.data(), a.size()).status(), Status::kBadArgument);  // NOLINT
  EXPECT_EQ(first.Match(a.data(), a.size()).length, 0u);                           // NOLINT
  EXPECT_EQ(first.MakeRoom(1).status(), Status::kBadArgument);                     // NOLINT
  EXPECT_EQ(first.Stats().checkpoints, 0u);                                        // NOLINT
}

// Random conversations on a tight budget: prompts from a few stems, parting anywhere, under two
// salts; each resumes from what Match finds (after MakeRoom when the budget refuses), is
// prefilled on, checked row by row against prefilling from zero, and leaves a checkpoint of a
// random priority; a few sequences stay live across later evictions and keep their rows.
TYPED_TEST(PrefixCacheTest, RandomConversationsReadAsPrefillingFromZero) {
  KVPool<TypeParam> pool = MakePool<TypeParam>(48, 3ull << 20);
  ToyModel<TypeParam> model(&pool);
  PrefixCache<TypeParam> cache(&pool);
  std::mt19937_64 rng(17);
  std::vector<std::vector<TokenId>> stems;
  for (uint64_t i = 0; i < 5; ++i) stems.push_back(Tokens(160, 300 + i));
  struct Live {
    SequenceId id;
    std::vector<TokenId> tokens;
  };
  std::vector<Live> live;
  std::vector<std::vector<TokenId>> earlier[2];  // prompts run, per salt
  uint64_t resumed = 0, compared = 0;
  // Runs `call`; when the budget refuses it, makes room for `bytes` and a slot and runs it again.
  const auto room = [&](uint64_t bytes, const auto& call) {
    Result result = call();
    if (result.status() == Status::kPoolExhausted) {
      (void)cache.MakeRoom(bytes, 1);
      result = call();
    }
    return result;
  };
  for (int step = 0; step < 120; ++step) {
    // A stem cut anywhere, or (a next turn) an earlier prompt of the salt, then new tokens.
    const uint64_t salt = rng() % 2;
    std::vector<TokenId> prompt = stems[rng() % stems.size()];
    prompt.resize(8 + rng() % 150);
    if (!earlier[salt].empty() && rng() % 2 == 0) {
      prompt = earlier[salt][rng() % earlier[salt].size()];
      if (prompt.size() > 200) prompt.resize(100 + rng() % 100);
    }
    const std::vector<TokenId> own = Tokens(1 + rng() % 24, 1000 + static_cast<uint64_t>(step));
    prompt.insert(prompt.end(), own.begin(), own.end());
    earlier[salt].push_back(prompt);
    const PrefixMatch match = cache.Match(prompt.data(), prompt.size() - 1, salt);
    ASSERT_LT(match.length, prompt.size());
    SequenceId id;
    Result made = Status::kPoolExhausted;
    if (match.length > 0) {
      made = room(*cache.AttachBytes(match), [&] { return cache.Attach(match, &id); });
      resumed += made.ok();
    }
    if (!made.ok()) made = room(pool.RingBytesFor(1), [&] { return pool.AddSequence(&id, 1); });
    if (!made.ok()) continue;  // the live sequences hold the budget
    Result filled = Status::kOk;
    for (uint64_t pos = *pool.EndPos(id); pos < prompt.size() && filled.ok();) {
      const uint64_t n = std::min<uint64_t>(8, prompt.size() - pos);
      const std::vector<TokenId> upto(prompt.begin(),
                                      prompt.begin() + static_cast<ptrdiff_t>(pos + n));
      filled = room(*pool.ReserveBytes(id, n), [&] { return model.Prefill(id, upto); });
      pos = *pool.EndPos(id);
    }
    if (!filled.ok()) {
      ASSERT_TRUE(pool.Free(id).ok());
      continue;
    }
    SequenceId scratch;
    const uint64_t scratch_bytes = pool.RingBytesFor(8) + pool.BlockBytesFor(prompt.size());
    (void)cache.MakeRoom(scratch_bytes, 1);
    if (pool.AddSequence(&scratch).ok()) {
      if (model.Prefill(scratch, prompt).ok()) {
        model.ExpectSame(id, scratch);
        ++compared;
      }
      ASSERT_TRUE(pool.Free(scratch).ok());
    }
    (void)room(*pool.RingBytesOf(id), [&] {
      return cache.Insert(id, prompt.data(), prompt.size(), salt, static_cast<uint32_t>(rng() % 3));
    });
    if (live.size() < 3 && rng() % 4 == 0) {
      live.push_back({id, prompt});
    } else {
      ASSERT_TRUE(pool.Free(id).ok());
    }
  }
  EXPECT_GT(resumed, 30u);
  EXPECT_GT(compared, 100u);
  EXPECT_GT(cache.Stats().evictions, 0u);  // the budget made room by evicting
  for (const Live& l : live) {
    SequenceId scratch;
    ASSERT_TRUE(cache.MakeRoom(pool.RingBytesFor(8) + pool.BlockBytesFor(l.tokens.size()), 1).ok());
    ASSERT_TRUE(pool.AddSequence(&scratch).ok());
    ASSERT_TRUE(model.Prefill(scratch, l.tokens).ok());
    model.ExpectSame(l.id, scratch);
    ASSERT_TRUE(pool.Free(scratch).ok());
    ASSERT_TRUE(pool.Free(l.id).ok());
  }
  cache.Clear();
  EXPECT_EQ(pool.Usage().bytes_in_use, 0u);
  EXPECT_EQ(pool.Usage().live_sequences, 0u);
}

// --- Saved and loaded ----------------------------------------------------------------------

// Checkpoints of a prompt every block and at the end of two turns, saved: a new pool and cache
// (another layout's, a restarted engine) load them, share their blocks again as the saved
// ones did, and resume the conversations bit for bit.
template <typename Layout>
void SaveCheckpointsAndResumeAfterARestart(bool dsa) {
  KVPool<Layout> pool = MakePool<Layout>(32, 32ull << 20, dsa);
  ToyModel<Layout> model(&pool);
  PrefixCache<Layout> cache(&pool);
  const uint64_t block = pool.BlockSlots();
  const std::vector<TokenId> prompt = Tokens(5 * block + 7, 11);
  SequenceId id;
  ASSERT_TRUE(pool.AddSequence(&id).ok());
  for (uint64_t end = block; end <= prompt.size(); end += block) {
    const std::vector<TokenId> head(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(end));
    ASSERT_TRUE(model.Prefill(id, head).ok());
    ASSERT_TRUE(cache.Insert(id, head.data(), head.size(), 3, 2).ok());
  }
  ASSERT_TRUE(model.Prefill(id, prompt).ok());
  ASSERT_TRUE(cache.Insert(id, prompt.data(), prompt.size(), 3, 2).ok());
  ASSERT_TRUE(pool.Free(id).ok());
  const PrefixCacheStats saved = cache.Stats();
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  ASSERT_TRUE(SavePrefixCache(cache, "toy", &sink).ok());

  KVPool<Layout> restarted = MakePool<Layout>(32, 32ull << 20, dsa);
  ToyModel<Layout> model2(&restarted);
  PrefixCache<Layout> cache2(&restarted);
  MemorySource source(bytes);
  const Result loaded = LoadPrefixCache(&source, "toy", &cache2);
  ASSERT_TRUE(loaded.ok()) << loaded.Message();
  const PrefixCacheStats restored = cache2.Stats();
  EXPECT_EQ(restored.checkpoints, saved.checkpoints);
  EXPECT_EQ(restored.blocks, saved.blocks);  // shared again, not one copy per checkpoint
  EXPECT_EQ(restored.ring_bytes, saved.ring_bytes);
  EXPECT_EQ(restarted.Usage().blocks_in_use, saved.blocks);
  // Loading again adds nothing.
  MemorySource again(bytes);
  ASSERT_TRUE(LoadPrefixCache(&again, "toy", &cache2).ok());
  EXPECT_EQ(cache2.Stats().checkpoints, saved.checkpoints);
  // A prompt parting inside the third block resumes from the second block's checkpoint, and
  // one going on after the prompt from its end; both as prefilled from zero.
  for (uint64_t part : {2 * block + 5, uint64_t{prompt.size()}}) {
    std::vector<TokenId> next(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(part));
    const std::vector<TokenId> rest = Tokens(30, 200 + part);
    next.insert(next.end(), rest.begin(), rest.end());
    const PrefixMatch match = cache2.Match(next.data(), next.size(), 3);
    ASSERT_EQ(match.length, part == prompt.size() ? part : 2 * block) << part;
    SequenceId resumed;
    ASSERT_TRUE(cache2.Attach(match, &resumed).ok());
    ASSERT_TRUE(model2.Prefill(resumed, next).ok());
    const SequenceId scratch = model2.FromScratch(next);
    model2.ExpectSame(resumed, scratch);
  }
  // Another salt and another model's id find nothing / are refused.
  EXPECT_EQ(cache2.Match(prompt.data(), prompt.size(), 4).length, 0u);
}

TYPED_TEST(PrefixCacheTest, SavedCheckpointsResumeAfterARestart) {
  SaveCheckpointsAndResumeAfterARestart<TypeParam>(/*dsa=*/false);
}

// The same with DSA latents: the prefix file carries the indexer keys of the checkpoints'
// rings and of the shared blocks.
TYPED_TEST(PrefixCacheTest, SavedDsaCheckpointsResumeWithTheirIndexerKeys) {
  SaveCheckpointsAndResumeAfterARestart<TypeParam>(/*dsa=*/true);
}

// Damaged files, another model's, and a pool without room are refused, loading nothing: the
// cache and the pool stay as they were.
TYPED_TEST(PrefixCacheTest, BadPrefixFilesAreRefusedAndChangeNothing) {
  KVPool<TypeParam> pool = MakePool<TypeParam>();
  ToyModel<TypeParam> model(&pool);
  PrefixCache<TypeParam> cache(&pool);
  const std::vector<TokenId> a = Tokens(40, 12), b = Tokens(70, 13);
  const SequenceId sa = model.FromScratch(a), sb = model.FromScratch(b);
  ASSERT_TRUE(cache.Insert(sa, a.data(), a.size()).ok());
  ASSERT_TRUE(cache.Insert(sb, b.data(), b.size()).ok());
  std::vector<uint8_t> bytes;
  VectorSink sink(&bytes);
  ASSERT_TRUE(SavePrefixCache(cache, "toy", &sink).ok());

  KVPool<TypeParam> other = MakePool<TypeParam>(/*max_sequences=*/4);
  ToyModel<TypeParam> other_model(&other);
  PrefixCache<TypeParam> target(&other);
  const std::vector<TokenId> c = Tokens(30, 14);
  const SequenceId sc = other_model.FromScratch(c);
  ASSERT_TRUE(target.Insert(sc, c.data(), c.size()).ok());
  const auto expect_refused = [&](std::vector<uint8_t> file, const std::string& model_id,
                                  Status status, const std::string& what) {
    const PoolUsage before = other.Usage();
    MemorySource source(file);
    const Result result = LoadPrefixCache(&source, model_id, &target);
    EXPECT_EQ(result.status(), status) << what << ": " << result.Message();
    EXPECT_EQ(target.Stats().checkpoints, 1u) << what;
    const PoolUsage after = other.Usage();
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use) << what;
    EXPECT_EQ(after.live_sequences, before.live_sequences) << what;
    EXPECT_EQ(target.Match(c.data(), c.size()).length, c.size()) << what;
  };
  expect_refused(bytes, "another model", Status::kBadState, "another model id");
  for (size_t cut :
       {size_t{0}, size_t{10}, size_t{16}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    expect_refused(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(cut)),
                   "toy", Status::kBadState, "cut at " + std::to_string(cut));
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  expect_refused(longer, "toy", Status::kBadState, "a byte past the end");
  // A flipped bit in a checkpoint's tokens, and one in the last checkpoint's state (the first
  // one has loaded by then: it is taken out again).
  for (size_t at : {size_t{16 + 16 + 8 + 4 + 16 + 40}, bytes.size() - 100}) {
    std::vector<uint8_t> flipped = bytes;
    flipped[at] ^= 4;
    expect_refused(flipped, "toy", Status::kBadState, "bit flipped at " + std::to_string(at));
  }
  // A slot for the first checkpoint but not the second.
  SequenceId blocker;
  ASSERT_TRUE(other.AddSequence(&blocker).ok());
  expect_refused(bytes, "toy", Status::kPoolExhausted, "no slot for the second");
  ASSERT_TRUE(other.Free(blocker).ok());
  MemorySource fine(bytes);
  ASSERT_TRUE(LoadPrefixCache(&fine, "toy", &target).ok());
  EXPECT_EQ(target.Stats().checkpoints, 3u);
}

}  // namespace
}  // namespace kvring
