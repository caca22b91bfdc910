// libFuzzer target: fuzz bytes drive adds, steps of random sizes across block and ring
// boundaries, forks of forks, rollbacks, clears, frees, resizes and pool exhaustion on a
// KVPool of each layout (BF16 or int8 global layers; a hybrid model's states or none; DSA
// latents or none; staged steps, some abandoned part way, or not), checked against the
// reference model of tests/reference/pool_model.h after every step.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kvring/kvring.h"
#include "reference/pool_model.h"

namespace {

using FuzzChoices = kvring::testing::ByteChoices;

template <typename Layout>
void RunOne(const uint8_t* data, size_t size, kvring::Format format, bool hybrid, bool dsa,
            bool staged) {
  FuzzChoices choices(data, size);
  kvring::testing::PoolDriver<Layout> driver(&choices, format, size, /*moves=*/true, hybrid, dsa,
                                             staged);
  const std::string failure = driver.Run(2000);
  if (!failure.empty()) {
    std::fprintf(stderr, "kvring pool fuzz: %s\n", failure.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the layout, the global layers' format, the hybrid plan, the DSA
  // latents and staged steps (states staged; steps failing part way, then abandoned).
  const kvring::Format format = data[0] & 4 ? kvring::Format::kInt8 : kvring::Format::kBF16;
  const bool hybrid = (data[0] & 8) != 0;
  const bool dsa = (data[0] & 16) != 0;
  const bool staged = (data[0] & 32) != 0;
  switch (data[0] % 4) {
    case 0:
      RunOne<kvring::FlashLayout>(data + 1, size - 1, format, hybrid, dsa, staged);
      break;
    case 1:
      RunOne<kvring::TiledLayout<8>>(data + 1, size - 1, format, hybrid, dsa, staged);
      break;
    case 2:
      RunOne<kvring::TiledLayout<16>>(data + 1, size - 1, format, hybrid, dsa, staged);
      break;
    default:
      RunOne<kvring::TiledLayout<32>>(data + 1, size - 1, format, hybrid, dsa, staged);
      break;
  }
  return 0;
}
