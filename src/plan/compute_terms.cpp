#include "plan/compute_terms.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/param_layout.h"

namespace scaletrain::plan {

namespace {

// The gradient buffer holds the dtype it is reduced in (GradReduceFor):
// 16 bits when the layout reduces in the compute precision (Megatron-LM's
// fp16 default, whose unfused accumulation keeps an fp16 buffer), else fp32.
bool HalfGradientBuffer(const Layout& l, const Software& sw) {
  return l.precision != Precision::kFP32 && GradReduceFor(l, sw) == GradReduce::kCompute;
}

}  // namespace

Result<double> MatmulPeakFlopsPerS(const GpuSpec& gpu, Precision p) {
  const double peak = gpu.PeakTflops(p) * 1e12;
  if (peak > 0) return peak;
  std::string has;
  for (Precision q :
       {Precision::kBF16, Precision::kFP16, Precision::kFP8, Precision::kTF32, Precision::kFP32}) {
    if (gpu.PeakTflops(q) > 0) has += std::string(has.empty() ? "" : ", ") + PrecisionName(q);
  }
  return InvalidArgument(gpu.name + " has no " + std::string(PrecisionName(p)) +
                         " matrix rate in the catalog; use --precision " +
                         (has.empty() ? "bf16" : has) + " (the rates it has)");
}

GpuRates GpuRatesAt(const GpuSpec& gpu, double peak_flops_per_s) {
  GpuRates r;
  r.matmul_flops_per_s = peak_flops_per_s * gpu.matmul_efficiency * gpu.sustained_clock_ratio;
  r.hbm_bytes_per_s = gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency;
  r.sm_count = gpu.sm_count;
  return r;
}

double ActivationElemBytes(Precision p) { return p == Precision::kFP32 ? 4.0 : 2.0; }

int64_t GradElemBytes(const Layout& l, const Software& sw) {
  return HalfGradientBuffer(l, sw) ? 2 : 4;
}

LayerShape LayerShapeOf(const ModelSpec& m, const Layout& l) {
  LayerShape s;
  s.micro_batch = static_cast<double>(l.micro_batch);
  s.seq = static_cast<double>(m.block_size);
  s.tokens = s.micro_batch * s.seq;
  s.hidden = static_cast<double>(m.n_embd);
  s.ffn_hidden = static_cast<double>(m.ffn_hidden);
  s.heads = static_cast<double>(m.n_head);
  s.head_dim = static_cast<double>(m.head_dim());
  // Key/value width as tp x a rank's: with fewer KV heads than tp each rank
  // computes all of them (replicated, KvHeadsReplicated), not 1/tp.
  s.kv_dim = static_cast<double>(KvWidthTimesTp(m, l.tp));
  s.vocab = static_cast<double>(PaddedVocabSize(m.padded_vocab_size, 1, l.tp));
  s.tp = static_cast<double>(l.tp);
  s.sp = l.sp;
  s.swiglu = m.activation() == Activation::kSwiGLU;
  s.rope = m.arch == Arch::kLlama;
  s.elem_bytes = ActivationElemBytes(l.precision);
  return s;
}

double TileWaveEfficiency(double m, double n, double batch, double sms) {
  if (sms <= 0) return 1.0;
  static constexpr double kTiles[][2] = {{256, 128}, {128, 256}, {128, 128}};
  double best = 0;
  for (const auto& tile : kTiles) {
    const double tiles = std::ceil(m / tile[0]) * std::ceil(n / tile[1]) * batch;
    const double waves = std::ceil(tiles / sms);
    best = std::max(best, m * n * batch / (waves * sms * tile[0] * tile[1]));
  }
  return best;
}

double GemmSecondsEach(const GpuRates& r, double elem_bytes, double batch, double m, double n,
                       double k) {
  const double util = TileWaveEfficiency(m, n, batch, r.sm_count);
  return std::max(2.0 * m * n * k / (r.matmul_flops_per_s * util),
                  elem_bytes * (m * k + k * n + m * n) / r.hbm_bytes_per_s);
}

double GemmSeconds(const GpuRates& r, double elem_bytes, double batch, double m, double n,
                   double k) {
  return batch * GemmSecondsEach(r, elem_bytes, batch, m, n, k);
}

PassSeconds WeightGemmSeconds(const GpuSpec& gpu, const GpuRates& r, double elem_bytes, double m,
                              double n, double k) {
  for (const auto& g : gpu.measured_gemms) {
    if (static_cast<double>(g.m) == m && static_cast<double>(g.n) == n &&
        static_cast<double>(g.k) == k) {
      return {2.0 * m * n * k / (g.fwd_tflops * 1e12), 4.0 * m * n * k / (g.bwd_tflops * 1e12)};
    }
  }
  const double f = GemmSeconds(r, elem_bytes, 1.0, m, n, k);
  return {f, 2.0 * f};
}

PassSeconds LayerGemmSeconds(const LayerShape& s, const GpuSpec& gpu, const GpuRates& r) {
  const double T = s.tokens, h = s.hidden, F = s.ffn_hidden, kvd = s.kv_dim, t = s.tp;
  auto weight = [&](double m, double n, double k) {
    return WeightGemmSeconds(gpu, r, s.elem_bytes, m, n, k);
  };
  PassSeconds sum;
  for (const auto& [fwd, bwd] :
       {weight(T, (h + 2 * kvd) / t, h), weight(T, h, h / t),
        s.swiglu ? weight(T, 2 * F / t, h) : weight(T, F / t, h), weight(T, h, F / t)}) {
    sum.fwd += fwd, sum.bwd += bwd;
  }
  return sum;
}

PassSeconds ElementwiseSeconds(const LayerShape& s, const Software& sw, double hbm_bytes_per_s) {
  // Elements read + written per token by each op, forward and backward, from
  // the op definitions:
  //   LayerNorm        fwd: read x, write y (2h)   bwd: read x, dy, write dx (3h)
  //   residual add     fwd: read 2, write 1 (3h)   bwd: the two branches' gradients
  //                                                 are summed: read 2, write 1 (3h)
  //   bias-dropout-add fwd: x, residual in, out, 1-byte mask (3.5h)
  //   (legacy)         bwd: read dy and mask, write dx (2.5h), bias gradient
  //                         reduction reads dy (1h), plus the branch sum (3h)
  //   GeLU             fwd: read, write (2F)       bwd: read x, dy, write dx (3F)
  //   SwiGLU           fwd: read gate, up, write (3F)
  //                    bwd: read gate, up, dy, write both gradients (5F)
  //   RoPE on q and k  fwd and bwd: read, write (2 (h + kvd))
  const double h = s.hidden, F = s.ffn_hidden, kvd = s.kv_dim, t = s.tp, T = s.tokens;
  const double rep_div = s.sp ? t : 1.0;
  const double norms_f = 2 * 2 * h, norms_b = 2 * 3 * h;
  const double adds_f = sw.dropout ? 2 * 3.5 * h : 2 * 3 * h;
  const double adds_b = sw.dropout ? 2 * (2.5 * h + 1 * h + 3 * h) : 2 * 3 * h;
  const double act_f = s.swiglu ? 3 * F : 2 * F, act_b = s.swiglu ? 5 * F : 3 * F;
  const double rope = s.rope ? 2 * (h + kvd) : 0.0;
  const double elem_f =
      T * s.elem_bytes * ((norms_f + adds_f) / rep_div + (act_f + rope) / t) / hbm_bytes_per_s;
  const double elem_b =
      T * s.elem_bytes * ((norms_b + adds_b) / rep_div + (act_b + rope) / t) / hbm_bytes_per_s;
  return {elem_f, elem_b};
}

PassSeconds HeadSeconds(const LayerShape& s, const GpuSpec& gpu, const Software& sw,
                        const GpuRates& r) {
  // Cross-entropy over the (TP-split) logits in fp32, bytes per logit:
  // legacy (Megatron's vocab-parallel cross-entropy, one op per pass): upcast
  // (read 2, write 4), max (4), subtract (8), exp (8), sum (4), divide (8) =
  // 38 forward; backward scales the saved softmax (8) and casts it back to
  // 16 bits (6) = 14. modern (PyTorch cross_entropy on upcast logits: fused
  // log-softmax reads twice and writes once): upcast (6) + 12 = 18 forward;
  // backward writes the one-hot gradient (4), log-softmax backward (12) and
  // the cast back (6) = 22.
  const double ce_f = sw.fused_log_softmax ? 18.0 : 38.0, ce_b = sw.fused_log_softmax ? 22.0 : 14.0;
  const double T = s.tokens, V = s.vocab, t = s.tp;
  const PassSeconds logits = WeightGemmSeconds(gpu, r, s.elem_bytes, T, V / t, s.hidden);
  return {logits.fwd + T * (V / t) * ce_f / r.hbm_bytes_per_s,
          logits.bwd + T * (V / t) * ce_b / r.hbm_bytes_per_s};
}

double EmbeddingSeconds(const LayerShape& s, double hbm_bytes_per_s) {
  return s.tokens * s.hidden * s.elem_bytes * 2.0 / hbm_bytes_per_s;
}

double GradAccumulationSeconds(int64_t numel, int64_t grad_elem_bytes, double hbm_bytes_per_s) {
  // Each 16-bit weight gradient is read (2) and added into the buffer: read
  // and write one element of it. The buffer is fp32 for bf16 (2 + 4 + 4
  // bytes); Megatron-LM keeps it in fp16 for fp16 runs unless
  // --accumulate-allreduce-grads-in-fp32 is given (2 + 2 + 2).
  const double accum_bytes = 2.0 + 2.0 * static_cast<double>(grad_elem_bytes);
  return static_cast<double>(numel) * accum_bytes / hbm_bytes_per_s;
}

double LayerRecomputeSeconds(Recompute rc, const Software& sw, const PassSeconds& layer,
                             const PassSeconds& attention) {
  // Full recomputation's repeated TP collectives are in the TP list
  // (TpPpStepOptions::recompute_full), not here.
  if (rc == Recompute::kFull) return layer.fwd;
  if (rc == Recompute::kSelective && !sw.flash_attention) return attention.fwd;
  // Every other matmul and the element-wise work between them: about half
  // of the layer's forward outside attention.
  if (rc == Recompute::kOp) return 0.5 * (layer.fwd - attention.fwd);
  return 0;
}

MicroBatchSeconds MicroBatchComputeSeconds(const LayerShape& s, const GpuSpec& gpu,
                                           const Software& sw, const GpuRates& r, Recompute rc) {
  const PassSeconds gemm = LayerGemmSeconds(s, gpu, r);
  const PassSeconds attention = AttentionSeconds(s, gpu, sw, r);
  const PassSeconds elementwise = ElementwiseSeconds(s, sw, r.hbm_bytes_per_s);
  MicroBatchSeconds mb;
  mb.layer.fwd = gemm.fwd + attention.fwd + elementwise.fwd;
  mb.layer.bwd = gemm.bwd + attention.bwd + elementwise.bwd;
  mb.layer_recompute = LayerRecomputeSeconds(rc, sw, mb.layer, attention);
  mb.head = HeadSeconds(s, gpu, sw, r);
  mb.embedding = EmbeddingSeconds(s, r.hbm_bytes_per_s);
  return mb;
}

PassSeconds StageComputeSeconds(const RankParams& stage, const MicroBatchSeconds& mb,
                                const Software& sw, int64_t grad_elem_bytes,
                                double hbm_bytes_per_s) {
  const double n = static_cast<double>(stage.layers);
  double fwd = n * mb.layer.fwd, bwd = n * mb.layer.bwd;
  if (stage.embedding) fwd += mb.embedding, bwd += mb.embedding;
  if (stage.head) fwd += mb.head.fwd, bwd += mb.head.bwd;
  if (!sw.fused_grad_accumulation) {
    bwd += GradAccumulationSeconds(stage.numel, grad_elem_bytes, hbm_bytes_per_s);
  }
  return {fwd, bwd};
}

StageSeconds StageMicroBatchSeconds(const PassSeconds& compute, double layers,
                                    double layer_recompute, const PassSeconds& tp_comm) {
  StageSeconds s;
  s.fwd = compute.fwd + tp_comm.fwd;
  s.bwd = compute.bwd + layers * layer_recompute + tp_comm.bwd;
  s.compute = compute.fwd + compute.bwd;
  s.recompute = layers * layer_recompute;
  s.tp_comm = tp_comm.fwd + tp_comm.bwd;
  return s;
}

double PipelineBubbleSeconds(double makespan_s, double micro_batches, double chunks,
                             double chunk_fwd_s, double chunk_bwd_s) {
  return std::max(0.0, makespan_s - micro_batches * chunks * (chunk_fwd_s + chunk_bwd_s));
}

// 16-bit training with fp32 master weights: AdamW reads the fp32 master
// weight, both moments and the fp32 gradient (16), writes the master weight
// and moments (12), writes the 16-bit copy (2), and the gradient norm for
// clipping plus zeroing the gradient buffer touch the gradient twice more
// (4 + 4): 38. fp16 adds the loss-scale pass (unscale with the inf check:
// read and write the fp32 gradient, 8). Stacks whose optimizer runs its steps
// as separate passes (Megatron-LM 2021-22's Float16Optimizer, DeepSpeed
// 2022's bf16 optimizer) copy master to 16-bit weights in a pass of their own
// (read 4 more), and in fp16 their gradient buffer is fp16 (see
// GradAccumulationSeconds): cast it to fp32 first (read 2, write 4) and zero
// 2 bytes, not 4. In fp32 training the parameters are the master copy: read
// parameter, gradient and both moments (16), write parameter and moments
// (12), plus the gradient-norm read and the zeroing write of the gradient
// (4 + 4): 36.
double OptimizerBytesPerParam(const Layout& l, const Software& sw) {
  if (l.precision == Precision::kFP32) return 36.0;
  double bytes = 38.0;
  if (l.precision == Precision::kFP16) bytes += 8.0;
  if (sw.separate_optimizer_passes) {
    bytes += 4.0;
    if (HalfGradientBuffer(l, sw)) bytes += 6.0 - 2.0;
  }
  return bytes;
}

double OptimizerSeconds(int64_t numel, const Layout& l, const Software& sw,
                        double hbm_bytes_per_s) {
  const double params =
      static_cast<double>(numel) / (l.zero >= 1 ? static_cast<double>(l.dp) : 1.0);
  return params * OptimizerBytesPerParam(l, sw) / hbm_bytes_per_s;
}

}  // namespace scaletrain::plan
