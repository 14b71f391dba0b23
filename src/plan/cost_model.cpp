#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "model/param_layout.h"
#include "plan/comm_terms.h"

namespace scaletrain::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The TP and PP operations a rank of each stage issues in a step, as the
// trainer issues them (src/parallel/tp_pp_layout.h); the cost model times
// the TP ones where they run (forward or backward of each micro-batch). `m`
// is the model as a CP rank sees a sequence (CpRankSpec): the messages carry
// its tokens.
std::vector<Prediction::StageCollectives> TpPpCollectivesByStage(
    const ModelSpec& m, const Layout& l, const Software& sw, const std::vector<RankParams>& stages,
    const PipelineSchedule& schedule) {
  TpPpStepOptions o;
  o.micro_batch = l.micro_batch;
  o.micro_batches = l.micro_batches();
  o.elem_bytes = static_cast<int64_t>(ActivationElemBytes(l.precision));
  o.recompute_full = l.recompute == Recompute::kFull;
  o.recompute_layers = l.recompute_layers;
  o.pp_scatter_gather = sw.pp_scatter_gather;
  const ModelSpec rank_spec = TpPaddedSpec(m, l.tp);
  std::vector<Prediction::StageCollectives> collectives(stages.size());
  for (size_t i = 0; i < stages.size(); ++i) {
    ModelShard shard{l.tp, 0, l.pp, static_cast<int64_t>(i), l.vpp, l.sp && l.tp > 1, l.chunks_in_v()};
    shard.cp = l.cp;
    shard.ulysses = l.cp_ulysses;
    collectives[i].tp = TensorParallelStepCollectives(rank_spec, shard, stages[i], o);
    if (l.pp > 1) {
      collectives[i].pp = PipelineStepCollectives(rank_spec, shard, stages[i], schedule, o);
    }
    collectives[i].cp = ContextParallelStepCollectives(m, shard, stages[i], l.cp, o);
  }
  return collectives;
}

// The stage with the most parameters: its DP traffic and optimizer step are
// the step's.
size_t FullestStage(const std::vector<RankParams>& stages) {
  size_t fullest = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].numel > stages[fullest].numel) fullest = i;
  }
  return fullest;
}

// Each stage's DP collectives, and the fullest stage's as the step's.
void SetDpCollectives(const std::vector<RankParams>& stages, const ModelSpec& model,
                      const Layout& l, int64_t grad_elem_bytes, size_t fullest, Prediction* p) {
  // Stages of equal size that hold the same embedding entries (most of them)
  // issue the same DP collectives.
  std::map<std::pair<int64_t, int64_t>, std::pair<std::vector<StepCollective>, int64_t>> by_kind;
  auto kind = [&](size_t i) {
    return std::make_pair(stages[i].numel, stages[i].embedding_front_numel);
  };
  for (size_t i = 0; i < stages.size(); ++i) {
    auto [it, added] = by_kind.try_emplace(kind(i));
    if (added) {
      it->second.first =
          DpStepCollectivesFor(stages[i], model, l, grad_elem_bytes, &it->second.second);
    }
    p->stage_collectives[i].dp = it->second.first;
  }
  const auto& [collectives, num_buckets] = by_kind.at(kind(fullest));
  p->dp_collectives = collectives;
  p->dp_buckets = l.dp > 1 ? num_buckets : 0;
}

// Throughput and FLOPs of a step whose time is p->step_time_s.
// `recomputed_share`: of the blocks, the share full recomputation reruns
// (RecomputedShare; 1 for the other policies).
void SetThroughput(const ModelSpec& m, const Layout& l, double peak_flops_per_s,
                   double recomputed_share, Prediction* p) {
  const double gb = static_cast<double>(l.global_batch);
  const double n_gpus = static_cast<double>(l.num_gpus());
  p->model_flops_per_step = gb * ModelFlopsPerSequence(m);
  p->hw_flops_per_step =
      p->model_flops_per_step + gb * recomputed_share * RecomputeFlopsPerSequence(m, l.recompute);
  p->tokens_per_s = gb * static_cast<double>(m.block_size) / p->step_time_s;
  p->tflops_per_gpu = p->model_flops_per_step / p->step_time_s / n_gpus / 1e12;
  p->hw_tflops_per_gpu = p->hw_flops_per_step / p->step_time_s / n_gpus / 1e12;
  p->mfu = p->tflops_per_gpu * 1e12 / peak_flops_per_s;
  p->hfu = p->hw_tflops_per_gpu * 1e12 / peak_flops_per_s;
}

// The largest part of the step other than compute, if it is more than 5% of
// the step; else "compute".
std::string Limiter(const TimeBreakdown& t, double step_time_s) {
  const std::pair<const char*, double> terms[] = {
      {"tp_comm", t.tp_comm}, {"cp_comm", t.cp_comm},     {"pp_comm", t.pp_comm},     {"dp_comm", t.dp_comm},
      {"bubble", t.bubble},   {"recompute", t.recompute}, {"optimizer", t.optimizer}};
  std::string limiter = "compute";
  double largest = 0.05 * step_time_s;
  for (const auto& [name, val] : terms) {
    if (val > largest) largest = val, limiter = name;
  }
  return limiter;
}

// ZeRO-0's reduction when it runs hierarchical (DpHierarchicalApplies): the
// fp32 buffer's bytes in the node, each member's block across the nodes in
// the compressed form if any.
DpSeconds HierarchicalDpSeconds(const ClusterSpec& cluster, const Software& sw, const Layout& l,
                                int64_t stage_numel, int64_t grad_elem_bytes, const StageSeconds& stage,
                                int64_t buckets) {
  const int64_t k = DpRanksPerNode(cluster, l.tp, l.dp), h = l.dp / k;
  const double padded = static_cast<double>(DpPaddedNumel(stage_numel, l.dp));
  const double block = padded / static_cast<double>(k), hh = static_cast<double>(h);
  double cross_bytes = 0;
  if (l.dp_compress == DpCompression::kSign) {
    cross_bytes = (hh - 1.0) * static_cast<double>(SignMessageBytes(static_cast<int64_t>(block)));
  } else {
    const double elem = l.dp_compress == DpCompression::kNone ? static_cast<double>(grad_elem_bytes) : 2.0;
    cross_bytes = 2.0 * (hh - 1.0) / hh * block * elem;
  }
  const Link node = DpLink(cluster, l.tp, k);  // k members of one node
  // The all-reduce across the nodes' blocks: a latency per ring step under
  // MPI, 2 log2 hops otherwise (as DpLink).
  const double hop_s = cluster.fabric.latency_us * 1e-6;
  const Link cross{cluster.NicBytesPerSPerGpu(),
                   sw.nccl_collectives ? 2.0 * std::log2(hh) * hop_s : (hh - 1.0) * hop_s};
  return DpHierarchicalSeconds(padded * static_cast<double>(grad_elem_bytes), cross_bytes, k, node, cross,
                               stage.bwd, static_cast<double>(l.vpp), sw.overlap_dp, buckets);
}

}  // namespace

double NarayananFlopsPerStep(int64_t batch, int64_t seq, int64_t layers, int64_t hidden,
                             int64_t vocab) {
  const double B = batch, s = seq, l = layers, h = hidden, V = vocab;
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

double RecomputeFlopsPerSequence(const ModelSpec& m, Recompute rc) {
  if (rc == Recompute::kFull) return BlockForwardFlopsPerSequence(m);
  if (rc == Recompute::kOp) {
    // Half of the blocks' matmul FLOPs (every other matmul is recomputed).
    const double h = static_cast<double>(m.n_embd), F = static_cast<double>(m.ffn_hidden);
    const double kvd = static_cast<double>(m.n_kv_head * m.head_dim());
    const double mm = 2.0 * (2.0 * h * h + 2.0 * h * kvd + static_cast<double>(m.mlp_matrices()) * h * F);
    return 0.5 * mm * static_cast<double>(m.block_size) * static_cast<double>(m.n_layer);
  }
  if (rc != Recompute::kSelective) return 0;
  const double s = static_cast<double>(m.block_size), h = static_cast<double>(m.n_embd);
  return 4.0 * s * h * s * static_cast<double>(m.n_layer);
}

CostModel::CostModel(ModelSpec spec, ClusterSpec cluster, Software sw)
    : spec_(std::move(spec)), cluster_(std::move(cluster)), sw_(std::move(sw)) {}

const std::vector<CostModel::StageParams>& CostModel::StagesFor(int64_t tp, int64_t pp,
                                                                int64_t vpp, bool v_shape) {
  const auto key = std::make_tuple(tp, pp, vpp, v_shape);
  auto it = stages_.find(key);
  if (it != stages_.end()) return it->second;
  // What a rank holds comes from the table the trainer allocates from
  // (BuildRankLayout): its blocks, the embedding on the first stage, the
  // final norm (and head) on the last, each TP-split entry's 1/tp share, and
  // a tied head's copy of the word embedding on a separate last stage
  // (Megatron-LM and the trainer sum the two copies' gradients; zb-v's V
  // puts the head on the first stage, and no copy). The vocabulary is padded
  // to a multiple of tp, as Megatron-LM does.
  const ModelSpec spec = TpPaddedSpec(spec_, tp);
  // Blocks are alike, so stages that run as many blocks in each chunk and
  // are equally first / last hold the same; one BuildRankLayout each (a
  // 126-layer model on 64 stages has three kinds).
  std::vector<StageParams> st;
  st.reserve(static_cast<size_t>(pp));
  std::map<std::vector<int64_t>, StageParams> kinds;
  const std::vector<int64_t> stage_of = VirtualStageOfLayers(spec, pp, vpp);
  for (int64_t s = 0; s < pp; ++s) {
    std::vector<int64_t> kind(static_cast<size_t>(vpp) + 2, 0);
    const ModelShard shard{tp, 0, pp, s, vpp, false, v_shape};
    kind[0] = s == 0, kind[1] = s == HeadStage(shard);
    for (int64_t l = 0; l < spec.n_layer; ++l) {
      const int64_t v = stage_of[l];
      if (StageOfVirtualStage(pp, v_shape, v) == s) {
        ++kind[static_cast<size_t>(2 + ChunkOfVirtualStage(pp, v_shape, v))];
      }
    }
    auto [it, added] = kinds.try_emplace(std::move(kind));
    if (added) it->second = SummarizeRankLayout(spec, BuildRankLayout(spec, shard));
    st.push_back(it->second);
  }
  return stages_.emplace(key, std::move(st)).first->second;
}

Result<const CostModel::ScheduleInfo*> CostModel::ScheduleFor(ScheduleKind kind, int64_t pp,
                                                              int64_t vpp, int64_t m) {
  auto key = std::make_tuple(static_cast<int>(kind), pp, vpp, m);
  auto it = schedules_.find(key);
  if (it != schedules_.end()) return it->second.get();
  auto info = std::make_unique<ScheduleInfo>();
  ST_ASSIGN_OR_RETURN(info->schedule,
                      BuildPipelineSchedule(kind, static_cast<int32_t>(pp),
                                            static_cast<int32_t>(vpp), static_cast<int32_t>(m)));
  info->in_flight = PeakActivations(info->schedule);
  info->first_chunk_in_flight = PeakActivations(info->schedule, 0);
  const ScheduleInfo* p = info.get();
  schedules_.emplace(key, std::move(info));
  return p;
}

Result<double> CostModel::Makespan(const ScheduleInfo& s, double t_fwd, double t_bwd, double p2p_s,
                                   double weight_share) {
  // With the same durations on every stage the makespan scales with them, so
  // one simulation per backward/forward (and p2p/forward, W/backward) ratio,
  // to 0.1%, serves every layout.
  const int64_t ratio = std::llround(1000.0 * t_bwd / t_fwd),
                p2p_ratio = std::llround(1000.0 * p2p_s / t_fwd),
                w_ratio = SplitsBackward(s.schedule.kind) ? std::llround(1000.0 * weight_share) : 0;
  auto key = std::make_tuple(static_cast<int>(s.schedule.kind), static_cast<int64_t>(s.schedule.pp),
                             static_cast<int64_t>(s.schedule.vpp),
                             static_cast<int64_t>(s.schedule.micro_batches), ratio, p2p_ratio,
                             w_ratio);
  auto it = makespans_.find(key);
  if (it != makespans_.end()) return it->second * t_fwd;
  PipeTimes times{1.0, ratio / 1000.0, p2p_ratio / 1000.0, true};
  times.weight_s = times.backward_s * static_cast<double>(w_ratio) / 1000.0;
  ST_ASSIGN_OR_RETURN(ScheduleSimulation sim, SimulatePipelineSchedule(s.schedule, times));
  makespans_[key] = sim.makespan_s;
  return sim.makespan_s * t_fwd;
}

Result<Prediction> CostModel::Predict(const Layout& l) {
  ST_RETURN_IF_ERROR(ValidateLayout(spec_, l.num_gpus(), l));
  return Evaluate(l);
}

CostModel::SlowestStage CostModel::FindSlowestStage(
    const Layout& l, const std::vector<StageParams>& stages,
    const std::vector<Prediction::StageCollectives>& collectives, const MicroBatchSeconds& mb,
    const PassSeconds& cp_layer, int64_t grad_elem_bytes, double hbm_bytes_per_s) const {
  const Link tp_link = TpLink(cluster_, l.tp, !sw_.nccl_collectives);
  SlowestStage slowest;
  for (size_t i = 0; i < stages.size(); ++i) {
    const PassSeconds compute =
        StageComputeSeconds(stages[i], mb, sw_, grad_elem_bytes, hbm_bytes_per_s);
    const PassSeconds tp = TpSeconds(l, collectives[i].tp, tp_link, mb, stages[i].layers);
    const double n = static_cast<double>(stages[i].layers);
    // The layers that recompute: all but where full recomputation reruns some.
    const double rc_layers =
        l.recompute == Recompute::kFull ? n * RecomputedShare(l, stages[i].layers) : n;
    // Full recomputation (of the layers it reruns), and Megatron's selective
    // (the core attention), run the ring attention's forward again; PyTorch's
    // op-level policy keeps its output.
    const double cp_rerun =
        l.recompute == Recompute::kFull || l.recompute == Recompute::kSelective ? rc_layers : 0.0;
    const StageSeconds t =
        StageMicroBatchSeconds(compute, rc_layers, mb.layer_recompute, tp,
                               {n * cp_layer.fwd, n * cp_layer.bwd + cp_rerun * cp_layer.fwd});
    if (t.fwd + t.bwd > slowest.time.fwd + slowest.time.bwd) slowest = {i, t};
  }
  return slowest;
}

PassSeconds CostModel::CpLayerSeconds(const Layout& l, const LayerShape& shape,
                                      const MicroBatchSeconds& mb) const {
  if (l.cp == 1) return {};
  if (l.cp_ulysses) return CpUlyssesSeconds(shape, CpLink(cluster_, l.tp, l.cp));
  return CpRingSeconds(shape, mb.attention, CpLink(cluster_, l.tp, l.cp), OverlapShare());
}

double CostModel::OverlapShare() const {
  return sw_.overlap_slowdown > 0 ? sw_.overlap_slowdown / (1.0 + sw_.overlap_slowdown) : 0.0;
}

PassSeconds CostModel::TpSeconds(const Layout& l, const std::vector<StepCollective>& tp_collectives,
                                 const Link& link, const MicroBatchSeconds& mb, int64_t layers) const {
  const PassSeconds tp = TpCommSeconds(tp_collectives, l.tp, link, l.micro_batches());
  if (!(sw_.tp_comm_overlap && l.sp && l.tp > 1)) return tp;
  // The GEMMs of the stage's layers, the recomputed forward's with the backward.
  const double n = static_cast<double>(layers), rc = RecomputedShare(l, layers);
  const PassSeconds gemm{n * mb.layer_gemm.fwd, n * (mb.layer_gemm.bwd + rc * mb.layer_gemm.fwd)};
  return OverlappedTpSeconds(tp, gemm, l.tp, OverlapShare());
}

void CostModel::SetMemory(const Layout& l, const ModelSpec& tokens,
                          const std::vector<StageParams>& stages, const ScheduleInfo& sched,
                          int64_t grad_elem_bytes, Prediction* p) const {
  // The flat buffers are sharded over the dp x cp ranks (over one sharding
  // group of them with hybrid sharding); activations hold the rank's tokens.
  const Layout g = ShardGroupLayout(l);
  double most = -1;
  for (size_t i = 0; i < stages.size(); ++i) {
    RankBytes rb = StageRankBytes(stages[i].numel, g, grad_elem_bytes);
    MemoryBreakdown mem = StageMemory(tokens, g, sw_, stages[i], rb, sched.in_flight[i],
                                      sched.first_chunk_in_flight[i]);
    if (sw_.trainer_activation_buffer && l.recompute != Recompute::kOp) {
      const auto chunks = TrainerChunksOf(spec_, l, sched.schedule, static_cast<int64_t>(i));
      mem.activations = static_cast<double>(TrainerActivationBytes(spec_, l, chunks));
    }
    rb.activations = std::llround(mem.activations);
    p->stage_bytes.push_back(rb);
    if (mem.Total() > most) most = mem.Total(), p->memory = mem, p->rank_bytes = rb;
  }
  p->memory_gib = p->memory.Total() / kGiB;
  p->capacity_gib = cluster_.gpu.hbm_gib;
  p->fits = p->memory_gib <= cluster_.gpu.hbm_gib;
}

PassSeconds CostModel::MeasuredStepFactor(Precision precision, const GpuRates& rates) const {
  for (const GpuSpec::MeasuredModelStep& m : cluster_.gpu.measured_model_step) {
    if (m.seq != spec_.block_size || m.hidden != spec_.n_embd || m.heads != spec_.n_head ||
        m.layers != spec_.n_layer || m.vocab != spec_.vocab_size) {
      continue;
    }
    // The same micro-batch at one rank, kernel by kernel.
    Layout one;
    one.micro_batch = one.global_batch = m.batch;
    one.precision = precision;
    const MicroBatchSeconds k =
        MicroBatchComputeSeconds(LayerShapeOf(spec_, one), cluster_.gpu, sw_, rates, Recompute::kNone);
    // The embedding (a row gather, one term for both passes) stays as it
    // is; the layers and the head take the ratio.
    const double layers = static_cast<double>(m.layers);
    const double fwd = layers * k.layer.fwd + k.head.fwd, bwd = layers * k.layer.bwd + k.head.bwd;
    const double meas_f = m.fwd_s - k.embedding, meas_b = m.bwd_s - k.embedding;
    if (fwd > 0 && bwd > 0 && meas_f > 0 && meas_b > 0) return {meas_f / fwd, meas_b / bwd};
  }
  return {1.0, 1.0};
}

MicroBatchSeconds CostModel::ScaledToMeasuredStep(MicroBatchSeconds mb, Precision precision,
                                                  const GpuRates& rates) const {
  const PassSeconds f = MeasuredStepFactor(precision, rates);
  mb.layer.fwd *= f.fwd, mb.head.fwd *= f.fwd, mb.layer_recompute *= f.fwd;
  mb.layer.bwd *= f.bwd, mb.head.bwd *= f.bwd;
  return mb;
}

DpSeconds CostModel::ReplicaSeconds(const Layout& l, const Layout& group, int64_t reductions,
                                    const StageSeconds& stage, Prediction* p) const {
  p->shard_replicas = ShardReplicas(l);
  if (p->shard_replicas == 1) return {};
  p->replica_collectives = ReplicaAllReduces(p->dp_collectives, group.dp);
  int64_t calls = 0;
  for (const StepCollective& c : p->replica_collectives) calls += c.calls;
  // ZeRO-3 reduces after every micro-batch's backward; ZeRO-1 and -2 as
  // DpGradReductions says, each chunk's backward its share.
  const int64_t rounds = group.zero >= 3 ? l.micro_batches() : reductions;
  const double chunks = group.zero >= 3 ? 1.0 : static_cast<double>(l.vpp);
  // The replicas of a rank are the ranks shard_group x tp apart: the same
  // local rank of other nodes once a group fills a node.
  const Link link = DpLink(cluster_, group.tp * group.dp, p->shard_replicas, sw_.nccl_collectives);
  return ReplicaAllReduceSeconds(RingBytesSum(p->replica_collectives, p->shard_replicas), rounds,
                                 calls / std::max<int64_t>(1, rounds), link, stage, chunks,
                                 sw_.overlap_dp);
}

double CostModel::SetDataParallel(const std::vector<StageParams>& stages,
                                  const SlowestStage& slowest, int64_t grad_elem_bytes,
                                  double hbm_bytes_per_s, Prediction* p) const {
  // The fullest stage's, over the dp x cp ranks that reduce the gradients
  // together, or with hybrid sharding over one sharding group of them, whose
  // shards the replicas then all-reduce.
  const StageSeconds& stage = slowest.time;
  const size_t fullest = FullestStage(stages);
  Layout g = ShardGroupLayout(p->layout);
  g.bucket_bytes = BucketBytesFor(g, sw_, DpPaddedNumel(stages[fullest].numel, g.dp));
  p->layout.bucket_bytes = g.bucket_bytes;
  const int64_t reductions = DpGradReductions(g, p->layout.micro_batches());
  SetDpCollectives(stages, spec_, g, grad_elem_bytes, fullest, p);
  const DpRingBytes dp_bytes = DpRingBytesByKind(p->dp_collectives, g.dp);
  const DpSeconds dp =
      DpHierarchicalApplies(cluster_, g)
          ? HierarchicalDpSeconds(cluster_, sw_, g, stages[fullest].numel, grad_elem_bytes, stage,
                                  p->dp_buckets)
          : DpCommSeconds(dp_bytes, g, DpLink(cluster_, g.tp, g.dp, sw_.nccl_collectives),
                          reductions, stage, stages[slowest.index].layers, sw_.overlap_dp,
                          p->dp_buckets);
  const DpSeconds replicas = ReplicaSeconds(p->layout, g, reductions, stage, p);
  // What hides still slows the compute it runs beside (OverlapCostSeconds);
  // FSDP2's copy-out of the gathered parameters runs on the compute stream
  // itself.
  const double copy_out = sw_.gather_copy_out && g.zero >= 3 && g.dp > 1
                              ? FsdpCopyOutSeconds(p->dp_collectives, hbm_bytes_per_s)
                              : 0.0;
  const double hidden = dp.total - dp.exposed + replicas.total - replicas.exposed;
  p->time_s.dp_comm =
      dp.exposed + replicas.exposed + copy_out + OverlapCostSeconds(hidden, OverlapShare());
  p->dp_comm_total_s = dp.total + replicas.total + copy_out;
  p->time_s.optimizer = OptimizerSeconds(stages[fullest].numel, g, sw_, hbm_bytes_per_s);
  p->comm_bytes.dp = dp_bytes.sent + RingBytesSum(p->replica_collectives, p->shard_replicas);
  return dp.total + replicas.total;
}

namespace {

// A layout the stack cannot run: an error naming the stack and the fix.
Status CheckStackRuns(const Software& sw, const Layout& l) {
  if (l.vpp > 1 && !l.zero_bubble && !sw.interleaved_schedule) {
    return InvalidArgument("the " + sw.name +
                           " stack has no interleaved pipeline schedule (DeepSpeed's pipeline engine runs "
                           "1F1B); use --vpp 1");
  }
  if (l.zero_bubble && !sw.zero_bubble_schedule) {
    return InvalidArgument("the " + sw.name +
                           " stack has no zero-bubble schedule (zb-h1, zb-v); use --schedule "
                           "1f1b or --stack cpu");
  }
  if (l.zero_bubble && sw.trainer_activation_buffer && l.recompute == Recompute::kFull) {
    return InvalidArgument("the trainer's zero-bubble schedules keep each block's inputs for the deferred "
                           "weight gradients; full recomputation does not: use --recompute "
                           "selective or none, or --schedule 1f1b");
  }
  if (l.recompute_layers > 0 && sw.trainer_activation_buffer) {
    return InvalidArgument(
        "the " + sw.name +
        " stack recomputes every layer under full recomputation (the trainer has no "
        "partial recomputation); drop --recompute-layers");
  }
  // The cpu stack is scaletrain's own trainer, whose ring attention works
  // block by block (model/context_parallel.h).
  if (l.cp > 1 && !sw.flash_attention && !sw.trainer_activation_buffer) {
    return InvalidArgument("the " + sw.name +
                           " stack has no context parallelism (ring attention runs on FlashAttention "
                           "kernels: Megatron-Core, NeMo, torchtitan, or scaletrain's cpu stack); use "
                           "--cp 1 or such a stack");
  }
  return Status::Ok();
}

// Bytes sent a step: TP the slowest stage's, PP the stage that sends the most.
void SetTpPpBytes(const Layout& l, size_t slowest, Prediction* p) {
  p->comm_bytes.tp = RingBytesSum(p->stage_collectives[slowest].tp, l.tp);
  p->tp_payload_bytes = PayloadBytes(p->stage_collectives[slowest].tp);
  for (const auto& sc : p->stage_collectives) {
    p->comm_bytes.pp = std::max(p->comm_bytes.pp, RingBytesSum(sc.pp, l.pp));
  }
}

}  // namespace

Status CostModel::SetPipelineTimes(const ScheduleInfo& sched, const Layout& l, const StageSeconds& stage,
                                   double p2p, double weight_share, TimeBreakdown* t) {
  const double v = static_cast<double>(l.vpp), mv = static_cast<double>(l.micro_batches());
  if (sw_.pp_async_sends) {
    // The messages travel while stages compute: what they add is the
    // makespan with them less the makespan without.
    const double chunk_f = stage.fwd / v, chunk_b = stage.bwd / v;
    ST_ASSIGN_OR_RETURN(const double bare, Makespan(sched, chunk_f, chunk_b, 0, weight_share));
    ST_ASSIGN_OR_RETURN(const double with_p2p,
                        Makespan(sched, chunk_f, chunk_b, p2p, weight_share));
    t->pp_comm = with_p2p - bare;
    t->bubble = PipelineBubbleSeconds(bare, mv, v, chunk_f, chunk_b);
  } else {
    const double chunk_f = stage.fwd / v + p2p, chunk_b = stage.bwd / v + p2p;
    ST_ASSIGN_OR_RETURN(const double makespan, Makespan(sched, chunk_f, chunk_b, 0, weight_share));
    t->pp_comm = PpCommSeconds(p2p, l.micro_batches(), l.vpp);
    t->bubble = PipelineBubbleSeconds(makespan, mv, v, chunk_f, chunk_b);
  }
  return Status::Ok();
}

Result<Prediction> CostModel::Evaluate(const Layout& stated) {
  // What the stack runs for the stated layout (its ZeRO stage under
  // pipelining); the prediction reports the stated one.
  const Layout l = AsRun(stated, sw_);
  ST_RETURN_IF_ERROR(CheckStackRuns(sw_, l));
  ST_ASSIGN_OR_RETURN(const double peak, MatmulPeakFlopsPerS(cluster_.gpu, l.precision));
  // Every rank waits for the slowest at each collective: the job computes at
  // the pace of the slowest of its GPUs.
  const GpuSpec gpu = PacedBySlowest(cluster_.gpu, l.num_gpus());
  ST_ASSIGN_OR_RETURN(const GpuRates rates, GpuRatesFor(gpu, l.precision));
  const int64_t grad_elem_bytes = GradElemBytes(l, sw_);
  // Every per-token term works on the tokens a CP rank holds of each sequence.
  const ModelSpec tokens = CpRankSpec(spec_, l.cp);
  const LayerShape shape = LayerShapeOf(tokens, l);
  const MicroBatchSeconds mb = ScaledToMeasuredStep(
      MicroBatchComputeSeconds(shape, gpu, sw_, rates, l.recompute), l.precision, rates);
  const std::vector<StageParams>& stages = StagesFor(l.tp, l.pp, l.vpp, l.chunks_in_v());
  const int64_t m = l.micro_batches();
  const double mv = static_cast<double>(m);
  ST_ASSIGN_OR_RETURN(const ScheduleInfo* sched, ScheduleFor(l.schedule(), l.pp, l.vpp, m));

  Prediction p;
  p.layout = l;
  p.slowest_gpu_pace = gpu.sustained_clock_ratio / cluster_.gpu.sustained_clock_ratio;
  p.layout.grad_reduce = GradReduceFor(l, sw_);
  p.stage_collectives = TpPpCollectivesByStage(tokens, l, sw_, stages, sched->schedule);
  for (const StageParams& st : stages) p.stage_layers.push_back(st.layers);
  // The pipeline: every chunk's forward and backward also receives a
  // message; the schedule's simulation gives the makespan.
  const SlowestStage slowest = FindSlowestStage(l, stages, p.stage_collectives, mb, CpLayerSeconds(l, shape, mb),
                                                grad_elem_bytes, rates.hbm_bytes_per_s);
  const StageSeconds& stage = slowest.time;
  const double p2p = l.pp > 1 ? PpMessageSeconds(cluster_, l, PpMessageBytes(tokens, l, sw_)) : 0.0;
  p.time_s.compute = mv * stage.compute;
  p.time_s.recompute = mv * stage.recompute;
  p.time_s.tp_comm = mv * stage.tp_comm;
  p.time_s.cp_comm = mv * stage.cp_comm;
  ST_RETURN_IF_ERROR(SetPipelineTimes(*sched, l, stage, p2p, WeightGradShare(mb), &p.time_s));

  const double dp_comm_s =
      SetDataParallel(stages, slowest, grad_elem_bytes, rates.hbm_bytes_per_s, &p);
  p.step_time_s = p.time_s.Total();

  const size_t fullest = FullestStage(stages);
  SetThroughput(spec_, l, peak,
                l.recompute == Recompute::kFull ? RecomputedShare(l, stages[fullest].layers) : 1.0,
                &p);
  SetMemory(l, tokens, stages, *sched, grad_elem_bytes, &p);
  SetTpPpBytes(l, slowest.index, &p);
  p.comm_to_compute = (p.time_s.tp_comm + p.time_s.cp_comm + p.time_s.pp_comm + dp_comm_s) /
                      (p.time_s.compute + p.time_s.recompute);
  p.limiter = Limiter(p.time_s, p.step_time_s);
  p.layout.zero = stated.zero;
  return p;
}

}  // namespace scaletrain::plan
