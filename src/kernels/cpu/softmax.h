// Internal to the CPU kernels: the one softmax row of the attention
// probabilities and the cross-entropy.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/vec_exp.h"

namespace scaletrain::cpu {

// What the cross-entropy's loss needs of a row besides its probabilities.
struct SoftmaxRowStats {
  float max;
  float sum_exp;  // of x - max
};

// out[0..n) = softmax(x[0..n)); out[n..padded) = 0. out may be x. The order
// of the floating-point operations is part of the contract (losses and
// gradients are compared bitwise across builds and layouts): the max, then
// each exp(x - max) written and summed, then one multiply by 1 / sum. Inline
// so that its simd loops vectorise in each caller.
inline SoftmaxRowStats SoftmaxRow(float* out, const float* x, int64_t n, int64_t padded) {
  float mx = x[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = VecExp(x[j] - mx);
    out[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) out[j] *= inv;
  std::fill(out + n, out + padded, 0.0f);
  return {mx, sum};
}

}  // namespace scaletrain::cpu
