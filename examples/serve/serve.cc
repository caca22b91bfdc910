// serve: a continuous-batching server loop on kvring, for the mini engine's model
// (mini_engine/model.h), with every request's K/V in one kvring::KVPool of a fixed byte budget.
// No network: a seeded generator makes the requests (mixed prompt and generation lengths, most
// starting with one shared system prompt) and the steps they arrive at. The system prompt is
// prefilled once into a pool sequence kept alive; a request that starts with it forks that
// sequence (sharing its blocks, copy-on-write) and prefills only the rest of its prompt. Each
// step reserves room for every running request's tokens (KVPool::Reserve), runs them as one
// forward pass whose attention is one kvring::AttentionMany call per layer (prefill chunks and
// decode tokens together), frees the finished requests and admits waiting ones while the
// budget allows (docs/serving.md: the policy). Then every request runs alone on flat storage
// (a KVCache with every layer at full context) and must give the same tokens and logits, bit
// for bit. With --hybrid the model's layers 1-3 are recurrent: each request keeps its states in
// the pool (forks copy them). Exits 1 if any check fails.
//
//   serve [--backend=flash|tiled] [--requests=N] [--budget-kib=N] [--csv=FILE] ...
//         (--help lists every option)
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kvring/dispatch.h"
#include "kvring/kvring.h"
#include "mini_engine/checks.h"
#include "mini_engine/kernels.h"
#include "mini_engine/model.h"
#include "mini_engine/options.h"
#include "serve/config.h"
#include "serve/reference.h"
#include "serve/reuse.h"

namespace serve {
namespace {

using kvring::Result;
using kvring::SequenceId;
using kvring::Status;
using mini_engine::Activations;
using mini_engine::Bytes;
using mini_engine::Checks;
using mini_engine::Clock;
using mini_engine::MiB;
using mini_engine::Model;
using mini_engine::Plural;
using mini_engine::Ratio;
using mini_engine::SecondsSince;
using mini_engine::Span;

// ---------------------------------------------------------------------------------------------
// Requests

enum class State { kArriving, kWaiting, kRunning, kFinished };

struct Request {
  uint32_t index = 0;
  uint64_t arrival_step = 0;
  bool shared = false;          // the prompt starts with the system prompt
  std::vector<int32_t> prompt;  // the system prompt's tokens included
  uint64_t num_generate = 0;
  // One KVCache planned for this request alone (its positions, the server's prefill chunk):
  // what an engine without a pool would allocate for it; and a flat cache of the same.
  uint64_t kvcache_bytes = 0;
  uint64_t flat_bytes = 0;

  // The server's state.
  State state = State::kArriving;
  SequenceId id;
  uint64_t pos = 0;  // positions its sequence holds
  uint32_t preemptions = 0;
  std::vector<int32_t> tokens;  // generated so far, with the logits each was chosen from
  std::vector<float> logits;

  // Its run alone on flat storage.
  std::vector<int32_t> ref_tokens;
  std::vector<float> ref_logits;

  // Positions its sequence reaches: the prompt, and every generated token but the last,
  // which is chosen and not run.
  uint64_t FinalPositions() const { return prompt.size() + num_generate - 1; }
  bool Prefilling() const { return pos < prompt.size(); }
};

// Returns the requests of `config`, in the order they arrive.
std::vector<Request> MakeRequests(const Config& config, const std::vector<int32_t>& system) {
  std::mt19937 rng(config.model.seed + 4000);
  const auto uniform = [&](uint64_t low, uint64_t high) {
    return std::uniform_int_distribution<uint64_t>(low, high)(rng);
  };
  std::vector<Request> requests(config.requests);
  uint64_t step = 0;
  for (uint32_t i = 0; i < requests.size(); ++i) {
    Request& r = requests[i];
    r.index = i;
    step += i == 0 ? 0 : uniform(0, config.arrival_gap);
    r.arrival_step = step;
    r.shared = !system.empty() && uniform(0, 99) < config.shared_percent;
    const std::vector<int32_t> own = mini_engine::RandomTokens(
        config.model.seed + 5000 + i, uniform(config.min_prompt, config.max_prompt),
        config.model.vocab);
    if (r.shared) r.prompt = system;
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.num_generate = uniform(config.min_generate, config.max_generate);
  }
  return requests;
}

// ---------------------------------------------------------------------------------------------
// The server

// What the server did and measured.
struct Stats {
  uint64_t steps = 0;         // steps that ran a forward pass
  uint64_t system_steps = 0;  // the system prompt's prefill chunks, before them
  uint64_t last_step = 0;
  double seconds = 0.0;
  uint64_t prefill_tokens = 0, decode_tokens = 0;  // run, recomputations after preemption too
  uint64_t attention_calls = 0, attention_entries = 0, max_entries = 0;
  uint64_t forks = 0, forks_taking_blocks = 0, fork_shape_errors = 0;
  uint64_t admission_waits = 0;   // steps whose first waiting request had to wait for room
  uint64_t preemptions = 0;       // each after a kPoolExhausted from Reserve
  uint64_t rings_grown = 0;       // prefills whose chunks grew the rings past decode size
  uint64_t ring_size_errors = 0;  // rings smaller than a chunk, or not decode-sized after
  uint64_t samples = 0, over_budget = 0, accounting_errors = 0;
  // The pool's peak and the same moment's alternatives.
  uint64_t peak_bytes = 0, peak_step = 0, peak_kvcache_bytes = 0, peak_flat_bytes = 0;
  uint64_t peak_bytes_running = 0;
  uint64_t max_kvcache_bytes = 0;  // the largest sum of the running requests' KVCaches
  uint64_t peak_running = 0, peak_waiting = 0;
};

template <class Layout>
class Server {
 public:
  Server(const Config& config, const Model& model, const kvring::AttentionOptions& options,
         kvring::KVPool<Layout>* pool, kvring::ThreadPool* threads, std::vector<Request>* requests,
         std::FILE* csv)
      : config_(config),
        model_(model),
        options_(options),
        pool_(*pool),
        runner_(threads->Runner()),
        requests_(*requests),
        csv_(csv) {}

  const Stats& GetStats() const { return stats_; }
  SequenceId Prefix() const { return prefix_; }
  uint64_t PrefixBytes() const {
    return *pool_.RingBytesOf(prefix_) + pool_.Plan().StateBytes() +
           *pool_.BlocksOf(prefix_) * pool_.Usage().block_bytes;
  }

  // Prefills the system prompt into a sequence of its own, kept to the end: the requests that
  // start with it fork it. Its rings are then resized for decode, as the forks' are.
  Status PrefillSystemPrompt(const std::vector<int32_t>& system) {
    start_ = Clock::now();
    system_positions_ = system.size();
    const Result added = pool_.AddSequence(&prefix_, 1);
    if (!added.ok()) return Fail("the system prompt's sequence", added);
    for (uint64_t pos = 0; pos < system.size();) {
      const uint64_t n = std::min<uint64_t>(config_.batch, system.size() - pos);
      const Result reserved = pool_.Reserve(prefix_, n);
      if (!reserved.ok()) return Fail("the system prompt's prefill", reserved);
      slots_.assign(1, Slot{nullptr, prefix_, 0, Span{pos, n}});
      step_tokens_.assign(system.begin() + pos, system.begin() + pos + n);
      const Status status = Forward();
      if (status != Status::kOk) return status;
      stats_.prefill_tokens += n;
      ++stats_.system_steps;
      pos += n;
    }
    if (system.empty()) return Status::kOk;
    const Result resized = pool_.Resize(prefix_, 1);
    if (!resized.ok()) return Fail("the system prompt's decode rings", resized);
    return Status::kOk;
  }

  // Serves every request: arrivals join the waiting queue, admissions fork or add their
  // sequences, and each step runs the running requests' next tokens, until all are finished.
  Status Run() {
    size_t next_arrival = 0, finished = 0;
    while (finished < requests_.size()) {
      if (running_.empty() && waiting_.empty() && next_arrival < requests_.size()) {
        step_ = std::max(step_, requests_[next_arrival].arrival_step);  // idle until it comes
      }
      while (next_arrival < requests_.size() && requests_[next_arrival].arrival_step <= step_) {
        requests_[next_arrival].state = State::kWaiting;
        waiting_.push_back(&requests_[next_arrival++]);
      }
      // Admission in arrival order: a request that does not fit waits, and so do those behind
      // it (no overtaking, so a long prompt is not starved by short ones).
      while (!waiting_.empty()) {
        Request* r = waiting_.front();
        const Status admitted = Admit(r);
        if (admitted == Status::kPoolExhausted) {
          ++stats_.admission_waits;
          if (running_.empty()) {
            std::fprintf(stderr, "serve: request %u does not fit the budget alone\n", r->index);
            return Status::kPoolExhausted;
          }
          break;
        }
        if (admitted != Status::kOk) return admitted;
        waiting_.pop_front();
      }
      stats_.peak_waiting = std::max<uint64_t>(stats_.peak_waiting, waiting_.size());
      const Status scheduled = Schedule();
      if (scheduled != Status::kOk) return scheduled;
      WriteCsv(step_, finished);
      if (!slots_.empty()) {
        const Status status = Forward();
        if (status != Status::kOk) return status;
        ++stats_.steps;
        const Status advanced = Advance(&finished);
        if (advanced != Status::kOk) return advanced;
      }
      stats_.last_step = step_++;
      progress_.Update(step_, running_.size(), waiting_.size(), finished, requests_.size(),
                       pool_.Usage());
    }
    stats_.seconds = SecondsSince(start_);
    return Status::kOk;
  }

 private:
  // One sequence's part of a step: its tokens are rows [row, row + span.num_tokens).
  struct Slot {
    Request* request;  // null for the system prompt's sequence
    SequenceId id;
    size_t row;
    Span span;
  };

  // Prints the stderr line every two seconds of a long run.
  class Progress {
   public:
    void Update(uint64_t step, size_t running, size_t waiting, size_t finished, size_t total,
                const kvring::PoolUsage& usage) {
      const double elapsed = SecondsSince(start_);
      if (elapsed < next_) return;
      next_ = elapsed + 2.0;
      std::fflush(stdout);
      std::fprintf(stderr,
                   "  [%6.1f s] serve step %" PRIu64
                   ": %zu running, %zu waiting, %zu / %zu finished, %.2f of %.2f MiB in use\n",
                   elapsed, step, running, waiting, finished, total, MiB(usage.bytes_in_use),
                   MiB(usage.budget_bytes));
    }

   private:
    Clock::time_point start_ = Clock::now();
    double next_ = 2.0;
  };

  Status Fail(const char* what, const Result& result) {
    std::fprintf(stderr, "serve: %s: %s\n", what, result.Message().c_str());
    return result.status();
  }

  // The bytes `r` adds to the pool in its next `steps` steps: the blocks its new positions
  // reach, the copy of the shared block a fork writes first, and the rings its prefill chunks
  // grow. An estimate for admission only: Reserve is what guarantees a step its room.
  uint64_t LookaheadBytes(const Request& r, uint64_t steps) const {
    const uint64_t prompt = r.prompt.size();
    uint64_t pos = r.pos, rings = 0;
    if (pos < prompt) {
      const uint64_t chunk = std::min(config_.batch, prompt - pos);
      const uint64_t want = pool_.RingBytesFor(chunk), have = *pool_.RingBytesOf(r.id);
      rings = want > have ? want - have : 0;
      const uint64_t chunks = (prompt - pos + config_.batch - 1) / config_.batch;
      if (steps <= chunks) {
        pos += std::min(prompt - pos, steps * config_.batch);
        steps = 0;
      } else {
        pos = prompt;
        steps -= chunks;
      }
    }
    pos = std::min(r.FinalPositions(), pos + steps);
    uint64_t bytes = pool_.BlockBytesFor(pos) - pool_.BlockBytesFor(r.pos);
    const bool shares_last_block =
        r.shared && r.pos == system_positions_ && system_positions_ % pool_.BlockSlots() != 0;
    if (pos > r.pos && shares_last_block) bytes += pool_.Usage().block_bytes;
    return bytes + rings;
  }

  // Admits `r` if the pool has room for its sequence and for what it and every running
  // request add in the next `lookahead` steps: forks the system prompt's sequence or adds an
  // empty one (decode-sized rings: Reserve grows them for the prefill's chunks). Returns
  // kPoolExhausted, having changed nothing, when `r` must wait.
  Status Admit(Request* r) {
    const kvring::PoolUsage before = pool_.Usage();
    SequenceId id;
    const Result made = r->shared ? pool_.Fork(prefix_, &id) : pool_.AddSequence(&id, 1);
    if (made.status() == Status::kPoolExhausted) return Status::kPoolExhausted;
    if (!made.ok()) return Fail("admission", made);
    r->id = id;
    r->pos = r->shared ? system_positions_ : 0;
    uint64_t wanted = LookaheadBytes(*r, config_.lookahead);
    for (const Request* running : running_) wanted += LookaheadBytes(*running, config_.lookahead);
    const kvring::PoolUsage usage = pool_.Usage();
    if (wanted > usage.budget_bytes - usage.bytes_in_use) {
      const Result freed = pool_.Free(id);
      if (!freed.ok()) return Fail("an admission's undo", freed);
      r->id = SequenceId();
      r->pos = 0;
      return Status::kPoolExhausted;
    }
    if (r->shared) {
      // A fork costs its rings: it holds the system prompt's blocks by reference.
      ++stats_.forks;
      stats_.forks_taking_blocks += usage.blocks_in_use != before.blocks_in_use;
      stats_.fork_shape_errors += *pool_.EndPos(id) != system_positions_ ||
                                  *pool_.BlocksOf(id) != *pool_.BlocksOf(prefix_) ||
                                  usage.shared_blocks < *pool_.BlocksOf(prefix_);
    }
    r->state = State::kRunning;
    running_.push_back(r);
    running_kvcache_bytes_ += r->kvcache_bytes;
    running_flat_bytes_ += r->flat_bytes;
    stats_.peak_running = std::max<uint64_t>(stats_.peak_running, running_.size());
    stats_.max_kvcache_bytes = std::max(stats_.max_kvcache_bytes, running_kvcache_bytes_);
    Sample();
    return Status::kOk;
  }

  // Preempts `r`, the newest running request: frees its sequence and puts it first in the
  // waiting queue, to be admitted again and recomputed from its prompt (greedy decoding gives
  // the same tokens again).
  Status Preempt(Request* r) {
    const Result freed = pool_.Free(r->id);
    if (!freed.ok()) return Fail("a preemption", freed);
    running_.erase(std::find(running_.begin(), running_.end(), r));
    running_kvcache_bytes_ -= r->kvcache_bytes;
    running_flat_bytes_ -= r->flat_bytes;
    r->id = SequenceId();
    r->pos = 0;
    r->tokens.clear();
    r->logits.clear();
    r->state = State::kWaiting;
    ++r->preemptions;
    ++stats_.preemptions;
    waiting_.push_front(r);
    return Status::kOk;
  }

  // Lays out the step: each running request's next prompt chunk or decode token, in admission
  // order, each reserved before any is appended. When Reserve refuses for the budget, the
  // newest running request is preempted (the one refused, if it is the newest) and the
  // reservation tried again, so the oldest requests always progress.
  Status Schedule() {
    slots_.clear();
    step_tokens_.clear();
    size_t row = 0;
    for (size_t i = 0; i < running_.size();) {
      Request* r = running_[i];
      const uint64_t n = r->Prefilling() ? std::min(config_.batch, r->prompt.size() - r->pos) : 1;
      Result reserved = pool_.Reserve(r->id, n);
      bool preempted_itself = false;
      while (reserved.status() == Status::kPoolExhausted && !preempted_itself) {
        Request* newest = running_.back();
        preempted_itself = newest == r;
        const Status status = Preempt(newest);
        if (status != Status::kOk) return status;
        if (!preempted_itself) reserved = pool_.Reserve(r->id, n);
      }
      if (preempted_itself && running_.empty()) {
        std::fprintf(stderr, "serve: request %u does not fit the budget alone\n", r->index);
        return Status::kPoolExhausted;
      }
      if (preempted_itself) break;  // it was the newest running
      if (!reserved.ok()) return Fail("a step's reservation", reserved);
      Sample();
      if (r->Prefilling()) {
        const bool grown = *pool_.RingBytesOf(r->id) > pool_.RingBytesFor(1);
        stats_.ring_size_errors += *pool_.RingBytesOf(r->id) < pool_.RingBytesFor(n);
        if (r->pos == (r->shared ? system_positions_ : 0)) stats_.rings_grown += grown;
        step_tokens_.insert(step_tokens_.end(), r->prompt.begin() + r->pos,
                            r->prompt.begin() + r->pos + n);
      } else {
        step_tokens_.push_back(r->tokens.back());
      }
      slots_.push_back(Slot{r, r->id, row, Span{r->pos, n}});
      row += n;
      ++i;
    }
    return Status::kOk;
  }

  // Records the pool's use now: the peak, what one KVCache per running request and flat caches
  // would hold at the same moment, and the invariants of the accounting.
  void Sample() {
    const kvring::PoolUsage usage = pool_.Usage();
    ++stats_.samples;
    stats_.over_budget += usage.bytes_in_use > usage.budget_bytes;
    stats_.accounting_errors += usage.bytes_in_use != usage.ring_bytes + usage.state_bytes +
                                                          usage.blocks_in_use * usage.block_bytes;
    if (usage.bytes_in_use > stats_.peak_bytes) {
      stats_.peak_bytes = usage.bytes_in_use;
      stats_.peak_step = step_;
      stats_.peak_kvcache_bytes = running_kvcache_bytes_;
      stats_.peak_flat_bytes = running_flat_bytes_;
      stats_.peak_bytes_running = running_.size();
    }
  }

  // Runs the step laid out in slots_ and step_tokens_: appends every sequence's K/V of each
  // owning layer, then attends all of them in one AttentionMany call; logits_ gets every row's.
  Status Forward() {
    spans_.clear();
    for (const Slot& slot : slots_) spans_.push_back(slot.span);
    const auto attend = [&](size_t layer, const float* q, const float* k, const float* v,
                            float* attn) {
      if (mini_engine::IsRecurrent(model_.config, layer)) {
        // A hybrid model's recurrent layer: each sequence from its own states in the pool.
        const size_t dim = model_.QDim(layer);
        for (const Slot& slot : slots_) {
          const Status status = mini_engine::RecurStep(
              model_, layer, q + slot.row * dim, slot.span.num_tokens, slot.span.first_pos,
              attn + slot.row * dim, [&] { return pool_.State(slot.id, layer); },
              [&](uint64_t n) { return pool_.StateAfter(slot.id, layer, n); }, &conv_, &state_);
          if (status != Status::kOk) return status;
        }
        return Status::kOk;
      }
      const size_t kv_dim = model_.KVDim(layer);
      if (k != nullptr) {
        for (const Slot& slot : slots_) {
          // Reserved: an append cannot be refused for the budget.
          const Result appended =
              pool_.AppendF32(slot.id, layer, slot.span.first_pos, k + slot.row * kv_dim,
                              v + slot.row * kv_dim, slot.span.num_tokens);
          if (!appended.ok()) return Fail("an append", appended);
        }
      }
      // The views after every append of the layer: an append may move a sequence's blocks.
      entries_.clear();
      for (const Slot& slot : slots_) {
        const kvring::ValueResult<kvring::KVView<Layout>> view = pool_.View(slot.id, layer);
        if (!view.ok()) return Fail("a view", view);
        entries_.push_back(kvring::AttentionEntry<Layout>{
            *view, mini_engine::SpanQueries(model_, layer, q, attn, slot.row, slot.span)});
      }
      const Result attended =
          kvring::AttentionMany(entries_.data(), entries_.size(), options_, workspace_, runner_);
      if (!attended.ok()) return Fail("attention", attended);
      ++stats_.attention_calls;
      stats_.attention_entries += entries_.size();
      stats_.max_entries = std::max<uint64_t>(stats_.max_entries, entries_.size());
      return Status::kOk;
    };
    return mini_engine::Forward(model_, step_tokens_.data(), spans_.data(), spans_.size(), attend,
                                &activations_, &logits_);
  }

  // After a step: each request holds its new positions; a finished prefill resizes its rings
  // for decode and chooses the first token, a decode step the next one; a request with all
  // its tokens is freed.
  Status Advance(size_t* finished) {
    const size_t vocab = model_.config.vocab;
    for (const Slot& slot : slots_) {
      Request* r = slot.request;
      const bool prefill = r->Prefilling();
      r->pos += slot.span.num_tokens;
      (prefill ? stats_.prefill_tokens : stats_.decode_tokens) += slot.span.num_tokens;
      if (r->Prefilling()) continue;
      if (prefill) {
        // Decode reads window - 1 positions before each token: rings of one batch.
        const Result resized = pool_.Resize(r->id, 1);
        if (!resized.ok()) return Fail("the decode rings", resized);
        stats_.ring_size_errors += *pool_.RingBytesOf(r->id) != pool_.RingBytesFor(1);
      }
      const float* row = logits_.data() + (slot.row + slot.span.num_tokens - 1) * vocab;
      r->tokens.push_back(mini_engine::ArgMax(row, vocab));
      r->logits.insert(r->logits.end(), row, row + vocab);
      if (r->tokens.size() < r->num_generate) continue;
      const Result freed = pool_.Free(r->id);
      if (!freed.ok()) return Fail("a finished request", freed);
      running_.erase(std::find(running_.begin(), running_.end(), r));
      running_kvcache_bytes_ -= r->kvcache_bytes;
      running_flat_bytes_ -= r->flat_bytes;
      r->state = State::kFinished;
      ++*finished;
    }
    return Status::kOk;
  }

  void WriteCsv(uint64_t step, size_t finished) {
    if (csv_ == nullptr) return;
    const kvring::PoolUsage usage = pool_.Usage();
    std::fprintf(
        csv_, "%" PRIu64 ",%.4f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%zu,%zu,%zu\n",
        step, SecondsSince(start_), usage.budget_bytes, usage.bytes_in_use, running_kvcache_bytes_,
        running_flat_bytes_, running_.size(), waiting_.size(), finished);
  }

  const Config& config_;
  const Model& model_;
  const kvring::AttentionOptions options_;
  kvring::KVPool<Layout>& pool_;
  kvring::TaskRunner runner_;
  std::vector<Request>& requests_;
  std::FILE* csv_;
  Clock::time_point start_ = Clock::now();
  Progress progress_;
  SequenceId prefix_;
  uint64_t system_positions_ = 0;
  std::vector<Request*> running_;  // in admission order, the newest last
  std::deque<Request*> waiting_;   // in arrival order, preempted requests first
  uint64_t running_kvcache_bytes_ = 0, running_flat_bytes_ = 0;
  uint64_t step_ = 0;  // the step Run is at
  // The step being run, and what its forward pass works in (kept: steps allocate only when
  // they are larger than every step before).
  std::vector<Slot> slots_;
  std::vector<int32_t> step_tokens_;
  std::vector<Span> spans_;
  std::vector<kvring::AttentionEntry<Layout>> entries_;
  std::vector<float> logits_;
  Activations activations_;
  std::vector<float> conv_, state_;  // a recurrent layer's state while a step runs
  kvring::AttentionWorkspace workspace_;
  Stats stats_;
};

// ---------------------------------------------------------------------------------------------
// The run

template <class Layout>
int Run(const Config& config) {
  const Model model = mini_engine::MakeModel(config.model);
  const size_t vocab = config.model.vocab;
  const std::vector<int32_t> system =
      mini_engine::RandomTokens(config.model.seed + 1000, config.system_prompt, vocab);
  std::vector<Request> requests = MakeRequests(config, system);
  uint64_t context = system.size();
  for (const Request& r : requests) context = std::max(context, r.FinalPositions());

  // 1. Plan: the pool's layers at the longest request's positions and the prefill chunk; the
  //    flat reference has every owner at that context (a rollback headroom of the context
  //    plans every owner flat, as in the mini engine); each request's own KVCache is planned
  //    at its own positions.
  kvring::Expected<kvring::LayerPlan> plan = kvring::Error{}, flat_plan = kvring::Error{};
  if (!MakePlans<Layout>(config, context, &plan, &flat_plan)) return 2;
  uint64_t all_kvcache_bytes = 0, all_flat_bytes = 0, num_shared = 0, generated = 0;
  uint64_t shortest = context, longest = 0;
  for (Request& r : requests) {
    kvring::RuntimeSpec runtime = plan->Runtime();
    runtime.context = r.FinalPositions();
    runtime.batch = std::min(config.batch, runtime.context);
    const kvring::Expected<kvring::LayerPlan> own = plan->WithRuntime(runtime);
    if (!own.ok()) {
      std::fprintf(stderr, "serve: request %u: %s\n", r.index, own.error().message.c_str());
      return 2;
    }
    r.kvcache_bytes = own->TotalBytes();
    r.flat_bytes = own->FlatBytes();
    all_kvcache_bytes += r.kvcache_bytes;
    all_flat_bytes += r.flat_bytes;
    num_shared += r.shared;
    generated += r.num_generate;
    shortest = std::min<uint64_t>(shortest, r.prompt.size());
    longest = std::max<uint64_t>(longest, r.prompt.size());
  }

  kvring::PoolSpec spec;
  spec.budget_bytes = config.budget_kib * 1024;
  spec.max_sequences = static_cast<uint32_t>(requests.size() + 1);
  spec.block_slots = config.block_slots;
  kvring::Expected<kvring::KVPool<Layout>> pool = kvring::KVPool<Layout>::Create(*plan, spec);
  if (!pool.ok()) {
    std::fprintf(stderr, "serve: %s\n", pool.error().message.c_str());
    return 2;
  }
  const uint64_t block_bytes = pool->Usage().block_bytes;

  std::printf(
      "serve: %zu layers, hidden %u, vocab %u, %u q heads on %u kv_heads of %u, window %llu\n",
      mini_engine::kNumLayers, config.model.hidden, config.model.vocab, config.model.num_q_heads,
      config.model.num_kv_heads, config.model.head_dim,
      static_cast<unsigned long long>(config.model.window));
  std::printf(
      "  %s backend on target %s, %u attention thread(s); context %llu, prefill chunks "
      "of %llu, decode KV split every %llu positions\n",
      kvring::ToString(Layout::kBackend), kvring::DispatchedTargetName(), config.threads,
      static_cast<unsigned long long>(context), static_cast<unsigned long long>(config.batch),
      static_cast<unsigned long long>(config.split_positions));
  std::printf(
      "  pool: budget %s; blocks of %llu positions (%s, the global owner's); rings of "
      "a sequence %s for decode, %s for a prefill chunk\n",
      Bytes(spec.budget_bytes).c_str(), static_cast<unsigned long long>(pool->BlockSlots()),
      Bytes(block_bytes).c_str(), Bytes(pool->RingBytesFor(1)).c_str(),
      Bytes(pool->RingBytesFor(plan->Runtime().batch)).c_str());
  std::printf(
      "  requests: %zu arriving over %llu steps, %llu of them after the %zu-token system "
      "prompt; prompts of %llu to %llu tokens, %llu to %llu generated (%llu in all)\n",
      requests.size(), static_cast<unsigned long long>(requests.back().arrival_step),
      static_cast<unsigned long long>(num_shared), system.size(),
      static_cast<unsigned long long>(shortest), static_cast<unsigned long long>(longest),
      static_cast<unsigned long long>(config.min_generate),
      static_cast<unsigned long long>(config.max_generate),
      static_cast<unsigned long long>(generated));

  // The oldest running request always progresses (the newest are preempted for it), so the
  // budget must hold the system prompt's sequence and any one request alone: its prefill
  // rings and every block it reaches, plus the copy of the block it shares.
  const uint64_t system_bytes = pool->RingBytesFor(1) + pool->BlockBytesFor(system.size());
  for (const Request& r : requests) {
    const uint64_t alone = system_bytes + pool->RingBytesFor(plan->Runtime().batch) +
                           pool->BlockBytesFor(r.FinalPositions()) + block_bytes;
    if (alone > spec.budget_bytes) {
      std::fprintf(stderr,
                   "serve: the budget of %s cannot hold request %u alone (%s); raise "
                   "--budget-kib\n",
                   Bytes(spec.budget_bytes).c_str(), r.index, Bytes(alone).c_str());
      return 2;
    }
  }

  std::FILE* csv = nullptr;
  if (!config.csv.empty()) {
    csv = std::fopen(config.csv.c_str(), "w");
    if (csv == nullptr) {
      std::fprintf(stderr, "serve: cannot write %s\n", config.csv.c_str());
      return 2;
    }
    std::fprintf(csv,
                 "step,seconds,budget_bytes,bytes_in_use,kvcache_bytes,flat_bytes,running,waiting,"
                 "finished\n");
  }

  // 2. Serve. Every attention call of the run, here and in the reference, has these options:
  //    a call of one query (a decode step) splits KV every split_positions positions, one of
  //    a prefill chunk's larger size does not; the reference's calls are alike, so their
  //    bits can be compared.
  kvring::AttentionOptions options;
  options.split_positions = config.split_positions;
  kvring::ThreadPool threads(config.threads);
  Checks checks;
  Server<Layout> server(config, model, options, &pool.value(), &threads, &requests, csv);
  Status served = server.PrefillSystemPrompt(system);
  if (served == Status::kOk) served = server.Run();
  if (csv != nullptr) std::fclose(csv);
  const Stats stats = server.GetStats();

  // 3. The reference: each request alone on a flat cache. The system prompt is prefilled once
  //    into a flat cache, in the server's chunks, and a request that starts with it starts
  //    from a Copy() of that cache (a snapshot reads as the prefill it copies, property 3).
  const Clock::time_point reference_start = Clock::now();
  Status referenced = Status::kOk;
  {
    kvring::Expected<kvring::KVCache<Layout>> system_cache =
        kvring::KVCache<Layout>::Create(*flat_plan);
    if (!system_cache.ok()) {
      std::fprintf(stderr, "serve: %s\n", system_cache.error().message.c_str());
      return 2;
    }
    Activations activations;
    kvring::AttentionWorkspace workspace;
    Request system_request;
    system_request.prompt = system;
    system_request.num_generate = 1;
    if (!system.empty()) {
      referenced = RunAlone(model, options, config.batch, &system_cache.value(), system, 1,
                            &system_request.ref_tokens, &system_request.ref_logits, &workspace,
                            threads.Runner(), &activations);
    }
    double next_progress = 2.0;
    for (Request& r : requests) {
      if (referenced != Status::kOk) break;
      kvring::Expected<kvring::KVCache<Layout>> cache =
          r.shared ? system_cache->Copy() : kvring::KVCache<Layout>::Create(*flat_plan);
      if (!cache.ok()) {
        std::fprintf(stderr, "serve: %s\n", cache.error().message.c_str());
        return 2;
      }
      referenced =
          RunAlone(model, options, config.batch, &cache.value(), r.prompt, r.num_generate,
                   &r.ref_tokens, &r.ref_logits, &workspace, threads.Runner(), &activations);
      if (SecondsSince(reference_start) >= next_progress) {
        next_progress += 2.0;
        std::fflush(stdout);
        std::fprintf(stderr, "  [%6.1f s] flat reference: request %u of %zu\n",
                     SecondsSince(reference_start), r.index + 1, requests.size());
      }
    }
  }
  const double reference_seconds = SecondsSince(reference_start);

  // 4. Checks.
  std::printf("\nchecks\n");
  checks.ExpectStatus(served, "the server loop");
  checks.ExpectStatus(referenced, "the flat reference runs");
  checks.Expect(spec.budget_bytes < all_flat_bytes && spec.budget_bytes < all_kvcache_bytes,
                "the budget (" + Bytes(spec.budget_bytes) + ") is below the requests' flat " +
                    "caches (" + Bytes(all_flat_bytes) + ") and their own KVCaches (" +
                    Bytes(all_kvcache_bytes) + ")");
  uint64_t matched = 0, matched_tokens = 0, preempted_matched = 0;
  for (const Request& r : requests) {
    const std::string difference =
        mini_engine::Compare(r.tokens, r.logits, r.ref_tokens, r.ref_logits, vocab);
    const bool ok = r.state == State::kFinished && difference.empty();
    checks.Count(ok, "request " + std::to_string(r.index) + " (prompt " +
                         std::to_string(r.prompt.size()) + ", " +
                         (r.shared ? "forked" : "own sequence") + ", preempted " +
                         std::to_string(r.preemptions) + "x) against its flat run alone: " +
                         (r.state == State::kFinished ? difference : "not finished"));
    matched += ok;
    matched_tokens += ok ? r.tokens.size() : 0;
    preempted_matched += ok && r.preemptions > 0;
  }
  checks.Expect(matched == requests.size(),
                std::to_string(matched) + " of " + std::to_string(requests.size()) + " requests (" +
                    std::to_string(preempted_matched) +
                    " of them preempted and recomputed) against each run alone on flat storage: " +
                    std::to_string(matched_tokens) + " tokens and their logits bit-identical");
  const uint64_t system_blocks = *pool->BlocksOf(server.Prefix());
  checks.Expect(
      stats.forks >= num_shared && stats.forks_taking_blocks == 0 && stats.fork_shape_errors == 0,
      std::to_string(stats.forks) + " forks of the system prompt's sequence (" +
          std::to_string(system.size()) + " positions prefilled once) each held its " +
          Plural(system_blocks, "block") + " by reference and took none: " +
          std::to_string(stats.forks_taking_blocks) + " took blocks, " +
          std::to_string(stats.fork_shape_errors) + " held other positions or blocks");
  const bool chunks_grow = pool->RingBytesFor(plan->Runtime().batch) > pool->RingBytesFor(1);
  checks.Expect(stats.ring_size_errors == 0 && (!chunks_grow || stats.rings_grown > 0),
                "Reserve grew the rings for prefill chunks (" + std::to_string(stats.rings_grown) +
                    " prefills past decode size) and Resize(id, 1) left every decoding " +
                    "request rings of " + Bytes(pool->RingBytesFor(1)) + ": " +
                    std::to_string(stats.ring_size_errors) + " rings of another size");
  checks.Expect(stats.over_budget == 0 && stats.accounting_errors == 0 && stats.samples > 0,
                "memory in use stayed within the budget at all " + std::to_string(stats.samples) +
                    " samples (after every admission and reservation), rings plus blocks: " +
                    std::to_string(stats.over_budget) + " over, " +
                    std::to_string(stats.accounting_errors) + " miscounted");
  checks.Expect(stats.admission_waits > 0,
                "the budget bound: the first waiting request waited for room at " +
                    std::to_string(stats.admission_waits) + " steps (" +
                    Plural(stats.preemptions, "preemption") + ")");
  {
    const kvring::PoolUsage left = pool->Usage();
    const bool only_system = left.live_sequences == 1 && left.bytes_in_use == server.PrefixBytes();
    const Result freed = pool->Free(server.Prefix());
    const kvring::PoolUsage empty = pool->Usage();
    checks.Expect(only_system && freed.ok() && empty.bytes_in_use == 0 &&
                      empty.blocks_in_use == 0 && empty.live_sequences == 0,
                  "afterwards only the system prompt's sequence was live (" +
                      Bytes(left.bytes_in_use) + "), and freeing it left " +
                      std::to_string(empty.bytes_in_use) + " bytes in use");
  }

  // 5. Report.
  std::printf(
      "\nmemory (K/V bytes; one KVCache per request: each planned for its own positions "
      "and the prefill chunk)\n");
  std::printf("  pool, peak in use   %10s at step %llu, %llu requests running (budget %s)\n",
              Bytes(stats.peak_bytes).c_str(), static_cast<unsigned long long>(stats.peak_step),
              static_cast<unsigned long long>(stats.peak_bytes_running),
              Bytes(spec.budget_bytes).c_str());
  std::printf("  one KVCache each    %10s for those requests, %.2fx the pool\n",
              Bytes(stats.peak_kvcache_bytes).c_str(),
              Ratio(stats.peak_kvcache_bytes, stats.peak_bytes));
  std::printf("  flat caches         %10s for those requests, %.2fx the pool\n",
              Bytes(stats.peak_flat_bytes).c_str(), Ratio(stats.peak_flat_bytes, stats.peak_bytes));
  std::printf(
      "  every request at once: one KVCache each %s, flat %s; the largest sum of the "
      "running requests' KVCaches was %s\n",
      Bytes(all_kvcache_bytes).c_str(), Bytes(all_flat_bytes).c_str(),
      Bytes(stats.max_kvcache_bytes).c_str());
  std::printf("\nrequests\n");
  std::printf(
      "  %zu served in %llu steps (%llu with a forward pass); peak running %llu, peak "
      "waiting %llu; the first waiting request waited for room at %llu steps; %s\n",
      requests.size(), static_cast<unsigned long long>(stats.last_step + 1),
      static_cast<unsigned long long>(stats.steps),
      static_cast<unsigned long long>(stats.peak_running),
      static_cast<unsigned long long>(stats.peak_waiting),
      static_cast<unsigned long long>(stats.admission_waits),
      Plural(stats.preemptions, "preemption").c_str());
  std::printf(
      "  attention: %llu AttentionMany calls (one per layer and step, the system prompt's %llu "
      "included), %.1f entries on average, at most %llu\n",
      static_cast<unsigned long long>(stats.attention_calls),
      static_cast<unsigned long long>(stats.system_steps),
      Ratio(stats.attention_entries, stats.attention_calls),
      static_cast<unsigned long long>(stats.max_entries));
  uint64_t reference_prefill = system.size(), reference_decode = 0;
  for (const Request& r : requests) {
    reference_prefill += r.prompt.size() - (r.shared ? system.size() : 0);
    reference_decode += r.num_generate - 1;
  }
  const auto rate = [](uint64_t tokens, double seconds) {
    return seconds > 0.0 ? static_cast<double>(tokens) / seconds : 0.0;
  };
  std::printf("\nthroughput (generated tokens; with the prompt tokens run)\n");
  std::printf(
      "  serve          %8.0f tokens/s  %8.0f tokens/s  (%.2f s: %llu prompt and %llu "
      "decode tokens run)\n",
      rate(generated, stats.seconds),
      rate(stats.prefill_tokens + stats.decode_tokens, stats.seconds), stats.seconds,
      static_cast<unsigned long long>(stats.prefill_tokens),
      static_cast<unsigned long long>(stats.decode_tokens));
  std::printf(
      "  alone, flat    %8.0f tokens/s  %8.0f tokens/s  (%.2f s: %llu prompt and %llu "
      "decode tokens run)\n",
      rate(generated, reference_seconds),
      rate(reference_prefill + reference_decode, reference_seconds), reference_seconds,
      static_cast<unsigned long long>(reference_prefill),
      static_cast<unsigned long long>(reference_decode));
  std::printf("\n%d checks passed, %d failed: %s\n", checks.num_passed, checks.num_failed,
              checks.num_failed == 0 ? "OK" : "FAILED");
  return checks.num_failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace serve

int main(int argc, char** argv) {
  serve::Config config;
  bool help = false;
  if (!serve::ParseArgs(argc, argv, &config, &help)) return 2;
  if (help) return 0;
  if (config.reuse || !config.restart.empty()) {
    return config.backend == "tiled" ? serve::RunReuse<mini_engine::Tiled>(config)
                                     : serve::RunReuse<kvring::FlashLayout>(config);
  }
  return config.backend == "tiled" ? serve::Run<mini_engine::Tiled>(config)
                                   : serve::Run<kvring::FlashLayout>(config);
}
