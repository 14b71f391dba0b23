// AdamW over the flat parameter buffer, with its two moments in flat buffers
// of the same layout; the learning-rate schedule; global-norm clipping.
#pragma once

#include <cstdint>

#include "core/buffer.h"
#include "model/param_layout.h"

namespace scaletrain {

// Linear warmup over warmup_steps, then cosine decay from lr to min_lr at
// total_steps (nanoGPT's schedule). `step` is 0-based.
struct LrSchedule {
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup_steps = 0, total_steps = 1;
  double At(int64_t step) const;
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const ParamLayout* layout, const AdamWOptions& opt);
  // One update with learning rate lr; grads are multiplied by grad_scale
  // first (gradient clipping). Decay applies to entries with weight_decay.
  void Step(float* params, const float* grads, double lr, double grad_scale);

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  float* exp_avg() { return m_.f32(); }
  float* exp_avg_sq() { return v_.f32(); }
  const float* exp_avg() const { return m_.f32(); }
  const float* exp_avg_sq() const { return v_.f32(); }
  size_t state_bytes() const { return m_.size_bytes() + v_.size_bytes(); }

 private:
  const ParamLayout* layout_;
  AdamWOptions opt_;
  Buffer m_, v_;
  int64_t t_ = 0;
};

// L2 norm of all gradients, accumulated in double.
double GlobalGradNorm(const float* grads, int64_t n);
// The factor that brings the norm down to max_norm (1 if already below, or
// if max_norm is 0: clipping off), as torch.nn.utils.clip_grad_norm_.
double ClipScale(double norm, double max_norm);

}  // namespace scaletrain
