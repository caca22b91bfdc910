// kvring/kinds.h: the vocabulary every level names: how a layer's queries see earlier
// positions (AttentionKind), the attention backend whose layout storage uses (Backend), and the
// runtime's element type (ElementType). Names and byte counts only.
#ifndef KVRING_KINDS_H_
#define KVRING_KINDS_H_

#include <cstdint>

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

// The runtime's element type. kBF16 counts every layer in its own format (LayerSpec::format);
// kInt8 stores every layer as int8 with its scales, as LayerPlan::Builder::SetFormat(
// Format::kInt8) does. kF16, kF32 and kFP8 are for what-if accounting only: every element
// counted at ElementBytes(type), no scales; KVCache refuses them.
enum class ElementType : uint8_t { kBF16, kF16, kF32, kFP8, kInt8 };

inline const char* ToString(ElementType type) {
  switch (type) {
    case ElementType::kBF16:
      return "bf16";
    case ElementType::kF16:
      return "f16";
    case ElementType::kF32:
      return "f32";
    case ElementType::kFP8:
      return "fp8";
    case ElementType::kInt8:
      return "int8";
  }
  return "invalid";
}

// Returns the bytes of one element of `type` (int8: 1, its scales aside), or 0 for a value
// outside the enum.
inline uint64_t ElementBytes(ElementType type) {
  switch (type) {
    case ElementType::kBF16:
    case ElementType::kF16:
      return 2;
    case ElementType::kF32:
      return 4;
    case ElementType::kFP8:
    case ElementType::kInt8:
      return 1;
  }
  return 0;
}

// Returns whether `type` is for what-if accounting only (kF16, kF32, kFP8): no layer format
// stores it, and KVCache refuses a plan of it.
inline bool IsAccountingOnly(ElementType type) {
  return type == ElementType::kF16 || type == ElementType::kF32 || type == ElementType::kFP8;
}

}  // namespace kvring

#endif  // KVRING_KINDS_H_
