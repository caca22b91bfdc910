// kvring/sharing/prefix_cache.h: PrefixCache<Layout>, prompt reuse over a KVPool that works
// with sliding windows. A checkpoint is a sequence of the pool that the cache holds: a fork of
// an engine's sequence at the end of a prompt (or every N blocks of one), sharing its global
// blocks and keeping its rings at decode size, the last W_eff - 1 + max(1, R) positions of
// each ring. Match finds the longest prefix of a new prompt that a checkpoint resumes exactly
// (prefix_index.h); Attach forks that checkpoint into a new sequence, at the cost of the
// rings, not the prefix. The engine makes room by evicting checkpoints (its priority first,
// then least recently used); a block a live sequence holds is never freed by an eviction.
// docs/prefix_cache.md states the rule and proves it.
#ifndef KVRING_SHARING_PREFIX_CACHE_H_
#define KVRING_SHARING_PREFIX_CACHE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kvring/base.h"
#include "kvring/sharing/prefix_index.h"
#include "kvring/status.h"
#include "kvring/storage/kv_pool.h"

namespace kvring {

// A point a new sequence can resume from (PrefixCache::Match). length 0: none.
struct PrefixMatch {
  uint64_t length = 0;    // positions an attached sequence holds: the prompt's first `length`
  uint64_t rollback = 0;  // positions past `length` the checkpoint holds (Attach discards them)
  uint32_t checkpoint = detail::PrefixPoint::kNone;
  uint64_t generation = 0;  // Attach refuses a match whose checkpoint was evicted since
};

// What a prefix cache holds and has done (PrefixCache::Stats).
struct PrefixCacheStats {
  uint64_t checkpoints = 0;       // held now
  uint64_t ring_bytes = 0;        // their rings
  uint64_t state_bytes = 0;       // their recurrent states (a hybrid model's)
  uint64_t blocks = 0;            // distinct global blocks they hold
  uint64_t exclusive_blocks = 0;  // of those, held by no other sequence
  uint64_t bytes = 0;    // ring_bytes + state_bytes + exclusive_blocks' bytes: what evicting all
                         // frees
  uint64_t inserts = 0;  // checkpoints taken (an Insert of a prefix already held takes none)
  uint64_t hits = 0;     // Match calls that found a point
  uint64_t misses = 0;   // Match calls that found none
  uint64_t matched_tokens = 0;  // positions the hits resume (not prefilled again)
  uint64_t evictions = 0;
};

namespace detail {

// What a prefix cache reads and does of a pool beyond its public calls: the blocks a
// checkpoint holds, and sharing the equal blocks of two restored checkpoints.
struct PrefixAccess {
  template <typename Layout>
  static const BlockTable& BlocksOf(const KVPool<Layout>& pool, SequenceId id) {
    return pool.sequences_.Get(id).blocks;
  }
  // Makes each of the first `entries` entries of live sequence `into`'s table name the block
  // of `from`'s entry instead when every paged layer's rows of the two are equal (a block
  // `into` then no longer holds is released). The rows `into` reads stay the same bytes.
  template <typename Layout>
  static void ShareEqualBlocks(KVPool<Layout>* pool, SequenceId from, SequenceId into,
                               uint64_t entries) {
    const BlockTable& source = pool->sequences_.Get(from).blocks;
    BlockTable& table = pool->sequences_.Get(into).blocks;
    entries = std::min<uint64_t>(entries, std::min(source.Size(), table.Size()));
    for (uint64_t entry = 0; entry < entries; ++entry) {
      (void)pool->paged_.ShareIfEqual(&table, entry, source[entry]);
    }
  }
};

struct PrefixStateAccess;  // io/prefix_state.h: saves and loads a cache's checkpoints

}  // namespace detail

template <typename Layout>
class PrefixCache {
 public:
  // A cache of `pool`'s sequences, keyed by blocks of the pool's block size; `pool` outlives
  // it. The checkpoints count against the pool's max_sequences and budget.
  explicit PrefixCache(KVPool<Layout>* pool)
      : pool_(pool), index_(pool == nullptr ? 1 : pool->BlockSlots()) {
    KVRING_CHECK(pool != nullptr);
  }
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;
  PrefixCache(PrefixCache&& other) noexcept { *this = std::move(other); }
  PrefixCache& operator=(PrefixCache&& other) noexcept {
    if (this != &other) {
      Clear();
      pool_ = std::exchange(other.pool_, nullptr);
      index_ = std::move(other.index_);
      entries_ = std::move(other.entries_);
      tick_ = other.tick_;
      stats_ = other.stats_;
    }
    return *this;
  }
  // Frees every checkpoint's sequence. A moved-from cache holds none and refuses every call
  // (kBadArgument) but Match (no match) and Stats.
  ~PrefixCache() { Clear(); }

  // Takes a checkpoint of `sequence`, which holds the K/V of tokens[0, count) (count ==
  // EndPos(sequence), between steps), under `salt` (a tenant's: prompts under different salts
  // never match). `priority`: the engine's, for eviction (lower goes first). A prefix already
  // held under the salt takes nothing (its priority becomes the larger, its use now).
  // Refusals change nothing: kUnknownSequence, kBadArgument (null tokens, a count that is not
  // the sequence's end), kWrongPosition (inside a step, or a recurrent state after the end not
  // written), kPoolExhausted (no sequence slot, or
  // no room for a copy of the sequence's rings: MakeRoom first). Costs a fork: the rings (and
  // a hybrid model's recurrent states, whose rollback slots let a match end before the
  // checkpoint as far as the engine wrote every position's state).
  Result Insert(SequenceId sequence, const TokenId* tokens, uint64_t count, uint64_t salt = 0,
                uint32_t priority = 0) {
    if (pool_ == nullptr) return MovedFrom();
    const ValueResult<uint64_t> end = pool_->EndPos(sequence);
    if (!end.ok()) return end;
    if (tokens == nullptr) return Result::Refused(Status::kBadArgument, "Insert: tokens is null");
    if (count == 0 || count != *end) {
      return Result::Refused(Status::kBadArgument,
                             "Insert: %llu tokens, but the sequence holds %llu positions; give "
                             "the tokens of every position it holds (at least one)",
                             count, *end);
    }
    for (const LayerInfo& info : pool_->Plan().Layers()) {
      // A hybrid model's checkpoint resumes from its recurrent states after `count`.
      if (info.HasState() && !pool_->State(sequence, info.index).ok()) {
        return Result::Refused(Status::kWrongPosition,
                               "Insert: layers[%llu] holds no recurrent state after the "
                               "sequence's %llu positions (StateAfter): a checkpoint could not "
                               "resume",
                               uint64_t{info.index}, count);
      }
    }
    const uint32_t held = index_.Find(salt, tokens, count);
    if (held != detail::PrefixIndex::kNone) {
      entries_[held].priority = std::max(entries_[held].priority, priority);
      entries_[held].last_use = ++tick_;
      return Status::kOk;
    }
    SequenceId fork;
    const Result forked = pool_->Fork(sequence, &fork);
    if (!forked.ok()) return forked;
    // Decode rings (a second copy, so only when the source's are larger); kept larger if
    // they cannot be allocated.
    if (*pool_->RingBytesOf(fork) != pool_->RingBytesFor(1)) (void)pool_->Resize(fork, 1);
    (void)Adopt(fork, salt, priority, tokens, count);
    ++stats_.inserts;
    return Status::kOk;
  }

  // Returns the longest prefix of tokens[0, count) under `salt` a new sequence can resume from
  // exactly (length 0: none): a checkpoint holds every global block and every ring position a
  // query past it reads. Pass the prompt without its last token when the engine needs that
  // token's logits. Counts a hit or a miss. O(prompt + checkpoints along it).
  PrefixMatch Match(const TokenId* tokens, uint64_t count, uint64_t salt = 0) {
    PrefixMatch match;
    if (pool_ != nullptr && tokens != nullptr && count != 0) {
      const detail::PrefixPoint point = index_.Longest(salt, tokens, count);
      if (point.checkpoint != detail::PrefixPoint::kNone) {
        match = PrefixMatch{point.length, point.rollback, point.checkpoint,
                            entries_[point.checkpoint].generation};
      }
    }
    if (match.length == 0) {
      ++stats_.misses;
    } else {
      ++stats_.hits;
      stats_.matched_tokens += match.length;
    }
    return match;
  }

  // Returns the bytes Attach(match) takes from the pool's budget (the checkpoint's rings and
  // recurrent states), or kStaleView for a match whose checkpoint is gone.
  ValueResult<uint64_t> AttachBytes(const PrefixMatch& match) const {
    const Result live = CheckMatch(match);
    if (!live.ok()) return live;
    return *pool_->RingBytesOf(entries_[match.checkpoint].sequence) + pool_->Plan().StateBytes();
  }

  // Adds a sequence holding the first match.length positions of the match's checkpoint and
  // sets *sequence: it shares the checkpoint's blocks (copy on write, as a fork) and copies
  // its rings; the engine appends the prompt's rest from match.length. Refusals change
  // nothing: kBadArgument (null sequence, a match of length 0), kStaleView (its checkpoint was
  // evicted since Match: match again), and those of KVPool::Fork (kPoolExhausted: MakeRoom
  // with AttachBytes first).
  Result Attach(const PrefixMatch& match, SequenceId* sequence) {
    if (sequence == nullptr || match.length == 0) {
      return Result::Refused(Status::kBadArgument,
                             "Attach: a match of %llu positions into a sequence at %llu (a "
                             "match of 0 positions resumes nothing; a sequence may not be null)",
                             match.length, sequence == nullptr ? 0 : 1);
    }
    const Result live = CheckMatch(match);
    if (!live.ok()) return live;
    Entry& entry = entries_[match.checkpoint];
    SequenceId fork;
    const Result forked = pool_->Fork(entry.sequence, &fork);
    if (!forked.ok()) return forked;
    if (match.rollback != 0) {
      const RollbackResult rolled = pool_->Rollback(fork, match.rollback);
      if (!rolled.ok()) {
        (void)pool_->Free(fork);
        return rolled;
      }
    }
    entry.last_use = ++tick_;
    *sequence = fork;
    return Status::kOk;
  }

  // Evicts checkpoints, lowest priority first and least recently used among equals, until
  // the pool has `bytes` of its budget free (blocks included: ReserveBytes' figure) and
  // `sequences` sequence slots free. kPoolExhausted when evicting every checkpoint is not
  // enough (those evicted stay evicted; the pool's live sequences hold the rest).
  Result MakeRoom(uint64_t bytes, uint32_t sequences = 0) {
    if (pool_ == nullptr) return MovedFrom();
    while (!HasRoom(bytes, sequences)) {
      uint32_t victim = detail::PrefixPoint::kNone;
      for (uint32_t id = 0; id < entries_.size(); ++id) {
        if (!index_.IsLive(id)) continue;
        if (victim == detail::PrefixPoint::kNone || Evicts(entries_[id], entries_[victim])) {
          victim = id;
        }
      }
      if (victim == detail::PrefixPoint::kNone) {
        return Result::Refused(Status::kPoolExhausted,
                               "MakeRoom: %llu bytes and %llu sequences wanted, but every "
                               "checkpoint is evicted and the pool's live sequences hold the rest",
                               bytes, uint64_t{sequences});
      }
      Erase(victim);
      ++stats_.evictions;
    }
    return Status::kOk;
  }

  // Evicts the checkpoint of `match` now (an engine that will not resume from it again: a
  // conversation whose newer checkpoint holds all of it). kStaleView when it is gone already.
  Result Evict(const PrefixMatch& match) {
    const Result live = CheckMatch(match);
    if (!live.ok()) return live;
    Erase(match.checkpoint);
    ++stats_.evictions;
    return Status::kOk;
  }

  // Frees every checkpoint (not counted as evictions).
  void Clear() {
    if (pool_ == nullptr) return;
    for (uint32_t id = 0; id < entries_.size(); ++id) {
      if (index_.IsLive(id)) Erase(id);
    }
  }

  // Returns what the cache holds now and its counts. O(checkpoints + their blocks); allocates.
  PrefixCacheStats Stats() const {
    PrefixCacheStats stats = stats_;
    if (pool_ == nullptr) return stats;
    std::vector<uint32_t> blocks;
    for (uint32_t id = 0; id < entries_.size(); ++id) {
      if (!index_.IsLive(id)) continue;
      ++stats.checkpoints;
      stats.ring_bytes += *pool_->RingBytesOf(entries_[id].sequence);
      stats.state_bytes += pool_->Plan().StateBytes();
      const BlockTable& table = detail::PrefixAccess::BlocksOf(*pool_, entries_[id].sequence);
      blocks.insert(blocks.end(), table.Data(), table.Data() + table.Size());
    }
    std::sort(blocks.begin(), blocks.end());
    for (size_t i = 0; i < blocks.size();) {
      size_t j = i;
      while (j < blocks.size() && blocks[j] == blocks[i]) ++j;
      ++stats.blocks;
      if (pool_->BlockRefCount(blocks[i]) == j - i) ++stats.exclusive_blocks;
      i = j;
    }
    stats.bytes =
        stats.ring_bytes + stats.state_bytes + stats.exclusive_blocks * pool_->Usage().block_bytes;
    return stats;
  }

 private:
  friend struct detail::PrefixStateAccess;

  struct Entry {
    SequenceId sequence;
    uint32_t priority = 0;
    uint64_t last_use = 0;
    uint64_t generation = 0;  // advanced when the checkpoint goes
  };

  static Result MovedFrom() {
    return Result::Refused(Status::kBadArgument, "PrefixCache: moved from; it has no pool");
  }

  Result CheckMatch(const PrefixMatch& match) const {
    if (pool_ == nullptr) return MovedFrom();
    if (index_.IsLive(match.checkpoint) &&
        entries_[match.checkpoint].generation == match.generation &&
        index_.LengthOf(match.checkpoint) == match.length + match.rollback) {
      return Status::kOk;
    }
    return Result::Refused(Status::kStaleView,
                           "checkpoint %llu of the match (generation %llu) was evicted since "
                           "Match; match again",
                           uint64_t{match.checkpoint}, match.generation);
  }

  // Returns whether `a` goes before `b`: lower priority, then older use.
  static bool Evicts(const Entry& a, const Entry& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.last_use < b.last_use;
  }

  bool HasRoom(uint64_t bytes, uint32_t sequences) const {
    const PoolUsage usage = pool_->Usage();
    const uint64_t free_bytes = usage.budget_bytes - usage.bytes_in_use;
    const uint64_t blocks = usage.block_bytes == 0 ? 0 : bytes / usage.block_bytes;
    return free_bytes >= bytes && usage.free_blocks >= blocks &&
           pool_->Spec().max_sequences - usage.live_sequences >= sequences;
  }

  // Adds `sequence` (the cache's from now on) as the checkpoint of tokens[0, count) under
  // `salt`, which the cache does not hold; returns its id.
  uint32_t Adopt(SequenceId sequence, uint64_t salt, uint32_t priority, const TokenId* tokens,
                 uint64_t count) {
    const ValueResult<uint64_t> rollback = pool_->RollbackLimit(sequence);
    const uint32_t id = index_.Add(salt, tokens, count, rollback.ok() ? *rollback : 0);
    if (id >= entries_.size()) entries_.resize(id + 1);
    Entry& entry = entries_[id];
    entry.sequence = sequence;
    entry.priority = priority;
    entry.last_use = ++tick_;
    return id;
  }

  void Erase(uint32_t id) {
    (void)pool_->Free(entries_[id].sequence);
    index_.Remove(id);
    ++entries_[id].generation;
  }

  KVPool<Layout>* pool_ = nullptr;
  detail::PrefixIndex index_;
  std::vector<Entry> entries_;  // by checkpoint id
  uint64_t tick_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace kvring

#endif  // KVRING_SHARING_PREFIX_CACHE_H_
