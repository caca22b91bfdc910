// Runs the kvring-plan command line in-process for the tests: exit status, stdout, stderr.
#ifndef KVRING_TESTS_CLI_PLAN_CLI_RUN_H_
#define KVRING_TESTS_CLI_PLAN_CLI_RUN_H_

#include <string>
#include <vector>

#include "plan_cli.h"

namespace kvring {
namespace tools {

struct CliRun {
  int status;
  std::string out, err;
};

inline CliRun RunCli(const std::vector<std::string>& args) {
  CliRun run;
  run.status = RunPlanCli(args, &run.out, &run.err);
  return run;
}

}  // namespace tools
}  // namespace kvring

#endif  // KVRING_TESTS_CLI_PLAN_CLI_RUN_H_
