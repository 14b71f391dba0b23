// The one micro-batch executor: runs this stage's action list of a
// PipelineSchedule (parallel/schedule.h) on its model chunks, for every
// layout. Without pipeline parallelism the model is a one-stage pipeline
// (pp = 1: forward and backward of each micro-batch in turn, no messages),
// so gradient accumulation and ZeRO behave the same at any pp.
//
// Activations and their gradients move on the PP group with non-blocking
// sends (completed by the end of the step) and receives posted at the step's
// start and waited for where the schedule needs them. Data parallelism hears
// about every backward (DataParallel::BeginBackward / OnGradsReady /
// EndBackward) and reduces gradient buckets while backward goes on.
//
// The tied embedding (GPT-2's lm head reuses the token embedding) lives on
// the first stage and, as a copy, on the last (Megatron-LM does the same):
// both start equal, and after the step's backward SumTiedEmbeddingGrads adds
// the two copies' gradients, so both take the same update. Data parallelism
// reduces the embedding's buckets only after that
// (DataParallel::FinishGradReduction).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/schedule.h"

namespace scaletrain {

// Micro-batch data for the first and last stages: fills tokens and targets
// ([mb, T] each) of micro-batch `micro_batch` of the step.
using MicroBatchSource =
    std::function<void(int64_t micro_batch, int32_t* tokens, int32_t* targets)>;

// Where one rank's time went in a step's micro-batches (seconds).
struct PipelineStepTimes {
  double data_s = 0;                     // reading micro-batches
  double forward_s = 0, backward_s = 0;  // compute (TP collectives inside it)
  double weight_s = 0;  // of backward_s, the W passes (zero-bubble schedules)
  double wait_s = 0;                     // pipeline receives and sends: bubble and transfer
  double grad_sync_wait_s = 0;  // waiting for gradient reductions between backwards (ZeRO-2)
};

// Watches the executor (traces): each action with its start and end, and
// each layer's forward or backward inside a compute action.
class PipelineObserver {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~PipelineObserver() = default;
  virtual void OnAction(const PipeAction& action, Clock::time_point start,
                        Clock::time_point end) = 0;
  virtual void OnLayer(const PipeAction& action, int64_t layer, Clock::time_point start,
                       Clock::time_point end) = 0;
};

class PipelineExecutor {
 public:
  using Clock = std::chrono::steady_clock;
  // `pp_comm`: the PP group (rank = stage; size 1 without pipeline
  // parallelism). `model` holds this stage's chunks with at least
  // SlotsPerChunk() slots each. `dp` reduces the gradients (it may be a
  // group of one).
  PipelineExecutor(GPT* model, Communicator* pp_comm, DataParallel* dp,
                   const PipelineSchedule& schedule, int64_t micro_batch_size, int64_t seq_len);

  // Activation slots each chunk of `stage` needs: the most micro-batches
  // whose forward has run and backward has not, per chunk.
  static std::vector<int64_t> SlotsPerChunk(const PipelineSchedule& schedule, int64_t stage);

  // Forward and backward of every micro-batch of the step, in this stage's
  // order. Backward starts from loss_scale x each micro-batch's mean loss.
  // Returns the sum of the micro-batch losses on the last stage, 0 elsewhere.
  Result<double> RunMicroBatches(const MicroBatchSource& data, float loss_scale,
                                 PipelineObserver* observer = nullptr);
  // First and last stage (pp > 1): sums the two copies of the tied
  // embedding's gradients. Nothing elsewhere.
  Status SumTiedEmbeddingGrads();
  const PipelineStepTimes& last_times() const { return times_; }
  const PipelineSchedule& schedule() const { return schedule_; }
  // Runs the next steps by `schedule` (rebalancing changes a rank's
  // micro-batches): the same stages and chunks, and no more activation
  // slots per chunk than the model holds.
  Status SetSchedule(const PipelineSchedule& schedule);
  // Fault injection (tests of the straggler detection): every forward of a
  // micro-batch also sleeps this long, counted as forward compute.
  void set_extra_forward_s(double s) { extra_forward_s_ = s; }

  // Forward only (evaluation) of one micro-batch through every virtual
  // stage in turn. Returns its mean loss on the last stage, 0 elsewhere.
  Result<double> Evaluate(const int32_t* tokens, const int32_t* targets);

 private:
  // The step's receives: every one is posted at the step's start, so a
  // message moves as soon as its sender posts it (large messages need both
  // sides posted); the action in the list only waits for it. An error return
  // leaves them posted into these buffers: the trainer ends the job on any
  // error here.
  struct Inbox {
    using Key = std::pair<int64_t, int64_t>;  // (micro-batch, chunk)
    std::map<Key, std::vector<float>> activations, gradients;
    std::map<std::tuple<bool, int64_t, int64_t>, CommHandle>
        posted;  // (is activation, micro-batch, chunk)
  };
  struct PendingSend {
    std::vector<float> buf;
    CommHandle handle;
  };
  void PostReceives();
  Result<const float*> Received(bool activation, const PipeAction& a);
  Result<float> Forward(const PipeAction& a, const MicroBatchSource& data,
                        PipelineObserver* observer);
  Status Backward(const PipeAction& a, float loss_scale, PipelineObserver* observer);
  // A split backward (zero-bubble schedules): B keeps the slot, W frees it.
  Status BackwardInput(const PipeAction& a, float loss_scale);
  Status BackwardWeight(const PipeAction& a, PipelineObserver* observer);
  // The model's on_grads_ready for action `a`: the observer's layer times
  // (from *layer_start on) and data parallelism's buckets.
  std::function<void(int64_t)> GradsReadyHook(const PipeAction& a, PipelineObserver* observer,
                                              Clock::time_point* layer_start);
  // Copies `src` (an activation, or a gradient in scratch the next backward
  // overwrites) and sends the copy without waiting.
  void Send(const float* src, const PipeAction& a);
  int64_t Tag(PipeOp op, int64_t micro_batch, int64_t virtual_stage) const;

  GPT* model_;
  Communicator* comm_;
  DataParallel* dp_;
  PipelineSchedule schedule_;
  int64_t stage_, mb_, T_, act_numel_;
  std::vector<std::vector<int64_t>> slot_of_;  // [chunk][micro-batch] -> slot, -1 free
  std::vector<std::vector<bool>> slot_busy_;   // [chunk][slot]
  std::vector<int32_t> tokens_, targets_;
  Inbox inbox_;
  std::list<PendingSend> sends_;  // the step's sends in flight
  PipelineStepTimes times_;
  double extra_forward_s_ = 0;
};

}  // namespace scaletrain
