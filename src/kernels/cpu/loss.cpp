// Softmax cross-entropy over the real vocabulary of a padded logits matrix.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/vec_exp.h"

namespace scaletrain::cpu {

void CrossEntropyForward(float* losses, float* probs, const float* logits, const int32_t* targets,
                         int64_t N, int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * Vp;
    const SoftmaxRowStats row = SoftmaxRow(probs + i * Vp, x, V, Vp);
    // From the logits, not log(p[target]): a target probability that
    // underflows to 0 would give an infinite loss.
    losses[i] = std::log(row.sum_exp) - (x[targets[i]] - row.max);
  }
}

void CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                          int64_t N, int64_t V, int64_t Vp) {
  // The whole vocabulary is the shard that starts at 0.
  CrossEntropyShardBackward(dlogits, probs, targets, 0, dloss, N, Vp, V);
}

void CrossEntropyShardMax(float* row_max, const float* logits, int64_t N, int64_t Vl,
                          int64_t valid) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * Vl;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, x[j]);
    row_max[i] = mx;
  }
}

void CrossEntropyShardSums(float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int32_t* targets, int64_t vocab_begin,
                           int64_t N, int64_t Vl, int64_t valid) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * Vl;
    const float mx = row_max[i];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < valid; ++j) sum += VecExp(x[j] - mx);
    sum_exp[i] = sum;
    const int64_t t = static_cast<int64_t>(targets[i]) - vocab_begin;
    target_logit[i] = (t >= 0 && t < valid) ? x[t] : 0.0f;
  }
}

void CrossEntropyShardFinish(float* losses, float* probs, const float* logits,
                             const float* row_max, const float* sum_exp, const float* target_logit,
                             int64_t N, int64_t Vl, int64_t valid) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * Vl;
    float* p = probs + i * Vl;
    const float mx = row_max[i], inv = 1.0f / sum_exp[i];
#pragma omp simd
    for (int64_t j = 0; j < valid; ++j) p[j] = VecExp(x[j] - mx) * inv;
    std::fill(p + valid, p + Vl, 0.0f);
    losses[i] = std::log(sum_exp[i]) - (target_logit[i] - mx);
  }
}

void CrossEntropyShardBackward(float* dlogits, const float* probs, const int32_t* targets,
                               int64_t vocab_begin, float dloss, int64_t N, int64_t Vl,
                               int64_t valid) {
  // dlogits may alias probs: each element is read and then written at the
  // same index, with no dependence across iterations, so `omp simd` is safe.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* p = probs + i * Vl;
    float* d = dlogits + i * Vl;
#pragma omp simd
    for (int64_t j = 0; j < valid; ++j) d[j] = p[j] * dloss;
    const int64_t t = static_cast<int64_t>(targets[i]) - vocab_begin;
    if (t >= 0 && t < valid) d[t] -= dloss;
    std::fill(d + valid, d + Vl, 0.0f);
  }
}

}  // namespace scaletrain::cpu
