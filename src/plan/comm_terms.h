// The cost model's communication terms, each a function that can be read and
// tested on its own: the TP collectives of a micro-batch, the pipeline's
// point-to-point messages, and the data-parallel (ZeRO, FSDP) traffic of a
// step with the part of it left exposed after overlap. The operations and
// their payload bytes are the trainer's (parallel/dp_layout.h,
// parallel/tp_pp_layout.h); these terms time them on a cluster's links.
// CostModel::Evaluate (cost_model.h) puts them together. Method:
// docs/planner.md.
#pragma once

#include <cstdint>
#include <vector>

#include "model/spec.h"
#include "parallel/dp_layout.h"
#include "plan/compute_terms.h"
#include "plan/hardware.h"
#include "plan/layout.h"

namespace scaletrain::plan {

// A collective's link: the bus bandwidth one rank gets and the latency of one
// call.
struct Link {
  double bytes_per_s = 0;
  double latency_s = 0;
  // One NCCL ring reduce-scatter or all-gather call's latency over the group
  // (NcclRingCallSeconds), paid per bucket; 0: latency_s once per collective
  // kind (the CPU trainer's collectives).
  double ring_call_s = 0;
  // The same for one NCCL all-reduce call (NcclAllReduceCallSeconds).
  double allreduce_call_s = 0;
  // MPI's collectives (the CPU trainer): a call pays latency_s at every
  // step of its ring, 2 (n - 1) for an all-reduce over n ranks, n - 1 for a
  // reduce-scatter or an all-gather (CollectiveCallSeconds). false: one
  // latency_s a call (NCCL's own call latencies are above).
  bool per_ring_step = false;
};

// The latency of one collective call of `kind` over `n` ranks on `link`:
// latency_s per ring step where the link says so, else latency_s.
double CollectiveCallSeconds(CollectiveKind kind, int64_t n, const Link& link);

// The model as a tp-way layout holds it: the vocabulary padded to a multiple
// of tp (Megatron-LM; what BuildRankLayout is given).
ModelSpec TpPaddedSpec(const ModelSpec& m, int64_t tp);

// ---- tensor parallelism ----
// Within one node over NVLink (tp <= GPUs per node), else over the NICs.
// `mpi`: the CPU trainer's collectives, a latency per ring step.
Link TpLink(const ClusterSpec& c, int64_t tp, bool mpi = false);
// The TP collectives of one phase of a step (the list:
// TensorParallelStepCollectives), per micro-batch: each call at its ring bytes
// / bandwidth plus one latency, the sum over the step's `micro_batches`.
double TpSecondsPerMicroBatch(const std::vector<StepCollective>& cs, StepPhase phase, int64_t tp,
                              const Link& link, int64_t micro_batches);
// Forward and backward; not overlapped with compute.
PassSeconds TpCommSeconds(const std::vector<StepCollective>& cs, int64_t tp, const Link& link,
                          int64_t micro_batches);
// The same collectives pipelined with the GEMMs beside them
// (Software::tp_comm_overlap, with SP): each pass's collectives, cut into tp
// chunks, hide under that pass's `gemm` time except the first chunk; while
// they hide, the GEMMs run without the `sm_share` of their throughput the
// transfers take, which the result charges (OverlapCostSeconds).
PassSeconds OverlappedTpSeconds(const PassSeconds& tp_comm, const PassSeconds& gemm, int64_t tp,
                                double sm_share);
// What communication that runs beside compute for `hidden_s` costs that
// compute: the `sm_share` of its throughput the transfers take (their SMs
// and memory traffic; CostModel::OverlapShare, from the measured
// Software::overlap_slowdown; 0 where not modelled).
double OverlapCostSeconds(double hidden_s, double sm_share);

// ---- context parallelism ----
// The link of a context-parallel ring: its cp ranks follow the tp ranks, so
// within one node over NVLink while tp x cp GPUs fit in one, else a step
// waits for the messages that cross to the next node, each over its GPU's
// own NIC (at the fabric's measured p2p_gbit where the profile has one).
// Latency: one hop's.
Link CpLink(const ClusterSpec& c, int64_t tp, int64_t cp);
// Bytes of the keys and values of one rank's chunk of a micro-batch (what one
// ring step sends): 2 x tokens x the rank's KV width x the element.
double CpKvBytes(const LayerShape& s);
// The ring attention's transfers of one layer, forward and backward, as
// Transformer Engine's ring exchange runs them (cp_comm_type "p2p"): each
// pass runs cp attention kernels (`attention` is the pass's time for all of
// them) and, under the first cp - 1, sends its keys and values on and
// receives the next rank's; the backward sends their gradients along too
// (twice the bytes) and, after the last kernel, the gradients home (once
// more the keys' bytes). A step whose message takes longer than its kernel
// exposes the difference; what hides costs the compute the `sm_share` of the
// SMs the transfers occupy (OverlapCostSeconds). Nothing when cp = 1.
PassSeconds CpRingSeconds(const LayerShape& s, const PassSeconds& attention, const Link& link,
                          double sm_share);

// Ulysses' all-to-alls of one layer (Layout::cp_ulysses): forward q, k, v
// from sequence to heads and the attention output back, backward their
// gradients the same way; each sends (cp - 1) / cp of the rank's rows x
// width in cp - 1 messages. Not hidden: the attention waits for the first,
// the next layer's matmul for the second. Nothing when cp = 1.
PassSeconds CpUlyssesSeconds(const LayerShape& s, const Link& link);

// ---- pipeline parallelism ----
// Bytes of one pipeline message, an activation or its gradient:
// PipelineMessageNumel (split over the TP ranks with scatter-gather, as
// Megatron-LM) x the activation element.
double PpMessageBytes(const ModelSpec& m, const Layout& l, const Software& sw);
// One message between neighbouring stages: latency + bytes / bandwidth, over
// the NICs when a stage's tp x cp x dp ranks fill a node or more (the next stage
// is on another node; at the fabric's measured p2p_gbit where the profile has
// one), else within the node.
double PpMessageSeconds(const ClusterSpec& c, const Layout& l, double message_bytes);
// A step's transfers on the critical path: every micro-batch's forward and
// backward on each of the `chunks` a stage runs receives one message.
double PpCommSeconds(double message_s, int64_t micro_batches, int64_t chunks);

// ---- data parallelism ----
// How many rounds of gradient reduction a step runs, for the time model:
// ZeRO-2 after every micro-batch, once otherwise. (The exact bytes, with the
// tied embedding's buckets reduced once, are DpStepCollectivesFor's.)
int64_t DpGradReductions(const Layout& l, int64_t micro_batches);
// The collectives a rank of `stage` issues on its DP group in a step (none
// when dp = 1), and how many gradient buckets its padded buffer is cut into
// (*num_buckets). ZeRO <= 2: what the trainer issues
// (DataParallelStepCollectives; with pipeline parallelism and a tied head,
// the buckets holding the embedding wait for the tied sum and are reduced
// once); ZeRO-3 too (the trainer's parallel.zero = 3, FSDP-like): buckets
// cut at the stage's layer boundaries (PlanZero3 over stage.run_numels),
// every micro-batch gathers the units for forward and again for backward
// (Zero3GathersPerPass) and reduce-scatters the gradients bucket by bucket.
// Gradients go in the gradient buffer's element
// (grad_elem_bytes), parameters in the compute precision's.
std::vector<StepCollective> DpStepCollectivesFor(const RankParams& stage, const ModelSpec& model,
                                                 const Layout& l, int64_t grad_elem_bytes,
                                                 int64_t* num_buckets);
// Ring bytes one rank sends for a list, in all (`sent`) and by kind; scalars
// (a double or less: the loss average, the gradient-norm sum) count in
// `sent` only, their time is the latency the terms below charge.
struct DpRingBytes {
  double allreduce = 0, reduce_scatter = 0, allgather = 0;
  double sent = 0;
};
DpRingBytes DpRingBytesByKind(const std::vector<StepCollective>& cs, int64_t dp);
// A DP group's link. Ranks are ordered tp fastest, then dp, so a group has
// gpus_per_node / tp members per node: within one node NVLink; across nodes
// those members share the node's NICs (no more than NVLink). Latency: with
// `nccl`, NCCL's call latencies per bucket (and 2 log2(dp) hops of the
// link's for what is not a bucket); else MPI's, the link's latency at every
// step of a call's ring (Link::per_ring_step), every bucket a call.
Link DpLink(const ClusterSpec& c, int64_t tp, int64_t dp, bool nccl = false);
// NCCL's latency for one ring reduce-scatter or all-gather over a DP group of
// n ranks (NCCL's tuning model, src/graph/tuning.cc, ring algorithm, Simple
// protocol, the one large buckets use): a base of 8.4 us, then n - 1 steps,
// nodes - 1 of them from one node to the next at 14 us (or the fabric's
// latency_us where that is more) and the rest on NVLink at 3.4 us (5.7 us on
// PCIe). NCCL has no tree for these two collectives, so at large dp the
// latency grows with n on every call: why Megatron-Core's buckets grow with dp.
double NcclRingCallSeconds(const ClusterSpec& c, int64_t tp, int64_t n);
// NCCL's latency for one all-reduce call over the group: the ring's 2 (n - 1)
// steps or the tree's (each node's members in a chain, log2(nodes) hops
// between nodes, up and down), whichever is less, on the base of 8.4 us.
double NcclAllReduceCallSeconds(const ClusterSpec& c, int64_t tp, int64_t n);
// A step's DP time in all and the part of it compute does not hide.
struct DpSeconds {
  double total = 0, exposed = 0;
};
// ZeRO-0: the gradient all-reduce, a reduce-scatter and an all-gather (two
// latencies; with the link's allreduce_call_s, one call per bucket); with overlap its buckets
// reduce while the last micro-batch's backward runs (one chunk of the stage's `stage_bwd_s`). With
// `buckets` given (> 0), the first bucket is ready only after 1/buckets of that backward and the
// last one only at its end, so at most (buckets - 1) / buckets of it hides reductions and the last
// bucket's is always exposed: one bucket hides nothing.
DpSeconds DpAllReduceSeconds(double allreduce_bytes, const Link& link, double stage_bwd_s,
                             double chunks, bool overlap, int64_t buckets = 0);
// The DP group's members on one node (ranks are tp fastest, then dp).
int64_t DpRanksPerNode(const ClusterSpec& c, int64_t tp, int64_t dp);
// Whether ZeRO-0's reduction runs hierarchical: asked for, and the DP group
// spans nodes with the same number (>= 2) of members on each.
bool DpHierarchicalApplies(const ClusterSpec& c, const Layout& l);
// The hierarchical reduce (the trainer's DataParallel with dp_host /
// dp_cross): each bucket reduce-scattered among the node's k members while
// backward runs ((k-1)/k of `grad_bytes` over the node's link, hidden as
// DpAllReduceSeconds hides buckets), then after backward each member's block
// all-reduced across the nodes (`cross_ring_bytes` per rank, over its share
// of the node's NICs) and the blocks all-gathered in the node ((k-1)/k
// again): those two are exposed.
DpSeconds DpHierarchicalSeconds(double grad_bytes, double cross_ring_bytes, int64_t k,
                                const Link& node, const Link& cross, double stage_bwd_s,
                                double chunks, bool overlap, int64_t buckets);

// ZeRO-1 and -2: `reductions` gradient reduce-scatters, each under a backward
// (with more than one, each chunk's backward reduce-scatters its own 1/chunks
// of the gradients under itself), and the parameter all-gather under the next
// step's first forward. With the link's ring_call_s every one of `buckets`
// is a call of its own; and as for ZeRO-0, the last bucket's reduce-scatter
// starts only when its backward ends and the first bucket's gather must end
// before the forward starts, so (buckets - 1) / buckets of a pass hides them.
DpSeconds DpShardedSeconds(double reduce_scatter_bytes, double allgather_bytes, int64_t reductions,
                           const Link& link, const StageSeconds& stage, double chunks, bool overlap,
                           int64_t buckets = 0);
// ZeRO-3 (FSDP): each micro-batch's gathers and reduce-scatter (three
// latencies; with the link's ring_call_s three calls per layer); with overlap
// they hide under that micro-batch's compute except the first layer's gather.
DpSeconds FsdpSeconds(double reduce_scatter_bytes, double allgather_bytes, const Link& link,
                      int64_t micro_batches, int64_t stage_layers, const StageSeconds& stage,
                      bool overlap);
// Hybrid sharding (Layout::shard_group): for every reduce-scatter a
// sharding group issues, each rank all-reduces the shard it received with
// the ranks that hold the same shard in the other groups (the replicas): as
// many calls, each of the reduce-scatter's payload / `shard_ranks` bytes, in
// the same phase. FSDP's HYBRID_SHARD issues them this way, one per unit;
// Megatron-Core's distributed-optimizer instances one per bucket.
std::vector<StepCollective> ReplicaAllReduces(const std::vector<StepCollective>& shard_group,
                                              int64_t shard_ranks);
// Those all-reduces on the replicas' link, in `rounds` equal rounds (one per
// gradient reduction: each micro-batch under ZeRO-2 and -3, once under
// ZeRO-1) of `calls_per_round` calls. Each call waits for its reduce-scatter,
// so a round hides under the backward it follows (`stage.bwd / chunks`) bar
// its last call, which (except in the step's last round) still hides under
// the next micro-batch's forward; the last round's last call is exposed.
// Without overlap all of it is. Nothing when `ring_bytes` is 0.
DpSeconds ReplicaAllReduceSeconds(double ring_bytes, int64_t rounds, int64_t calls_per_round,
                                  const Link& link, const StageSeconds& stage, double chunks,
                                  bool overlap);
// FSDP2's copy-out: every parameter all-gather's output read and written
// once more on the compute stream (2 x the gathered bytes over HBM).
double FsdpCopyOutSeconds(const std::vector<StepCollective>& dp_collectives,
                          double hbm_bytes_per_s);
// The one of the three for the layout's ZeRO stage (nothing when dp = 1).
// `buckets`: the stage's gradient buckets (ZeRO-0; 0: not known).
DpSeconds DpCommSeconds(const DpRingBytes& bytes, const Layout& l, const Link& link,
                        int64_t reductions, const StageSeconds& stage, int64_t stage_layers,
                        bool overlap, int64_t buckets = 0);

// Sum of RingBytes(n) over a list: the bytes one rank of an n-rank group sends.
double RingBytesSum(const std::vector<StepCollective>& cs, int64_t n);

}  // namespace scaletrain::plan
