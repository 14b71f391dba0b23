// Pipeline schedules as data: for each stage, the ordered list of forward and
// backward actions (micro-batch, model chunk) it runs in one step. The
// planner simulates this list to get the bubble and reads the number of
// micro-batches a stage holds at once from it for the activation memory.
//
// This belongs in src/parallel (the trainer's pipeline runs the same list);
// it lives here until the tensor/pipeline-parallel issue lands, then moves.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace scaletrain::plan {

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved };
const char* ScheduleKindName(ScheduleKind k);
Result<ScheduleKind> ScheduleKindFromName(const std::string& name);

enum class PipeOp : uint8_t { kForward, kBackward };

struct PipeAction {
  PipeOp op;
  int32_t micro_batch;
  int32_t chunk;  // model chunk (virtual stage) on this stage, 0..vpp-1
};

struct PipelineSchedule {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int32_t pp = 1;
  int32_t vpp = 1;
  int32_t micro_batches = 1;
  std::vector<std::vector<PipeAction>> stages;  // [stage] -> actions in run order
};

// gpipe: all forwards, then all backwards. 1f1b: (pp - stage - 1) warm-up
// forwards, then one forward / one backward, then the remaining backwards
// (PipeDream-Flush, as Megatron-LM). interleaved: Megatron-LM's interleaved
// 1F1B over vpp chunks per stage, which needs micro_batches % pp == 0.
Result<PipelineSchedule> BuildSchedule(ScheduleKind kind, int32_t pp, int32_t vpp, int32_t micro_batches);

struct ScheduleTiming {
  double makespan = 0;              // first forward start to last backward end
  std::vector<double> busy;         // per stage: sum of its action times
  std::vector<double> idle;         // per stage: makespan - busy
};

// Runs the schedule with every forward of one chunk taking t_fwd and every
// backward t_bwd on every stage; an action starts when its stage is free and
// its input (the previous stage's forward, the next stage's backward) is done.
// Fails if the action lists deadlock (a malformed schedule).
Result<ScheduleTiming> SimulateSchedule(const PipelineSchedule& s, double t_fwd, double t_bwd);

// Per stage: the most micro-batch chunks whose forward has run and whose
// backward has not, at any point of the stage's list (activation memory).
std::vector<int32_t> PeakInFlight(const PipelineSchedule& s);

}  // namespace scaletrain::plan
