// tests/reference/history_storage.h: a History appended into kvring's own storage classes
// (RingKV, GlobalKV) with AppendBF16, so that attention tests and benchmarks read K/V as an
// engine's storage holds them; the History stays the oracle's input. Allocates.
#ifndef KVRING_TESTS_REFERENCE_HISTORY_STORAGE_H_
#define KVRING_TESTS_REFERENCE_HISTORY_STORAGE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kvring/base.h"
#include "kvring/layer_plan.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/ring_index.h"
#include "kvring/status.h"
#include "kvring/storage/global_kv.h"
#include "kvring/storage/kv_pool.h"
#include "kvring/storage/ring_kv.h"
#include "kvring/storage/storage_spec.h"
#include "reference/kv_fixture.h"

namespace kvring {
namespace reference {

// Returns the spec of one layer's storage shaped like `history`: `num_slots` slots, `keep`
// positions before a batch that its queries read (span - 1), `context` positions at most and
// `max_rollback` positions of rollback headroom.
inline StorageSpec SpecOf(const History& history, uint64_t num_slots, uint64_t keep,
                          uint64_t context, uint64_t max_rollback = 0) {
  StorageSpec spec;
  spec.shape.num_slots = num_slots;
  spec.shape.num_kv_heads = history.num_kv_heads;
  spec.shape.head_dim = history.head_dim;
  spec.shape.v_head_dim = history.v_head_dim;
  spec.keep = keep;
  spec.max_rollback = max_rollback;
  spec.context = context;
  return spec;
}

// Appends positions [kv->EndPos(), end_pos) of `history` to `kv` (a RingKV or GlobalKV) with
// AppendBF16, in batches as large as `kv` takes without growing: num_slots - keep positions
// while a ring wraps, everything at once otherwise. Returns the first refused append's status.
// Cost: the bytes of the rows.
template <typename KV>
Status AppendHistory(const History& history, uint64_t end_pos, KV* kv) {
  const RingIndex& index = kv->Index();
  const uint64_t max_batch = index.Wraps() ? index.NumSlots() - index.Keep() : end_pos;
  const size_t k_row = size_t{history.num_kv_heads} * history.head_dim;
  const size_t v_row = size_t{history.num_kv_heads} * history.v_head_dim;
  while (kv->EndPos() < end_pos) {
    const uint64_t pos = kv->EndPos();
    const uint64_t num_tokens = std::min(max_batch, end_pos - pos);
    const Status status =
        kv->AppendBF16(pos, history.k.data() + pos * k_row,
                       v_row != 0 ? history.v.data() + pos * v_row : nullptr, num_tokens);
    if (status != Status::kOk) return status;
  }
  return Status::kOk;
}

// Returns a KV (RingKV<Layout> or GlobalKV<Layout>) created from `spec` and appended
// positions [0, end_pos) of `history`, or an Error if it refused the spec or an append.
// A ring holds the newest spec.shape.num_slots of them, and never grows.
template <typename KV>
Expected<KV> StoreHistory(const History& history, const StorageSpec& spec, uint64_t end_pos) {
  Expected<KV> kv = KV::Create(spec);
  if (!kv.ok()) return kv;
  const Status status = AppendHistory(history, end_pos, &kv.value());
  if (status != Status::kOk) {
    return Error{"append", std::string("refused with ") + ToString(status) + " at position " +
                               std::to_string(kv->EndPos())};
  }
  if (kv->NumSlots() != spec.shape.num_slots) {
    return Error{"shape.num_slots", "grew to " + std::to_string(kv->NumSlots())};
  }
  return kv;
}

// A History in a KVPool's paged layer: one global layer shaped like the history, appended
// in chunks alternating with a second sequence's (so that the table's blocks are not in
// order), and forked half way (so that the view's table holds blocks it shares with the
// fork's source and one it copied). View(visibility) is the fork's view under `visibility`.
template <typename Layout>
struct PagedHistory {
  KVPool<Layout> pool;
  SequenceId id;

  static PagedHistory Make(const History& history, uint64_t end_pos, uint64_t block_slots,
                           Format format = Format::kBF16) {
    LayerSpec spec = LayerSpec::Global(history.num_kv_heads, history.head_dim);
    if (history.v_head_dim == 0) {
      spec = LayerSpec::Latent(history.head_dim);
    } else {
      spec.v_head_dim = history.v_head_dim;
    }
    const LayerPlan plan = LayerPlan::Builder()
                               .AddLayer(spec)
                               .SetContext(end_pos)
                               .SetFormat(format)
                               .SetLayout<Layout>()
                               .Build()
                               .value();
    PoolSpec pool_spec;
    pool_spec.budget_bytes = 3 * (plan.Layer(0).slot_bytes * (end_pos + 2 * block_slots) + 4096);
    pool_spec.max_sequences = 3;
    pool_spec.block_slots = block_slots;
    PagedHistory paged{KVPool<Layout>::Create(plan, pool_spec).value(), SequenceId()};
    SequenceId decoy;
    KVRING_CHECK(paged.pool.AddSequence(&paged.id).ok() && paged.pool.AddSequence(&decoy).ok());
    const size_t k_row = size_t{history.num_kv_heads} * history.head_dim;
    const size_t v_row = size_t{history.num_kv_heads} * history.v_head_dim;
    const auto append = [&](SequenceId id, uint64_t pos, uint64_t n) {
      const Result result =
          paged.pool.AppendBF16(id, 0, pos, history.k.data() + pos * k_row,
                                v_row != 0 ? history.v.data() + pos * v_row : nullptr, n);
      KVRING_CHECK(result.ok());
    };
    uint64_t pos = 0, chunk = 7;
    bool forked = false;
    while (pos < end_pos) {
      const uint64_t n = std::min(chunk, end_pos - pos);
      if (!forked && pos > 0 && pos + n > end_pos / 2) {
        // Fork half way: the rest goes to the fork, whose first write copies its last block.
        SequenceId fork;
        KVRING_CHECK(paged.pool.Fork(paged.id, &fork).ok());
        paged.id = fork;
        forked = true;
      }
      append(paged.id, pos, n);
      append(decoy, pos, n);
      pos += n;
      chunk = chunk * 5 % 61 + 1;
    }
    // The test this serves needs a table out of order: the alternating appends make one.
    const KVView<Layout> view = *paged.pool.View(paged.id, 0);
    bool in_order = true;
    for (uint64_t i = 0; i < *paged.pool.BlocksOf(paged.id); ++i) in_order &= view.blocks[i] == i;
    KVRING_CHECK(view.Paged() && (!in_order || *paged.pool.BlocksOf(paged.id) < 2));
    return paged;
  }
  KVView<Layout> View(const Visibility& visibility) const {
    KVView<Layout> view = *pool.View(id, 0);
    view.visibility = visibility;
    return view;
  }
};

}  // namespace reference
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_HISTORY_STORAGE_H_
