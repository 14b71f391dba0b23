#include "train/optimizer.h"

#include <cmath>

#include "kernels/cpu/ops.h"

namespace scaletrain {

double LrSchedule::At(int64_t step) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  double ratio = static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps);
  ratio = std::min(1.0, std::max(0.0, ratio));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

AdamW::AdamW(const ParamLayout* layout, const AdamWOptions& opt)
    : layout_(layout),
      opt_(opt),
      m_(static_cast<size_t>(layout->total_numel) * sizeof(float)),
      v_(static_cast<size_t>(layout->total_numel) * sizeof(float)) {}

void AdamW::Step(float* params, const float* grads, double lr, double grad_scale) {
  ++t_;
  for (const auto& e : layout_->entries) {
    const float wd = e.weight_decay ? static_cast<float>(opt_.weight_decay) : 0.0f;
    cpu::AdamWUpdate(params + e.offset, grads + e.offset, m_.f32() + e.offset, v_.f32() + e.offset,
                     e.numel, static_cast<float>(lr), static_cast<float>(opt_.beta1),
                     static_cast<float>(opt_.beta2), static_cast<float>(opt_.eps), wd, t_,
                     static_cast<float>(grad_scale));
  }
}

double GlobalGradNorm(const float* grads, int64_t n) { return std::sqrt(cpu::SumSquares(grads, n)); }

double ClipScale(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  const double scale = max_norm / (norm + 1e-6);
  return scale < 1.0 ? scale : 1.0;
}

}  // namespace scaletrain
