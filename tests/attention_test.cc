// Tests of kvring/ops/attention-inl.h (and views.h, attention.h, ops/bf16_convert-inl.h) on every
// compiled Highway target, against the float64 reference of tests/reference/, over K/V
// appended into RingKV and GlobalKV. The kernels of FlashLayout and TiledLayout<16> are
// kvring::kernels' (kvring/dispatch.h, the test pins each target in turn), those of tile
// heights 8 and 32 attention_tile_heights.cc's; this unit compiles per target only the BF16
// conversion it tests.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

// Compile AVX3_DL (AVX-512 with BF16/VNNI) too: Highway 1.0.3 needs this opt-in.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/attention_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kvring/ops/bf16_convert-inl.h"
#include "kvring/ops/softmax_exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvring_test {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void ConvertF32ToBF16(const float* in, kvring::BF16* out, size_t count) {
  kvring::HWY_NAMESPACE::F32ToBF16(in, out, count);
}

// How many of the `count` values at x (a multiple of 64) have a SoftmaxExp whose bits differ
// from Highway's Exp, at every vector width the softmax uses (a tile of 4, 8 or more lanes).
size_t SoftmaxExpMismatches(const float* x, size_t count) {
  size_t mismatches = 0;
  const auto compare = [&](auto d) {
    const hn::RebindToUnsigned<decltype(d)> du;
    for (size_t i = 0; i < count; i += hn::Lanes(d)) {
      const auto v = hn::LoadU(d, x + i);
      const auto ours = kvring::HWY_NAMESPACE::attention_internal::SoftmaxExp(d, v);
      const auto ne = hn::Ne(hn::BitCast(du, ours), hn::BitCast(du, hn::Exp(d, v)));
      mismatches += hn::CountTrue(du, ne);
    }
  };
  compare(hn::ScalableTag<float>());
  compare(hn::CappedTag<float, 8>());
  compare(hn::CappedTag<float, 4>());
  return mismatches;
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kvring_test
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "attention_tile_heights.h"
#include "gtest/gtest.h"
#include "kvring/attention.h"
#include "kvring/detail/cpu_choice.h"
#include "kvring/dispatch.h"
#include "kvring/formats/hadamard.h"
#include "kvring/views.h"
#include "reference/best_target_share.h"
#include "reference/history_storage.h"
#include "reference/kv_fixture.h"
#include "reference/random_floats.h"
#include "reference/reference_attention.h"
#include "reference/started_threads.h"
#include "reference/sweep_memo.h"

namespace kvring_test {
HWY_EXPORT(ConvertF32ToBF16);
HWY_EXPORT(SoftmaxExpMismatches);

using kvring::AttentionKind;
using kvring::AttentionOptions;
using kvring::BF16;
using kvring::FlashLayout;
using kvring::Visibility;
using Tiled = kvring::TiledLayout<16>;
using kvring::reference::History;

constexpr double kTolerance = 1e-3;
// The BF16-product mode (Products::kBF16) against the float64 reference over the same BF16
// K/V and the BF16-rounded pre-scaled queries (the probabilities it rounds too), and against
// the exact mode (docs/attention.md).
constexpr double kProductsTolerance = 4e-3;
constexpr double kProductsAgainstExact = 6e-3;
// The integer-product mode of int8 layers (Products::kInt8) against the float64 reference
// over the decoded K/V and the mode's quantized queries, and against the exact int8 mode
// (docs/attention.md).
constexpr double kInt8ProductsTolerance = 2e-4;
constexpr double kInt8ProductsAgainstExact = 3e-2;

// Joins target names with commas.
std::string TargetNames(const std::vector<int64_t>& targets) {
  std::string names;
  for (const int64_t target : targets) {
    names += (names.empty() ? "" : ",") + std::string(hwy::TargetName(target));
  }
  return names;
}

// The value of environment variable `name`, a number from `lowest` to 64; `unset` when it is
// not set. A value that is not such a number fails the calling test (and gives `unset`).
uint32_t NumberFromEnvironment(const char* name, uint32_t unset, uint32_t lowest) {
  const char* text = std::getenv(name);
  if (text == nullptr) return unset;
  char* end = nullptr;
  const unsigned long n = std::strtoul(text, &end, 10);
  const bool valid = n >= lowest && n <= 64 && end != text && *end == '\0';
  EXPECT_TRUE(valid) << name << "='" << text << "' is not a number from " << lowest << " to 64";
  return valid ? static_cast<uint32_t>(n) : unset;
}

// The targets the sweeps run on: the compiled targets this CPU supports, best first, or of
// those only the ones KVRING_SWEEP_TARGETS lists (comma-separated names), for emulated CPUs
// whose other targets another run sweeps.
std::vector<int64_t> SweptTargets() {
  const char* only = std::getenv("KVRING_SWEEP_TARGETS");
  std::vector<int64_t> targets;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    const std::string name = hwy::TargetName(target);
    if (only == nullptr ||
        ("," + std::string(only) + ",").find("," + name + ",") != std::string::npos) {
      targets.push_back(target);
    }
  }
  return targets;
}

// Sweeps under emulation, where a case takes a hundred times as long: KVRING_SWEEP_STRIDE=n
// (the aarch64 preset sets it) makes each target check every n-th case of a sweep
// (CheckCase), from an offset of its own: KVRING_SWEEP_OFFSET (0 when unset) plus the target's
// place among the swept ones, mod n. The emulated CPUs' runs give each of their targets
// another offset, so that together they check every case. Unset: every target, every case.
struct SweepShare {
  uint32_t stride = 1;
  uint32_t offset = 0;
  uint64_t cases = 0;  // CheckCase calls on the current target
};
SweepShare& CurrentSweep() {
  static SweepShare share;
  return share;
}

// The current sweep's cases' inputs and references, made on the first target (Kept, below).
kvring::reference::SweepMemo& CurrentMemo() {
  static kvring::reference::SweepMemo memo;
  return memo;
}

// Whether the next case of the sweep runs on the current target (always, unstrided). On a
// CPU with AVX-VNNI the AVX2 kernels' integer-product mode takes it on every other case, and
// on the others the f32 loops of AVX2 CPUs without it (detail::AvxVnniAllowed); on a CPU with
// AMX, the AVX3_DL kernels' BF16-product mode takes every other case on AMX tiles, the others
// on vdpbf16ps alone (detail::AmxAllowed).
bool CaseRunsHere() {
  SweepShare& share = CurrentSweep();
  kvring::detail::AvxVnniAllowed() = share.cases % 2 == 0;
  kvring::detail::AmxAllowed() = share.cases % 2 == 0;
  return (share.cases++ + share.offset) % share.stride == 0;
}

using kvring::testing::BestTargetCaseRunsHere;

// Whether checks should take the short version of a long loop: the emulated targets (the
// scalar fallbacks) and sweeps under emulation.
bool SlowTarget(int64_t target) {
  return target == HWY_SCALAR || target == HWY_EMU128 || CurrentSweep().stride > 1;
}

// Runs `body` once per swept target (SweptTargets), with dispatch pinned to it.
template <typename Body>
void ForEachTarget(const Body& body) {
  const uint32_t stride = NumberFromEnvironment("KVRING_SWEEP_STRIDE", 1, 1);
  const uint32_t first = NumberFromEnvironment("KVRING_SWEEP_OFFSET", 0, 0);
  uint32_t place = 0;
  CurrentMemo().Clear();
  for (const int64_t target : SweptTargets()) {
    if ((kvring::CompiledTargets() & target) == 0) {  // a call would find no kernel
      ADD_FAILURE() << "kvring::kernels did not compile " << hwy::TargetName(target);
      continue;
    }
    CurrentSweep() = SweepShare{stride, (first + place++) % stride, 0};
    kvring::detail::AvxVnniAllowed() = true;
    kvring::detail::AmxAllowed() = true;
    hwy::SetSupportedTargetsForTest(target);
    EXPECT_STREQ(kvring::DispatchedTargetName(), hwy::TargetName(target));  // runs it
    SCOPED_TRACE(hwy::TargetName(target));
    body(target);
  }
  kvring::detail::AvxVnniAllowed() = true;
  kvring::detail::AmxAllowed() = true;
  hwy::SetSupportedTargetsForTest(0);
  CurrentSweep() = SweepShare{};
  CurrentMemo().Clear();
}

// Prints the targets this CPU offers and those the sweeps run on; with KVRING_EXPECTED_TARGETS
// set (the emulated CPUs of the aarch64 preset: a comma-separated list, best first) fails
// unless the offer is exactly that list, so that an emulated CPU that lost a target fails
// rather than sweeping fewer.
TEST(AttentionTargets, SweepsRunOnTheExpectedTargets) {
  const std::string offered = TargetNames(hwy::SupportedAndGeneratedTargets());
  const std::string swept = TargetNames(SweptTargets());
  std::printf("this CPU offers %s; attention sweeps run on: %s (every %u-th case each)\n",
              offered.c_str(), swept.c_str(), NumberFromEnvironment("KVRING_SWEEP_STRIDE", 1, 1));
  const char* expected = std::getenv("KVRING_EXPECTED_TARGETS");
  if (expected != nullptr) EXPECT_EQ(offered, expected);
  EXPECT_FALSE(swept.empty()) << "KVRING_SWEEP_TARGETS names none of " << offered;
  // kvring::kernels, which runs most of the sweeps, compiled exactly this unit's targets.
  EXPECT_EQ(kvring::CompiledTargets(), HWY_TARGETS);
}

Visibility Global() { return Visibility{AttentionKind::kGlobal, 0}; }
Visibility Sliding(uint64_t window) { return Visibility{AttentionKind::kSliding, window}; }
Visibility Chunked(uint64_t chunk) { return Visibility{AttentionKind::kChunked, chunk}; }

std::string Describe(const Visibility& v) {
  return std::string(kvring::ToString(v.kind)) + "(" + std::to_string(v.span) + ")";
}

struct Case {
  uint32_t head_dim = 64;
  uint32_t v_head_dim = 0;  // 0: head_dim
  // MLA: no V stream; the values are the first latent_v_dims dims of K (0: K and V).
  uint32_t latent_v_dims = 0;
  uint32_t num_kv_heads = 1;
  uint32_t group = 1;
  Visibility visibility;
  uint64_t first_q_pos = 0;
  uint32_t num_queries = 1;
  float soft_cap = 0.0f;
  bool sinks = false;
  bool bf16_queries = false;
  float query_scale = 1.0f;  // multiplies the random queries (large scores)
  uint64_t extra_ring_slots = 0;
  uint64_t split_positions = 0;  // 0: AttentionOptions' default
  uint32_t seed = 1;

  uint32_t VHeadDim() const {
    return latent_v_dims != 0 ? latent_v_dims : v_head_dim != 0 ? v_head_dim : head_dim;
  }
  uint32_t NumQHeads() const { return num_kv_heads * group; }
  uint64_t EndPos() const { return first_q_pos + num_queries; }
  std::string Name() const {
    return "D=" + std::to_string(head_dim) + "/" + std::to_string(VHeadDim()) +
           " kv_heads=" + std::to_string(num_kv_heads) + " group=" + std::to_string(group) + " " +
           Describe(visibility) + " q=" + std::to_string(first_q_pos) + "+" +
           std::to_string(num_queries) + " cap=" + std::to_string(soft_cap) +
           " sinks=" + std::to_string(sinks) + " bf16q=" + std::to_string(bf16_queries) +
           " seed=" + std::to_string(seed) + (latent_v_dims != 0 ? " latent" : "") +
           (split_positions != 0 ? " split=" + std::to_string(split_positions) : "");
  }
  // Every field, floats exactly: what the sweep's memo keys the case's values by (Kept). A new
  // field goes in here too (and in AttentionSweeps.SweepMemoKeysEveryFieldOfACase).
  std::string Key() const {
    char text[320];
    std::snprintf(text, sizeof(text), "%u %u %u %u %u %d %llu %llu %u %a %d %d %a %llu %llu %u",
                  head_dim, v_head_dim, latent_v_dims, num_kv_heads, group,
                  static_cast<int>(visibility.kind),
                  static_cast<unsigned long long>(visibility.span),  // NOLINT(runtime/int)
                  static_cast<unsigned long long>(first_q_pos),      // NOLINT(runtime/int)
                  num_queries, static_cast<double>(soft_cap), sinks ? 1 : 0, bf16_queries ? 1 : 0,
                  static_cast<double>(query_scale),
                  static_cast<unsigned long long>(extra_ring_slots),  // NOLINT(runtime/int)
                  static_cast<unsigned long long>(split_positions),   // NOLINT(runtime/int)
                  seed);
    return text;
  }
  // Slots of the smallest ring that serves the batch (docs/design.md), plus the extra.
  uint64_t RingSlots() const {
    const uint64_t span = visibility.kind == AttentionKind::kGlobal ? EndPos() : visibility.span;
    uint64_t capacity = span - 1 + num_queries;
    if (capacity > EndPos()) capacity = EndPos();
    return (capacity + 31) / 32 * 32 + extra_ring_slots;
  }
  // The storage's keep: the positions before the batch that its first query reads.
  uint64_t Keep() const {
    const uint64_t span = visibility.kind == AttentionKind::kGlobal ? EndPos() : visibility.span;
    return (span < EndPos() ? span : EndPos()) - 1;
  }
};

// The inputs of one case: history, queries, sinks.
struct Inputs {
  History history;
  std::vector<float> queries;  // as the kernels see them (BF16-exact when bf16_queries)
  std::vector<BF16> queries_bf16;
  std::vector<float> sinks;
};

Inputs MakeInputs(const Case& c) {
  Inputs in;
  in.history = History::Random(c.num_kv_heads, c.head_dim, c.latent_v_dims != 0 ? 0 : c.VHeadDim(),
                               c.EndPos(), c.seed);
  std::mt19937 rng(c.seed * 7919u + 13u);
  kvring::testing::NormalFloats normal(0.0f, 1.0f);
  in.queries.resize(size_t{c.num_queries} * c.NumQHeads() * c.head_dim);
  for (float& q : in.queries) q = normal(rng) * c.query_scale;
  if (c.bf16_queries) {
    in.queries_bf16.resize(in.queries.size());
    for (size_t i = 0; i < in.queries.size(); ++i) {
      in.queries_bf16[i] = kvring::BF16FromF32(in.queries[i]);
      in.queries[i] = kvring::BF16ToF32(in.queries_bf16[i]);
    }
  }
  if (c.sinks) {
    in.sinks.resize(c.NumQHeads());
    for (float& s : in.sinks) s = normal(rng) * 2.0f;
  }
  return in;
}

// Returns `make()`, what case `c` computes alike on every target (`what` names it: each name
// one type and one way of making it), made on the first target the sweep runs `c` on and kept
// for the others until the sweep ends (ForEachTarget).
template <typename T, typename Make>
const T& Kept(const Case& c, const std::string& what, const Make& make) {
  return CurrentMemo().Get<T>(c.Key() + " " + what, make);
}

// The inputs of `c` (MakeInputs), made once per sweep.
const Inputs& KeptInputs(const Case& c) {
  return Kept<Inputs>(c, "inputs", [&] { return MakeInputs(c); });
}

// The memo's key tells apart cases that differ in any one field (a float by one ulp), and the
// memo makes a value once per key until it is cleared.
TEST(AttentionSweeps, SweepMemoKeysEveryFieldOfACase) {
  Case base;
  base.visibility = Sliding(64);
  std::vector<Case> changed(16, base);
  changed[0].head_dim = 32;
  changed[1].v_head_dim = 32;
  changed[2].latent_v_dims = 16;
  changed[3].num_kv_heads = 2;
  changed[4].group = 2;
  changed[5].visibility = Chunked(64);
  changed[6].visibility = Sliding(65);
  changed[7].first_q_pos = 1;
  changed[8].num_queries = 2;
  changed[9].soft_cap = std::nextafter(0.0f, 1.0f);
  changed[10].sinks = true;
  changed[11].bf16_queries = true;
  changed[12].query_scale = std::nextafter(1.0f, 2.0f);
  changed[13].extra_ring_slots = 32;
  changed[14].seed = 2;
  changed[15].split_positions = 512;
  std::set<std::string> keys = {base.Key()};
  for (const Case& c : changed) EXPECT_TRUE(keys.insert(c.Key()).second) << c.Key();
  kvring::reference::SweepMemo memo;
  int made = 0;
  const int& first = memo.Get<int>("a", [&] { return ++made; });
  const int& again = memo.Get<int>("a", [&] { return ++made; });
  EXPECT_EQ(&first, &again);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(memo.Get<int>("b", [&] { return ++made; }), 2);
  memo.Clear();
  EXPECT_EQ(memo.Get<int>("a", [&] { return ++made; }), 3);
}

AttentionOptions OptionsOf(const Case& c, const Inputs& in) {
  AttentionOptions options;
  options.soft_cap = c.soft_cap;
  options.sinks = c.sinks ? in.sinks.data() : nullptr;
  options.latent_v_dims = c.latent_v_dims;
  if (c.split_positions != 0) options.split_positions = c.split_positions;
  return options;
}

kvring::AttentionBatch BatchOf(const Case& c, const Inputs& in, float* out) {
  kvring::AttentionBatch batch;
  if (c.bf16_queries) {
    batch.queries_bf16 = in.queries_bf16.data();
  } else {
    batch.queries_f32 = in.queries.data();
  }
  batch.out_f32 = out;
  batch.first_q_pos = c.first_q_pos;
  batch.num_queries = c.num_queries;
  batch.num_q_heads = c.NumQHeads();
  batch.head_dim = c.head_dim;
  return batch;
}

// Returns the float64 reference of `c` over `kv` (the BF16 history's values by default; an
// int8 history's decoded values for the int8 format).
std::vector<double> Reference(const Case& c, const Inputs& in, const AttentionOptions& options,
                              const kvring::reference::ReferenceKV* over = nullptr) {
  kvring::reference::ReferenceOptions ro;
  ro.scale = kvring::AttentionScale(options, c.head_dim);
  ro.soft_cap = c.soft_cap;
  ro.sinks = options.sinks;
  kvring::reference::ReferenceKV kv = over != nullptr ? *over : in.history.Reference();
  if (c.latent_v_dims != 0) {  // the values are K's first latent_v_dims dims
    kv.v_head_dim = c.latent_v_dims;
    kv.v = kv.k;
  }
  return kvring::reference::ReferenceAttention(kv, c.visibility, in.queries, c.first_q_pos,
                                               c.num_queries, c.NumQHeads(), ro);
}

// Returns a KV (RingKV or GlobalKV) created from `spec` and appended positions [0, end_pos) of
// `history`; a refusal fails the test, then aborts.
template <typename KV>
KV Store(const History& history, const kvring::StorageSpec& spec, uint64_t end_pos) {
  kvring::Expected<KV> kv = kvring::reference::StoreHistory<KV>(history, spec, end_pos);
  if (!kv.ok()) ADD_FAILURE() << kv.error().field << ": " << kv.error().message;
  return std::move(kv).value();
}

// Returns the history of `c` in a RingKV of `num_slots` slots (it has wrapped if the case's
// positions outnumber them), appended in batches as an engine appends them.
template <typename Layout>
kvring::RingKV<Layout> Ring(const Case& c, const History& history, uint64_t num_slots) {
  return Store<kvring::RingKV<Layout>>(
      history, kvring::reference::SpecOf(history, num_slots, c.Keep(), c.EndPos()), c.EndPos());
}
// Returns the history of `c` in a GlobalKV (flat: position pos in slot pos) of `num_slots`.
template <typename Layout>
kvring::GlobalKV<Layout> Flat(const Case& c, const History& history, uint64_t num_slots) {
  return Store<kvring::GlobalKV<Layout>>(
      history, kvring::reference::SpecOf(history, num_slots, c.Keep(), c.EndPos()), c.EndPos());
}

// Runs attention (kvring::kernels, on the target dispatch chooses or a sweep pins) on the
// calling thread or on `num_threads` threads started for the call; aborts if it is refused.
template <class Layout>
void DispatchAttention(const kvring::KVView<Layout>& kv, const kvring::AttentionBatch& batch,
                       const AttentionOptions& options, uint32_t num_threads) {
  kvring::AttentionWorkspace workspace;
  const kvring::TaskRunner runner =
      num_threads > 1 ? kvring_testing::StartedThreads(&num_threads) : kvring::TaskRunner::Inline();
  kvring_testing::ExpectAttended(kvring::Attention(kv, batch, options, workspace, runner));
}

// Returns the kernel's output for `c` over `kv`'s view (kv: a RingKV or GlobalKV).
template <typename KV>
std::vector<float> RunKernel(const Case& c, const Inputs& in, const KV& kv,
                             const AttentionOptions& options, uint32_t num_threads = 1) {
  std::vector<float> out(size_t{c.num_queries} * c.NumQHeads() * c.VHeadDim(),
                         std::numeric_limits<float>::quiet_NaN());
  DispatchAttention(kv.View(c.visibility), BatchOf(c, in, out.data()), options, num_threads);
  return out;
}

// Expects every row of `out` within kTolerance (normwise relative) of `ref`.
void ExpectNearReference(const Case& c, const std::vector<float>& out,
                         const std::vector<double>& ref, const char* what,
                         double tolerance = kTolerance) {
  const size_t row = c.VHeadDim();
  size_t failures = 0;
  double worst = 0.0;
  for (size_t i = 0; i < out.size() / row; ++i) {
    const double err = kvring::reference::NormwiseRelativeError(&out[i * row], &ref[i * row], row);
    if (!(err <= tolerance)) {
      if (failures++ < 3) {
        ADD_FAILURE() << what << " row " << i << " (query " << i / c.NumQHeads() << ", q head "
                      << i % c.NumQHeads() << ") error " << err << " in " << c.Name();
      }
    }
    if (err > worst) worst = err;
  }
  EXPECT_EQ(failures, 0u) << what << " worst error " << worst << " in " << c.Name();
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Returns the float64 reference of `c` in the BF16-product mode: over the history's BF16
// values and the pre-scaled queries rounded to BF16 (scale 1 after that), as the mode reads
// them; the reference does not round the probabilities.
std::vector<double> ProductsReference(const Case& c, const Inputs& in,
                                      const AttentionOptions& options) {
  Inputs rounded = in;
  const float scale = kvring::AttentionScale(options, c.head_dim);
  for (float& q : rounded.queries) q = kvring::BF16ToF32(kvring::BF16FromF32(q * scale));
  AttentionOptions unscaled = options;
  unscaled.scale = 1.0f;
  return Reference(c, rounded, unscaled);
}

// Returns `options` in the BF16-product mode.
AttentionOptions WithBF16Products(AttentionOptions options) {
  options.products = kvring::Products::kBF16;
  return options;
}

// The BF16-product mode's reference of `c` over its kept inputs `in` (ProductsReference, with
// `options` as OptionsOf(c, in) gives them, in that mode), made once per sweep.
const std::vector<double>& KeptProductsReference(const Case& c, const Inputs& in,
                                                 const AttentionOptions& options) {
  return Kept<std::vector<double>>(c, "bf16products reference",
                                   [&] { return ProductsReference(c, in, options); });
}

// The BF16-product check of one case: flash and tiled, ring and flat, against the mode's
// reference and against the exact outputs (`exact_flash`, `exact_tiled`) within
// kProductsTolerance; ring and flat bit-identical within the mode.
template <typename FlashFlat, typename FlashRing, typename TiledFlat, typename TiledRing>
void CheckProductsCase(const Case& c, const Inputs& in, const AttentionOptions& exact_options,
                       const FlashFlat& flash_flat, const FlashRing& flash_ring,
                       const TiledFlat& tiled_flat, const TiledRing& tiled_ring,
                       const std::vector<float>& exact_flash,
                       const std::vector<float>& exact_tiled) {
  const AttentionOptions options = WithBF16Products(exact_options);
  const std::vector<double>& ref = KeptProductsReference(c, in, options);
  const std::vector<float> a = RunKernel(c, in, flash_flat, options);
  const std::vector<float> b = RunKernel(c, in, flash_ring, options);
  const std::vector<float> t = RunKernel(c, in, tiled_flat, options);
  const std::vector<float> u = RunKernel(c, in, tiled_ring, options);
  ExpectNearReference(c, a, ref, "bf16products flash/flat", kProductsTolerance);
  ExpectNearReference(c, t, ref, "bf16products tiled/flat", kProductsTolerance);
  EXPECT_TRUE(BitIdentical(a, b)) << "bf16products flash ring != flat: " << c.Name();
  EXPECT_TRUE(BitIdentical(t, u)) << "bf16products tiled ring != flat: " << c.Name();
  // Rounding q moves a score s by up to |s| * 2^-9: against the exact outputs the mode stays
  // within kProductsAgainstExact for scores of unit scale, not for the huge scores of
  // query_scale (there the reference over the rounded queries is the check).
  if (c.query_scale != 1.0f) return;
  const std::vector<double> flash_exact(exact_flash.begin(), exact_flash.end());
  const std::vector<double> tiled_exact(exact_tiled.begin(), exact_tiled.end());
  ExpectNearReference(c, a, flash_exact, "bf16products flash against exact", kProductsAgainstExact);
  ExpectNearReference(c, t, tiled_exact, "bf16products tiled against exact", kProductsAgainstExact);
}

// Returns `in` with the queries the integer-product mode (Products::kInt8) reads over
// `format`: each query head (rotated first for kInt8Hadamard), pre-scaled and quantized to
// int8 with the scale max |q| / 127, as the kernels do, then scaled (and rotated) back. Their
// reference takes scale 1.
Inputs Int8ProductQueries(const Case& c, const Inputs& in, const AttentionOptions& options,
                          kvring::Format format) {
  Inputs out = in;
  const float scale = kvring::AttentionScale(options, c.head_dim);
  for (size_t head = 0; head < out.queries.size() / c.head_dim; ++head) {
    float* q = &out.queries[head * c.head_dim];
    if (kvring::RotatesK(format)) kvring::RotateHadamard(q, c.head_dim);
    for (size_t dim = 0; dim < c.head_dim; ++dim) q[dim] *= scale;
    float max_abs = 0.0f;
    for (size_t dim = 0; dim < c.head_dim; ++dim) max_abs = std::max(max_abs, std::fabs(q[dim]));
    const float q_scale = max_abs / 127.0f;
    const float inverse = max_abs == 0.0f ? 0.0f : 127.0f / max_abs;
    for (size_t dim = 0; dim < c.head_dim; ++dim) {
      q[dim] = std::nearbyint(q[dim] * inverse) * q_scale;
    }
    if (kvring::RotatesK(format)) kvring::RotateHadamard(q, c.head_dim);
  }
  return out;
}

// The int8 encoding of the kept inputs' history in `format` (Int8History::Of), made once per
// sweep.
const kvring::reference::Int8History& KeptInt8History(const Case& c, const Inputs& in,
                                                      kvring::Format format) {
  const std::string what = std::string("int8 history ") + kvring::ToString(format);
  return Kept<kvring::reference::Int8History>(
      c, what, [&] { return kvring::reference::Int8History::Of(in.history, format); });
}

// The integer-product mode's reference of `c` over `q` (KeptInt8History): the float64
// reference over the decoded values and the mode's quantized queries at scale 1, with
// `options` as OptionsOf(c, in) gives them, in that mode; made once per sweep.
const std::vector<double>& KeptInt8ProductsReference(const Case& c, const Inputs& in,
                                                     const AttentionOptions& options,
                                                     const kvring::reference::Int8History& q) {
  const std::string what = std::string("int8products reference ") + kvring::ToString(q.format);
  return Kept<std::vector<double>>(c, what, [&] {
    AttentionOptions unscaled = options;
    unscaled.scale = 1.0f;
    const kvring::reference::ReferenceKV decoded = q.Reference();
    return Reference(c, Int8ProductQueries(c, in, options, q.format), unscaled, &decoded);
  });
}

// The integer-product check of an int8 case (CheckInt8Case's storage `q` and its exact
// outputs): flash and tiled, ring and flat, against the float64 reference over the decoded
// values and the mode's quantized queries within kInt8ProductsTolerance (what is left is the
// V weights' quantization), against the exact int8 outputs within kInt8ProductsAgainstExact
// for scores of unit scale; ring and flat bit-identical within the mode.
template <typename FlashFlat, typename FlashRing, typename TiledFlat, typename TiledRing>
void CheckInt8ProductsCase(const Case& c, const Inputs& in, const AttentionOptions& exact_options,
                           const kvring::reference::Int8History& q, const FlashFlat& flash_flat,
                           const FlashRing& flash_ring, const TiledFlat& tiled_flat,
                           const TiledRing& tiled_ring, const std::vector<float>& exact_flash,
                           const std::vector<float>& exact_tiled) {
  AttentionOptions options = exact_options;
  options.products = kvring::Products::kInt8;
  const std::vector<double>& ref = KeptInt8ProductsReference(c, in, options, q);
  const std::vector<float> a = RunKernel(c, in, flash_flat, options);
  const std::vector<float> b = RunKernel(c, in, flash_ring, options);
  const std::vector<float> t = RunKernel(c, in, tiled_flat, options);
  const std::vector<float> u = RunKernel(c, in, tiled_ring, options);
  const std::string name = std::string(kvring::ToString(q.format)) + " int8products";
  ExpectNearReference(c, a, ref, (name + " flash/flat").c_str(), kInt8ProductsTolerance);
  ExpectNearReference(c, t, ref, (name + " tiled/flat").c_str(), kInt8ProductsTolerance);
  EXPECT_TRUE(BitIdentical(a, b)) << name << " flash ring != flat: " << c.Name();
  EXPECT_TRUE(BitIdentical(t, u)) << name << " tiled ring != flat: " << c.Name();
  if (c.query_scale != 1.0f) return;
  const std::vector<double> flash_exact(exact_flash.begin(), exact_flash.end());
  const std::vector<double> tiled_exact(exact_tiled.begin(), exact_tiled.end());
  ExpectNearReference(c, a, flash_exact, (name + " flash against exact").c_str(),
                      kInt8ProductsAgainstExact);
  ExpectNearReference(c, t, tiled_exact, (name + " tiled against exact").c_str(),
                      kInt8ProductsAgainstExact);
}

// The int8 check of one case (Format::kInt8, or kInt8Hadamard with K rotated, the same shapes
// as BF16): flash and tiled, ring and flat, against the float64 reference over the decoded
// values (rotated back for kInt8Hadamard), within the BF16 kernels' tolerance; ring and flat
// bit-identical.
void CheckInt8Case(const Case& c, const Inputs& in, const AttentionOptions& options,
                   uint64_t flat_slots, uint64_t ring_slots, kvring::Format format) {
  using kvring::reference::Int8Storage;
  const kvring::reference::Int8History& q = KeptInt8History(c, in, format);
  const std::string name = kvring::ToString(format);
  const std::vector<double>& ref = Kept<std::vector<double>>(c, name + " reference", [&] {
    const kvring::reference::ReferenceKV decoded = q.Reference();
    return Reference(c, in, options, &decoded);
  });
  const auto flash_flat = Int8Storage<FlashLayout>::Make(q, flat_slots, c.EndPos());
  const auto flash_ring = Int8Storage<FlashLayout>::Make(q, ring_slots, c.EndPos());
  const auto tiled_flat = Int8Storage<Tiled>::Make(q, flat_slots, c.EndPos());
  const auto tiled_ring = Int8Storage<Tiled>::Make(q, ring_slots, c.EndPos());
  const std::vector<float> a = RunKernel(c, in, flash_flat, options);
  const std::vector<float> b = RunKernel(c, in, flash_ring, options);
  const std::vector<float> t = RunKernel(c, in, tiled_flat, options);
  const std::vector<float> u = RunKernel(c, in, tiled_ring, options);
  ExpectNearReference(c, a, ref, (name + " flash/flat").c_str());
  ExpectNearReference(c, t, ref, (name + " tiled/flat").c_str());
  EXPECT_TRUE(BitIdentical(a, b)) << name << " flash ring != flat: " << c.Name();
  EXPECT_TRUE(BitIdentical(t, u)) << name << " tiled ring != flat: " << c.Name();
  CheckInt8ProductsCase(c, in, options, q, flash_flat, flash_ring, tiled_flat, tiled_ring, a, t);
}

// The reference of `c` over its kept inputs `in`, with `options` = OptionsOf(c, in), made once
// per sweep.
const std::vector<double>& KeptReference(const Case& c, const Inputs& in,
                                         const AttentionOptions& options) {
  return Kept<std::vector<double>>(c, "reference", [&] { return Reference(c, in, options); });
}

// The core check of one case: flash and tiled, ring and flat, against the reference; ring
// and flat bit-identical; flash and tiled within the tolerance of each other; then the same
// in the int8 format (CheckInt8Case).
void CheckCase(const Case& c) {
  if (!CaseRunsHere()) return;
  const Inputs& in = KeptInputs(c);
  const AttentionOptions options = OptionsOf(c, in);
  const std::vector<double>& ref = KeptReference(c, in, options);
  const uint64_t flat_slots = (c.EndPos() + 31) / 32 * 32;
  const uint64_t ring_slots = c.RingSlots() < flat_slots ? c.RingSlots() : flat_slots;
  const auto flash_flat = Flat<FlashLayout>(c, in.history, flat_slots);
  const auto flash_ring = Ring<FlashLayout>(c, in.history, ring_slots);
  const auto tiled_flat = Flat<Tiled>(c, in.history, flat_slots);
  const auto tiled_ring = Ring<Tiled>(c, in.history, ring_slots);
  const std::vector<float> a = RunKernel(c, in, flash_flat, options);
  const std::vector<float> b = RunKernel(c, in, flash_ring, options);
  const std::vector<float> t = RunKernel(c, in, tiled_flat, options);
  const std::vector<float> u = RunKernel(c, in, tiled_ring, options);
  ExpectNearReference(c, a, ref, "flash/flat");
  ExpectNearReference(c, t, ref, "tiled/flat");
  EXPECT_TRUE(BitIdentical(a, b)) << "flash ring != flat: " << c.Name();
  EXPECT_TRUE(BitIdentical(t, u)) << "tiled ring != flat: " << c.Name();
  const size_t row = c.VHeadDim();
  for (size_t i = 0; i < a.size() / row; ++i) {
    std::vector<double> flash_row(a.begin() + static_cast<std::ptrdiff_t>(i * row),
                                  a.begin() + static_cast<std::ptrdiff_t>((i + 1) * row));
    const double err = kvring::reference::NormwiseRelativeError(&t[i * row], flash_row.data(), row);
    if (!(err <= kTolerance)) {
      ADD_FAILURE() << "flash and tiled differ by " << err << " in row " << i << " of " << c.Name();
      break;
    }
  }
  CheckProductsCase(c, in, options, flash_flat, flash_ring, tiled_flat, tiled_ring, a, t);
  CheckInt8Case(c, in, options, flat_slots, ring_slots, kvring::Format::kInt8);
  // A latent view reads its values from K, which int8h does not serve.
  if (in.history.v_head_dim != 0) {
    CheckInt8Case(c, in, options, flat_slots, ring_slots, kvring::Format::kInt8Hadamard);
  }
}

TEST(Attention, HeadDimsAndGroupsMatchReferenceOnEveryTarget) {
  ForEachTarget([](int64_t) {
    const uint32_t dims[] = {16, 64, 80, 96, 128, 256, 576};
    const uint32_t groups[] = {1, 2, 4, 8, 16};
    uint32_t seed = 1;
    for (uint32_t dim : dims) {
      for (uint32_t group : groups) {
        Case c;
        c.head_dim = dim;
        c.group = group;
        c.num_kv_heads = group >= 8 ? 1 : 2;
        c.visibility = Sliding(100);
        c.first_q_pos = 333;  // a ring of 128 slots has wrapped twice
        c.num_queries = dim >= 256 ? 2 : 5;
        c.seed = seed++;
        CheckCase(c);
      }
    }
  });
}

// Checks `c` on TiledLayout<kRows> rings and flat storage: against the reference, and ring
// and flat bit-identical.
template <uint64_t kRows>
void CheckTileHeight(const Case& c) {
  using Layout = kvring::TiledLayout<kRows>;
  // On AVX2 with AVX-VNNI, every other case takes the f32 loops of the integer-product mode;
  // on AVX3_DL with AMX, the vdpbf16ps blocks of the BF16-product mode.
  kvring::detail::AvxVnniAllowed() = c.seed % 2 == 0;
  kvring::detail::AmxAllowed() = c.seed % 2 == 0;
  const Inputs& in = KeptInputs(c);
  const AttentionOptions options = OptionsOf(c, in);
  const std::vector<double>& ref = KeptReference(c, in, options);
  const uint64_t flat_slots = (c.EndPos() + 31) / 32 * 32;
  const uint64_t ring_slots = c.RingSlots() < flat_slots ? c.RingSlots() : flat_slots;
  const auto flat = Flat<Layout>(c, in.history, flat_slots);
  const auto ring = Ring<Layout>(c, in.history, ring_slots);
  std::vector<float> a(size_t{c.num_queries} * c.NumQHeads() * c.VHeadDim());
  std::vector<float> b(a.size());
  RunTiled(flat.View(c.visibility), BatchOf(c, in, a.data()), options);
  RunTiled(ring.View(c.visibility), BatchOf(c, in, b.data()), options);
  const std::string what = "tiled" + std::to_string(kRows);
  ExpectNearReference(c, a, ref, what.c_str());
  EXPECT_TRUE(BitIdentical(a, b)) << what << " ring != flat: " << c.Name();
  // The BF16-product mode (tiles of 8 take the widening path, of 32 vdpbf16ps where it runs).
  const AttentionOptions products = WithBF16Products(options);
  RunTiled(flat.View(c.visibility), BatchOf(c, in, a.data()), products);
  RunTiled(ring.View(c.visibility), BatchOf(c, in, b.data()), products);
  ExpectNearReference(c, a, KeptProductsReference(c, in, products),
                      (what + " bf16products").c_str(), kProductsTolerance);
  EXPECT_TRUE(BitIdentical(a, b)) << what << " bf16products ring != flat: " << c.Name();
  // The integer-product mode on int8 (tiles of 8 take the f32 path, of 32 vpdpbusd where it
  // runs, their four dims 32 bytes apart), against its reference; ring and flat bit-identical.
  using kvring::reference::Int8Storage;
  const kvring::reference::Int8History& q = KeptInt8History(c, in, kvring::Format::kInt8);
  const auto int8_flat = Int8Storage<Layout>::Make(q, flat_slots, c.EndPos());
  const auto int8_ring = Int8Storage<Layout>::Make(q, ring_slots, c.EndPos());
  AttentionOptions int8_products = options;
  int8_products.products = kvring::Products::kInt8;
  RunTiled(int8_flat.View(c.visibility), BatchOf(c, in, a.data()), int8_products);
  RunTiled(int8_ring.View(c.visibility), BatchOf(c, in, b.data()), int8_products);
  ExpectNearReference(c, a, KeptInt8ProductsReference(c, in, int8_products, q),
                      (what + " int8products").c_str(), kInt8ProductsTolerance);
  EXPECT_TRUE(BitIdentical(a, b)) << what << " int8products ring != flat: " << c.Name();
}

TEST(Attention, TileHeights8And32MatchReferenceOnEveryTarget) {
  ForEachTarget([](int64_t) {
    const uint32_t dims[] = {16, 80, 128, 256};
    const uint32_t groups[] = {1, 2, 8};
    uint32_t seed = 500;
    for (uint32_t dim : dims) {
      for (uint32_t group : groups) {
        Case c;
        c.head_dim = dim;
        c.group = group;
        c.num_kv_heads = 2;
        c.visibility = seed % 2 == 0 ? Sliding(77) : Chunked(64);
        c.first_q_pos = 301;
        c.num_queries = seed % 3 == 0 ? 40 : 1 + seed % 5;
        c.seed = seed++;
        if (!CaseRunsHere()) continue;  // under emulation, a share of the cases (above)
        CheckTileHeight<8>(c);
        CheckTileHeight<32>(c);
      }
    }
  });
}

// On a slow target (SlowTarget) the two longest cases take a short version of the same
// structure: the prefill batch half as long (10 query blocks instead of 19, the last partial),
// the decode a quarter as long with splits a quarter as long (3 KV splits and their merge).
TEST(Attention, WindowsChunksAndBatchesMatchReferenceOnEveryTarget) {
  ForEachTarget([](int64_t target) {
    const bool slow = SlowTarget(target);
    std::vector<Case> cases;
    const uint64_t windows[] = {1, 7, 128, 512, 1024, 4096};
    uint32_t seed = 100;
    for (uint64_t window : windows) {
      Case c;
      c.head_dim = 64;
      c.num_kv_heads = 2;
      c.group = 2;
      c.visibility = Sliding(window);
      c.num_queries = window >= 1024 ? 3 : 40;
      c.first_q_pos = 2 * window + 3 * c.num_queries + 77;  // wraps the ring at least twice
      c.seed = seed++;
      cases.push_back(c);
    }
    for (uint64_t chunk : {uint64_t{1}, uint64_t{32}, uint64_t{100}, uint64_t{257}}) {
      Case c;
      c.head_dim = 80;
      c.num_kv_heads = 1;
      c.group = 4;
      c.visibility = Chunked(chunk);
      c.num_queries = 70;
      c.first_q_pos = 3 * chunk + 190;
      c.seed = seed++;
      cases.push_back(c);
    }
    {
      Case c;  // a long prefill batch from position 0
      c.head_dim = 32;
      c.num_kv_heads = 1;
      c.group = 2;
      c.visibility = Global();
      c.num_queries = slow ? 300 : 600;
      c.seed = seed++;
      cases.push_back(c);
      c.visibility = Sliding(7);  // and over a wrapped small ring
      c.num_queries = 600;
      c.first_q_pos = 1000;
      c.seed = seed++;
      cases.push_back(c);
    }
    {
      Case c;  // decode over a long global context: several KV splits
      c.head_dim = 128;
      c.num_kv_heads = 2;
      c.group = 4;
      c.visibility = Global();
      c.first_q_pos = slow ? 1250 : 5000;
      c.split_positions = slow ? 512 : 0;  // 3 splits either way (2048 by default)
      c.num_queries = 1;
      c.seed = seed++;
      cases.push_back(c);
      c.num_queries = 4;  // a small draft batch, still split
      c.seed = seed++;
      cases.push_back(c);
    }
    for (const Case& c : cases) CheckCase(c);
  });
}

// On a slow target (SlowTarget) the global variants read 350 positions instead of 700 (the
// sliding ones read 300 either way; their rings wrap twice).
TEST(Attention, SoftCapSinksAndBF16QueriesMatchReferenceOnEveryTarget) {
  ForEachTarget([](int64_t target) {
    const bool slow = SlowTarget(target);
    uint32_t seed = 200;
    for (int variant = 0; variant < 8; ++variant) {
      Case c;
      c.head_dim = variant % 2 == 0 ? 128 : 96;
      c.v_head_dim = variant == 5 ? 64 : 0;
      c.num_kv_heads = 2;
      c.group = variant < 4 ? 2 : 8;
      c.visibility = variant % 3 == 0 ? Global() : Sliding(300);
      c.first_q_pos = slow && variant % 3 == 0 ? 350 : 700;
      c.num_queries = variant % 4 == 0 ? 1 : 9;
      c.soft_cap = (variant & 1) != 0 ? 5.0f : 0.0f;
      c.query_scale = c.soft_cap > 0 ? 4.0f : 1.0f;
      c.sinks = (variant & 2) != 0;
      c.bf16_queries = (variant & 4) != 0;
      c.seed = seed++;
      CheckCase(c);
    }
  });
}

TEST(Attention, RandomShapesMatchReferenceOnEveryTarget) {
  std::mt19937 rng(12345);
  std::vector<Case> cases;
  while (cases.size() < 24) {
    Case c;
    c.head_dim = 16 * (1 + static_cast<uint32_t>(rng() % 36));
    c.v_head_dim = rng() % 4 == 0 ? 16 * (1 + static_cast<uint32_t>(rng() % 36)) : 0;
    c.num_kv_heads = 1 + static_cast<uint32_t>(rng() % 3);
    c.group = 1u << (rng() % 5);
    switch (rng() % 3) {
      case 0:
        c.visibility = Global();
        break;
      case 1:
        c.visibility = Sliding(1 + rng() % 700);
        break;
      default:
        c.visibility = Chunked(1 + rng() % 300);
        break;
    }
    c.num_queries = rng() % 3 == 0 ? 1 + static_cast<uint32_t>(rng() % 4)
                                   : 1 + static_cast<uint32_t>(rng() % 200);
    c.first_q_pos = rng() % 2000;
    c.soft_cap = rng() % 3 == 0 ? 10.0f : 0.0f;
    c.sinks = rng() % 3 == 0;
    c.bf16_queries = rng() % 4 == 0;
    c.extra_ring_slots = 32 * (rng() % 3);
    c.seed = static_cast<uint32_t>(rng());
    // Keep each case below ~4M multiply-adds so slow targets stay fast.
    const uint64_t span = c.visibility.kind == AttentionKind::kGlobal
                              ? c.EndPos()
                              : (c.visibility.span < c.EndPos() ? c.visibility.span : c.EndPos());
    const uint64_t cost =
        uint64_t{c.num_queries} * c.NumQHeads() * span * (c.head_dim + c.VHeadDim());
    if (cost > 4000000) continue;
    cases.push_back(c);
  }
  ForEachTarget([&](int64_t) {
    for (const Case& c : cases) CheckCase(c);
  });
}

TEST(Attention, WindowOfOneReturnsTheQueryOwnValue) {
  ForEachTarget([](int64_t) {
    Case c;
    c.head_dim = 96;
    c.num_kv_heads = 2;
    c.group = 2;
    c.visibility = Sliding(1);
    c.first_q_pos = 95;
    c.num_queries = 10;
    const Inputs in = MakeInputs(c);
    const auto ring = Ring<FlashLayout>(c, in.history, c.RingSlots());
    const std::vector<float> out = RunKernel(c, in, ring, OptionsOf(c, in));
    for (uint32_t query = 0; query < c.num_queries; ++query) {
      for (uint32_t q_head = 0; q_head < c.NumQHeads(); ++q_head) {
        for (uint32_t dim = 0; dim < c.head_dim; ++dim) {
          const float expected = kvring::BF16ToF32(
              in.history
                  .v[((c.first_q_pos + query) * c.num_kv_heads + q_head / c.group) * c.head_dim +
                     dim]);
          ASSERT_EQ(out[(size_t{query} * c.NumQHeads() + q_head) * c.head_dim + dim], expected);
        }
      }
    }
  });
}

TEST(Attention, EqualScoresAverageTheValues) {
  ForEachTarget([](int64_t) {
    Case c;
    c.head_dim = 64;
    c.num_kv_heads = 1;
    c.group = 2;
    c.visibility = Chunked(50);
    c.first_q_pos = 120;
    c.num_queries = 30;
    Inputs in = MakeInputs(c);
    for (BF16& k : in.history.k) k = kvring::BF16FromF32(0.5f);
    const auto flat = Flat<FlashLayout>(c, in.history, 160);
    const std::vector<float> out = RunKernel(c, in, flat, OptionsOf(c, in));
    for (uint32_t query = 0; query < c.num_queries; ++query) {
      const uint64_t q_pos = c.first_q_pos + query;
      const uint64_t first = c.visibility.FirstVisible(q_pos);
      for (uint32_t dim = 0; dim < c.head_dim; ++dim) {
        double mean = 0.0;
        for (uint64_t pos = first; pos <= q_pos; ++pos) {
          mean += kvring::BF16ToF32(in.history.V(pos, 0, dim));
        }
        mean /= static_cast<double>(q_pos - first + 1);
        for (uint32_t q_head = 0; q_head < c.NumQHeads(); ++q_head) {
          ASSERT_NEAR(out[(size_t{query} * c.NumQHeads() + q_head) * c.head_dim + dim], mean, 1e-5);
        }
      }
    }
  });
}

TEST(Attention, HugeScoresAndHugeCappedLogitsStayFinite) {
  ForEachTarget([](int64_t) {
    for (int variant = 0; variant < 2; ++variant) {
      Case c;
      c.head_dim = 128;
      c.num_kv_heads = 1;
      c.group = 4;
      c.visibility = Sliding(200);
      c.first_q_pos = 400;
      c.num_queries = 3;
      c.query_scale = variant == 0 ? 300.0f : 1e6f;  // scores of ~3e3, then ~1e7
      c.soft_cap = variant == 0 ? 0.0f : 30.0f;
      c.seed = 77 + static_cast<uint32_t>(variant);
      CheckCase(c);
      const Inputs in = MakeInputs(c);
      const auto flat = Flat<FlashLayout>(c, in.history, 416);
      for (float x : RunKernel(c, in, flat, OptionsOf(c, in))) ASSERT_TRUE(std::isfinite(x));
    }
  });
}

TEST(Attention, NaNAndInfInVisibleKVReachOnlyTheOutputsThatSeeThem) {
  ForEachTarget([](int64_t) {
    Case c;
    c.head_dim = 64;
    c.num_kv_heads = 2;
    c.group = 2;
    c.visibility = Sliding(40);
    c.first_q_pos = 200;
    c.num_queries = 50;
    const uint64_t bad_pos = 215;  // seen by queries 215 .. 254 (query index 15 .. 49)
    for (int what = 0; what < 2; ++what) {
      Inputs in = MakeInputs(c);
      if (what == 0) {
        in.history.K(bad_pos, 1, 5) = kvring::BF16FromF32(std::nanf(""));
      } else {
        in.history.V(bad_pos, 1, 7) = kvring::BF16FromF32(std::numeric_limits<float>::infinity());
      }
      const AttentionOptions exact = OptionsOf(c, in);
      const auto flash = Ring<FlashLayout>(c, in.history, c.RingSlots());
      const auto tiled = Ring<Tiled>(c, in.history, c.RingSlots());
      const AttentionOptions products = WithBF16Products(exact);
      for (const std::vector<float>& out :
           {RunKernel(c, in, flash, exact), RunKernel(c, in, tiled, exact),
            RunKernel(c, in, flash, products), RunKernel(c, in, tiled, products)}) {
        for (uint32_t query = 0; query < c.num_queries; ++query) {
          const bool sees = c.visibility.Visible(c.first_q_pos + query, bad_pos);
          for (uint32_t q_head = 0; q_head < c.NumQHeads(); ++q_head) {
            const float* row = &out[(size_t{query} * c.NumQHeads() + q_head) * c.head_dim];
            bool all_finite = true, any_nan = false;
            for (uint32_t dim = 0; dim < c.head_dim; ++dim) {
              all_finite &= std::isfinite(row[dim]);
              any_nan |= std::isnan(row[dim]);
            }
            if (sees && q_head / c.group == 1) {
              EXPECT_FALSE(all_finite) << "query " << query << " head " << q_head;
              if (what == 0) {
                EXPECT_TRUE(any_nan);
              }
            } else {
              EXPECT_TRUE(all_finite) << "query " << query << " head " << q_head;
            }
          }
        }
      }
    }
  });
}

// Returns the number of slots of `view` whose K and V are NaN in every kv_head and dim.
template <typename Layout>
uint64_t NaNSlots(const kvring::KVView<Layout>& view) {
  const kvring::KVShape& shape = view.layout.Shape();
  const auto k = view.layout.K();
  const auto v = view.layout.V();
  uint64_t count = 0;
  for (uint64_t slot = 0; slot < shape.num_slots; ++slot) {
    bool all_nan = true;
    for (uint32_t kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (uint32_t dim = 0; dim < shape.head_dim; ++dim) {
        all_nan &= std::isnan(kvring::BF16ToF32(view.k[k(slot, kv_head, dim)]));
      }
      for (uint32_t dim = 0; dim < shape.v_head_dim; ++dim) {
        all_nan &= std::isnan(kvring::BF16ToF32(view.v[v(slot, kv_head, dim)]));
      }
    }
    count += all_nan ? 1 : 0;
  }
  return count;
}

// Returns the history of `c` in a KV (RingKV or GlobalKV) of `num_slots` slots, with NaN in
// every slot but those of positions [keep_begin, c.EndPos()), as an engine's storage can hold
// them: positions before keep_begin are appended as NaN rows (held, or overwritten by the
// ring), and slots no position has reached yet get NaN rows that are appended and then
// rolled back (a rejected draft).
template <typename KV>
KV Poisoned(const Case& c, const History& history, uint64_t num_slots, uint64_t keep_begin) {
  const uint64_t end = c.EndPos();
  const uint64_t unreached = num_slots > end ? num_slots - end : 0;
  History poisoned = history;
  poisoned.num_positions = end + unreached;
  poisoned.k.resize(poisoned.num_positions * c.num_kv_heads * c.head_dim);
  poisoned.v.resize(poisoned.num_positions * c.num_kv_heads * history.v_head_dim);
  const BF16 nan = kvring::BF16FromF32(std::numeric_limits<float>::quiet_NaN());
  for (uint64_t pos = 0; pos < poisoned.num_positions; ++pos) {
    if (pos >= keep_begin && pos < end) continue;
    for (uint32_t kv_head = 0; kv_head < c.num_kv_heads; ++kv_head) {
      for (uint32_t dim = 0; dim < c.head_dim; ++dim) poisoned.K(pos, kv_head, dim) = nan;
      for (uint32_t dim = 0; dim < history.v_head_dim; ++dim) poisoned.V(pos, kv_head, dim) = nan;
    }
  }
  KV kv = Store<KV>(
      poisoned,
      kvring::reference::SpecOf(poisoned, num_slots, c.Keep(), poisoned.num_positions, unreached),
      poisoned.num_positions);
  if (unreached != 0) {
    EXPECT_EQ(kv.Rollback(unreached), kvring::Status::kOk);
  }
  EXPECT_EQ(kv.FirstPos(), end > num_slots ? end - num_slots : 0);
  EXPECT_EQ(kv.EndPos(), end);
  // The poison is where the test needs it: in every slot the view must not read.
  EXPECT_EQ(NaNSlots(kv.View(c.visibility)), num_slots - (end - keep_begin));
  return kv;
}

TEST(Attention, NaNInSlotsOutsideTheVisibleRangeNeverReachesOutputs) {
  ForEachTarget([](int64_t) {
    for (const Visibility& visibility : {Sliding(45), Chunked(40), Global(), Sliding(46)}) {
      Case c;
      c.head_dim = 80;
      // The last: a latent (MLA) view, whose values come from the poisoned K.
      c.latent_v_dims = visibility.span == 46 ? 64 : 0;
      c.num_kv_heads = 1;
      c.group = 4;
      c.visibility = visibility;
      c.first_q_pos = 300;
      c.num_queries = 9;
      c.extra_ring_slots = 64;
      const Inputs in = MakeInputs(c);
      const AttentionOptions options = OptionsOf(c, in);
      const uint64_t flat_slots = (c.EndPos() + 31) / 32 * 32 + 32;
      const uint64_t keep_begin = visibility.FirstVisible(c.first_q_pos);
      using kvring::GlobalKV;
      using kvring::RingKV;
      const auto clean = Flat<FlashLayout>(c, in.history, flat_slots);
      const auto tiled_clean = Flat<Tiled>(c, in.history, flat_slots);
      const auto flash_ring =
          Poisoned<RingKV<FlashLayout>>(c, in.history, c.RingSlots(), keep_begin);
      const auto flash_flat =
          Poisoned<GlobalKV<FlashLayout>>(c, in.history, flat_slots, keep_begin);
      const auto tiled_ring = Poisoned<RingKV<Tiled>>(c, in.history, c.RingSlots(), keep_begin);
      const auto tiled_flat = Poisoned<GlobalKV<Tiled>>(c, in.history, flat_slots, keep_begin);
      const std::vector<float> expected = RunKernel(c, in, clean, options);
      const std::vector<float> tiled_expected = RunKernel(c, in, tiled_clean, options);
      for (float x : expected) ASSERT_TRUE(std::isfinite(x)) << Describe(visibility);
      EXPECT_TRUE(BitIdentical(RunKernel(c, in, flash_ring, options), expected))
          << Describe(visibility);
      EXPECT_TRUE(BitIdentical(RunKernel(c, in, flash_flat, options), expected))
          << Describe(visibility);
      EXPECT_TRUE(BitIdentical(RunKernel(c, in, tiled_ring, options), tiled_expected))
          << Describe(visibility);
      EXPECT_TRUE(BitIdentical(RunKernel(c, in, tiled_flat, options), tiled_expected))
          << Describe(visibility);
    }
  });
}

// Int8: a row holding NaN is stored with scale NaN, so exactly the queries that see its
// position get NaN outputs; slots outside the visible range, NaN scales included, never reach
// an output (both layouts, ring and flat, a latent view too).
TEST(Attention, Int8NaNRowsReachOnlyTheQueriesThatSeeThemAndPoisonedSlotsNone) {
  ForEachTarget([](int64_t) {
    using kvring::reference::Int8History;
    using kvring::reference::Int8Storage;
    for (uint32_t latent : {0u, 32u}) {
      Case c;
      c.head_dim = 64;
      c.latent_v_dims = latent;
      c.num_kv_heads = 1;
      c.group = 4;
      c.visibility = Sliding(40);
      c.first_q_pos = 200;
      c.num_queries = 12;
      c.extra_ring_slots = 64;
      Inputs in = MakeInputs(c);
      const AttentionOptions exact_options = OptionsOf(c, in);
      const uint64_t flat_slots = (c.EndPos() + 31) / 32 * 32 + 32;
      const uint64_t keep_begin = c.visibility.FirstVisible(c.first_q_pos);
      // Poisoned slots: the same bits as clean storage (in both modes: the integer-product
      // mode reads every slot of a tile and weighs the invisible ones 0).
      const Int8History clean_q = Int8History::Of(in.history);
      const auto clean = Int8Storage<FlashLayout>::Make(clean_q, flat_slots, c.EndPos());
      const auto tiled_clean = Int8Storage<Tiled>::Make(clean_q, flat_slots, c.EndPos());
      auto ring = Int8Storage<FlashLayout>::Make(clean_q, c.RingSlots(), c.EndPos());
      auto tiled_ring = Int8Storage<Tiled>::Make(clean_q, c.RingSlots(), c.EndPos());
      ring.PoisonOutside(keep_begin, c.EndPos());
      tiled_ring.PoisonOutside(keep_begin, c.EndPos());
      for (const kvring::Products products : {kvring::Products::kF32, kvring::Products::kInt8}) {
        SCOPED_TRACE(products == kvring::Products::kInt8 ? "int8 products" : "exact");
        AttentionOptions options = exact_options;
        options.products = products;
        const std::vector<float> expected = RunKernel(c, in, clean, options);
        for (float x : expected) ASSERT_TRUE(std::isfinite(x));
        EXPECT_TRUE(BitIdentical(RunKernel(c, in, ring, options), expected)) << latent;
        EXPECT_TRUE(BitIdentical(RunKernel(c, in, tiled_ring, options),
                                 RunKernel(c, in, tiled_clean, options)))
            << latent;
      }
      // A NaN in K of position 203 (seen by queries 203 .. 211 of the 12 at 200 .. 211).
      in.history.K(203, 0, 5) = kvring::BF16FromF32(std::numeric_limits<float>::quiet_NaN());
      const Int8History nan_q = Int8History::Of(in.history);
      for (const kvring::Products products : {kvring::Products::kF32, kvring::Products::kInt8}) {
        SCOPED_TRACE(products == kvring::Products::kInt8 ? "int8 products" : "exact");
        AttentionOptions options = exact_options;
        options.products = products;
        for (int layout = 0; layout < 2; ++layout) {
          const std::vector<float> out =
              layout == 0
                  ? RunKernel(c, in, Int8Storage<FlashLayout>::Make(nan_q, flat_slots, c.EndPos()),
                              options)
                  : RunKernel(c, in, Int8Storage<Tiled>::Make(nan_q, flat_slots, c.EndPos()),
                              options);
          const size_t query_floats = size_t{c.NumQHeads()} * c.VHeadDim();
          for (uint32_t query = 0; query < c.num_queries; ++query) {
            const bool sees = c.first_q_pos + query >= 203;
            for (size_t i = 0; i < query_floats; ++i) {
              ASSERT_EQ(std::isnan(out[query * query_floats + i]), sees)
                  << "query " << query << " element " << i << " layout " << layout;
            }
          }
        }
      }
    }
  });
}

// MLA (DeepSeek): one latent stream per position and no V; the values are the latent's first
// latent_v_dims dims (AttentionOptions::latent_v_dims), read from K in both layouts.
TEST(Attention, LatentViewsWithoutVMatchReferenceOnEveryTarget) {
  ForEachTarget([](int64_t target) {
    const bool slow = SlowTarget(target);
    std::vector<Case> cases;
    Case c;
    c.num_kv_heads = 1;  // DeepSeek: every q head reads the one latent (absorbed queries)
    c.head_dim = 576;
    c.latent_v_dims = 512;
    c.group = 16;
    c.visibility = Global();
    c.first_q_pos = 300;
    c.num_queries = 1;
    c.seed = 900;
    cases.push_back(c);
    c.num_queries = 5;  // a small prefill batch, causal inside it
    c.seed = 901;
    cases.push_back(c);
    if (!slow) {
      c.first_q_pos = 2100;  // a decode call split at 2048 and merged
      c.num_queries = 1;
      c.seed = 902;
      cases.push_back(c);
    }
    Case small;  // small latents, GQA, windows that wrap the ring, options
    small.num_kv_heads = 2;
    small.group = 2;
    small.first_q_pos = 333;
    small.num_queries = 7;
    const uint32_t dims[][2] = {{80, 64}, {64, 64}, {96, 16}, {144, 128}};
    uint32_t seed = 910;
    for (const auto& d : dims) {
      small.head_dim = d[0];
      small.latent_v_dims = d[1];
      small.visibility = seed % 2 == 0 ? Sliding(100) : Chunked(64);
      small.soft_cap = seed % 3 == 0 ? 5.0f : 0.0f;
      small.sinks = seed % 4 == 1;
      small.bf16_queries = seed % 4 == 2;
      small.seed = seed++;
      cases.push_back(small);
    }
    for (const Case& one : cases) CheckCase(one);
    // Tiles of 8 and 32 rows read their latent values from K as well.
    CheckTileHeight<8>(cases.back());
    CheckTileHeight<32>(cases.back());
  });
}

// The value width of a latent view is the caller's to give, and only for a latent view.
TEST(AttentionDeathTest, LatentValueDimsMustMatchTheView) {
  if (!KVRING_ENABLE_DASSERT) GTEST_SKIP() << "debug assertions are off in this build";
  Case c;
  c.head_dim = 80;
  c.latent_v_dims = 64;
  c.first_q_pos = 40;
  c.visibility = Global();
  const Inputs in = MakeInputs(c);
  const auto latent = Flat<FlashLayout>(c, in.history, 64);
  AttentionOptions options = OptionsOf(c, in);
  std::vector<float> out(c.VHeadDim());
  const kvring::AttentionBatch batch = BatchOf(c, in, out.data());
  options.latent_v_dims = 0;  // a latent view needs its value width
  EXPECT_DEATH(kvring::AttentionWork::Plan(latent.View(c.visibility), batch, options),
               "check failed");
  options.latent_v_dims = 96;  // wider than the latent
  EXPECT_DEATH(kvring::AttentionWork::Plan(latent.View(c.visibility), batch, options),
               "check failed");
  Case with_v = c;
  with_v.latent_v_dims = 0;
  const Inputs in_v = MakeInputs(with_v);
  const auto kv = Flat<FlashLayout>(with_v, in_v.history, 64);
  options.latent_v_dims = 64;  // a view with V reads its V
  EXPECT_DEATH(kvring::AttentionWork::Plan(kv.View(c.visibility), BatchOf(with_v, in_v, out.data()),
                                           options),
               "check failed");
}

TEST(Attention, RingAndFlatAreBitIdenticalAtEveryWrapPoint) {
  ForEachTarget([](int64_t target) {
    // Slide one decode query and a 3-query batch across several wraps of a 64-slot ring.
    const bool slow = SlowTarget(target);
    for (uint64_t q = 40; q < 330; q += slow ? 23 : 7) {
      for (uint32_t num_queries : {1u, 3u}) {
        Case c;
        c.head_dim = 48;
        c.num_kv_heads = 1;
        c.group = 2;
        c.visibility = Sliding(33);
        c.first_q_pos = q;
        c.num_queries = num_queries;
        c.seed = static_cast<uint32_t>(q);
        CheckCase(c);
      }
    }
  });
}

// Paged storage (a KVPool's global layer, its blocks out of order, some shared with a fork's
// source) gives the bits of ring and flat storage of the same history, for decode and prefill
// batches whose visible positions cross block boundaries, both layouts, blocks of one and of
// three tiles, BF16, int8 and int8h, in the mode `products` asks.
void CheckPagedCase(const Case& c, uint64_t block_tiles, kvring::Products products) {
  const Inputs in = MakeInputs(c);
  AttentionOptions options = OptionsOf(c, in);
  options.products = products;
  const uint64_t flat_slots = (c.EndPos() + 31) / 32 * 32;
  const uint64_t ring_slots = c.RingSlots() < flat_slots ? c.RingSlots() : flat_slots;
  using kvring::reference::PagedHistory;
  for (const kvring::Format format :
       {kvring::Format::kBF16, kvring::Format::kInt8, kvring::Format::kInt8Hadamard}) {
    // A latent view reads its values from K, which int8h does not serve.
    if (kvring::RotatesK(format) && in.history.v_head_dim == 0) continue;
    kvring::StorageSpec flat_spec =
        kvring::reference::SpecOf(in.history, flat_slots, c.Keep(), c.EndPos());
    kvring::StorageSpec ring_spec =
        kvring::reference::SpecOf(in.history, ring_slots, c.Keep(), c.EndPos());
    flat_spec.format = ring_spec.format = format;
    const char* name = kvring::ToString(format);
    {
      const auto flat = Store<kvring::GlobalKV<FlashLayout>>(in.history, flat_spec, c.EndPos());
      const auto ring = Store<kvring::RingKV<FlashLayout>>(in.history, ring_spec, c.EndPos());
      const auto paged = PagedHistory<FlashLayout>::Make(
          in.history, c.EndPos(), block_tiles * FlashLayout::kTileSlots, format);
      const std::vector<float> a = RunKernel(c, in, flat, options);
      EXPECT_TRUE(BitIdentical(a, RunKernel(c, in, ring, options)))
          << name << " flash ring != flat: " << c.Name();
      EXPECT_TRUE(BitIdentical(a, RunKernel(c, in, paged, options)))
          << name << " flash paged != flat, blocks of " << block_tiles << " tiles: " << c.Name();
    }
    {
      const auto flat = Store<kvring::GlobalKV<Tiled>>(in.history, flat_spec, c.EndPos());
      const auto ring = Store<kvring::RingKV<Tiled>>(in.history, ring_spec, c.EndPos());
      const auto paged = PagedHistory<Tiled>::Make(in.history, c.EndPos(),
                                                   block_tiles * Tiled::kTileSlots, format);
      const std::vector<float> t = RunKernel(c, in, flat, options);
      EXPECT_TRUE(BitIdentical(t, RunKernel(c, in, ring, options)))
          << name << " tiled ring != flat: " << c.Name();
      EXPECT_TRUE(BitIdentical(t, RunKernel(c, in, paged, options)))
          << name << " tiled paged != flat, blocks of " << block_tiles << " tiles: " << c.Name();
    }
  }
}

TEST(Attention, PagedRingAndFlatAreBitIdenticalAcrossBlockBoundaries) {
  ForEachTarget([](int64_t target) {
    const bool slow = SlowTarget(target);
    for (uint64_t end : {97u, 250u, 333u}) {
      for (uint32_t num_queries : {1u, 3u, 37u}) {
        for (const Visibility visibility : {Global(), Sliding(70)}) {
          if (slow && num_queries == 37) continue;
          if (!CaseRunsHere()) continue;  // under emulation, a share of the cases (above)
          Case c;
          c.head_dim = 64;
          c.num_kv_heads = 2;
          c.group = 2;
          c.visibility = visibility;
          c.num_queries = num_queries;
          c.first_q_pos = end - num_queries;
          c.seed = static_cast<uint32_t>(end + num_queries);
          CheckPagedCase(c, 1, kvring::Products::kF32);
          // The BF16- and integer-product modes too.
          CheckPagedCase(c, 3,
                         num_queries != 3 ? kvring::Products::kBF16 : kvring::Products::kInt8);
          if (!slow) CheckPagedCase(c, 2, kvring::Products::kInt8);
        }
      }
    }
    // MLA latents (no V stream) and a split decode over a long history.
    Case latent;
    latent.head_dim = 96;
    latent.latent_v_dims = 64;
    latent.group = 4;
    latent.visibility = Global();
    latent.first_q_pos = 200;
    if (CaseRunsHere()) {
      CheckPagedCase(latent, 2, kvring::Products::kF32);
      CheckPagedCase(latent, 2, kvring::Products::kBF16);
      CheckPagedCase(latent, 2, kvring::Products::kInt8);
    }
    if (!slow) {
      Case split;
      split.head_dim = 64;
      split.visibility = Global();
      split.first_q_pos = 5000;
      CheckPagedCase(split, 3, kvring::Products::kF32);
      CheckPagedCase(split, 3, kvring::Products::kBF16);
      CheckPagedCase(split, 3, kvring::Products::kInt8);
    }
  });
}

TEST(Attention, BF16OutputIsTheRoundedF32Output) {
  ForEachTarget([](int64_t) {
    Case c;
    c.head_dim = 80;
    c.num_kv_heads = 2;
    c.group = 2;
    c.visibility = Sliding(100);
    c.first_q_pos = 150;
    c.num_queries = 20;
    c.sinks = true;
    const Inputs in = MakeInputs(c);
    const AttentionOptions options = OptionsOf(c, in);
    const auto ring = Ring<FlashLayout>(c, in.history, c.RingSlots());
    const std::vector<float> f32 = RunKernel(c, in, ring, options);
    std::vector<BF16> bf16(f32.size());
    kvring::AttentionBatch batch = BatchOf(c, in, nullptr);
    batch.out_bf16 = bf16.data();
    DispatchAttention(ring.View(c.visibility), batch, options, 1);
    for (size_t i = 0; i < f32.size(); ++i) {
      ASSERT_EQ(bf16[i].bits, kvring::BF16FromF32(f32[i]).bits) << i;
    }
  });
}

TEST(Attention, ARowsBitsDoNotDependOnTheOtherRowsOfItsCall) {
  // A verify batch of 1 + draft tokens must score its first query exactly as plain decode
  // does (speculative decoding compares them), whatever register block each row lands in:
  // every query of a batch alone, as a call of its own, gives the batch's bits.
  ForEachTarget([](int64_t) {
    uint32_t seed = 900;
    for (uint32_t group : {1u, 2u, 4u, 8u}) {
      for (uint32_t dim : {64u, 128u}) {
        Case c;
        c.head_dim = dim;
        c.group = group;
        c.num_kv_heads = 2;
        c.visibility = Sliding(200);
        c.first_q_pos = 517;
        c.num_queries = 5;
        c.seed = seed++;
        const Inputs in = MakeInputs(c);
        AttentionOptions options = OptionsOf(c, in);
        options.max_split_queries = 0;  // no call splits: the same partition for every size
        const auto flash = Ring<FlashLayout>(c, in.history, c.RingSlots());
        const auto tiled = Ring<Tiled>(c, in.history, c.RingSlots());
        const std::vector<float> flash_batch = RunKernel(c, in, flash, options);
        const std::vector<float> tiled_batch = RunKernel(c, in, tiled, options);
        const size_t q_row = size_t{c.NumQHeads()} * c.head_dim;
        const size_t out_row = size_t{c.NumQHeads()} * c.VHeadDim();
        for (uint32_t j = 0; j < c.num_queries; ++j) {
          std::vector<float> alone(out_row);
          kvring::AttentionBatch batch = BatchOf(c, in, alone.data());
          batch.queries_f32 = in.queries.data() + j * q_row;
          batch.first_q_pos = c.first_q_pos + j;
          batch.num_queries = 1;
          DispatchAttention(flash.View(c.visibility), batch, options, 1);
          EXPECT_EQ(
              std::memcmp(alone.data(), flash_batch.data() + j * out_row, out_row * sizeof(float)),
              0)
              << "flash query " << j << " alone != in the batch: " << c.Name();
          DispatchAttention(tiled.View(c.visibility), batch, options, 1);
          EXPECT_EQ(
              std::memcmp(alone.data(), tiled_batch.data() + j * out_row, out_row * sizeof(float)),
              0)
              << "tiled query " << j << " alone != in the batch: " << c.Name();
        }
      }
    }
  });
}

TEST(Attention, ResultsDoNotDependOnTheSplitLengthBeyondTolerance) {
  ForEachTarget([](int64_t) {
    Case c;
    c.head_dim = 64;
    c.num_kv_heads = 1;
    c.group = 4;
    c.visibility = Global();
    c.first_q_pos = 3000;
    c.num_queries = 2;
    const Inputs in = MakeInputs(c);
    const std::vector<double> ref = Reference(c, in, OptionsOf(c, in));
    const auto flat = Flat<FlashLayout>(c, in.history, 3008);
    for (uint64_t split : {uint64_t{0}, uint64_t{32}, uint64_t{100}, uint64_t{2048}}) {
      AttentionOptions options = OptionsOf(c, in);
      options.split_positions = split;
      ExpectNearReference(c, RunKernel(c, in, flat, options), ref, "split");
    }
  });
}

TEST(Attention, FusedQKVRowsAndStridedOutputsGiveThePackedRowsBits) {
  // An engine's fused projection writes [token][q heads | k heads | v heads]; the queries are
  // read in place with q_row_stride, and outputs land in rows with a gap (out_row_stride),
  // BF16 and f32 queries, decode with KV splits and prefill blocks, both layouts.
  ForEachTarget([](int64_t) {
    for (uint32_t num_queries : {1u, 3u, 37u}) {
      for (bool bf16_queries : {false, true}) {
        if (!CaseRunsHere()) continue;  // under emulation, a share of the cases (above)
        Case c;
        c.head_dim = 64;
        c.num_kv_heads = 2;
        c.group = 4;
        c.visibility = Sliding(300);
        c.first_q_pos = 700;
        c.num_queries = num_queries;
        c.bf16_queries = bf16_queries;
        const Inputs in = MakeInputs(c);
        AttentionOptions options = OptionsOf(c, in);
        options.split_positions = 128;
        const auto flash = Ring<FlashLayout>(c, in.history, c.RingSlots());
        const auto tiled = Ring<Tiled>(c, in.history, c.RingSlots());
        const size_t q_row = size_t{c.NumQHeads()} * c.head_dim;
        const size_t kv_row = size_t{c.num_kv_heads} * c.head_dim;
        const size_t fused_row = q_row + 2 * kv_row;
        const size_t out_row = size_t{c.NumQHeads()} * c.VHeadDim();
        const size_t out_stride = out_row + 24;
        std::vector<float> fused(num_queries * fused_row, 99.0f);
        std::vector<BF16> fused_bf16(num_queries * fused_row, kvring::BF16FromF32(99.0f));
        for (size_t t = 0; t < num_queries; ++t) {
          for (size_t i = 0; i < q_row; ++i) {
            fused[t * fused_row + i] = in.queries[t * q_row + i];
            if (bf16_queries) fused_bf16[t * fused_row + i] = in.queries_bf16[t * q_row + i];
          }
        }
        for (int layout = 0; layout < 2; ++layout) {
          const std::vector<float> packed =
              layout == 0 ? RunKernel(c, in, flash, options) : RunKernel(c, in, tiled, options);
          std::vector<float> strided(num_queries * out_stride, -3.0f);
          kvring::AttentionBatch batch = BatchOf(c, in, strided.data());
          if (bf16_queries) {
            batch.queries_bf16 = fused_bf16.data();
          } else {
            batch.queries_f32 = fused.data();
          }
          batch.q_row_stride = fused_row;
          batch.out_row_stride = out_stride;
          if (layout == 0) {
            DispatchAttention(flash.View(c.visibility), batch, options, 1);
          } else {
            DispatchAttention(tiled.View(c.visibility), batch, options, 1);
          }
          for (size_t t = 0; t < num_queries; ++t) {
            ASSERT_EQ(std::memcmp(strided.data() + t * out_stride, packed.data() + t * out_row,
                                  out_row * sizeof(float)),
                      0)
                << "query " << t << " layout " << layout << ": " << c.Name();
            for (size_t i = out_row; i < out_stride; ++i) {
              ASSERT_EQ(strided[t * out_stride + i], -3.0f) << "the gap was written";
            }
          }
        }
      }
    }
  });
}

// Threading tests: the TSan preset runs only these (filter "AttentionThreads").
TEST(AttentionThreads, ThreadCountsAndRepeatedRunsGiveIdenticalBits) {
  // (Inside ForEachTarget the supported targets are the pinned one alone.)
  const int64_t best = hwy::SupportedAndGeneratedTargets()[0];
  ForEachTarget([best](int64_t target) {
    if (target != best) return;  // the best target only
    uint32_t index = 0;
    for (uint32_t num_queries : {1u, 2u, 64u}) {
      if (!BestTargetCaseRunsHere(index++)) continue;
      Case c;
      c.head_dim = 64;
      c.num_kv_heads = 2;
      c.group = 4;
      c.visibility = num_queries == 1 ? Global() : Sliding(500);
      c.first_q_pos = 4500;
      c.num_queries = num_queries;
      c.sinks = true;
      const Inputs in = MakeInputs(c);
      AttentionOptions exact = OptionsOf(c, in);
      exact.split_positions = 512;
      const auto flash = Ring<FlashLayout>(c, in.history, c.RingSlots());
      const auto tiled = Ring<Tiled>(c, in.history, c.RingSlots());
      for (const AttentionOptions& options : {exact, WithBF16Products(exact)}) {
        const bool products = options.products == kvring::Products::kBF16;
        const std::vector<float> one = RunKernel(c, in, flash, options, 1);
        const std::vector<float> tiled_one = RunKernel(c, in, tiled, options, 1);
        for (uint32_t threads : {1u, 2u, 3u, 8u}) {
          EXPECT_TRUE(BitIdentical(RunKernel(c, in, flash, options, threads), one))
              << threads << " products " << products;
          EXPECT_TRUE(BitIdentical(RunKernel(c, in, tiled, options, threads), tiled_one))
              << threads << " products " << products;
        }
        if (products) {
          ExpectNearReference(c, one, ProductsReference(c, in, options), "threads bf16products",
                              kProductsTolerance);
        } else {
          ExpectNearReference(c, one, Reference(c, in, options), "threads");
        }
      }
      // The integer-product mode over int8 storage; over BF16 storage it is the exact mode.
      AttentionOptions int8_products = exact;
      int8_products.products = kvring::Products::kInt8;
      EXPECT_TRUE(BitIdentical(RunKernel(c, in, flash, int8_products, 2),
                               RunKernel(c, in, flash, exact, 1)));
      const kvring::reference::Int8History q = kvring::reference::Int8History::Of(in.history);
      using kvring::reference::Int8Storage;
      const auto flash_int8 = Int8Storage<FlashLayout>::Make(q, c.RingSlots(), c.EndPos());
      const auto tiled_int8 = Int8Storage<Tiled>::Make(q, c.RingSlots(), c.EndPos());
      const std::vector<float> one = RunKernel(c, in, flash_int8, int8_products, 1);
      const std::vector<float> tiled_one = RunKernel(c, in, tiled_int8, int8_products, 1);
      for (uint32_t threads : {2u, 3u, 8u}) {
        EXPECT_TRUE(BitIdentical(RunKernel(c, in, flash_int8, int8_products, threads), one))
            << threads << " int8 products";
        EXPECT_TRUE(BitIdentical(RunKernel(c, in, tiled_int8, int8_products, threads), tiled_one))
            << threads << " int8 products";
      }
    }
  });
}

TEST(AttentionAppend, VectorConversionMatchesScalarRounding) {
  std::vector<float> values;
  std::mt19937 rng(5);
  for (int i = 0; i < 5000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    values.push_back(f);
  }
  for (uint32_t bits : {0x3F808000u, 0x3F818000u, 0x7F800000u, 0xFF800000u, 0x7F800001u,
                        0xFFC00001u, 0x7F7FFFFFu, 0x00000001u, 0x80000000u, 0x7FFFFFFFu}) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    values.push_back(f);  // ties, infinities, NaNs with low payloads, overflow, denormals
  }
  ForEachTarget([&](int64_t) {
    for (size_t count : {values.size(), size_t{7}, size_t{0}}) {
      std::vector<BF16> out(values.size());
      HWY_DYNAMIC_DISPATCH(ConvertF32ToBF16)(values.data(), out.data(), count);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i].bits, kvring::BF16FromF32(values[i]).bits) << i;
      }
    }
  });
}

// The softmax's exp (kvring/ops/softmax_exp-inl.h: on AVX-512 Highway's Exp with shorter
// first and last steps) has Exp's bits on every target for the inputs a softmax gives it: every
// 4099th float from -0 to -inf (normal, subnormal and underflowing results) and the ends; and
// for positive values up to 88, beyond what a softmax passes (x - max is never positive).
TEST(AttentionSoftmax, ExpHasTheBitsOfHighwaysExp) {
  std::vector<float> x;
  for (uint64_t bits = 0x80000000u; bits <= 0xFF800000u; bits += 4099) {
    float f;
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b, sizeof(f));
    x.push_back(f);
  }
  for (const float f : {0.0f, -0.0f, -std::numeric_limits<float>::infinity(), -104.0f, -103.99999f,
                        -87.33655f, -87.33654f, -1e-45f, -0.5f, -0.34657359f}) {
    x.push_back(f);
  }
  for (float f = 1e-6f; f <= 88.0f; f *= 1.37f) x.push_back(f);
  while (x.size() % 64 != 0) x.push_back(-1.0f);
  ForEachTarget([&](int64_t) {
    EXPECT_EQ(HWY_DYNAMIC_DISPATCH(SoftmaxExpMismatches)(x.data(), x.size()), 0u);
  });
}

TEST(AttentionViews, FlashViewSplitsAtTheWrapIntoTwoChronologicalRuns) {
  kvring::KVShape shape{64, 1, 16, 16};
  kvring::KVView<FlashLayout> kv;
  kv.layout = FlashLayout(shape);
  kv.first_pos = 136;
  kv.end_pos = 200;
  kv.visibility = Sliding(50);
  const kvring::FlashView view = kvring::FlashView::Of(kv, 186, 199);
  ASSERT_EQ(view.num_runs, 2u);
  EXPECT_EQ(view.runs[0].first_pos, 137u);
  EXPECT_EQ(view.runs[0].first_slot, 137u % 64u);
  EXPECT_EQ(view.runs[0].num_positions, 192u - 137u);
  EXPECT_EQ(view.runs[1].first_pos, 192u);
  EXPECT_EQ(view.runs[1].first_slot, 0u);
  EXPECT_EQ(view.runs[1].num_positions, 8u);
  const kvring::FlashView one = kvring::FlashView::Of(kv, 186, 190);
  ASSERT_EQ(one.num_runs, 1u);
  EXPECT_EQ(one.runs[0].first_pos, 137u);
  EXPECT_EQ(one.runs[0].num_positions, 54u);
}

TEST(AttentionViews, TiledViewListsPositionAlignedTilesOldestFirst) {
  kvring::KVShape shape{48, 1, 16, 16};
  kvring::KVView<Tiled> kv;
  kv.layout = Tiled(shape);
  kv.first_pos = 60;
  kv.end_pos = 108;
  kv.visibility = Chunked(40);
  const auto view = kvring::TiledView<Tiled>::Of(kv, 85, 100);
  EXPECT_EQ(view.pos_begin, 80u);
  EXPECT_EQ(view.pos_end, 101u);
  ASSERT_EQ(view.num_tiles, 2u);
  EXPECT_EQ(view.Tile(0).first_pos, 80u);
  EXPECT_EQ(view.Tile(0).slot, 32u);
  EXPECT_EQ(view.Tile(1).first_pos, 96u);
  EXPECT_EQ(view.Tile(1).slot, 0u);
}

// A prefill's items go kv_head by kv_head, each over its query blocks in order, so that
// consecutive items read one kv_head's K/V; every (block, kv_head) is one item.
TEST(AttentionWork, ItemsGoKvHeadByKvHead) {
  kvring::KVShape shape{1024, 4, 64, 64};
  kvring::KVView<FlashLayout> kv;
  kv.layout = FlashLayout(shape);
  kv.end_pos = 1000;
  kv.visibility = Global();
  std::vector<float> q(8 * 64);
  kvring::AttentionBatch batch;
  batch.queries_f32 = q.data();
  batch.out_f32 = q.data();
  batch.first_q_pos = 0;
  batch.num_queries = 1000;
  batch.num_q_heads = 8;  // group 2
  batch.head_dim = 64;
  kv.k = reinterpret_cast<const BF16*>(q.data());
  kv.v = kv.k;
  const kvring::AttentionWork work = kvring::AttentionWork::Plan(kv, batch, {});
  const uint64_t per_block = kvring::AttentionWork::kTargetRows / 2;
  const uint64_t blocks = (1000 + per_block - 1) / per_block;
  ASSERT_FALSE(work.Splits());
  ASSERT_EQ(work.NumItems(), blocks * 4);
  for (uint64_t i = 0; i < work.NumItems(); ++i) {
    const kvring::AttentionItem item = work.Item(i);
    EXPECT_EQ(item.kv_head, i / blocks) << i;
    EXPECT_EQ(item.first_query, i % blocks * per_block) << i;
    EXPECT_EQ(item.num_queries,
              i % blocks + 1 < blocks ? per_block : 1000 - (blocks - 1) * per_block)
        << i;
  }
}

TEST(AttentionWork, SplitPointsDependOnPositionsOnly) {
  kvring::KVShape shape{8192, 2, 64, 64};
  kvring::KVView<FlashLayout> kv;
  kv.layout = FlashLayout(shape);
  kv.end_pos = 5001;
  kv.visibility = Global();
  std::vector<float> q(16 * 64);
  std::vector<float> out(16 * 64);
  kvring::AttentionBatch batch;
  batch.queries_f32 = q.data();
  batch.out_f32 = out.data();
  batch.first_q_pos = 5000;
  batch.num_queries = 1;
  batch.num_q_heads = 8;
  batch.head_dim = 64;
  AttentionOptions options;
  options.split_positions = 1000;  // rounded up to 1024
  kv.k = reinterpret_cast<const BF16*>(q.data());
  kv.v = kv.k;
  const kvring::AttentionWork work = kvring::AttentionWork::Plan(kv, batch, options);
  ASSERT_TRUE(work.Splits());
  EXPECT_EQ(work.NumSplits(), 5u);
  EXPECT_EQ(work.NumItems(), 10u);
  EXPECT_EQ(work.NumMerges(), 2u);
  EXPECT_EQ(work.Item(0).pos_begin, 0u);
  EXPECT_EQ(work.Item(0).pos_end, 1024u);
  EXPECT_EQ(work.Item(4).pos_begin, 4096u);
  EXPECT_EQ(work.Item(4).pos_end, 5001u);
  EXPECT_EQ(work.Item(5).kv_head, 1u);
  batch.num_queries = 1;
  batch.first_q_pos = 1000;
  kv.end_pos = 1001;
  EXPECT_FALSE(kvring::AttentionWork::Plan(kv, batch, options).Splits());
}

}  // namespace kvring_test

#endif  // HWY_ONCE
