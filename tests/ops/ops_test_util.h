#pragma once

#include <cmath>
#include <random>
#include <vector>

namespace pagoda::test {

// Float32 unit roundoff: every float32 operation rounds with relative error <= u.
inline constexpr double kU = 0x1p-24;

// Random values in +-[0.1, 1] (never zero, both signs).
inline std::vector<float> random_nonzero(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

}  // namespace pagoda::test
