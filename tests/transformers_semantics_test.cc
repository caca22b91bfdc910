// kvring's attention against what transformers computes, family by family (issue 17). The
// fixtures in tests/transformers/ were written by tools/transformers/attention_fixtures.py:
// a tiny random-weight model of each family ran a 40-position prompt through transformers
// (eager attention), and each layer's attention call was captured (queries after RoPE and
// norms, the keys and values it attended, its scale, soft-cap and sinks, its output). Here
// kvring plans the fixture's config.json as kvring-plan would, appends the K/V three
// positions at a time to a flash and a tiled16 cache (so every ring wraps several times), attends
// the same queries with the same options, and must give the same outputs up to the BF16 rounding of
// the stored K/V. A shared-KV layer must attend exactly the K/V of the layer kvring names as its
// owner. MLA (seven families) attends as engines do, the up-projections absorbed into the queries
// and outputs over the stored latent. No Python runs here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvring/dispatch.h"
#include "kvring/hf_config.h"
#include "kvring/kvring.h"

namespace kvring {
namespace {

using Json = nlohmann::json;

constexpr uint32_t kStep = 3;  // positions appended and attended per forward pass
// Normwise relative error of a layer's outputs. The fixtures' attention read K/V rounded to
// BF16 as kvring stores them, so the two differ by float32 arithmetic: about 2e-7 measured.
// A window or chunk one position off moves them by 1e-2 or more (the negative test).
constexpr double kTolerance = 1e-5;

std::string FixturePath(const std::string& name) {
  std::string dir = __FILE__;
  dir = dir.substr(0, dir.find_last_of('/'));
  return dir + "/transformers/" + name + ".json";
}

Json ReadFixture(const std::string& name) {
  std::ifstream file(FixturePath(name));
  std::stringstream text;
  text << file.rdbuf();
  return Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

// Decodes base64 text of little-endian float32 values.
std::vector<float> DecodeFloats(const std::string& text) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    const size_t value = kAlphabet.find(c);
    if (value == std::string::npos) continue;  // '=' padding
    bits = (bits << 6) | static_cast<uint32_t>(value);
    count += 6;
    if (count >= 8) {
      count -= 8;
      bytes.push_back(static_cast<uint8_t>(bits >> count));
    }
  }
  std::vector<float> values(bytes.size() / 4);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t word = uint32_t{bytes[4 * i]} | uint32_t{bytes[4 * i + 1]} << 8 |
                          uint32_t{bytes[4 * i + 2]} << 16 | uint32_t{bytes[4 * i + 3]} << 24;
    std::memcpy(&values[i], &word, 4);
  }
  return values;
}

struct CapturedLayer {
  bool state = false;  // a hybrid's recurrent layer: transformers made no attention call
  // JetMoE: query head h reads K/V head h % num_kv_heads (its K/V repeated whole), where
  // kvring's groups give query head h K/V head h / (num_q_heads / num_kv_heads).
  bool tiled_kv = false;
  std::vector<float> q, k, v, out;
  uint32_t num_q_heads = 0, num_kv_heads = 0, head_dim = 0, v_head_dim = 0;
  AttentionOptions options;
  std::vector<float> sinks;
};

std::vector<CapturedLayer> Captured(const Json& fixture) {
  std::vector<CapturedLayer> layers;
  for (const Json& entry : fixture["layers"]) {
    CapturedLayer layer;
    if (entry.value("state", false)) {
      layer.state = true;
      layers.push_back(std::move(layer));
      continue;
    }
    for (const char* name : {"q", "k", "v", "out"}) {
      std::vector<float> values = DecodeFloats(entry[name].get<std::string>());
      if (name[0] == 'q') layer.q = std::move(values);
      if (name[0] == 'k') layer.k = std::move(values);
      if (name[0] == 'v') layer.v = std::move(values);
      if (name[0] == 'o') layer.out = std::move(values);
    }
    const Json& shapes = entry["shapes"];
    layer.num_q_heads = shapes["q"][1].get<uint32_t>();
    layer.head_dim = shapes["q"][2].get<uint32_t>();
    layer.num_kv_heads = shapes["k"][1].get<uint32_t>();
    layer.v_head_dim = shapes["v"][2].get<uint32_t>();
    layer.options.scale = entry["scale"].get<float>();
    layer.options.soft_cap = entry["soft_cap"].get<float>();
    layer.sinks = entry["sinks"].get<std::vector<float>>();
    layer.tiled_kv = entry.value("tiled_kv", false);
    layers.push_back(std::move(layer));
  }
  return layers;
}

// Returns `rows` ([T][heads][dim]) with its heads reordered from JetMoE's order (head
// e * num_kv_heads + k: expert e's query for K/V head k) into kvring's (k * group + e) when
// `to_kvring`, or back when not.
std::vector<float> RegroupHeads(const std::vector<float>& rows, uint32_t heads, uint32_t kv_heads,
                                uint32_t dim, bool to_kvring) {
  std::vector<float> out(rows.size());
  const uint32_t group = heads / kv_heads;
  for (size_t t = 0; t < rows.size() / (size_t{heads} * dim); ++t) {
    for (uint32_t e = 0; e < group; ++e) {
      for (uint32_t k = 0; k < kv_heads; ++k) {
        const size_t jetmoe = (t * heads + e * kv_heads + k) * dim;
        const size_t grouped = (t * heads + k * group + e) * dim;
        std::copy_n(&rows[to_kvring ? jetmoe : grouped], dim, &out[to_kvring ? grouped : jetmoe]);
      }
    }
  }
  return out;
}

// Builds `builder`'s plan into *plan for `positions` positions appended kStep at a time in
// `Layout`, and returns a cache of it; nothing (the failure recorded) when either is refused.
template <typename Layout>
std::optional<KVCache<Layout>> PlanAndCache(LayerPlan::Builder builder, uint64_t positions,
                                            LayerPlan* plan) {
  Expected<LayerPlan> built =
      builder.SetContext(positions).SetBatch(kStep).SetLayout<Layout>().Build();
  EXPECT_TRUE(built.ok()) << built.error().message;
  if (!built.ok()) return std::nullopt;
  *plan = built.value();
  Expected<KVCache<Layout>> created = KVCache<Layout>::Create(*plan);
  EXPECT_TRUE(created.ok()) << created.error().message;
  if (!created.ok()) return std::nullopt;
  return std::move(created).value();
}

// Plans `fixture`'s config as kvring-plan reads it, with `edit` applied to the layers (the
// negative test's wrong windows), runs the prompt through a KVCache of `Layout` kStep
// positions at a time, and returns each layer's normwise relative error against
// transformers' output.
template <typename Layout, typename Edit>
std::vector<double> LayerErrors(const Json& fixture, const Edit& edit) {
  const Expected<HfModel> model =
      ParseHfConfig(fixture["config"].dump(), fixture["model_type"].get<std::string>());
  EXPECT_TRUE(model.ok()) << model.error().message;
  if (!model.ok()) return {};
  const uint64_t positions = fixture["positions"].get<uint64_t>();
  LayerPlan::Builder builder;
  for (size_t i = 0; i < model->layers.size(); ++i) {
    LayerSpec spec = model->layers[i];
    edit(i, &spec);
    builder.AddLayer(spec);
  }
  LayerPlan plan;
  std::optional<KVCache<Layout>> made = PlanAndCache<Layout>(builder, positions, &plan);
  if (!made) return {};
  KVCache<Layout>& cache = *made;
  std::vector<CapturedLayer> layers = Captured(fixture);
  EXPECT_EQ(layers.size(), plan.NumLayers());
  if (layers.size() != plan.NumLayers()) return {};
  for (CapturedLayer& layer : layers) {
    if (!layer.tiled_kv) continue;
    layer.q = RegroupHeads(layer.q, layer.num_q_heads, layer.num_kv_heads, layer.head_dim, true);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerInfo& info = plan.Layer(i);
    // kvring's recurrent layers are the ones where transformers attends nothing.
    EXPECT_EQ(info.spec.attends, !layers[i].state) << "layer " << i;
    if (layers[i].state || !info.spec.attends) continue;
    EXPECT_EQ(info.spec.num_kv_heads, layers[i].num_kv_heads) << "layer " << i;
    EXPECT_EQ(info.spec.head_dim, layers[i].head_dim) << "layer " << i;
    EXPECT_EQ(info.spec.VHeadDim(), layers[i].v_head_dim) << "layer " << i;
    // A shared-KV layer attends its owner's K/V: transformers' must be the same arrays.
    if (!info.OwnsKV()) {
      EXPECT_EQ(layers[i].k, layers[info.owner].k) << "layer " << i << " owner " << info.owner;
      EXPECT_EQ(layers[i].v, layers[info.owner].v) << "layer " << i << " owner " << info.owner;
    }
  }
  std::vector<std::vector<float>> outputs(layers.size());
  AttentionWorkspace workspace;
  for (uint64_t pos = 0; pos < positions; pos += kStep) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kStep, positions - pos));
    for (size_t i = 0; i < layers.size(); ++i) {
      if (!cache.OwnsKV(i)) continue;
      const CapturedLayer& layer = layers[i];
      const Result appended =
          cache.AppendF32(i, pos, layer.k.data() + pos * layer.num_kv_heads * layer.head_dim,
                          layer.v.data() + pos * layer.num_kv_heads * layer.v_head_dim, n);
      EXPECT_TRUE(appended.ok()) << appended.Message();
    }
    for (size_t i = 0; i < layers.size(); ++i) {
      CapturedLayer& layer = layers[i];
      if (layer.state) continue;
      const size_t out_row = size_t{layer.num_q_heads} * layer.v_head_dim;
      outputs[i].resize(outputs[i].size() + n * out_row);
      AttentionBatch batch;
      batch.queries_f32 = layer.q.data() + pos * layer.num_q_heads * layer.head_dim;
      batch.out_f32 = outputs[i].data() + pos * out_row;
      batch.first_q_pos = pos;
      batch.num_queries = n;
      batch.num_q_heads = layer.num_q_heads;
      batch.head_dim = layer.head_dim;
      AttentionOptions options = layer.options;
      options.sinks = layer.sinks.empty() ? nullptr : layer.sinks.data();
      const Result attended = Attention(cache.View(i), batch, options, workspace);
      EXPECT_TRUE(attended.ok()) << attended.Message();
    }
  }
  std::vector<double> errors;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].tiled_kv) {
      outputs[i] = RegroupHeads(outputs[i], layers[i].num_q_heads, layers[i].num_kv_heads,
                                layers[i].v_head_dim, false);
    }
    double diff = 0, norm = 0;
    for (size_t j = 0; j < layers[i].out.size(); ++j) {
      const double d = double{outputs[i][j]} - layers[i].out[j];
      diff += d * d;
      norm += double{layers[i].out[j]} * layers[i].out[j];
    }
    errors.push_back(std::sqrt(diff / std::max(norm, 1e-30)));
  }
  return errors;
}

const char* const kFamilies[] = {
    "mistral", "qwen2", "gemma2", "gemma3_text", "gemma3n_text", "gemma4_text",
    "gemma4_unified_text", "llama4_text", "gpt_oss", "cohere2", "olmo3", "smollm3", "exaone4",
    "cwm", "mixtral", "phi3", "starcoder2", "qwen2_moe", "qwen3_moe", "cohere2_moe", "dots1",
    "vaultgemma", "afmoe", "ministral", "mellum", "laguna", "qwen3", "phimoe", "phi4_multimodal",
    "ministral3", "exaone_moe", "seed_oss", "ernie4_5",
    // GPT-style families (GPT-Neo's local layers slide), JetMoE, ModernBERT's decoder (global
    // and local layers), Chameleon and Aria.
    "gpt_neo", "gpt2", "gpt_bigcode", "gptj", "gpt_neox", "opt", "persimmon", "biogpt", "dbrx",
    "falcon", "xglm", "jetmoe", "modernbert-decoder", "chameleon", "aria_text",
    // Families whose every layer attends fully, and the text models of multimodal wrappers.
    "llama", "gemma", "olmo", "olmo2", "granite", "cohere", "glm", "glm4", "stablelm", "helium",
    "apertus", "arcee", "hunyuan_v1_dense", "jais2", "nanochat", "bitnet", "phi", "hyperclovax",
    "nemotron", "codegen", "gpt-sw3", "gpt_neox_japanese", "emu3_text_model", "qwen3_vl_text",
    "olmoe", "flex_olmo", "granitemoe", "granitemoeshared", "ernie4_5_moe", "hunyuan_v1_moe",
    "minimax_m2", "solar_open", "hy_v3", "glm4_moe", "qwen3_vl_moe_text", "deepseek_ocr2_text",
    "glm4v_text", "glm_ocr_text", "paddleocr_vl_text", "qwen2_vl_text", "qwen2_5_vl_text",
    "glm4v_moe_text", "granite4_vision_text", "ernie4_5_vl_moe_text",
    // HRM-Text: a layer per cache slot of its recurrent stacks.
    "hrm_text",
    // Hybrids: their recurrent layers attend nothing, their attention layers as the others.
    "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "olmo_hybrid", "lfm2", "granitemoehybrid",
    "falcon_h1", "jamba", "bamba", "minimax", "lfm2_moe", "nemotron_h", "zamba", "zamba2",
    "recurrent_gemma"};

TEST(TransformersSemantics, EveryFamilyAttendsAsTransformersThroughWrappedRings) {
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    const Json fixture = ReadFixture(family);
    ASSERT_FALSE(fixture.is_discarded()) << FixturePath(family);
    const auto keep = [](size_t, LayerSpec*) {};
    std::vector<double> errors = LayerErrors<FlashLayout>(fixture, keep);
    const std::vector<double> tiled = LayerErrors<TiledLayout<16>>(fixture, keep);
    ASSERT_FALSE(errors.empty());
    ASSERT_EQ(tiled.size(), errors.size());
    for (size_t i = 0; i < errors.size(); ++i) {
      EXPECT_LT(errors[i], kTolerance) << "flash, layer " << i;
      EXPECT_LT(tiled[i], kTolerance) << "tiled16, layer " << i;
      errors[i] = std::max(errors[i], tiled[i]);
    }
    std::printf("%-13s %zu layers, largest normwise error %.2e (transformers %s)\n", family,
                errors.size(), *std::max_element(errors.begin(), errors.end()),
                fixture["transformers"].get<std::string>().c_str());
  }
}

// The check can fail: the same runs with each owning layer's sliding window (or chunk) one
// position wider than the config's miss transformers' outputs by far more than the tolerance.
TEST(TransformersSemantics, AWindowOnePositionOffIsCaught) {
  size_t caught = 0;
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    const Json fixture = ReadFixture(family);
    ASSERT_FALSE(fixture.is_discarded()) << FixturePath(family);
    const std::vector<double> errors =
        LayerErrors<FlashLayout>(fixture, [](size_t, LayerSpec* spec) {
          if (spec->kind == AttentionKind::kSliding && spec->OwnsKV()) ++spec->window;
          if (spec->kind == AttentionKind::kChunked && spec->OwnsKV()) ++spec->chunk;
        });
    const Expected<HfModel> model =
        ParseHfConfig(fixture["config"].dump(), fixture["model_type"].get<std::string>());
    ASSERT_TRUE(model.ok());
    for (size_t i = 0; i < errors.size(); ++i) {
      const LayerSpec& spec = model->layers[i];
      if (spec.kind == AttentionKind::kGlobal || !spec.OwnsKV()) continue;
      EXPECT_GT(errors[i], 100 * kTolerance) << "layer " << i;
      ++caught;
    }
  }
  EXPECT_GE(caught, 75u);
}

// MLA (DeepSeek V3): an engine stores each position's latent (the compressed KV after its
// norm, then the RoPE key) and absorbs kv_b_proj's up-projections: the queries' nope part
// times W_UK scores against the compressed KV, and the output over the latent's first
// kv_lora_rank dims times W_UV is the head's output. kvring plans the latent as kvring-plan
// reads the config, appends the fixture's latents kStep positions at a time, attends the
// absorbed queries (latent_v_dims = kv_lora_rank) at the captured scale times
// `scale_factor`, and returns each layer's normwise relative error of the projected outputs
// against transformers' per-head outputs (computed from the same stored latents).
template <typename Layout>
std::vector<double> LatentLayerErrors(const Json& fixture, float scale_factor) {
  const Expected<HfModel> model =
      ParseHfConfig(fixture["config"].dump(), fixture["model_type"].get<std::string>());
  EXPECT_TRUE(model.ok()) << model.error().message;
  if (!model.ok()) return {};
  const Json& config = fixture["config"];
  const uint32_t rank = config["kv_lora_rank"].get<uint32_t>();
  const uint32_t nope = config["qk_nope_head_dim"].get<uint32_t>();
  const uint32_t rope = config["qk_rope_head_dim"].get<uint32_t>();
  const uint32_t v_dim = config["v_head_dim"].get<uint32_t>();
  const uint32_t latent_dim = rank + rope;
  const uint64_t positions = fixture["positions"].get<uint64_t>();
  LayerPlan plan;
  std::optional<KVCache<Layout>> made =
      PlanAndCache<Layout>(model->PlanBuilder(), positions, &plan);
  if (!made) return {};
  KVCache<Layout>& cache = *made;
  const std::vector<CapturedLayer> captured = Captured(fixture);
  const size_t num_layers = captured.size();
  // Per layer: the latents to append, the absorbed queries, kv_b_proj, the latent outputs.
  std::vector<std::vector<float>> latents(num_layers), queries(num_layers), kv_b(num_layers),
      latent_out(num_layers), indexer_keys(num_layers);
  const uint32_t heads = captured[0].num_q_heads, q_dim = captured[0].head_dim;  // nope + rope
  // W_UK of head h is rows [h (nope + v), + nope) of kv_b, W_UV the next v rows.
  const auto w = [&](size_t i, uint32_t h, uint32_t row, uint32_t r) {
    return double{kv_b[i][(size_t{h} * (nope + v_dim) + row) * rank + r]};
  };
  for (size_t i = 0; i < num_layers; ++i) {
    const CapturedLayer& layer = captured[i];
    const Json& entry = fixture["layers"][i];
    EXPECT_EQ(plan.Layer(i).spec.latent_dim, latent_dim) << "layer " << i;
    const std::vector<float> compressed = DecodeFloats(entry["latent"].get<std::string>());
    kv_b[i] = DecodeFloats(entry["kv_b"].get<std::string>());
    // DSA: the indexer's keys (after their RoPE, in BF16) are the latent's V rows.
    const uint32_t indexer_dim =
        entry.contains("indexer_keys") ? entry["shapes"]["indexer_keys"][1].get<uint32_t>() : 0;
    EXPECT_EQ(plan.Layer(i).spec.indexer_dim, indexer_dim) << "layer " << i;
    if (indexer_dim != 0) indexer_keys[i] = DecodeFloats(entry["indexer_keys"].get<std::string>());
    latents[i].resize(positions * latent_dim);
    queries[i].resize(positions * heads * latent_dim);
    latent_out[i].resize(positions * heads * rank);
    for (uint64_t t = 0; t < positions; ++t) {
      std::copy_n(&compressed[t * rank], rank, &latents[i][t * latent_dim]);
      // The RoPE key: the same on every head (the captured K's last rope dims, in BF16).
      std::copy_n(&layer.k[t * heads * q_dim + nope], rope, &latents[i][t * latent_dim + rank]);
      for (uint32_t h = 0; h < heads; ++h) {
        const float* q = &layer.q[(t * heads + h) * q_dim];
        float* absorbed = &queries[i][(t * heads + h) * latent_dim];
        for (uint32_t r = 0; r < rank; ++r) {
          double sum = 0;
          for (uint32_t n = 0; n < nope; ++n) sum += double{q[n]} * w(i, h, n, r);
          absorbed[r] = static_cast<float>(sum);
        }
        std::copy_n(q + nope, rope, absorbed + rank);
      }
    }
  }
  AttentionWorkspace workspace;
  for (uint64_t pos = 0; pos < positions; pos += kStep) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kStep, positions - pos));
    for (size_t i = 0; i < num_layers; ++i) {
      const uint32_t indexer_dim = plan.Layer(i).spec.indexer_dim;
      const float* indexer = indexer_dim == 0 ? nullptr : &indexer_keys[i][pos * indexer_dim];
      const Result appended = cache.AppendF32(i, pos, &latents[i][pos * latent_dim], indexer, n);
      EXPECT_TRUE(appended.ok()) << appended.Message();
      // The engine's indexer reads back exactly the keys transformers' indexer scores.
      const IndexerKeysView keys = cache.IndexerKeys(i);
      size_t differ = 0;
      for (uint64_t t = pos; t < pos + n && indexer_dim != 0; ++t) {
        for (uint32_t d = 0; d < indexer_dim; ++d) {
          differ += BF16ToF32(keys.Row(t)[d]) != indexer_keys[i][t * indexer_dim + d];
        }
      }
      EXPECT_EQ(differ, 0u) << "layer " << i << ", indexer keys at " << pos;
    }
    for (size_t i = 0; i < num_layers; ++i) {
      AttentionBatch batch;
      batch.queries_f32 = &queries[i][pos * heads * latent_dim];
      batch.out_f32 = &latent_out[i][pos * heads * rank];
      batch.first_q_pos = pos;
      batch.num_queries = n;
      batch.num_q_heads = heads;
      batch.head_dim = latent_dim;
      AttentionOptions options;
      options.scale = captured[i].options.scale * scale_factor;
      options.latent_v_dims = rank;
      const Result attended = Attention(cache.View(i), batch, options, workspace);
      EXPECT_TRUE(attended.ok()) << attended.Message();
    }
  }
  std::vector<double> errors;
  for (size_t i = 0; i < num_layers; ++i) {
    double diff = 0, norm = 0;
    for (uint64_t t = 0; t < positions; ++t) {
      for (uint32_t h = 0; h < heads; ++h) {
        for (uint32_t j = 0; j < v_dim; ++j) {
          double out = 0;
          for (uint32_t r = 0; r < rank; ++r) {
            out += w(i, h, nope + j, r) * latent_out[i][(t * heads + h) * rank + r];
          }
          const double expected = captured[i].out[(t * heads + h) * v_dim + j];
          diff += (out - expected) * (out - expected);
          norm += expected * expected;
        }
      }
    }
    errors.push_back(std::sqrt(diff / std::max(norm, 1e-30)));
  }
  return errors;
}

// Every MLA family transformers has, each at its own scale (captured) and RoPE layout.
const char* const kMlaFamilies[] = {"deepseek_v3", "deepseek_v2",  "glm4_moe_lite",
                                    "youtu",       "mistral4",     "deepseek_v32",
                                    "glm_moe_dsa", "longcat_flash"};

TEST(TransformersSemantics, MlaAttendsItsAbsorbedLatentAsTransformers) {
  for (const char* family : kMlaFamilies) {
    SCOPED_TRACE(family);
    const Json fixture = ReadFixture(family);
    ASSERT_FALSE(fixture.is_discarded()) << FixturePath(family);
    const std::vector<double> flash = LatentLayerErrors<FlashLayout>(fixture, 1.0f);
    const std::vector<double> tiled = LatentLayerErrors<TiledLayout<16>>(fixture, 1.0f);
    ASSERT_EQ(flash.size(), 2u);
    ASSERT_EQ(tiled.size(), 2u);
    double largest = 0;
    for (size_t i = 0; i < flash.size(); ++i) {
      EXPECT_LT(flash[i], kTolerance) << "flash, layer " << i;
      EXPECT_LT(tiled[i], kTolerance) << "tiled16, layer " << i;
      largest = std::max({largest, flash[i], tiled[i]});
    }
    std::printf("%-13s %zu layers, largest normwise error %.2e, scale %.6g (transformers %s)\n",
                family, flash.size(), largest, fixture["layers"][0]["scale"].get<double>(),
                fixture["transformers"].get<std::string>().c_str());
  }
}

// The check can fail: DeepSeek V3 without YaRN's mscale^2 in the scale (qk_head_dim^-0.5
// alone) misses transformers' outputs by far more than the tolerance.
TEST(TransformersSemantics, MlaWithoutYarnsScaleIsCaught) {
  const Json fixture = ReadFixture("deepseek_v3");
  ASSERT_FALSE(fixture.is_discarded()) << FixturePath("deepseek_v3");
  const double mscale = 0.1 * std::log(4.0) + 1.0;  // factor 4, mscale_all_dim 1
  const std::vector<double> unscaled =
      LatentLayerErrors<FlashLayout>(fixture, static_cast<float>(1.0 / (mscale * mscale)));
  ASSERT_EQ(unscaled.size(), 2u);
  for (double error : unscaled) EXPECT_GT(error, 100 * kTolerance);
}

}  // namespace
}  // namespace kvring
