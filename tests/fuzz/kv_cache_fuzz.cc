// libFuzzer target: fuzz bytes choose a model (BF16 and int8 owners), a runtime and a sequence of
// appends, rollbacks, growths, snapshots and clears on a KVCache of each layout, checked after
// every step against the reference model of tests/reference/storage_model.h.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kvring/kvring.h"
#include "reference/storage_model.h"

namespace {

using FuzzChoices = kvring::testing::ByteChoices;

template <typename Layout>
void RunOne(const uint8_t* data, size_t size) {
  FuzzChoices choices(data, size);
  kvring::testing::StorageDriver<Layout> driver(&choices);
  const std::string failure = driver.Run(1000);
  if (!failure.empty()) {
    std::fprintf(stderr, "kvring fuzz: %s\n", failure.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the layout; the rest drives the operations.
  switch (data[0] % 4) {
    case 0:
      RunOne<kvring::FlashLayout>(data + 1, size - 1);
      break;
    case 1:
      RunOne<kvring::TiledLayout<8>>(data + 1, size - 1);
      break;
    case 2:
      RunOne<kvring::TiledLayout<16>>(data + 1, size - 1);
      break;
    default:
      RunOne<kvring::TiledLayout<32>>(data + 1, size - 1);
      break;
  }
  return 0;
}
