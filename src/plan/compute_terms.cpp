#include "plan/compute_terms.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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
  r.gemm_k_overhead = gpu.gemm_k_overhead;
  r.matmul_flops_per_s = peak_flops_per_s * gpu.matmul_efficiency * gpu.sustained_clock_ratio *
                         (1.0 + r.gemm_k_overhead / kMatmulEfficiencyK);
  r.linear_flops_per_s = r.matmul_flops_per_s;
  r.linear_gemm_k_overhead = r.gemm_k_overhead;
  r.hbm_bytes_per_s = gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency;
  r.sm_count = gpu.sm_count;
  return r;
}

Result<GpuRates> GpuRatesFor(const GpuSpec& gpu, Precision p) {
  ST_ASSIGN_OR_RETURN(const double peak, MatmulPeakFlopsPerS(gpu, p));
  if (p != Precision::kFP8) {
    GpuSpec g = gpu;  // a calibration's share for this precision (fp16, tf32, fp32)
    g.matmul_efficiency = gpu.MatmulEfficiency(p);
    return GpuRatesAt(g, peak);
  }
  ST_ASSIGN_OR_RETURN(const double bf16_peak, MatmulPeakFlopsPerS(gpu, Precision::kBF16));
  GpuRates r = GpuRatesAt(gpu, bf16_peak);
  // The FP8 Linears: their share of the FP8 peak; a tile's fixed work (its
  // pipeline fill, its bf16 output written out) takes the time it takes in
  // bf16, which is that many times more depth at the faster rate.
  GpuSpec fp8 = gpu;
  fp8.matmul_efficiency =
      gpu.fp8_matmul_efficiency > 0 ? gpu.fp8_matmul_efficiency : gpu.matmul_efficiency;
  fp8.gemm_k_overhead =
      gpu.gemm_k_overhead * (peak * fp8.matmul_efficiency) / (bf16_peak * gpu.matmul_efficiency);
  const GpuRates f = GpuRatesAt(fp8, peak);
  r.linear_flops_per_s = f.matmul_flops_per_s;
  r.linear_gemm_k_overhead = f.gemm_k_overhead;
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
  s.cp = static_cast<double>(l.cp);
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
  s.rmsnorm = m.arch == Arch::kLlama;
  s.squared_relu = m.activation() == Activation::kSquaredReLU;
  s.fp8_linears = l.precision == Precision::kFP8;
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
  return std::max(2.0 * m * n * (k + r.gemm_k_overhead) / (r.matmul_flops_per_s * util),
                  elem_bytes * (m * k + k * n + m * n) / r.hbm_bytes_per_s);
}

double GemmSeconds(const GpuRates& r, double elem_bytes, double batch, double m, double n,
                   double k) {
  return batch * GemmSecondsEach(r, elem_bytes, batch, m, n, k);
}

namespace {

// The device's measurement of a weight GEMM of exactly this shape, if any.
const GpuSpec::MeasuredGemm* MeasuredGemmAt(const GpuSpec& gpu, double m, double n, double k) {
  for (const auto& g : gpu.measured_gemms) {
    if (static_cast<double>(g.m) == m && static_cast<double>(g.n) == n &&
        static_cast<double>(g.k) == k) {
      return &g;
    }
  }
  return nullptr;
}

}  // namespace

PassSeconds WeightGemmSeconds(const GpuSpec& gpu, const GpuRates& r, double elem_bytes, double m,
                              double n, double k) {
  if (const GpuSpec::MeasuredGemm* g = MeasuredGemmAt(gpu, m, n, k)) {
    return {2.0 * m * n * k / (g->fwd_tflops * 1e12), 4.0 * m * n * k / (g->bwd_tflops * 1e12)};
  }
  const double f = GemmSeconds(r, elem_bytes, 1.0, m, n, k);
  return {f, 2.0 * f};
}

TpOverlapChunks TpOverlapChunksFor(const LayerShape& s, const Software& sw) {
  if (!(sw.tp_comm_overlap && s.sp && s.tp > 1)) return {};
  return {s.tp, Software::kTpOverlapPipelineSplits};
}

PassSeconds LayerGemmSeconds(const LayerShape& s, const GpuSpec& gpu, const GpuRates& r,
                             bool separate_projections, TpOverlapChunks chunks) {
  const double T = s.tokens, h = s.hidden, F = s.ffn_hidden, kvd = s.kv_dim, t = s.tp;
  // These GEMMs run at the Linear rate (FP8's where the layout trains in
  // FP8); a bench profile's measured GEMMs are bf16 ones, so none is taken
  // for FP8.
  GpuRates lr = r;
  if (r.linear_flops_per_s > 0) {
    lr.matmul_flops_per_s = r.linear_flops_per_s;
    lr.gemm_k_overhead = r.linear_gemm_k_overhead;
  }
  static const GpuSpec kUnmeasured;
  const GpuSpec& g = s.fp8_linears ? kUnmeasured : gpu;
  auto weight = [&](double m, double n, double k) {
    return WeightGemmSeconds(g, lr, s.elem_bytes, m, n, k);
  };
  // One pass of a GEMM cut into `c` pieces of T / c rows (a measured shape is
  // taken whole).
  auto split = [&](double c, double n, double k, double whole) {
    if (c <= 1 || MeasuredGemmAt(g, T, n, k) != nullptr) return whole;
    return c * GemmSecondsEach(lr, s.elem_bytes, 1.0, T / c, n, k);
  };
  // Row-parallel (out, down): forward pipelined with the reduce-scatter, the
  // input gradient with the all-gather of the output gradient.
  auto row = [&](double n, double k) {
    const PassSeconds w = weight(T, n, k);
    const double each = w.bwd / 2;
    return PassSeconds{split(chunks.pipeline, n, k, w.fwd), split(chunks.ring, n, k, each) + each};
  };
  // Column-parallel (QKV, up): forward pipelined with the input's all-gather;
  // backward in bulk.
  auto column = [&](double n, double k) {
    const PassSeconds w = weight(T, n, k);
    return PassSeconds{split(chunks.ring, n, k, w.fwd), w.bwd};
  };
  std::vector<PassSeconds> gemms = {row(h, h / t), row(h, F / t)};  // out, down
  if (separate_projections) {
    gemms.insert(gemms.end(), {weight(T, h / t, h), weight(T, kvd / t, h), weight(T, kvd / t, h),
                               weight(T, F / t, h)});
    if (s.swiglu) gemms.push_back(weight(T, F / t, h));
  } else {
    gemms.insert(gemms.end(), {column((h + 2 * kvd) / t, h), column((s.swiglu ? 2 : 1) * F / t, h)});
  }
  PassSeconds sum;
  for (const auto& [fwd, bwd] : gemms) sum.fwd += fwd, sum.bwd += bwd;
  return sum;
}

namespace {

// Bytes per element and kernels of one element-wise op, forward and backward.
struct OpTraffic {
  double fwd_bytes = 0, bwd_bytes = 0, fwd_kernels = 0, bwd_kernels = 0;
};
// The ops of a layer: `rows` runs on every TP rank's whole token rows unless
// SP splits them (norms, residual adds, the gradient sums of a shared
// input), `split` on the rank's 1/tp of the heads or the MLP width. Bytes
// per token.
struct LayerTraffic {
  OpTraffic rows, split;
};
// `count` instances of `op`, each over `elems` elements per token.
void Add(OpTraffic* into, double count, double elems, const OpTraffic& op) {
  into->fwd_bytes += count * elems * op.fwd_bytes, into->bwd_bytes += count * elems * op.bwd_bytes;
  into->fwd_kernels += count * op.fwd_kernels, into->bwd_kernels += count * op.bwd_kernels;
}

// Per element, e the activation's bytes, f = 4 (fp32), from the ops each
// kernel runs (docs/planner.md, "Element-wise work"):
//  fused (Megatron-Core / Transformer Engine, torch.compile):
//   norm             fwd: read x, write y (2e)     bwd: read x, dy, write dx (3e)
//   GeLU             fwd: 2e                        bwd: 3e
//   SwiGLU           fwd: read gate, up, write (3e) bwd: read gate, up, dy, write two (5e)
//   squared ReLU     fwd: 2e                        bwd: 3e
//   RoPE             fwd and bwd: read, write (2e)
//  PyTorch eager:
//   RMSNorm          fwd: x.float() (e+f), pow (2f), mean (f), x*rsqrt (2f),
//                    type_as (f+e), *weight (2e) = 4e + 7f, 6 kernels;
//                    bwd: *weight's two gradients (6e), the cast (e+f), the
//                    scale's two gradients (6f), pow (4f), the sum of x's two
//                    gradients (3f), the cast back (f+e) = 8e + 15f, 7 kernels
//   LayerNorm, GeLU  one ATen kernel each way: as fused
//   SwiGLU           silu (2e), * up (3e) = 5e; bwd: the product's two
//                    gradients (6e), silu's (3e) = 9e
//   squared ReLU     relu (2e), square (2e); bwd: square's (3e), relu's (3e)
//   RoPE             q.float() (e+f), complex multiply (2f), type_as (f+e) =
//                    2e + 4f each way, 3 kernels
//  FP8 training adds the casts of the Linears' inputs and output gradients
//  (LayerElementwiseTraffic).
OpTraffic Norm(const LayerShape& s, const Software& sw) {
  const double e = s.elem_bytes, f = 4.0;
  if (sw.unfused_elementwise && s.rmsnorm) return {4 * e + 7 * f, 8 * e + 15 * f, 6, 7};
  return {2 * e, 3 * e, 1, 1};
}
OpTraffic Activation(const LayerShape& s, const Software& sw) {
  const double e = s.elem_bytes;
  if (s.swiglu) return sw.unfused_elementwise ? OpTraffic{5 * e, 9 * e, 2, 3} : OpTraffic{3 * e, 5 * e, 1, 1};
  if (s.squared_relu && sw.unfused_elementwise) return {4 * e, 6 * e, 2, 2};
  return {2 * e, 3 * e, 1, 1};
}
OpTraffic Rope(const LayerShape& s, const Software& sw) {
  const double e = s.elem_bytes, f = 4.0;
  return sw.unfused_elementwise ? OpTraffic{2 * e + 4 * f, 2 * e + 4 * f, 3, 3} : OpTraffic{2 * e, 2 * e, 1, 1};
}

// FP8 casts (torchao, dynamic tensor-wise scaling): a cast reads its tensor
// for the amax, then reads it again and writes 1 byte. Forward: each Linear's
// input (q, k, v and gate, up each their own in eager, one per input once
// torch.compile dedupes them); backward: each output gradient twice (the input
// gradient's layout and the weight gradient's transpose) after one amax, and
// each saved bf16 input again for the weight gradient. The column-parallel
// inputs are whole token rows on every TP rank (tp x h split by tp).
void AddDynamicFp8Casts(const LayerShape& s, const Software& sw, LayerTraffic* t) {
  const double e = s.elem_bytes, h = s.hidden, F = s.ffn_hidden, kvd = s.kv_dim;
  const OpTraffic fwd{2 * e + 1, 0, 2, 0}, grad{0, 3 * e + 2, 0, 3}, again{0, 2 * e + 1, 0, 2};
  const bool each = sw.separate_projections && sw.unfused_elementwise;
  const double qkv_in = each ? 3 : 1, up_in = each ? (s.swiglu ? 2 : 1) : 1;
  for (const OpTraffic& op : {fwd, again}) {
    Add(&t->split, qkv_in + up_in, s.tp * h, op);  // the QKV and MLP-up inputs
    Add(&t->split, 1, h, op);                      // the attention output
    Add(&t->split, 1, F, op);                      // the MLP activation's output
  }
  Add(&t->split, 1, h + 2 * kvd, grad);             // QKV's output gradient
  Add(&t->split, 1, (s.swiglu ? 2 : 1) * F, grad);  // MLP-up's
  Add(&t->split, 2, s.tp * h, grad);                // the row-parallel outputs
}

// FP8 casts (Transformer Engine): each Linear needs its input in FP8 and the
// FP8 transpose the weight gradient reads, one kernel reading e and writing 1
// + 1 bytes. The QKV and MLP-up inputs leave the fused norm in FP8 already;
// the attention output and the MLP activation's output are cast on their own.
// Backward casts every Linear's output gradient the same way: QKV's and up's
// on the rank's 1/tp, the attention output's and down's whole token rows on
// every TP rank (tp x h split by tp).
void AddDelayedFp8Casts(const LayerShape& s, LayerTraffic* t) {
  const double e = s.elem_bytes, h = s.hidden, F = s.ffn_hidden, kvd = s.kv_dim;
  const OpTraffic cast{e + 2, 0, 1, 0}, grad_cast{0, e + 2, 0, 1};
  Add(&t->split, 1, h, cast);
  Add(&t->split, 1, F, cast);
  Add(&t->split, 1, h + 2 * kvd, grad_cast);
  Add(&t->split, 1, (s.swiglu ? 2 : 1) * F, grad_cast);
  Add(&t->split, 2, s.tp * h, grad_cast);
}

LayerTraffic LayerElementwiseTraffic(const LayerShape& s, const Software& sw) {
  const double e = s.elem_bytes, h = s.hidden, F = s.ffn_hidden, kvd = s.kv_dim;
  LayerTraffic t;
  Add(&t.rows, 2, h, Norm(s, sw));
  // Residual adds: read two, write one; backward sums the branches' gradients.
  // With dropout (legacy), bias-dropout-add: x, residual, out and a 1-byte
  // mask (3.5h); backward reads dy and the mask, writes dx (2.5h), reduces the
  // bias gradient (1h) and sums the branches (3h). Bytes for e = 2.
  Add(&t.rows, 2, h, sw.dropout ? OpTraffic{3.5 * e, 6.5 * e, 1, 3} : OpTraffic{3 * e, 3 * e, 1, 1});
  // Separate q/k/v (and gate/up) Linears: autograd sums their input's gradients.
  if (sw.separate_projections) Add(&t.rows, s.swiglu ? 3 : 2, h, {0, 3 * e, 0, 1});
  Add(&t.split, 1, F, Activation(s, sw));
  if (s.rope) {
    Add(&t.split, 1, h, Rope(s, sw));    // q
    Add(&t.split, 1, kvd, Rope(s, sw));  // k
  }
  if (sw.attention_layout_copies) {
    // repeat_kv: keys and values copied out to every query head (grouped-query
    // attention only), summed back in backward; the output made contiguous.
    if (kvd < h) Add(&t.split, 2, h, {e + e * kvd / h, e + e * kvd / h, 1, 1});
    Add(&t.split, 1, h, {2 * e, 2 * e, 1, 1});
  }
  if (s.fp8_linears && sw.fp8_dynamic_scaling) {
    AddDynamicFp8Casts(s, sw, &t);
  } else if (s.fp8_linears) {
    AddDelayedFp8Casts(s, &t);
  }
  return t;
}

}  // namespace

double LayerLinearWeights(const LayerShape& s) {
  const double h = s.hidden, F = s.ffn_hidden;
  return h * (h + 2 * s.kv_dim) + h * h + (s.swiglu ? 3 : 2) * h * F;
}

PassSeconds ElementwiseSeconds(const LayerShape& s, const Software& sw, double hbm_bytes_per_s) {
  // The bytes of LayerElementwiseTraffic; the parts outside the TP region run
  // on every TP rank unless SP splits them.
  const LayerTraffic t = LayerElementwiseTraffic(s, sw);
  const double rows_div = s.sp ? s.tp : 1.0, T = s.tokens;
  PassSeconds e{T * (t.rows.fwd_bytes / rows_div + t.split.fwd_bytes / s.tp) / hbm_bytes_per_s,
                T * (t.rows.bwd_bytes / rows_div + t.split.bwd_bytes / s.tp) / hbm_bytes_per_s};
  if (s.fp8_linears && sw.fp8_dynamic_scaling) {
    // The rank's Linear weights cast every micro-batch, forward and again
    // backward: an amax read, a read and a 1-byte write (5 bytes each).
    const double w = LayerLinearWeights(s) / s.tp * 5.0 / hbm_bytes_per_s;
    e.fwd += w, e.bwd += w;
  }
  return e;
}

PassSeconds LayerKernels(const LayerShape& s, const Software& sw) {
  const LayerTraffic t = LayerElementwiseTraffic(s, sw);
  const double gemms = sw.separate_projections ? (s.swiglu ? 7 : 6) : 4;
  // A GEMM is one kernel forward and two backward; FlashAttention-2's
  // backward is three (the dO.O preprocessing, the main kernel, dq's cast);
  // under context parallelism, each once per chunk of keys.
  const double attention_f = sw.flash_attention ? s.cp : 4, attention_b = sw.flash_attention ? 3 * s.cp : 6;
  return {gemms + attention_f + t.rows.fwd_kernels + t.split.fwd_kernels,
          2 * gemms + attention_b + t.rows.bwd_kernels + t.split.bwd_kernels};
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

double LayerRecomputeSeconds(Recompute rc, const PassSeconds& layer, const PassSeconds& attention,
                             double gemm_fwd) {
  // Full recomputation's repeated TP collectives are in the TP list
  // (TpPpStepOptions::recompute_full), not here.
  if (rc == Recompute::kFull) return layer.fwd;
  if (rc == Recompute::kSelective) return attention.fwd;
  // Every other matmul and all the element-wise work between them (the
  // policy saves matmul and attention outputs only).
  if (rc == Recompute::kOp) return layer.fwd - attention.fwd - 0.5 * gemm_fwd;
  return 0;
}

double KernelLaunchMicroseconds(const Software& sw, const GpuSpec& gpu) {
  if (sw.launch_us <= 0 || gpu.kernel_issue_us <= 0) return sw.launch_us;
  return std::max(gpu.kernel_issue_us, sw.launch_us - kStackCudaLaunchUs + gpu.kernel_issue_us);
}

MicroBatchSeconds MicroBatchComputeSeconds(const LayerShape& s, const GpuSpec& gpu,
                                           const Software& sw, const GpuRates& r, Recompute rc) {
  const PassSeconds gemm =
      LayerGemmSeconds(s, gpu, r, sw.separate_projections, TpOverlapChunksFor(s, sw));
  const PassSeconds attention = AttentionSeconds(s, gpu, sw, r);
  const PassSeconds elementwise = ElementwiseSeconds(s, sw, r.hbm_bytes_per_s);
  // The GPU runs a layer's kernels no faster than the CPU issues them.
  const PassSeconds kernels = LayerKernels(s, sw);
  const double launch_us = KernelLaunchMicroseconds(sw, gpu);
  MicroBatchSeconds mb;
  mb.layer.fwd = std::max(gemm.fwd + attention.fwd + elementwise.fwd, kernels.fwd * launch_us * 1e-6);
  mb.layer.bwd = std::max(gemm.bwd + attention.bwd + elementwise.bwd, kernels.bwd * launch_us * 1e-6);
  mb.layer_gemm = gemm;
  mb.attention = attention;
  mb.layer_recompute = LayerRecomputeSeconds(rc, mb.layer, attention, gemm.fwd);
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
                                    double layer_recompute, const PassSeconds& tp_comm,
                                    const PassSeconds& cp_comm) {
  StageSeconds s;
  s.fwd = compute.fwd + tp_comm.fwd + cp_comm.fwd;
  s.bwd = compute.bwd + layers * layer_recompute + tp_comm.bwd + cp_comm.bwd;
  s.compute = compute.fwd + compute.bwd;
  s.recompute = layers * layer_recompute;
  s.tp_comm = tp_comm.fwd + tp_comm.bwd;
  s.cp_comm = cp_comm.fwd + cp_comm.bwd;
  return s;
}

double WeightGradShare(const MicroBatchSeconds& mb) {
  if (!(mb.layer.bwd > 0)) return 0.0;
  return std::clamp(0.5 * mb.layer_gemm.bwd / mb.layer.bwd, 0.0, 1.0);
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
