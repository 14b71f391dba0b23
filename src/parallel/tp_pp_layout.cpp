#include "parallel/tp_pp_layout.h"

#include <algorithm>
#include <array>
#include <set>

namespace scaletrain {

namespace {

constexpr int64_t kScalarBytes = static_cast<int64_t>(sizeof(double));
constexpr int64_t kCeStatBytes = 4;  // fp32 cross-entropy statistics

// A step's collectives in the order they are listed.
class StepCollectiveList {
 public:
  // `calls` of `bytes_each`; none listed when there are no calls.
  void Add(const char* what, CollectiveKind kind, int64_t calls, int64_t bytes_each,
           StepPhase phase) {
    if (calls > 0) out_.push_back({what, kind, calls, calls * bytes_each, phase});
  }
  // `calls` moving `total_bytes` between them (a sum of state that is per
  // step, not per call).
  void AddTotal(const char* what, CollectiveKind kind, int64_t calls, int64_t total_bytes,
                StepPhase phase) {
    out_.push_back({what, kind, calls, total_bytes, phase});
  }
  std::vector<StepCollective> Take() { return std::move(out_); }

 private:
  std::vector<StepCollective> out_;
};

}  // namespace

RankParams SummarizeRankLayout(const ModelSpec& spec, const ParamLayout& rank_layout) {
  RankParams r;
  r.numel = rank_layout.total_numel;
  std::set<int64_t> blocks;
  for (const ParamEntry& e : rank_layout.entries) {
    if (e.tied_copy && !spec.tied_embeddings()) {
      r.numel -= e.numel;
      continue;
    }
    if (e.layer == kEmbeddingLayer && e.tp_split == TpSplit::kVocab) r.vocab_numel = e.numel;
    if (e.layer == kEmbeddingLayer && !e.tied_copy) r.embedding = true;
    if (e.layer == HeadLayer(spec.n_layer)) {
      r.head = true;
      if (e.tp_split == TpSplit::kReplicated) r.head_replicated_numel += e.numel;
    }
    if (e.layer > kEmbeddingLayer && e.layer < HeadLayer(spec.n_layer)) {
      blocks.insert(e.layer);
      const bool kv = e.name.find("attention.wk.") != std::string::npos ||
                      e.name.find("attention.wv.") != std::string::npos;
      if (e.tp_split == TpSplit::kReplicated) {
        (kv ? r.block_kv_replicated_numel : r.block_replicated_numel) += e.numel;
      }
    }
  }
  r.layers = static_cast<int64_t>(blocks.size());
  r.embedding_front_numel = DpTiedFrontNumel(rank_layout);
  const LayerRuns runs = DpLayerRuns(rank_layout, spec.n_layer);
  r.run_numels = runs.numels;
  r.run_outer = runs.outer;
  r.run_acquired = runs.acquired;
  r.run_layers = runs.layers;
  return r;
}

namespace {

using K = CollectiveKind;

// The blocks whose forward reruns in backward: all under full recompute, or
// the first recompute_layers of each of the rank's vpp chunks (all of a
// chunk when it has fewer); none without it.
int64_t RecomputedBlocks(const ModelShard& shard, const RankParams& rank,
                         const TpPpStepOptions& o) {
  if (!o.recompute_full) return 0;
  const int64_t n = rank.layers, chunks = std::max<int64_t>(1, shard.vpp);
  return o.recompute_layers > 0 ? std::min(n, chunks * o.recompute_layers) : n;
}

// The blocks' collectives: one all-reduce per block half each way, or its SP
// pair; with SP the norms' and biases' partial gradients summed per block.
void AddBlockCollectives(const RankParams& rank, const TpPpStepOptions& o, bool sp, int64_t act,
                         int64_t rc, StepCollectiveList& list) {
  const int64_t m = o.micro_batches, n = rank.layers;
  if (!sp) {
    list.Add("block all-reduce (forward)", K::kAllreduce, 2 * n * m, act, StepPhase::kForward);
    list.Add("block all-reduce (recomputed forward)", K::kAllreduce, rc * 2 * m, act,
             StepPhase::kBackward);
    list.Add("block all-reduce (backward)", K::kAllreduce, 2 * n * m, act, StepPhase::kBackward);
    return;
  }
  list.Add("block all-gather (forward)", K::kAllgather, 2 * n * m, act, StepPhase::kForward);
  list.Add("block reduce-scatter (forward)", K::kReduceScatter, 2 * n * m, act,
           StepPhase::kForward);
  list.Add("block all-gather (recomputed forward)", K::kAllgather, rc * 2 * m, act,
           StepPhase::kBackward);
  list.Add("block reduce-scatter (recomputed forward)", K::kReduceScatter, rc * 2 * m, act,
           StepPhase::kBackward);
  list.Add("block all-gather (backward)", K::kAllgather, 2 * n * m, act, StepPhase::kBackward);
  list.Add("block reduce-scatter (backward)", K::kReduceScatter, 2 * n * m, act,
           StepPhase::kBackward);
  if (n > 0) {
    list.AddTotal("block norm/bias gradient all-reduce", K::kAllreduce, n * m,
                  m * rank.block_replicated_numel * o.elem_bytes, StepPhase::kBackward);
  }
}

// The vocab-parallel embedding (virtual stage 0) and the head with its
// cross-entropy (the last), where this rank runs them.
void AddEmbeddingAndHeadCollectives(const RankParams& rank, const TpPpStepOptions& o, bool sp,
                                    int64_t act, int64_t rows, StepCollectiveList& list) {
  const int64_t m = o.micro_batches;
  if (rank.embedding) {
    list.Add(sp ? "embedding reduce-scatter" : "embedding all-reduce",
             sp ? K::kReduceScatter : K::kAllreduce, m, act, StepPhase::kForward);
    if (sp) list.Add("embedding gradient all-gather", K::kAllgather, m, act, StepPhase::kBackward);
  }
  if (!rank.head) return;
  if (sp) list.Add("final norm all-gather", K::kAllgather, m, act, StepPhase::kForward);
  list.Add("cross-entropy row max", K::kAllreduce, m, rows * kCeStatBytes, StepPhase::kForward);
  list.Add("cross-entropy sums", K::kAllreduce, m, 2 * rows * kCeStatBytes, StepPhase::kForward);
  list.Add(sp ? "head input-gradient reduce-scatter" : "head input-gradient all-reduce",
           sp ? K::kReduceScatter : K::kAllreduce, m, act, StepPhase::kBackward);
  if (sp) {
    list.Add("final norm gradient all-reduce", K::kAllreduce, m,
             rank.head_replicated_numel * o.elem_bytes, StepPhase::kBackward);
  }
}

}  // namespace

std::vector<StepCollective> TensorParallelStepCollectives(const ModelSpec& spec,
                                                          const ModelShard& shard,
                                                          const RankParams& rank,
                                                          const TpPpStepOptions& o) {
  if (shard.tp <= 1) return {};
  const int64_t m = o.micro_batches, n = rank.layers, rows = o.micro_batch * spec.block_size;
  const int64_t act = rows * spec.n_embd * o.elem_bytes;  // one full activation
  StepCollectiveList list;
  AddBlockCollectives(rank, o, shard.sp, act, RecomputedBlocks(shard, rank, o), list);
  if (n > 0 && rank.block_kv_replicated_numel > 0) {
    // Replicated key/value weights: one all-reduce per block backward.
    list.AddTotal("block key/value gradient all-reduce", K::kAllreduce, n * m,
                  m * rank.block_kv_replicated_numel * o.elem_bytes, StepPhase::kBackward);
  }
  AddEmbeddingAndHeadCollectives(rank, o, shard.sp, act, rows, list);
  list.Add("gradient-norm sum", K::kAllreduce, 1, kScalarBytes, StepPhase::kStep);
  return list.Take();
}

int64_t PipelineMessageNumel(const ModelSpec& spec, const ModelShard& shard, int64_t micro_batch,
                             bool scatter_gather) {
  const int64_t rows = micro_batch * spec.block_size;
  const bool sp = shard.sp && shard.tp > 1;
  if (sp) return rows / shard.tp * spec.n_embd;
  if (scatter_gather) return rows * spec.n_embd / shard.tp;
  return rows * spec.n_embd;
}

std::vector<StepCollective> PipelineStepCollectives(const ModelSpec& spec, const ModelShard& shard,
                                                    const RankParams& rank,
                                                    const PipelineSchedule& schedule,
                                                    const TpPpStepOptions& o) {
  if (shard.pp <= 1) return {};
  // The stage's actions counted by kind (kBackwardWeight is the last PipeOp).
  std::array<int64_t, static_cast<size_t>(PipeOp::kBackwardWeight) + 1> ops{};
  for (const PipeAction& a : schedule.stages.at(static_cast<size_t>(shard.stage))) {
    // A message to the stage's own other chunk (zb-v) is a copy, not a send.
    if (!IsCompute(a.op) && a.peer_stage == shard.stage) continue;
    ++ops.at(static_cast<size_t>(a.op));
  }
  const auto count = [&](PipeOp op) { return ops.at(static_cast<size_t>(op)); };
  const int64_t send_act = count(PipeOp::kSendActivation), send_grad = count(PipeOp::kSendGradient);
  const int64_t recv_act = count(PipeOp::kRecvActivation), recv_grad = count(PipeOp::kRecvGradient);
  const int64_t msg =
      PipelineMessageNumel(spec, shard, o.micro_batch, o.pp_scatter_gather) * o.elem_bytes;
  StepCollectiveList list;
  list.Add("activation send", K::kSend, send_act, msg, StepPhase::kForward);
  list.Add("activation receive", K::kRecv, recv_act, msg, StepPhase::kForward);
  list.Add("gradient send", K::kSend, send_grad, msg, StepPhase::kBackward);
  list.Add("gradient receive", K::kRecv, recv_grad, msg, StepPhase::kBackward);
  const bool ends = shard.stage == 0 || shard.stage == shard.pp - 1;
  if (ends && spec.tied_embeddings() && !shard.v_shape) {
    list.Add("tied embedding gradient send", K::kSend, 1, rank.vocab_numel * o.elem_bytes,
             StepPhase::kStep);
    list.Add("tied embedding gradient receive", K::kRecv, 1, rank.vocab_numel * o.elem_bytes,
             StepPhase::kStep);
  }
  list.Add("loss sum", K::kAllreduce, 1, kScalarBytes, StepPhase::kStep);
  list.Add("gradient-norm sum", K::kAllreduce, 1, kScalarBytes, StepPhase::kStep);
  return list.Take();
}

std::vector<StepCollective> ContextParallelStepCollectives(const ModelSpec& spec,
                                                           const ModelShard& shard,
                                                           const RankParams& rank, int64_t cp,
                                                           const TpPpStepOptions& o) {
  if (cp <= 1) return {};
  const int64_t kv_heads = spec.arch == Arch::kLlama ? LocalKvHeads(spec, shard.tp) : spec.n_head / shard.tp;
  const int64_t kv_width = 2 * kv_heads * spec.head_dim(), q_width = spec.n_embd / shard.tp;
  const int64_t block = o.micro_batch * spec.block_size * kv_width * o.elem_bytes;
  const int64_t passes = o.micro_batches * rank.layers;
  const int64_t reruns = !o.recompute_full ? 0
                         : o.recompute_layers > 0 ? std::min(rank.layers, o.recompute_layers * shard.vpp) * o.micro_batches
                                                  : passes;
  StepCollectiveList list;
  if (shard.ulysses) {
    // Each all-to-all sends cp - 1 of its cp blocks and receives as many:
    // q, k, v (and their gradient) and the attention output (and its
    // gradient), 1/cp of the rank's rows x width each.
    const int64_t rows = o.micro_batch * spec.block_size;
    const int64_t qkv = rows * (q_width + kv_width) / cp * o.elem_bytes, out = rows * q_width / cp * o.elem_bytes;
    const int64_t fwd = (passes + reruns) * (cp - 1), bwd = passes * (cp - 1);
    list.Add("q, k, v all-to-all send", K::kSend, fwd, qkv, StepPhase::kForward);
    list.Add("q, k, v all-to-all receive", K::kRecv, fwd, qkv, StepPhase::kForward);
    list.Add("attention output all-to-all send", K::kSend, fwd, out, StepPhase::kForward);
    list.Add("attention output all-to-all receive", K::kRecv, fwd, out, StepPhase::kForward);
    list.Add("output gradient all-to-all send", K::kSend, bwd, out, StepPhase::kBackward);
    list.Add("output gradient all-to-all receive", K::kRecv, bwd, out, StepPhase::kBackward);
    list.Add("q, k, v gradient all-to-all send", K::kSend, bwd, qkv, StepPhase::kBackward);
    list.Add("q, k, v gradient all-to-all receive", K::kRecv, bwd, qkv, StepPhase::kBackward);
    return list.Take();
  }
  const int64_t forward = (passes + reruns) * (cp - 1), backward = passes * (2 * cp - 1);
  list.Add("key/value block send", K::kSend, forward, block, StepPhase::kForward);
  list.Add("key/value block receive", K::kRecv, forward, block, StepPhase::kForward);
  list.Add("key/value block and gradient send", K::kSend, backward, block, StepPhase::kBackward);
  list.Add("key/value block and gradient receive", K::kRecv, backward, block, StepPhase::kBackward);
  return list.Take();
}

}  // namespace scaletrain
