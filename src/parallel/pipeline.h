// Pipeline parallelism: runs this stage's action list of a PipelineSchedule
// (parallel/schedule.h) on its model chunks. Activations and their
// gradients move on the PP group with non-blocking sends (completed by the
// end of the step) and receives posted where the schedule needs them.
//
// The tied embedding (GPT-2's lm head reuses the token embedding) lives on
// the first stage and, as a copy, on the last (Megatron-LM does the same):
// both start equal, and after the step's backward their gradients are
// summed between the two stages, so both copies take the same update. Data
// parallelism may reduce the embedding only after that: the hook for layer
// -1 is held until the sum is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/gpt.h"
#include "parallel/schedule.h"

namespace scaletrain {

// Micro-batch data for the first and last stages: fills tokens and targets
// ([mb, T] each) of micro-batch `micro_batch` of the step.
using MicroBatchSource = std::function<void(int64_t micro_batch, int32_t* tokens, int32_t* targets)>;

struct PipelineStepTimes {
  double forward_s = 0, backward_s = 0;  // compute
  double wait_s = 0;                     // in receives: bubble and transfer
  double tied_sync_s = 0;                // the tied embedding's gradient sum
};

class PipelineExecutor {
 public:
  // `pp_comm`: the PP group (rank = stage). `model` holds this stage's
  // chunks with at least SlotsPerChunk() slots each.
  PipelineExecutor(GPT* model, Communicator* pp_comm, const PipelineSchedule& schedule,
                   int64_t micro_batch_size, int64_t seq_len);

  // Activation slots each chunk of `stage` needs: the most micro-batches
  // whose forward has run and backward has not, per chunk.
  static std::vector<int64_t> SlotsPerChunk(const PipelineSchedule& schedule, int64_t stage);

  // One training step: every action of this stage in order. Backward starts
  // from loss_scale x each micro-batch's mean loss. `on_grads_ready` (data
  // parallelism) hears about each layer's gradients when the last
  // micro-batch's backward has finished them. `on_action` (traces) gets each
  // action with its start and end. Returns the sum of the micro-batch losses
  // on the last stage, 0 elsewhere.
  using Clock = std::chrono::steady_clock;
  Result<double> RunStep(const MicroBatchSource& data, float loss_scale,
                         const std::function<void(int64_t)>& on_grads_ready,
                         const std::function<void(const PipeAction&, Clock::time_point,
                                                  Clock::time_point)>& on_action = nullptr);
  const PipelineStepTimes& last_times() const { return times_; }

  // Forward only (evaluation) of one micro-batch through every virtual
  // stage in turn. Returns its mean loss on the last stage, 0 elsewhere.
  Result<double> Evaluate(const int32_t* tokens, const int32_t* targets);

 private:
  int64_t Tag(PipeOp op, int64_t micro_batch, int64_t virtual_stage) const;
  Status SyncTiedEmbedding();

  GPT* model_;
  Communicator* comm_;
  PipelineSchedule schedule_;
  int64_t stage_, mb_, T_, act_numel_;
  std::vector<std::vector<int64_t>> slot_of_;  // [chunk][micro-batch] -> slot, -1 free
  PipelineStepTimes times_;
};

}  // namespace scaletrain
