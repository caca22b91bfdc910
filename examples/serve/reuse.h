// examples/serve/reuse.h: prompt reuse on the server's model (serve --reuse, serve --restart).
// Multi-turn conversations: each turn's prompt is the conversation so far (every earlier
// prompt and generated token) and new user tokens, and the first turn is long enough that the
// sliding layers' rings have wrapped before the second arrives. The turns run in rounds (every
// conversation's first turn, then every second turn, ...) on one KVPool, through a
// kvring::PrefixCache: a turn attaches to the checkpoint its conversation's last turn left and
// prefills only the tokens past it; each finished turn leaves a checkpoint of its sequence.
// Every turn also runs cold (prefilled from zero in the same pool) and is recomputed from
// scratch on flat storage: the three must give the same tokens and logits, bit for bit.
// --save=FILE saves the cache before the last round; --restart=FILE runs the last round only,
// from the cache that file holds (a restarted engine).
#ifndef KVRING_EXAMPLES_SERVE_REUSE_H_
#define KVRING_EXAMPLES_SERVE_REUSE_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kvring/dispatch.h"
#include "kvring/kvring.h"
#include "mini_engine/checks.h"
#include "mini_engine/model.h"
#include "serve/config.h"
#include "serve/reference.h"

namespace serve {

using kvring::Result;
using kvring::SequenceId;
using mini_engine::Checks;
using mini_engine::Clock;
using mini_engine::SecondsSince;

// One conversation: each turn's new user tokens and the tokens it generates.
struct Conversation {
  std::vector<std::vector<int32_t>> user;
  std::vector<uint64_t> generate;
  uint64_t salt = 0;             // its tenant's: conversations never share checkpoints
  std::vector<int32_t> history;  // the turns run so far: prompts and generated tokens
};

// Returns the conversations of `config`: the first turn 2 * window plus a prompt's tokens (so
// the rings wrap), later turns a prompt's; generation lengths as the server's requests'.
inline std::vector<Conversation> MakeConversations(const Config& config) {
  std::mt19937 rng(config.model.seed + 7000);
  const auto uniform = [&](uint64_t low, uint64_t high) {
    return std::uniform_int_distribution<uint64_t>(low, high)(rng);
  };
  std::vector<Conversation> conversations(config.conversations);
  for (size_t c = 0; c < conversations.size(); ++c) {
    Conversation& conversation = conversations[c];
    conversation.salt = c;
    for (uint64_t t = 0; t < config.turns; ++t) {
      const uint64_t own = uniform(config.min_prompt, config.max_prompt);
      conversation.user.push_back(mini_engine::RandomTokens(
          static_cast<uint32_t>(config.model.seed + 8000 + c * 64 + t),
          (t == 0 ? 2 * config.model.window : 0) + own, config.model.vocab));
      conversation.generate.push_back(uniform(config.min_generate, config.max_generate));
    }
  }
  return conversations;
}

// What one turn gave and cost.
struct TurnRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  uint64_t prefilled = 0;  // prompt tokens run (the rest came from a checkpoint)
  double first_token_seconds = 0.0;
  bool checkpoint_kept = false;
};

// Runs turns on one pool through a prefix cache: attach (or start empty), prefill the rest in
// chunks, decode greedily, leave a checkpoint. A refusal for the budget evicts checkpoints
// (the cache's MakeRoom) and tries again.
template <class Layout>
class TurnRunner {
 public:
  TurnRunner(const Config& config, const Model& model, const kvring::AttentionOptions& options,
             kvring::KVPool<Layout>* pool, kvring::PrefixCache<Layout>* cache,
             const kvring::TaskRunner& runner)
      : config_(config),
        model_(model),
        options_(options),
        pool_(*pool),
        cache_(*cache),
        runner_(runner) {}

  // Runs `prompt`, then generates `num_generate` tokens; with `reuse`, resumes from the cache
  // and leaves a checkpoint under `salt` with `priority` (later turns higher), evicting the one
  // it resumed from (the new one holds all of it).
  Status Run(const std::vector<int32_t>& prompt, uint64_t num_generate, bool reuse, uint64_t salt,
             uint32_t priority, TurnRun* turn) {
    const Clock::time_point start = Clock::now();
    SequenceId id;
    kvring::PrefixMatch match;
    // The prompt's last token is always run: its logits choose the first token.
    if (reuse) match = cache_.Match(prompt.data(), prompt.size() - 1, salt);
    const uint64_t rings = match.length > 0 ? *cache_.AttachBytes(match) : pool_.RingBytesFor(1);
    Result made = Room(rings, [&] {
      return match.length > 0 ? cache_.Attach(match, &id) : pool_.AddSequence(&id, 1);
    });
    if (!made.ok()) return Fail("a turn's sequence", made);
    std::vector<int32_t> tokens = prompt;
    uint64_t pos = match.length;
    turn->prefilled = prompt.size() - pos;
    for (uint64_t done = 0; done < num_generate;) {
      const uint64_t n = pos < prompt.size() ? std::min(config_.batch, prompt.size() - pos) : 1;
      Result reserved = Room(*pool_.ReserveBytes(id, n), [&] { return pool_.Reserve(id, n); });
      if (!reserved.ok()) return Fail("a step's reservation", reserved);
      const Status stepped = Step(id, tokens.data() + pos, Span{pos, n});
      if (stepped != Status::kOk) return stepped;
      pos += n;
      if (pos < prompt.size()) continue;
      if (done == 0) {
        turn->first_token_seconds = SecondsSince(start);
        (void)pool_.Resize(id, 1);  // decode rings
      }
      const float* row = logits_.data() + logits_.size() - model_.config.vocab;
      turn->tokens.push_back(mini_engine::ArgMax(row, model_.config.vocab));
      turn->logits.insert(turn->logits.end(), row, row + model_.config.vocab);
      tokens.push_back(turn->tokens.back());
      ++done;
    }
    if (reuse) {
      // The sequence holds every token but the last generated one.
      tokens.pop_back();
      const Result kept = Room(*pool_.RingBytesOf(id), [&] {
        return cache_.Insert(id, tokens.data(), tokens.size(), salt, priority);
      });
      turn->checkpoint_kept = kept.ok();
      // The new checkpoint holds all the old one did: the conversation resumes from it.
      if (kept.ok() && match.length > 0) (void)cache_.Evict(match);
    }
    const Result freed = pool_.Free(id);
    if (!freed.ok()) return Fail("a finished turn", freed);
    return Status::kOk;
  }

 private:
  // Calls `call`; when the budget refuses it, evicts checkpoints until `bytes` and a sequence
  // slot are free (or none is left) and calls it again. Returns its last result.
  template <typename Call>
  Result Room(uint64_t bytes, const Call& call) {
    const Result result = call();
    if (result.status() != Status::kPoolExhausted) return result;
    (void)cache_.MakeRoom(bytes, 1);
    return call();
  }

  // Appends the K/V of `span`'s tokens to `id` and attends, layer by layer; logits_ gets the
  // span's rows.
  Status Step(SequenceId id, const int32_t* tokens, const Span& span) {
    const auto attend = [&](size_t layer, const float* q, const float* k, const float* v,
                            float* attn) {
      if (mini_engine::IsRecurrent(model_.config, layer)) {
        return mini_engine::RecurStep(
            model_, layer, q, span.num_tokens, span.first_pos, attn,
            [&] { return pool_.State(id, layer); },
            [&](uint64_t n) { return pool_.StateAfter(id, layer, n); }, &conv_, &state_);
      }
      if (k != nullptr) {
        const Result appended = pool_.AppendF32(id, layer, span.first_pos, k, v, span.num_tokens);
        if (!appended.ok()) return Fail("an append", appended);
      }
      const kvring::ValueResult<kvring::KVView<Layout>> view = pool_.View(id, layer);
      if (!view.ok()) return Fail("a view", view);
      const Result attended =
          kvring::Attention(*view, mini_engine::SpanQueries(model_, layer, q, attn, 0, span),
                            options_, workspace_, runner_);
      return attended.ok() ? Status::kOk : Fail("attention", attended);
    };
    return mini_engine::Forward(model_, tokens, &span, 1, attend, &activations_, &logits_);
  }

  Status Fail(const char* what, const Result& result) {
    std::fprintf(stderr, "serve: %s: %s\n", what, result.Message().c_str());
    return result.status() == Status::kOk ? Status::kBadArgument : result.status();
  }

  const Config& config_;
  const Model& model_;
  const kvring::AttentionOptions options_;
  kvring::KVPool<Layout>& pool_;
  kvring::PrefixCache<Layout>& cache_;
  kvring::TaskRunner runner_;
  kvring::AttentionWorkspace workspace_;
  Activations activations_;
  std::vector<float> logits_;
  std::vector<float> conv_, state_;  // a recurrent layer's state while a step runs
};

// Runs the conversations of `config` (--reuse), or their last turns from the checkpoints
// saved in config.restart (--restart), and checks them; returns 0 when every check passed.
template <class Layout>
int RunReuse(const Config& config) {
  using mini_engine::Bytes;
  const Model model = mini_engine::MakeModel(config.model);
  const size_t vocab = config.model.vocab;
  std::vector<Conversation> conversations = MakeConversations(config);
  uint64_t context = 0;
  for (const Conversation& c : conversations) {
    uint64_t positions = 0;
    for (uint64_t t = 0; t < config.turns; ++t) positions += c.user[t].size() + c.generate[t];
    context = std::max(context, positions);
  }
  kvring::Expected<kvring::LayerPlan> plan = kvring::Error{}, flat_plan = kvring::Error{};
  if (!MakePlans<Layout>(config, context, &plan, &flat_plan)) return 2;
  kvring::PoolSpec spec;
  spec.budget_bytes = config.budget_kib * 1024;
  // A checkpoint per turn at most, the turn running and its cold twin.
  spec.max_sequences = static_cast<uint32_t>(conversations.size() * config.turns + 2);
  spec.block_slots = config.block_slots;
  kvring::Expected<kvring::KVPool<Layout>> pool = kvring::KVPool<Layout>::Create(*plan, spec);
  if (!pool.ok()) {
    std::fprintf(stderr, "serve: %s\n", pool.error().message.c_str());
    return 2;
  }
  kvring::PrefixCache<Layout> cache(&pool.value());
  // Split-free attention: a query's result is then the same whatever chunk it runs in (a
  // resumed turn's chunks start at its checkpoint, the recomputation's at 0).
  kvring::AttentionOptions options;
  options.max_split_queries = 0;
  kvring::ThreadPool threads(config.threads);
  TurnRunner<Layout> runner(config, model, options, &pool.value(), &cache, threads.Runner());
  const std::string model_id = "kvring serve mini model: seed " +
                               std::to_string(config.model.seed) + ", window " +
                               std::to_string(config.model.window);
  const bool restart = !config.restart.empty();
  std::printf(
      "serve --%s: %zu conversations of %llu turns, the first %llu+ tokens (window "
      "%llu), on %s over %s; budget %s\n",
      restart ? "restart" : "reuse", conversations.size(),
      static_cast<unsigned long long>(config.turns),
      static_cast<unsigned long long>(2 * config.model.window + config.min_prompt),
      static_cast<unsigned long long>(config.model.window), kvring::ToString(Layout::kBackend),
      kvring::DispatchedTargetName(), Bytes(spec.budget_bytes).c_str());

  Checks checks;
  if (restart) {
    const Clock::time_point start = Clock::now();
    const Result loaded = kvring::LoadPrefixCacheFile(config.restart, model_id, &cache);
    if (!loaded.ok()) {
      std::fprintf(stderr, "serve: --restart=%s: %s\n", config.restart.c_str(),
                   loaded.Message().c_str());
      return 2;
    }
    std::printf("  loaded %zu checkpoints (%s) from %s in %.1f ms\n",
                static_cast<size_t>(cache.Stats().checkpoints), Bytes(cache.Stats().bytes).c_str(),
                config.restart.c_str(), SecondsSince(start) * 1e3);
  }
  uint64_t turns_run = 0, matched = 0, resumed = 0, later_turns = 0, kept = 0;
  uint64_t prefilled_reuse = 0, prefilled_cold = 0, wrapped = 0;
  double first_token_reuse = 0.0, first_token_cold = 0.0;
  Status status = Status::kOk;
  Activations activations;
  kvring::AttentionWorkspace workspace;
  for (uint64_t t = 0; t < config.turns && status == Status::kOk; ++t) {
    const bool run = !restart || t + 1 == config.turns;
    for (Conversation& c : conversations) {
      std::vector<int32_t> prompt = c.history;
      prompt.insert(prompt.end(), c.user[t].begin(), c.user[t].end());
      // Recomputed from scratch on flat storage: the reference, and the conversation's
      // history for its next turn.
      kvring::Expected<kvring::KVCache<Layout>> flat = kvring::KVCache<Layout>::Create(*flat_plan);
      std::vector<int32_t> ref_tokens;
      std::vector<float> ref_logits;
      status = RunAlone(model, options, config.batch, &flat.value(), prompt, c.generate[t],
                        &ref_tokens, &ref_logits, &workspace, threads.Runner(), &activations);
      if (status != Status::kOk) break;
      if (run) {
        TurnRun reused, cold;
        const uint32_t priority = static_cast<uint32_t>(t);
        status = runner.Run(prompt, c.generate[t], /*reuse=*/true, c.salt, priority, &reused);
        if (status == Status::kOk) {
          status = runner.Run(prompt, c.generate[t], /*reuse=*/false, c.salt, priority, &cold);
        }
        if (status != Status::kOk) break;
        const std::string reuse_difference =
            mini_engine::Compare(reused.tokens, reused.logits, ref_tokens, ref_logits, vocab);
        const std::string cold_difference =
            mini_engine::Compare(cold.tokens, cold.logits, ref_tokens, ref_logits, vocab);
        const std::string turn = "turn " + std::to_string(t + 1) + " of conversation " +
                                 std::to_string(c.salt) + " (prompt " +
                                 std::to_string(prompt.size()) + ")";
        matched += checks.Count(reuse_difference.empty(),
                                turn + " resumed, against its recomputation: " + reuse_difference);
        checks.Count(cold_difference.empty(),
                     turn + " cold, against its recomputation: " + cold_difference);
        ++turns_run;
        kept += reused.checkpoint_kept;
        prefilled_reuse += reused.prefilled;
        prefilled_cold += cold.prefilled;
        if (t > 0) {
          ++later_turns;
          resumed += reused.prefilled < prompt.size();
          wrapped += c.history.size() > config.model.window;
          first_token_reuse += reused.first_token_seconds;
          first_token_cold += cold.first_token_seconds;
        }
      }
      c.history = prompt;
      c.history.insert(c.history.end(), ref_tokens.begin(), ref_tokens.end());
    }
    if (status == Status::kOk && !config.save.empty() && t + 2 == config.turns) {
      const Result saved = kvring::SavePrefixCacheFile(cache, model_id, config.save);
      checks.Expect(saved.ok(), "the prefix cache saved to " + config.save + " before the last " +
                                    "round (" + std::to_string(cache.Stats().checkpoints) +
                                    " checkpoints): " + (saved.ok() ? "ok" : saved.Message()));
    }
  }
  const kvring::PrefixCacheStats stats = cache.Stats();
  std::printf("\nchecks\n");
  checks.ExpectStatus(status, "the conversations");
  checks.Expect(matched == turns_run && turns_run > 0,
                std::to_string(matched) + " of " + std::to_string(turns_run) +
                    " turns resumed through the prefix cache gave the tokens and logits of "
                    "recomputing their conversation from scratch on flat storage, bit for bit "
                    "(and so did the same turns run cold)");
  checks.Expect(later_turns > 0 && resumed == later_turns && wrapped == later_turns,
                std::to_string(resumed) + " of " + std::to_string(later_turns) +
                    " turns after a conversation's first resumed from a checkpoint, each after "
                    "its sliding rings had wrapped (" +
                    std::to_string(wrapped) + ")");
  checks.Expect(prefilled_reuse < prefilled_cold,
                "prompt tokens prefilled: " + std::to_string(prefilled_reuse) + " resumed, " +
                    std::to_string(prefilled_cold) + " cold (" +
                    std::to_string(prefilled_cold - std::min(prefilled_cold, prefilled_reuse)) +
                    " saved)");
  checks.Expect(kept == turns_run, std::to_string(kept) + " of " + std::to_string(turns_run) +
                                       " turns left a checkpoint");
  cache.Clear();
  const kvring::PoolUsage left = pool->Usage();
  checks.Expect(left.bytes_in_use == 0 && left.live_sequences == 0,
                "clearing the cache left " + std::to_string(left.bytes_in_use) + " bytes and " +
                    std::to_string(left.live_sequences) + " sequences in the pool");
  const auto mean_ms = [](double seconds, uint64_t n) { return n == 0 ? 0.0 : seconds * 1e3 / n; };
  std::printf(
      "\nprefix cache: %llu checkpoints at the end (%s), %llu hits, %llu misses, %llu "
      "evictions\n",
      static_cast<unsigned long long>(stats.checkpoints), Bytes(stats.bytes).c_str(),
      static_cast<unsigned long long>(stats.hits), static_cast<unsigned long long>(stats.misses),
      static_cast<unsigned long long>(stats.evictions));
  std::printf(
      "time to first token, turns after the first: %.2f ms resumed, %.2f ms cold "
      "(%.2fx)\n",
      mean_ms(first_token_reuse, later_turns), mean_ms(first_token_cold, later_turns),
      first_token_reuse > 0.0 ? first_token_cold / first_token_reuse : 0.0);
  std::printf("\n%d checks passed, %d failed: %s\n", checks.num_passed, checks.num_failed,
              checks.num_failed == 0 ? "OK" : "FAILED");
  return checks.num_failed == 0 ? 0 : 1;
}

}  // namespace serve

#endif  // KVRING_EXAMPLES_SERVE_REUSE_H_
