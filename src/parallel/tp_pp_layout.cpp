#include "parallel/tp_pp_layout.h"

#include <algorithm>
#include <array>
#include <set>

namespace scaletrain {

namespace {
constexpr int64_t kScalarBytes = static_cast<int64_t>(sizeof(double));
constexpr int64_t kCeStatBytes = 4;  // fp32 cross-entropy statistics
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
  return r;
}

std::vector<StepCollective> TensorParallelStepCollectives(const ModelSpec& spec,
                                                          const ModelShard& shard,
                                                          const RankParams& rank,
                                                          const TpPpStepOptions& o) {
  if (shard.tp <= 1) return {};
  using K = CollectiveKind;
  const int64_t m = o.micro_batches, n = rank.layers, rows = o.micro_batch * spec.block_size;
  const int64_t act = rows * spec.n_embd * o.elem_bytes;  // one full activation
  const bool sp = shard.sp;
  std::vector<StepCollective> out;
  auto add = [&](const char* what, K kind, int64_t calls, int64_t bytes_each, StepPhase phase) {
    if (calls > 0) out.push_back({what, kind, calls, calls * bytes_each, phase});
  };
  // Blocks: one all-reduce per block half each way, or its SP pair.
  // The blocks whose forward reruns: all, or the first recompute_layers of
  // each of the rank's vpp chunks (all of a chunk when it has fewer).
  int64_t rc = 0;
  if (o.recompute_full) {
    const int64_t chunks = std::max<int64_t>(1, shard.vpp);
    rc = o.recompute_layers > 0 ? std::min(n, chunks * o.recompute_layers) : n;
  }
  if (sp) {
    add("block all-gather (forward)", K::kAllgather, 2 * n * m, act, StepPhase::kForward);
    add("block reduce-scatter (forward)", K::kReduceScatter, 2 * n * m, act, StepPhase::kForward);
    add("block all-gather (recomputed forward)", K::kAllgather, rc * 2 * m, act,
        StepPhase::kBackward);
    add("block reduce-scatter (recomputed forward)", K::kReduceScatter, rc * 2 * m, act,
        StepPhase::kBackward);
    add("block all-gather (backward)", K::kAllgather, 2 * n * m, act, StepPhase::kBackward);
    add("block reduce-scatter (backward)", K::kReduceScatter, 2 * n * m, act, StepPhase::kBackward);
    if (n > 0) {
      // One all-reduce per block of its partial norm and bias gradients.
      out.push_back({"block norm/bias gradient all-reduce", K::kAllreduce, n * m,
                     m * rank.block_replicated_numel * o.elem_bytes, StepPhase::kBackward});
    }
  } else {
    add("block all-reduce (forward)", K::kAllreduce, 2 * n * m, act, StepPhase::kForward);
    add("block all-reduce (recomputed forward)", K::kAllreduce, rc * 2 * m, act,
        StepPhase::kBackward);
    add("block all-reduce (backward)", K::kAllreduce, 2 * n * m, act, StepPhase::kBackward);
  }
  if (n > 0 && rank.block_kv_replicated_numel > 0) {
    // Replicated key/value weights: one all-reduce per block backward.
    out.push_back({"block key/value gradient all-reduce", K::kAllreduce, n * m,
                   m * rank.block_kv_replicated_numel * o.elem_bytes, StepPhase::kBackward});
  }
  if (rank.embedding) {
    add(sp ? "embedding reduce-scatter" : "embedding all-reduce",
        sp ? K::kReduceScatter : K::kAllreduce, m, act, StepPhase::kForward);
    if (sp) add("embedding gradient all-gather", K::kAllgather, m, act, StepPhase::kBackward);
  }
  if (rank.head) {
    if (sp) add("final norm all-gather", K::kAllgather, m, act, StepPhase::kForward);
    add("cross-entropy row max", K::kAllreduce, m, rows * kCeStatBytes, StepPhase::kForward);
    add("cross-entropy sums", K::kAllreduce, m, 2 * rows * kCeStatBytes, StepPhase::kForward);
    add(sp ? "head input-gradient reduce-scatter" : "head input-gradient all-reduce",
        sp ? K::kReduceScatter : K::kAllreduce, m, act, StepPhase::kBackward);
    if (sp) {
      add("final norm gradient all-reduce", K::kAllreduce, m,
          rank.head_replicated_numel * o.elem_bytes, StepPhase::kBackward);
    }
  }
  add("gradient-norm sum", K::kAllreduce, 1, kScalarBytes, StepPhase::kStep);
  return out;
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
  using K = CollectiveKind;
  // The stage's actions counted by kind (kRecvGradient is the last PipeOp).
  std::array<int64_t, static_cast<size_t>(PipeOp::kRecvGradient) + 1> ops{};
  for (const PipeAction& a : schedule.stages.at(static_cast<size_t>(shard.stage))) {
    ++ops.at(static_cast<size_t>(a.op));
  }
  const auto count = [&](PipeOp op) { return ops.at(static_cast<size_t>(op)); };
  const int64_t send_act = count(PipeOp::kSendActivation), send_grad = count(PipeOp::kSendGradient);
  const int64_t recv_act = count(PipeOp::kRecvActivation), recv_grad = count(PipeOp::kRecvGradient);
  const int64_t msg =
      PipelineMessageNumel(spec, shard, o.micro_batch, o.pp_scatter_gather) * o.elem_bytes;
  std::vector<StepCollective> out;
  auto add = [&](const char* what, K kind, int64_t calls, int64_t bytes_each, StepPhase phase) {
    if (calls > 0) out.push_back({what, kind, calls, calls * bytes_each, phase});
  };
  add("activation send", K::kSend, send_act, msg, StepPhase::kForward);
  add("activation receive", K::kRecv, recv_act, msg, StepPhase::kForward);
  add("gradient send", K::kSend, send_grad, msg, StepPhase::kBackward);
  add("gradient receive", K::kRecv, recv_grad, msg, StepPhase::kBackward);
  const bool ends = shard.stage == 0 || shard.stage == shard.pp - 1;
  if (ends && spec.tied_embeddings()) {
    add("tied embedding gradient send", K::kSend, 1, rank.vocab_numel * o.elem_bytes,
        StepPhase::kStep);
    add("tied embedding gradient receive", K::kRecv, 1, rank.vocab_numel * o.elem_bytes,
        StepPhase::kStep);
  }
  add("loss sum", K::kAllreduce, 1, kScalarBytes, StepPhase::kStep);
  add("gradient-norm sum", K::kAllreduce, 1, kScalarBytes, StepPhase::kStep);
  return out;
}

}  // namespace scaletrain
