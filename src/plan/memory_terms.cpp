#include "plan/memory_terms.h"

#include <algorithm>

#include "model/param_layout.h"
#include "parallel/dp_layout.h"
#include "plan/compute_terms.h"

namespace scaletrain::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

RankBytes StageRankBytes(int64_t numel, const Layout& l, int64_t grad_elem_bytes) {
  const bool fp32 = l.precision == Precision::kFP32;
  RankBytes rb;
  rb.numel = numel;
  rb.padded_numel = DpPaddedNumel(rb.numel, l.dp);
  const int64_t shard = rb.padded_numel / l.dp;
  rb.params = (l.zero >= 3 ? shard : rb.padded_numel) *
              static_cast<int64_t>(ActivationElemBytes(l.precision));
  rb.grads = DpPersistentGradNumel(rb.padded_numel, l.dp, l.zero) * grad_elem_bytes;
  rb.optimizer = DpOwnedNumel(rb.padded_numel, l.dp, l.zero) * (fp32 ? 8 : 12);
  return rb;
}

double LayerActivationBytes(const ModelSpec& m, int64_t micro_batch, int64_t tp, bool sp,
                            Recompute rc, const Software& sw) {
  const double s = m.block_size, b = micro_batch, h = m.n_embd, F = m.ffn_hidden, a = m.n_head,
               t = tp;
  const double kvd = static_cast<double>(KvWidthTimesTp(m, tp));  // replicated KV heads: tp x theirs
  // Parts outside the tensor-parallel region (norm inputs/outputs, dropout
  // masks on the residual stream) are whole on every TP rank unless the
  // sequence is split across them (SP).
  const double rep_div = sp ? t : 1.0;
  if (rc == Recompute::kFull) return 2.0 * s * b * h / rep_div;  // only the layer input is kept
  if (rc == Recompute::kOp) {
    // The layer input and the MLP's output (outside the TP region); the
    // attention output with its fp32 log-sum-exp, and every other matmul
    // output: q, v, the MLP's first (gate) projection.
    const double outside = 2.0 * h + 2.0 * h;
    double inside = 2.0 * h + 4.0 * a + 2.0 * h + 2.0 * kvd + 2.0 * F;
    if (!sw.flash_attention) inside += 2.0 * a * s;  // the softmax output, kept by eager attention
    return s * b * (outside / rep_div + inside / t);
  }
  double rep = 2.0 * h + 2.0 * h + 2.0 * h + 2.0 * h;            // two norm inputs and outputs
  if (sw.dropout) rep += 2.0 * h;                                // two 1-byte dropout masks
  double split = 2.0 * h + 2.0 * kvd                             // Q, K (QK^T inputs)
                 + 2.0 * kvd                                     // V
                 + 2.0 * h;                   // attention output (projection input)
  split += m.activation() == Activation::kSwiGLU ? 6.0 * F   // SwiGLU: gate and up outputs, their product
                                                 : 4.0 * F;  // GeLU / squared ReLU input and output
  double scores = 0;                          // per token, the s x s parts
  if (sw.flash_attention) {
    split += 4.0 * a;  // fp32 log-sum-exp per head
  } else if (rc != Recompute::kSelective) {
    scores = 2.0 * a * s;                           // softmax output
    if (sw.dropout) scores += a * s + 2.0 * a * s;  // dropout mask and output
  }
  return s * b * (rep / rep_div + (split + scores) / t);
}

// FP8 training (Transformer Engine) changes what a layer keeps: each Linear
// saves its FP8 input (the transpose its weight gradient reads, 1 byte) in
// place of the bf16 one. The two norms' outputs (QKV's and the MLP-up's
// input) and the MLP's activation output (down's input) shrink to 1 byte;
// the attention output stays, FlashAttention's backward reads it, and the
// output projection keeps its FP8 copy besides. Bytes per layer, 16-bit
// elements as LayerActivationBytes counts them.
double Fp8ActivationDeltaBytes(const ModelSpec& m, int64_t micro_batch, int64_t tp, bool sp) {
  const double s = m.block_size, b = micro_batch, h = m.n_embd, F = m.ffn_hidden, t = tp;
  const double rep_div = sp ? t : 1.0;
  return s * b * (-2.0 * h / rep_div + (h - F) / t);
}

double StageActivationBytes(const ModelSpec& m, const Layout& l, const Software& sw,
                            const RankParams& stage, int32_t in_flight,
                            int32_t first_chunk_in_flight) {
  const double act_bytes = ActivationElemBytes(l.precision);
  const double t = static_cast<double>(l.tp), h = static_cast<double>(m.n_embd);
  const double T = static_cast<double>(l.micro_batch) * static_cast<double>(m.block_size);
  const double V = static_cast<double>(PaddedVocabSize(m.padded_vocab_size, 1, l.tp));
  const double rep_div = l.sp ? t : 1.0;
  const double layers_per_chunk = static_cast<double>(stage.layers) / static_cast<double>(l.vpp);
  // LayerActivationBytes counts 16-bit activations; fp32 ones are twice that.
  const double act_scale = act_bytes / 2.0;
  // Transformer Engine keeps FP8 inputs; torchao's dynamic scaling keeps the
  // bf16 ones and casts them again.
  const double fp8 = l.precision == Precision::kFP8 && !sw.fp8_dynamic_scaling
                         ? Fp8ActivationDeltaBytes(m, l.micro_batch, l.tp, l.sp)
                         : 0.0;
  const bool whole_set = l.recompute == Recompute::kNone || l.recompute == Recompute::kSelective;
  double per_layer =
      act_scale * LayerActivationBytes(m, l.micro_batch, l.tp, l.sp, l.recompute, sw) +
      (whole_set ? fp8 : 0.0);
  // Full recomputation of some of each chunk's layers: the others keep
  // their whole set.
  const double rerun = RecomputedShare(l, stage.layers);
  if (l.recompute == Recompute::kFull && rerun < 1.0) {
    per_layer = rerun * per_layer +
                (1.0 - rerun) * (act_scale * LayerActivationBytes(m, l.micro_batch, l.tp, l.sp,
                                                                  Recompute::kNone, sw) +
                                 fp8);
  }
  double act = static_cast<double>(in_flight) * layers_per_chunk * per_layer;
  if (l.recompute == Recompute::kFull || l.recompute == Recompute::kOp) {
    // Backward rebuilds one layer's full set at a time.
    act +=
        act_scale * LayerActivationBytes(m, l.micro_batch, l.tp, l.sp, Recompute::kNone, sw) + fp8;
  }
  // The embedding's output is the first layer's input, counted in that
  // layer's set; its dropout adds a 1-byte mask per element for each
  // micro-batch in flight in chunk 0 (Megatron's embedding dropout).
  if (stage.embedding && sw.dropout) act += first_chunk_in_flight * T * h / rep_div;
  if (stage.head) act += T * (V / t) * (act_bytes + 4.0);  // logits + fp32 softmax
  return act;
}

std::vector<TrainerChunk> TrainerChunksOf(const ModelSpec& m, const Layout& l,
                                          const PipelineSchedule& schedule, int64_t stage) {
  const std::vector<int64_t> virtual_stage = VirtualStageOfLayers(m, l.pp, l.vpp);
  std::vector<TrainerChunk> chunks(static_cast<size_t>(l.vpp));
  for (int64_t c = 0; c < l.vpp; ++c) {
    TrainerChunk& ch = chunks[static_cast<size_t>(c)];
    const int64_t v = ChunkVirtualStage(l.pp, l.chunks_in_v(), stage, c);
    ch.embedding = v == 0;
    ch.head = v == l.pp * l.vpp - 1;
    ch.layers = std::count(virtual_stage.begin(), virtual_stage.end(), v);
    const int32_t peak = PeakActivations(schedule, static_cast<int32_t>(c))[static_cast<size_t>(stage)];
    ch.slots = std::max<int64_t>(1, peak);
  }
  return chunks;
}

namespace {

// The float counts of the trainer's activation slices (GPT::LayOutActivations):
// each slice is rounded up to 16 floats (FloatArena).
struct TrainerSlices {
  // att: the floats of a layer's kept attention slice (its T x T
  // probabilities, or with context parallelism each row's log-sum-exp);
  // att_grad: the probabilities' gradient scratch (none with cp).
  int64_t N, Nr, C, Cl, Fl, att, att_grad, Vl;
  int64_t ring = 0;  // context parallelism's buffers (GPT::TakeContextParallelBuffers)
  int64_t layer_extra = 0;  // Ulysses: each layer's q, k, v in the heads layout
  int64_t qkv = 0, fc = 0;  // fused q,k,v width; the MLP's first matmul width (SwiGLU: 2 Fl)
  int64_t kv_saved = 0;     // replicated key/value weights' kept gradient (Llama, n_kv_head < tp)
  bool sp, mean = true;     // RMSNorm (Llama) keeps no mean
  static int64_t R(int64_t n) { return (n + 15) / 16 * 16; }
  // One block's full set (TakeLayerActs), with or without its own
  // attention probabilities.
  int64_t Layer(bool own_att) const {
    const int64_t norm = R(Nr * C) + (mean ? 2 : 1) * R(Nr) + (sp ? R(N * C) : 0);  // out, mean, rstd, gathered
    return 2 * norm + R(N * qkv) + R(N * Cl) + (own_att ? R(att) : 0) + 2 * R(Nr * C) +
           R(N * fc) + R(N * Fl) + layer_extra;
  }
  int64_t Scratch(bool shared_att) const {  // TakeScratch
    return R(N * C) + R(Nr * C) + (sp ? R(N * C) + R(Nr * C) : 0) + R(N * C) + R(N * qkv) +
           R(N * Cl) + R(att_grad) + R(N * fc) + R(N * Fl) + (shared_att ? R(att_grad) : 0) + ring;
  }
  // A zero-bubble slot's copies of the output gradients its W reads
  // (GPT::WeightStashFloats): per block both projections', the fc and q,k,v
  // matmuls' and both norms'; the head's norm's, the embedding's.
  int64_t WeightStash(int64_t layers, bool head, bool embedding) const {
    const int64_t block = 2 * R(N * C) + R(N * fc) + R(N * qkv) + 2 * R(Nr * C);
    return layers * block + (head ? R(Nr * C) : 0) + (embedding ? R(Nr * C) : 0);
  }
  int64_t Head() const {
    return R(Nr * C) + (mean ? 2 : 1) * R(Nr) + (sp ? R(N * C) : 0) + 2 * R(N * Vl) + R(N) + R(3 * N);
  }
};

}  // namespace

int64_t TrainerActivationBytes(const ModelSpec& m, const Layout& l,
                               const std::vector<TrainerChunk>& chunks) {
  if (l.recompute == Recompute::kOp) return 0;
  TrainerSlices z{};
  const int64_t cp = std::max<int64_t>(1, l.cp), T = m.block_size, Tl = T / cp;
  const int64_t NHl = m.n_head / l.tp;
  z.sp = l.sp && l.tp > 1;
  z.N = l.micro_batch * Tl;
  z.Nr = z.sp ? z.N / l.tp : z.N;
  z.C = m.n_embd;
  z.Cl = m.n_embd / l.tp;
  z.Fl = m.ffn_hidden / l.tp;
  const bool ulysses = cp > 1 && l.cp_ulysses, ring = cp > 1 && !ulysses;
  // The ring keeps each row's log-sum-exp; Ulysses its heads' share of the
  // T x T probabilities.
  z.att = ring ? l.micro_batch * NHl * Tl : l.micro_batch * (NHl / cp) * T * T;
  z.att_grad = ring ? 0 : z.att;
  z.Vl = m.padded_vocab_size / l.tp;
  const bool llama = m.arch == Arch::kLlama;
  const int64_t kv_heads = llama ? LocalKvHeads(m, l.tp) : NHl, kv_width = kv_heads * m.head_dim();
  z.qkv = z.Cl + 2 * kv_width;
  if (ulysses) {
    // Each layer also keeps q, k, v in the heads layout; the scratch holds the
    // all-to-all's two buffers, the output (or its gradient) in the heads
    // layout and q, k, v's gradient there (GPT::TakeContextParallelBuffers).
    z.layer_extra = TrainerSlices::R(z.N * z.qkv);
    z.ring = 3 * TrainerSlices::R(z.N * z.qkv) + TrainerSlices::R(z.N * z.Cl);
  } else if (ring) {
    // Two key/value blocks and two of their gradients, the row statistics
    // and the scores of one chunk pair per (batch, head) (forward) or two per
    // (batch, key/value head) (backward).
    const int64_t len = T / (2 * cp);
    z.ring = 4 * TrainerSlices::R(z.N * 2 * kv_width) + TrainerSlices::R(l.micro_batch * NHl * Tl) +
             TrainerSlices::R(l.micro_batch * std::max(NHl, 2 * kv_heads) * len * len);
  }
  z.fc = llama ? 2 * z.Fl : z.Fl;
  z.mean = !llama;
  z.kv_saved = KvHeadsReplicated(m, l.tp) ? TrainerSlices::R(2 * kv_width * z.C) : 0;
  const bool full = l.recompute == Recompute::kFull;
  const bool selective = l.recompute == Recompute::kSelective;
  // The 6 x C partial sums of ReplicatedGrads sit at the scratch's end.
  // The ring keeps only each row's log-sum-exp, in every recompute mode.
  const bool own_att = !selective || ring;
  int64_t floats = z.Scratch(selective) + TrainerSlices::R(6 * z.C) + z.kv_saved +
                   (full ? z.Layer(true) : 0);
  const int64_t per_layer = full ? TrainerSlices::R(z.Nr * z.C) : z.Layer(own_att);
  for (const TrainerChunk& ch : chunks) {
    const int64_t per_slot = TrainerSlices::R(z.Nr * z.C) + ch.layers * per_layer +
                             (ch.head ? z.Head() : 0) +
                             (l.zero_bubble ? z.WeightStash(ch.layers, ch.head, ch.embedding) : 0);
    floats += ch.slots * per_slot;
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

double Fp8WeightCopyBytes(const ModelSpec& m, const Layout& l, int64_t layers) {
  return 2.0 * LayerLinearWeights(LayerShapeOf(m, l)) / static_cast<double>(l.tp) *
         static_cast<double>(layers);
}

double OtherMemoryBytes(const ModelSpec& m, const Layout& l, const Software& sw,
                        const RankParams& stage) {
  double other = sw.framework_gib * kGiB;
  if (l.zero >= 3) {
    other += 2.0 * static_cast<double>(stage.numel) / std::max<double>(1.0, stage.layers) *
             ActivationElemBytes(l.precision) * 2.0;
  } else if (l.precision == Precision::kFP8 && !sw.fp8_dynamic_scaling) {
    other += Fp8WeightCopyBytes(m, l, stage.layers);
  }
  return other;
}

MemoryBreakdown StageMemory(const ModelSpec& m, const Layout& l, const Software& sw,
                            const RankParams& stage, const RankBytes& rb, int32_t in_flight,
                            int32_t first_chunk_in_flight) {
  MemoryBreakdown mem;
  mem.params = static_cast<double>(rb.params);
  mem.grads = static_cast<double>(rb.grads);
  mem.optimizer = static_cast<double>(rb.optimizer);
  mem.activations = StageActivationBytes(m, l, sw, stage, in_flight, first_chunk_in_flight);
  mem.other = OtherMemoryBytes(m, l, sw, stage);
  return mem;
}

}  // namespace scaletrain::plan
