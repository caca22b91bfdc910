// tools/plan_cli.h: the kvring-plan command line, as a function the tests call directly.
#ifndef KVRING_TOOLS_PLAN_CLI_H_
#define KVRING_TOOLS_PLAN_CLI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvring/base.h"
#include "kvring/layer_plan.h"

namespace kvring {
namespace tools {

// Runs kvring-plan with `args` (without the program name). Writes the report to *out and a
// one-line error to *err. Returns the exit status: 0 on success, 2 on bad input (then *out
// stays empty).
int RunPlanCli(const std::vector<std::string>& args, std::string* out, std::string* err);

// Parses a count or a byte size: "131072", "128k" (k, m, g, t are powers of 1024),
// "24GiB" (KiB, MiB, GiB, TiB), "24GB" (KB, MB, GB, TB are powers of 1000), "512B".
// Returns false (and leaves *value alone) on a malformed or overflowing text.
bool ParseSize(const std::string& text, uint64_t* value);

// Returns the layers one rank holds when `tensor_parallel` ranks share the model, as vLLM
// splits attention: each rank keeps num_kv_heads / tensor_parallel KV heads, or one (a
// replica) when there are fewer KV heads than ranks; MLA latents are replicated whole.
// Refused (an Error naming the field) when the heads do not divide, the ranks do not divide
// into replicas, or `num_attention_heads` (0: unknown, as for presets) is not a multiple of
// the ranks. Recurrent states split by the family's rule, which only a config.json read with
// HfReadOptions::tensor_parallel knows: with `states_per_rank` the layers' states are already
// one rank's share and stay; without it a layer with a state is refused under more than one
// rank. Allocates the returned list; cost O(layers).
Expected<std::vector<LayerSpec>> SplitAcrossRanks(const std::vector<LayerSpec>& layers,
                                                  uint32_t num_attention_heads,
                                                  uint64_t tensor_parallel,
                                                  bool states_per_rank = false);

// Returns `bytes` in binary units with two decimals ("10.41 GiB"), or "N B" below 1 KiB.
std::string FormatBytes(uint64_t bytes);

}  // namespace tools
}  // namespace kvring

#endif  // KVRING_TOOLS_PLAN_CLI_H_
