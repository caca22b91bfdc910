// examples/serve/config.h: the server loop's options (serve --help lists them).
#ifndef KVRING_EXAMPLES_SERVE_CONFIG_H_
#define KVRING_EXAMPLES_SERVE_CONFIG_H_

#include <cstdint>
#include <string>

#include "mini_engine/model.h"
#include "mini_engine/options.h"

namespace serve {

struct Config {
  mini_engine::ModelConfig model;  // --window and --seed set its fields
  std::string backend = "flash";
  uint64_t requests = 64;
  uint64_t system_prompt = 192;  // tokens of the shared system prompt
  uint64_t shared_percent = 80;  // of the requests start with it
  uint64_t min_prompt = 8;       // a prompt's own tokens (after the system prompt, if any)
  uint64_t max_prompt = 96;
  uint64_t min_generate = 4;  // tokens a request generates
  uint64_t max_generate = 128;
  uint64_t arrival_gap = 3;        // steps between two arrivals: uniform in [0, arrival_gap]
  uint64_t batch = 64;             // prefill chunk: a request's prompt runs this many tokens a step
  uint64_t budget_kib = 6144;      // the pool's budget_bytes / 1024
  uint64_t block_slots = 0;        // positions per block (0: the layout's default)
  uint64_t lookahead = 16;         // steps of growth an admission leaves room for
  uint32_t threads = 1;            // attention threads
  uint64_t split_positions = 128;  // KV split length of decode calls
  std::string csv;                 // memory and requests per step, if set
  // Prompt reuse (reuse.h): multi-turn conversations through a kvring::PrefixCache.
  bool reuse = false;
  std::string save;     // --reuse: the cache's checkpoints before the last turns, to this file
  std::string restart;  // the last turns only, from the checkpoints of this file
  uint64_t conversations = 8;
  uint64_t turns = 3;
};

// Returns false (after printing why) on a bad command line; prints the usage on --help.
bool ParseArgs(int argc, char** argv, Config* config, bool* help) {
  mini_engine::Options options("serve");
  options.Choice("backend", {"flash", "tiled"}, &config->backend,
                 "kvring layout and kernels (default flash)");
  options.Number("requests", &config->requests, "requests generated (64)", 1);
  options.Number("system-prompt", &config->system_prompt,
                 "tokens of the shared system prompt (192)");
  options.Number("shared-percent", &config->shared_percent,
                 "requests that start with it, in percent (80)", 0, 100);
  // Every prompt has a token of its own, so that a fork prefills at least one and every
  // request has the logits of its first token.
  options.Number("min-prompt", &config->min_prompt,
                 "a prompt's own tokens, after any system prompt: from (8)", 1);
  options.Number("max-prompt", &config->max_prompt, "... to (96)", 1);
  options.Number("min-generate", &config->min_generate, "tokens a request generates: from (4)", 1);
  options.Number("max-generate", &config->max_generate, "... to (128)", 1);
  options.Number("arrival-gap", &config->arrival_gap,
                 "steps between arrivals, uniform from 0 to N (3)");
  options.Number("batch", &config->batch,
                 "prefill chunk: prompt tokens a request runs per step (64)", 1);
  options.Number("budget-kib", &config->budget_kib,
                 "the pool's budget of K/V bytes, in KiB (6144)");
  options.Number("block-slots", &config->block_slots,
                 "positions per block of the global layers (layout's default)");
  options.Number("lookahead", &config->lookahead,
                 "steps of growth of the running requests an admission must\n"
                 "leave room for (16); at least 1",
                 1);
  options.Number("threads", &config->threads, "attention threads (1)", 1);
  options.Number("split-positions", &config->split_positions,
                 "KV split length of decode calls (128)");
  options.Number("window", &config->model.window, "sliding layers' window (64)", 1);
  mini_engine::AddWidthOptions(&options, &config->model);
  options.Number("seed", &config->model.seed, "weights, requests and arrivals (1)");
  options.Flag("hybrid", &config->model.hybrid,
               "layers 1-3 recurrent (the mini engine's hybrid model): each\n"
               "sequence keeps its states in the pool");
  options.Text("csv", "FILE", &config->csv,
               "write memory in use, running and waiting requests per step");
  options.Flag("reuse", &config->reuse,
               "prompt reuse instead: multi-turn conversations through a\n"
               "kvring::PrefixCache, each turn against a cold run and against\n"
               "recomputing the conversation on flat storage");
  options.Number("conversations", &config->conversations, "--reuse: conversations (8)", 1);
  options.Number("turns", &config->turns, "--reuse: turns of each (3)", 2);
  options.Text("save", "FILE", &config->save,
               "--reuse: save the prefix cache before the last turns");
  options.Text("restart", "FILE", &config->restart,
               "run the conversations' last turns from the prefix cache\n"
               "saved in FILE (by --reuse --save=FILE with the same options)");
  if (!options.Parse(argc, argv, help)) return false;
  if (*help) return true;
  if (config->min_prompt > config->max_prompt) {
    return options.Refuse("--min-prompt=" + std::to_string(config->min_prompt) +
                          " is above --max-prompt=" + std::to_string(config->max_prompt));
  }
  if (!config->save.empty() && !config->reuse) {
    return options.Refuse("--save=" + config->save + " needs --reuse");
  }
  if (config->reuse && !config->restart.empty()) {
    return options.Refuse("--reuse and --restart=" + config->restart + " are two runs");
  }
  if (config->min_generate > config->max_generate) {
    return options.Refuse("--min-generate=" + std::to_string(config->min_generate) +
                          " is above --max-generate=" + std::to_string(config->max_generate));
  }
  return true;
}

}  // namespace serve

#endif  // KVRING_EXAMPLES_SERVE_CONFIG_H_
