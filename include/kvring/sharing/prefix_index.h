// kvring/sharing/prefix_index.h: the keys of a prefix cache. Which checkpoint holds the K/V of
// which token prefix, and the longest prefix of a prompt that one of them resumes exactly.
// The token ids of each full block (of the pool's block size) are a node of a tree per salt,
// found by a chain hash of the salt and every token before the block's end, then compared
// token by token with the node's parent and tokens: a hash only proposes, equal content under
// the same salt is the only way to match. A checkpoint hangs on the node of its last full
// block with the tokens past it. No pool, no K/V: the rule alone (docs/prefix_cache.md).
#ifndef KVRING_SHARING_PREFIX_INDEX_H_
#define KVRING_SHARING_PREFIX_INDEX_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvring/base.h"

namespace kvring {

// A token id as engines keep them (llama.cpp's llama_token, transformers' input ids).
using TokenId = int32_t;

namespace detail {

// Returns `h` mixed with `x` (splitmix64's finalizer over their sum): the chain hash's step.
inline uint64_t MixPrefixHash(uint64_t h, uint64_t x) {
  uint64_t z = h + 0x9e3779b97f4a7c15ull + x * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A point a new sequence may resume from: `length` positions of checkpoint `checkpoint`,
// which holds `rollback` more (its fork discards them).
struct PrefixPoint {
  static constexpr uint32_t kNone = ~uint32_t{0};
  uint32_t checkpoint = kNone;
  uint64_t length = 0;
  uint64_t rollback = 0;
};

class PrefixIndex {
 public:
  static constexpr uint32_t kNone = PrefixPoint::kNone;
  using Mix = uint64_t (*)(uint64_t, uint64_t);

  PrefixIndex() = default;
  // `mix` is the chain hash's step: tests pass one that collides on every block.
  explicit PrefixIndex(uint64_t block_tokens, Mix mix = MixPrefixHash)
      : block_(block_tokens), mix_(mix) {
    KVRING_DASSERT(block_tokens > 0);
  }

  uint64_t BlockTokens() const { return block_; }
  size_t NumCheckpoints() const { return checkpoints_.size() - free_checkpoints_.size(); }
  size_t NumNodes() const { return nodes_.size() - free_nodes_.size(); }
  bool IsLive(uint32_t checkpoint) const {
    return checkpoint < checkpoints_.size() && checkpoints_[checkpoint].node != kNone;
  }
  uint64_t LengthOf(uint32_t checkpoint) const { return checkpoints_[checkpoint].length; }
  uint64_t SaltOf(uint32_t checkpoint) const { return nodes_[checkpoints_[checkpoint].node].salt; }
  // Sets *tokens to the tokens of live checkpoint `checkpoint`, from its path's blocks.
  void TokensOf(uint32_t checkpoint, std::vector<TokenId>* tokens) const {
    const Checkpoint& c = checkpoints_[checkpoint];
    tokens->assign(c.length, 0);
    std::copy(c.tail.begin(), c.tail.end(), tokens->end() - static_cast<ptrdiff_t>(c.tail.size()));
    for (uint32_t node = c.node; nodes_[node].parent != kNone; node = nodes_[node].parent) {
      std::copy(nodes_[node].tokens.begin(), nodes_[node].tokens.end(),
                tokens->begin() + static_cast<ptrdiff_t>((nodes_[node].depth - 1) * block_));
    }
  }

  // Returns the checkpoint at exactly tokens[0, count) under `salt`, or kNone.
  uint32_t Find(uint64_t salt, const TokenId* tokens, uint64_t count) const {
    std::vector<uint32_t> path;
    Walk(salt, tokens, count, &path);
    if (path.empty() || Depth(path.back()) != count / block_) return kNone;
    const uint64_t done = count / block_ * block_;
    for (uint32_t id : nodes_[path.back()].checkpoints) {
      const Checkpoint& checkpoint = checkpoints_[id];
      if (checkpoint.length == count &&
          std::equal(checkpoint.tail.begin(), checkpoint.tail.end(), tokens + done)) {
        return id;
      }
    }
    return kNone;
  }

  // Adds a checkpoint at tokens[0, count) under `salt` (count > 0) that may discard its
  // newest `rollback` positions, and returns its id (ids of removed checkpoints are reused).
  uint32_t Add(uint64_t salt, const TokenId* tokens, uint64_t count, uint64_t rollback) {
    std::vector<uint32_t> path;
    Walk(salt, tokens, count, &path);
    if (path.empty()) path.push_back(NewNode(kNone, salt, mix_(salt, 0), nullptr));
    while (Depth(path.back()) < count / block_) {
      const uint64_t from = Depth(path.back()) * block_;
      const uint32_t parent = path.back();
      path.push_back(
          NewNode(parent, salt, BlockHash(nodes_[parent].hash, tokens + from), tokens + from));
    }
    const uint32_t id = TakeId(&checkpoints_, &free_checkpoints_);
    Checkpoint& checkpoint = checkpoints_[id];
    checkpoint.node = path.back();
    checkpoint.tail.assign(tokens + count / block_ * block_, tokens + count);
    checkpoint.length = count;
    checkpoint.rollback = rollback;
    max_rollback_ = std::max(max_rollback_, rollback);
    nodes_[path.back()].checkpoints.push_back(id);
    return id;
  }

  // Removes live checkpoint `checkpoint`, and the nodes no checkpoint needs any longer.
  void Remove(uint32_t checkpoint) {
    KVRING_DASSERT(IsLive(checkpoint));
    uint32_t node = checkpoints_[checkpoint].node;
    std::vector<uint32_t>& on_node = nodes_[node].checkpoints;
    on_node.erase(std::find(on_node.begin(), on_node.end(), checkpoint));
    checkpoints_[checkpoint] = Checkpoint();
    free_checkpoints_.push_back(checkpoint);
    while (node != kNone && nodes_[node].checkpoints.empty() && nodes_[node].children.empty()) {
      const uint32_t parent = nodes_[node].parent;
      if (parent != kNone) {
        std::vector<uint32_t>& siblings = nodes_[parent].children;
        siblings.erase(std::find(siblings.begin(), siblings.end(), node));
      }
      const auto range = by_hash_.equal_range(nodes_[node].hash);
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second == node) {
          by_hash_.erase(it);
          break;
        }
      }
      nodes_[node] = Node();
      free_nodes_.push_back(node);
      node = parent;
    }
  }

  // Returns the longest point of tokens[0, count) under `salt` that a checkpoint resumes
  // exactly (length 0: none). A checkpoint C of length n whose tokens share the prompt's first
  // m (<= n) gives n when m == n, and m when C may discard its newest n - m positions; the
  // longest wins, then the one discarding least, then the first found.
  PrefixPoint Longest(uint64_t salt, const TokenId* tokens, uint64_t count) const {
    PrefixPoint best;
    std::vector<uint32_t> path;
    Walk(salt, tokens, count, &path);
    // From the deepest node the prompt reaches up: a node at depth d and what hangs below it
    // off the prompt's path give less than (d + 1) blocks.
    for (size_t i = path.size(); i-- > 0;) {
      const Node& node = nodes_[path[i]];
      const uint64_t from = node.depth * block_;
      if (best.length >= from + block_) break;
      for (uint32_t id : node.checkpoints) {
        const std::vector<TokenId>& tail = checkpoints_[id].tail;
        Consider(id, from + Common(tail.data(), tail.size(), tokens + from, count - from), &best);
      }
      // Checkpoints below a child off the path share the prompt up to inside the child's
      // block; they resume there if they may discard the rest.
      for (uint32_t child : node.children) {
        if (i + 1 < path.size() && child == path[i + 1]) continue;
        const std::vector<TokenId>& block = nodes_[child].tokens;
        const uint64_t shared =
            from + Common(block.data(), block.size(), tokens + from, count - from);
        std::vector<uint32_t> stack{child};
        while (!stack.empty()) {
          const Node& below = nodes_[stack.back()];
          stack.pop_back();
          if (below.depth * block_ - shared > max_rollback_) continue;  // longer further down
          for (uint32_t id : below.checkpoints) Consider(id, shared, &best);
          stack.insert(stack.end(), below.children.begin(), below.children.end());
        }
      }
    }
    return best;
  }

 private:
  struct Node {
    uint32_t parent = kNone;  // kNone: the root of its salt
    uint64_t depth = 0;       // full blocks from the root (a root: 0)
    uint64_t salt = 0;
    uint64_t hash = 0;
    std::vector<TokenId> tokens;  // the block's (a root: none)
    std::vector<uint32_t> children;
    std::vector<uint32_t> checkpoints;
  };
  struct Checkpoint {
    uint32_t node = kNone;  // kNone: a free id
    std::vector<TokenId> tail;
    uint64_t length = 0;
    uint64_t rollback = 0;
  };

  uint64_t Depth(uint32_t node) const { return nodes_[node].depth; }

  uint64_t BlockHash(uint64_t parent_hash, const TokenId* block) const {
    uint64_t h = parent_hash;
    for (uint64_t i = 0; i < block_; ++i) h = mix_(h, static_cast<uint32_t>(block[i]));
    return h;
  }

  static uint64_t Common(const TokenId* a, uint64_t a_count, const TokenId* b, uint64_t b_count) {
    const uint64_t n = std::min(a_count, b_count);
    return static_cast<uint64_t>(std::mismatch(a, a + n, b).first - a);
  }

  void Consider(uint32_t id, uint64_t shared, PrefixPoint* best) const {
    const Checkpoint& checkpoint = checkpoints_[id];
    if (checkpoint.length - shared > checkpoint.rollback || shared == 0) return;
    const uint64_t rollback = checkpoint.length - shared;
    if (shared > best->length || (shared == best->length && rollback < best->rollback)) {
      *best = PrefixPoint{id, shared, rollback};
    }
  }

  // Sets *path to the root of `salt` and the nodes of the prompt's full blocks that exist, in
  // order (empty: no root).
  void Walk(uint64_t salt, const TokenId* tokens, uint64_t count,
            std::vector<uint32_t>* path) const {
    path->clear();
    uint32_t node =
        Lookup(mix_(salt, 0), [&](const Node& n) { return n.parent == kNone && n.salt == salt; });
    while (node != kNone) {
      path->push_back(node);
      const uint64_t from = Depth(node) * block_;
      if (count - from < block_) break;
      const TokenId* block = tokens + from;
      node = Lookup(BlockHash(nodes_[node].hash, block), [&](const Node& n) {
        return n.parent == path->back() && std::equal(block, block + block_, n.tokens.begin());
      });
    }
  }

  template <typename Matches>
  uint32_t Lookup(uint64_t hash, const Matches& matches) const {
    const auto range = by_hash_.equal_range(hash);
    for (auto it = range.first; it != range.second; ++it) {
      if (matches(nodes_[it->second])) return it->second;
    }
    return kNone;
  }

  // Returns a free id of `items` (a removed one's, or a new one at the end).
  template <typename T>
  static uint32_t TakeId(std::vector<T>* items, std::vector<uint32_t>* free) {
    if (free->empty()) {
      items->emplace_back();
      return static_cast<uint32_t>(items->size() - 1);
    }
    const uint32_t id = free->back();
    free->pop_back();
    return id;
  }

  uint32_t NewNode(uint32_t parent, uint64_t salt, uint64_t hash, const TokenId* block) {
    const uint32_t id = TakeId(&nodes_, &free_nodes_);
    Node& node = nodes_[id];
    node.parent = parent;
    node.depth = parent == kNone ? 0 : nodes_[parent].depth + 1;
    node.salt = salt;
    node.hash = hash;
    if (block != nullptr) node.tokens.assign(block, block + block_);
    if (parent != kNone) nodes_[parent].children.push_back(id);
    by_hash_.emplace(hash, id);
    return id;
  }

  uint64_t block_ = 1;
  Mix mix_ = MixPrefixHash;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_nodes_;
  std::vector<Checkpoint> checkpoints_;
  std::vector<uint32_t> free_checkpoints_;
  std::unordered_multimap<uint64_t, uint32_t> by_hash_;  // chain hash -> nodes
  uint64_t max_rollback_ = 0;  // of every checkpoint added (a bound for Longest's search)
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_SHARING_PREFIX_INDEX_H_
