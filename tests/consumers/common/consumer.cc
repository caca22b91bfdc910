// A downstream program: plans a model through kvring's public headers and checks the result.
#include <cstdio>

#include "kvring/kvring.h"

int main() {
  kvring::Expected<kvring::LayerPlan> plan =
      kvring::LayerPlan::Builder()
          .AddLayers(5, kvring::LayerSpec::Sliding(1024, 16, 128))
          .AddLayer(kvring::LayerSpec::Global(16, 128))
          .SetContext(131072)
          .SetBatch(512)
          .Build();
  if (!plan.ok() || plan->Layer(0).capacity != 1535 || plan->Layer(5).capacity != 131072) {
    std::fprintf(stderr, "consumer: unexpected plan\n");
    return 1;
  }
  std::printf("consumer: kvring plan of %zu layers, %llu bytes\n", plan->NumLayers(),
              static_cast<unsigned long long>(plan->TotalBytes()));
  return 0;
}
