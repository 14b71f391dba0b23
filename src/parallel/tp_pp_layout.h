// Tensor and pipeline parallelism as arithmetic: which collectives one rank
// of a tp x pp layout issues on its TP and PP groups in an optimizer step,
// with their payload bytes in the communicator's convention
// (comm/communicator.h). No communicator and no kernels: the model
// (src/model/gpt.cpp), the pipeline executor (src/parallel/pipeline.cpp) and
// the trainer (src/train/trainer.cpp) issue exactly these, and the planner
// (src/plan) predicts from the same functions, so its per-step TP and PP
// bytes can be checked exactly against the trainer's comm_bytes
// (DESIGN principle 1; tests/cli/test_plan_vs_trainer.sh). The data-parallel
// counterpart is dp_layout.h.
#pragma once

#include <cstdint>
#include <vector>

#include "model/param_layout.h"
#include "model/spec.h"
#include "parallel/dp_layout.h"
#include "parallel/schedule.h"

namespace scaletrain {

// What the step's collectives need to know of one rank's parameters, read
// from its BuildRankLayout.
struct RankParams {
  int64_t numel = 0;       // elements the rank holds (its flat buffer before DP padding)
  int64_t layers = 0;      // transformer blocks its chunks run
  bool embedding = false;  // it runs virtual stage 0 (token and position embedding)
  bool head = false;       // it runs the last virtual stage (final norm, head, loss)
  // Its shard of the word embedding (vocab rows / tp x n_embd), also the last
  // stage's copy of a tied one: what the first and last stage exchange.
  int64_t vocab_numel = 0;
  // Its embedding entries (kEmbeddingLayer), at the front of its flat buffer
  // (DpTiedFrontNumel): with a tied head under pipeline parallelism, data
  // parallelism reduces their buckets only after the tied sum.
  int64_t embedding_front_numel = 0;
  // Replicated entries of its blocks (norms, row-parallel biases) and of the
  // final norm: under sequence parallelism each rank's gradients of these
  // are partial (its rows only) and are all-reduced over TP.
  int64_t block_replicated_numel = 0;
  int64_t head_replicated_numel = 0;
  // Llama's key/value weights when each TP rank holds them whole (n_kv_head
  // < tp, KvHeadsReplicated): every backward of a block all-reduces their
  // gradients over TP, with or without sequence parallelism. Not in
  // block_replicated_numel.
  int64_t block_kv_replicated_numel = 0;
  // Its flat buffer's runs of one layer (DpLayerRuns): what ZeRO-3 gathers.
  std::vector<int64_t> run_numels{};
  std::vector<bool> run_outer{};
  std::vector<bool> run_acquired{};
  std::vector<int64_t> run_layers{};  // each run's layer id
};

// Summarises BuildRankLayout(spec, shard). `numel` leaves out a tied_copy
// entry when the model's embeddings are not tied (BuildRankLayout adds the
// last stage's copy for every architecture; only a tied head needs it).
RankParams SummarizeRankLayout(const ModelSpec& spec, const ParamLayout& rank_layout);

struct TpPpStepOptions;
// Context parallelism's ring (model/context_parallel.h) for `rank`'s blocks
// over a step: per block and micro-batch, cp - 1 key/value blocks sent and
// received in the forward, cp - 1 blocks and cp of their gradients in the
// backward, the forward's again where full recomputation reruns it. `spec`
// is the model as a CP rank sees a sequence (block_size / cp positions);
// shard.tp gives the rank's key/value heads. With shard.ulysses, Ulysses'
// all-to-alls instead: per block and micro-batch q, k, v and the output
// forward, their gradients backward, each cp - 1 messages of 1/cp of the
// rank's rows sent and as many received.
std::vector<StepCollective> ContextParallelStepCollectives(const ModelSpec& spec,
                                                           const ModelShard& shard,
                                                           const RankParams& rank, int64_t cp,
                                                           const TpPpStepOptions& o);

struct TpPpStepOptions {
  int64_t micro_batch = 1;    // sequences per micro-batch
  int64_t micro_batches = 1;  // micro-batches per step (the pipeline's)
  // Bytes of one activation / gradient element as communicated (4: the
  // trainer's fp32). The cross-entropy statistics are always fp32.
  int64_t elem_bytes = 4;
  // Full activation recomputation repeats each block's forward collectives
  // during backward (the trainer's training.recompute = "full" reruns each
  // block's forward, collectives included, before its backward).
  bool recompute_full = false;
  // With recompute_full: the layers of each model chunk that rerun (the first
  // ones; Megatron-LM's --recompute-num-layers with the block method); 0: all.
  int64_t recompute_layers = 0;
  // Megatron-LM's scatter-gather of pipeline messages: without sequence
  // parallelism each TP rank sends 1/tp of the activation and the receivers
  // all-gather it (over NVLink, not counted here). The trainer sends its
  // whole residual rows: false.
  bool pp_scatter_gather = false;
};

// The collectives one rank issues on its TP group in a step (none when
// tp = 1), per micro-batch on each of its chunks, as the model issues them:
//   blocks, forward:  without SP an all-reduce after each row-parallel
//                     matmul (2 per block); with SP an all-gather before each
//                     column-parallel matmul and a reduce-scatter after each
//                     row-parallel one (4 per block), each of the full
//                     B x T x n_embd activation
//   blocks, backward: the same transposed (2, or 4 with SP), and with SP one
//                     all-reduce per block of its partial norm and bias
//                     gradients (block_replicated_numel / layers elements)
//   embedding (virtual stage 0): its vocab-parallel output summed (all-reduce,
//                     with SP a reduce-scatter); with SP backward all-gathers
//                     the output gradient
//   head (last virtual stage): with SP an all-gather of the final norm's
//                     output; the vocab-parallel cross-entropy's row max
//                     (all-reduce of B x T fp32) and sums (2 x B x T fp32);
//                     backward, its input gradient summed (all-reduce, with
//                     SP a reduce-scatter), and with SP the final norm's
//                     partial gradients (all-reduce)
// plus, once per step, the gradient-norm sum (one double).
std::vector<StepCollective> TensorParallelStepCollectives(const ModelSpec& spec,
                                                          const ModelShard& shard,
                                                          const RankParams& rank,
                                                          const TpPpStepOptions& o);

// Elements of one pipeline message (an activation or its gradient): the
// residual rows a rank holds (B x T, or B x T / tp with SP) x n_embd; with
// scatter-gather (and no SP) 1/tp of that.
int64_t PipelineMessageNumel(const ModelSpec& spec, const ModelShard& shard, int64_t micro_batch,
                             bool scatter_gather);

// The operations stage shard.stage issues on its PP group in a step (none
// when pp = 1), as the pipeline executor and the trainer issue them: one
// send per send action and one receive per receive action of its list in
// `schedule` (the communicator counts both ends), each of
// PipelineMessageNumel elements; on the first and last stage, after the
// flush, the exchange of the tied embedding's gradient (a send and a
// receive of vocab_numel elements); on every stage the sum of the logged
// loss over the stages and the gradient-norm sum (one double each).
std::vector<StepCollective> PipelineStepCollectives(const ModelSpec& spec, const ModelShard& shard,
                                                    const RankParams& rank,
                                                    const PipelineSchedule& schedule,
                                                    const TpPpStepOptions& o);

}  // namespace scaletrain
