// tests/reference/random_floats.h: uniform and normal floats for test data, drop-ins for
// std::uniform_real_distribution<float> and std::normal_distribution<float> written as
// libstdc++ writes them (the same draws and float arithmetic: the same values on x86-64, 3
// million of each checked with g++ and clang++; on aarch64 g++ fuses some multiply-adds of the
// normal values differently, a last-bit difference in one value in seven), without the two
// long double logarithms std::generate_canonical takes on every draw to find the engine's
// bits: g++ folds them, clang++ calls logl, 9 % of the attention sweeps' time and 10 % of the
// pool's random tests under ASan (2026-12-07). Test data only: any engine whose range is a power
// of two up to 2^64.
#ifndef KVRING_TESTS_REFERENCE_RANDOM_FLOATS_H_
#define KVRING_TESTS_REFERENCE_RANDOM_FLOATS_H_

#include <cmath>
#include <cstdint>

namespace kvring {
namespace testing {

// A float in [0, 1) from one draw of `engine`: generate_canonical<float, 24>'s value for an
// engine of at least 24 bits, (draw - min) / range, rounded to float first, never 1.
template <class Engine>
float CanonicalFloat(Engine& engine) {
  static_assert(Engine::max() - Engine::min() >= (uint64_t{1} << 24) - 1, "24 bits a draw");
  // The range, a power of two, as a float (exact; kSpan + 1 would overflow at 2^64).
  constexpr uint64_t kSpan = Engine::max() - Engine::min();
  static_assert((kSpan & (kSpan + 1)) == 0, "a power-of-two range");
  constexpr float kRange = static_cast<float>(kSpan / 2 + 1) * 2.0f;
  const float value = static_cast<float>(engine() - Engine::min()) / kRange;
  return value >= 1.0f ? std::nextafter(1.0f, 0.0f) : value;
}

// std::uniform_real_distribution<float>(a, b): canonical * (b - a) + a.
class UniformFloats {
 public:
  UniformFloats(float a, float b) : a_(a), b_(b) {}
  template <class Engine>
  float operator()(Engine& engine) const {
    return CanonicalFloat(engine) * (b_ - a_) + a_;
  }

 private:
  float a_, b_;
};

// std::normal_distribution<float>(mean, stddev): Marsaglia's polar method, as libstdc++ writes
// it (pairs of draws, the second value of a pair kept for the next call).
class NormalFloats {
 public:
  NormalFloats(float mean, float stddev) : mean_(mean), stddev_(stddev) {}
  template <class Engine>
  float operator()(Engine& engine) {
    float value;
    if (saved_available_) {
      saved_available_ = false;
      value = saved_;
    } else {
      float x, y, r2;
      do {
        x = static_cast<float>(2.0f * CanonicalFloat(engine) - 1.0);
        y = static_cast<float>(2.0f * CanonicalFloat(engine) - 1.0);
        r2 = x * x + y * y;
      } while (r2 > 1.0 || r2 == 0.0);
      const float mult = std::sqrt(-2 * std::log(r2) / r2);
      saved_ = x * mult;
      saved_available_ = true;
      value = y * mult;
    }
    return value * stddev_ + mean_;
  }

 private:
  float mean_, stddev_;
  float saved_ = 0.0f;
  bool saved_available_ = false;
};

}  // namespace testing
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_RANDOM_FLOATS_H_
