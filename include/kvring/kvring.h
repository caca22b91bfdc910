// kvring/kvring.h: the umbrella header of everything in kvring that has no vector code
// (planning and storage). Attention kernels live in kvring/ops/*-inl.h and are included
// on their own, as Highway per-target code.
#ifndef KVRING_KVRING_H_
#define KVRING_KVRING_H_

#include "kvring/base.h"
#include "kvring/layer_plan.h"
#include "kvring/model_presets.h"

#endif  // KVRING_KVRING_H_
