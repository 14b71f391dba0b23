// Pipeline schedules as data: for each pipeline stage, the ordered list of
// actions it runs in one training step (forward or backward of a micro-batch
// on one of its model chunks, and the sends and receives of activations and
// gradients between them). The trainer executes the lists; the planner
// simulates the same lists to predict the bubble and the activation memory
// (DESIGN.md principle 1). Plain logic: no training code, no communication.
//
// Chunks and virtual stages (Megatron-LM's interleaving): stage s holds vpp
// model chunks; chunk c of stage s is virtual stage v = c * pp + s, so the
// model's layers run through virtual stages 0, 1, ..., pp * vpp - 1 and an
// activation leaving the last stage's chunk c enters stage 0's chunk c + 1.
// Without interleaving vpp = 1 and the virtual stage is the stage.
// ZB-V places its two chunks in a V instead (Qi et al. 2024): stage s holds
// virtual stages s and 2 pp - 1 - s, so the first stage runs both the
// embedding and the head, and the last stage hands its chunk 0's output to
// its own chunk 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace scaletrain {

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved, kZbH1, kZbV };
// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"
const char* ScheduleKindName(ScheduleKind kind);
Result<ScheduleKind> ScheduleKindFromName(const std::string& name);

enum class PipeOp : uint8_t {
  kForward,         // run the chunk's forward on the micro-batch
  kBackward,        // run the chunk's backward on the micro-batch
  kSendActivation,  // the chunk's forward output, to the next virtual stage
  kRecvActivation,  // the chunk's forward input, from the previous virtual stage
  kSendGradient,    // the gradient of the chunk's input, to the previous virtual stage
  kRecvGradient,    // the gradient of the chunk's output, from the next virtual stage
  // Zero-bubble schedules split kBackward in two (Qi et al., ICLR 2024):
  kBackwardInput,  // "B": the gradient of the chunk's input (what the previous stage waits for)
  kBackwardWeight,  // "W": the chunk's weight gradients, after its B; frees the activations
};
const char* PipeOpName(PipeOp op);
bool IsCompute(PipeOp op);
// Whether the schedule runs each backward as B and W (zero-bubble kinds).
bool SplitsBackward(ScheduleKind kind);
// Whether its chunks sit in a V (zb-v) rather than Megatron's interleaving.
bool PlacesChunksInV(ScheduleKind kind);
// The virtual stage of a stage's chunk, and back.
int32_t VirtualStageOf(int32_t pp, bool v_shape, int32_t stage, int32_t chunk);
int32_t StageOfVirtual(int32_t pp, bool v_shape, int32_t virtual_stage);
int32_t ChunkOfVirtual(int32_t pp, bool v_shape, int32_t virtual_stage);

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int32_t micro_batch = 0;
  int32_t chunk = 0;  // this stage's model chunk the action belongs to, 0..vpp-1
  // Sends and receives: the stage and chunk at the other end. -1 for compute.
  int32_t peer_stage = -1;
  int32_t peer_chunk = -1;
  bool operator==(const PipeAction&) const = default;
};
// "F mb3 c1", "send-act mb3 c1 -> s2 c1"; for messages and test output.
std::string PipeActionToString(const PipeAction& action);

// Execution contract: a stage runs its list in order. A send is posted
// without waiting (an executor uses a non-blocking send and completes it by
// the end of the step); a receive marks the point where the stage needs the
// tensor and waits for it there (an executor may post it earlier). Every
// message is identified by (activation or gradient, micro-batch, sending
// virtual stage), so an executor can derive a unique tag from it.
struct PipelineSchedule {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int32_t pp = 1;
  int32_t vpp = 1;
  int32_t micro_batches = 1;
  bool v_shape = false;  // PlacesChunksInV(kind)
  std::vector<std::vector<PipeAction>> stages;  // [stage] -> actions in run order

  int32_t num_virtual_stages() const { return pp * vpp; }
  int32_t VirtualStage(int32_t stage, int32_t chunk) const {
    return v_shape ? VirtualStageOf(pp, true, stage, chunk) : chunk * pp + stage;
  }
  int32_t StageOf(int32_t virtual_stage) const { return StageOfVirtual(pp, v_shape, virtual_stage); }
  int32_t ChunkOf(int32_t virtual_stage) const { return ChunkOfVirtual(pp, v_shape, virtual_stage); }
};

// gpipe: all forwards, then all backwards. 1f1b: min(pp - stage - 1, m)
// warm-up forwards, then alternately one forward and one backward, then the
// remaining backwards (PipeDream-Flush, as Megatron-LM). interleaved:
// Megatron-LM's interleaved 1F1B over vpp >= 2 chunks per stage and pp >= 2
// stages; micro-batches enter in groups of pp, so micro_batches must be a
// multiple of pp. zb-h1: ZB-H1 of Qi et al. (ICLR 2024): 1f1b's warm-up
// and its order of forwards and B's, each backward split into B and W, and
// stage s keeping up to s W's back (run in micro-batch order) for the
// cool-down, where 1f1b idles: the critical path back through the stages
// carries only B's, and every stage holds at most pp micro-batches'
// activations (1f1b's first stage's peak). gpipe, 1f1b and zb-h1 need vpp = 1.
// zb-v: ZB-V (ibid.), vpp = 2 chunks in a V, pp >= 2; built by list
// scheduling with equal F, B and W times: a stage that is free runs a B
// whose output gradient is there (oldest micro-batch first), else a forward
// whose input is there (chunk 1's first) if its activations fit, else the
// oldest W. Each micro-batch holds two chunk slots on a stage from its
// chunk-0 forward (one for each chunk) until their W's; a stage holds at
// most 2 pp, the activations of pp micro-batches, as 1f1b's first stage.
// The lists assume messages arrive at once: with each transfer 0.3 of a
// stage's forward (sends sharing the link) the simulated bubble at pp 4,
// m 8 grows from 1.5 to 12.3 stage forwards (zb-h1's from 3 to 6.6); a
// build in which a message takes one step idles 6.5 there, but 3.5 with
// free transfers (docs/training.md).
Result<PipelineSchedule> BuildPipelineSchedule(ScheduleKind kind, int32_t pp, int32_t vpp,
                                               int32_t micro_batches);
// The schedule a training config asks for (parallel.schedule, .pp, .vpp);
// the errors name the setting to change. With pp = 1, gpipe is 1F1B too
// (forward and backward of each micro-batch in turn: one micro-batch's
// activations held, not all of them).
Result<PipelineSchedule> PipelineScheduleFromConfig(const ParallelConfig& parallel,
                                                    int64_t micro_batches);

// Per stage: the most micro-batch chunks whose forward has run and whose
// backward has not, at any point of the stage's list. Each holds the
// activations of one chunk (1/vpp of the stage's layers) for its backward.
// With chunk >= 0, only that model chunk's are counted (e.g. chunk 0 of
// stage 0 holds the embedding's).
std::vector<int32_t> PeakActivations(const PipelineSchedule& schedule, int32_t chunk = -1);

struct PipeTimes {
  double forward_s = 1;   // one forward of one chunk on one micro-batch
  double backward_s = 2;  // one backward of one chunk on one micro-batch
  double p2p_s = 0;       // from a send being posted to the tensor being there
  // A stage's sends share its one link (a host's NIC): each message leaves
  // when the stage's previous one has arrived, so p2p_s is a transfer time
  // and messages queue behind each other. false: every send takes p2p_s
  // from its posting, however many are in flight.
  bool sends_share_link = false;
  // Of backward_s, the weight gradients' part: a split backward (zero-
  // bubble schedules) runs backward_s - weight_s in B and weight_s in W.
  double weight_s = 1;
};

struct ScheduleSimulation {
  double makespan_s = 0;                  // step start to the last action's end
  std::vector<double> busy_s;             // per stage: time in forwards, backwards, B's and W's
  std::vector<double> idle_s;             // per stage: makespan - busy (bubble and waits)
  std::vector<int32_t> peak_activations;  // per stage, as PeakActivations
};

// Runs the lists under the execution contract above with the same times on
// every stage, event by event: a stage runs until it reaches a receive whose
// send has not been posted, and resumes when it is. Also checks the lists:
// every message is sent once and received once by the stage and chunk it is
// addressed to, a stage sends only what it has computed and computes only
// on what it has received, every (micro-batch, chunk) runs forward once and
// then backward once on every stage (B once and then W once where the
// schedule splits it). Returns an error naming the first
// violation, or the waits of every stage when the lists deadlock.
Result<ScheduleSimulation> SimulatePipelineSchedule(const PipelineSchedule& schedule,
                                                    const PipeTimes& times);

}  // namespace scaletrain
