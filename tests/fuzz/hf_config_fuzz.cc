// libFuzzer target: fuzz bytes as the text of a config.json (the corpus starts from the
// config files of tests/configs/), read by kvring/hf_config.h compiled without exceptions, as
// an engine includes it: any input is read or refused with a one-line message naming the file,
// never an abort; a model read builds its plan or is refused by the builder, never an abort.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kvring/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const kvring::Expected<kvring::HfModel> model = kvring::ParseHfConfig(text, "fuzz.json");
  if (!model.ok()) {
    const std::string& message = model.error().message;
    if (message.rfind("fuzz.json: ", 0) != 0 || message.find('\n') != std::string::npos ||
        model.error().field.empty()) {
      std::fprintf(stderr, "hf_config fuzz: a refusal that is not one line naming the file: %s\n",
                   message.c_str());
      std::abort();
    }
    return 0;
  }
  if (model->layers.empty()) {
    std::fprintf(stderr, "hf_config fuzz: a model read with no layers\n");
    std::abort();
  }
  (void)model->PlanBuilder().SetBatch(1).Build();
  return 0;
}
