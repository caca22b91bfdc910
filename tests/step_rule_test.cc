// The step rule kept incrementally (storage/step_rule.h) against the rule written over every
// owner's end: random appends, rollbacks and clears of up to 7 owners, each attempt decided
// by both, and the ends they leave compared after every call.
#include "kvring/storage/step_rule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kvring/status.h"

namespace kvring {
namespace {

// The rule over every end: an owner at `pos` may append `n` unless some owner is ahead and
// this one is already at the furthest end or would pass it.
bool ScanAllows(const std::vector<uint64_t>& ends, uint64_t pos, uint64_t n) {
  const uint64_t low = *std::min_element(ends.begin(), ends.end());
  const uint64_t high = *std::max_element(ends.begin(), ends.end());
  if (low == high) return true;
  return pos != high && n <= high - pos;
}

TEST(StepRuleTest, AgreesWithTheRuleOverEveryEnd) {
  std::mt19937_64 random(7);
  for (size_t num_owners = 1; num_owners <= 7; ++num_owners) {
    std::vector<size_t> owners(num_owners);
    for (size_t i = 0; i < num_owners; ++i) owners[i] = 2 * i;  // layers 0, 2, 4, ...
    std::vector<uint64_t> ends(num_owners, 0);
    detail::StepRule rule(num_owners, 0);
    const auto scan = [&] {
      return detail::ScanStep(owners, [&](size_t layer) { return ends[layer / 2]; });
    };
    for (int call = 0; call < 4000; ++call) {
      const size_t owner = random() % num_owners;
      const uint64_t n = 1 + random() % 4;
      const uint64_t pos = ends[owner];
      const detail::StepEnds step = scan();
      if (random() % 16 == 0) {  // a rollback or a clear, allowed between steps only
        ASSERT_EQ(rule.InStep(), step.low_end != step.high_end);
        if (rule.InStep()) continue;
        const uint64_t back = random() % 2 == 0 ? std::min(pos, n) : pos;
        for (uint64_t& end : ends) end -= back;
        rule.Reset(pos - back);
      } else {
        const Result result = rule.CheckAppend(owners[owner], pos, n, scan);
        ASSERT_EQ(result.ok(), ScanAllows(ends, pos, n))
            << "owners " << num_owners << " call " << call;
        if (!result.ok()) {
          EXPECT_EQ(result.status(), Status::kWrongPosition);
          continue;
        }
        ends[owner] += n;
        rule.RecordAppend(pos, n);
      }
      const detail::StepEnds after = scan();
      ASSERT_EQ(rule.InStep(), after.low_end != after.high_end);
      ASSERT_EQ(rule.HighEnd(), after.high_end);
    }
  }
}

TEST(StepRuleTest, RefusalsNameTheLayersBehindAndAhead) {
  const std::vector<size_t> owners = {0, 3, 5};
  std::vector<uint64_t> ends = {32, 32, 32};
  detail::StepRule rule(owners.size(), 32);
  const auto scan = [&] {
    return detail::ScanStep(owners, [&](size_t layer) {
      return ends[static_cast<size_t>(std::find(owners.begin(), owners.end(), layer) -
                                      owners.begin())];
    });
  };
  ASSERT_TRUE(rule.CheckAppend(3, 32, 4, scan).ok());
  ends[1] = 36;
  rule.RecordAppend(32, 4);
  EXPECT_EQ(rule.CheckAppend(3, 36, 1, scan).Message(),
            "WrongPosition: layers[3]: already at 36 while layers[0] is at 32; append the other "
            "owning layers up to it first");
  EXPECT_EQ(rule.CheckAppend(5, 32, 5, scan).Message(),
            "WrongPosition: layers[5]: an append at 32 passes 36, where layers[3] is; append up "
            "to there to finish the step first");
  EXPECT_EQ(
      detail::StepRule::MidStep(scan(), "layers[%llu] at %llu, layers[%llu] at %llu").Message(),
      "WrongPosition: layers[0] at 32, layers[3] at 36");
}

}  // namespace
}  // namespace kvring
