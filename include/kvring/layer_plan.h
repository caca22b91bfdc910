// kvring/layer_plan.h: the per-layer capacity plan and memory accounting of a KV cache.
// Describe each layer (LayerSpec) and the runtime (RuntimeSpec), then LayerPlan::Builder
// computes what every layer must hold (docs/design.md, the capacity rule) and what it costs.
// Plans only: allocates no K/V (see kv_cache.h) and uses no vector code.
//
// This header gathers the plan's parts in plan/: specs.h (LayerSpec, RuntimeSpec),
// capacity.h (the capacity rule, slots and bytes), validation.h (the rules a plan keeps),
// layer_plan.h (LayerPlan, LayerInfo, capacity reports) and builder.h (LayerPlan::Builder).
#ifndef KVRING_LAYER_PLAN_H_
#define KVRING_LAYER_PLAN_H_

#include "kvring/kernel_limits.h"
#include "kvring/kinds.h"
#include "kvring/layouts/padding.h"
#include "kvring/plan/builder.h"
#include "kvring/plan/capacity.h"
#include "kvring/plan/layer_plan.h"
#include "kvring/plan/specs.h"
#include "kvring/plan/validation.h"

#endif  // KVRING_LAYER_PLAN_H_
