// kvring/kvring.h: the umbrella header of everything in kvring that has no vector code
// (planning, formats, storage, attention work plans, threads). Attention kernels live in
// kvring/ops/*-inl.h and are included on their own, as Highway per-target code.
#ifndef KVRING_KVRING_H_
#define KVRING_KVRING_H_

#include "kvring/attention.h"
#include "kvring/base.h"
#include "kvring/bf16.h"
#include "kvring/formats/format.h"
#include "kvring/formats/int8.h"
#include "kvring/index/ring_index.h"
#include "kvring/indexer_view.h"
#include "kvring/io/byte_io.h"
#include "kvring/io/prefix_state.h"
#include "kvring/io/state_io.h"
#include "kvring/kv_view.h"
#include "kvring/layer_plan.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/kv_shape.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/model_presets.h"
#include "kvring/sharing/prefix_cache.h"
#include "kvring/status.h"
#include "kvring/storage/global_kv.h"
#include "kvring/storage/kv_cache.h"
#include "kvring/storage/kv_pool.h"
#include "kvring/storage/ring_kv.h"
#include "kvring/storage/storage_spec.h"
#include "kvring/thread_pool.h"
#include "kvring/visibility.h"

#endif  // KVRING_KVRING_H_
