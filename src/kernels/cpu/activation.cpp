// GELU (tanh form) and the residual add.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {

namespace {

// exp(x) in plain arithmetic so that `omp simd` loops vectorise: libm's expf
// and tanhf stay scalar calls unless the build uses -ffast-math (which we do
// not want for the rest of the code). Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2/2, then a degree-7 Taylor polynomial (truncation error < 1e-8
// relative) and 2^n built in the exponent bits. Above 88 the result
// saturates at e^88; below -87 it is exactly 0 (so -inf gives 0, which the
// attention softmax relies on to mask); NaN passes through. The same helper
// is repeated in attention.cpp and loss.cpp: it must be inlined into each
// caller's loop to vectorise, and each op family keeps to its own file.
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

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

}  // namespace

// 0.5 (1 + tanh(u)) == sigmoid(2u), so gelu(x) = x / (1 + exp(-2u)): no
// tanh, and no cancellation in 1 + tanh(u) for large negative x.
void GeluForward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + kGeluC * x * x * x);
    out[i] = x / (1.0f + VecExp(-2.0f * u));
  }
}

// With s = sigmoid(2u): d/dx = s + 2 x s (1 - s) du/dx, since
// 1 - tanh(u)^2 = 4 s (1 - s).
void GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + kGeluC * x * x * x);
    const float s = 1.0f / (1.0f + VecExp(-2.0f * u));
    const float du = kGeluK * (1.0f + 3.0f * kGeluC * x * x);
    dinp[i] += dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
  }
}

void ResidualForward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void ResidualBackward(float* da, float* db, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace scaletrain::cpu
