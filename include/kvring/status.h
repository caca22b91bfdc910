// kvring/status.h: the result of a run-time call that an engine must handle (a full global
// cache, a rollback past what is kept, an attention call whose shapes do not fit its view):
// a Status, and a Result that adds what was refused and why. A refused call changes nothing.
#ifndef KVRING_STATUS_H_
#define KVRING_STATUS_H_

#include <cstdint>
#include <cstdio>
#include <string>

namespace kvring {

enum class [[nodiscard]] Status : uint8_t{
    kOk,
    kWrongPosition,   // an append did not start at the layer's next position
    kEmptyBatch,      // an append of zero tokens
    kContextFull,     // an append past a global (flat) cache's capacity, the context
    kRollbackTooFar,  // more than the planned rollback headroom, or than is live
    kNotLive,         // a read of a position the cache does not hold
    kNotOwner,        // a write to a layer that reads another layer's KV
    kBadArgument,  // a layer index, capacity, shape, stride or null rows outside what a call takes
    kBatchTooLarge,    // a batch that would overwrite positions its queries read: grow first
    kOutOfMemory,      // growing could not allocate
    kPoolExhausted,    // a KVPool's budget has no free block or room for rings: evict, preempt
                       // or wait, then retry
    kUnknownSequence,  // a KVPool SequenceId never added, or already freed
    kStaleView,        // a view used after its storage changed (KVView::stamp)
    kBadState,         // a saved state that is damaged, or was written for another model or plan
    kIOError,          // a byte sink or source (a file) failed to write or read
};

// Returns the enumerator's name without the k, for messages ("WrongPosition").
inline const char* ToString(Status status) {
  switch (status) {
    case Status::kOk:
      return "Ok";
    case Status::kWrongPosition:
      return "WrongPosition";
    case Status::kEmptyBatch:
      return "EmptyBatch";
    case Status::kContextFull:
      return "ContextFull";
    case Status::kRollbackTooFar:
      return "RollbackTooFar";
    case Status::kNotLive:
      return "NotLive";
    case Status::kNotOwner:
      return "NotOwner";
    case Status::kBadArgument:
      return "BadArgument";
    case Status::kBatchTooLarge:
      return "BatchTooLarge";
    case Status::kOutOfMemory:
      return "OutOfMemory";
    case Status::kPoolExhausted:
      return "PoolExhausted";
    case Status::kUnknownSequence:
      return "UnknownSequence";
    case Status::kStaleView:
      return "StaleView";
    case Status::kBadState:
      return "BadState";
    case Status::kIOError:
      return "IOError";
  }
  return "Invalid";
}

// The outcome of a run-time call: a Status and, when the call was refused, the rule it broke
// with the values involved (for example "layers[3]: append at 34, but the layer's next position
// is 32"). Building and returning one never allocates: the rule is a static printf format and
// the values are numbers; Message() formats them on request. Converts to and compares with
// Status, so `if (cache.AppendF32(...) != kvring::Status::kOk)` reads as before.
class [[nodiscard]] Result {
 public:
  Result() = default;
  Result(Status status) : status_(status) {}  // NOLINT: implicit on purpose

  // Returns a refusal with `status` whose message is `format` (a string literal with up to
  // four %llu conversions) applied to the values.
  static Result Refused(Status status, const char* format, uint64_t a = 0, uint64_t b = 0,
                        uint64_t c = 0, uint64_t d = 0) {
    Result result(status);
    result.format_ = format;
    result.values_[0] = a;
    result.values_[1] = b;
    result.values_[2] = c;
    result.values_[3] = d;
    return result;
  }

  // The entry index of a refusal that is not one of a many-sequence call's entries.
  static constexpr uint64_t kNoEntry = ~uint64_t{0};

  // Returns this refusal as that of entry `entry` of a many-sequence call (AttentionMany):
  // Message() then starts "entries[<entry>]: ".
  Result OfEntry(uint64_t entry) const {
    Result result = *this;
    result.entry_ = entry;
    return result;
  }
  // Returns the entry a many-sequence call refused, or kNoEntry.
  uint64_t Entry() const { return entry_; }

  bool ok() const { return status_ == Status::kOk; }
  Status status() const { return status_; }
  operator Status() const { return status_; }  // NOLINT: implicit on purpose

  // Returns the refusal in words: "<Status>: <what was refused>", or "Ok". Allocates.
  std::string Message() const {
    std::string message = ToString(status_);
    if (format_ == nullptr) return message;
    if (entry_ != kNoEntry) message += ": entries[" + std::to_string(entry_) + "]";
    char buffer[512];
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
#endif
    std::snprintf(buffer, sizeof(buffer), format_, static_cast<unsigned long long>(values_[0]),
                  static_cast<unsigned long long>(values_[1]),
                  static_cast<unsigned long long>(values_[2]),
                  static_cast<unsigned long long>(values_[3]));
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    return message + ": " + buffer;
  }

  friend bool operator==(const Result& a, Status b) { return a.status_ == b; }
  friend bool operator!=(const Result& a, Status b) { return a.status_ != b; }
  friend bool operator==(Status a, const Result& b) { return a == b.status_; }
  friend bool operator!=(Status a, const Result& b) { return a != b.status_; }

 private:
  Status status_ = Status::kOk;
  const char* format_ = nullptr;  // static; nullptr: no detail
  uint64_t values_[4] = {0, 0, 0, 0};
  uint64_t entry_ = kNoEntry;
};

// The outcome of a rollback: a Result, and the end position after the call (the new end, or
// the unchanged one when refused). Converts to and compares with Status as Result does.
class [[nodiscard]] RollbackResult : public Result {
 public:
  RollbackResult(Result result, uint64_t end_pos) : Result(result), end_pos_(end_pos) {}

  // Returns the end position after the call: one past the newest position still held.
  uint64_t EndPos() const { return end_pos_; }

 private:
  uint64_t end_pos_ = 0;
};

// The outcome of a query that can be refused (a KVPool query of a sequence that is not live):
// a Result and, when it is ok, the value; value() is T() when refused. Converts to and compares
// with Status as Result does.
template <typename T>
class [[nodiscard]] ValueResult : public Result {
 public:
  ValueResult(Result refusal) : Result(refusal) {}  // NOLINT: implicit on purpose
  ValueResult(T value) : value_(value) {}           // NOLINT: implicit on purpose

  const T& value() const { return value_; }
  const T& operator*() const { return value_; }
  const T* operator->() const { return &value_; }

 private:
  T value_{};
};

}  // namespace kvring

#endif  // KVRING_STATUS_H_
