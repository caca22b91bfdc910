// Tests of kvring/layer_plan.h: the capacity rule, the accounting, the capacity report and
// the rejection of bad configurations. Expected numbers are worked out in the test from the
// rule, never copied from the output.
#include "kvring/layer_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kvring/model_presets.h"

namespace kvring {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

// The flash layout's slots for a capacity, worked out here: whole 32-slot tiles, made an odd
// number of tiles.
uint64_t FlashSlots(uint64_t capacity) {
  uint64_t tiles = (capacity + 31) / 32;
  if (tiles % 2 == 0) ++tiles;
  return tiles * 32;
}

LayerPlan MustBuild(const LayerPlan::Builder& builder) {
  Expected<LayerPlan> plan = builder.Build();
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.ok() ? plan.value() : LayerPlan();
}

TEST(LayerPlan, SlidingLayerHoldsWindowMinusOnePlusBatch) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Sliding(1024, 16, 128))
                                       .SetContext(131072)
                                       .SetBatch(512));
  const LayerInfo& layer = plan.Layer(0);
  EXPECT_EQ(layer.capacity, 1024u - 1 + 512);  // 1535
  EXPECT_EQ(layer.num_slots, 1568u);           // 48 tiles of 32 is even: 49 tiles
  EXPECT_EQ(layer.slot_bytes, 16u * 128 * 2 * 2);
  EXPECT_EQ(layer.bytes, 1568u * 8192);
  EXPECT_EQ(layer.padding_bytes, (1568u - 1535) * 8192);
  EXPECT_EQ(layer.span, 1024u);
  EXPECT_TRUE(layer.OwnsKV());
}

TEST(LayerPlan, RollbackAndBatchTakeTheirMaximumNotTheirSum) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Sliding(1024, 1, 64))
                                       .SetContext(100000)
                                       .SetBatch(4)
                                       .SetRollback(16));
  EXPECT_EQ(plan.Layer(0).capacity, 1023u + 16);
  EXPECT_EQ(plan.Layer(0).num_slots, 1056u);  // 1039 rounded up to 33 tiles of 32

  const LayerPlan batch_wins = MustBuild(LayerPlan::Builder()
                                             .AddLayer(LayerSpec::Sliding(1024, 1, 64))
                                             .SetContext(100000)
                                             .SetBatch(64)
                                             .SetRollback(16));
  EXPECT_EQ(batch_wins.Layer(0).capacity, 1023u + 64);
}

TEST(LayerPlan, WindowAtOrPastTheContextIsFlat) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Sliding(4096, 8, 128))
                                       .AddLayer(LayerSpec::Sliding(2000, 8, 128))
                                       .SetContext(2048)
                                       .SetBatch(512));
  EXPECT_EQ(plan.Layer(0).capacity, 2048u);
  EXPECT_EQ(plan.Layer(1).capacity, 2048u);  // 1999 + 512 > 2048
  EXPECT_EQ(plan.TotalBytes(), plan.FlatBytes());
  // Both layers grow with the context.
  EXPECT_EQ(plan.ContextTokenBytes(), 2u * 8 * 128 * 2 * 2);
}

TEST(LayerPlan, GlobalLayerHoldsTheContextAndPaddingIsNotContext) {
  const LayerPlan plan = MustBuild(
      LayerPlan::Builder().AddLayer(LayerSpec::Global(8, 128)).SetContext(1000).SetBatch(1));
  EXPECT_EQ(plan.Layer(0).capacity, 1000u);
  EXPECT_EQ(plan.Layer(0).num_slots, 1056u);  // 32 tiles is even: 33
  EXPECT_EQ(plan.Runtime().context, 1000u);
  EXPECT_EQ(plan.ContextTokenBytes(), 8u * 128 * 4);
  EXPECT_EQ(plan.FlatBytes(), 1056u * 8 * 128 * 4);
  EXPECT_EQ(plan.PaddingBytes(), 56u * 8 * 128 * 4);
}

TEST(LayerPlan, TiledBackendPadsToItsTileRows) {
  for (uint32_t tile_rows : {8u, 16u, 32u, 64u}) {
    const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                         .AddLayer(LayerSpec::Sliding(1000, 4, 64))
                                         .SetContext(8192)
                                         .SetBatch(1)
                                         .SetBackend(Backend::kTiled, tile_rows));
    EXPECT_EQ(plan.SlotAlignment(), tile_rows);
    EXPECT_EQ(plan.Layer(0).capacity, 1000u);
    const uint64_t expected = (1000 + tile_rows - 1) / tile_rows * tile_rows;
    EXPECT_EQ(plan.Layer(0).num_slots, expected) << tile_rows;
  }
  const LayerPlan flash =
      MustBuild(LayerPlan::Builder().AddLayer(LayerSpec::Sliding(1000, 4, 64)).SetContext(8192));
  EXPECT_EQ(flash.Layer(0).num_slots, 1056u);
}

TEST(LayerPlan, ChunkedLayerHoldsChunkMinusOnePlusBatch) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Chunked(8192, 8, 128))
                                       .SetContext(10485760)
                                       .SetBatch(512));
  EXPECT_EQ(plan.Layer(0).capacity, 8191u + 512);
  EXPECT_EQ(plan.Layer(0).num_slots, 8736u);  // 272 tiles is even: 273
  EXPECT_EQ(plan.Layer(0).span, 8192u);
}

TEST(LayerPlan, ConsumersAllocateNothingAndOwnerKeepsTheLargestWindow) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Sliding(512, 2, 256))
                                       .AddLayer(LayerSpec::Sliding(2048, 2, 256).SharedFrom(0))
                                       .AddLayer(LayerSpec::Sliding(128, 2, 256).SharedFrom(0))
                                       .SetContext(32768)
                                       .SetBatch(64));
  EXPECT_EQ(plan.Layer(0).span, 2048u);
  EXPECT_EQ(plan.Layer(0).capacity, 2047u + 64);
  for (size_t i : {1u, 2u}) {
    EXPECT_EQ(plan.Layer(i).owner, 0u);
    EXPECT_FALSE(plan.Layer(i).OwnsKV());
    EXPECT_EQ(plan.Layer(i).capacity, 0u);
    EXPECT_EQ(plan.Layer(i).num_slots, 0u);
    EXPECT_EQ(plan.Layer(i).bytes, 0u);
  }
  EXPECT_EQ(plan.NumOwningLayers(), 1u);
  EXPECT_EQ(plan.TotalBytes(), plan.Layer(0).bytes);
}

TEST(LayerPlan, GlobalConsumerMakesItsSlidingOwnerFlat) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Sliding(512, 2, 256))
                                       .AddLayer(LayerSpec::Global(2, 256).SharedFrom(0))
                                       .SetContext(32768)
                                       .SetBatch(64));
  EXPECT_EQ(plan.Layer(0).capacity, 32768u);
  EXPECT_EQ(plan.Layer(0).span, 0u);
}

TEST(LayerPlan, ChunkedOwnerWithSlidingConsumerKeepsTheLarger) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Chunked(256, 1, 64))
                                       .AddLayer(LayerSpec::Sliding(1000, 1, 64).SharedFrom(0))
                                       .SetContext(1 << 20)
                                       .SetBatch(8));
  EXPECT_EQ(plan.Layer(0).capacity, 999u + 8);
}

TEST(LayerPlan, DifferentVHeadDimCountsBothStreams) {
  LayerSpec spec = LayerSpec::Global(4, 192);
  spec.v_head_dim = 128;
  const LayerPlan plan = MustBuild(LayerPlan::Builder().AddLayer(spec).SetContext(64));
  EXPECT_EQ(plan.Layer(0).slot_bytes, 4u * (192 + 128) * 2);
}

TEST(LayerPlan, ADsaIndexerKeyIsCountedInItsLayersSlot) {
  // DeepSeek V3.2: the latent's 576 elements and the indexer's key of 128, per position: BF16
  // 1152 + 256 bytes; int8 (the size of the FP8 key and scale engines keep) 580 + 132; f16
  // accounting 1152 + 256. The key grows with the context, as the latent does.
  const LayerSpec dsa = LayerSpec::Latent(576).WithIndexer(128);
  const LayerPlan bf16 = MustBuild(LayerPlan::Builder().AddLayers(61, dsa).SetContext(32768));
  EXPECT_EQ(bf16.Layer(0).indexer_slot_bytes, 256u);
  EXPECT_EQ(bf16.Layer(0).slot_bytes, 576u * 2 + 256);
  EXPECT_EQ(bf16.TotalBytes(), 61ull * FlashSlots(32768) * (576 * 2 + 256));
  EXPECT_EQ(bf16.ContextTokenBytes(), 61u * (576 * 2 + 256));
  const LayerPlan int8 = MustBuild(
      LayerPlan::Builder().AddLayers(61, dsa).SetContext(32768).SetElementType(ElementType::kInt8));
  EXPECT_EQ(int8.Layer(0).indexer_slot_bytes, 128u + 4);
  EXPECT_EQ(int8.Layer(0).slot_bytes, 576u + 4 + 128 + 4);
  // On a layer of heads (transformers' expanded MLA), beside K and V.
  const LayerPlan heads = MustBuild(
      LayerPlan::Builder().AddLayer(LayerSpec::Global(2, 64).WithIndexer(32)).SetContext(64));
  EXPECT_EQ(heads.Layer(0).slot_bytes, 2u * 64 * 2 * 2 + 32 * 2);
}

TEST(LayerPlan, LatentLayerStoresOneStream) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayers(61, LayerSpec::Latent(576))
                                       .SetContext(32768)
                                       .SetElementType(ElementType::kF16));
  EXPECT_EQ(plan.Layer(0).slot_bytes, 576u * 2);
  // llama.cpp's MLA figure: 1952 MiB latent + 244 MiB rope part = 2196 MiB.
  const uint64_t latent = 61ull * 32768 * 512 * 2, rope = 61ull * 32768 * 64 * 2;
  EXPECT_EQ(latent, 1952 * kMiB);
  EXPECT_EQ(rope, 244 * kMiB);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), latent + rope);
  EXPECT_EQ(plan.TotalBytes(), 61ull * FlashSlots(32768) * 576 * 2);
}

TEST(LayerPlan, ElementTypesScaleTheBytes) {
  const struct {
    ElementType type;
    uint64_t bytes;
  } kCases[] = {{ElementType::kBF16, 2},
                {ElementType::kF16, 2},
                {ElementType::kF32, 4},
                {ElementType::kFP8, 1}};
  for (const auto& c : kCases) {
    const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                         .AddLayer(LayerSpec::Global(8, 128))
                                         .SetContext(4096)
                                         .SetElementType(c.type));
    EXPECT_EQ(plan.ElementBytes(), c.bytes);
    EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), 4096u * 8 * 128 * 2 * c.bytes)
        << ToString(c.type);
    EXPECT_EQ(plan.TotalBytes(), FlashSlots(4096) * 8 * 128 * 2 * c.bytes) << ToString(c.type);
  }
}

TEST(LayerPlan, OneFormatVocabularyForStorageAndAccounting) {
  // The runtime's element type is a Format; each format has its name and bytes, and the
  // accounting-only ones are marked.
  static_assert(std::is_same<ElementType, Format>::value, "ElementType is Format");
  const struct {
    Format format;
    const char* name;
    uint64_t element_bytes;
    uint64_t row_bytes_of_128;
    bool accounting_only;
  } kCases[] = {
      {Format::kBF16, "bf16", 2, 256, false}, {Format::kInt8, "int8", 1, 132, false},
      {Format::kF16, "f16", 2, 256, true},    {Format::kF32, "f32", 4, 512, true},
      {Format::kFP8, "fp8", 1, 128, true},    {Format::kInt8Hadamard, "int8h", 1, 132, false}};
  for (const auto& c : kCases) {
    EXPECT_STREQ(ToString(c.format), c.name);
    EXPECT_EQ(ElementBytes(c.format), c.element_bytes) << c.name;
    EXPECT_EQ(RowBytes(c.format, 128), c.row_bytes_of_128) << c.name;
    EXPECT_EQ(IsAccountingOnly(c.format), c.accounting_only) << c.name;
    EXPECT_EQ(IsInt8(c.format), c.format == Format::kInt8 || c.format == Format::kInt8Hadamard);
    EXPECT_EQ(RotatesK(c.format), c.format == Format::kInt8Hadamard) << c.name;
  }
  const Format outside = static_cast<Format>(42);
  EXPECT_STREQ(ToString(outside), "invalid");
  EXPECT_EQ(ElementBytes(outside), 0u);
  EXPECT_EQ(RowBytes(outside, 128), 0u);
  EXPECT_FALSE(IsAccountingOnly(outside));
}

TEST(LayerPlan, OneLayerCountedInAnAccountingOnlyFormat) {
  // A what-if for one layer: the plan counts it in f32, its neighbours in their own formats.
  LayerSpec f32 = LayerSpec::Global(8, 128);
  f32.format = Format::kF32;
  const LayerPlan plan = MustBuild(
      LayerPlan::Builder().AddLayer(LayerSpec::Global(8, 128)).AddLayer(f32).SetContext(4096));
  EXPECT_EQ(plan.Layer(0).slot_bytes, 8u * 128 * 2 * 2);
  EXPECT_EQ(plan.Layer(1).slot_bytes, 8u * 128 * 2 * 4);
  EXPECT_EQ(plan.Layer(1).spec.format, Format::kF32);
  // An accounting-only element type counts every layer in it (f16 here, the f32 layer too).
  const LayerPlan f16 = MustBuild(LayerPlan::Builder()
                                      .AddLayer(LayerSpec::Global(8, 128))
                                      .AddLayer(f32)
                                      .SetContext(4096)
                                      .SetElementType(Format::kF16));
  EXPECT_EQ(f16.Layer(1).slot_bytes, 8u * 128 * 2 * 2);
}

TEST(LayerPlan, Int8ElementTypeStoresEveryLayerInInt8WithItsScales) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Global(8, 128))
                                       .SetContext(4096)
                                       .SetElementType(ElementType::kInt8));
  EXPECT_EQ(plan.ElementBytes(), 1u);
  EXPECT_EQ(plan.Layer(0).spec.format, Format::kInt8);
  // One byte an element and one 4-byte f32 scale per (pos, kv_head), for K and for V.
  EXPECT_EQ(plan.Layer(0).slot_bytes, 8u * (128 + 4) * 2);
  EXPECT_EQ(plan.TotalBytes(), FlashSlots(4096) * 8 * (128 + 4) * 2);
}

// A preset's builder at `context` and batch 512.
LayerPlan::Builder PresetBuilder(const char* name, uint64_t context) {
  Expected<ModelPreset> preset = FindModelPreset(name);
  EXPECT_TRUE(preset.ok()) << name;
  if (!preset.ok()) return LayerPlan::Builder();
  LayerPlan::Builder builder = BuilderFor(*preset);
  builder.SetContext(context).SetBatch(512);
  return builder;
}

// int8h (K rotated before it is encoded) takes int8's bytes; it is set as int8 is (the element
// type, SetFormat, per kind, a consumer reading its owner's), and refused for an MLA layer,
// whose values are its latent, naming the layer's format.
TEST(LayerPlan, Int8hTakesInt8sBytesAndIsRefusedForLatentLayers) {
  const LayerPlan by_type =
      MustBuild(PresetBuilder("llama-3.1-8b", 131072).SetElementType(ElementType::kInt8Hadamard));
  const LayerPlan int8 = MustBuild(PresetBuilder("llama-3.1-8b", 131072).SetFormat(Format::kInt8));
  EXPECT_EQ(by_type.ElementBytes(), 1u);
  EXPECT_EQ(by_type.TotalBytes(), int8.TotalBytes());
  for (const LayerInfo& layer : by_type.Layers()) {
    EXPECT_EQ(layer.spec.format, Format::kInt8Hadamard);
    EXPECT_EQ(layer.slot_bytes, 2112u);
  }
  const LayerPlan gemma = MustBuild(
      PresetBuilder("gemma-3n-e4b", 8192).SetFormat(AttentionKind::kGlobal, Format::kInt8Hadamard));
  EXPECT_EQ(gemma.Layer(34).owner, 19u);
  EXPECT_EQ(gemma.Layer(34).spec.format, Format::kInt8Hadamard);
  EXPECT_EQ(gemma.Layer(33).spec.format, Format::kBF16);

  const Expected<LayerPlan> latent =
      PresetBuilder("deepseek-v3", 32768).SetFormat(Format::kInt8Hadamard).Build();
  ASSERT_FALSE(latent.ok());
  EXPECT_EQ(latent.error().field, "layers[0].format");
  EXPECT_EQ(latent.error().message.rfind("layers[0].format: int8h ", 0), 0u)
      << latent.error().message;
  EXPECT_NE(latent.error().message.find("use int8"), std::string::npos) << latent.error().message;
  // The element type and an explicit SetFormat of another format: refused, naming both.
  const Expected<LayerPlan> both = PresetBuilder("llama-3.1-8b", 4096)
                                       .SetElementType(ElementType::kInt8Hadamard)
                                       .SetFormat(Format::kInt8)
                                       .Build();
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.error().field, "runtime.element_type");
  EXPECT_EQ(
      both.error().message.rfind("runtime.element_type: int8h stores every layer in int8h", 0), 0u)
      << both.error().message;
}

TEST(LayerPlan, Int8Llama31_8BTakes2112BytesAPositionAndLayerAgainst4096) {
  const LayerPlan bf16 = MustBuild(PresetBuilder("llama-3.1-8b", 131072));
  const LayerPlan int8 = MustBuild(PresetBuilder("llama-3.1-8b", 131072).SetFormat(Format::kInt8));
  const uint64_t slots = FlashSlots(131072);  // 4096 tiles is even: 4097, 131104 slots
  EXPECT_EQ(slots, 131104u);
  // 8 kv_heads x (128 + 4) bytes for K, the same for V.
  for (const LayerInfo& layer : int8.Layers()) {
    EXPECT_EQ(layer.spec.format, Format::kInt8);
    EXPECT_EQ(layer.k_slot_bytes, 8u * (128 + 4));
    EXPECT_EQ(layer.v_slot_bytes, 8u * (128 + 4));
    EXPECT_EQ(layer.slot_bytes, 2112u);
    EXPECT_EQ(layer.bytes, slots * 2112);
    EXPECT_EQ(layer.padding_bytes, (slots - 131072) * 2112);
  }
  EXPECT_EQ(bf16.Layer(0).slot_bytes, 4096u);
  EXPECT_EQ(int8.TotalBytes(), 32 * slots * 2112);
  EXPECT_EQ(int8.TotalBytes() - int8.PaddingBytes(), 32ull * 131072 * 2112);  // 8.25 GiB
  EXPECT_EQ(int8.TotalBytes() - int8.PaddingBytes(), 8 * kGiB + kGiB / 4);
  EXPECT_EQ(int8.FlatBytes(), int8.TotalBytes());  // every layer global: flat already
  EXPECT_EQ(int8.ContextTokenBytes(), 32u * 2112);
  // Budget: 59 GiB hold 59 GiB / (32 x 131104 x 2112) = 7 sequences at 131072, against 3.
  const MemoryBudget budget{80 * kGiB, 16 * kGiB, 4 * kGiB, 1 * kGiB};
  EXPECT_EQ(bf16.Capacity(budget, 131072).max_sequences, 3u);
  EXPECT_EQ(int8.Capacity(budget, 131072).max_sequences, 59 * kGiB / (32 * slots * 2112));
  EXPECT_EQ(int8.Capacity(budget, 131072).max_sequences, 7u);
  // SetElementType(kInt8) is the same plan.
  const LayerPlan by_type =
      MustBuild(PresetBuilder("llama-3.1-8b", 131072).SetElementType(ElementType::kInt8));
  EXPECT_EQ(by_type.TotalBytes(), int8.TotalBytes());
  EXPECT_EQ(by_type.Layer(31).spec.format, Format::kInt8);
}

TEST(LayerPlan, Gemma3_27BWithInt8GlobalsAndBF16SlidingLayersIsExact) {
  const LayerPlan plan = MustBuild(PresetBuilder("gemma-3-27b", 131072)
                                       .SetFormat(AttentionKind::kGlobal, Format::kInt8)
                                       .SetFormat(AttentionKind::kSliding, Format::kBF16));
  const uint64_t sliding_slot = 16 * 128 * 2 * 2;   // 8192
  const uint64_t global_slot = 16 * (128 + 4) * 2;  // 4224
  size_t num_global = 0;
  for (const LayerInfo& layer : plan.Layers()) {
    const bool global = layer.spec.kind == AttentionKind::kGlobal;
    num_global += global;
    EXPECT_EQ(layer.spec.format, global ? Format::kInt8 : Format::kBF16) << layer.index;
    EXPECT_EQ(layer.slot_bytes, global ? global_slot : sliding_slot) << layer.index;
    EXPECT_EQ(layer.num_slots, global ? 131104u : 1568u) << layer.index;
  }
  EXPECT_EQ(num_global, 10u);
  EXPECT_EQ(plan.TotalBytes(), 52 * 1568 * sliding_slot + 10 * 131104 * global_slot);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(),
            52 * 1535 * sliding_slot + 10 * 131072 * global_slot);
  // Against a flat cache in the same formats: every layer at 131104 slots, each in its own.
  EXPECT_EQ(plan.FlatBytes(), 131104 * (52 * sliding_slot + 10 * global_slot));
  EXPECT_EQ(plan.ContextTokenBytes(), 10 * global_slot);
  EXPECT_EQ(plan.BytesAtContext(131072), plan.TotalBytes());
}

TEST(LayerPlan, Int8DeepSeekV3LatentTakes576Plus4BytesAPosition) {
  const LayerPlan plan = MustBuild(PresetBuilder("deepseek-v3", 32768).SetFormat(Format::kInt8));
  for (const LayerInfo& layer : plan.Layers()) {
    EXPECT_EQ(layer.k_slot_bytes, 576u + 4);  // one stream, one scale a position
    EXPECT_EQ(layer.v_slot_bytes, 0u);
    EXPECT_EQ(layer.slot_bytes, 580u);
  }
  EXPECT_EQ(plan.TotalBytes(), 61ull * FlashSlots(32768) * 580);
  EXPECT_EQ(plan.TotalBytes() - plan.PaddingBytes(), 61ull * 32768 * 580);
}

TEST(LayerPlan, AConsumerReadsItsInt8OwnersFormat) {
  LayerSpec owner = LayerSpec::Global(2, 64);
  owner.format = Format::kInt8;
  // Two consumers: one saying nothing (bf16), one sliding under a bf16 rule for its kind.
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(owner)
                                       .AddLayer(LayerSpec::Global(2, 64).SharedFrom(0))
                                       .AddLayer(LayerSpec::Sliding(16, 2, 64).SharedFrom(0))
                                       .SetFormat(AttentionKind::kSliding, Format::kBF16)
                                       .SetContext(1000));
  for (size_t i = 0; i < 3; ++i) {
    const LayerInfo& layer = plan.Layer(i);
    EXPECT_EQ(layer.spec.format, Format::kInt8) << i;
    EXPECT_EQ(layer.slot_bytes, 2u * (64 + 4) * 2) << i;
    EXPECT_EQ(plan.Layer(layer.owner).spec.format, Format::kInt8) << i;
  }
  EXPECT_EQ(plan.Layer(1).bytes, 0u);
  EXPECT_EQ(plan.TotalBytes(), plan.Layer(0).bytes);
  // The built plan re-plans to the same formats.
  Expected<LayerPlan> again = plan.WithRuntime(plan.Runtime());
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->Layer(2).spec.format, Format::kInt8);
  EXPECT_EQ(again->TotalBytes(), plan.TotalBytes());
}

TEST(LayerPlan, SetFormatByKindAppliesAtBuildToLayersAddedBeforeOrAfter) {
  const auto formats = [](const LayerPlan& plan) {
    std::vector<Format> result;
    for (const LayerInfo& layer : plan.Layers()) result.push_back(layer.spec.format);
    return result;
  };
  const std::vector<Format> kMixed = {Format::kBF16, Format::kInt8, Format::kBF16};
  LayerPlan::Builder before;
  before.SetFormat(AttentionKind::kGlobal, Format::kInt8)
      .AddLayer(LayerSpec::Sliding(128, 2, 64))
      .AddLayer(LayerSpec::Global(2, 64))
      .AddLayer(LayerSpec::Chunked(256, 2, 64))
      .SetContext(4096);
  EXPECT_EQ(formats(MustBuild(before)), kMixed);
  LayerPlan::Builder after;
  after.AddLayer(LayerSpec::Sliding(128, 2, 64))
      .AddLayer(LayerSpec::Global(2, 64))
      .AddLayer(LayerSpec::Chunked(256, 2, 64))
      .SetContext(4096)
      .SetFormat(AttentionKind::kGlobal, Format::kInt8);
  EXPECT_EQ(formats(MustBuild(after)), kMixed);
  // The builder's specs stay as added.
  EXPECT_EQ(after.Specs()[1].format, Format::kBF16);
  // A kind's rule wins over the every-layer rule, in either order; a second call replaces.
  LayerPlan::Builder all_int8 = after;
  all_int8.SetFormat(AttentionKind::kSliding, Format::kBF16).SetFormat(Format::kInt8);
  EXPECT_EQ(formats(MustBuild(all_int8)),
            (std::vector<Format>{Format::kBF16, Format::kInt8, Format::kInt8}));
  all_int8.SetFormat(Format::kBF16).SetFormat(AttentionKind::kChunked, Format::kInt8);
  EXPECT_EQ(formats(MustBuild(all_int8)),
            (std::vector<Format>{Format::kBF16, Format::kInt8, Format::kInt8}));
}

TEST(LayerPlan, ALayerSpecsFormatStandsUnlessABuilderRuleNamesItsLayer) {
  LayerSpec int8_sliding = LayerSpec::Sliding(128, 2, 64);
  int8_sliding.format = Format::kInt8;
  LayerPlan::Builder builder;
  builder.AddLayer(int8_sliding).AddLayer(LayerSpec::Global(2, 64)).SetContext(4096);
  // No rule: the spec's own format.
  EXPECT_EQ(MustBuild(builder).Layer(0).spec.format, Format::kInt8);
  // A rule for another kind leaves it.
  LayerPlan::Builder other_kind = builder;
  other_kind.SetFormat(AttentionKind::kGlobal, Format::kBF16);
  EXPECT_EQ(MustBuild(other_kind).Layer(0).spec.format, Format::kInt8);
  // A rule for its kind, or for every layer, says so and replaces it.
  LayerPlan::Builder its_kind = builder;
  its_kind.SetFormat(AttentionKind::kSliding, Format::kBF16);
  EXPECT_EQ(MustBuild(its_kind).Layer(0).spec.format, Format::kBF16);
  LayerPlan::Builder every_layer = builder;
  every_layer.SetFormat(Format::kBF16);
  EXPECT_EQ(MustBuild(every_layer).Layer(0).spec.format, Format::kBF16);
}

TEST(LayerPlan, NumSequencesMultipliesTheTotal) {
  const LayerPlan plan = MustBuild(
      LayerPlan::Builder().AddLayer(LayerSpec::Global(8, 128)).SetContext(4096).SetNumSequences(7));
  EXPECT_EQ(plan.TotalBytesAllSequences(), 7 * plan.TotalBytes());
}

TEST(LayerPlan, WithRuntimeReplansTheSameLayers) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayer(LayerSpec::Sliding(100, 1, 64))
                                       .AddLayer(LayerSpec::Global(1, 64))
                                       .SetContext(4096)
                                       .SetBatch(1));
  RuntimeSpec bigger = plan.Runtime();
  bigger.batch = 300;
  Expected<LayerPlan> grown = plan.WithRuntime(bigger);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->Layer(0).capacity, 99u + 300);
  EXPECT_EQ(grown->Layer(1).capacity, 4096u);
  bigger.batch = 0;
  EXPECT_FALSE(plan.WithRuntime(bigger).ok());
}

TEST(LayerPlan, BytesAtContextMatchesAPlanBuiltAtThatContext) {
  LayerPlan::Builder builder;
  builder.AddLayers(5, LayerSpec::Sliding(1024, 4, 256)).AddLayer(LayerSpec::Global(4, 256));
  const LayerPlan plan = MustBuild(LayerPlan::Builder(builder).SetContext(131072).SetBatch(8));
  for (uint64_t context : {8ull, 100ull, 1031ull, 1032ull, 5000ull, 131072ull, 1000000ull}) {
    const LayerPlan other = MustBuild(LayerPlan::Builder(builder).SetContext(context).SetBatch(8));
    EXPECT_EQ(plan.BytesAtContext(context), other.TotalBytes()) << context;
  }
}

TEST(LayerPlan, CapacityReportOfLlama8BOnAn80GiBDevice) {
  // Tiled tiles of 16 add no padding here, which keeps the arithmetic round.
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayers(32, LayerSpec::Global(8, 128))
                                       .SetContext(131072)
                                       .SetBackend(Backend::kTiled, 16)
                                       .SetNumSequences(8));
  MemoryBudget budget;
  budget.device_bytes = 80 * kGiB;
  budget.weight_bytes = 16 * kGiB;
  budget.workspace_bytes = 4 * kGiB;
  budget.margin_bytes = 1 * kGiB;
  const CapacityReport report = plan.Capacity(budget, 131072);
  EXPECT_EQ(report.usable_bytes, 59 * kGiB);
  // 32 layers * 8 heads * 128 dims * 2 (K, V) * 2 bytes = 128 KiB per token: 16 GiB a sequence.
  EXPECT_EQ(report.bytes_per_sequence, 16 * kGiB);
  EXPECT_EQ(report.max_sequences, 3u);
  EXPECT_EQ(report.max_tokens, 3u * 131072);
  // 8 sequences share 59 GiB: 59 GiB / 8 / 128 KiB = 60416 tokens each, a multiple of 16.
  EXPECT_EQ(report.max_context, 60416u);

  // Flash: 60416 slots are 1888 tiles, an even number, so the last context that fits has
  // 1887 tiles: 60384 positions.
  RuntimeSpec flash = plan.Runtime();
  flash.backend = Backend::kFlash;
  EXPECT_EQ(plan.WithRuntime(flash)->Capacity(budget, 131072).max_context, 60384u);
}

TEST(LayerPlan, CapacityReportWhenNothingFits) {
  const LayerPlan plan =
      MustBuild(LayerPlan::Builder().AddLayer(LayerSpec::Global(8, 128)).SetContext(1024));
  MemoryBudget budget;
  budget.device_bytes = 10 * kGiB;
  budget.weight_bytes = 12 * kGiB;
  const CapacityReport report = plan.Capacity(budget, 1024);
  EXPECT_EQ(report.usable_bytes, 0u);
  EXPECT_EQ(report.max_sequences, 0u);
  EXPECT_EQ(report.max_context, 0u);
}

TEST(LayerPlan, SlidingOnlyModelFitsAnyContextOnceItsRingsFit) {
  const LayerPlan plan = MustBuild(LayerPlan::Builder()
                                       .AddLayers(32, LayerSpec::Sliding(4096, 8, 128))
                                       .SetContext(32768)
                                       .SetBatch(512));
  MemoryBudget budget;
  budget.device_bytes = 1 * kGiB;
  // 32 layers * 4640 slots (4607 is 144 tiles, even: 145) * 4 KiB, whatever the context.
  EXPECT_EQ(plan.TotalBytes(), 32 * 4640 * 4 * kKiB);
  EXPECT_EQ(plan.ContextTokenBytes(), 0u);
  EXPECT_EQ(plan.Capacity(budget, 10485760).max_context, 10485760u);
}

TEST(LayerPlan, TenMillionTokenContextsDoNotOverflow) {
  // Llama 4 Scout: 36 chunked (8192) layers and 12 global layers, 8 x 128, at 10M tokens.
  LayerPlan::Builder builder;
  for (int i = 0; i < 48; ++i) {
    builder.AddLayer((i + 1) % 4 == 0 ? LayerSpec::Global(8, 128)
                                      : LayerSpec::Chunked(8192, 8, 128));
  }
  const uint64_t context = 10485760;
  const LayerPlan plan = MustBuild(builder.SetContext(context).SetBatch(512).SetNumSequences(4096));
  const unsigned __int128 slot_bytes = 8 * 128 * 2 * 2;
  const unsigned __int128 per_sequence =
      (36 * FlashSlots(8703) + 12 * static_cast<unsigned __int128>(FlashSlots(context))) *
      slot_bytes;
  EXPECT_EQ(plan.TotalBytes(), static_cast<uint64_t>(per_sequence));
  EXPECT_EQ(plan.TotalBytesAllSequences(), static_cast<uint64_t>(per_sequence * 4096));

  // The largest context that 4096 sequences fit in 64 TiB, checked against 128-bit sums.
  MemoryBudget budget;
  budget.device_bytes = 64ull << 40;
  const CapacityReport report = plan.Capacity(budget, context);
  const auto bytes_at = [&](uint64_t t) -> unsigned __int128 {
    const uint64_t chunked = t < 8703 ? t : 8703;
    return 4096 * (36 * static_cast<unsigned __int128>(FlashSlots(chunked)) + 12 * FlashSlots(t)) *
           slot_bytes;
  };
  ASSERT_GT(report.max_context, 0u);
  ASSERT_LT(report.max_context, context);
  EXPECT_LE(bytes_at(report.max_context), budget.device_bytes);
  EXPECT_GT(bytes_at(report.max_context + 1), budget.device_bytes);

  // 2^40 sequences of 10M tokens overflow 64 bits: an error, not a wrapped number.
  Expected<LayerPlan> overflow = LayerPlan::Builder(builder).SetNumSequences(1ull << 40).Build();
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.error().field, "runtime.num_sequences");
}

TEST(LayerPlan, BytesAtContextSaturatesInsteadOfWrapping) {
  const LayerPlan plan =
      MustBuild(LayerPlan::Builder().AddLayer(LayerSpec::Global(2048, 512)).SetContext(16));
  EXPECT_EQ(plan.BytesAtContext(1ull << 62), detail::kMaxU64);
}

// A bad configuration, the field its error must name, and a part of its message.
struct BadCase {
  const char* what;
  LayerPlan::Builder builder;
  const char* field;
  const char* message_part;
};

LayerPlan::Builder Base() {
  return LayerPlan::Builder()
      .AddLayer(LayerSpec::Sliding(512, 2, 256))
      .AddLayer(LayerSpec::Global(2, 256))
      .SetContext(4096)
      .SetBatch(64);
}

std::vector<BadCase> BadCases() {
  std::vector<BadCase> cases;
  const auto add = [&](const char* what, LayerPlan::Builder builder, const char* field,
                       const char* part) {
    cases.push_back({what, builder, field, part});
  };
  add("no layers", LayerPlan::Builder().SetContext(16), "layers", "at least one layer");
  add("zero kv heads", Base().AddLayer(LayerSpec::Global(0, 128)), "layers[2].num_kv_heads",
      "layers[2].num_kv_heads: 0");
  add("zero head dim", Base().AddLayer(LayerSpec::Global(4, 0)), "layers[2].head_dim",
      "layers[2].head_dim: 0");
  add("window 0", Base().AddLayer(LayerSpec::Sliding(0, 2, 256)), "layers[2].window",
      "layers[2].window: 0");
  add("chunk 0", Base().AddLayer(LayerSpec::Chunked(0, 2, 256)), "layers[2].chunk",
      "layers[2].chunk: 0");
  {
    LayerSpec spec = LayerSpec::Global(2, 256);
    spec.window = 128;
    add("window on a global layer", Base().AddLayer(spec), "layers[2].window",
        "layers[2].window: 128 is set on a global layer");
  }
  {
    LayerSpec spec = LayerSpec::Sliding(128, 2, 256);
    spec.chunk = 64;
    add("chunk on a sliding layer", Base().AddLayer(spec), "layers[2].chunk",
        "layers[2].chunk: 64");
  }
  {
    LayerSpec spec = LayerSpec::Global(2, 256);
    spec.kind = static_cast<AttentionKind>(9);
    add("kind out of range", Base().AddLayer(spec), "layers[2].kind", "layers[2].kind: 9");
  }
  add("indexer on a consumer",
      Base().AddLayer(LayerSpec::Global(2, 256).SharedFrom(1).WithIndexer(128)),
      "layers[2].indexer_dim", "layers[2].indexer_dim: 128 is set on a layer that reads layer 1");
  add("indexer on a recurrent layer",
      Base().AddLayer(LayerSpec::Recurrent({16, Format::kBF16, 0, Format::kBF16}).WithIndexer(64)),
      "layers[2].indexer_dim", "is set on a layer without attention");
  add("indexer past the kernels' dims", Base().AddLayer(LayerSpec::Latent(576).WithIndexer(70000)),
      "layers[2].indexer_dim", "layers[2].indexer_dim: 70000");
  add("source is not earlier", Base().AddLayer(LayerSpec::Global(2, 256).SharedFrom(2)),
      "layers[2].kv_source", "layers[2].kv_source: 2");
  add("source is later", Base().AddLayer(LayerSpec::Global(2, 256).SharedFrom(7)),
      "layers[2].kv_source", "layers[2].kv_source: 7");
  add("source is negative", Base().AddLayer(LayerSpec::Global(2, 256).SharedFrom(-5)),
      "layers[2].kv_source", "layers[2].kv_source: -5");
  add("source is a consumer",
      Base()
          .AddLayer(LayerSpec::Global(2, 256).SharedFrom(1))
          .AddLayer(LayerSpec::Global(2, 256).SharedFrom(2)),
      "layers[3].kv_source", "reads the KV of layer 1");
  add("source has other heads", Base().AddLayer(LayerSpec::Global(4, 256).SharedFrom(1)),
      "layers[2].kv_source", "num_kv_heads 2 differs from this layer's 4");
  add("source has another head dim", Base().AddLayer(LayerSpec::Global(2, 128).SharedFrom(1)),
      "layers[2].kv_source", "head_dim/v_head_dim 256/256 differ from this layer's 128/128");
  {
    LayerSpec spec = LayerSpec::Global(2, 256).SharedFrom(1);
    spec.v_head_dim = 128;
    add("source has another v head dim", Base().AddLayer(spec), "layers[2].kv_source",
        "256/256 differ from this layer's 256/128");
  }
  add("latent reads a non-latent source", Base().AddLayer(LayerSpec::Latent(576).SharedFrom(1)),
      "layers[2].kv_source", "latent_dim 0 differs");
  {
    LayerSpec spec = LayerSpec::Latent(576);
    spec.num_kv_heads = 1;
    add("latent with heads", Base().AddLayer(spec), "layers[2].latent_dim",
        "layers[2].latent_dim: 576");
  }
  add("context 0", Base().SetContext(0), "runtime.context", "runtime.context: 0");
  add("batch 0", Base().SetBatch(0), "runtime.batch", "runtime.batch: 0");
  add("batch past the context", Base().SetBatch(5000), "runtime.batch",
      "runtime.batch: 5000 is invalid: it exceeds runtime.context 4096");
  add("rollback past the context", Base().SetRollback(4097), "runtime.rollback",
      "runtime.rollback: 4097");
  add("zero sequences", Base().SetNumSequences(0), "runtime.num_sequences",
      "runtime.num_sequences: 0");
  add("tile rows not a power of two", Base().SetBackend(Backend::kTiled, 24), "runtime.tile_rows",
      "runtime.tile_rows: 24");
  add("tile rows too small", Base().SetBackend(Backend::kTiled, 4), "runtime.tile_rows",
      "runtime.tile_rows: 4");
  add("tile rows too large", Base().SetBackend(Backend::kTiled, 128), "runtime.tile_rows",
      "runtime.tile_rows: 128");
  add("backend out of range", Base().SetBackend(static_cast<Backend>(7)), "runtime.backend",
      "runtime.backend: 7");
  add("element type out of range", Base().SetElementType(static_cast<ElementType>(42)),
      "runtime.element_type", "runtime.element_type: 42");
  {
    LayerSpec spec = LayerSpec::Global(2, 256);
    spec.format = static_cast<Format>(42);
    add("format out of range", Base().AddLayer(spec), "layers[2].format",
        "layers[2].format: 42 is not a kvring::Format");
  }
  add("format out of range from the builder", Base().SetFormat(static_cast<Format>(9)),
      "layers[0].format", "layers[0].format: 9 is not a kvring::Format");
  add("kind of a format rule out of range",
      Base().SetFormat(static_cast<AttentionKind>(5), Format::kInt8), "format.kind",
      "format.kind: 5 is not a kvring::AttentionKind");
  add("int8 layer with an accounting-only element type",
      Base().SetFormat(AttentionKind::kGlobal, Format::kInt8).SetElementType(ElementType::kF32),
      "runtime.element_type",
      "runtime.element_type: f32 is for accounting only and counts no scales, but "
      "layers[1].format is int8");
  add("int8 element type against a bf16 rule for every layer",
      Base().SetElementType(ElementType::kInt8).SetFormat(Format::kBF16), "runtime.element_type",
      "runtime.element_type: int8 stores every layer in int8, but SetFormat asks bf16");
  add("head dim of 2^31", Base().AddLayer(LayerSpec::Global(1u << 31, 1u << 31)),
      "layers[2].head_dim", "layers[2].head_dim: 2147483648 is above 576");
  add("bytes of a layer overflow 64 bits",
      LayerPlan::Builder().AddLayer(LayerSpec::Global(2048, 512)).SetContext(1ull << 50),
      "runtime.context", "overflow 64 bits");
  add("context overflows the padding",
      LayerPlan::Builder().AddLayer(LayerSpec::Global(1, 16)).SetContext(detail::kMaxU64),
      "runtime.context", "overflow 64 bits");
  add("head dim not a multiple of 16", Base().AddLayer(LayerSpec::Global(2, 72)),
      "layers[2].head_dim", "layers[2].head_dim: 72 is not a multiple of 16");
  add("head dim past what the kernels take", Base().AddLayer(LayerSpec::Global(2, 592)),
      "layers[2].head_dim", "layers[2].head_dim: 592 is above 576");
  {
    LayerSpec spec = LayerSpec::Global(2, 128);
    spec.v_head_dim = 40;
    add("v head dim not a multiple of 16", Base().AddLayer(spec), "layers[2].v_head_dim",
        "layers[2].v_head_dim: 40 is not a multiple of 16");
  }
  add("latent not a multiple of 16", Base().AddLayer(LayerSpec::Latent(520)),
      "layers[2].latent_dim", "layers[2].latent_dim: 520 is not a multiple of 16");
  add("latent past what the kernels take", Base().AddLayer(LayerSpec::Latent(640)),
      "layers[2].latent_dim", "layers[2].latent_dim: 640 is above 576");
  add("flash with a tile height", Base().SetBackend(Backend::kFlash, 24), "runtime.tile_rows",
      "runtime.tile_rows: 24 is ignored by the flash backend; use SetLayout<FlashLayout>() or "
      "SetBackend(Backend::kFlash)");
  return cases;
}

TEST(LayerPlan, BuildRejectsBadConfigurationsNamingFieldAndValue) {
  const std::vector<BadCase> cases = BadCases();
  EXPECT_GE(cases.size(), 15u);
  for (const BadCase& c : cases) {
    Expected<LayerPlan> plan = c.builder.Build();
    ASSERT_FALSE(plan.ok()) << c.what;
    EXPECT_EQ(plan.error().field, c.field) << c.what;
    EXPECT_NE(plan.error().message.find(c.message_part), std::string::npos)
        << c.what << ": " << plan.error().message;
    EXPECT_EQ(plan.error().message.rfind(c.field, 0), 0u)
        << c.what << ": the message starts with the field: " << plan.error().message;
  }
}

TEST(LayerPlan, AHeadDimTheKernelsCannotServeIsRefusedWithTheRule) {
  Expected<LayerPlan> plan = LayerPlan::Builder()
                                 .AddLayers(3, LayerSpec::Global(8, 128))
                                 .AddLayer(LayerSpec::Global(8, 72))
                                 .SetContext(4096)
                                 .Build();
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().message,
            "layers[3].head_dim: 72 is not a multiple of 16 (the attention kernels need head "
            "dims in multiples of 16, at most 576)");
  // The largest the kernels take is served: the MLA latent of DeepSeek.
  EXPECT_TRUE(LayerPlan::Builder()
                  .AddLayer(LayerSpec::Latent(kMaxAttentionHeadDim))
                  .SetContext(4096)
                  .Build()
                  .ok());
  EXPECT_EQ(kMaxAttentionHeadDim % kAttentionDimMultiple, 0u);
}

// Two stand-ins for the layouts (the plan does not include them): only kBackend and, for the
// tiled backend, kRows are read.
struct FlashLike {
  static constexpr Backend kBackend = Backend::kFlash;
};
template <uint32_t kTileRows>
struct TiledLike {
  static constexpr Backend kBackend = Backend::kTiled;
  static constexpr uint32_t kRows = kTileRows;
};

TEST(LayerPlan, SetLayoutChoosesTheBackendAndTileHeightOnce) {
  const auto built = [](LayerPlan::Builder builder) {
    return MustBuild(builder.AddLayer(LayerSpec::Sliding(1000, 4, 64)).SetContext(8192));
  };
  const LayerPlan tiled = built(LayerPlan::Builder().SetLayout<TiledLike<32>>());
  EXPECT_EQ(tiled.Runtime().backend, Backend::kTiled);
  EXPECT_EQ(tiled.Runtime().tile_rows, 32u);
  EXPECT_EQ(tiled.SlotAlignment(), 32u);
  const LayerPlan flash = built(LayerPlan::Builder().SetLayout<FlashLike>());
  EXPECT_EQ(flash.Runtime().backend, Backend::kFlash);
  EXPECT_EQ(flash.SlotAlignment(), kFlashSlotAlignment);
  // SetLayout after a refused tile height, and SetBackend without one, replace it.
  EXPECT_EQ(built(LayerPlan::Builder().SetBackend(Backend::kFlash, 32).SetLayout<FlashLike>())
                .Runtime()
                .backend,
            Backend::kFlash);
  EXPECT_EQ(built(LayerPlan::Builder().SetBackend(Backend::kFlash, 16).SetBackend(Backend::kFlash))
                .SlotAlignment(),
            kFlashSlotAlignment);
  EXPECT_EQ(built(LayerPlan::Builder().SetBackend(Backend::kTiled)).Runtime().tile_rows, 16u);
  EXPECT_EQ(built(LayerPlan::Builder().SetBackend(Backend::kTiled, 64)).Runtime().tile_rows, 64u);
}

TEST(LayerPlan, FlashWithAnExplicitTileHeightIsRefused) {
  Expected<LayerPlan> plan = LayerPlan::Builder()
                                 .AddLayer(LayerSpec::Global(8, 128))
                                 .SetContext(4096)
                                 .SetBackend(Backend::kFlash, 24)
                                 .Build();
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().field, "runtime.tile_rows");
  EXPECT_EQ(plan.error().message,
            "runtime.tile_rows: 24 is ignored by the flash backend; use "
            "SetLayout<FlashLayout>() or SetBackend(Backend::kFlash)");
}

TEST(LayerPlan, ValueOfAFailedBuildAbortsPrintingTheError) {
  Expected<LayerPlan> plan = LayerPlan::Builder().Build();
  ASSERT_FALSE(plan.ok());
  // The abort says which error was ignored, not only that one was. The message ("layers: []
  // is invalid ...") is escaped: "[]" alone is not a valid POSIX regular expression.
  std::string message;
  for (char c : plan.error().message) {
    if (std::string("[](){}.*+?^$|\\").find(c) != std::string::npos) message += '\\';
    message += c;
  }
  EXPECT_DEATH((void)plan.value(), "value\\(\\) of a failed kvring::Expected: " + message);
}

}  // namespace
}  // namespace kvring
