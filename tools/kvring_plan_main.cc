// kvring-plan: prints the per-layer KV cache plan of a model (see docs/planning.md).
#include <cstdio>
#include <string>
#include <vector>

#include "plan_cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string out, err;
  const int status = kvring::tools::RunPlanCli(args, &out, &err);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fwrite(err.data(), 1, err.size(), stderr);
  return status;
}
