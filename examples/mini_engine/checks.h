// What the examples on the mini engine's model (mini_engine.cc, serve/serve.cc) check and
// report with: a tally of checks that prints each one, the bit-for-bit comparison of a run's
// tokens and logits with a reference run's, and the clock and units of their figures.
#ifndef KVRING_EXAMPLES_MINI_ENGINE_CHECKS_H_
#define KVRING_EXAMPLES_MINI_ENGINE_CHECKS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/status.h"

namespace mini_engine {

struct Checks {
  int num_failed = 0;
  int num_passed = 0;

  bool Expect(bool ok, const std::string& what) {
    std::printf("  [%s] %s\n", ok ? "ok" : "FAIL", what.c_str());
    ok ? ++num_passed : ++num_failed;
    return ok;
  }
  // Counts a check that prints only if it fails: one of many of a kind, which an Expect line
  // then sums up.
  bool Count(bool ok, const std::string& what) {
    if (!ok) std::printf("  [FAIL] %s\n", what.c_str());
    ok ? ++num_passed : ++num_failed;
    return ok;
  }
  bool ExpectStatus(kvring::Status status, const std::string& what) {
    if (status == kvring::Status::kOk) return true;
    return Expect(false, what + ": " + kvring::ToString(status));
  }
};

// Returns "" if the tokens and the logits they were chosen from are bit-identical, else where
// they first differ.
inline std::string Compare(const std::vector<int32_t>& tokens, const std::vector<float>& logits,
                           const std::vector<int32_t>& ref_tokens,
                           const std::vector<float>& ref_logits, size_t vocab) {
  if (tokens.size() != ref_tokens.size() || logits.size() != ref_logits.size()) {
    return "lengths differ (" + std::to_string(tokens.size()) + " against " +
           std::to_string(ref_tokens.size()) + " tokens)";
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != ref_tokens[i]) {
      return "token " + std::to_string(i) + " is " + std::to_string(tokens[i]) + ", expected " +
             std::to_string(ref_tokens[i]);
    }
    if (std::memcmp(&logits[i * vocab], &ref_logits[i * vocab], vocab * sizeof(float)) != 0) {
      return "the logits of token " + std::to_string(i) + " differ";
    }
  }
  return "";
}

inline std::string Identical(const std::string& difference, size_t num_tokens) {
  return difference.empty() ? std::to_string(num_tokens) + " tokens and their logits bit-identical"
                            : difference;
}

inline double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// "1.5 KiB", "2.25 MiB"; "3 blocks", "1 block"; a / b (0 for b = 0): for reports.
inline std::string Bytes(uint64_t bytes) {
  char text[64];
  if (bytes < 1024 * 1024) {
    std::snprintf(text, sizeof(text), "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  } else {
    std::snprintf(text, sizeof(text), "%.2f MiB", MiB(bytes));
  }
  return text;
}

inline std::string Plural(uint64_t count, const char* noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

inline double Ratio(uint64_t a, uint64_t b) {
  return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
}

using Clock = std::chrono::steady_clock;
inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace mini_engine

#endif  // KVRING_EXAMPLES_MINI_ENGINE_CHECKS_H_
