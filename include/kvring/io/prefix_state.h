// kvring/io/prefix_state.h: a PrefixCache's checkpoints as bytes, so that a restarted engine
// resumes its conversations without prefilling them again. Each checkpoint is a section (its
// salt, priority and tokens, with a CRC32C) followed by its sequence's state in state_io.h's
// format (its own fingerprint of the model and plan, and checksums). Loading reads every
// checkpoint or none; checkpoints whose tokens share full blocks share those blocks again
// where their rows are equal byte for byte (docs/prefix_cache.md).
#ifndef KVRING_IO_PREFIX_STATE_H_
#define KVRING_IO_PREFIX_STATE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvring/io/byte_io.h"
#include "kvring/io/state_check.h"
#include "kvring/io/state_io.h"
#include "kvring/io/state_stream.h"
#include "kvring/sharing/prefix_cache.h"
#include "kvring/status.h"

namespace kvring {
namespace detail {

inline constexpr char kPrefixMagic[8] = {'K', 'V', 'R', 'P', 'R', 'F', 'I', 'X'};
inline constexpr uint32_t kPrefixVersion = 1;
inline constexpr uint32_t kPrefixHeaderTag = 0x4850564Bu;      // "KVPH": u64 checkpoints
inline constexpr uint32_t kPrefixCheckpointTag = 0x4350564Bu;  // "KVPC"
// A checkpoint section's fixed fields: salt, priority, zero, tokens, state bytes.
inline constexpr uint64_t kPrefixCheckpointFixed = 8 + 4 + 4 + 8 + 8;

// One checkpoint of a prefix file, as its section says.
struct PrefixRecord {
  uint64_t salt = 0;
  uint32_t priority = 0;
  uint64_t tokens_at = 0;  // offset of its tokens
  uint64_t num_tokens = 0;
  uint64_t state_at = 0;  // offset of its state
  uint64_t state_bytes = 0;
};

// What a prefix file reader needs of a cache beyond its public calls (friend of PrefixCache).
struct PrefixStateAccess {
  template <typename Layout>
  static KVPool<Layout>* PoolOf(const PrefixCache<Layout>& cache) {
    return cache.pool_;
  }
  template <typename Layout>
  static uint64_t Count(const PrefixCache<Layout>& cache) {
    return cache.index_.NumCheckpoints();
  }
  // Calls fn(sequence, salt, priority, tokens) for every checkpoint, shortest first.
  template <typename Layout, typename Fn>
  static void ForEach(const PrefixCache<Layout>& cache, const Fn& fn) {
    std::vector<uint32_t> ids;
    for (uint32_t id = 0; id < cache.entries_.size(); ++id) {
      if (cache.index_.IsLive(id)) ids.push_back(id);
    }
    std::stable_sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
      return cache.index_.LengthOf(a) < cache.index_.LengthOf(b);
    });
    std::vector<TokenId> tokens;
    for (uint32_t id : ids) {
      cache.index_.TokensOf(id, &tokens);
      fn(cache.entries_[id].sequence, cache.index_.SaltOf(id), cache.entries_[id].priority, tokens);
    }
  }
  template <typename Layout>
  static uint32_t Find(const PrefixCache<Layout>& cache, uint64_t salt,
                       const std::vector<TokenId>& tokens) {
    return cache.index_.Find(salt, tokens.data(), tokens.size());
  }
  template <typename Layout>
  static uint32_t Add(PrefixCache<Layout>* cache, SequenceId sequence, uint64_t salt,
                      uint32_t priority, const std::vector<TokenId>& tokens) {
    return cache->Adopt(sequence, salt, priority, tokens.data(), tokens.size());
  }
  template <typename Layout>
  static void Erase(PrefixCache<Layout>* cache, uint32_t id) {
    cache->Erase(id);
  }
};

// Reads the preamble, the header and every checkpoint section of a prefix file into *records,
// checking tags, sizes and CRC32Cs (the states inside are checked as they load).
inline Result ReadPrefixRecords(StateReader* reader, std::vector<PrefixRecord>* records) {
  char magic[8] = {};
  uint64_t version = 0, zero = 0;
  if (reader->Size() < kStatePreambleBytes) {
    return Result::Refused(Status::kBadState, "prefix state: %llu bytes, fewer than a preamble",
                           reader->Size());
  }
  if (!reader->Copy(0, magic, 8) || !reader->U32(8, &version) || !reader->U32(12, &zero)) {
    return ReadFailed(0);
  }
  if (std::memcmp(magic, kPrefixMagic, 8) != 0 || version != kPrefixVersion || zero != 0) {
    return Result::Refused(Status::kBadState,
                           "prefix state: not a prefix cache's state of version %llu (magic "
                           "KVRPRFIX; this one has version %llu)",
                           uint64_t{kPrefixVersion}, version);
  }
  SectionCursor sections(reader);
  uint64_t at = 0, bytes = 0, count = 0;
  Result result = sections.Next(0, kPrefixHeaderTag, &at, &bytes);
  if (!result.ok()) return result;
  if (bytes != 8 || !reader->U64(at, &count)) {
    return Result::Refused(Status::kBadState, "prefix state: a header of %llu bytes, not 8", bytes);
  }
  records->clear();
  for (uint64_t i = 0; i < count; ++i) {
    result = sections.Next(i + 1, kPrefixCheckpointTag, &at, &bytes);
    if (!result.ok()) return result;
    PrefixRecord record;
    uint64_t priority = 0;
    if (bytes < kPrefixCheckpointFixed || !reader->U64(at, &record.salt) ||
        !reader->U32(at + 8, &priority) || !reader->U64(at + 16, &record.num_tokens) ||
        !reader->U64(at + 24, &record.state_bytes)) {
      return Result::Refused(Status::kBadState,
                             "prefix state: checkpoint %llu's section holds %llu bytes", i, bytes);
    }
    record.priority = static_cast<uint32_t>(priority);
    record.tokens_at = at + kPrefixCheckpointFixed;
    record.state_at = sections.Offset();
    const uint64_t token_bytes = bytes - kPrefixCheckpointFixed;
    if (record.num_tokens == 0 || token_bytes / sizeof(TokenId) != record.num_tokens ||
        token_bytes % sizeof(TokenId) != 0 ||
        record.state_bytes > reader->Size() - record.state_at) {
      return Result::Refused(Status::kBadState,
                             "prefix state: checkpoint %llu names %llu tokens in %llu bytes and a "
                             "state of %llu bytes; its section or the file is damaged",
                             i, record.num_tokens, token_bytes, record.state_bytes);
    }
    sections.Skip(record.state_bytes);
    records->push_back(record);
  }
  if (sections.Offset() != reader->Size()) {
    return Result::Refused(Status::kBadState,
                           "prefix state: %llu bytes follow its last checkpoint (at byte %llu)",
                           reader->Size() - sections.Offset(), sections.Offset());
  }
  return Status::kOk;
}

// A checkpoint the cache holds during a load: one a block of a later one may share.
struct HeldCheckpoint {
  SequenceId sequence;
  uint64_t salt = 0;
  std::vector<TokenId> tokens;
};

// Loads one checkpoint of a prefix file into a new sequence of the cache's pool and adds it,
// sharing the full blocks of tokens it shares with a checkpoint of *held (the same salt) where
// their rows are equal; sets *id, and *added unless the cache held the prefix already.
template <typename Layout>
Result LoadPrefixRecord(ByteSource* source, StateReader* reader, const PrefixRecord& record,
                        const std::string& model_id, PrefixCache<Layout>* cache,
                        std::vector<HeldCheckpoint>* held, uint32_t* id, bool* added) {
  KVPool<Layout>* pool = PrefixStateAccess::PoolOf(*cache);
  HeldCheckpoint checkpoint;
  checkpoint.salt = record.salt;
  checkpoint.tokens.resize(record.num_tokens);
  if (!reader->Copy(record.tokens_at, checkpoint.tokens.data(),
                    record.num_tokens * sizeof(TokenId))) {
    return ReadFailed(record.tokens_at);
  }
  *added = false;
  *id = PrefixStateAccess::Find(*cache, record.salt, checkpoint.tokens);
  if (*id != PrefixPoint::kNone) return Status::kOk;  // held already
  Result result = pool->AddSequence(&checkpoint.sequence, 1);
  if (!result.ok()) return result;
  SliceSource state(source, record.state_at, record.state_bytes);
  result = LoadState(&state, model_id, pool, checkpoint.sequence);
  if (result.ok() && *pool->EndPos(checkpoint.sequence) != record.num_tokens) {
    result = Result::Refused(Status::kBadState,
                             "prefix state: a checkpoint names %llu tokens, but its state holds "
                             "%llu positions",
                             record.num_tokens, *pool->EndPos(checkpoint.sequence));
  }
  if (!result.ok()) {
    (void)pool->Free(checkpoint.sequence);
    return result;
  }
  const std::vector<TokenId>& tokens = checkpoint.tokens;
  for (const HeldCheckpoint& other : *held) {
    if (other.salt != record.salt) continue;
    const size_t n = std::min(other.tokens.size(), tokens.size());
    const auto parted = std::mismatch(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(n),
                                      other.tokens.begin());
    const uint64_t shared = static_cast<uint64_t>(parted.first - tokens.begin());
    PrefixAccess::ShareEqualBlocks(pool, other.sequence, checkpoint.sequence,
                                   shared / pool->BlockSlots());
  }
  *id = PrefixStateAccess::Add(cache, checkpoint.sequence, record.salt, record.priority, tokens);
  *added = true;
  held->push_back(std::move(checkpoint));
  return Status::kOk;
}

}  // namespace detail

// Writes every checkpoint of `cache` to `sink`, each tagged with `model_id` as SaveState does.
// Refused, writing nothing, for a null sink or a model id past kMaxModelIdBytes
// (kBadArgument); kIOError if the sink failed. Allocates (a staging buffer, the tokens).
template <typename Layout>
Result SavePrefixCache(const PrefixCache<Layout>& cache, const std::string& model_id,
                       ByteSink* sink) {
  if (sink == nullptr || model_id.size() > kMaxModelIdBytes) {
    return Result::Refused(Status::kBadArgument,
                           "SavePrefixCache: a null sink, or a model id of %llu bytes (at most "
                           "%llu)",
                           uint64_t{model_id.size()}, kMaxModelIdBytes);
  }
  if (detail::PrefixStateAccess::PoolOf(cache) == nullptr) {
    return Result::Refused(Status::kBadArgument, "SavePrefixCache: a moved-from cache");
  }
  const KVPool<Layout>& pool = *detail::PrefixStateAccess::PoolOf(cache);
  const uint64_t count = detail::PrefixStateAccess::Count(cache);
  detail::StateWriter out(sink, detail::kStatePreambleBytes + detail::kSectionHeaderBytes + 8 +
                                    detail::kSectionCrcBytes);
  out.Put(detail::kPrefixMagic, 8);
  out.PutU32(detail::kPrefixVersion);
  out.PutU32(0);
  out.BeginSection(detail::kPrefixHeaderTag, 8);
  out.PutU64(count);
  out.EndSection();
  Result result = out.Finish();
  detail::PrefixStateAccess::ForEach(
      cache, [&](SequenceId sequence, uint64_t salt, uint32_t priority,
                 const std::vector<TokenId>& tokens) {
        if (!result.ok()) return;
        const uint64_t payload = detail::kPrefixCheckpointFixed + tokens.size() * sizeof(TokenId);
        detail::StateWriter record(
            sink, detail::kSectionHeaderBytes + payload + detail::kSectionCrcBytes);
        record.BeginSection(detail::kPrefixCheckpointTag, payload);
        record.PutU64(salt);
        record.PutU32(priority);
        record.PutU32(0);
        record.PutU64(tokens.size());
        record.PutU64(StateBytes(pool, sequence, model_id));
        record.Put(tokens.data(), tokens.size() * sizeof(TokenId));
        record.EndSection();
        result = record.Finish();
        if (result.ok()) result = SaveState(pool, sequence, model_id, sink);
      });
  return result;
}

// Loads the checkpoints SavePrefixCache wrote into `cache` (over a pool of the same model and
// plan, any layout and block size), beside those it holds (a prefix it holds already is kept).
// Every checkpoint loads or none does: a damaged file, another model or plan (kBadState, naming
// what differs), a pool without room for them (kPoolExhausted), a failing source (kIOError)
// leave the cache and the pool as they were. Checkpoints sharing full blocks of tokens share
// the blocks whose rows are equal.
template <typename Layout>
Result LoadPrefixCache(ByteSource* source, const std::string& model_id,
                       PrefixCache<Layout>* cache) {
  if (source == nullptr || cache == nullptr ||
      detail::PrefixStateAccess::PoolOf(*cache) == nullptr) {
    return Result::Refused(Status::kBadArgument,
                           "LoadPrefixCache: the source or cache is null, or the cache moved from");
  }
  detail::StateReader reader(source);
  std::vector<detail::PrefixRecord> records;
  Result result = detail::ReadPrefixRecords(&reader, &records);
  if (!result.ok()) return result;
  std::vector<detail::HeldCheckpoint> held;  // the cache's, then those loaded
  detail::PrefixStateAccess::ForEach(*cache, [&](SequenceId sequence, uint64_t salt, uint32_t,
                                                 const std::vector<TokenId>& tokens) {
    held.push_back(detail::HeldCheckpoint{sequence, salt, tokens});
  });
  std::vector<uint32_t> added;
  for (const detail::PrefixRecord& record : records) {
    uint32_t id = detail::PrefixPoint::kNone;
    bool is_new = false;
    result =
        detail::LoadPrefixRecord(source, &reader, record, model_id, cache, &held, &id, &is_new);
    if (!result.ok()) break;
    if (is_new) added.push_back(id);
  }
  if (!result.ok()) {
    for (uint32_t id : added) detail::PrefixStateAccess::Erase(cache, id);
  }
  return result;
}

// SavePrefixCache to the file at `path` (through "<path>.tmp", renamed when complete).
template <typename Layout>
Result SavePrefixCacheFile(const PrefixCache<Layout>& cache, const std::string& model_id,
                           const std::string& path) {
  FileSink sink;
  Result result = sink.Open(path);
  if (result.ok()) result = SavePrefixCache(cache, model_id, &sink);
  return result.ok() ? sink.Finish() : result;
}

// LoadPrefixCache from the file at `path`; kIOError if it cannot be opened.
template <typename Layout>
Result LoadPrefixCacheFile(const std::string& path, const std::string& model_id,
                           PrefixCache<Layout>* cache) {
  FileSource source;
  const Result opened = source.Open(path);
  return opened.ok() ? LoadPrefixCache(&source, model_id, cache) : opened;
}

}  // namespace kvring

#endif  // KVRING_IO_PREFIX_STATE_H_
