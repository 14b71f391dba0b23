// A model with a parallel layout applied to it: the one interface the
// trainer calls, the same way at every layout (dp with ZeRO 0-3, tp with or
// without sequence parallelism, pp under any schedule, rebalanced data
// parallelism). What differs between layouts lives behind it: the pipeline
// executor and its schedule, data parallelism's bucketed reduction, ZeRO-3's
// parameter shard, the compact gradient and optimizer layouts, how
// evaluation batches are dealt over the DP ranks, and which rank's loss is
// the step's.
//
// A training step is, on every rank:
//   ForwardBackward  the step's micro-batches, forward and backward, with the
//                    gradient reduction finished; the step's mean loss
//   GradNorm         the global gradient norm over every rank's unique part
//   OptimizerStep    AdamW on this rank's part (and ZeRO-1/2's all-gather)
// and between steps Evaluate and, after each window of per-rank telemetry,
// AfterTelemetryWindow (which rebalances where the layout asks for it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/process_groups.h"
#include "parallel/rebalance.h"
#include "parallel/schedule.h"
#include "parallel/zero3.h"

namespace scaletrain {

struct ParallelModelOptions {
  ModelSpec spec;  // as the ranks hold it (the vocabulary padded for tp)
  ParallelConfig parallel;
  int64_t micro_batch_size = 1;
  int64_t micro_batches = 1;  // per DP rank and step, before any rebalancing
  ActivationRecompute recompute = ActivationRecompute::kNone;
  AdamWOptions adamw;
  // Fault injection (faults.slow_rank): every forward of a micro-batch on
  // this rank also sleeps this long.
  double extra_forward_s = 0;
};

// Fills tokens and targets ([micro_batch_size, T] each) of micro-batch
// `index` of the step, numbered over every DP rank's micro-batches (rank 0's
// first), so the step's sequences are the same at every layout.
using StepBatchSource = std::function<void(int64_t index, int32_t* tokens, int32_t* targets)>;
// Fills evaluation batch `index` (0-based, micro_batch_size sequences).
using EvalBatchSource = std::function<void(int64_t index, int32_t* tokens, int32_t* targets)>;
// Asked before each round of evaluation batches (one batch per DP rank):
// whether to stop. Collective: every rank asks it as often, and every rank
// must get the same answer (e.g. an all-reduce of a stop flag).
using StopQuery = std::function<Result<bool>()>;

// Where one rank's time went in a step (seconds).
struct StepPhaseTimes {
  double data_s = 0, forward_s = 0, backward_s = 0;
  // Pipeline receives and sends (bubble and transfer) and the tied
  // embedding's sum; none without pipeline parallelism.
  std::optional<double> pipeline_wait_s;
  // Of backward_s, the W passes (zero-bubble schedules only).
  std::optional<double> weight_grad_s;
  double grad_sync_wait_s = 0;  // exposed gradient reduction
  // From the end of the gradient reduction: the loss and norm sums, the
  // update and ZeRO's parameter all-gather.
  double optimizer_s = 0;
};

// What a rank holds for the model, in bytes.
struct ModelMemoryBytes {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0;
};

// This rank's part of the training state as checkpoints read it. The
// parameters are indexed like this rank's flat buffer (ParamLayout offsets),
// or, where `params_compact`, like the moments; the moments are indexed like
// the flat buffer, or, where `moments_compact`, as DataParallel::OwnedRanges
// one after another (a ZeRO rank's blocks).
struct TrainStateView {
  const float* params = nullptr;
  bool params_compact = false;
  const float* exp_avg = nullptr;
  const float* exp_avg_sq = nullptr;
  bool moments_compact = false;
  int64_t optimizer_steps = 0;
};

// Watches a step (traces): the pipeline's actions and layers, and the
// phases after them.
class StepObserver : public PipelineObserver {
 public:
  virtual void OnGradReductions(const DataParallel& dp) = 0;
  virtual void OnGradWait(Clock::time_point start, Clock::time_point end) = 0;
  virtual void OnOptimizer(Clock::time_point start, Clock::time_point end) = 0;
};

class ParallelModel {
 public:
  using Clock = std::chrono::steady_clock;

  // This rank's model shard, data parallelism (and ZeRO-3's parameter shard),
  // the optimizer and the pipeline executor, for the layout of
  // `opt.parallel` on `groups` (which outlive the model). The weights are
  // zero until InitWeights or a restore writes them.
  static Result<std::unique_ptr<ParallelModel>> Create(const ParallelModelOptions& opt,
                                                       ProcessGroups* groups);

  // ---- The weights, before the first step ----
  // This rank's model shard (its layout and spec say which parts of the
  // whole model it holds).
  const GPT& shard() const { return *model_; }
  // The shard's parameters, whole over the DP group: what initialisation or
  // a checkpoint's restore writes before CommitWeights.
  float* whole_params();
  void InitWeights(uint64_t seed);
  // The optimizer's moments from flat buffers laid out like whole_params(),
  // and its step count.
  void LoadOptimizerState(const float* exp_avg, const float* exp_avg_sq, int64_t steps);
  // The weights are final: ZeRO-3 keeps its shard of them from here, and the
  // model reads through it. Call once, before the first step.
  void CommitWeights();

  // ---- A training step ----
  // Forward and backward of this rank's micro-batches of the step, the
  // gradient reduction finished. Returns the step's mean loss over every
  // micro-batch of every DP rank (on every rank). Collective.
  Result<double> ForwardBackward(const StepBatchSource& batches);
  // The global L2 norm of the step's gradients. Collective.
  Result<double> GradNorm();
  // AdamW at learning rate `lr` on the gradients scaled by `grad_scale`
  // (clipping), then ZeRO-1/2's parameter all-gather. Collective.
  Status OptimizerStep(double lr, double grad_scale);
  const StepPhaseTimes& last_times() const { return times_; }
  // Sees every later step's phases; null: none. Not owned.
  void set_observer(StepObserver* observer) { observer_ = observer; }

  // ---- Between steps ----
  // The mean loss over `batches` evaluation batches: each runs forward
  // through every stage on one DP rank. With `stop`, asked before every
  // round of dp batches: when it says stop, the evaluation ends there and
  // returns no loss (a stop request does not wait for a long evaluation).
  // Collective.
  Result<std::optional<double>> Evaluate(int64_t batches, const EvalBatchSource& source,
                                         const StopQuery& stop = nullptr);
  // After a window of per-rank telemetry: `compute_s[r]` is world rank r's
  // compute per step. Where the layout rebalances (parallel.rebalance), the
  // DP ranks' shares of the step's micro-batches follow their speed from the
  // next step; returns the line saying so when they moved. Collective only
  // in that every rank must call it with the same figures.
  Result<std::optional<std::string>> AfterTelemetryWindow(const std::vector<double>& compute_s);

  // ---- What others read ----
  TrainStateView state() const;
  ModelMemoryBytes memory() const;
  // The whole model, where this rank holds all of it (no tp, pp or ZeRO-3);
  // null otherwise (a checkpoint then has it).
  GPT* whole_model();
  // The data-parallel and ZeRO lines of the start-up summary (none without
  // data parallelism).
  std::vector<std::string> LayoutSummary() const;

 private:
  ParallelModel(const ParallelModelOptions& opt, ProcessGroups* groups);
  Status Build();
  // The mean over every micro-batch of the step and every DP rank, from
  // this rank's sum (the last stage's; 0 elsewhere).
  Result<double> MeanLoss(double loss_sum);

  ParallelModelOptions opt_;
  ProcessGroups* groups_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<DataParallel> dp_;
  // ZeRO-3: this rank's parameter shard and the gather buffers the model
  // reads through; the model then holds no parameters.
  std::unique_ptr<Zero3Params> zero3_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<PipelineExecutor> pipeline_;
  MicroBatchShares shares_;  // the step's micro-batches per DP replica
  float loss_scale_;         // 1 / the step's micro-batches over every DP rank
  StepPhaseTimes times_;
  Clock::time_point reduced_at_;  // when the last step's gradient reduction ended
  StepObserver* observer_ = nullptr;
};

}  // namespace scaletrain
