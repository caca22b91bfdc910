// bench/twins-inl.h: the headroom twins of kvring's benchmarks, per Highway target: a plain
// vector read of a buffer (what streaming the same bytes costs) and an f32 FMA loop (what the
// same multiply-adds cost). Include inside a benchmark's HWY_NAMESPACE, after hwy/highway.h,
// once per target (foreach_target); HWY_EXPORT them in the HWY_ONCE part.
// (No include guard: per-target code, included inside a namespace.)

namespace hn = hwy::HWY_NAMESPACE;

// The read twin: sums `count` u32 with four independent vector accumulators.
uint32_t ReadTwin(const uint32_t* HWY_RESTRICT p, size_t count) {
  const hn::ScalableTag<uint32_t> d;
  const size_t n = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * n <= count; i += 4 * n) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + i + n));
    a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * n));
    a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * n));
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// The FMA twin: `count` f32 multiply-adds in vectors, with enough independent accumulators
// to cover the FMA latency on every target.
float FmaTwin(uint64_t count, float x) {
  const hn::ScalableTag<float> d;
  const uint64_t n = hn::Lanes(d);
  constexpr size_t kAcc = 12;
  hn::Vec<decltype(d)> acc[kAcc];
  for (size_t i = 0; i < kAcc; ++i) acc[i] = hn::Set(d, static_cast<float>(i));
  const auto m = hn::Set(d, x);
  const auto a = hn::Set(d, 1e-7f);
  const uint64_t iterations = count / (n * kAcc);
  for (uint64_t it = 0; it < iterations; ++it) {
    for (size_t i = 0; i < kAcc; ++i) acc[i] = hn::MulAdd(acc[i], m, a);
  }
  auto sum = acc[0];
  for (size_t i = 1; i < kAcc; ++i) sum = hn::Add(sum, acc[i]);
  return hn::GetLane(hn::SumOfLanes(d, sum));
}
