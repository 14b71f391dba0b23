#include "plan/comm_terms.h"

#include <algorithm>
#include <cmath>

#include "parallel/tp_pp_layout.h"

namespace scaletrain::plan {

ModelSpec TpPaddedSpec(const ModelSpec& m, int64_t tp) {
  ModelSpec spec = m;
  spec.padded_vocab_size = PaddedVocabSize(m.padded_vocab_size, 1, tp);
  return spec;
}

double CollectiveCallSeconds(CollectiveKind kind, int64_t n, const Link& link) {
  if (!link.per_ring_step || n <= 1) return link.latency_s;
  const double steps = static_cast<double>(n - 1);
  return (kind == CollectiveKind::kAllreduce ? 2.0 * steps : steps) * link.latency_s;
}

Link TpLink(const ClusterSpec& c, int64_t tp, bool mpi) {
  const bool intra = tp <= c.node.gpus_per_node;
  Link link{intra ? c.IntraBusBytesPerS() : c.NicBytesPerSPerGpu(),
            (intra ? c.node.intra_latency_us : c.fabric.latency_us) * 1e-6};
  link.per_ring_step = mpi;
  return link;
}

double TpSecondsPerMicroBatch(const std::vector<StepCollective>& cs, StepPhase phase, int64_t tp,
                              const Link& link, int64_t micro_batches) {
  double time = 0;
  for (const StepCollective& c : cs) {
    if (c.phase == phase) {
      time += c.RingBytes(tp) / link.bytes_per_s +
              static_cast<double>(c.calls) * CollectiveCallSeconds(c.kind, tp, link);
    }
  }
  return time / static_cast<double>(micro_batches);
}

PassSeconds TpCommSeconds(const std::vector<StepCollective>& cs, int64_t tp, const Link& link,
                          int64_t micro_batches) {
  return {TpSecondsPerMicroBatch(cs, StepPhase::kForward, tp, link, micro_batches),
          TpSecondsPerMicroBatch(cs, StepPhase::kBackward, tp, link, micro_batches)};
}

PassSeconds OverlappedTpSeconds(const PassSeconds& tp_comm, const PassSeconds& gemm, int64_t tp,
                                double sm_share) {
  auto pass = [&](double comm, double gemm_s) {
    const double hidden = std::min(comm * (1.0 - 1.0 / static_cast<double>(tp)), gemm_s);
    return comm - hidden + OverlapCostSeconds(hidden, sm_share);
  };
  return {pass(tp_comm.fwd, gemm.fwd), pass(tp_comm.bwd, gemm.bwd)};
}

double OverlapCostSeconds(double hidden_s, double sm_share) {
  // The compute beside the transfer runs at 1 - share of its rate for
  // hidden_s: it finishes hidden_s x share / (1 - share) later.
  if (!(sm_share > 0 && sm_share < 1)) return 0;
  return hidden_s * sm_share / (1.0 - sm_share);
}

double PpMessageBytes(const ModelSpec& m, const Layout& l, const Software& sw) {
  const ModelShard first_stage{l.tp, 0, l.pp, 0, l.vpp, l.sp && l.tp > 1, l.chunks_in_v()};
  return static_cast<double>(PipelineMessageNumel(TpPaddedSpec(m, l.tp), first_stage, l.micro_batch,
                                                  sw.pp_scatter_gather)) *
         ActivationElemBytes(l.precision);
}

namespace {

// A point-to-point message's link: NVLink within a node; across nodes the
// sending GPU's own NIC, at the fabric's measured p2p_gbit where the profile
// has one. One hop's latency.
Link PointToPointLink(const ClusterSpec& c, bool across_nodes) {
  if (!across_nodes) return {c.IntraBusBytesPerS(), c.node.intra_latency_us * 1e-6};
  const double nic = c.fabric.p2p_gbit > 0 ? c.fabric.p2p_gbit * 1e9 / 8.0 : c.NicBytesPerSPerGpu();
  return {nic, c.fabric.latency_us * 1e-6};
}

}  // namespace

Link CpLink(const ClusterSpec& c, int64_t tp, int64_t cp) {
  return PointToPointLink(c, tp * cp > c.node.gpus_per_node);
}

double CpKvBytes(const LayerShape& s) {
  return 2.0 * s.tokens * (s.kv_dim / s.tp) * s.elem_bytes;
}

PassSeconds CpRingSeconds(const LayerShape& s, const PassSeconds& attention, const Link& link,
                          double sm_share) {
  if (s.cp <= 1) return {};
  const double steps = s.cp - 1.0, kv = CpKvBytes(s);
  auto message = [&](double bytes) { return link.latency_s + bytes / link.bytes_per_s; };
  auto pass = [&](double msg_s, double kernel_s) {
    const double hidden = steps * std::min(msg_s, kernel_s);
    return steps * std::max(0.0, msg_s - kernel_s) + OverlapCostSeconds(hidden, sm_share);
  };
  return {pass(message(kv), attention.fwd / s.cp),
          pass(message(2.0 * kv), attention.bwd / s.cp) + message(kv)};
}

PassSeconds CpUlyssesSeconds(const LayerShape& s, const Link& link) {
  if (s.cp <= 1) return {};
  const double width = (s.hidden + 2.0 * s.kv_dim) / s.tp + s.hidden / s.tp;  // q, k, v + output
  const double bytes = s.tokens * width * s.elem_bytes * (s.cp - 1.0) / s.cp;
  const double pass = 2.0 * (s.cp - 1.0) * link.latency_s + bytes / link.bytes_per_s;
  return {pass, pass};
}

double PpMessageSeconds(const ClusterSpec& c, const Layout& l, double message_bytes) {
  const Link link = PointToPointLink(c, l.tp * l.cp * l.dp >= c.node.gpus_per_node);
  return link.latency_s + message_bytes / link.bytes_per_s;
}

double PpCommSeconds(double message_s, int64_t micro_batches, int64_t chunks) {
  return static_cast<double>(micro_batches) * static_cast<double>(chunks) * 2.0 * message_s;
}

int64_t DpGradReductions(const Layout& l, int64_t micro_batches) {
  return l.zero == 2 ? micro_batches : 1;
}

namespace {

// A zb-v rank's two chunks as layer ranges (GPT::ChunkLayers): chunk 0 from
// the embedding (stage 0) to its last block, chunk 1 from its first block
// to the head (stage 0). `stage` holds some blocks of each.
std::vector<LayerRange> VChunkLayers(const ModelSpec& model, const Layout& l,
                                     const RankParams& stage) {
  const std::vector<int64_t> virtual_stage = VirtualStageOfLayers(model, l.pp, l.vpp);
  std::vector<LayerRange> chunks(2, LayerRange{kEmbeddingLayer - 1, kEmbeddingLayer - 2});
  for (int64_t layer : stage.run_layers) {
    if (layer == kEmbeddingLayer || layer == HeadLayer(model.n_layer)) continue;
    const int64_t c = ChunkOfVirtualStage(l.pp, true, virtual_stage[static_cast<size_t>(layer)]);
    LayerRange& r = chunks[static_cast<size_t>(c)];
    if (r.first > r.last) r.first = r.last = layer;
    r.first = std::min(r.first, layer), r.last = std::max(r.last, layer);
  }
  chunks[0].first = std::min(chunks[0].first, kEmbeddingLayer);  // the embedding, where held
  chunks[1].last = std::max(chunks[1].last, HeadLayer(model.n_layer));
  return chunks;
}

}  // namespace

std::vector<StepCollective> DpStepCollectivesFor(const RankParams& stage, const ModelSpec& model,
                                                 const Layout& l, int64_t grad_elem_bytes,
                                                 int64_t* num_buckets) {
  const int64_t m = l.micro_batches();
  const int64_t param_elem_bytes = static_cast<int64_t>(ActivationElemBytes(l.precision));
  const int64_t padded = DpPaddedNumel(stage.numel, l.dp);
  // ZeRO-3 as the trainer runs it: buckets cut at the layer boundaries,
  // each unit (block; embedding + head) gathered forward and backward.
  // (A stage without its runs: one unit of the whole buffer.)
  const bool zero3 = l.zero >= 3;
  const bool runs = !stage.run_numels.empty();
  Zero3Layout z3;
  if (zero3)
    z3 = PlanZero3(runs ? stage.run_numels : std::vector<int64_t>{stage.numel},
                   runs ? stage.run_outer : std::vector<bool>{false}, l.dp,
                   runs ? stage.run_acquired : std::vector<bool>{});
  const std::vector<GradBucket> buckets =
      zero3 ? z3.buckets : CutGradBuckets(padded, l.dp, l.bucket_bytes);
  *num_buckets = static_cast<int64_t>(buckets.size());
  if (l.dp <= 1) return {};
  // (zb-v's first stage runs the head too: one copy, no sum to wait for.)
  // zb-v: each chunk's passes gather on their own, as the trainer's.
  const std::vector<int64_t> run_chunk =
      zero3 && runs && l.chunks_in_v() ? Zero3RunChunks(stage.run_layers, VChunkLayers(model, l, stage))
                                       : std::vector<int64_t>{};
  const int64_t tied = l.pp > 1 && model.tied_embeddings() && !l.chunks_in_v()
                           ? stage.embedding_front_numel
                           : 0;
  return DataParallelStepCollectives(buckets, l.dp, l.zero, m, tied, grad_elem_bytes,
                                     param_elem_bytes, l.dp_compress,
                                     zero3 ? Zero3GathersPerPass(z3, false, run_chunk) : Zero3PassGathers{},
                                     zero3 ? Zero3GathersPerPass(z3, true, run_chunk) : Zero3PassGathers{});
}

DpRingBytes DpRingBytesByKind(const std::vector<StepCollective>& cs, int64_t dp) {
  DpRingBytes b;
  for (const StepCollective& c : cs) {
    b.sent += c.RingBytes(dp);
    if (c.payload_bytes <= static_cast<int64_t>(sizeof(double))) continue;
    (c.kind == CollectiveKind::kAllreduce       ? b.allreduce
     : c.kind == CollectiveKind::kReduceScatter ? b.reduce_scatter
                                                : b.allgather) += c.RingBytes(dp);
  }
  return b;
}

Link DpLink(const ClusterSpec& c, int64_t tp, int64_t dp, bool nccl) {
  const double d = static_cast<double>(dp), t = static_cast<double>(tp);
  const double gpn = static_cast<double>(c.node.gpus_per_node);
  const double per_node = tp >= c.node.gpus_per_node ? 1.0 : std::min(d, gpn / t);
  const bool intra = d <= per_node;
  Link link;
  link.bytes_per_s = intra ? c.IntraBusBytesPerS()
                           : std::min(c.IntraBusBytesPerS(), per_node * c.NicBytesPerSPerGpu());
  const double hop_s = (intra ? c.node.intra_latency_us : c.fabric.latency_us) * 1e-6;
  link.latency_s = 2.0 * std::log2(d) * hop_s;
  if (!nccl && dp > 1) {
    // MPI: every bucket a call of its own, a hop's latency at every ring step.
    link.latency_s = hop_s;
    link.per_ring_step = true;
    link.ring_call_s = CollectiveCallSeconds(CollectiveKind::kReduceScatter, dp, link);
    link.allreduce_call_s = CollectiveCallSeconds(CollectiveKind::kAllreduce, dp, link);
  }
  if (nccl) {
    link.ring_call_s = NcclRingCallSeconds(c, tp, dp);
    link.allreduce_call_s = NcclAllReduceCallSeconds(c, tp, dp);
  }
  return link;
}

namespace {

// NCCL's baseLat and hwLat for the ring and tree algorithms, Simple protocol
// (src/graph/tuning.cc): the call, a step on NVLink, on PCIe, and from one
// node to another (there the fabric's latency_us where that is more).
struct NcclSteps {
  double base_us = 8.4, intra_us = 3.4, inter_us = 14.0;
  int64_t ranks = 1, per_node = 1, nodes = 1;
  // A ring's n - 1 steps, nodes - 1 of them from node to node.
  double RingSteps() const {
    return static_cast<double>(ranks - nodes) * intra_us +
           static_cast<double>(nodes - 1) * inter_us;
  }
};

NcclSteps NcclStepsOf(const ClusterSpec& c, int64_t tp, int64_t n) {
  NcclSteps s;
  const bool nvlink = c.node.intra_kind == "nvswitch" || c.node.intra_kind == "nvlink";
  if (!nvlink) s.intra_us = 5.7;
  s.inter_us = std::max(s.inter_us, c.fabric.latency_us);
  s.ranks = n;
  s.per_node = DpRanksPerNode(c, tp, n);
  s.nodes = (n + s.per_node - 1) / s.per_node;
  return s;
}

}  // namespace

double NcclRingCallSeconds(const ClusterSpec& c, int64_t tp, int64_t n) {
  if (n <= 1) return 0;
  const NcclSteps s = NcclStepsOf(c, tp, n);
  return (s.base_us + s.RingSteps()) * 1e-6;
}

double NcclAllReduceCallSeconds(const ClusterSpec& c, int64_t tp, int64_t n) {
  if (n <= 1) return 0;
  const NcclSteps s = NcclStepsOf(c, tp, n);
  // The ring's 2 (n - 1) steps, or the tree's way up and down: the members
  // of a node in a chain, log2(nodes) hops between nodes.
  const double tree = 2.0 * (static_cast<double>(s.per_node - 1) * s.intra_us +
                             std::ceil(std::log2(static_cast<double>(s.nodes))) * s.inter_us);
  return (s.base_us + std::min(2.0 * s.RingSteps(), tree)) * 1e-6;
}

int64_t DpRanksPerNode(const ClusterSpec& c, int64_t tp, int64_t dp) {
  if (tp >= c.node.gpus_per_node) return 1;
  return std::min(dp, c.node.gpus_per_node / tp);
}

bool DpHierarchicalApplies(const ClusterSpec& c, const Layout& l) {
  const int64_t k = DpRanksPerNode(c, l.tp, l.dp);
  return l.dp_hierarchical && l.zero == 0 && k >= 2 && l.dp > k && l.dp % k == 0;
}

DpSeconds DpHierarchicalSeconds(double grad_bytes, double cross_ring_bytes, int64_t k,
                                const Link& node, const Link& cross, double stage_bwd_s,
                                double chunks, bool overlap, int64_t buckets) {
  const double share = static_cast<double>(k - 1) / static_cast<double>(k);
  const double in_node = share * grad_bytes / node.bytes_per_s + node.latency_s;
  const DpSeconds rs = DpAllReduceSeconds(share * grad_bytes, node, stage_bwd_s, chunks, overlap, buckets);
  const double across = cross_ring_bytes / cross.bytes_per_s + 2.0 * cross.latency_s;
  DpSeconds t;
  t.total = rs.total + across + in_node;
  t.exposed = rs.exposed + across + in_node;
  return t;
}

DpSeconds DpAllReduceSeconds(double allreduce_bytes, const Link& link, double stage_bwd_s,
                             double chunks, bool overlap, int64_t buckets) {
  const double lat = link.latency_s;
  // Under NCCL every bucket is a call of its own.
  const double calls =
      link.allreduce_call_s > 0
          ? static_cast<double>(std::max<int64_t>(1, buckets)) * link.allreduce_call_s
          : 2.0 * lat;
  DpSeconds t;
  t.total = allreduce_bytes / link.bytes_per_s + calls;
  if (!overlap) {
    t.exposed = t.total;
  } else if (buckets > 0) {
    const double nb = static_cast<double>(buckets);
    const double window = stage_bwd_s / chunks * (nb - 1.0) / nb;
    t.exposed = std::max({t.total - window, t.total / nb, lat});
  } else {
    t.exposed = std::max(t.total - stage_bwd_s / chunks, lat);
  }
  return t;
}

DpSeconds DpShardedSeconds(double reduce_scatter_bytes, double allgather_bytes, int64_t reductions,
                           const Link& link, const StageSeconds& stage, double chunks, bool overlap,
                           int64_t buckets) {
  const double bw = link.bytes_per_s, lat = link.latency_s;
  const double times = static_cast<double>(reductions);
  const double parts = times > 1 ? chunks : 1.0;
  // Buckets per reduce-scatter (a chunk's share) and per all-gather.
  const double nb = static_cast<double>(std::max<int64_t>(1, buckets));
  const double part_buckets = std::max(1.0, nb / parts);
  const bool per_call = link.ring_call_s > 0;
  const double rs_lat = per_call ? part_buckets * link.ring_call_s : lat,
               ag_lat = per_call ? nb * link.ring_call_s : lat;
  const double rs_part = reduce_scatter_bytes / (times * parts) / bw + rs_lat,
               ag = allgather_bytes / bw + ag_lat;
  DpSeconds t;
  t.total = times * parts * rs_part + ag;
  if (!overlap) {
    t.exposed = t.total;
    return t;
  }
  // Buckets not known (0): the whole pass hides them.
  const bool cut = buckets > 0;
  const double rs_share = cut ? (part_buckets - 1.0) / part_buckets : 1.0,
               ag_share = cut ? (nb - 1.0) / nb : 1.0;
  const double rs_last = cut ? rs_part / part_buckets : 0.0, ag_first = cut ? ag / nb : 0.0;
  t.exposed = times * parts * std::max({rs_part - stage.bwd / chunks * rs_share, rs_last, lat}) +
              std::max({ag - stage.fwd / chunks * ag_share, ag_first, lat});
  return t;
}

DpSeconds FsdpSeconds(double reduce_scatter_bytes, double allgather_bytes, const Link& link,
                      int64_t micro_batches, int64_t stage_layers, const StageSeconds& stage,
                      bool overlap) {
  const double bw = link.bytes_per_s, mv = static_cast<double>(micro_batches);
  const double layers = std::max<double>(1.0, static_cast<double>(stage_layers));
  // A call's latency: each layer's two gathers and reduce-scatter are calls
  // of their own under NCCL.
  const double call = link.ring_call_s > 0 ? link.ring_call_s : link.latency_s;
  const double calls = link.ring_call_s > 0 ? 3.0 * layers : 3.0;
  const double per_mb = (reduce_scatter_bytes + allgather_bytes) / mv / bw + calls * call;
  DpSeconds t;
  t.total = per_mb * mv;
  if (!overlap) {
    t.exposed = t.total;
  } else {
    const double first_layer = allgather_bytes / (2.0 * mv) / layers / bw + call;
    t.exposed = mv * std::max(0.0, per_mb - (stage.fwd + stage.bwd)) + first_layer;
  }
  return t;
}

std::vector<StepCollective> ReplicaAllReduces(const std::vector<StepCollective>& shard_group,
                                              int64_t shard_ranks) {
  std::vector<StepCollective> out;
  for (const StepCollective& c : shard_group) {
    if (c.kind != CollectiveKind::kReduceScatter) continue;
    StepCollective ar = c;
    ar.what = "replica gradient all-reduce";
    ar.kind = CollectiveKind::kAllreduce;
    ar.payload_bytes = c.payload_bytes / std::max<int64_t>(1, shard_ranks);
    out.push_back(ar);
  }
  return out;
}

DpSeconds ReplicaAllReduceSeconds(double ring_bytes, int64_t rounds, int64_t calls_per_round,
                                  const Link& link, const StageSeconds& stage, double chunks,
                                  bool overlap) {
  DpSeconds t;
  if (ring_bytes <= 0 || rounds < 1) return t;
  const double n = static_cast<double>(rounds),
               calls = static_cast<double>(std::max<int64_t>(1, calls_per_round));
  const double call_s = link.allreduce_call_s > 0 ? link.allreduce_call_s : 2.0 * link.latency_s;
  const double round_s = ring_bytes / n / link.bytes_per_s + calls * call_s;
  t.total = n * round_s;
  if (!overlap) {
    t.exposed = t.total;
    return t;
  }
  const double bwd = stage.bwd / chunks, fwd = stage.fwd / chunks;
  const double last = std::max(round_s - bwd * (calls - 1.0) / calls, round_s / calls);
  t.exposed = (n - 1.0) * std::max(0.0, round_s - (bwd + fwd)) + last;
  return t;
}

double FsdpCopyOutSeconds(const std::vector<StepCollective>& dp_collectives,
                          double hbm_bytes_per_s) {
  double gathered = 0;
  for (const StepCollective& c : dp_collectives) {
    if (c.kind == CollectiveKind::kAllgather) gathered += static_cast<double>(c.payload_bytes);
  }
  return 2.0 * gathered / hbm_bytes_per_s;
}

DpSeconds DpCommSeconds(const DpRingBytes& bytes, const Layout& l, const Link& link,
                        int64_t reductions, const StageSeconds& stage, int64_t stage_layers,
                        bool overlap, int64_t buckets) {
  if (l.dp <= 1) return {};
  const double chunks = static_cast<double>(l.vpp);
  // ZeRO-0's reduction: an all-reduce, or the all-gather of sign messages
  // (DpCompression::kSign), both under the last backward.
  if (l.zero == 0) {
    return DpAllReduceSeconds(bytes.allreduce + bytes.allgather, link, stage.bwd, chunks, overlap,
                              buckets);
  }
  if (l.zero <= 2) {
    return DpShardedSeconds(bytes.reduce_scatter, bytes.allgather, reductions, link, stage, chunks,
                            overlap, buckets);
  }
  return FsdpSeconds(bytes.reduce_scatter, bytes.allgather, link, l.micro_batches(), stage_layers,
                     stage, overlap);
}

double RingBytesSum(const std::vector<StepCollective>& cs, int64_t n) {
  double bytes = 0;
  for (const StepCollective& c : cs) bytes += c.RingBytes(n);
  return bytes;
}

}  // namespace scaletrain::plan
