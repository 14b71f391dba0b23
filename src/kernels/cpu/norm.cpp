// LayerNorm and RMSNorm forward and backward, one row per loop iteration.
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {

namespace {
constexpr float kLayerNormEps = 1e-5f;
}  // namespace

void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const float m = sum / static_cast<float>(C);
    // Two passes (mean, then squared deviations) rather than E[x^2]-E[x]^2,
    // which cancels badly when |mean| >> std (e.g. the residual stream).
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) {
      const float d = x[c] - m;
      sq += d * d;
    }
    const float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + kLayerNormEps);
    float* y = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean, const float* rstd,
                       int64_t N, int64_t C) {
  const bool want_params = dweight != nullptr || dbias != nullptr;
  const int nthreads = omp_get_max_threads();
  // Each thread sums its rows' dweight/dbias into its own slice; the slices
  // are added in thread order afterwards, so for a given thread count the
  // result is the same run to run (no atomics, no unordered reduction).
  std::vector<float> partial(want_params ? static_cast<size_t>(nthreads) * 2 * C : 0, 0.0f);
  int used_threads = 1;
#pragma omp parallel num_threads(nthreads)
  {
#pragma omp single
    used_threads = omp_get_num_threads();
    float* pw =
        want_params ? partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * C : nullptr;
    float* pb = want_params ? pw + C : nullptr;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + i * C;
      const float* dy = dout + i * C;
      const float m = mean[i];
      const float s = rstd[i];
      // The weight-gradient half alone (a zero-bubble W pass) neither reads
      // the weight nor needs the row sums.
      if (dinp != nullptr) {
        // dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), where
        // dnorm = dy * weight and norm = (x - m) * s.
        float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
#pragma omp simd reduction(+ : sum_dnorm, sum_dnorm_norm)
        for (int64_t c = 0; c < C; ++c) {
          const float norm = (x[c] - m) * s;
          const float dnorm = dy[c] * weight[c];
          sum_dnorm += dnorm;
          sum_dnorm_norm += dnorm * norm;
        }
        const float mean_dnorm = sum_dnorm / static_cast<float>(C);
        const float mean_dnorm_norm = sum_dnorm_norm / static_cast<float>(C);
        float* dx = dinp + i * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float norm = (x[c] - m) * s;
          const float dnorm = dy[c] * weight[c];
          dx[c] += (dnorm - mean_dnorm - norm * mean_dnorm_norm) * s;
        }
      }
      if (want_params) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          pw[c] += dy[c] * (x[c] - m) * s;
          pb[c] += dy[c];
        }
      }
    }
  }
  if (!want_params) return;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    float w = 0.0f, b = 0.0f;
    for (int t = 0; t < used_threads; ++t) {
      w += partial[static_cast<size_t>(t) * 2 * C + c];
      b += partial[static_cast<size_t>(t) * 2 * C + C + c];
    }
    if (dweight != nullptr) dweight[c] += w;
    if (dbias != nullptr) dbias[c] += b;
  }
}

void RMSNormForward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                    int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) sq += x[c] * x[c];
    const float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + eps);
    float* y = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = x[c] * s * weight[c];
    rstd[i] = s;
  }
}

void RMSNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int64_t N, int64_t C) {
  const int nthreads = omp_get_max_threads();
  // Per-thread dweight slices, summed in thread order (as LayerNormBackward).
  std::vector<float> partial(dweight != nullptr ? static_cast<size_t>(nthreads) * C : 0, 0.0f);
  int used_threads = 1;
#pragma omp parallel num_threads(nthreads)
  {
#pragma omp single
    used_threads = omp_get_num_threads();
    float* pw = dweight != nullptr ? partial.data() + static_cast<size_t>(omp_get_thread_num()) * C
                                   : nullptr;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + i * C;
      const float* dy = dout + i * C;
      const float s = rstd[i];
      if (dinp != nullptr) {  // (not in a W pass: no weight read)
        // y = w x s with s = (mean(x^2) + eps)^-1/2, so
        // dx = s (w dy - x s^2 mean(w dy x)).
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; ++c) dot += weight[c] * dy[c] * x[c];
        const float k = s * s * dot / static_cast<float>(C);
        float* dx = dinp + i * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dx[c] += s * (weight[c] * dy[c] - x[c] * k);
      }
      if (pw != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) pw[c] += dy[c] * x[c] * s;
      }
    }
  }
  if (dweight == nullptr) return;
  for (int t = 0; t < used_threads; ++t) {
    const float* src = partial.data() + static_cast<size_t>(t) * C;
    for (int64_t c = 0; c < C; ++c) dweight[c] += src[c];
  }
}

}  // namespace scaletrain::cpu
