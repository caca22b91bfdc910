// kvring/status.h: the result of a run-time call on a cache that an engine must handle
// (a full global cache, a rollback past what is kept). A refused call changes nothing.
#ifndef KVRING_STATUS_H_
#define KVRING_STATUS_H_

#include <cstdint>

namespace kvring {

enum class [[nodiscard]] Status : uint8_t{
    kOk,
    kWrongPosition,   // an append did not start at the layer's next position
    kEmptyBatch,      // an append of zero tokens, or null rows
    kContextFull,     // an append past a global (flat) cache's capacity, the context
    kRollbackTooFar,  // more than the planned rollback headroom, or than is live
    kNotLive,         // a read of a position the cache does not hold
    kNotOwner,        // a write to a layer that reads another layer's KV
    kBadArgument,     // a layer index, capacity, shape or null rows outside what the cache takes
    kBatchTooLarge,   // a batch that would overwrite positions its queries read: grow first
    kOutOfMemory,     // growing could not allocate
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
  }
  return "Invalid";
}

}  // namespace kvring

#endif  // KVRING_STATUS_H_
