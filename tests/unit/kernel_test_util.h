// What the CPU kernel tests (test_kernels.cpp, test_kernels_llama.cpp) share:
// the float and float64 vectors they compare and how they fill them, and the
// tolerances of a float kernel against its float64 reference.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace scaletrain::cpu::test {

using VecF = std::vector<float>;
using VecD = std::vector<double>;

// Float kernels vs float64 references. Forward values carry float rounding
// (~1e-7 relative per operation, summed over at most a few hundred terms);
// gradients additionally carry the finite-difference truncation error
// (O(h^2) with h = 1e-6, negligible) and its rounding (~1e-10).
constexpr double kFwdTol = 2e-5;
constexpr double kGradTol = 1e-4;
constexpr double kFdStep = 1e-6;

// n values uniform in [lo, hi), the same for the same seed.
inline VecF RandomVec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  VecF v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace scaletrain::cpu::test
