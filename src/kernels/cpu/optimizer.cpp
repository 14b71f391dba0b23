// AdamW over flat parameter buffers, and the squared norm used for gradient
// clipping.
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {

void AdamWUpdate(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int64_t t,
                 float grad_scale) {
  // Bias corrections in double: at large t, 1 - beta2^t in float loses digits
  // (beta2 = 0.999 needs ~1e-7 resolution at t = 1).
  const double td = static_cast<double>(t);
  const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), td)));
  const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), td)));
  const float one_minus_b1 = 1.0f - beta1;
  const float one_minus_b2 = 1.0f - beta2;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + one_minus_b1 * g;
    const float vi = beta2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1;
    const float vhat = vi * inv_bc2;
    param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * param[i]);
  }
}

double SumSquares(const float* x, int64_t n) {
  // Per-thread partials added in thread order: an OpenMP reduction clause
  // combines partials in an unspecified order, and gradient clipping should
  // give the same answer run to run.
  std::vector<double> partial(static_cast<size_t>(omp_get_max_threads()), 0.0);
  int used_threads = 1;
#pragma omp parallel
  {
    const int nt = omp_get_num_threads();
    const int tid = omp_get_thread_num();
    if (tid == 0) used_threads = nt;
    const int64_t begin = n * tid / nt;
    const int64_t end = n * (tid + 1) / nt;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) {
      const double xi = static_cast<double>(x[i]);
      acc += xi * xi;
    }
    partial[static_cast<size_t>(tid)] = acc;
  }
  double sum = 0.0;
  for (int t = 0; t < used_threads; ++t) sum += partial[static_cast<size_t>(t)];
  return sum;
}

}  // namespace scaletrain::cpu
