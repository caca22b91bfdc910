// mini_engine: a complete decode loop on kvring. A small decoder-only transformer with seeded
// random weights and a Gemma 3n-like layer pattern (sliding and global layers, GQA, shared-KV
// consumer layers; model.h, which examples/serve shares), whose KV cache is kvring's KVCache and
// whose attention is kvring's kernels by dynamic dispatch. It prefills a prompt in batches, decodes
// greedily, and checks every engine feature against a run on flat storage (every layer at full
// context) or a fresh recomputation, bit for bit: the plain decode loop, a snapshot restored after
// the ring has wrapped, speculative decoding with rollback of rejected drafts, a prefill batch
// larger than planned (growth) and Clear() between conversations. Exits 1 if any check fails.
//
//   mini_engine [--backend=flash|tiled] [--prompt=N] [--decode=N] [--batch=N] [--window=N]
//               [--draft=N] [--threads=N] [--seed=N] ...   (--help lists every option)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kvring/dispatch.h"
#include "kvring/kvring.h"
#include "mini_engine/checks.h"
#include "mini_engine/kernels.h"
#include "mini_engine/model.h"
#include "mini_engine/options.h"

namespace mini_engine {
namespace {

using kvring::Status;

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
  ModelConfig model;  // --window, --seed and --k-outliers set its fields
  // Runtime.
  std::string backend = "flash";
  std::string format = "bf16";   // of every layer's K/V: bf16, int8 or int8h
  std::string products = "f32";  // attention products: f32 (exact) or bf16 (Products::kBF16)
  uint64_t prompt = 300;         // tokens of the first prompt
  uint64_t decode = 2048;        // tokens generated after it
  uint64_t batch = 32;           // planned prefill batch
  uint64_t draft = 4;            // draft tokens per speculative round (the planned rollback)
  uint64_t suffix = 48;          // tokens of the second user turn after the snapshot
  uint64_t continuation = 256;   // tokens generated after that turn, and in conversation 2
  uint64_t prompt2 = 384;        // tokens of conversation 2's prompt
  uint64_t grow_factor = 4;      // conversation 2 prefills in batches of batch * grow_factor
  uint32_t threads = 1;          // attention threads
  uint64_t split_positions = kvring::AttentionOptions().split_positions;  // decode KV splits
};

// Returns false (after printing why) on a bad command line; prints the usage on --help.
bool ParseArgs(int argc, char** argv, Config* config, bool* help) {
  Options options("mini_engine");
  options.Choice("backend", {"flash", "tiled"}, &config->backend,
                 "kvring layout and kernels (default flash)");
  options.Choice("format", {"bf16", "int8", "int8h"}, &config->format,
                 "every layer's K/V format (default bf16); int8 and int8h (K\n"
                 "rotated before it is stored) also compare their decode with\n"
                 "a BF16 cache's (KL, token agreement)");
  options.Choice("products", {"f32", "bf16", "int8"}, &config->products,
                 "attention products (default f32, exact); bf16 runs every\n"
                 "check in kvring's BF16-product mode and compares its decode\n"
                 "with the exact mode's (KL, token agreement); int8 (with\n"
                 "--format=int8 or int8h) the integer-product mode");
  options.Number("prompt", &config->prompt, "first prompt's tokens (300)", 1);
  options.Number("decode", &config->decode, "tokens generated greedily after it (2048)", 2);
  options.Number("batch", &config->batch, "planned prefill batch (32)", 1);
  options.Number("window", &config->model.window, "sliding layers' window (64)", 1);
  AddWidthOptions(&options, &config->model);
  options.Number("draft", &config->draft,
                 "draft tokens per speculative round = planned rollback (4)", 1);
  options.Number("suffix", &config->suffix, "second turn's tokens after the restored snapshot (48)",
                 1);
  options.Number("continuation", &config->continuation,
                 "tokens generated after it and in conversation 2 (256)", 1);
  options.Number("prompt2", &config->prompt2,
                 "conversation 2's prompt, prefilled in larger batches (384)", 1);
  options.Number("grow-factor", &config->grow_factor, "conversation 2's batch is batch * N (4)", 2);
  options.Number("threads", &config->threads, "attention threads (1)", 1);
  options.Number("k-outliers", &config->model.k_outliers,
                 "scale four K channels of each kv_head by N and the\n"
                 "queries' same channels by 1/N: the logits stay (off)");
  options.Number("split-positions", &config->split_positions,
                 "KV split length of decode calls (kvring's default, 2048)");
  options.Number("global-head-dim", &config->model.global_head_dim,
                 "global layers' head dim (off: as the sliding ones, 64);\n"
                 "Gemma 4 gives its global layers twice the sliding ones'",
                 0, kvring::kMaxAttentionHeadDim);
  options.Number("global-kv-heads", &config->model.global_kv_heads,
                 "global layers' kv_heads, dividing the 4 q heads (off: 2)", 0,
                 config->model.num_q_heads);
  options.Flag("hybrid", &config->model.hybrid,
               "layers 1-3 recurrent (a gated linear recurrence with a short\n"
               "convolution, Qwen3.5's 3 linear : 1 full): kvring keeps their states");
  options.Number("seed", &config->model.seed, "weights and prompts (1)");
  if (!options.Parse(argc, argv, help)) return false;
  const uint32_t global_kv_heads = config->model.global_kv_heads;
  if (global_kv_heads != 0 && config->model.num_q_heads % global_kv_heads != 0) {
    std::fprintf(stderr, "mini_engine: --global-kv-heads=%u does not divide the %u q heads\n",
                 global_kv_heads, config->model.num_q_heads);
    return false;
  }
  if (config->products == "int8" && config->format == "bf16") {
    std::fprintf(stderr,
                 "mini_engine: --products=int8 is the integer-product mode of int8 layers: it "
                 "needs --format=int8 or --format=int8h\n");
    return false;
  }
  return true;
}

// The positions one sequence may reach in any phase of the run: kvring's logical limit T.
uint64_t ContextOf(const Config& c) {
  return std::max({c.prompt + c.decode + c.draft + 1, c.prompt + c.suffix + c.continuation,
                   c.prompt2 + c.continuation});
}

// The options of every attention call of the run. Calls of up to max_split_queries queries
// split long KV ranges (at multiples of split_positions) and merge the parts; larger calls do
// not. A query's bits depend on that choice, so a speculative round of 1 + draft tokens must
// split exactly as a one-token decode step does for its logits to equal the plain decode's bit
// for bit.
kvring::AttentionOptions OptionsOf(const Config& c) {
  kvring::AttentionOptions options;
  options.max_split_queries = static_cast<uint32_t>(c.draft + 1);
  options.split_positions = c.split_positions;
  options.products = c.products == "bf16"   ? kvring::Products::kBF16
                     : c.products == "int8" ? kvring::Products::kInt8
                                            : kvring::Products::kF32;
  return options;
}

// ---------------------------------------------------------------------------------------------
// One sequence on a kvring cache

// Returns KL(p || q) of the softmax distributions of two logit rows of `n`, in nats.
double KLDivergence(const float* p_logits, const float* q_logits, size_t n) {
  double p_max = p_logits[0], q_max = q_logits[0];
  for (size_t i = 1; i < n; ++i) {
    p_max = std::max(p_max, double{p_logits[i]});
    q_max = std::max(q_max, double{q_logits[i]});
  }
  double p_sum = 0.0, q_sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    p_sum += std::exp(p_logits[i] - p_max);
    q_sum += std::exp(q_logits[i] - q_max);
  }
  double kl = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double log_p = p_logits[i] - p_max - std::log(p_sum);
    const double log_q = q_logits[i] - q_max - std::log(q_sum);
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return kl;
}

// Counts and times the tokens an engine run processes.
struct Meter {
  uint64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
};

// Prints a progress line to stderr every two seconds of a long run (nothing for short runs).
class Progress {
 public:
  void Update(const char* run, const char* phase, uint64_t done, uint64_t total) {
    const double elapsed = SecondsSince(start_);
    if (elapsed < next_) return;
    next_ = elapsed + 2.0;
    std::fflush(stdout);
    std::fprintf(stderr, "  [%6.1f s] %s %s: %llu / %llu tokens\n", elapsed, run, phase,
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
  }

 private:
  Clock::time_point start_ = Clock::now();
  double next_ = 2.0;
};

// One sequence's engine state on a kvring cache of layout `Layout`: the cache, the next
// position, and the logits the next token is chosen from.
template <class Layout>
class Engine {
 public:
  // Runs attention with `options` on `pool`, which every engine of the process shares (one
  // call at a time).
  Engine(const char* name, const Model& model, const kvring::AttentionOptions& options,
         kvring::KVCache<Layout> cache, kvring::ThreadPool* pool, Meter* meter, Progress* progress)
      : name_(name),
        model_(model),
        cache_(std::move(cache)),
        pool_(pool),
        runner_(pool->Runner()),
        options_(options),
        meter_(meter),
        progress_(progress) {}

  kvring::KVCache<Layout>& Cache() { return cache_; }
  uint64_t Pos() const { return pos_; }
  const std::vector<float>& Logits() const { return last_logits_; }

  // Replaces the cache by `cache` (a restored snapshot) whose sequence ends at `pos`, with the
  // logits its last token produced.
  void Restore(kvring::KVCache<Layout> cache, uint64_t pos, std::vector<float> logits) {
    cache_ = std::move(cache);
    Resume(pos, std::move(logits));
  }
  // Sets the next position and the logits the next token is chosen from.
  void Resume(uint64_t pos, std::vector<float> logits) {
    pos_ = pos;
    last_logits_ = std::move(logits);
  }
  void SetMeter(Meter* meter) { meter_ = meter; }
  // Starts a new conversation on the same buffers.
  void Clear() {
    cache_.Clear();
    pos_ = 0;
    last_logits_.clear();
  }

  // Runs `tokens` in batches of `batch`; afterwards Logits() are those of the last token.
  Status Prefill(const std::vector<int32_t>& tokens, uint64_t batch) {
    const Clock::time_point start = Clock::now();
    std::vector<float> logits;
    for (uint64_t first = 0; first < tokens.size(); first += batch) {
      const uint64_t n = std::min<uint64_t>(batch, tokens.size() - first);
      const Status status = Forward(tokens.data() + first, n, &logits);
      if (status != Status::kOk) return status;
      progress_->Update(name_, "prefill", first + n, tokens.size());
    }
    const size_t vocab = model_.config.vocab;
    last_logits_.assign(logits.end() - static_cast<std::ptrdiff_t>(vocab), logits.end());
    meter_->prefill_tokens += tokens.size();
    meter_->prefill_seconds += SecondsSince(start);
    return Status::kOk;
  }

  // Generates `count` tokens greedily: each is chosen from the current logits, recorded in
  // `tokens` with those logits in `logits` ([count][vocab]), and run to give the next logits.
  Status Decode(uint64_t count, std::vector<int32_t>* tokens, std::vector<float>* logits) {
    const Clock::time_point start = Clock::now();
    std::vector<float> next;
    for (uint64_t i = 0; i < count; ++i) {
      const int32_t token = ArgMax(last_logits_.data(), last_logits_.size());
      tokens->push_back(token);
      logits->insert(logits->end(), last_logits_.begin(), last_logits_.end());
      const Status status = Forward(&token, 1, &next);
      if (status != Status::kOk) return status;
      last_logits_.swap(next);
      progress_->Update(name_, "decode", i + 1, count);
    }
    meter_->decode_tokens += count;
    meter_->decode_seconds += SecondsSince(start);
    return Status::kOk;
  }

  // Makes the next forward pass fail at `layer`, before its append: a simulated error of the
  // engine's own, after the layers before it appended their K/V and wrote their states.
  // Forward then abandons the step from its start (KVCache::AbandonStep(start): also a step
  // every layer of which appended, when a later one failed) and runs it again.
  void FailNextPassAt(size_t layer) { fail_at_ = layer; }
  // The passes abandoned after such a failure, each run again.
  uint64_t Abandoned() const { return abandoned_; }

  // Runs num_tokens tokens at Pos(): appends their K/V to every owning layer and writes their
  // logits, [num_tokens][vocab].
  Status Forward(const int32_t* tokens, uint64_t num_tokens, std::vector<float>* logits) {
    const Span span{pos_, num_tokens};
    bool failed = false;
    const auto attend = [&](size_t layer, const float* q, const float* k, const float* v,
                            float* attn) {
      if (layer == fail_at_) {
        fail_at_ = kNoLayer;
        failed = true;
        return Status::kBadArgument;
      }
      if (mini_engine::IsRecurrent(model_.config, layer)) return Recur(layer, q, num_tokens, attn);
      if (k != nullptr) {
        // K/V of this layer's new positions, [n][kv_head][head_dim]: kvring rounds them to
        // BF16 and stores them in the layer's ring or flat buffer.
        const Status status = cache_.AppendF32(layer, pos_, k, v, num_tokens);
        if (status != Status::kOk) return status;
      }
      // A consumer's View is its owner's storage under its own visibility rule.
      const kvring::Result attended =
          kvring::Attention(cache_.View(layer), SpanQueries(model_, layer, q, attn, 0, span),
                            options_, workspace_, runner_);
      if (!attended.ok()) {
        std::fprintf(stderr, "%s: layer %zu: %s\n", name_, layer, attended.Message().c_str());
      }
      return attended.status();
    };
    Status status = mini_engine::Forward(model_, tokens, &span, 1, attend, &activations_, logits);
    if (failed) {
      // Every owning layer back to the step's start, the states the step wrote forgotten;
      // staged (RuntimeSpec::stage_states), the ones it started from are still held.
      const kvring::RollbackResult abandoned = cache_.AbandonStep(pos_);
      if (!abandoned.ok()) return abandoned.status();
      ++abandoned_;
      status = mini_engine::Forward(model_, tokens, &span, 1, attend, &activations_, logits);
    }
    if (status == Status::kOk) pos_ += num_tokens;
    return status;
  }

  // A recurrent layer's step on the cache's states (RecurStep).
  Status Recur(size_t layer, const float* u, uint64_t n, float* out) {
    return mini_engine::RecurStep(
        model_, layer, u, n, pos_, out, [&] { return cache_.State(layer); },
        [&](uint64_t positions) { return cache_.StateAfter(layer, positions); }, &conv_, &state_);
  }

  // Discards the newest `num_tokens` positions (rejected drafts) of every layer.
  Status Rollback(uint64_t num_tokens) {
    const Status status = cache_.Rollback(num_tokens);
    if (status == Status::kOk) pos_ -= num_tokens;
    return status;
  }

 private:
  const char* name_;
  const Model& model_;
  kvring::KVCache<Layout> cache_;
  kvring::ThreadPool* pool_;
  kvring::TaskRunner runner_;  // pool_'s
  // The attention calls' scratch, grown by the first call that needs more: decode steps after
  // the first allocate nothing.
  kvring::AttentionWorkspace workspace_;
  kvring::AttentionOptions options_;
  Activations activations_;
  std::vector<float> conv_, state_;  // a recurrent layer's state while a step runs
  Meter* meter_;
  Progress* progress_;
  static constexpr size_t kNoLayer = ~size_t{0};
  size_t fail_at_ = kNoLayer;  // FailNextPassAt
  uint64_t abandoned_ = 0;
  uint64_t pos_ = 0;
  std::vector<float> last_logits_;
};

// ---------------------------------------------------------------------------------------------
// The run

// What a restarted engine does with a saved conversation: the snapshot (a sequence at `pos`,
// whose last token gave `logits`) goes through a state file into a cache planned for batches
// of 1 (smaller rings than the snapshot's: the load keeps the newest positions they hold, and
// the next prefill grows them), and the second turn `turn` then decodes bit-identical to the
// restored snapshot's (`want_tokens`, `want_logits`). The file is refused for another model.
template <class Layout>
void CheckStateFile(const kvring::KVCache<Layout>& snapshot, kvring::LayerPlan::Builder builder,
                    Engine<Layout> engine, uint64_t pos, const std::vector<float>& logits,
                    const Config& config, const std::vector<int32_t>& turn,
                    const std::vector<int32_t>& want_tokens, const std::vector<float>& want_logits,
                    Checks* checks) {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/kvring_mini_engine_" +
                           std::to_string(::getpid()) + ".kvstate";
  const std::string model_id = "kvring mini_engine, seed " + std::to_string(config.model.seed);
  checks->ExpectStatus(kvring::SaveStateFile(snapshot, model_id, path), "state file save");
  const kvring::Expected<kvring::LayerPlan> small_plan = builder.SetBatch(1).Build();
  if (!small_plan.ok()) {
    checks->Expect(false, "state file: " + small_plan.error().message);
    return;
  }
  kvring::Expected<kvring::KVCache<Layout>> small = kvring::KVCache<Layout>::Create(*small_plan);
  if (!small.ok()) {
    checks->Expect(false, "state file: " + small.error().message);
    return;
  }
  const kvring::Result other = kvring::LoadStateFile(path, model_id + "x", &*small);
  checks->ExpectStatus(kvring::LoadStateFile(path, model_id, &*small), "state file load");
  std::remove(path.c_str());
  const uint64_t file_bytes = kvring::StateBytes(snapshot, model_id);
  engine.Restore(std::move(small).value(), pos, logits);
  std::vector<int32_t> tokens;
  std::vector<float> turn_logits;
  checks->ExpectStatus(engine.Prefill(turn, config.batch), "state file turn prefill");
  checks->ExpectStatus(engine.Decode(config.continuation, &tokens, &turn_logits),
                       "state file turn decode");
  const std::string difference =
      Compare(tokens, turn_logits, want_tokens, want_logits, config.model.vocab);
  checks->Expect(difference.empty() && other == kvring::Status::kBadState,
                 "the snapshot through a " + std::to_string(file_bytes) +
                     "-byte state file into rings planned for batches of 1, then the second "
                     "turn: " +
                     Identical(difference, tokens.size()) + "; refused for another model id (" +
                     other.Message() + ")");
}

template <class Layout>
int Run(const Config& config) {
  const Model model = MakeModel(config.model);
  const uint64_t context = ContextOf(config);
  const size_t vocab = config.model.vocab;
  Checks checks;
  Progress progress;

  // 1. Describe the model and plan: the batch the engine prefills in and the rollback its
  //    speculative decoding needs (docs/design.md: sliding capacity W - 1 + max(B, R)).
  kvring::LayerPlan::Builder builder;
  for (const kvring::LayerSpec& spec : LayerSpecs(config.model)) builder.AddLayer(spec);
  builder.SetContext(context).SetBatch(config.batch).SetRollback(config.draft);
  // A hybrid model's states: one copy more, so that a step abandoned part way leaves the
  // sequence whole at any length (checked in 4).
  builder.SetStageStates(config.model.hybrid);
  builder.SetLayout<Layout>();
  const kvring::Format format = config.format == "int8"    ? kvring::Format::kInt8
                                : config.format == "int8h" ? kvring::Format::kInt8Hadamard
                                                           : kvring::Format::kBF16;
  builder.SetFormat(format);
  const kvring::Expected<kvring::LayerPlan> plan = builder.Build();
  if (!plan.ok()) {
    std::fprintf(stderr, "mini_engine: %s\n", plan.error().message.c_str());
    return 2;
  }
  // The flat reference: the same layers, every owner holding the whole context. A plan whose
  // rollback headroom is the context gives every owner capacity T, which KVCache stores flat
  // (GlobalKV), with the same slot alignment and so the same position-aligned tiles.
  kvring::RuntimeSpec flat_runtime = plan->Runtime();
  flat_runtime.rollback = context;
  const kvring::Expected<kvring::LayerPlan> flat_plan = plan->WithRuntime(flat_runtime);
  if (!flat_plan.ok()) {
    std::fprintf(stderr, "mini_engine: %s\n", flat_plan.error().message.c_str());
    return 2;
  }

  std::printf(
      "mini_engine: %zu layers, hidden %u, vocab %u, %u q heads on %u kv_heads of %u "
      "(global layers: %u of %u), window %llu\n",
      kNumLayers, config.model.hidden, config.model.vocab, config.model.num_q_heads,
      config.model.num_kv_heads, config.model.head_dim, KVHeadsOf(config.model, kGlobalOwner),
      HeadDimOf(config.model, kGlobalOwner), static_cast<unsigned long long>(config.model.window));
  std::printf(
      "  %s backend on target %s, %u attention thread(s); context %llu, batch %llu, "
      "rollback %llu\n",
      kvring::ToString(Layout::kBackend), kvring::DispatchedTargetName(), config.threads,
      static_cast<unsigned long long>(context), static_cast<unsigned long long>(config.batch),
      static_cast<unsigned long long>(config.draft));
  std::printf("  layer  kind     owner  capacity  num_slots\n");
  for (const kvring::LayerInfo& layer : plan->Layers()) {
    if (!layer.spec.attends) {
      std::printf("  %5zu  %-7s      -         -          -  (%llu state bytes)\n", layer.index,
                  "state", static_cast<unsigned long long>(layer.state_bytes));
      continue;
    }
    const kvring::LayerInfo& owner = plan->Layer(layer.owner);
    std::printf("  %5zu  %-7s  %5zu  %8llu  %9llu%s\n", layer.index,
                kvring::ToString(layer.spec.kind), layer.owner,
                static_cast<unsigned long long>(owner.capacity),
                static_cast<unsigned long long>(owner.num_slots),
                layer.OwnsKV() ? "" : "  (reads its owner's)");
  }

  // 2. Allocate.
  kvring::Expected<kvring::KVCache<Layout>> ring_cache = kvring::KVCache<Layout>::Create(*plan);
  kvring::Expected<kvring::KVCache<Layout>> flat_cache =
      kvring::KVCache<Layout>::Create(*flat_plan);
  if (!ring_cache.ok() || !flat_cache.ok()) {
    std::fprintf(stderr, "mini_engine: %s%s\n", ring_cache.error().message.c_str(),
                 flat_cache.error().message.c_str());
    return 2;
  }
  bool flat_everywhere = true, ring_somewhere = false;
  for (size_t layer = 0; layer < kNumLayers; ++layer) {
    if (IsRecurrent(config.model, layer)) continue;  // no K/V
    flat_everywhere = flat_everywhere && flat_cache->IsFlat(layer);
    ring_somewhere = ring_somewhere || !ring_cache->IsFlat(layer);
  }
  const uint64_t ring_bytes = ring_cache->AllocatedBytes();
  const uint64_t flat_bytes = flat_cache->AllocatedBytes();

  std::printf("\nchecks\n");
  checks.Expect(flat_everywhere && ring_somewhere,
                "the reference stores every layer flat, kvring keeps the sliding owners as rings");
  checks.Expect(ring_bytes == plan->TotalBytes() + plan->StateBytes() &&
                    flat_bytes == plan->FlatBytes() + flat_plan->StateBytes(),
                "allocated bytes equal the plan's (" + std::to_string(ring_bytes) + " and " +
                    std::to_string(flat_bytes) + (config.model.hybrid ? ", states included" : "") +
                    ")");

  // The attention threads every engine below runs on: started once, used by every layer's
  // call (starting threads per call would cost more than a decode step's attention).
  kvring::ThreadPool pool(config.threads);
  const kvring::AttentionOptions options = OptionsOf(config);
  Meter ring_meter, flat_meter, other_meter;
  Engine<Layout> ring("kvring", model, options, std::move(ring_cache).value(), &pool, &ring_meter,
                      &progress);
  const std::vector<int32_t> prompt = RandomTokens(config.model.seed + 1000, config.prompt, vocab);

  // 3. The reference run on flat storage: prefill, then greedy decode.
  std::vector<int32_t> ref_tokens;
  std::vector<float> ref_logits;
  {
    Engine<Layout> flat("flat", model, options, std::move(flat_cache).value(), &pool, &flat_meter,
                        &progress);
    checks.ExpectStatus(flat.Prefill(prompt, config.batch), "flat prefill");
    checks.ExpectStatus(flat.Decode(config.decode, &ref_tokens, &ref_logits), "flat decode");
  }

  // 4. The same on kvring's rings, with a snapshot taken after the prompt. A hybrid model's
  //    second prefill chunk fails at the last owning layer, after the recurrent layers wrote
  //    its states: the engine abandons the step and runs it again.
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  size_t last_owner = 0;
  for (const kvring::LayerInfo& layer : plan->Layers()) {
    if (layer.OwnsKV()) last_owner = layer.index;
  }
  if (config.model.hybrid && prompt.size() > config.batch) {
    const auto second = prompt.begin() + static_cast<std::ptrdiff_t>(config.batch);
    checks.ExpectStatus(ring.Prefill({prompt.begin(), second}, config.batch),
                        "ring prefill, first chunk");
    ring.FailNextPassAt(last_owner);
    checks.ExpectStatus(ring.Prefill({second, prompt.end()}, config.batch),
                        "ring prefill, the rest");
    const uint64_t chunk = std::min<uint64_t>(config.batch, prompt.size() - config.batch);
    checks.Expect(ring.Abandoned() == 1,
                  "a prefill chunk of " + std::to_string(chunk) + " positions failed at layer " +
                      std::to_string(last_owner) +
                      " after the recurrent layers wrote its states: abandoned, its start's "
                      "states still held (staged), and run again");
  } else {
    checks.ExpectStatus(ring.Prefill(prompt, config.batch), "ring prefill");
  }
  kvring::Expected<kvring::KVCache<Layout>> snapshot = ring.Cache().Copy();
  if (!snapshot.ok()) {
    std::fprintf(stderr, "mini_engine: %s\n", snapshot.error().message.c_str());
    return 2;
  }
  const std::vector<float> snapshot_logits = ring.Logits();
  const uint64_t snapshot_pos = ring.Pos();
  // The first decode step fails at the last layer, a consumer's attention after every append
  // and every state: a finished step, which AbandonStep(start) takes back; it runs again.
  const uint64_t abandoned_before = ring.Abandoned();
  ring.FailNextPassAt(mini_engine::kNumLayers - 1);
  checks.ExpectStatus(ring.Decode(config.decode, &tokens, &logits), "ring decode");
  checks.Expect(ring.Abandoned() == abandoned_before + 1,
                "the first decode step failed at layer " +
                    std::to_string(mini_engine::kNumLayers - 1) +
                    ", after every append: abandoned from its start and run again");
  ring.SetMeter(&other_meter);
  const uint64_t ring_slots = plan->Layer(0).num_slots;
  const std::string decode_difference = Compare(tokens, logits, ref_tokens, ref_logits, vocab);
  checks.Expect(
      decode_difference.empty(),
      "prefill + decode loop, ring against flat: " + Identical(decode_difference, tokens.size()) +
          " (the " + std::to_string(ring_slots) + "-slot rings wrapped " +
          std::to_string(ring.Pos() / ring_slots) + " times)");

  // 5. Speculative decoding from the snapshot: each round runs the pending token and `draft`
  //    draft tokens as one batch, keeps the drafts the model agrees with and rolls the others
  //    back. The draft model is simulated: it proposes the true continuation for 0 to `draft`
  //    tokens (round by round), then a wrong token, so that every rollback size occurs.
  //    Greedy speculative decoding must reproduce the plain decode exactly.
  {
    kvring::Expected<kvring::KVCache<Layout>> restored = snapshot->Copy();
    if (!restored.ok()) return 2;
    Engine<Layout> spec("speculative", model, options, std::move(restored).value(), &pool,
                        &other_meter, &progress);
    spec.Resume(snapshot_pos, snapshot_logits);
    std::vector<int32_t> spec_tokens;
    std::vector<float> spec_logits, batch_logits;
    std::vector<uint64_t> rollbacks_of_size(config.draft + 1, 0);
    bool refused_past_headroom = true;
    Status status = Status::kOk;
    for (uint64_t round = 0; spec_tokens.size() < config.decode && status == Status::kOk; ++round) {
      const size_t i = spec_tokens.size();
      const int32_t pending = ArgMax(spec.Logits().data(), vocab);
      spec_tokens.push_back(pending);
      spec_logits.insert(spec_logits.end(), spec.Logits().begin(), spec.Logits().end());
      std::vector<int32_t> run = {pending};
      const uint64_t num_true = round % (config.draft + 1);
      for (uint64_t j = 1; j <= config.draft; ++j) {
        const int32_t truth = i + j < ref_tokens.size() ? ref_tokens[i + j] : 0;
        run.push_back(j <= num_true ? truth : (truth + 1) % static_cast<int32_t>(vocab));
      }
      status = spec.Forward(run.data(), run.size(), &batch_logits);
      if (status != Status::kOk) break;
      uint64_t accepted = 0;
      while (accepted < config.draft && spec_tokens.size() < config.decode &&
             ArgMax(&batch_logits[accepted * vocab], vocab) == run[accepted + 1]) {
        spec_tokens.push_back(run[accepted + 1]);
        spec_logits.insert(spec_logits.end(), batch_logits.begin() + accepted * vocab,
                           batch_logits.begin() + (accepted + 1) * vocab);
        ++accepted;
      }
      const uint64_t rejected = config.draft - accepted;
      // One past the planned headroom is refused, and changes nothing.
      if (round == 1) {
        const uint64_t end = spec.Cache().EndPos(0);
        refused_past_headroom =
            spec.Cache().Rollback(config.draft + 1) == Status::kRollbackTooFar &&
            spec.Cache().EndPos(0) == end;
      }
      if (rejected > 0) status = spec.Rollback(rejected);
      ++rollbacks_of_size[rejected];
      // The token after the accepted drafts is chosen from the logits of the last of them.
      spec.Resume(spec.Pos(), std::vector<float>(batch_logits.begin() + accepted * vocab,
                                                 batch_logits.begin() + (accepted + 1) * vocab));
    }
    checks.ExpectStatus(status, "speculative decoding");
    const std::string difference = Compare(spec_tokens, spec_logits, ref_tokens, ref_logits, vocab);
    bool every_size = true;
    std::string sizes;
    for (uint64_t size = 0; size <= config.draft; ++size) {
      every_size = every_size && rollbacks_of_size[size] > 0;
      sizes += (size == 0 ? "" : ", ") + std::to_string(rollbacks_of_size[size]) + "x" +
               std::to_string(size);
    }
    checks.Expect(
        difference.empty() && every_size,
        "speculative decoding from the snapshot with rollbacks (" + sizes +
            " tokens), against the flat greedy run: " + Identical(difference, spec_tokens.size()));
    checks.Expect(refused_past_headroom,
                  "a rollback past the planned headroom is refused and changes nothing");
  }

  // 6. The snapshot again, for a second user turn: prefix reuse after the rings have wrapped
  //    (the prompt is longer than a ring, and the run above wrapped its copy many times more).
  //    Reference: a fresh flat cache computing prompt + turn from scratch.
  const std::vector<int32_t> turn = RandomTokens(config.model.seed + 2000, config.suffix, vocab);
  {
    checks.Expect(snapshot->EndPos(0) == snapshot_pos && snapshot->FirstPos(0) > 0,
                  "the snapshot still ends at the prompt (" + std::to_string(snapshot_pos) +
                      "), its ring wrapped (first held position " +
                      std::to_string(snapshot->FirstPos(0)) + ")");
    kvring::Expected<kvring::KVCache<Layout>> restored = snapshot->Copy();
    if (!restored.ok()) return 2;
    ring.Restore(std::move(restored).value(), snapshot_pos, snapshot_logits);
    std::vector<int32_t> turn_tokens;
    std::vector<float> turn_logits;
    checks.ExpectStatus(ring.Prefill(turn, config.batch), "second turn prefill");
    checks.ExpectStatus(ring.Decode(config.continuation, &turn_tokens, &turn_logits),
                        "second turn decode");

    kvring::Expected<kvring::KVCache<Layout>> fresh = kvring::KVCache<Layout>::Create(*flat_plan);
    if (!fresh.ok()) return 2;
    Engine<Layout> flat("flat reference", model, options, std::move(fresh).value(), &pool,
                        &other_meter, &progress);
    std::vector<int32_t> want_tokens;
    std::vector<float> want_logits;
    checks.ExpectStatus(flat.Prefill(prompt, config.batch), "fresh flat prefill");
    checks.ExpectStatus(flat.Prefill(turn, config.batch), "fresh flat turn");
    checks.ExpectStatus(flat.Decode(config.continuation, &want_tokens, &want_logits),
                        "fresh flat decode");
    const std::string difference =
        Compare(turn_tokens, turn_logits, want_tokens, want_logits, vocab);
    checks.Expect(difference.empty(),
                  "restored snapshot + second turn, against a fresh flat recomputation: " +
                      Identical(difference, turn_tokens.size()));
    // A hybrid model's file holds its recurrent states too.
    Engine<Layout> resumed("state file", model, options, kvring::KVCache<Layout>(), &pool,
                           &other_meter, &progress);
    CheckStateFile(*snapshot, builder, std::move(resumed), snapshot_pos, snapshot_logits, config,
                   turn, turn_tokens, turn_logits, &checks);
  }

  // 7. Clear() and a second conversation, prefilled in batches larger than planned: the
  //    appends grow the rings (kept by Clear() for later conversations). Reference: a fresh
  //    flat cache with the same batches.
  {
    const uint64_t big_batch = config.batch * config.grow_factor;
    const uint64_t bytes_before = ring.Cache().AllocatedBytes();
    ring.Clear();
    checks.Expect(ring.Cache().EndPos(0) == 0 && ring.Cache().FirstPos(0) == 0 &&
                      ring.Cache().AllocatedBytes() == bytes_before,
                  "Clear() forgets every position and keeps the buffers");
    const std::vector<int32_t> prompt2 =
        RandomTokens(config.model.seed + 3000, config.prompt2, vocab);
    std::vector<int32_t> conv_tokens;
    std::vector<float> conv_logits;
    checks.ExpectStatus(ring.Prefill(prompt2, big_batch), "conversation 2 prefill");
    checks.ExpectStatus(ring.Decode(config.continuation, &conv_tokens, &conv_logits),
                        "conversation 2 decode");
    const uint64_t bytes_after = ring.Cache().AllocatedBytes();
    // What a plan for the larger batch allocates; the configuration must make it larger.
    kvring::RuntimeSpec grown_runtime = plan->Runtime();
    grown_runtime.batch = std::min<uint64_t>(big_batch, config.prompt2);
    const kvring::Expected<kvring::LayerPlan> grown_plan = plan->WithRuntime(grown_runtime);
    const uint64_t want_bytes =
        grown_plan.ok() ? grown_plan->TotalBytes() + grown_plan->StateBytes() : 0;
    checks.Expect(want_bytes > bytes_before && bytes_after == want_bytes &&
                      ring.Cache().Plan().Runtime().batch == grown_runtime.batch,
                  "a batch of " + std::to_string(grown_runtime.batch) + " (planned " +
                      std::to_string(config.batch) + ") grew the rings from " +
                      std::to_string(bytes_before) + " to " + std::to_string(bytes_after) +
                      " bytes, as a plan for that batch says" +
                      (want_bytes > bytes_before
                           ? std::string()
                           : std::string(" (it needs no growth: raise --grow-factor)")));

    kvring::Expected<kvring::KVCache<Layout>> fresh = kvring::KVCache<Layout>::Create(*flat_plan);
    if (!fresh.ok()) return 2;
    Engine<Layout> flat("flat reference", model, options, std::move(fresh).value(), &pool,
                        &other_meter, &progress);
    std::vector<int32_t> want_tokens;
    std::vector<float> want_logits;
    checks.ExpectStatus(flat.Prefill(prompt2, big_batch), "fresh flat prefill 2");
    checks.ExpectStatus(flat.Decode(config.continuation, &want_tokens, &want_logits),
                        "fresh flat decode 2");
    const std::string difference =
        Compare(conv_tokens, conv_logits, want_tokens, want_logits, vocab);
    checks.Expect(difference.empty(),
                  "conversation 2 after Clear() with grown rings, against a fresh flat run: " +
                      Identical(difference, conv_tokens.size()));
  }

  // 8. Against the exact BF16 run (an int8 cache, or the BF16-product mode, or both): a BF16
  //    cache with exact products decodes greedily, then the run's cache and options are fed
  //    the same tokens; at every step the KL divergence of the run's next-token distribution
  //    from the exact one's, and whether both pick the same token.
  const bool bf16_products = options.products == kvring::Products::kBF16;
  const bool int8_products = options.products == kvring::Products::kInt8;
  const bool compare = kvring::IsInt8(format) || bf16_products;
  const std::string what = kvring::IsInt8(format) && bf16_products
                               ? config.format + " with BF16 products"
                           : int8_products ? config.format + " with integer products"
                           : bf16_products ? "BF16 products"
                                           : config.format;
  double mean_kl = 0.0, max_kl = 0.0, agreement = 0.0;
  double mode_mean_kl = 0.0, mode_max_kl = 0.0;  // integer products against the exact mode
  uint64_t bf16_bytes = 0;
  Meter bf16_meter, run_meter;
  if (compare) {
    kvring::LayerPlan::Builder bf16_builder;
    for (const kvring::LayerSpec& spec : LayerSpecs(config.model)) bf16_builder.AddLayer(spec);
    bf16_builder.SetContext(context).SetBatch(config.batch).SetRollback(config.draft);
    bf16_builder.SetLayout<Layout>();
    const kvring::Expected<kvring::LayerPlan> bf16_plan = bf16_builder.Build();
    kvring::Expected<kvring::KVCache<Layout>> bf16_cache =
        kvring::KVCache<Layout>::Create(bf16_plan.value());
    kvring::Expected<kvring::KVCache<Layout>> run_cache = kvring::KVCache<Layout>::Create(*plan);
    if (!bf16_cache.ok() || !run_cache.ok()) return 2;
    bf16_bytes = bf16_cache->AllocatedBytes();
    kvring::AttentionOptions exact = options;
    exact.products = kvring::Products::kF32;
    Engine<Layout> bf16("bf16 exact", model, exact, std::move(bf16_cache).value(), &pool,
                        &bf16_meter, &progress);
    Engine<Layout> run(what.c_str(), model, options, std::move(run_cache).value(), &pool,
                       &run_meter, &progress);
    // The integer-product mode is also measured against the exact mode on the same int8 plan
    // (that engine and its cache exist only then).
    Meter exact_meter;
    std::optional<Engine<Layout>> int8_exact;
    std::vector<float> exact_logits, exact_next;
    if (int8_products) {
      kvring::Expected<kvring::KVCache<Layout>> exact_cache =
          kvring::KVCache<Layout>::Create(*plan);
      if (!exact_cache.ok()) return 2;
      int8_exact.emplace("int8 exact", model, exact, std::move(exact_cache).value(), &pool,
                         &exact_meter, &progress);
      checks.ExpectStatus(int8_exact->Prefill(prompt, config.batch), "int8 exact prefill");
      exact_logits = int8_exact->Logits();
    }
    std::vector<int32_t> bf16_tokens;
    std::vector<float> bf16_logits;
    checks.ExpectStatus(bf16.Prefill(prompt, config.batch), "bf16 prefill");
    checks.ExpectStatus(bf16.Decode(config.decode, &bf16_tokens, &bf16_logits), "bf16 decode");
    checks.ExpectStatus(run.Prefill(prompt, config.batch), what + " prefill");
    std::vector<float> run_logits = run.Logits(), next;
    uint64_t agree = 0;
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < bf16_tokens.size(); ++i) {
      const double kl = KLDivergence(&bf16_logits[i * vocab], run_logits.data(), vocab);
      mean_kl += kl / static_cast<double>(bf16_tokens.size());
      max_kl = std::max(max_kl, kl);
      agree += ArgMax(run_logits.data(), vocab) == bf16_tokens[i];
      if (int8_products) {
        const double mode_kl = KLDivergence(exact_logits.data(), run_logits.data(), vocab);
        mode_mean_kl += mode_kl / static_cast<double>(bf16_tokens.size());
        mode_max_kl = std::max(mode_max_kl, mode_kl);
        checks.ExpectStatus(int8_exact->Forward(&bf16_tokens[i], 1, &exact_next), "int8 exact");
        exact_logits.swap(exact_next);
      }
      checks.ExpectStatus(run.Forward(&bf16_tokens[i], 1, &next), what + " decode");
      run_logits.swap(next);
    }
    run_meter.decode_tokens += bf16_tokens.size();
    run_meter.decode_seconds += SecondsSince(start);
    agreement = bf16_tokens.empty()
                    ? 1.0
                    : static_cast<double>(agree) / static_cast<double>(bf16_tokens.size());
    // The int8 quality targets: 2e-4 on the model's own K, 1e-3 with outlier channels.
    const double bound = config.model.k_outliers > 1 ? 1e-3 : 2e-4;
    char summary[160];
    std::snprintf(summary, sizeof(summary),
                  " decode steps: mean KL %.3g (at most %.0e), max %.3g, same token %.2f%%",
                  mean_kl, bound, max_kl, agreement * 100.0);
    checks.Expect(mean_kl <= bound, what + " against exact BF16 over " +
                                        std::to_string(bf16_tokens.size()) + summary);
    if (int8_products) {
      std::snprintf(summary, sizeof(summary),
                    " decode steps: mean KL %.3g (at most %.0e), max %.3g", mode_mean_kl, bound,
                    mode_max_kl);
      checks.Expect(mode_mean_kl <= bound, what + " against the exact mode's int8 over " +
                                               std::to_string(bf16_tokens.size()) + summary);
    }
  }

  // 9. Report.
  std::printf("\nKV memory in use (one sequence, context %llu)\n",
              static_cast<unsigned long long>(context));
  std::printf("  kvring  %9.3f MiB (%llu bytes)\n  flat    %9.3f MiB (%llu bytes), %.2fx\n",
              MiB(ring_bytes), static_cast<unsigned long long>(ring_bytes), MiB(flat_bytes),
              static_cast<unsigned long long>(flat_bytes),
              static_cast<double>(flat_bytes) / static_cast<double>(ring_bytes));
  std::printf("\nthroughput (first conversation: prompt %llu in batches of %llu, decode %llu)\n",
              static_cast<unsigned long long>(config.prompt),
              static_cast<unsigned long long>(config.batch),
              static_cast<unsigned long long>(config.decode));
  const auto rate = [](uint64_t tokens, double seconds) {
    return seconds > 0.0 ? static_cast<double>(tokens) / seconds : 0.0;
  };
  std::printf("  kvring  prefill %8.0f tokens/s  decode %7.0f tokens/s\n",
              rate(ring_meter.prefill_tokens, ring_meter.prefill_seconds),
              rate(ring_meter.decode_tokens, ring_meter.decode_seconds));
  std::printf("  flat    prefill %8.0f tokens/s  decode %7.0f tokens/s\n",
              rate(flat_meter.prefill_tokens, flat_meter.prefill_seconds),
              rate(flat_meter.decode_tokens, flat_meter.decode_seconds));
  if (compare) {
    std::printf("\n%s against exact BF16 (%llu decode steps, the exact cache's tokens)\n",
                what.c_str(), static_cast<unsigned long long>(config.decode));
    std::printf("  KV memory  %9.3f MiB, exact bf16 %9.3f MiB (%.2fx)\n", MiB(ring_bytes),
                MiB(bf16_bytes), static_cast<double>(bf16_bytes) / static_cast<double>(ring_bytes));
    std::printf("  decode     %7.0f tokens/s, exact bf16 %7.0f tokens/s\n",
                rate(run_meter.decode_tokens, run_meter.decode_seconds),
                rate(bf16_meter.decode_tokens, bf16_meter.decode_seconds));
    std::printf("  next-token KL divergence mean %.3g, max %.3g; same token %.2f%%\n", mean_kl,
                max_kl, agreement * 100.0);
  }
  std::printf("\n%d checks passed, %d failed: %s\n", checks.num_passed, checks.num_failed,
              checks.num_failed == 0 ? "OK" : "FAILED");
  return checks.num_failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace mini_engine

int main(int argc, char** argv) {
  mini_engine::Config config;
  bool help = false;
  if (!mini_engine::ParseArgs(argc, argv, &config, &help)) return 2;
  if (help) return 0;
  return config.backend == "tiled" ? mini_engine::Run<mini_engine::Tiled>(config)
                                   : mini_engine::Run<kvring::FlashLayout>(config);
}
