// Rotary position embeddings (Su et al. 2021) in the Llama / Hugging Face
// arrangement: a head's channels are two halves [x1, x2], and the pair
// (x1[i], x2[i]) at position t turns by the angle t * theta^(-2i/hs).
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {

void RopeApply(float* x, int64_t N, int64_t T, int64_t ld, int64_t heads, int64_t hs, double theta,
               bool inverse) {
  RopeApplyAt(x, N, T, nullptr, ld, heads, hs, theta, inverse);
}

void RopeApplyAt(float* x, int64_t N, int64_t T, const int32_t* positions, int64_t ld,
                 int64_t heads, int64_t hs, double theta, bool inverse) {
  const int64_t half = hs / 2;
  // cos and sin of every (position, pair), computed in double once per call.
  std::vector<float> cos_t(static_cast<size_t>(T * half)), sin_t(static_cast<size_t>(T * half));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hs));
      const double a = static_cast<double>(positions != nullptr ? positions[t] : t) * inv_freq;
      cos_t[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(a));
      sin_t[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(a));
    }
  }
  // The inverse turn (the backward: the rotation's transpose) negates sin.
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* c = cos_t.data() + (n % T) * half;
    const float* s = sin_t.data() + (n % T) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* x1 = x + n * ld + h * hs;
      float* x2 = x1 + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = x1[i], b = x2[i], si = sign * s[i];
        x1[i] = a * c[i] - b * si;
        x2[i] = b * c[i] + a * si;
      }
    }
  }
}

}  // namespace scaletrain::cpu
