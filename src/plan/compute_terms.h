// The cost model's compute terms, each a function of plain inputs so that it
// can be read and tested on its own: the rates of a GPU, the GEMMs, attention
// core and element-wise work of one transformer layer, the head and the
// embedding, the unfused gradient accumulation, activation recomputation, a
// pipeline stage's micro-batch, the pipeline bubble and the optimizer step.
// Times are seconds of one GPU for one micro-batch unless a name says
// otherwise. CostModel::Evaluate (cost_model.h) puts them together; the
// communication terms are comm_terms.h, the memory terms memory_terms.h.
// Method and every factor: docs/planner.md.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/spec.h"
#include "parallel/tp_pp_layout.h"
#include "plan/hardware.h"
#include "plan/layout.h"

namespace scaletrain::plan {

// Forward and backward time of one piece of work.
struct PassSeconds {
  double fwd = 0, bwd = 0;
};

// What one GPU does per second of the two kinds of work the model separates.
struct GpuRates {
  // A GEMM of unbounded depth: peak x matmul_efficiency x sustained_clock_ratio,
  // raised by the depth overhead at the depth matmul_efficiency was measured at
  // (kMatmulEfficiencyK).
  double matmul_flops_per_s = 0;
  double hbm_bytes_per_s = 0;     // streaming: hbm_tbps x hbm_efficiency
  double sm_count = 0;            // a GEMM's tiles run in waves of this many (0: not modelled)
  double gemm_k_overhead = 0;     // GpuSpec::gemm_k_overhead
  // The same for the transformer layers' Linear GEMMs (QKV, attention output,
  // MLP): matmul_flops_per_s, except in FP8 training, where Transformer
  // Engine runs these in FP8 and the attention core and the head in bf16.
  double linear_flops_per_s = 0;
  double linear_gemm_k_overhead = 0;  // their gemm_k_overhead (FP8: the same time, more depth)
};
// The depth k of the shapes the catalog's matmul_efficiency figures were
// measured at: mamf-finder prints its best shape as M x K x N, and its best
// shapes have K of 15,680-19,712 on the Hopper parts (H100 SXM 6144x17920x2816,
// H100 PCIe 6912x16384x2048).
inline constexpr double kMatmulEfficiencyK = 16384;

// The GPU's dense tensor-core peak at `p`, FLOP/s; where the catalog has no
// rate for `p`, an error that names the precisions it has.
Result<double> MatmulPeakFlopsPerS(const GpuSpec& gpu, Precision p);
// The rates at that peak. Tensor-core work runs at the clock the GPU holds at
// its power limit (sustained_clock_ratio); HBM bandwidth does not depend on it.
GpuRates GpuRatesAt(const GpuSpec& gpu, double peak_flops_per_s);
// The rates of training in precision `p`. In FP8 (Transformer Engine's
// recipe, as Megatron-Core and NeMo run it) only the layers' Linear GEMMs
// run in FP8, at fp8_matmul_efficiency of the FP8 peak; the attention core
// and the output layer stay bf16, so the other rates are bf16's. An error
// names the precisions the GPU has where it has no rate for `p`.
Result<GpuRates> GpuRatesFor(const GpuSpec& gpu, Precision p);

// Bytes of one activation element: 4 in fp32 training, else 2.
double ActivationElemBytes(Precision p);
// Bytes of one element of the gradient buffer, which is also what DP
// reduces: 2 where the layout reduces in its 16-bit compute precision
// (GradReduceFor), else 4.
int64_t GradElemBytes(const Layout& l, const Software& sw);

// One micro-batch of one transformer layer as the compute terms see it, in
// the doubles they multiply.
struct LayerShape {
  // seq: the positions of a sequence one rank holds, the sequence length / cp
  // (LayerShapeOf is given CpRankSpec's model).
  double micro_batch = 1, seq = 1;
  double tokens = 1;  // micro_batch x seq
  // Context-parallel ranks: each computes its queries against the keys of
  // all cp chunks, cp x the causal attention of its own seq positions.
  double cp = 1;
  double hidden = 0, ffn_hidden = 0;
  double heads = 0;  // all of the model's query heads; tp splits them
  double head_dim = 0;
  double kv_dim = 0;  // n_kv_head x head_dim
  double vocab = 0;   // padded to a multiple of tp, so every TP rank gets equal rows (Megatron-LM)
  double tp = 1;
  bool sp = false;        // sequence parallelism also splits the parts outside the TP region
  bool swiglu = false;    // a SwiGLU MLP (three matrices); GeLU and squared ReLU: two
  bool rope = false;      // Llama-style blocks: rotary embeddings on q and k
  bool rmsnorm = false;   // Llama-style blocks: RMSNorm (LayerNorm otherwise)
  bool squared_relu = false;
  bool fp8_linears = false;  // FP8 training: the Linear GEMMs' inputs are cast to FP8
  double elem_bytes = 2;  // ActivationElemBytes
};
// Of `m` as one rank of `l` sees it: with cp > 1, m is CpRankSpec's.
LayerShape LayerShapeOf(const ModelSpec& m, const Layout& l);

// Fraction of the GPU's SMs a GEMM with an m x n output (times `batch`) keeps
// busy, given tile and wave quantization (NVIDIA Deep Learning Performance
// Guide, "Matrix Multiplication Background"): the best of 256x128, 128x256
// and 128x128 tiles, one tile per SM per wave. 1 when sms <= 0.
double TileWaveEfficiency(double m, double n, double batch, double sms);

// One GEMM ([m x k] x [k x n]) of a batch of `batch` alike: bound by its
// math, at the large-GEMM rate times the share of the SMs the batch's tiles
// keep busy, with each output tile's fixed work counted as gemm_k_overhead
// more depth, or by moving its three matrices through HBM (roofline).
double GemmSecondsEach(const GpuRates& r, double elem_bytes, double batch, double m, double n,
                       double k);
// All `batch` of them.
double GemmSeconds(const GpuRates& r, double elem_bytes, double batch, double m, double n,
                   double k);
// A weight GEMM with an m x n output and depth k: measured on this device at
// exactly this shape (a `scaletrain bench` profile), else the roofline with
// backward = 2x forward (the input and the weight gradient: the same shapes).
PassSeconds WeightGemmSeconds(const GpuSpec& gpu, const GpuRates& r, double elem_bytes, double m,
                              double n, double k);
// How the GEMMs that TP collectives are pipelined with run
// (Software::tp_comm_overlap with SP; Transformer Engine's userbuffers as
// Megatron-Core configures them): the column-parallel forwards (QKV, MLP up)
// and the row-parallel input gradients (attention output, MLP down) in `ring`
// GEMMs of 1/ring of the token rows each, one per chunk the ring exchange
// brings (ring_exchange: tp); the row-parallel forwards in `pipeline` chunks
// (the "pipeline" method's num_splits); the rest whole ("bulk" overlap).
// 0: not split.
struct TpOverlapChunks {
  double ring = 0, pipeline = 0;
};
TpOverlapChunks TpOverlapChunksFor(const LayerShape& s, const Software& sw);
// The weight GEMMs of a layer, split over tp: QKV, the attention output
// projection, the MLP's up projection (gate and up with SwiGLU) and its down
// projection; with `separate_projections` q, k, v (and gate, up) each its own;
// with `chunks` the overlapped ones cut along the token rows, each piece
// quantized to tiles and waves on its own.
PassSeconds LayerGemmSeconds(const LayerShape& s, const GpuSpec& gpu, const GpuRates& r,
                             bool separate_projections = false, TpOverlapChunks chunks = {});

// The attention core (softmax(QK^T) V) of a layer, three ways; AttentionSeconds
// picks the one the stack and the profile give.
// Causal FlashAttention computes the unmasked half of the scores; its backward
// does 2.5x the forward's matmul work (it recomputes the scores). Its rate is
// attention_efficiency at long sequences; each query block also pays a fixed
// cost worth about two 128-key blocks, so the rate at sequence s is
// eff x s / (s + 256) (FlashAttention-3 paper, Figs. 5-6). The stack's
// slowdowns scale it (Triton's FlashAttention). Under context parallelism a
// rank runs cp kernels a pass, one per chunk of keys the ring brings, each
// over its own s / cp queries: cp x the work at the rate of s / cp.
PassSeconds FlashAttentionSeconds(const LayerShape& s, const GpuSpec& gpu, const Software& sw);
// The device's own attention kernel, measured at exactly this shape (tp = 1),
// or null.
const GpuSpec::MeasuredAttention* MeasuredAttentionFor(const GpuSpec& gpu, const LayerShape& s);
// Without FlashAttention: QK^T and scores x V as batched GEMMs (one per
// local head and sequence) and a memory-bound softmax (and dropout) over the
// scores; a kernel working in row blocks (Software::causal_block_rows) computes
// only the blocks' keys up to the diagonal.
PassSeconds UnfusedAttentionSeconds(const LayerShape& s, const Software& sw, const GpuRates& r);
PassSeconds AttentionSeconds(const LayerShape& s, const GpuSpec& gpu, const Software& sw,
                             const GpuRates& r);

// The memory-bound element-wise work of a layer (norms, residual adds,
// bias-dropout-add, the MLP's activation, RoPE): bytes read and written per
// token over HBM bandwidth; the parts outside the TP region run on every TP
// rank unless SP splits them.
// The ops and their bytes: fused kernels, or PyTorch eager's one kernel per
// op (Software::unfused_elementwise), and the copies and gradient sums of
// PyTorch model code (separate_projections, attention_layout_copies).
// FP8 training adds the casts of the Linears' inputs and output gradients,
// and with dynamic scaling (Software::fp8_dynamic_scaling) the weights' casts
// every micro-batch.
PassSeconds ElementwiseSeconds(const LayerShape& s, const Software& sw, double hbm_bytes_per_s);
// The weights of one layer's Linears (QKV, attention output, MLP), all TP
// ranks together.
double LayerLinearWeights(const LayerShape& s);
// Kernels a layer launches forward and backward: its GEMMs, attention and
// element-wise ops (Software::launch_us issues each).
PassSeconds LayerKernels(const LayerShape& s, const Software& sw);
// The head: the logits GEMM (the vocabulary split over tp) and the fp32
// cross-entropy over the logits.
PassSeconds HeadSeconds(const LayerShape& s, const GpuSpec& gpu, const Software& sw,
                        const GpuRates& r);
// The embedding: a hidden vector read and written per token; charged once in
// forward and once in backward.
double EmbeddingSeconds(const LayerShape& s, double hbm_bytes_per_s);
// Unfused gradient accumulation (Software::fused_grad_accumulation false):
// every micro-batch adds each new 16-bit weight gradient into the gradient
// buffer of `grad_elem_bytes` per element.
double GradAccumulationSeconds(int64_t numel, int64_t grad_elem_bytes, double hbm_bytes_per_s);

// Forward work one layer repeats during its backward: the whole forward under
// full recomputation, the attention core under selective recomputation
// (Megatron checkpoints the core attention; with FlashAttention too, whose
// forward it runs again), under PyTorch's op-level policy the forward less
// attention and half the GEMMs (`gemm_fwd`), else none.
double LayerRecomputeSeconds(Recompute rc, const PassSeconds& layer, const PassSeconds& attention,
                             double gemm_fwd);

// The part of a stack's launch_us that is cudaLaunchKernel itself: its 2-3
// us on a server CPU (docs/planner.md, "Issuing kernels").
inline constexpr double kStackCudaLaunchUs = 2.5;
// The time to issue one kernel: the stack's launch_us, with that part
// replaced by the issue time a GPU calibration measured (kernel_issue_us)
// where there is one; never below the measured time. 0 stays 0 (not
// modelled).
double KernelLaunchMicroseconds(const Software& sw, const GpuSpec& gpu);

// The pieces a stage's micro-batch is made of.
struct MicroBatchSeconds {
  PassSeconds layer;           // one transformer layer: GEMMs + attention + element-wise
  PassSeconds attention;       // its attention core (what context-parallel transfers hide under)
  PassSeconds layer_gemm;      // its weight GEMMs (what overlapped TP collectives hide under)
  double layer_recompute = 0;  // LayerRecomputeSeconds
  PassSeconds head;            // on the last virtual stage
  double embedding = 0;        // on virtual stage 0, forward and backward each
};
MicroBatchSeconds MicroBatchComputeSeconds(const LayerShape& s, const GpuSpec& gpu,
                                           const Software& sw, const GpuRates& r, Recompute rc);

// One micro-batch of a stage's rank over all its chunks: its layers, the
// embedding and head where it runs them, and (unfused) the accumulation of
// its gradients. No recomputation and no communication.
PassSeconds StageComputeSeconds(const RankParams& stage, const MicroBatchSeconds& mb,
                                const Software& sw, int64_t grad_elem_bytes,
                                double hbm_bytes_per_s);

// One micro-batch of a stage as the pipeline schedule runs it, and its parts.
struct StageSeconds {
  double fwd = 0;  // compute + TP collectives + exposed CP transfers of the forward
  double bwd = 0;  // compute + recomputation + TP collectives + CP transfers of the backward
  double compute = 0, recompute = 0, tp_comm = 0, cp_comm = 0;
};
// `layers` of the stage each recompute `layer_recompute` in the backward;
// the TP collectives (TpCommSeconds, comm_terms.h) are not overlapped; the
// stage's context-parallel ring transfers (CpRingSeconds) are what they expose.
StageSeconds StageMicroBatchSeconds(const PassSeconds& compute, double layers,
                                    double layer_recompute, const PassSeconds& tp_comm,
                                    const PassSeconds& cp_comm = {});

// Of a layer's backward, the share a zero-bubble schedule's W pass runs:
// the weight-gradient GEMMs, half of the weight GEMMs' backward (each dW
// GEMM has the shape of its dX GEMM; Qi et al. 2024 take T_W = T_B = T_F
// for the GEMMs alone). Attention, element-wise ops and recomputation stay
// in B.
double WeightGradShare(const MicroBatchSeconds& mb);

// Pipeline idle time: the schedule's makespan (simulated with each chunk's
// forward and backward time, transfers included) less the work each stage
// does in it: micro_batches x chunks x (forward + backward). Never negative.
double PipelineBubbleSeconds(double makespan_s, double micro_batches, double chunks,
                             double chunk_fwd_s, double chunk_bwd_s);

// Bytes the optimizer step moves per parameter it updates (AdamW with its
// gradient-norm clipping and the zeroing of the gradient buffer; the reasons
// for each term are at the definition).
double OptimizerBytesPerParam(const Layout& l, const Software& sw);
// The optimizer step, memory-bound: the parameters a rank updates (all
// `numel` of its stage, 1/dp of them under ZeRO >= 1) x
// OptimizerBytesPerParam / bandwidth.
double OptimizerSeconds(int64_t numel, const Layout& l, const Software& sw, double hbm_bytes_per_s);

}  // namespace scaletrain::plan
