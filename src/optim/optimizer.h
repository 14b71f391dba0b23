// AdamW over the flat parameter buffer; the learning-rate schedule;
// global-norm clipping.
//
// The optimizer updates the parts of the flat buffer this rank owns: all of
// it on a single rank or under plain data parallelism, its shard of each
// gradient bucket under ZeRO. Its moments are stored compactly, the owned
// ranges one after another, so a ZeRO rank holds 1/dp of them.
#pragma once

#include <cstdint>
#include <vector>

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
  // `owned`: sorted, disjoint ranges this rank updates (empty: the whole
  // layout). Elements past the layout's end (padding) are skipped.
  AdamW(const ParamLayout* layout, const AdamWOptions& opt, std::vector<FlatRange> owned = {});

  // One update with learning rate lr; grads are multiplied by grad_scale
  // first (gradient clipping). Decay applies to entries with weight_decay.
  // `grads` is indexed like the flat buffer, or, if grads_compact, like the
  // moments (the owned ranges one after another: a ZeRO-2 gradient shard).
  // `params_compact`: params too are indexed like the moments (ZeRO-3's shard).
  void Step(float* params, const float* grads, double lr, double grad_scale,
            bool grads_compact = false, bool params_compact = false);

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  // The moments, compact (see top). state_numel() elements each.
  float* exp_avg() { return m_.f32(); }
  float* exp_avg_sq() { return v_.f32(); }
  const float* exp_avg() const { return m_.f32(); }
  const float* exp_avg_sq() const { return v_.f32(); }
  int64_t state_numel() const { return state_numel_; }
  size_t state_bytes() const { return m_.size_bytes() + v_.size_bytes(); }
  const std::vector<FlatRange>& owned() const { return owned_; }

 private:
  // A run of owned elements inside one layout entry: one decay setting.
  struct Segment {
    int64_t flat_begin, state_begin, count;
    bool decay;
  };
  const ParamLayout* layout_;
  AdamWOptions opt_;
  std::vector<FlatRange> owned_;
  std::vector<Segment> segments_;
  int64_t state_numel_ = 0;
  Buffer m_, v_;
  int64_t t_ = 0;
};

// L2 norm of all gradients, accumulated in double.
double GlobalGradNorm(const float* grads, int64_t n);
// The factor that brings the norm down to max_norm (1 if already below, or
// if max_norm is 0: clipping off), as torch.nn.utils.clip_grad_norm_.
double ClipScale(double norm, double max_norm);

}  // namespace scaletrain
