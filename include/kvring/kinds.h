// kvring/kinds.h: the vocabulary every level names: how a layer's queries see earlier
// positions (AttentionKind), the attention backend whose layout storage uses (Backend), and the
// runtime's element type (ElementType, a Format). Names and byte counts only.
#ifndef KVRING_KINDS_H_
#define KVRING_KINDS_H_

#include <cstdint>

#include "kvring/formats/format.h"

namespace kvring {

// How a layer's queries see earlier positions (docs/design.md, visibility rules).
enum class AttentionKind : uint8_t {
  kGlobal,   // every pos <= q
  kSliding,  // q - window < pos <= q
  kChunked,  // pos <= q and pos / chunk == q / chunk
};

// Returns "global", "sliding" or "chunked" ("invalid" for a value outside the enum).
inline const char* ToString(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kGlobal:
      return "global";
    case AttentionKind::kSliding:
      return "sliding";
    case AttentionKind::kChunked:
      return "chunked";
  }
  return "invalid";
}

// Returns how the plan's reports name a layer: its attention kind, or "state" for a layer
// that only has a recurrent state, "none" for one without any sequence mixer.
inline const char* LayerKindName(AttentionKind kind, bool attends, bool has_state) {
  if (attends) return ToString(kind);
  return has_state ? "state" : "none";
}

// The attention backend whose layout the storage uses.
enum class Backend : uint8_t {
  kFlash,  // FlashLayout: K [kv_head][dim][slot], V [kv_head][slot][dim]
  kTiled,  // TiledLayout<kTileRows>: tiles of rows
};

inline const char* ToString(Backend backend) {
  switch (backend) {
    case Backend::kFlash:
      return "flash";
    case Backend::kTiled:
      return "tiled";
  }
  return "invalid";
}

// The runtime's element type, a Format (kvring/formats/format.h): kBF16 counts and stores
// every layer in its own format (LayerSpec::format); kInt8 stores every layer as int8 with
// its scales, as LayerPlan::Builder::SetFormat(Format::kInt8) does; an accounting-only format
// (kF16, kF32, kFP8) counts every element at ElementBytes(type), no scales, and storage
// refuses it. (ElementType names what Format names; kept for the code that spells it so.)
using ElementType = Format;

}  // namespace kvring

#endif  // KVRING_KINDS_H_
