// kvring/visibility.h: the one home of the visibility rule (docs/design.md, visibility rules):
// which positions a query at `q` may read. Caches, views and kernels all ask this type.
// It knows positions only, not slots or storage.
#ifndef KVRING_VISIBILITY_H_
#define KVRING_VISIBILITY_H_

#include <cstdint>

#include "kvring/kinds.h"
#include "kvring/plan/specs.h"

namespace kvring {

// A layer's visibility rule: global, sliding over `span` keys, or chunked in blocks of `span`.
// Trivially copyable.
struct Visibility {
  AttentionKind kind = AttentionKind::kGlobal;
  uint64_t span = 0;  // window (sliding) or chunk (chunked); unused for global

  // Returns the rule of a layer as the model specifies it (for a consumer: its own rule).
  static Visibility Of(const LayerSpec& spec) { return Visibility{spec.kind, spec.Span()}; }

  // Returns the first position a query at `q` sees; it also sees every later pos <= q.
  uint64_t FirstVisible(uint64_t q) const {
    switch (kind) {
      case AttentionKind::kSliding:
        return q + 1 >= span ? q + 1 - span : 0;
      case AttentionKind::kChunked:
        return q - q % span;
      case AttentionKind::kGlobal:
        break;
    }
    return 0;
  }
  // Returns whether a query at `q` sees position `pos`.
  bool Visible(uint64_t q, uint64_t pos) const { return pos <= q && pos >= FirstVisible(q); }
};

}  // namespace kvring

#endif  // KVRING_VISIBILITY_H_
