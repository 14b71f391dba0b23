// The attention core's time, three ways (declared in compute_terms.h).
#include <cmath>

#include "plan/compute_terms.h"

namespace scaletrain::plan {

namespace {

// FlashAttention's per-query-block fixed cost, in keys: loading Q, the partly
// masked diagonal block, writing O and the log-sum-exp are worth about two
// 128-key blocks. This reproduces FlashAttention-2's measured curve on H100
// (FlashAttention-3 paper, Figs. 5-6, head dim 128: fwd+bwd 0.30 of peak at
// 2k, 0.32 at 4k, 0.33 at 8k-16k).
constexpr double kAttentionBlockOverheadKeys = 256.0;

}  // namespace

PassSeconds FlashAttentionSeconds(const LayerShape& s, const GpuSpec& gpu, const Software& sw) {
  const double bf16_peak = gpu.PeakTflops(Precision::kBF16) * 1e12;
  const double fwd_flops = 0.5 * 4.0 * s.micro_batch * s.seq * s.seq * s.cp * s.hidden / s.tp;
  const double rate = bf16_peak * gpu.attention_efficiency * gpu.sustained_clock_ratio * s.seq /
                      (s.seq + kAttentionBlockOverheadKeys);
  return {sw.attention_fwd_slowdown * fwd_flops / rate,
          sw.attention_bwd_slowdown * 2.5 * fwd_flops / rate};
}

const GpuSpec::MeasuredAttention* MeasuredAttentionFor(const GpuSpec& gpu, const LayerShape& s) {
  for (const auto& a : gpu.measured_attention) {
    if (static_cast<double>(a.batch) == s.micro_batch && static_cast<double>(a.seq) == s.seq &&
        static_cast<double>(a.hidden) == s.hidden && static_cast<double>(a.heads) == s.heads &&
        s.tp == 1.0 && s.cp == 1.0) {
      return &a;
    }
  }
  return nullptr;
}

PassSeconds UnfusedAttentionSeconds(const LayerShape& s, const Software& sw, const GpuRates& r) {
  double done = 1.0;  // share of the s x s scores computed
  if (sw.causal_block_rows > 0) {
    const double nb = std::ceil(s.seq / static_cast<double>(sw.causal_block_rows));
    done = (nb + 1.0) / (2.0 * nb);
  }
  const double heads_local = s.heads / s.tp;
  const double batches = s.micro_batch * heads_local * done;
  // QK^T, then scores x V. The second is written as its batch times one GEMM
  // so that the sum rounds as the planner's figures always have (where the
  // compiler contracts a multiply and an add, it is this one).
  const double bmm = GemmSeconds(r, s.elem_bytes, batches, s.seq, s.seq, s.head_dim) +
                     batches * GemmSecondsEach(r, s.elem_bytes, batches, s.seq, s.head_dim, s.seq);
  const double elems = batches * s.seq * s.seq;
  // Fused scale-mask-softmax reads and writes the scores once each way;
  // dropout on the probabilities adds a read, a write and a 1-byte mask.
  double fwd_bytes = 2.0 * s.elem_bytes, bwd_bytes = 3.0 * s.elem_bytes;
  if (sw.dropout) fwd_bytes += 2.0 * s.elem_bytes + 1.0, bwd_bytes += 2.0 * s.elem_bytes + 1.0;
  return {bmm + elems * fwd_bytes / r.hbm_bytes_per_s,
          2.0 * bmm + elems * bwd_bytes / r.hbm_bytes_per_s};
}

PassSeconds AttentionSeconds(const LayerShape& s, const GpuSpec& gpu, const Software& sw,
                             const GpuRates& r) {
  if (sw.flash_attention) return FlashAttentionSeconds(s, gpu, sw);
  if (const GpuSpec::MeasuredAttention* a = MeasuredAttentionFor(gpu, s)) {
    return {a->fwd_s, a->bwd_s};
  }
  return UnfusedAttentionSeconds(s, sw, r);
}

}  // namespace scaletrain::plan
