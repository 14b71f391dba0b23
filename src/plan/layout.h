// A parallel layout as the planner sees it, the software stack it runs on,
// and the checks that say, for a bad layout, what to change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"
#include "parallel/dp_layout.h"
#include "parallel/schedule.h"
#include "plan/hardware.h"

namespace scaletrain::plan {

// Activation recomputation: none; Megatron's selective (the attention
// scores, Korthikanti et al. 2022); full (each layer from its input); and
// PyTorch's op-level selective checkpointing (torchtitan's
// `selective_ac_option = "op"`): the layer input, the attention (SDPA)
// output and every other matmul output are kept, the rest recomputed.
enum class Recompute { kNone, kSelective, kFull, kOp };
const char* RecomputeName(Recompute r);
Result<Recompute> RecomputeFromName(const std::string& name);

// The dtype the data-parallel gradient reduction runs in, which is also the
// dtype of the gradient buffer it reduces. kAuto takes the software stack's
// default for the precision (GradReduceFor); a Prediction's layout always
// holds the resolved kFp32 or kCompute.
//   kFp32:    Megatron-LM with bf16 (it forces
//             --accumulate-allreduce-grads-in-fp32), FSDP with
//             MixedPrecision(reduce_dtype=float32) (torchtitan's default,
//             Composer's `mixed_precision: DEFAULT`), Llama 3
//   kCompute: in the 16-bit compute precision: Megatron-LM's fp16 default,
//             Megatron-core's --grad-reduce-in-bf16, Composer's `PURE`
enum class GradReduce { kAuto, kFp32, kCompute };
const char* GradReduceName(GradReduce g);  // auto, fp32, compute
Result<GradReduce> GradReduceFromName(const std::string& name);
struct Layout;
// The dtype a layout's gradients are reduced in: "fp32", "fp16" or "bf16"
// (16-bit gradients of any other compute precision), "auto" if unresolved.
const char* GradReduceDtypeName(const Layout& l);

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1, vpp = 1;
  int64_t micro_batch = 1;
  int64_t global_batch = 1;   // sequences per optimizer step
  int zero = 0;               // 0..3
  Recompute recompute = Recompute::kNone;
  bool sp = false;            // sequence parallelism (with tp > 1)
  Precision precision = Precision::kBF16;
  bool gpipe = false;         // run the GPipe schedule instead of 1F1B
  GradReduce grad_reduce = GradReduce::kAuto;
  // Gradient bucket size for data-parallel reduction (the trainer's
  // parallel.bucket_mb); 0: the stack's own (BucketBytesFor).
  int64_t bucket_bytes = 0;
  // What ZeRO-0's gradient all-reduce sends (the trainer's
  // parallel.dp_compress): fp32 or grad_reduce's dtype when kNone.
  DpCompression dp_compress = DpCompression::kNone;
  // ZeRO-0's all-reduce as the trainer's hierarchical reduce (parallel.dp_reduce
  // "auto" or "hierarchical"), where it applies: the DP group on several
  // nodes with as many members (>= 2) on each. false: one flat ring.
  bool dp_hierarchical = false;
  // Context parallelism (Megatron-Core / Transformer Engine's ring attention):
  // each sequence split over cp GPUs, in 2 cp chunks so that every rank gets
  // an equal share of the causal attention; keys and values pass around the
  // ring under the attention kernels. Ranks are ordered tp, cp, dp, pp; the
  // gradients are reduced (and ZeRO shards) over the dp x cp ranks. (Last,
  // so that brace-initialized layouts keep their meaning.)
  int64_t cp = 1;
  // ZeRO's sharding group (hybrid sharding): the dp x cp ranks that reduce
  // the gradients together split into groups of this many consecutive ranks;
  // each group shards the parameters, gradients and optimizer state (as its
  // ZeRO stage says) among its members, and every rank all-reduces its
  // gradient shard with the ranks holding the same shard in the other groups
  // (the replicas). PyTorch FSDP's HYBRID_SHARD (HSDP; torchtitan's
  // dp_shard x dp_replicate), Megatron-Core's
  // --num-distributed-optimizer-instances. 0 (or dp x cp): one group of all.
  int64_t shard_group = 0;
  // With full recomputation: how many layers of each model chunk recompute
  // (Megatron-LM's --recompute-method block --recompute-num-layers K: the
  // first K of every chunk; torchtitan's and fms-fsdp's checkpointing of
  // every n-th block keep the same share); the chunk's other layers keep
  // their activations. 0: all of them.
  int64_t recompute_layers = 0;
  // Context parallelism as Ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023;
  // the trainer's parallel.cp_impl = "ulysses"): q, k, v all-to-all from
  // sequence to heads before attention, the output back after it; each rank
  // attends the whole sequence with n_head / tp / cp heads. false: the ring.
  bool cp_ulysses = false;
  // A zero-bubble schedule (Qi et al., ICLR 2024) instead of 1F1B: each
  // backward split into B and W. vpp = 1: ZB-H1 (W's deferred into the
  // cool-down); vpp = 2: ZB-V (two chunks per stage in a V, the first stage
  // running the embedding and the head).
  bool zero_bubble = false;
  bool chunks_in_v() const { return zero_bubble && vpp == 2; }

  int64_t num_gpus() const { return tp * cp * pp * dp; }
  int64_t micro_batches() const { return global_batch / (dp * micro_batch); }
  ScheduleKind schedule() const {
    if (zero_bubble) return vpp == 2 ? ScheduleKind::kZbV : ScheduleKind::kZbH1;
    if (vpp > 1) return ScheduleKind::kInterleaved;
    return gpipe ? ScheduleKind::kGPipe : ScheduleKind::k1F1B;
  }
};

std::string LayoutToString(const Layout& l);

// The model as one context-parallel rank sees a sequence: block_size / cp
// positions (what every per-token term computes on; the parameters are the
// model's). The model itself where cp = 1.
ModelSpec CpRankSpec(const ModelSpec& m, int64_t cp);
// The layout as the gradient reduction and ZeRO see it: one group of dp x cp
// ranks (Megatron-Core reduces and shards over the data- and
// context-parallel ranks together), with the micro-batches per step kept.
Layout GradientGroupLayout(const Layout& l);

// The layout as one sharding group sees it (Layout::shard_group): the
// gradient group (GradientGroupLayout) cut to one group of shard_group
// ranks, with the micro-batches per step kept; the gradient group itself
// without hybrid sharding.
Layout ShardGroupLayout(const Layout& l);
// How many sharding groups (replicas) the dp x cp ranks of `l` form: 1
// without hybrid sharding.
int64_t ShardReplicas(const Layout& l);

// The layers of the largest model chunk: n_layer over pp x vpp, rounded up
// (the most Layout::recompute_layers can name).
int64_t LargestChunkLayers(const ModelSpec& m, const Layout& l);
// The share of a stage's layers that full recomputation reruns: all of them,
// or with recompute_layers = K the first K of each of its vpp chunks of
// stage_layers / vpp layers. 0 without full recomputation.
double RecomputedShare(const Layout& l, int64_t stage_layers);

// The divisors of n, ascending (the candidate sizes of a layout axis).
std::vector<int64_t> Divisors(int64_t n);
// The chunks per stage above 1 that cut `n_layer` layers into pp x vpp
// equal chunks, ascending: the interleavings ValidateLayout accepts.
std::vector<int64_t> EvenInterleavings(int64_t n_layer, int64_t pp);

// What the training software does beyond the layout: every choice of it that
// the cost model charges for. A stack is read from its file
// (configs/stacks/*.toml, StackCatalog in stacks.h), which states each field
// under its name here, with what it models and where its value comes from;
// the defaults below are no shipped stack's, only where a test that builds a
// stack by hand starts.
struct Software {
  std::string name = "modern";
  bool flash_attention = true;
  // The FlashAttention kernel's time relative to FlashAttention-2 (whose
  // rate `attention_efficiency` describes), forward and backward. 1 for
  // FlashAttention-2; the Triton FlashAttention that MPT runs with
  // `attn_impl: triton` (llm-foundry 2023) is 1.3-1.5x slower forward and
  // about 2x slower backward (Dao 2023, FlashAttention-2 paper, Sec. 4.1).
  double attention_fwd_slowdown = 1.0;
  double attention_bwd_slowdown = 1.0;
  bool dropout = false;
  // Data-parallel collectives hide under the compute they run beside (what
  // is longer is exposed); false charges them in full: Megatron-LM 2021's
  // all-reduce after backward, Composer's FSDP (measured, docs/planner.md).
  bool overlap_dp = true;
  // Cross-entropy over the logits as PyTorch's fused log-softmax (true) or as
  // Megatron-LM 2021's vocab-parallel cross-entropy, one kernel per pass.
  bool fused_log_softmax = true;
  // Weight-gradient GEMMs accumulate straight into the fp32 gradient buffer
  // (Megatron's gradient-accumulation fusion, or FSDP's per-micro-batch
  // reduce-scatter) rather than a separate fp32 add per micro-batch
  // (Megatron-LM 2021's main_grad hook, DeepSpeed 2022's bf16 optimizer).
  bool fused_grad_accumulation = true;
  // The optimizer step's parts run as passes of their own (Megatron-LM
  // 2021-22's Float16OptimizerWithFloat16Params, DeepSpeed 2022's bf16
  // optimizer): the master-to-16-bit weight copy re-reads the master weights,
  // and in fp16 the fp16 gradient buffer is cast to fp32 before unscaling.
  bool separate_optimizer_passes = false;
  // Without FlashAttention: 0 computes the full s x s scores (Megatron's
  // fused softmax kernels); R > 0 computes, per block of R queries, only the
  // keys up to the block's end (scaletrain's CPU kernel, R = 64), a fraction
  // (n + 1) / 2n of the scores for n = ceil(s / R) blocks.
  int64_t causal_block_rows = 0;
  // Pipeline messages split over the TP ranks (Megatron-LM's scatter-gather:
  // each sends b s h / t, the receivers all-gather over NVLink); the CPU
  // trainer sends its whole residual rows (b s h, or b s h / t with SP).
  bool pp_scatter_gather = true;
  // The interleaved pipeline schedule exists (Megatron-LM's); DeepSpeed's
  // pipeline engine runs plain 1F1B.
  bool interleaved_schedule = true;
  // The zero-bubble schedule ZB-H1 (Layout::zero_bubble) exists: the CPU
  // trainer's parallel.schedule = "zb-h1".
  bool zero_bubble_schedule = false;
  // Validation reads a run the way Megatron-LM 2021-22 papers report theirs:
  // TFLOP/s counting the recomputed forward, full recomputation and no SP
  // unless the row says so (the legacy stacks). An unstated ZeRO stage is
  // searched up to max_searched_zero, as on any stack.
  bool legacy_conventions = false;
  // Pipeline sends are posted and the stage computes on while they travel,
  // a stage's messages queueing on its one link (the CPU trainer: ISend on
  // the communicator's thread, waited for at the step's end). false: the
  // transfer is part of the action that sends or receives (Megatron's
  // blocking p2p between 1F1B actions).
  bool pp_async_sends = false;
  // PyTorch eager model code (torchtitan, Hugging Face): each element-wise
  // op of a block is a kernel of its own that reads and writes HBM (RMSNorm
  // as upcast, square, mean, rsqrt, scale, downcast, weight; RoPE through
  // fp32 complex numbers; SwiGLU as silu then multiply), and autograd runs a
  // kernel per op again in backward (ElementwiseSeconds). false: fused
  // kernels (Megatron-Core / Transformer Engine, torch.compile's Inductor).
  bool unfused_elementwise = false;
  // q, k and v (and SwiGLU's gate and up) are separate Linear layers:
  // separate GEMMs, and in backward autograd adds up the gradients of their
  // shared input (one add per extra consumer).
  bool separate_projections = false;
  // The model code hands SDPA full-width keys and values (grouped-query
  // attention's KV heads repeated into a copy) and copies the attention
  // output back to token-major rows; Megatron's kernels take both as they are.
  bool attention_layout_copies = false;
  // TP collectives with sequence parallelism are cut into tp chunks and
  // pipelined with the GEMM beside them (Transformer Engine's userbuffers,
  // Megatron-Core's --tp-comm-overlap, on in NeMo's performance recipes):
  // all but one chunk hides under the pass's GEMMs (OverlappedTpSeconds),
  // and the GEMMs run in pieces (TpOverlapChunks).
  bool tp_comm_overlap = false;
  // The "pipeline" overlap's num_splits for the row-parallel forwards (the
  // value in Megatron-Core's and NeMo's userbuffers configurations).
  static constexpr double kTpOverlapPipelineSplits = 4;
  // How the stack cuts the gradient buffer into DP buckets when the layout
  // does not say (Layout::bucket_bytes 0): a fixed size (PyTorch DDP's and the
  // trainer's 25 MiB), Megatron-Core's max(40 M, 1 M x dp) parameters (sized so
  // "collectives do not become latency-bound" at large dp), one bucket of the
  // whole buffer (Megatron-LM 2021-22's all-reduce after backward) or
  // DeepSpeed's reduce_bucket_size of 5e8 elements.
  enum class Buckets { kFixed25MiB, kMegatronCore, kWholeBuffer, kDeepSpeed };
  Buckets buckets = Buckets::kMegatronCore;
  // DP collectives are NCCL's: a reduce-scatter or all-gather is a ring that
  // pays a latency per step (dp - 1 of them) on every call, i.e. on every
  // bucket (NcclRingCallSeconds). false: one latency per collective kind (the
  // CPU trainer's collectives).
  bool nccl_collectives = true;
  // How much slower compute runs while communication overlaps it (NCCL's
  // kernels take SMs, one thread block per channel, and HBM bandwidth):
  // 0.189, the mean slowdown measured over GPT and Llama layers overlapped
  // with collectives on A100, H100, MI250 and MI210 nodes (arXiv 2507.03114;
  // docs/planner.md "Overlap is not free"). 0: not modelled (the CPU trainer).
  double overlap_slowdown = 0.189;
  // FSDP: parameters, gradients and optimizer state are always sharded over
  // the DP group (ZeRO-3 wherever dp > 1) unless a layout states its stage.
  bool fully_sharded = false;
  // Full recomputation of some layers only (Layout::recompute_layers), which
  // the search uses where full recomputation fits and none does not: the
  // fewest recomputed layers that fit (Megatron's block method; PyTorch's
  // checkpointing of every n-th block).
  bool partial_recompute = false;
  // The highest ZeRO stage the stack's own data parallelism offers, which the
  // search tries when a layout does not state one: Megatron-LM shards the
  // optimizer state only (--use-distributed-optimizer, ZeRO-1; its gradient
  // buffer stays whole); NeMo's distributed_fused_adam (Apex's
  // DistributedFusedAdam, its GPT-3 and Nemotron configurations' optimizer)
  // also keeps gradients as shards (ZeRO-2). Neither gathers parameters per
  // layer. A stated stage is taken as given whatever this says.
  int max_searched_zero = 3;
  // FSDP under pipeline parallelism as torch.distributed.pipelining runs it
  // (torchtitan's 3D layouts): the stage's parameters stay gathered across
  // the step's micro-batches (torchtitan turns reshard_after_forward off when
  // PP is on; the pipeline stage calls set_reshard_after_backward(False)) and
  // the gradients accumulate whole until the last backward
  // (set_requires_gradient_sync(False)): one gather and one reduce-scatter a
  // step, the memory and traffic of ZeRO-1 (AsRun).
  bool fsdp_gathers_once_under_pp = false;
  // ZeRO-3 as FSDP2 runs it: after each all-gather the compute stream copies
  // the gathered parameters out of the flat buffer into their own tensors
  // (torch.split_with_sizes_copy in foreach_all_gather_copy_out), a read and a
  // write of every gathered byte that nothing hides (FsdpCopyOutSeconds).
  // FSDP1 (Composer) and the trainer use views of the buffer instead.
  bool gather_copy_out = false;
  // FP8 training with dynamic tensor-wise scaling (torchao's Float8Linear, as
  // torchtitan runs it): every cast first reads its tensor for the amax, each
  // Linear casts its own input (no norm writes FP8), the saved bf16 input and
  // the weight are cast again in backward, and the weights are cast every
  // micro-batch. false: Transformer Engine's delayed scaling (the amax of
  // earlier steps; FP8 weights cached between micro-batches).
  bool fp8_dynamic_scaling = false;
  // "selective" recomputation means the stack's own: PyTorch's op-level
  // policy (torchtitan's default selective AC) rather than Megatron's.
  bool selective_is_op = false;
  // CPU time to issue one GPU kernel (Python, the dispatcher, autograd's
  // bookkeeping, cudaLaunchKernel), in microseconds: a layer can go no faster
  // than its kernels can be issued (small models, small micro-batches). 0: not
  // modelled (the CPU trainer, whose kernels are its own functions). 6: PyTorch
  // on a server CPU, docs/planner.md "Issuing kernels".
  double launch_us = 6.0;
  // Memory outside the model: CUDA context, cuBLAS/NCCL workspaces and
  // allocator slack, as nvidia-smi shows for an idle PyTorch/Megatron
  // process after its first step (1-2 GiB); none for the CPU trainer, which
  // allocates everything up front in its own buffers.
  double framework_gib = 1.5;
  // Activations as the CPU trainer allocates them (one flat buffer, counted
  // float for float: TrainerActivationBytes in memory_terms.h) rather than
  // Korthikanti's per-layer estimate. Applies to recompute none, selective
  // and full (the modes the trainer runs); op keeps the estimate.
  bool trainer_activation_buffer = false;
};
// The layout as the stack runs it: ZeRO-3 with pipeline parallelism on a
// stack with Software::fsdp_gathers_once_under_pp keeps the parameters and
// gradients whole for the step, ZeRO-1's memory and traffic; `l` otherwise.
Layout AsRun(const Layout& l, const Software& sw);

// The recomputation `rc` names on this stack (Software::selective_is_op).
Recompute RecomputeOn(const Software& sw, Recompute rc);

// The layout's gradient reduction with kAuto resolved for its stack: the
// 16-bit compute precision where the stack's fp16 default keeps an fp16
// gradient buffer (Megatron-LM's unfused accumulation), fp32 otherwise.
GradReduce GradReduceFor(const Layout& l, const Software& sw);
// The layout's DP bucket size in bytes as CutGradBuckets counts them (4 per
// element): its own, else its stack's rule (Software::buckets); one bucket of
// the whole buffer holds `buffer_numel` elements (the fullest stage's).
int64_t BucketBytesFor(const Layout& l, const Software& sw, int64_t buffer_numel);

// Checks the layout against the model and the GPU count; each failure names
// the nearest valid values.
Status ValidateLayout(const ModelSpec& model, int64_t num_gpus, const Layout& l);

}  // namespace scaletrain::plan
