// Plans the KV cache of a model that is not a preset: describe each layer's attention, the
// runtime, and read what every layer must hold and what a memory budget fits.
#include <cinttypes>
#include <cstdio>

#include "kvring/kvring.h"

int main() {
  // A 24-layer model: three sliding layers (window 2048) for every global one, 8 KV heads of
  // 128 dims; the last four layers read the KV of layers 18 and 19 instead of their own.
  kvring::LayerPlan::Builder builder;
  for (int i = 0; i < 20; ++i) {
    builder.AddLayer(i % 4 == 3 ? kvring::LayerSpec::Global(8, 128)
                                : kvring::LayerSpec::Sliding(2048, 8, 128));
  }
  builder.AddLayer(kvring::LayerSpec::Sliding(2048, 8, 128).SharedFrom(18))
      .AddLayer(kvring::LayerSpec::Global(8, 128).SharedFrom(19))
      .AddLayer(kvring::LayerSpec::Sliding(2048, 8, 128).SharedFrom(18))
      .AddLayer(kvring::LayerSpec::Global(8, 128).SharedFrom(19));

  kvring::RuntimeSpec runtime;
  runtime.context = 65536;
  runtime.batch = 256;    // prefill in steps of 256 tokens
  runtime.rollback = 16;  // speculative decoding may reject up to 16 draft tokens
  runtime.num_sequences = 4;
  const kvring::Expected<kvring::LayerPlan> plan = builder.SetRuntime(runtime).Build();
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", plan.error().message.c_str());
    return 1;
  }

  for (const kvring::LayerInfo& layer : plan->Layers()) {
    std::printf("layer %2zu  %-7s owner %2zu  capacity %6" PRIu64 "  num_slots %6" PRIu64
                "  %10" PRIu64 " bytes\n",
                layer.index, kvring::ToString(layer.spec.kind), layer.owner, layer.capacity,
                layer.num_slots, layer.bytes);
  }
  std::printf("per sequence: %" PRIu64 " bytes (flat cache: %" PRIu64 ")\n", plan->TotalBytes(),
              plan->FlatBytes());

  kvring::MemoryBudget budget;
  budget.device_bytes = 24ull << 30;
  budget.weight_bytes = 9ull << 30;
  budget.workspace_bytes = 2ull << 30;
  const kvring::CapacityReport report = plan->Capacity(budget, 1u << 20);
  std::printf("24 GiB holds %" PRIu64 " sequences of %" PRIu64 " tokens; %" PRIu64
              " sequences fit contexts up to %" PRIu64 "\n",
              report.max_sequences, runtime.context, runtime.num_sequences, report.max_context);
  return 0;
}
