// The cost model: for a model, a cluster, a software stack and a layout, the
// step time and its parts, throughput, FLOPs, MFU, memory per GPU and the
// bytes each GPU sends. Each part of the step time and of the memory is a
// function of its own (compute_terms.h, comm_terms.h, memory_terms.h);
// CostModel::Evaluate puts them together. Method and every factor:
// docs/planner.md.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "model/spec.h"
#include "parallel/dp_layout.h"
#include "parallel/schedule.h"
#include "parallel/tp_pp_layout.h"
#include "plan/comm_terms.h"
#include "plan/compute_terms.h"
#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/memory_terms.h"

namespace scaletrain::plan {

// The step's time, each part with the function that computes it.
struct TimeBreakdown {
  double compute = 0;  // forward + backward math of the slowest stage (StageComputeSeconds)
  double recompute =
      0;               // forward work repeated for activation recomputation (LayerRecomputeSeconds)
  double tp_comm = 0;  // tensor/sequence-parallel collectives, not overlapped (TpCommSeconds)
  double cp_comm = 0;  // context-parallel ring transfers the attention does not hide (CpRingSeconds)
  double pp_comm = 0;  // pipeline point-to-point sends and receives (PpCommSeconds)
  double dp_comm = 0;  // data-parallel / ZeRO traffic left exposed after overlap (DpCommSeconds)
  double bubble = 0;   // pipeline idle time, from simulating the schedule (PipelineBubbleSeconds)
  double optimizer = 0;  // the optimizer step, memory-bound (OptimizerSeconds)
  double Total() const {
    return compute + recompute + tp_comm + cp_comm + pp_comm + dp_comm + bubble + optimizer;
  }
};

struct CommBytes {  // bytes one GPU sends per step
  double tp = 0, pp = 0, dp = 0;
};

struct Prediction {
  Layout layout;
  double step_time_s = 0;
  TimeBreakdown time_s;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;     // model FLOPs (no recompute) per second per GPU
  double hw_tflops_per_gpu = 0;  // including recomputed forward work
  double mfu = 0, hfu = 0;
  double model_flops_per_step = 0, hw_flops_per_step = 0;
  MemoryBreakdown memory;  // the most loaded GPU's (StageMemory)
  double memory_gib = 0, capacity_gib = 0;
  bool fits = false;
  CommBytes comm_bytes;
  RankBytes rank_bytes;                // the most loaded rank (StageRankBytes)
  std::vector<RankBytes> stage_bytes;  // a rank of each pipeline stage, stage 0 first
  // The transformer blocks each pipeline stage runs, stage 0 first, as the
  // trainer splits them by cost (PipelineStageStarts: the last stage, which
  // also runs the head, may run fewer, and then the first ones one more).
  std::vector<int64_t> stage_layers;
  // The collectives one step issues on a rank's DP group, with payload bytes
  // in the communicator's convention (ZeRO <= 2: DataParallelStepCollectives,
  // what the trainer issues; ZeRO-3: the planner's FSDP model).
  std::vector<StepCollective> dp_collectives;
  // Payload bytes of the TP collectives one step issues on the slowest
  // stage's TP group (communicator convention).
  int64_t tp_payload_bytes = 0;
  // Per pipeline stage (stage 0 first), the operations a rank of it issues
  // in a step on its DP, TP and PP groups: DataParallelStepCollectives,
  // TensorParallelStepCollectives and PipelineStepCollectives
  // (src/parallel/tp_pp_layout.h), what the trainer issues and counts.
  struct StageCollectives {
    std::vector<StepCollective> dp, tp, pp, cp;
  };
  std::vector<StageCollectives> stage_collectives;
  int64_t dp_buckets = 0;
  // Hybrid sharding (Layout::shard_group): how many sharding groups the
  // gradient group holds (1: none), and the all-reduces of each rank's
  // gradient shard across them (ReplicaAllReduces), on the replicas' group.
  int64_t shard_replicas = 1;
  std::vector<StepCollective> replica_collectives;
  int64_t DpPayloadBytes() const {
    int64_t n = 0;
    for (const auto& c : dp_collectives) n += c.payload_bytes;
    return n;
  }
  double dp_comm_total_s = 0;  // before overlap
  double comm_to_compute = 0;  // all communication time / compute time
  std::string limiter;         // "compute" or the largest other term
  // The step time's range: fastest and slowest with the uncertain inputs at
  // the ends of their sourced spans (StepTimeRange, uncertainty.h); 0, 0
  // where not computed.
  double step_time_lo_s = 0, step_time_hi_s = 0;
  // The tensor-core clock the job computes at, as a share of a typical GPU's:
  // the slowest of its GPUs sets the pace (SlowestGpuFactor; 1: not modelled).
  double slowest_gpu_pace = 1.0;
};

// Narayanan et al. (SC'21) eq. for GPT with full recomputation:
// 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs per step.
double NarayananFlopsPerStep(int64_t batch, int64_t seq, int64_t layers, int64_t hidden,
                             int64_t vocab);

// ModelFlopsPerSequence, BlockForwardFlopsPerSequence: model/spec.h (the
// trainer's MFU uses them too).

// Forward FLOPs of one sequence that recomputation repeats: the blocks'
// forward under full recomputation, the attention scores (QK^T and AV,
// 4 s^2 h per layer) under selective, none otherwise.
double RecomputeFlopsPerSequence(const ModelSpec& m, Recompute rc);

class CostModel {
 public:
  CostModel(ModelSpec spec, ClusterSpec cluster, Software sw);

  // Checks the layout (ValidateLayout) and predicts it.
  Result<Prediction> Predict(const Layout& l);
  // Predicts without the checks; the search builds only valid layouts.
  Result<Prediction> Evaluate(const Layout& l);

  const ModelSpec& spec() const { return spec_; }
  const ClusterSpec& cluster() const { return cluster_; }
  const Software& software() const { return sw_; }

 private:
  // The profile's measured_model_step for this model against the kernel-by-
  // kernel compute of the same micro-batch at one rank: forward and backward
  // ratios (1 where the profile has no row for this model). Scales every
  // layout's compute: what a training step's kernels lose to running one
  // after another (cold caches) and, measured under the run's launch, to
  // ranks sharing cores.
  PassSeconds MeasuredStepFactor(Precision precision, const GpuRates& rates) const;
  MicroBatchSeconds ScaledToMeasuredStep(MicroBatchSeconds mb, Precision precision,
                                         const GpuRates& rates) const;

  // A rank of each stage of a tp x pp x vpp layout (TP rank 0; every TP
  // rank holds as many elements), from BuildRankLayout.
  using StageParams = RankParams;
  struct ScheduleInfo {
    PipelineSchedule schedule;
    std::vector<int32_t> in_flight;
    std::vector<int32_t> first_chunk_in_flight;  // chunk 0's only (the embedding's)
  };
  const std::vector<StageParams>& StagesFor(int64_t tp, int64_t pp, int64_t vpp,
                                            bool v_shape = false);
  Result<const ScheduleInfo*> ScheduleFor(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t m);
  // The schedule's makespan with these action times; p2p_s > 0: each message
  // takes that long on its sender's link, queueing (PipeTimes::sends_share_link).
  // A schedule that splits the backward (zero-bubble) runs weight_share of
  // t_bwd in W and the rest in B.
  Result<double> Makespan(const ScheduleInfo& s, double t_fwd, double t_bwd, double p2p_s = 0,
                          double weight_share = 0);

  // The pipeline's transfers and bubble (t->pp_comm, t->bubble): the
  // schedule simulated with the slowest stage's chunk times, the p2p
  // messages (p2p_s each) in them or, with async sends, beside them.
  Status SetPipelineTimes(const ScheduleInfo& sched, const Layout& l, const StageSeconds& stage, double p2p_s,
                          double weight_share, TimeBreakdown* t);
  // The stage whose micro-batch takes longest (forward + backward, with its
  // TP collectives and CP transfers; `cp_layer` is one layer's): it sets the
  // pipeline's pace.
  struct SlowestStage {
    size_t index = 0;
    StageSeconds time;
  };
  SlowestStage FindSlowestStage(const Layout& l, const std::vector<StageParams>& stages,
                                const std::vector<Prediction::StageCollectives>& collectives,
                                const MicroBatchSeconds& mb, const PassSeconds& cp_layer,
                                int64_t grad_elem_bytes, double hbm_bytes_per_s) const;
  // One layer's context-parallel ring transfers per micro-batch
  // (CpRingSeconds; FindSlowestStage adds the recomputed forward's to the
  // backward); nothing when cp = 1.
  PassSeconds CpLayerSeconds(const Layout& l, const LayerShape& shape, const MicroBatchSeconds& mb) const;
  // The step's data-parallel part on the fullest stage: its collectives
  // (p->dp_collectives, the replicas'), p->time_s.dp_comm and optimizer,
  // p->dp_comm_total_s and p->comm_bytes.dp; returns the DP communication
  // time before overlap.
  double SetDataParallel(const std::vector<StageParams>& stages, const SlowestStage& slowest,
                         int64_t grad_elem_bytes, double hbm_bytes_per_s, Prediction* p) const;
  // Hybrid sharding's all-reduces of the gradient shards across the
  // replicas (ReplicaAllReduceSeconds), on their own link; sets
  // p->shard_replicas and p->replica_collectives. `group` is one sharding
  // group (ShardGroupLayout), whose collectives p->dp_collectives holds.
  DpSeconds ReplicaSeconds(const Layout& l, const Layout& group, int64_t reductions,
                           const StageSeconds& stage, Prediction* p) const;
  // The share of the compute's throughput that communication overlapping it
  // takes: Software::overlap_slowdown s as s / (1 + s), so that hidden
  // transfers cost s of their time (OverlapCostSeconds).
  double OverlapShare() const;
  // A stage's TP collectives per micro-batch: in full, or pipelined with its
  // layers' GEMMs (Software::tp_comm_overlap, with SP).
  PassSeconds TpSeconds(const Layout& l, const std::vector<StepCollective>& tp_collectives, const Link& link,
                        const MicroBatchSeconds& mb, int64_t layers) const;
  // The memory of a rank of each stage (p->stage_bytes); the most loaded
  // one's is p->memory and p->rank_bytes.
  // `tokens` is the model as a CP rank sees a sequence (CpRankSpec).
  void SetMemory(const Layout& l, const ModelSpec& tokens, const std::vector<StageParams>& stages,
                 const ScheduleInfo& sched, int64_t grad_elem_bytes, Prediction* p) const;

  ModelSpec spec_;
  ClusterSpec cluster_;
  Software sw_;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, std::vector<StageParams>> stages_;
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, std::unique_ptr<ScheduleInfo>> schedules_;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, double> makespans_;
};

}  // namespace scaletrain::plan
