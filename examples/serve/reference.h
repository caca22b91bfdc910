// examples/serve/reference.h: the server loop's reference, a prompt run alone on flat
// storage (a KVCache with every layer at full context), whose tokens and logits every served
// request and conversation turn must match bit for bit.
#ifndef KVRING_EXAMPLES_SERVE_REFERENCE_H_
#define KVRING_EXAMPLES_SERVE_REFERENCE_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kvring/dispatch.h"
#include "kvring/kvring.h"
#include "mini_engine/model.h"
#include "serve/config.h"

namespace serve {

using kvring::Status;
using mini_engine::Activations;
using mini_engine::Model;
using mini_engine::Span;

// The plans of a run over `context` positions: the pool's (its layers at that context, the
// prefill chunk, no rollback) and the flat reference's (a rollback headroom of the context
// plans every owner flat, as in the mini engine). Prints why and returns false if either is
// refused.
template <class Layout>
bool MakePlans(const Config& config, uint64_t context, kvring::Expected<kvring::LayerPlan>* plan,
               kvring::Expected<kvring::LayerPlan>* flat_plan) {
  kvring::LayerPlan::Builder builder;
  for (const kvring::LayerSpec& spec : mini_engine::LayerSpecs(config.model)) {
    builder.AddLayer(spec);
  }
  builder.SetContext(context).SetBatch(std::min(config.batch, context)).SetRollback(0);
  builder.SetLayout<Layout>();
  *plan = builder.Build();
  if (!plan->ok()) {
    std::fprintf(stderr, "serve: %s\n", plan->error().message.c_str());
    return false;
  }
  kvring::RuntimeSpec flat_runtime = (*plan)->Runtime();
  flat_runtime.rollback = context;
  *flat_plan = (*plan)->WithRuntime(flat_runtime);
  if (!flat_plan->ok()) {
    std::fprintf(stderr, "serve: %s\n", flat_plan->error().message.c_str());
    return false;
  }
  return true;
}

// Runs `prompt` alone on `cache` (flat, holding the prompt's first positions, or nothing),
// step by step: the rest of the prompt in chunks of `batch`, then one token per step, each
// chosen greedily, until `num_generate` are chosen; one attention call per layer and step.
// Appends the tokens to *tokens and the logits each was chosen from to *logits.
template <class Layout>
Status RunAlone(const Model& model, const kvring::AttentionOptions& options, uint64_t batch,
                kvring::KVCache<Layout>* cache, const std::vector<int32_t>& prompt,
                uint64_t num_generate, std::vector<int32_t>* tokens_out,
                std::vector<float>* logits_out, kvring::AttentionWorkspace* workspace,
                const kvring::TaskRunner& runner, Activations* activations) {
  const size_t vocab = model.config.vocab;
  std::vector<float> logits, conv, state;
  uint64_t pos = cache->EndPos();
  const auto run = [&](const int32_t* tokens, uint64_t n) {
    const Span span{pos, n};
    const auto attend = [&](size_t layer, const float* q, const float* k, const float* v,
                            float* attn) {
      if (mini_engine::IsRecurrent(model.config, layer)) {
        return mini_engine::RecurStep(
            model, layer, q, n, pos, attn, [&] { return cache->State(layer); },
            [&](uint64_t positions) { return cache->StateAfter(layer, positions); }, &conv, &state);
      }
      if (k != nullptr) {
        const Status status = cache->AppendF32(layer, pos, k, v, n);
        if (status != Status::kOk) return status;
      }
      return kvring::Attention(cache->View(layer),
                               mini_engine::SpanQueries(model, layer, q, attn, 0, span), options,
                               *workspace, runner)
          .status();
    };
    const Status status =
        mini_engine::Forward(model, tokens, &span, 1, attend, activations, &logits);
    pos += n;
    return status;
  };
  while (pos < prompt.size()) {
    const Status status = run(prompt.data() + pos, std::min(batch, prompt.size() - pos));
    if (status != Status::kOk) return status;
  }
  for (;;) {
    const float* row = logits.data() + logits.size() - vocab;
    tokens_out->push_back(mini_engine::ArgMax(row, vocab));
    logits_out->insert(logits_out->end(), row, row + vocab);
    if (tokens_out->size() == num_generate) return Status::kOk;
    const Status status = run(&tokens_out->back(), 1);
    if (status != Status::kOk) return status;
  }
}

}  // namespace serve

#endif  // KVRING_EXAMPLES_SERVE_REFERENCE_H_
