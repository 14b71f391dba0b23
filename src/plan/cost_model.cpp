#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "model/param_layout.h"

namespace scaletrain::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Bytes the optimizer step moves per parameter it updates. 16-bit training
// with fp32 master weights: AdamW reads the fp32 master weight, both moments
// and the fp32 gradient (16), writes the master weight and moments (12),
// writes the 16-bit copy (2), and the gradient norm for clipping plus zeroing
// the gradient buffer touch the gradient twice more (4 + 4): 38. fp16 adds
// the loss-scale pass (unscale with the inf check: read and write the fp32
// gradient, 8). Stacks whose optimizer runs its steps as separate passes
// (Megatron-LM 2021-22's Float16Optimizer, DeepSpeed 2022's bf16 optimizer)
// copy master to 16-bit weights in a pass of their own (read 4 more), and in
// fp16 their gradient buffer is fp16 (see the unfused accumulation below):
// cast it to fp32 first (read 2, write 4) and zero 2 bytes, not 4.
// In fp32 training the parameters are the master copy: read parameter,
// gradient and both moments (16), write parameter and moments (12), plus the
// gradient-norm read and the zeroing write of the gradient (4 + 4): 36.
// The gradient buffer holds the dtype it is reduced in (GradReduceFor):
// 16 bits when the layout reduces in the compute precision (Megatron-LM's
// fp16 default, whose unfused accumulation keeps an fp16 buffer), else fp32.
bool HalfGradientBuffer(const Layout& l, const Software& sw) {
  return l.precision != Precision::kFP32 && GradReduceFor(l, sw) == GradReduce::kCompute;
}
double OptimizerBytesPerParam(const Layout& l, const Software& sw) {
  if (l.precision == Precision::kFP32) return 36.0;
  double bytes = 38.0;
  if (l.precision == Precision::kFP16) bytes += 8.0;
  if (sw.separate_optimizer_passes) {
    bytes += 4.0;
    if (HalfGradientBuffer(l, sw)) bytes += 6.0 - 2.0;
  }
  return bytes;
}
// FlashAttention's per-query-block fixed cost, in keys (see its use).
constexpr double kAttentionBlockOverheadKeys = 256.0;

}  // namespace

double TileWaveEfficiency(double m, double n, double batch, double sms) {
  if (sms <= 0) return 1.0;
  static constexpr double kTiles[][2] = {{256, 128}, {128, 256}, {128, 128}};
  double best = 0;
  for (const auto& tile : kTiles) {
    const double tiles = std::ceil(m / tile[0]) * std::ceil(n / tile[1]) * batch;
    const double waves = std::ceil(tiles / sms);
    best = std::max(best, m * n * batch / (waves * sms * tile[0] * tile[1]));
  }
  return best;
}

double NarayananFlopsPerStep(int64_t batch, int64_t seq, int64_t layers, int64_t hidden, int64_t vocab) {
  const double B = batch, s = seq, l = layers, h = hidden, V = vocab;
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

double BlockForwardFlopsPerSequence(const ModelSpec& m) {
  const double s = m.block_size, h = m.n_embd, F = m.ffn_hidden;
  const double kvd = static_cast<double>(m.n_kv_head * m.head_dim());
  const double mlp_mats = m.arch == Arch::kLlama ? 3.0 : 2.0;
  const double per_token = 2.0 * h * (h + 2.0 * kvd)  // QKV
                           + 2.0 * h * h              // attention output projection
                           + 2.0 * mlp_mats * h * F   // MLP
                           + 4.0 * s * h;             // QK^T and AV over all s keys
  return per_token * s * static_cast<double>(m.n_layer);
}

double ModelFlopsPerSequence(const ModelSpec& m) {
  const double logits = 2.0 * m.n_embd * static_cast<double>(m.padded_vocab_size) * m.block_size;
  return 3.0 * (BlockForwardFlopsPerSequence(m) + logits);
}

double LayerActivationBytes(const ModelSpec& m, int64_t micro_batch, int64_t tp, bool sp, Recompute rc,
                            const Software& sw) {
  const double s = m.block_size, b = micro_batch, h = m.n_embd, F = m.ffn_hidden, a = m.n_head, t = tp;
  const double kvd = static_cast<double>(m.n_kv_head * m.head_dim());
  // Parts outside the tensor-parallel region (norm inputs/outputs, dropout
  // masks on the residual stream) are whole on every TP rank unless the
  // sequence is split across them (SP).
  const double rep_div = sp ? t : 1.0;
  if (rc == Recompute::kFull) return 2.0 * s * b * h / rep_div;  // only the layer input is kept
  double rep = 2.0 * h + 2.0 * h + 2.0 * h + 2.0 * h;            // two norm inputs and outputs
  if (sw.dropout) rep += 2.0 * h;                                // two 1-byte dropout masks
  double split = 2.0 * h + 2.0 * kvd   // Q, K (QK^T inputs)
                 + 2.0 * kvd           // V
                 + 2.0 * h;            // attention output (projection input)
  split += m.arch == Arch::kLlama ? 6.0 * F   // SwiGLU: gate and up outputs, their product
                                  : 4.0 * F;  // GeLU input and output
  double scores = 0;  // per token, the s x s parts
  if (sw.flash_attention) {
    split += 4.0 * a;  // fp32 log-sum-exp per head
  } else if (rc != Recompute::kSelective) {
    scores = 2.0 * a * s;                          // softmax output
    if (sw.dropout) scores += a * s + 2.0 * a * s;  // dropout mask and output
  }
  return s * b * (rep / rep_div + (split + scores) / t);
}

CostModel::CostModel(ModelSpec spec, ClusterSpec cluster, Software sw)
    : spec_(std::move(spec)), cluster_(std::move(cluster)), sw_(std::move(sw)) {}

const std::vector<CostModel::StageParams>& CostModel::StagesFor(int64_t tp, int64_t pp, int64_t vpp) {
  const auto key = std::make_tuple(tp, pp, vpp);
  auto it = stages_.find(key);
  if (it != stages_.end()) return it->second;
  // What a rank holds comes from the table the trainer allocates from
  // (BuildRankLayout): its blocks, the embedding on the first stage, the
  // final norm (and head) on the last, each TP-split entry's 1/tp share, and
  // a tied head's copy of the word embedding on a separate last stage
  // (Megatron-LM and the trainer sum the two copies' gradients). The
  // vocabulary is padded to a multiple of tp, as Megatron-LM does.
  ModelSpec spec = spec_;
  spec.padded_vocab_size = RoundUp(spec.padded_vocab_size, tp);
  // Blocks are alike, so stages that run as many blocks in each chunk and
  // are equally first / last hold the same; one BuildRankLayout each (a
  // 126-layer model on 64 stages has three kinds).
  std::vector<StageParams> st;
  st.reserve(static_cast<size_t>(pp));
  std::map<std::vector<int64_t>, StageParams> kinds;
  const std::vector<int64_t> stage_of = VirtualStageOfLayers(spec, pp, vpp);
  for (int64_t s = 0; s < pp; ++s) {
    std::vector<int64_t> kind(static_cast<size_t>(vpp) + 2, 0);
    kind[0] = s == 0, kind[1] = s == pp - 1;
    for (int64_t l = 0; l < spec.n_layer; ++l) {
      const int64_t v = stage_of[l];
      if (v % pp == s) ++kind[static_cast<size_t>(2 + v / pp)];
    }
    auto [it, added] = kinds.try_emplace(std::move(kind));
    if (added) it->second = SummarizeRankLayout(spec, BuildRankLayout(spec, ModelShard{tp, 0, pp, s, vpp, false}));
    st.push_back(it->second);
  }
  return stages_.emplace(key, std::move(st)).first->second;
}

Result<const CostModel::ScheduleInfo*> CostModel::ScheduleFor(ScheduleKind kind, int64_t pp, int64_t vpp,
                                                               int64_t m) {
  auto key = std::make_tuple(static_cast<int>(kind), pp, vpp, m);
  auto it = schedules_.find(key);
  if (it != schedules_.end()) return it->second.get();
  auto info = std::make_unique<ScheduleInfo>();
  ST_ASSIGN_OR_RETURN(info->schedule, BuildPipelineSchedule(kind, static_cast<int32_t>(pp),
                                                            static_cast<int32_t>(vpp), static_cast<int32_t>(m)));
  info->in_flight = PeakActivations(info->schedule);
  info->first_chunk_in_flight = PeakActivations(info->schedule, 0);
  const ScheduleInfo* p = info.get();
  schedules_.emplace(key, std::move(info));
  return p;
}

Result<double> CostModel::Makespan(const ScheduleInfo& s, double t_fwd, double t_bwd) {
  // With the same durations on every stage the makespan scales with them, so
  // one simulation per backward/forward ratio (to 0.1%) serves every layout.
  const int64_t ratio = std::llround(1000.0 * t_bwd / t_fwd);
  auto key = std::make_tuple(static_cast<int>(s.schedule.kind), static_cast<int64_t>(s.schedule.pp),
                             static_cast<int64_t>(s.schedule.vpp), static_cast<int64_t>(s.schedule.micro_batches),
                             ratio);
  auto it = makespans_.find(key);
  if (it != makespans_.end()) return it->second * t_fwd;
  // The p2p time is already in the action times (cost model), so the
  // simulation adds none.
  ST_ASSIGN_OR_RETURN(ScheduleSimulation sim,
                      SimulatePipelineSchedule(s.schedule, {1.0, ratio / 1000.0, 0.0}));
  makespans_[key] = sim.makespan_s;
  return sim.makespan_s * t_fwd;
}

Result<Prediction> CostModel::Predict(const Layout& l) {
  ST_RETURN_IF_ERROR(ValidateLayout(spec_, l.num_gpus(), l));
  return Evaluate(l);
}

Result<Prediction> CostModel::Evaluate(const Layout& l) {
  const ModelSpec& M = spec_;
  const GpuSpec& gpu = cluster_.gpu;
  const NodeSpec& node = cluster_.node;
  const double peak = gpu.PeakTflops(l.precision) * 1e12;
  if (peak <= 0) {
    std::string has;
    for (Precision q : {Precision::kBF16, Precision::kFP16, Precision::kFP8, Precision::kTF32, Precision::kFP32}) {
      if (gpu.PeakTflops(q) > 0) has += std::string(has.empty() ? "" : ", ") + PrecisionName(q);
    }
    return InvalidArgument(gpu.name + " has no " + std::string(PrecisionName(l.precision)) +
                           " matrix rate in the catalog; use --precision " + (has.empty() ? "bf16" : has) +
                           " (the rates it has)");
  }
  const double t = static_cast<double>(l.tp), d = static_cast<double>(l.dp);
  const double b = static_cast<double>(l.micro_batch), s = static_cast<double>(M.block_size);
  const double h = static_cast<double>(M.n_embd), F = static_cast<double>(M.ffn_hidden);
  // Megatron-LM pads the vocabulary so that every TP rank gets equal rows.
  const double V = static_cast<double>(RoundUp(M.padded_vocab_size, l.tp));
  const double kvd = static_cast<double>(M.n_kv_head * M.head_dim());
  const double dh = static_cast<double>(M.head_dim());
  const double heads_local = static_cast<double>(M.n_head) / t;
  const double T = b * s;  // tokens per micro-batch
  const double act_bytes = l.precision == Precision::kFP32 ? 4.0 : 2.0;
  // The gradient buffer's element, which is also what DP reduces.
  const int64_t grad_elem_bytes = HalfGradientBuffer(l, sw_) ? 2 : 4;
  // Tensor-core work runs at the clock the GPU holds at its power limit.
  const double mm_rate = peak * gpu.matmul_efficiency * gpu.sustained_clock_ratio;
  const double hbm = gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency;
  const double gpn = static_cast<double>(node.gpus_per_node);

  // A GEMM is bound by its math or by moving its three matrices (roofline).
  // Its math runs at the measured large-GEMM rate times the share of the
  // SMs its tiles keep busy.
  auto gemm_batched = [&](double batch, double m, double n, double k) {
    const double util = TileWaveEfficiency(m, n, batch, gpu.sm_count);
    return batch * std::max(2.0 * m * n * k / (mm_rate * util), act_bytes * (m * k + k * n + m * n) / hbm);
  };
  auto gemm = [&](double m, double n, double k) { return gemm_batched(1.0, m, n, k); };
  // Forward and backward time of a weight GEMM: measured on this device at
  // exactly this shape (a `scaletrain bench` profile), else the roofline
  // above with backward = 2x forward (input and weight gradients: the same
  // shapes).
  auto gemm_fb = [&](double m, double n, double k) -> std::pair<double, double> {
    for (const auto& g : gpu.measured_gemms) {
      if (static_cast<double>(g.m) == m && static_cast<double>(g.n) == n && static_cast<double>(g.k) == k) {
        return {2.0 * m * n * k / (g.fwd_tflops * 1e12), 4.0 * m * n * k / (g.bwd_tflops * 1e12)};
      }
    }
    const double f = gemm(m, n, k);
    return {f, 2.0 * f};
  };
  const bool llama = M.arch == Arch::kLlama;

  // ---- one transformer layer, one micro-batch, one GPU ----
  double gemm_f = 0, gemm_b = 0;
  for (const auto& [fwd, bwd] : {gemm_fb(T, (h + 2 * kvd) / t, h), gemm_fb(T, h, h / t),
                                 llama ? gemm_fb(T, 2 * F / t, h) : gemm_fb(T, F / t, h), gemm_fb(T, h, F / t)}) {
    gemm_f += fwd, gemm_b += bwd;
  }

  double attn_f = 0, attn_b = 0;
  if (sw_.flash_attention) {
    // Causal FlashAttention skips the masked half; its backward does 2.5x
    // the forward's matmul work (it recomputes the scores).
    // attention_efficiency is the long-sequence rate; each query block also
    // pays a fixed cost (loading Q, the partly masked diagonal block, writing
    // O and the log-sum-exp) worth about two 128-key blocks, so the rate at
    // sequence s is eff * s / (s + 256). This reproduces FlashAttention-2's
    // measured curve on H100 (FlashAttention-3 paper, Figs. 5-6, head dim
    // 128: fwd+bwd 0.30 of peak at 2k, 0.32 at 4k, 0.33 at 8k-16k).
    const double bf16_peak = gpu.PeakTflops(Precision::kBF16) * 1e12;
    const double fwd_flops = 0.5 * 4.0 * b * s * s * h / t;
    const double rate =
        bf16_peak * gpu.attention_efficiency * gpu.sustained_clock_ratio * s / (s + kAttentionBlockOverheadKeys);
    attn_f = sw_.attention_fwd_slowdown * fwd_flops / rate;
    attn_b = sw_.attention_bwd_slowdown * 2.5 * fwd_flops / rate;
  } else if (const GpuSpec::MeasuredAttention* ma = [&]() -> const GpuSpec::MeasuredAttention* {
               for (const auto& a : gpu.measured_attention) {
                 if (a.batch == l.micro_batch && a.seq == M.block_size && a.hidden == M.n_embd &&
                     a.heads == M.n_head && l.tp == 1) {
                   return &a;
                 }
               }
               return nullptr;
             }()) {
    // The device's own attention kernel, measured at exactly this shape.
    attn_f = ma->fwd_s;
    attn_b = ma->bwd_s;
  } else {
    // A causal kernel that works in row blocks computes only the blocks'
    // keys up to the diagonal (see Software::causal_block_rows).
    double done = 1.0;
    if (sw_.causal_block_rows > 0) {
      const double nb = std::ceil(s / static_cast<double>(sw_.causal_block_rows));
      done = (nb + 1.0) / (2.0 * nb);
    }
    const double batches = b * heads_local * done;
    const double bmm = gemm_batched(batches, s, s, dh) + gemm_batched(batches, s, dh, s);  // QK^T, then scores x V
    const double elems = batches * s * s;
    // Fused scale-mask-softmax reads and writes the scores once each way;
    // dropout on the probabilities adds a read, a write and a 1-byte mask.
    double fwd_bytes = 2.0 * act_bytes, bwd_bytes = 3.0 * act_bytes;
    if (sw_.dropout) fwd_bytes += 2.0 * act_bytes + 1.0, bwd_bytes += 2.0 * act_bytes + 1.0;
    attn_f = bmm + elems * fwd_bytes / hbm;
    attn_b = 2.0 * bmm + elems * bwd_bytes / hbm;
  }

  // Memory-bound element-wise work: elements read + written per token by each
  // op, forward and backward, from the op definitions (bf16 activations):
  //   LayerNorm        fwd: read x, write y (2h)   bwd: read x, dy, write dx (3h)
  //   residual add     fwd: read 2, write 1 (3h)   bwd: the two branches' gradients
  //                                                 are summed: read 2, write 1 (3h)
  //   bias-dropout-add fwd: x, residual in, out, 1-byte mask (3.5h)
  //   (legacy)         bwd: read dy and mask, write dx (2.5h), bias gradient
  //                         reduction reads dy (1h), plus the branch sum (3h)
  //   GeLU             fwd: read, write (2F)       bwd: read x, dy, write dx (3F)
  //   SwiGLU           fwd: read gate, up, write (3F)
  //                    bwd: read gate, up, dy, write both gradients (5F)
  //   RoPE on q and k  fwd and bwd: read, write (2 (h + kvd))
  // Parts outside the TP region run on every TP rank unless SP splits them.
  const double rep_div = l.sp ? t : 1.0;
  const double norms_f = 2 * 2 * h, norms_b = 2 * 3 * h;
  const double adds_f = sw_.dropout ? 2 * 3.5 * h : 2 * 3 * h;
  const double adds_b = sw_.dropout ? 2 * (2.5 * h + 1 * h + 3 * h) : 2 * 3 * h;
  const double act_f = llama ? 3 * F : 2 * F, act_b = llama ? 5 * F : 3 * F;
  const double rope = llama ? 2 * (h + kvd) : 0.0;
  const double elem_f = T * act_bytes * ((norms_f + adds_f) / rep_div + (act_f + rope) / t) / hbm;
  const double elem_b = T * act_bytes * ((norms_b + adds_b) / rep_div + (act_b + rope) / t) / hbm;

  // Tensor-parallel collectives (listed per stage below): within one node
  // over NVLink, else over the NICs.
  const bool tp_intra = l.tp <= node.gpus_per_node;
  const double tp_bw = tp_intra ? cluster_.IntraBusBytesPerS() : cluster_.NicBytesPerSPerGpu();
  const double tp_lat = (tp_intra ? node.intra_latency_us : cluster_.fabric.latency_us) * 1e-6;

  const double layer_f = gemm_f + attn_f + elem_f;
  const double layer_b = gemm_b + attn_b + elem_b;
  double layer_rc = 0;
  if (l.recompute == Recompute::kFull) {
    layer_rc = layer_f;  // its collectives are in the TP list (recompute_full)
  } else if (l.recompute == Recompute::kSelective && !sw_.flash_attention) {
    layer_rc = attn_f;  // only the attention core is recomputed
  }

  // ---- per stage ----
  const auto& stages = StagesFor(l.tp, l.pp, l.vpp);
  const double v = static_cast<double>(l.vpp);
  const int64_t m = l.micro_batches();
  const double mv = static_cast<double>(m);
  // Cross-entropy over the (TP-split) logits in fp32, bytes per logit:
  // legacy (Megatron's vocab-parallel cross-entropy, one op per pass): upcast
  // (read 2, write 4), max (4), subtract (8), exp (8), sum (4), divide (8) =
  // 38 forward; backward scales the saved softmax (8) and casts it back to
  // 16 bits (6) = 14. modern (PyTorch cross_entropy on upcast logits: fused
  // log-softmax reads twice and writes once): upcast (6) + 12 = 18 forward;
  // backward writes the one-hot gradient (4), log-softmax backward (12) and
  // the cast back (6) = 22.
  const double ce_f = sw_.fused_log_softmax ? 18.0 : 38.0, ce_b = sw_.fused_log_softmax ? 22.0 : 14.0;
  const auto logits_gemm = gemm_fb(T, V / t, h);
  const double logits_f = logits_gemm.first + T * (V / t) * ce_f / hbm;
  const double logits_b = logits_gemm.second + T * (V / t) * ce_b / hbm;
  const double embed = T * h * act_bytes * 2.0 / hbm;
  // The TP and PP operations of each stage's step, as the trainer issues
  // them (src/parallel/tp_pp_layout.h); the TP ones are timed where they
  // run (forward or backward of each micro-batch; not overlapped), at
  // ring bytes / bandwidth plus a latency per call.
  TpPpStepOptions step_opt;
  step_opt.micro_batch = l.micro_batch;
  step_opt.micro_batches = m;
  step_opt.elem_bytes = static_cast<int64_t>(act_bytes);
  step_opt.recompute_full = l.recompute == Recompute::kFull;
  step_opt.pp_scatter_gather = sw_.pp_scatter_gather;
  ModelSpec rank_spec = M;
  rank_spec.padded_vocab_size = RoundUp(M.padded_vocab_size, l.tp);
  std::vector<Prediction::StageCollectives> stage_coll(stages.size());
  ST_ASSIGN_OR_RETURN(const ScheduleInfo* sched, ScheduleFor(l.schedule(), l.pp, l.vpp, m));
  auto tp_time = [&](const std::vector<DpCollective>& cs, StepPhase phase) {
    double time = 0;
    for (const DpCollective& c : cs) {
      if (c.phase == phase) time += c.RingBytes(l.tp) / tp_bw + static_cast<double>(c.calls) * tp_lat;
    }
    return time / mv;  // per micro-batch
  };
  double stage_f = 0, stage_b = 0, stage_compute = 0, stage_rc = 0, stage_tp = 0;
  size_t worst = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const double n = static_cast<double>(stages[i].layers);
    double c_f = n * layer_f, c_b = n * layer_b;
    if (stages[i].embedding) c_f += embed, c_b += embed;
    if (stages[i].head) c_f += logits_f, c_b += logits_b;
    // Unfused gradient accumulation: every micro-batch adds each new 16-bit
    // weight gradient into the accumulation buffer. That buffer is fp32 for
    // bf16 (read 2 + 4, write 4 bytes); Megatron-LM keeps it in fp16 for fp16
    // runs unless --accumulate-allreduce-grads-in-fp32 is given (read 2 + 2,
    // write 2 bytes).
    if (!sw_.fused_grad_accumulation) {
      const double accum_bytes = 2.0 + 2.0 * static_cast<double>(grad_elem_bytes);
      c_b += static_cast<double>(stages[i].numel) * accum_bytes / hbm;
    }
    const ModelShard shard{l.tp, 0, l.pp, static_cast<int64_t>(i), l.vpp, l.sp && l.tp > 1};
    stage_coll[i].tp = TensorParallelStepCollectives(rank_spec, shard, stages[i], step_opt);
    if (l.pp > 1) stage_coll[i].pp = PipelineStepCollectives(rank_spec, shard, stages[i], sched->schedule, step_opt);
    const double x_f = tp_time(stage_coll[i].tp, StepPhase::kForward);
    const double x_b = tp_time(stage_coll[i].tp, StepPhase::kBackward);
    const double f = c_f + x_f;
    const double bw = c_b + n * layer_rc + x_b;
    if (f + bw > stage_f + stage_b) {
      stage_f = f, stage_b = bw, worst = i;
      stage_compute = c_f + c_b, stage_rc = n * layer_rc, stage_tp = x_f + x_b;
    }
  }

  // Pipeline point-to-point: each action receives one activation (or its
  // gradient): PipelineMessageNumel (with scatter-gather split across the
  // TP ranks, as Megatron-LM).
  double p2p = 0, p2p_bytes = 0;
  if (l.pp > 1) {
    p2p_bytes = static_cast<double>(PipelineMessageNumel(rank_spec, ModelShard{l.tp, 0, l.pp, 0, l.vpp, l.sp && l.tp > 1},
                                                         l.micro_batch, sw_.pp_scatter_gather)) *
                act_bytes;
    const bool inter = static_cast<double>(l.tp * l.dp) >= gpn;
    const double bw = inter ? cluster_.NicBytesPerSPerGpu() : cluster_.IntraBusBytesPerS();
    const double lat = (inter ? cluster_.fabric.latency_us : node.intra_latency_us) * 1e-6;
    p2p = lat + p2p_bytes / bw;
  }
  const double chunk_f = stage_f / v + p2p, chunk_b = stage_b / v + p2p;
  ST_ASSIGN_OR_RETURN(double makespan, Makespan(*sched, chunk_f, chunk_b));

  Prediction p;
  p.layout = l;
  p.layout.grad_reduce = GradReduceFor(l, sw_);
  p.time_s.compute = mv * stage_compute;
  p.time_s.recompute = mv * stage_rc;
  p.time_s.tp_comm = mv * stage_tp;
  p.time_s.pp_comm = mv * v * 2.0 * p2p;
  p.time_s.bubble = std::max(0.0, makespan - mv * v * (chunk_f + chunk_b));

  // ---- data parallelism and ZeRO ----
  // The flat buffers of each stage's ranks, padded to a multiple of dp (as
  // the trainer allocates them, src/parallel/dp_layout.h); the stage with
  // the most parameters sets the DP traffic.
  const StageParams& ws = stages[worst];
  size_t fullest = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].numel > stages[fullest].numel) fullest = i;
  }
  const int64_t local_numel = stages[fullest].numel;
  const double local_params = static_cast<double>(local_numel);
  // Gradients are reduced in the gradient buffer's dtype (grad_elem_bytes);
  // parameters are gathered in the compute precision.
  const int64_t param_elem_bytes = static_cast<int64_t>(act_bytes);
  // ZeRO-2 reduces after every micro-batch (the trainer: once a step
  // under pp > 1).
  const int64_t reductions =
      sw_.zero2_reduce_once_with_pp ? DpGradReductionsPerStep(l.zero, l.pp, m) : (l.zero == 2 ? m : 1);
  auto dp_list = [&](int64_t numel, int64_t* num_buckets) {
    const int64_t padded = DpPaddedNumel(numel, l.dp);
    const std::vector<GradBucket> buckets = CutGradBuckets(padded, l.dp, l.bucket_bytes);
    *num_buckets = static_cast<int64_t>(buckets.size());
    if (l.dp <= 1) return std::vector<DpCollective>{};
    if (l.zero <= 2) {
      return DataParallelStepCollectives(buckets, l.dp, l.zero, reductions, grad_elem_bytes,
                                         param_elem_bytes);
    }
    // ZeRO-3 / FSDP (not in the trainer): every micro-batch gathers the
    // weights for forward and again for backward, and reduce-scatters the
    // gradients, bucket by bucket.
    const int64_t nb = *num_buckets, weights = padded * param_elem_bytes, grads = padded * grad_elem_bytes;
    return std::vector<DpCollective>{
        {"parameter all-gather (forward)", DpCollectiveKind::kAllgather, nb * m, weights * m, StepPhase::kForward},
        {"parameter all-gather (backward)", DpCollectiveKind::kAllgather, nb * m, weights * m, StepPhase::kBackward},
        {"gradient reduce-scatter", DpCollectiveKind::kReduceScatter, nb * m, grads * m, StepPhase::kBackward}};
  };
  // Stages of equal size (most of them) issue the same DP collectives.
  std::map<int64_t, std::pair<std::vector<DpCollective>, int64_t>> dp_by_numel;
  for (size_t i = 0; i < stages.size(); ++i) {
    auto [it, added] = dp_by_numel.try_emplace(stages[i].numel);
    if (added) it->second.first = dp_list(stages[i].numel, &it->second.second);
    stage_coll[i].dp = it->second.first;
  }
  p.dp_collectives = dp_by_numel.at(local_numel).first;
  const int64_t num_buckets = dp_by_numel.at(local_numel).second;
  p.dp_buckets = l.dp > 1 ? num_buckets : 0;
  double dp_time = 0, dp_exposed = 0, dp_sent = 0;
  if (l.dp > 1) {
    // Ranks are ordered tp fastest, then dp: a DP group has gpn/tp members per node.
    const double per_node = l.tp >= node.gpus_per_node ? 1.0 : std::min(d, gpn / t);
    const bool intra = d <= per_node;
    const double bw = intra ? cluster_.IntraBusBytesPerS()
                            : std::min(cluster_.IntraBusBytesPerS(), per_node * cluster_.NicBytesPerSPerGpu());
    const double lat = 2.0 * std::log2(d) * (intra ? node.intra_latency_us : cluster_.fabric.latency_us) * 1e-6;
    double ar_bytes = 0, rs_bytes = 0, ag_bytes = 0;
    for (const DpCollective& c : p.dp_collectives) {
      dp_sent += c.RingBytes(l.dp);
      if (c.payload_bytes <= static_cast<int64_t>(sizeof(double))) continue;  // scalars: latency only, below
      (c.kind == DpCollectiveKind::kAllreduce ? ar_bytes
       : c.kind == DpCollectiveKind::kReduceScatter ? rs_bytes : ag_bytes) += c.RingBytes(l.dp);
    }
    const double stage_fwd_compute = stage_f, stage_bwd_compute = stage_b;
    if (l.zero == 0) {
      // An all-reduce is a reduce-scatter and an all-gather: two latencies.
      dp_time = ar_bytes / bw + 2.0 * lat;
      // Buckets reduce while the last micro-batch's backward runs.
      dp_exposed = sw_.overlap_dp ? std::max(dp_time - stage_bwd_compute / v, lat) : dp_time;
    } else if (l.zero <= 2) {
      // ZeRO-1: one reduce-scatter per step, under the last backward; ZeRO-2:
      // one per micro-batch, each under its backward: with v chunks per
      // stage, each chunk's backward reduce-scatters its own 1/v of the
      // gradients under itself. The parameter all-gather runs under the next
      // step's first forward.
      const double times = static_cast<double>(reductions);
      const double parts = times > 1 ? v : 1.0;
      const double rs_part = rs_bytes / (times * parts) / bw + lat, ag = ag_bytes / bw + lat;
      dp_time = times * parts * rs_part + ag;
      dp_exposed = sw_.overlap_dp ? times * parts * std::max(rs_part - stage_bwd_compute / v, lat) +
                                        std::max(ag - stage_fwd_compute / v, lat)
                                  : dp_time;
    } else {
      const double per_mb = (rs_bytes + ag_bytes) / mv / bw + 3.0 * lat;
      dp_time = per_mb * mv;
      if (!sw_.overlap_dp) {
        dp_exposed = dp_time;
      } else {
        const double first_layer = ag_bytes / (2.0 * mv) / std::max<double>(1.0, ws.layers) / bw + lat;
        dp_exposed = mv * std::max(0.0, per_mb - (stage_f + stage_b)) + first_layer;
      }
    }
  }
  p.time_s.dp_comm = dp_exposed;
  p.dp_comm_total_s = dp_time;

  const double opt_params = local_params / (l.zero >= 1 ? d : 1.0);
  p.time_s.optimizer = opt_params * OptimizerBytesPerParam(l, sw_) / hbm;
  p.step_time_s = p.time_s.Total();

  // ---- throughput and FLOPs ----
  const double gb = static_cast<double>(l.global_batch);
  const double n_gpus = static_cast<double>(l.num_gpus());
  p.model_flops_per_step = gb * ModelFlopsPerSequence(M);
  double rc_flops = 0;
  if (l.recompute == Recompute::kFull) {
    rc_flops = BlockForwardFlopsPerSequence(M);
  } else if (l.recompute == Recompute::kSelective) {
    rc_flops = 4.0 * s * h * s * static_cast<double>(M.n_layer);
  }
  p.hw_flops_per_step = p.model_flops_per_step + gb * rc_flops;
  p.tokens_per_s = gb * s / p.step_time_s;
  p.tflops_per_gpu = p.model_flops_per_step / p.step_time_s / n_gpus / 1e12;
  p.hw_tflops_per_gpu = p.hw_flops_per_step / p.step_time_s / n_gpus / 1e12;
  p.mfu = p.tflops_per_gpu * 1e12 / peak;
  p.hfu = p.hw_tflops_per_gpu * 1e12 / peak;

  // ---- memory on the most loaded GPU ----
  const bool fp32 = l.precision == Precision::kFP32;
  double worst_mem = -1;
  for (size_t i = 0; i < stages.size(); ++i) {
    const auto& st = stages[i];
    const double params = static_cast<double>(st.numel);
    RankBytes rb;
    rb.numel = st.numel;
    rb.padded_numel = DpPaddedNumel(rb.numel, l.dp);
    const int64_t shard = rb.padded_numel / l.dp;
    rb.params = (l.zero >= 3 ? shard : rb.padded_numel) * static_cast<int64_t>(act_bytes);
    rb.grads = DpPersistentGradNumel(rb.padded_numel, l.dp, l.zero) * grad_elem_bytes;
    rb.optimizer = DpOwnedNumel(rb.padded_numel, l.dp, l.zero) * (fp32 ? 8 : 12);
    MemoryBreakdown mem;
    mem.params = static_cast<double>(rb.params);
    mem.grads = static_cast<double>(rb.grads);
    mem.optimizer = static_cast<double>(rb.optimizer);
    const double layers_per_chunk = static_cast<double>(st.layers) / v;
    const double in_flight = static_cast<double>(sched->in_flight[i]);
    // LayerActivationBytes counts 16-bit activations; fp32 ones are twice that.
    const double act_scale = act_bytes / 2.0;
    const double per_layer = act_scale * LayerActivationBytes(M, l.micro_batch, l.tp, l.sp, l.recompute, sw_);
    double act = in_flight * layers_per_chunk * per_layer;
    if (l.recompute == Recompute::kFull) {
      // Backward rebuilds one layer's full set at a time.
      act += act_scale * LayerActivationBytes(M, l.micro_batch, l.tp, l.sp, Recompute::kNone, sw_);
    }
    // The embedding's output is the first layer's input, counted in that
    // layer's set; its dropout adds a 1-byte mask per element for each
    // micro-batch in flight in chunk 0 (Megatron's embedding dropout).
    if (st.embedding && sw_.dropout) act += sched->first_chunk_in_flight[i] * T * h / rep_div;
    if (st.head) act += T * (V / t) * (act_bytes + 4.0);  // logits + fp32 softmax
    mem.activations = act;
    mem.other = sw_.framework_gib * kGiB;
    if (l.zero >= 3) mem.other += 2.0 * params / std::max<double>(1.0, st.layers) * act_bytes * 2.0;  // gather prefetch
    p.stage_bytes.push_back(rb);
    if (mem.Total() > worst_mem) worst_mem = mem.Total(), p.memory = mem, p.rank_bytes = rb;
  }
  p.memory_gib = p.memory.Total() / kGiB;
  p.capacity_gib = gpu.hbm_gib;
  p.fits = p.memory_gib <= gpu.hbm_gib;

  // ---- communication volume ----
  // TP: the slowest stage's; PP: the stage that sends the most.
  auto ring = [](const std::vector<DpCollective>& cs, int64_t n) {
    double bytes = 0;
    for (const DpCollective& c : cs) bytes += c.RingBytes(n);
    return bytes;
  };
  p.comm_bytes.tp = ring(stage_coll[worst].tp, l.tp);
  p.tp_payload_bytes = PayloadBytes(stage_coll[worst].tp);
  for (const auto& sc : stage_coll) p.comm_bytes.pp = std::max(p.comm_bytes.pp, ring(sc.pp, l.pp));
  p.stage_collectives = std::move(stage_coll);
  p.comm_bytes.dp = dp_sent;
  const double comm_time = p.time_s.tp_comm + p.time_s.pp_comm + dp_time;
  p.comm_to_compute = comm_time / (p.time_s.compute + p.time_s.recompute);

  const std::pair<const char*, double> terms[] = {
      {"tp_comm", p.time_s.tp_comm}, {"pp_comm", p.time_s.pp_comm}, {"dp_comm", p.time_s.dp_comm},
      {"bubble", p.time_s.bubble},   {"recompute", p.time_s.recompute}, {"optimizer", p.time_s.optimizer}};
  p.limiter = "compute";
  double largest = 0.05 * p.step_time_s;
  for (const auto& [name, val] : terms) {
    if (val > largest) largest = val, p.limiter = name;
  }
  return p;
}

}  // namespace scaletrain::plan
