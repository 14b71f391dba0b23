// GELU (tanh form), SwiGLU and the residual add.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_exp.h"

namespace scaletrain::cpu {

namespace {

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

// SwiGLU: h = silu(g) u with silu(g) = g sigmoid(g). d silu / dg =
// sigmoid(g) (1 + g (1 - sigmoid(g))).
void SwiGLUForward(float* out, const float* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = gate_up + i * 2 * F;
    const float* u = g + F;
    float* o = out + i * F;
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) o[j] = g[j] / (1.0f + VecExp(-g[j])) * u[j];
  }
}

void SwiGLUBackward(float* dgate_up, const float* gate_up, const float* dout, int64_t N,
                    int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = gate_up + i * 2 * F;
    const float* u = g + F;
    const float* d = dout + i * F;
    float* dg = dgate_up + i * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) {
      const float sig = 1.0f / (1.0f + VecExp(-g[j]));
      const float silu = g[j] * sig;
      dg[j] += d[j] * u[j] * sig * (1.0f + g[j] * (1.0f - sig));
      du[j] += d[j] * silu;
    }
  }
}

}  // namespace scaletrain::cpu
