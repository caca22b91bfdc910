// kvring/ring_index.h: RingIndex, now in kvring/index/ring_index.h; this header keeps the
// old include working.
#ifndef KVRING_RING_INDEX_H_
#define KVRING_RING_INDEX_H_

#include "kvring/index/ring_index.h"

#endif  // KVRING_RING_INDEX_H_
