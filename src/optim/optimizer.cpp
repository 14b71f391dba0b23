#include "optim/optimizer.h"

#include <algorithm>
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

AdamW::AdamW(const ParamLayout* layout, const AdamWOptions& opt, std::vector<FlatRange> owned)
    : layout_(layout), opt_(opt), owned_(std::move(owned)) {
  if (owned_.empty()) owned_.push_back({0, layout->total_numel});
  int64_t state = 0;
  for (const FlatRange& r : owned_) {
    for (const auto& e : layout_->entries) {
      const int64_t b = std::max(r.begin, e.offset), en = std::min(r.end, e.offset + e.numel);
      if (b < en) segments_.push_back({b, state + (b - r.begin), en - b, e.weight_decay});
    }
    state += r.size();
  }
  state_numel_ = state;
  m_ = Buffer(static_cast<size_t>(state) * sizeof(float));
  v_ = Buffer(static_cast<size_t>(state) * sizeof(float));
}

void AdamW::Step(float* params, const float* grads, double lr, double grad_scale,
                 bool grads_compact, bool params_compact) {
  ++t_;
  for (const Segment& s : segments_) {
    const float wd = s.decay ? static_cast<float>(opt_.weight_decay) : 0.0f;
    const float* g = grads + (grads_compact ? s.state_begin : s.flat_begin);
    cpu::AdamWUpdate(params + (params_compact ? s.state_begin : s.flat_begin), g,
                     m_.f32() + s.state_begin, v_.f32() + s.state_begin, s.count,
                     static_cast<float>(lr), static_cast<float>(opt_.beta1),
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
