// kvring/plan/specs.h: what a plan is built from: one layer's attention as the model defines
// it (LayerSpec) and what the engine will do with the cache (RuntimeSpec). Plain data with the
// arithmetic of one spec; the plan itself is plan/layer_plan.h.
#ifndef KVRING_PLAN_SPECS_H_
#define KVRING_PLAN_SPECS_H_

#include <cstdint>

#include "kvring/formats/format.h"
#include "kvring/kinds.h"

namespace kvring {

// Marks a layer that owns its K/V (LayerSpec::kv_source).
inline constexpr int32_t kOwnsKV = -1;

// A layer's per-sequence recurrent memory (Mamba's, Gated DeltaNet's, lightning attention's,
// a short convolution's): a conv state and a recurrent state of fixed element counts, each in
// BF16 or F32, that never grow with the context. A plan keeps rollback + 1 copies of each
// (the state after each of the last rollback positions, and the current one), and one more
// with RuntimeSpec::stage_states.
struct StateSpec {
  uint64_t conv_elements = 0;
  Format conv_format = Format::kBF16;
  uint64_t recurrent_elements = 0;
  Format recurrent_format = Format::kBF16;

  bool Empty() const { return conv_elements == 0 && recurrent_elements == 0; }
};

// One layer's attention as the model defines it.
struct LayerSpec {
  AttentionKind kind = AttentionKind::kGlobal;
  uint64_t window = 0;  // kSliding only: keys a query sees, itself included (>= 1)
  uint64_t chunk = 0;   // kChunked only: block length (>= 1)
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;    // K elements per kv_head
  uint32_t v_head_dim = 0;  // V elements per kv_head; 0 means head_dim
  // MLA (DeepSeek): one stream of latent_dim elements per position and no separate V.
  // Then num_kv_heads, head_dim and v_head_dim stay 0.
  uint32_t latent_dim = 0;
  // kOwnsKV, or the index of an earlier owning layer whose K/V this layer reads.
  int32_t kv_source = kOwnsKV;
  // How the layer's K and V elements are stored (kvring/formats/format.h). A consumer reads
  // its owner's, whatever it says here: a built plan's consumers carry their owner's format.
  // LayerPlan::Builder::SetFormat and RuntimeSpec::element_type kInt8 replace it.
  Format format = Format::kBF16;
  // false: the layer has no attention (a recurrent layer, or no sequence mixer at all); it
  // holds no K/V, and the attention fields above stay 0.
  bool attends = true;
  // The layer's recurrent state, if any (a recurrent layer, or a hybrid one that attends too).
  StateSpec state;
  // DeepSeek sparse attention (DSA: DeepSeek V3.2, GLM-5): elements of the indexer's key per
  // position (index_head_dim: one key per position, whatever the indexer's head count), kept
  // beside the layer's K/V in the layer's format (int8: with a scale per position, the size of
  // the FP8 keys and scale engines keep). Planned in the layer's slot
  // (LayerInfo::indexer_slot_bytes). KVCache and KVPool keep them beside an MLA latent (its V
  // stream: appended as the latent's v, read with IndexerKeys) and refuse them beside per-head
  // K/V. 0: no indexer.
  uint32_t indexer_dim = 0;

  // Returns a full-attention layer.
  static LayerSpec Global(uint32_t num_kv_heads, uint32_t head_dim) {
    LayerSpec spec;
    spec.num_kv_heads = num_kv_heads;
    spec.head_dim = head_dim;
    return spec;
  }
  // Returns a sliding-window layer whose queries see `window` keys, their own included.
  static LayerSpec Sliding(uint64_t window, uint32_t num_kv_heads, uint32_t head_dim) {
    LayerSpec spec = Global(num_kv_heads, head_dim);
    spec.kind = AttentionKind::kSliding;
    spec.window = window;
    return spec;
  }
  // Returns a chunked layer (Llama 4): queries see their own block of `chunk` positions.
  static LayerSpec Chunked(uint64_t chunk, uint32_t num_kv_heads, uint32_t head_dim) {
    LayerSpec spec = Global(num_kv_heads, head_dim);
    spec.kind = AttentionKind::kChunked;
    spec.chunk = chunk;
    return spec;
  }
  // Returns a global MLA layer storing `latent_dim` elements per position.
  static LayerSpec Latent(uint32_t latent_dim) {
    LayerSpec spec;
    spec.latent_dim = latent_dim;
    return spec;
  }
  // Returns a layer without attention whose per-sequence memory is `memory` (Mamba, Gated
  // DeltaNet, ...); an empty state is a layer without any sequence mixer (an MLP or MoE block).
  static LayerSpec Recurrent(const StateSpec& memory) {
    LayerSpec spec;
    spec.attends = false;
    spec.state = memory;
    return spec;
  }
  // Returns this attention layer holding `state` too (a hybrid layer: Falcon-H1).
  LayerSpec WithState(const StateSpec& memory) const {
    LayerSpec spec = *this;
    spec.state = memory;
    return spec;
  }
  // Returns this layer keeping `dim` elements of DSA indexer key per position too.
  LayerSpec WithIndexer(uint32_t dim) const {
    LayerSpec spec = *this;
    spec.indexer_dim = dim;
    return spec;
  }
  // Returns this layer reading the K/V of layer `source` instead of owning its own.
  LayerSpec SharedFrom(int32_t source) const {
    LayerSpec spec = *this;
    spec.kv_source = source;
    return spec;
  }

  bool IsLatent() const { return latent_dim != 0; }
  // Whether the layer has K/V of its own: it attends and reads no other layer's.
  bool OwnsKV() const { return attends && kv_source == kOwnsKV; }
  // Whether the layer attends with another layer's K/V (a consumer).
  bool ReadsSharedKV() const { return attends && kv_source != kOwnsKV; }
  bool HasState() const { return !state.Empty(); }
  // Keys a query may see at most: window, chunk, or 0 for unbounded (global, or no attention).
  uint64_t Span() const {
    if (!attends) return 0;
    switch (kind) {
      case AttentionKind::kSliding:
        return window;
      case AttentionKind::kChunked:
        return chunk;
      case AttentionKind::kGlobal:
        break;
    }
    return 0;
  }
  // V elements per kv_head.
  uint32_t VHeadDim() const { return v_head_dim != 0 ? v_head_dim : head_dim; }
  // K elements stored per position.
  uint64_t KElementsPerSlot() const {
    return IsLatent() ? latent_dim : uint64_t{num_kv_heads} * head_dim;
  }
  // V elements stored per position (0 for MLA).
  uint64_t VElementsPerSlot() const {
    if (IsLatent()) return 0;
    return uint64_t{num_kv_heads} * VHeadDim();
  }
};

// What the engine will do with the cache.
struct RuntimeSpec {
  uint64_t context = 0;   // T: the logical limit of positions in one sequence
  uint64_t batch = 1;     // B: most positions appended before attention reads them
  uint64_t rollback = 0;  // R: most newest positions one rollback discards
  Backend backend = Backend::kFlash;
  uint32_t tile_rows = 16;  // kTiled only: TiledLayout<kTileRows>
  uint64_t num_sequences = 1;
  // kBF16: the layers' formats; kInt8: every layer int8; kF16, kF32, kFP8: accounting only.
  Format element_type = Format::kBF16;
  // Storage only, not capacity: K/V buffers of a huge page or more (2 MiB on x86-64) start on
  // a huge page boundary and are advised for Linux's transparent huge pages, which take the
  // page walks out of decode over long contexts (docs/integration.md, "Huge pages"). A huge
  // page is committed whole on first write: a flash layout's buffer, whose every position
  // touches every dim row, is then resident from its first append. Ignored off Linux.
  bool huge_pages = false;
  // Layers with a recurrent state keep one more copy of it, so that a step writes its states
  // beside the one it starts from and an abandoned step (a refused append, a failed forward
  // pass) leaves the sequence whole at any step length; costs one state per such layer and
  // sequence (docs/api.md, "Recurrent states").
  bool stage_states = false;
};

}  // namespace kvring

#endif  // KVRING_PLAN_SPECS_H_
