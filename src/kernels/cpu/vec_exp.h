// Internal to the CPU kernels: a vectorisable exp shared by GELU, the
// attention softmax and the cross-entropy.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace scaletrain::cpu {

// exp(x) in plain arithmetic so that `omp simd` loops vectorise: libm's expf
// and tanhf stay scalar calls unless the build uses -ffast-math (which we do
// not want for the rest of the code). Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2/2, then a degree-7 Taylor polynomial (truncation error < 1e-8
// relative) and 2^n built in the exponent bits. Above 88 the result
// saturates at e^88; below -87 it is exactly 0 (so -inf gives 0, which the
// attention softmax relies on to mask); NaN passes through. Defined inline
// in this header so it inlines into each caller's simd loop.
inline float VecExp(float x) {
  const bool underflow = x < -87.0f;
  x = std::min(std::max(x, -87.0f), 88.0f);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return underflow ? 0.0f : p * scale;
}

}  // namespace scaletrain::cpu
