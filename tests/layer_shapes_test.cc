// Models whose layer types differ in shape (issue 17's first point): Gemma 4 31B gives its
// global layers head dim 512 on 4 kv_heads and its sliding layers 256 on 16; MiMo-V2-Flash
// has K heads of 192, V heads of 128, and more kv_heads on its sliding layers. Each layer of a
// KVCache and of a KVPool sequence (paged globals) stores its own shape, reads back what was
// written, and attends (kvring/dispatch.h, every query head count the layer's) as the float64
// reference does over the stored values, on flash and tiled16, BF16 and int8. (Under emulation
// the aarch64 runs share the cases: reference/best_target_share.h.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvring/dispatch.h"
#include "kvring/kvring.h"
#include "reference/best_target_share.h"
#include "reference/random_floats.h"
#include "reference/reference_attention.h"

namespace kvring {
namespace {

struct ShapedModel {
  const char* name;
  uint32_t num_q_heads;  // every layer's query heads
  std::vector<LayerSpec> layers;
};

LayerSpec WithV(LayerSpec spec, uint32_t v_head_dim) {
  spec.v_head_dim = v_head_dim;
  return spec;
}

// Gemma 4 31B's two layer types (config: head_dim 256, num_key_value_heads 16 on sliding
// layers; global_head_dim 512, num_global_key_value_heads 4 on full ones; 32 query heads),
// with a short window, a consumer of each, and MiMo-V2-Flash's (head_dim 192, v_head_dim
// 128, 8 kv_heads sliding, 4 full; 64 query heads).
std::vector<ShapedModel> Models() {
  return {
      {"gemma-4-31b",
       32,
       {LayerSpec::Sliding(48, 16, 256), LayerSpec::Global(4, 512),
        LayerSpec::Sliding(48, 16, 256).SharedFrom(0), LayerSpec::Global(4, 512).SharedFrom(1)}},
      {"mimo-v2-flash",
       64,
       {WithV(LayerSpec::Sliding(40, 8, 192), 128), WithV(LayerSpec::Global(4, 192), 128)}},
  };
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  kvring::testing::UniformFloats u(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

// The stored values of layer `layer` at every position of [first, end) (K then V, per
// position [kv_head][dim]), as ReadRowF32 gives them: what the kernels read.
struct StoredRows {
  uint64_t first = 0;
  std::vector<std::vector<float>> k, v;
};

template <typename ReadRow>
StoredRows ReadStored(const ReadRow& read_row, const LayerSpec& spec, uint64_t first,
                      uint64_t end) {
  StoredRows rows;
  rows.first = first;
  for (uint64_t pos = first; pos < end; ++pos) {
    std::vector<float> k(size_t{spec.num_kv_heads} * spec.head_dim);
    std::vector<float> v(size_t{spec.num_kv_heads} * spec.VHeadDim());
    const Result read = read_row(pos, k.data(), v.data());
    EXPECT_TRUE(read.ok()) << read.Message();
    rows.k.push_back(std::move(k));
    rows.v.push_back(std::move(v));
  }
  return rows;
}

// Attends `num_queries` queries ending at the view's end and compares each head's output
// with the reference over `stored`.
template <typename Layout>
void ExpectAttentionMatches(const KVView<Layout>& view, const LayerSpec& spec, uint32_t num_q_heads,
                            const StoredRows& stored, uint32_t num_queries, std::mt19937& rng,
                            const std::string& what) {
  const std::vector<float> q = Random(size_t{num_queries} * num_q_heads * spec.head_dim, rng);
  std::vector<float> out(size_t{num_queries} * num_q_heads * spec.VHeadDim(), -7.0f);
  AttentionBatch batch;
  batch.queries_f32 = q.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = view.end_pos - num_queries;
  batch.num_queries = num_queries;
  batch.num_q_heads = num_q_heads;
  batch.head_dim = spec.head_dim;
  AttentionOptions options;
  options.split_positions = 32;  // decode splits and merges
  AttentionWorkspace workspace;
  const Result result = Attention(view, batch, options, workspace);
  ASSERT_TRUE(result.ok()) << what << ": " << result.Message();
  reference::ReferenceKV ref;
  ref.num_kv_heads = spec.num_kv_heads;
  ref.head_dim = spec.head_dim;
  ref.v_head_dim = spec.VHeadDim();
  ref.k = [&](uint64_t pos, uint32_t h, uint32_t d) {
    return stored.k[pos - stored.first][size_t{h} * spec.head_dim + d];
  };
  ref.v = [&](uint64_t pos, uint32_t h, uint32_t d) {
    return stored.v[pos - stored.first][size_t{h} * spec.VHeadDim() + d];
  };
  reference::ReferenceOptions ro;
  ro.scale = 1.0 / std::sqrt(static_cast<double>(spec.head_dim));
  const std::vector<double> expected = reference::ReferenceAttention(
      ref, view.visibility, q, batch.first_q_pos, num_queries, num_q_heads, ro);
  const size_t row = spec.VHeadDim();
  for (size_t i = 0; i < size_t{num_queries} * num_q_heads; ++i) {
    ASSERT_LE(reference::NormwiseRelativeError(&out[i * row], &expected[i * row], row), 2e-3)
        << what << ", output row " << i;
  }
}

// Appends `end` positions to every owning layer of `append(layer, pos, k, v, n)` in chunks
// of 24 (rings wrap), keeping each layer's rows of its own shape.
template <typename Append>
void Prefill(const LayerPlan& plan, uint64_t end, std::mt19937& rng, const Append& append) {
  for (uint64_t pos = 0; pos < end; pos += 24) {
    const uint64_t n = std::min<uint64_t>(24, end - pos);
    for (size_t layer = 0; layer < plan.NumLayers(); ++layer) {
      const LayerSpec& spec = plan.Layer(layer).spec;
      if (!spec.OwnsKV()) continue;
      const std::vector<float> k = Random(n * spec.num_kv_heads * spec.head_dim, rng);
      const std::vector<float> v = Random(n * spec.num_kv_heads * spec.VHeadDim(), rng);
      const Result appended = append(layer, pos, k.data(), v.data(), n);
      ASSERT_TRUE(appended.ok()) << "layer " << layer << ": " << appended.Message();
    }
  }
}

// Checks each model in `format`: the cases numbered from *index on (one per model), those
// that run here (testing::BestTargetCaseRunsHere).
template <typename Layout>
void CheckCacheAndPool(Format format, uint32_t* index) {
  constexpr uint64_t kEnd = 110;  // past every ring (windows 40-48, batch 24): wrapped
  for (const ShapedModel& model : Models()) {
    if (!testing::BestTargetCaseRunsHere((*index)++)) continue;
    const std::string what = std::string(model.name) + " " + ToString(format);
    LayerPlan::Builder builder;
    for (const LayerSpec& spec : model.layers) builder.AddLayer(spec);
    const Expected<LayerPlan> plan =
        builder.SetContext(256).SetBatch(24).SetFormat(format).SetLayout<Layout>().Build();
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    std::mt19937 rng(17);
    Expected<KVCache<Layout>> cache = KVCache<Layout>::Create(*plan);
    ASSERT_TRUE(cache.ok()) << cache.error().message;
    Prefill(*plan, kEnd, rng,
            [&](size_t layer, uint64_t pos, const float* k, const float* v, uint64_t n) {
              return cache->AppendF32(layer, pos, k, v, n);
            });
    Expected<KVPool<Layout>> pool = KVPool<Layout>::Create(*plan, PoolSpec{64ull << 20, 2, 0});
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    SequenceId id;
    ASSERT_TRUE(pool->AddSequence(&id).ok());
    Prefill(*plan, kEnd, rng,
            [&](size_t layer, uint64_t pos, const float* k, const float* v, uint64_t n) {
              if (layer == 0) {  // the step's first owner: reserve the step once
                const Result reserved = pool->Reserve(id, n);
                if (!reserved.ok()) return reserved;
              }
              return pool->AppendF32(id, layer, pos, k, v, n);
            });
    for (size_t layer = 0; layer < plan->NumLayers(); ++layer) {
      const LayerSpec& spec = plan->Layer(layer).spec;
      const KVView<Layout> cache_view = cache->View(layer);
      ASSERT_EQ(cache_view.layout.Shape().head_dim, spec.head_dim) << what;
      ASSERT_EQ(cache_view.layout.Shape().num_kv_heads, spec.num_kv_heads) << what;
      const StoredRows in_cache = ReadStored(
          [&](uint64_t pos, float* k, float* v) { return cache->ReadRowF32(layer, pos, k, v); },
          spec, cache_view.first_pos, kEnd);
      const std::string at = what + " layer " + std::to_string(layer);
      ExpectAttentionMatches(cache_view, spec, model.num_q_heads, in_cache, 1, rng, at + " cache");
      ExpectAttentionMatches(cache_view, spec, model.num_q_heads, in_cache, 3, rng, at + " cache");
      const ValueResult<KVView<Layout>> pool_view = pool->View(id, layer);
      ASSERT_TRUE(pool_view.ok()) << pool_view.Message();
      const StoredRows in_pool = ReadStored(
          [&](uint64_t pos, float* k, float* v) { return pool->ReadRowF32(id, layer, pos, k, v); },
          spec, pool_view.value().first_pos, kEnd);
      ExpectAttentionMatches(pool_view.value(), spec, model.num_q_heads, in_pool, 1, rng,
                             at + " pool");
    }
  }
}

TEST(LayerShapes, GlobalAndSlidingLayersOfOtherShapesAttendAsTheReferenceFlash) {
  uint32_t index = 0;
  CheckCacheAndPool<FlashLayout>(Format::kBF16, &index);
  CheckCacheAndPool<FlashLayout>(Format::kInt8, &index);
}

TEST(LayerShapes, GlobalAndSlidingLayersOfOtherShapesAttendAsTheReferenceTiled) {
  uint32_t index = 0;
  CheckCacheAndPool<TiledLayout<16>>(Format::kBF16, &index);
  CheckCacheAndPool<TiledLayout<16>>(Format::kInt8, &index);
}

// Attends `q` (8 heads, one query at the view's end) over a latent view, its values the
// latent's first 96 dims; returns the output.
template <typename Layout>
std::vector<float> AttendLatent(const KVView<Layout>& view, const std::vector<float>& q) {
  std::vector<float> out(8 * 96, -7.0f);
  AttentionBatch batch;
  batch.queries_f32 = q.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = view.end_pos - 1;
  batch.num_queries = 1;
  batch.num_q_heads = 8;
  batch.head_dim = 128;
  AttentionOptions options;
  options.latent_v_dims = 96;
  options.split_positions = 32;
  AttentionWorkspace workspace;
  const Result result = Attention(view, batch, options, workspace);
  EXPECT_TRUE(result.ok()) << result.Message();
  return out;
}

// DeepSeek V3.2's and GLM-5's DSA layers keep an indexer key beside each latent (in the V
// stream): attention over them is the plain latent's, bit for bit, in a cache (flat and ring)
// and in a pool sequence (paged and ring).
template <typename Layout>
void CheckDsaAttendsAsItsLatent(Format format) {
  const auto plan_of = [&](uint32_t indexer_dim) {
    LayerSpec sliding = LayerSpec::Latent(128).WithIndexer(indexer_dim);
    sliding.kind = AttentionKind::kSliding;
    sliding.window = 40;
    return LayerPlan::Builder()
        .AddLayer(LayerSpec::Latent(128).WithIndexer(indexer_dim))
        .AddLayer(sliding)
        .SetContext(256)
        .SetBatch(24)
        .SetFormat(format)
        .SetLayout<Layout>()
        .Build();
  };
  const Expected<LayerPlan> dsa_plan = plan_of(64), plain_plan = plan_of(0);
  ASSERT_TRUE(dsa_plan.ok() && plain_plan.ok());
  Expected<KVCache<Layout>> dsa = KVCache<Layout>::Create(*dsa_plan);
  Expected<KVCache<Layout>> plain = KVCache<Layout>::Create(*plain_plan);
  Expected<KVPool<Layout>> pool = KVPool<Layout>::Create(*dsa_plan, PoolSpec{16u << 20, 1, 0});
  ASSERT_TRUE(dsa.ok() && plain.ok() && pool.ok());
  SequenceId id;
  ASSERT_TRUE(pool->AddSequence(&id).ok());
  std::mt19937 rng(23);
  for (uint64_t pos = 0; pos < 110; pos += 22) {
    ASSERT_TRUE(pool->Reserve(id, 22).ok());
    for (size_t layer = 0; layer < 2; ++layer) {
      const std::vector<float> latent = Random(22 * 128, rng), keys = Random(22 * 64, rng);
      ASSERT_TRUE(dsa->AppendF32(layer, pos, latent.data(), keys.data(), 22).ok());
      ASSERT_TRUE(plain->AppendF32(layer, pos, latent.data(), nullptr, 22).ok());
      ASSERT_TRUE(pool->AppendF32(id, layer, pos, latent.data(), keys.data(), 22).ok());
    }
  }
  for (size_t layer = 0; layer < 2; ++layer) {
    const std::vector<float> q = Random(8 * 128, rng);
    const std::vector<float> want = AttendLatent(plain->View(layer), q);
    EXPECT_EQ(AttendLatent(dsa->View(layer), q), want) << ToString(format) << " layer " << layer;
    EXPECT_EQ(AttendLatent(pool->View(id, layer).value(), q), want)
        << ToString(format) << " pool layer " << layer;
  }
}

TEST(LayerShapes, DsaLayersAttendAsTheirLatentWithoutTheirIndexerKeys) {
  CheckDsaAttendsAsItsLatent<FlashLayout>(Format::kBF16);
  CheckDsaAttendsAsItsLatent<FlashLayout>(Format::kInt8);
  CheckDsaAttendsAsItsLatent<TiledLayout<16>>(Format::kBF16);
  CheckDsaAttendsAsItsLatent<TiledLayout<16>>(Format::kInt8);
}

}  // namespace
}  // namespace kvring
