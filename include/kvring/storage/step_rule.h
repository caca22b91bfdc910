// kvring/storage/step_rule.h: the one home of the step rule (docs/design.md) of a sequence
// whose owning layers append separately: every owner serves the same queries, so no owner
// starts a step before every other has finished the last one. Kept incrementally: checking
// and recording an append is O(1), whatever the number of layers; only a refusal's message
// and the position inside a step scan the owners.
#ifndef KVRING_STORAGE_STEP_RULE_H_
#define KVRING_STORAGE_STEP_RULE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvring/base.h"
#include "kvring/status.h"

namespace kvring {
namespace detail {

// The owning layers at the lowest and at the highest end position (the first of each).
struct StepEnds {
  size_t lowest = 0;
  size_t highest = 0;
  uint64_t low_end = 0;
  uint64_t high_end = 0;
};

// Returns the ends of `owners`, whose end positions end_of(layer) gives. O(owners).
template <typename EndOf>
StepEnds ScanStep(const std::vector<size_t>& owners, const EndOf& end_of) {
  StepEnds step;
  bool first = true;
  for (size_t layer : owners) {
    const uint64_t end = end_of(layer);
    if (first || end < step.low_end) {
      step.lowest = layer;
      step.low_end = end;
    }
    if (first || end > step.high_end) {
      step.highest = layer;
      step.high_end = end;
    }
    first = false;
  }
  return step;
}

// The step of one sequence: the furthest end an owner has reached, how many owners are there,
// and where the step began. Every owner is between the sequence's position and that end; the
// step is complete when every owner is at it. Trivially copyable.
class StepRule {
 public:
  StepRule() = default;
  // A sequence of `num_owners` owning layers (>= 1), every one at `end`.
  StepRule(size_t num_owners, uint64_t end)
      : num_owners_(num_owners), at_high_(num_owners), high_end_(end) {}

  // Whether some owners are ahead of others (a step begun but not finished).
  bool InStep() const { return at_high_ < num_owners_; }
  // The furthest end an owner has reached: every owner's end once the step is complete.
  uint64_t HighEnd() const { return high_end_; }
  // Where the current step began, or the last one while no other has begun (the end itself
  // after a Reset): the positions after it are the step's.
  uint64_t StepStart() const { return step_start_; }
  // The end the step that writes the state after `num_positions` positions starts from: the
  // current or last step's start, or between steps, for a position past the furthest end, that
  // end (a next step whose state layers run before its first append).
  uint64_t StartOfStepAt(uint64_t num_positions) const {
    return !InStep() && num_positions > high_end_ ? high_end_ : step_start_;
  }

  // Returns kOk if an owner at `pos` (its end) may append `num_tokens`, else kWrongPosition:
  // inside a step, an owner already at the furthest end, or an append that would pass it.
  // `ends` names the layers in the refusal (called only then). O(1) unless refused.
  template <typename Ends>
  Result CheckAppend(size_t layer, uint64_t pos, uint64_t num_tokens, const Ends& ends) const {
    if (!InStep()) return Status::kOk;
    if (pos == high_end_) {
      const StepEnds step = ends();
      return Result::Refused(Status::kWrongPosition,
                             "layers[%llu]: already at %llu while layers[%llu] is at %llu; "
                             "append the other owning layers up to it first",
                             uint64_t{layer}, pos, uint64_t{step.lowest}, step.low_end);
    }
    if (num_tokens > high_end_ - pos) {
      const StepEnds step = ends();
      return Result::Refused(Status::kWrongPosition,
                             "layers[%llu]: an append at %llu passes %llu, where layers[%llu] "
                             "is; append up to there to finish the step first",
                             uint64_t{layer}, pos, high_end_, uint64_t{step.highest});
    }
    return Status::kOk;
  }
  // Records an append that CheckAppend allowed and the storage made: `num_tokens` at `pos`.
  void RecordAppend(uint64_t pos, uint64_t num_tokens) {
    if (!InStep()) {
      KVRING_DASSERT(pos == high_end_);
      step_start_ = pos;
      high_end_ = pos + num_tokens;
      at_high_ = 1;
    } else if (pos + num_tokens == high_end_) {
      ++at_high_;
    }
  }
  // The `start` AbandonStep() infers: the failed pass's start is not known.
  static constexpr uint64_t kInferStart = ~uint64_t{0};
  // Sets *to to the end AbandonStep(start) takes a sequence back to: `start` if the failed
  // pass began the current or last step there (StepStart), or, between steps, at the end (a
  // next step that appended nothing); for kInferStart, inside a step the lowest owner's end
  // `low_end`, between steps the last step's start if its states are `unfinished`
  // (RecurrentStates::LastStepUnfinished), else the end. kWrongPosition for another `start`.
  Result AbandonTarget(uint64_t start, uint64_t low_end, bool unfinished, uint64_t* to) const {
    if (start == kInferStart) {
      *to = InStep() ? low_end : unfinished && step_start_ != high_end_ ? step_start_ : high_end_;
      return Status::kOk;
    }
    if (start != step_start_ && (InStep() || start != high_end_)) {
      return Result::Refused(Status::kWrongPosition,
                             "abandon a step begun at start: %llu, but the current or last step "
                             "began at %llu and the furthest end is %llu",
                             start, step_start_, high_end_);
    }
    *to = start;
    return Status::kOk;
  }
  // Records every owner at `end` (after a rollback, a clear or a restore).
  void Reset(uint64_t end) {
    high_end_ = end;
    step_start_ = end;
    at_high_ = num_owners_;
  }

  // Returns kWrongPosition naming the owners at the lowest and highest ends, for a call
  // refused inside a step; `format` takes the four values (lowest, low_end, highest, high_end).
  static Result MidStep(const StepEnds& step, const char* format) {
    return Result::Refused(Status::kWrongPosition, format, uint64_t{step.lowest}, step.low_end,
                           uint64_t{step.highest}, step.high_end);
  }

 private:
  size_t num_owners_ = 0;
  size_t at_high_ = 0;  // owners whose end is high_end_
  uint64_t high_end_ = 0;
  uint64_t step_start_ = 0;  // the end before the current or last step
};

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_STORAGE_STEP_RULE_H_
