// kvring/storage/layer_table.h: what KVCache and KVPool know of each layer of their plan: the
// layer whose rows it reads (its owner), its own visibility, where an owner's rows live (a
// ring, flat storage or blocks) and which storage of that kind holds them; and the refusals of
// a call naming a layer the model lacks or one that reads another's K/V.
#ifndef KVRING_STORAGE_LAYER_TABLE_H_
#define KVRING_STORAGE_LAYER_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvring/base.h"
#include "kvring/layer_plan.h"
#include "kvring/status.h"
#include "kvring/visibility.h"

namespace kvring {
namespace detail {

// What saves and loads a KVCache or a KVPool sequence, the friend of both (io/state_access.h).
struct StateAccess;
// What a prefix cache reads of a KVPool, its friend (sharing/prefix_cache.h).
struct PrefixAccess;

// Where an owning layer's rows live.
enum class Residence : uint8_t {
  kRing,   // a ring per sequence (sliding and chunked owners)
  kFlat,   // one buffer of the whole context (KVCache's global owners)
  kPaged,  // blocks of a block store (KVPool's global owners)
};

struct LayerEntry {
  size_t owner = 0;
  Visibility visibility;                   // the layer's own rule (a consumer's, not its owner's)
  Residence residence = Residence::kRing;  // owners only
  size_t storage = 0;   // owners: index among the owners of the same residence, in layer order
  bool attends = true;  // false: a layer without attention (a recurrent one), no K/V at all
  // Owners: a DSA latent's indexer key elements per position, which its storage keeps in the
  // V stream (attention views drop that stream; IndexerKeys reads it); 0 without.
  uint32_t indexer_dim = 0;
};

class LayerTable {
 public:
  LayerTable() = default;

  // Returns the table of `plan`: owners whose capacity is the context live in `full`
  // (kFlat or kPaged), the others in rings. O(layers).
  static LayerTable Of(const LayerPlan& plan, Residence full) {
    LayerTable table;
    table.entries_.resize(plan.NumLayers());
    for (const LayerInfo& layer : plan.Layers()) {
      LayerEntry& entry = table.entries_[layer.index];
      entry.owner = layer.owner;
      entry.visibility = Visibility::Of(layer.spec);
      entry.attends = layer.spec.attends;
      if (!layer.OwnsKV()) continue;
      entry.indexer_dim = layer.spec.indexer_dim;
      table.owners_.push_back(layer.index);
      entry.residence = layer.capacity >= plan.Runtime().context ? full : Residence::kRing;
      std::vector<size_t>& same = entry.residence == Residence::kRing ? table.rings_ : table.full_;
      entry.storage = same.size();
      same.push_back(layer.index);
    }
    return table;
  }

  size_t NumLayers() const { return entries_.size(); }
  // Returns the entry of `layer` (< NumLayers(), checked).
  const LayerEntry& Entry(size_t layer) const {
    KVRING_CHECK(layer < entries_.size());
    return entries_[layer];
  }
  size_t Owner(size_t layer) const { return Entry(layer).owner; }
  bool OwnsKV(size_t layer) const { return Owner(layer) == layer && Entry(layer).attends; }
  bool Attends(size_t layer) const { return Entry(layer).attends; }
  // Returns the entry of the owner of `layer` (checked).
  const LayerEntry& OwnerEntry(size_t layer) const { return entries_[Owner(layer)]; }
  // The owning layers, in order.
  const std::vector<size_t>& Owners() const { return owners_; }
  // The owners that live in rings, and those that do not, in order (storage indices).
  const std::vector<size_t>& RingOwners() const { return rings_; }
  const std::vector<size_t>& FullOwners() const { return full_; }

  // kBadArgument for a layer past the model.
  Result CheckLayer(size_t layer) const {
    if (layer < entries_.size()) return Status::kOk;
    return Result::Refused(Status::kBadArgument, "layers[%llu]: the model has %llu layers", layer,
                           entries_.size());
  }
  // CheckLayer, and kBadArgument for a layer without attention: the refusals of a K/V read.
  Result CheckAttends(size_t layer) const {
    const Result known = CheckLayer(layer);
    if (!known.ok() || Attends(layer)) return known;
    return Result::Refused(Status::kBadArgument,
                           "layers[%llu] has no attention (a recurrent layer): it holds no K/V",
                           uint64_t{layer});
  }
  // CheckAttends, and kNotOwner for a layer that reads another's K/V: the refusals of a write.
  Result CheckWritable(size_t layer) const {
    const Result known = CheckAttends(layer);
    if (!known.ok() || OwnsKV(layer)) return known;
    return Result::Refused(Status::kNotOwner,
                           "layers[%llu] reads the KV of layers[%llu]; append to that owner",
                           uint64_t{layer}, uint64_t{Owner(layer)});
  }

 private:
  std::vector<LayerEntry> entries_;
  std::vector<size_t> owners_;
  std::vector<size_t> rings_;
  std::vector<size_t> full_;
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_LAYER_TABLE_H_
