#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/rng.h"
#include "kernels/cpu/ops.h"

namespace scaletrain {

// Per layer and micro-batch slot: what backward needs. Under sequence
// parallelism the *_full tensors are the all-gathered [B*T, C] inputs of the
// column-parallel matmuls; otherwise they alias the norm outputs.
struct GPT::LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd, *ln1_full, *qkv, *atty, *att, *res2;
  float* qkv_heads = nullptr;  // Ulysses: q, k, v of every position, this rank's heads
  float *ln2, *ln2_mean, *ln2_rstd, *ln2_full, *fch, *fch_gelu, *res3;
};

struct GPT::SlotActs {
  std::vector<LayerActs> layers;  // the chunk's layers
  float* input = nullptr;         // the chunk's input residual (the embedding's output on chunk 0)
  // Head chunk only.
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *lnf_full = nullptr;
  float *logits = nullptr, *probs = nullptr, *losses = nullptr, *ce_stats = nullptr;
  std::vector<int32_t> tokens, targets;
  int64_t B = 0, T = 0;
  // split_backward: the weight-gradient ops B left for W, and the output
  // gradients they read (copies in `stash`, stash_floats in all).
  std::vector<WeightOp> weight_ops;
  float* stash = nullptr;
  size_t stash_floats = 0, stash_used = 0;
  bool weights_pending = false;
};

// One weight-gradient op of the backward (the half of a layer's backward no
// earlier layer waits for): what RunWeightOp needs to add it to grads().
struct GPT::WeightOp {
  enum Kind : uint8_t {
    kColumn,         // column-parallel linear: dw, db from dy and x
    kQkvReplicated,  // the q,k,v matmul with key/value weights summed over TP
    kRow,            // row-parallel linear: dw, db (a replicated target under sp)
    kNorm,           // norm weight and bias (replicated targets under sp)
    kEmbedding,      // the token (and position) embedding, from the residual gradient
    kReduceReplicated,  // the layer's replicated partial sums over TP (sp)
    kLayerDone,         // every gradient of `layer` is complete
  };
  Kind kind = kColumn;
  int64_t layer = 0;
  float *dw = nullptr, *db = nullptr;
  const float* dy = nullptr;  // the op's output gradient (a stash copy when deferred)
  const float *x = nullptr, *mean = nullptr, *rstd = nullptr;
  const int32_t* tokens = nullptr;
  int64_t rows = 0, in = 0, out = 0;  // kEmbedding: rows = B, in = T
};

struct GPT::Chunk {
  std::vector<int64_t> layers;  // global layer indices, ascending
  bool embedding = false, head = false;
  std::vector<SlotActs> slots;
};

// Gradient scratch shared by all layers and slots (one backward at a time).
// `att`: the attention probabilities every layer and slot shares under
// selective recompute (null otherwise).
struct GPT::Scratch {
  float *partial, *dres, *dres_full, *dln, *dln_shard, *dqkv, *datty, *datt, *dfch, *dfch_gelu;
  float* att = nullptr;
  float* replicated;  // ReplicatedGrads' partial sums under sequence parallelism
  float* kv_saved = nullptr;
  // Ulysses: the all-to-all's buffers, the attention output (forward) or its
  // gradient (backward) in the heads layout, and q, k, v's gradient there.
  float *ul_send = nullptr, *ul_recv = nullptr, *heads_out = nullptr, *dqkv_heads = nullptr;
};

namespace {

constexpr int64_t kReplicatedPerBlock = 6;  // ln_1 and ln_2 weight and bias, both projection biases

void Zero(float* x, int64_t n) { std::memset(x, 0, static_cast<size_t>(n) * sizeof(float)); }

cpu::AttentionHeads HeadsOf(const ModelSpec& spec, int64_t tp, int64_t kv_local, int64_t q_head0) {
  cpu::AttentionHeads h;
  h.NH = spec.n_head / tp;
  h.NKV = kv_local;
  h.hs = spec.head_dim();
  h.group = spec.n_head / spec.n_kv_head;
  h.h0 = q_head0;
  return h;
}

}  // namespace

const char* ActivationRecomputeName(ActivationRecompute r) {
  switch (r) {
    case ActivationRecompute::kSelective:
      return "selective";
    case ActivationRecompute::kFull:
      return "full";
    case ActivationRecompute::kNone:
      break;
  }
  return "none";
}

GPT::GPT(const ModelSpec& spec, const ModelShard& shard, Communicator* tp_comm,
         Communicator* cp_comm, int64_t max_batch, ActivationRecompute recompute)
    : spec_(spec),
      shard_(shard),
      tp_(tp_comm, shard.tp, shard.tp_rank, shard.sp),
      cp_(cp_comm, shard.cp, shard.cp_rank),
      layout_(BuildRankLayout(spec, shard)),
      max_batch_(max_batch),
      vocab_(tp_.VocabShardOf(spec.vocab_size, spec.padded_vocab_size)),
      recompute_(recompute) {}

GPT::~GPT() = default;

Result<std::unique_ptr<GPT>> GPT::Create(const ModelSpec& spec, int64_t max_batch,
                                         int64_t flat_multiple, ActivationRecompute recompute) {
  return CreateShard(spec, ModelShard{}, nullptr, max_batch, flat_multiple, {}, recompute, nullptr);
}

namespace {

// The block styles the trainer runs: GPT-2 (GeLU, tied head) and Llama
// (SwiGLU, tied or untied head).
Status CheckTrainable(const ModelSpec& spec) {
  const bool llama = spec.arch == Arch::kLlama;
  const bool gpt2_ok = !llama && spec.activation() == Activation::kGelu && spec.tied_embeddings();
  if (!gpt2_ok && !(llama && spec.activation() == Activation::kSwiGLU)) {
    return InvalidArgument(std::string("the trainer runs GPT-2 blocks (GeLU MLP, tied head) and Llama blocks "
                                       "(SwiGLU); ") + ArchName(spec.arch) + " with activation '" +
                           ActivationName(spec.activation()) + "'" +
                           (llama || spec.tied_embeddings() ? "" : " and an untied head") + " is for the planner");
  }
  return Status::Ok();
}

// The layout this rank runs, against the model and the micro-batch: checked
// before anything is allocated.
Status CheckShardLayout(const ModelSpec& spec, const ModelShard& shard, const Communicator* tp_comm,
                        const Communicator* cp_comm, int64_t max_batch) {
  ST_RETURN_IF_ERROR(CheckModelShard(spec, shard));
  if (shard.tp > 1 && (tp_comm == nullptr || tp_comm->size() != shard.tp)) {
    return InvalidArgument("tensor parallelism needs the TP group's communicator (of size tp)");
  }
  if (shard.cp > 1 && (cp_comm == nullptr || cp_comm->size() != shard.cp)) {
    return InvalidArgument("context parallelism needs the CP group's communicator (of size cp)");
  }
  ST_RETURN_IF_ERROR(CheckContextParallel(spec.block_size, shard.cp));
  if (shard.ulysses) ST_RETURN_IF_ERROR(CheckUlysses(spec, shard.tp, shard.cp));
  const int64_t rows = max_batch * spec.block_size / shard.cp;
  if (shard.sp && rows % shard.tp != 0) {
    return InvalidArgument("sequence parallelism splits the micro-batch's " + std::to_string(rows) +
                           " token rows" + (shard.cp > 1 ? " (per context-parallel rank)" : "") +
                           " over tp = " + std::to_string(shard.tp) +
                           "; make micro_batch_size x block_size" + (shard.cp > 1 ? " / cp" : "") +
                           " a multiple of tp");
  }
  return Status::Ok();
}

// Where `name` starts in the flat buffer; -1 when the layout has no such
// tensor (another architecture's, or another stage's).
int64_t OffsetOf(const ParamLayout& lay, const std::string& name) {
  const ParamEntry* e = lay.Find(name);
  return e ? e->offset : int64_t{-1};
}

// Calls a layer hook where one was given.
void Notify(const std::function<void(int64_t)>& hook, int64_t layer) {
  if (hook) hook(layer);
}

}  // namespace

Result<std::unique_ptr<GPT>> GPT::CreateShard(const ModelSpec& spec, const ModelShard& shard_in,
                                              Communicator* tp_comm, int64_t max_batch,
                                              int64_t flat_multiple, std::vector<int64_t> slots,
                                              ActivationRecompute recompute, Communicator* cp_comm,
                                              bool split_backward) {
  ST_RETURN_IF_ERROR(ValidateModelSpec(spec));
  ST_RETURN_IF_ERROR(CheckTrainable(spec));
  if (max_batch <= 0) return InvalidArgument("micro-batch size must be positive");
  ModelShard shard = shard_in;
  shard.sp = shard.sp && shard.tp > 1;  // one rank holds every row anyway
  ST_RETURN_IF_ERROR(CheckShardLayout(spec, shard, tp_comm, cp_comm, max_batch));
  if (split_backward && recompute == ActivationRecompute::kFull) {
    return InvalidArgument("a split backward (zero-bubble schedules) keeps each block's inputs "
                           "for the weight gradients; full recompute does not keep them");
  }
  std::unique_ptr<GPT> m(new GPT(spec, shard, tp_comm, cp_comm, max_batch, recompute));
  m->split_backward_ = split_backward;
  m->LocateEmbeddingAndHead();
  m->SetTensorParallelWidths();
  m->AssignChunks(slots);
  m->AllocateBuffers(flat_multiple);
  return m;
}

void GPT::LocateEmbeddingAndHead() {
  wte_ = OffsetOf(layout_, llama() ? "tok_embeddings.weight" : "transformer.wte.weight");
  wpe_ = OffsetOf(layout_, "transformer.wpe.weight");
  lnfw_ = OffsetOf(layout_, llama() ? "norm.weight" : "transformer.ln_f.weight");
  lnfb_ = OffsetOf(layout_, "transformer.ln_f.bias");
  head_w_ = spec_.tied_embeddings()
                ? wte_
                : OffsetOf(layout_, llama() ? "output.weight" : "lm_head.weight");
}

void GPT::SetTensorParallelWidths() {
  const int64_t tp = shard_.tp, hs = spec_.head_dim(), Fl = spec_.ffn_hidden / tp;
  kv_replicated_ = KvHeadsReplicated(spec_, tp);
  kv_heads_local_ = llama() ? LocalKvHeads(spec_, tp) : spec_.n_head / tp;
  q_head0_ = kv_replicated_ ? shard_.tp_rank * (spec_.n_head / tp) : 0;
  qkv_width_ = spec_.n_embd / tp + 2 * kv_heads_local_ * hs;
  fc_out_width_ = Fl;
  fc_width_ = llama() ? 2 * Fl : Fl;
}

void GPT::AssignChunks(const std::vector<int64_t>& slots) {
  layer_off_.resize(spec_.n_layer);
  const int64_t virtual_stages = shard_.pp * shard_.vpp;
  chunks_.resize(shard_.vpp);
  const std::vector<int64_t> stage_of = VirtualStageOfLayers(spec_, shard_.pp, shard_.vpp);
  for (int64_t c = 0; c < shard_.vpp; ++c) {
    const int64_t v = ChunkVirtualStage(shard_.pp, shard_.v_shape, shard_.stage, c);
    Chunk& ch = chunks_[c];
    ch.embedding = v == 0;
    ch.head = v == virtual_stages - 1;
    for (int64_t l = 0; l < spec_.n_layer; ++l) {
      if (stage_of[l] != v) continue;
      ch.layers.push_back(l);
      layer_off_[l] = OffsetsOf(layout_, spec_, l);
    }
    const int64_t n = c < static_cast<int64_t>(slots.size()) ? std::max<int64_t>(1, slots[c]) : 1;
    ch.slots.resize(n);
  }
}

void GPT::AllocateBuffers(int64_t flat_multiple) {
  flat_numel_ = RoundUp(layout_.total_numel, std::max<int64_t>(1, flat_multiple));
  const size_t pbytes = static_cast<size_t>(flat_numel_) * sizeof(float);
  params_ = Buffer(pbytes);
  grads_ = Buffer(pbytes);
  scratch_ = std::make_unique<Scratch>();
  // A dry run with no base counts the floats; then the real layout.
  acts_ = Buffer(LayOutActivations(nullptr) * sizeof(float));
  LayOutActivations(acts_.f32());
  replicated_grads_ = std::make_unique<ReplicatedGrads>(&tp_, scratch_->replicated,
                                                        kReplicatedPerBlock, spec_.n_embd);
}

GPT::LayerOffsets GPT::OffsetsOf(const ParamLayout& lay, const ModelSpec& spec, int64_t l) {
  auto off = [&](const std::string& name) { return OffsetOf(lay, name); };
  if (spec.arch == Arch::kLlama) {
    // wq, wk, wv adjacent (one fused [q | k | v] matmul from wq's offset);
    // w1, w3 adjacent ([gate | up] from w1's). No biases.
    const std::string p = "layers." + std::to_string(l) + ".";
    return {off(p + "attention_norm.weight"), -1, off(p + "attention.wq.weight"), -1,
            off(p + "attention.wo.weight"), -1, off(p + "ffn_norm.weight"), -1,
            off(p + "feed_forward.w1.weight"), -1, off(p + "feed_forward.w2.weight"), -1};
  }
  const std::string p = "transformer.h." + std::to_string(l) + ".";
  return {off(p + "ln_1.weight"), off(p + "ln_1.bias"),
          off(p + "attn.c_attn.weight"), off(p + "attn.c_attn.bias"),
          off(p + "attn.c_proj.weight"), off(p + "attn.c_proj.bias"),
          off(p + "ln_2.weight"), off(p + "ln_2.bias"),
          off(p + "mlp.c_fc.weight"), off(p + "mlp.c_fc.bias"),
          off(p + "mlp.c_proj.weight"), off(p + "mlp.c_proj.bias")};
}

int64_t GPT::num_chunks() const { return static_cast<int64_t>(chunks_.size()); }
bool GPT::chunk_has_embedding(int64_t c) const { return chunks_[c].embedding; }
bool GPT::chunk_has_head(int64_t c) const { return chunks_[c].head; }
int64_t GPT::num_slots(int64_t c) const { return static_cast<int64_t>(chunks_[c].slots.size()); }

LayerRange GPT::ChunkLayers(int64_t c) const {
  const Chunk& ch = chunks_[c];
  LayerRange r;
  r.first = ch.embedding ? kEmbeddingLayer : ch.layers.front();
  r.last = ch.head ? HeadLayer(spec_.n_layer) : ch.layers.back();
  return r;
}

int64_t GPT::residual_rows(int64_t B, int64_t T) const { return tp_.ResidualRows(B * T / cp_.size()); }

void GPT::TakeLayerActs(FloatArena& arena, LayerActs& L, bool shared_att) const {
  const int64_t tp = shard_.tp, Tl = cp_.LocalRows(spec_.block_size);
  const int64_t N = max_batch_ * Tl, Nr = tp_.ResidualRows(N);
  const int64_t C = spec_.n_embd, Cl = C / tp, NHl = spec_.n_head / tp;
  const bool sp = tp_.sp();
  const bool mean = !llama();  // RMSNorm keeps rstd only
  L.ln1 = arena.Take(Nr * C); L.ln1_mean = mean ? arena.Take(Nr) : nullptr; L.ln1_rstd = arena.Take(Nr);
  L.ln1_full = sp ? arena.Take(N * C) : L.ln1;
  L.qkv = arena.Take(N * qkv_width_); L.atty = arena.Take(N * Cl);
  // With context parallelism each row's log-sum-exp (the ring's backward
  // recomputes the probabilities block by block) instead of the T x T
  // probabilities, whatever the recompute mode.
  if (ulysses()) {
    // Every position of n_head / tp / cp heads: 1/cp of the probabilities.
    L.qkv_heads = arena.Take(N * qkv_width_);
    const int64_t T = spec_.block_size;
    L.att = shared_att ? scratch_->att : arena.Take(max_batch_ * (NHl / cp_.size()) * T * T);
  } else if (context_parallel()) {
    L.att = arena.Take(max_batch_ * NHl * Tl);
  } else {
    L.att = shared_att ? scratch_->att : arena.Take(max_batch_ * NHl * spec_.block_size * spec_.block_size);
  }
  L.res2 = arena.Take(Nr * C);
  L.ln2 = arena.Take(Nr * C); L.ln2_mean = mean ? arena.Take(Nr) : nullptr; L.ln2_rstd = arena.Take(Nr);
  L.ln2_full = sp ? arena.Take(N * C) : L.ln2;
  L.fch = arena.Take(N * fc_width_); L.fch_gelu = arena.Take(N * fc_out_width_);
  L.res3 = arena.Take(Nr * C);
}

void GPT::TakeScratch(FloatArena& arena) {
  const int64_t tp = shard_.tp;
  const int64_t N = max_batch_ * cp_.LocalRows(spec_.block_size), Nr = tp_.ResidualRows(N);
  const int64_t C = spec_.n_embd, Cl = C / tp, NHl = spec_.n_head / tp;
  // The T x T probabilities' gradient scratch: none with the ring, the
  // rank's heads' with Ulysses.
  const int64_t att = context_parallel() && !ulysses()
                          ? 0
                          : max_batch_ * (NHl / cp_.size()) * spec_.block_size * spec_.block_size;
  const bool sp = tp_.sp();
  Scratch& S = *scratch_;
  S.partial = arena.Take(N * C); S.dres = arena.Take(Nr * C);
  S.dres_full = sp ? arena.Take(N * C) : S.dres;
  S.dln = arena.Take(N * C); S.dln_shard = sp ? arena.Take(Nr * C) : S.dln;
  S.dqkv = arena.Take(N * qkv_width_); S.datty = arena.Take(N * Cl);
  S.datt = att > 0 ? arena.Take(att) : nullptr;
  S.dfch = arena.Take(N * fc_width_);
  S.dfch_gelu = arena.Take(N * fc_out_width_);
  S.replicated = arena.Take(kReplicatedPerBlock * C);
  // Replicated key/value weights: the kept gradient while this rank's part
  // of a block's is summed over TP.
  S.kv_saved = kv_replicated_ ? arena.Take(2 * kv_heads_local_ * spec_.head_dim() * C) : nullptr;
  S.att = recompute_ == ActivationRecompute::kSelective && att > 0 ? arena.Take(att) : nullptr;
  if (context_parallel()) TakeContextParallelBuffers(arena);
}

void GPT::TakeContextParallelBuffers(FloatArena& arena) {
  const int64_t Tl = cp_.LocalRows(spec_.block_size), N = max_batch_ * Tl;
  if (ulysses()) {
    Scratch& S = *scratch_;
    S.ul_send = arena.Take(N * qkv_width_);
    S.ul_recv = arena.Take(N * qkv_width_);
    S.heads_out = arena.Take(N * (spec_.n_embd / shard_.tp));
    S.dqkv_heads = arena.Take(N * qkv_width_);
    return;
  }
  const cpu::AttentionHeads heads = HeadsOf(spec_, shard_.tp, kv_heads_local_, q_head0_);
  const int64_t kv = N * 2 * heads.NKV * heads.hs;
  for (int i = 0; i < 2; ++i) {
    cp_buf_.kv[i] = arena.Take(kv);
    cp_buf_.dkv[i] = arena.Take(kv);
  }
  cp_buf_.stats = arena.Take(max_batch_ * heads.NH * Tl);
  cp_buf_.scores = arena.Take(
      cpu::RingAttentionScratchFloats(max_batch_, cp_.ChunksOf(cp_.rank(), spec_.block_size), heads));
}

size_t GPT::LayOutActivations(float* base) {
  const int64_t N = max_batch_ * cp_.LocalRows(spec_.block_size), Nr = tp_.ResidualRows(N);
  const int64_t C = spec_.n_embd, Vl = vocab_.rows;
  const bool sp = tp_.sp();
  FloatArena arena(base);
  TakeScratch(arena);
  if (recompute_ == ActivationRecompute::kFull) {
    work_ = std::make_unique<LayerActs>();
    TakeLayerActs(arena, *work_, false);
  }
  for (Chunk& ch : chunks_) {
    for (SlotActs& s : ch.slots) {
      s.layers.resize(ch.layers.size());
      s.input = arena.Take(Nr * C);
      for (LayerActs& L : s.layers) {
        if (recompute_ == ActivationRecompute::kFull) {
          L = LayerActs{};
          L.res3 = arena.Take(Nr * C);  // the next block's input
        } else {
          TakeLayerActs(arena, L, recompute_ == ActivationRecompute::kSelective);
        }
      }
      if (ch.head) {
        s.lnf = arena.Take(Nr * C); s.lnf_mean = llama() ? nullptr : arena.Take(Nr);
        s.lnf_rstd = arena.Take(Nr);
        s.lnf_full = sp ? arena.Take(N * C) : s.lnf;
        s.logits = arena.Take(N * Vl); s.probs = arena.Take(N * Vl); s.losses = arena.Take(N);
        s.ce_stats = arena.Take(3 * N);
      }
      s.stash_floats = split_backward_ ? WeightStashFloats(ch) : 0;
      s.stash = s.stash_floats > 0 ? arena.Take(s.stash_floats) : nullptr;
      if (split_backward_) s.weight_ops.reserve(ch.layers.size() * 16 + 8);
    }
  }
  return arena.used_floats();
}

namespace {
size_t Rounded(int64_t floats) { return static_cast<size_t>((floats + 15) / 16 * 16); }
}  // namespace

size_t GPT::WeightStashFloats(const Chunk& ch) const {
  const int64_t N = max_batch_ * spec_.block_size, Nr = tp_.ResidualRows(N), C = spec_.n_embd;
  // Per block: both projections' output gradients (all N rows), the fc and
  // q,k,v matmuls', and both norms' (this rank's rows). The head's matmul
  // reads the slot's own probabilities; its norm's and the embedding's are
  // residual rows.
  const size_t block = 2 * Rounded(N * C) + Rounded(N * fc_width_) + Rounded(N * qkv_width_) +
                       2 * Rounded(Nr * C);
  return ch.layers.size() * block + (ch.head ? Rounded(Nr * C) : 0) +
         (ch.embedding ? Rounded(Nr * C) : 0);
}

void GPT::InitWeights(uint64_t seed) {
  float* p = params_.f32();
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(spec_.n_layer));
  // Each tensor's random stream is keyed by its index in the whole model's
  // layout, so every layout draws the same weights.
  const ParamLayout whole_layout = BuildParamLayout(spec_, 1);
  std::vector<float> whole;
  for (const ParamEntry& e : layout_.entries) {
    int64_t index = 0;
    while (whole_layout.entries[index].name != e.name) ++index;
    whole.assign(static_cast<size_t>(NumElements(e.full_shape)), 0.0f);
    const bool is_norm = e.name.find("ln_") != std::string::npos ||
                         e.name.find("norm.weight") != std::string::npos;
    const bool is_bias = e.name.size() >= 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
    if (is_bias) {
      // zeros
    } else if (is_norm) {
      std::fill(whole.begin(), whole.end(), 1.0f);
    } else {
      Rng rng(HashU64(seed, static_cast<uint64_t>(index), 0x696e6974));  // "init"
      const bool residual_proj = e.name.find("c_proj.weight") != std::string::npos ||
                                 e.name.find("attention.wo.weight") != std::string::npos ||
                                 e.name.find("feed_forward.w2.weight") != std::string::npos;
      const float std = residual_proj ? proj_std : 0.02f;
      for (float& w : whole) w = std * rng.Normal();
    }
    if (e.tp_split == TpSplit::kVocab) {
      // Padding rows of the embedding and head are never looked up and never scored.
      std::fill(whole.begin() + spec_.vocab_size * spec_.n_embd, whole.end(), 0.0f);
    }
    ExtractShard(e, whole.data(), p + e.offset);
  }
}

void GPT::NormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                      const float* b, int64_t rows) const {
  if (llama()) {
    cpu::RMSNormForward(out, rstd, x, w, rows, spec_.n_embd, static_cast<float>(spec_.norm_eps));
  } else {
    cpu::LayerNormForward(out, mean, rstd, x, w, b, rows, spec_.n_embd);
  }
}

void GPT::NormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                       const float* w, const float* mean, const float* rstd, int64_t rows) const {
  if (llama()) {
    cpu::RMSNormBackward(dx, dw, dy, x, w, rstd, rows, spec_.n_embd);
  } else {
    cpu::LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd, rows, spec_.n_embd);
  }
}

void GPT::Rope(float* qkv, int64_t N, int64_t T, const cpu::AttentionHeads& heads,
               bool inverse) const {
  const std::vector<int32_t> pos = context_parallel() ? PositionsOf(T) : std::vector<int32_t>();
  cpu::RopeApplyAt(qkv, N, T, pos.empty() ? nullptr : pos.data(), qkv_width_, heads.NH + heads.NKV,
                   heads.hs, spec_.rope_theta, inverse);
}

cpu::AttentionHeads GPT::UlyssesHeads(const cpu::AttentionHeads& heads) const {
  cpu::AttentionHeads h = heads;
  h.NH = heads.NH / cp_.size();
  h.NKV = heads.NKV / cp_.size();
  h.h0 = 0;  // CheckUlysses: the key/value heads are split, never replicated
  return h;
}

ContextParallel::Columns GPT::QkvColumns(const cpu::AttentionHeads& heads) const {
  ContextParallel::Columns c;
  c.count = 3;
  const int64_t q = heads.NH * heads.hs, kv = heads.NKV * heads.hs;
  c.offset[0] = 0, c.width[0] = q;
  c.offset[1] = q, c.width[1] = kv;
  c.offset[2] = q + kv, c.width[2] = kv;
  return c;
}

// Ulysses: q, k, v to every position of this rank's heads, the single-rank
// kernel over the whole sequence, the output back to this rank's positions.
Status GPT::UlyssesForward(LayerActs& L, int64_t B, int64_t T, const cpu::AttentionHeads& heads) {
  Scratch& S = *scratch_;
  const int64_t Tf = T * cp_.size();
  ContextParallel::Columns out;
  out.width[0] = heads.NH * heads.hs;
  ST_RETURN_IF_ERROR(cp_.ToHeads(L.qkv_heads, L.qkv, B, Tf, QkvColumns(heads), S.ul_send, S.ul_recv));
  cpu::GqaAttentionForward(S.heads_out, L.att, L.qkv_heads, B, Tf, UlyssesHeads(heads));
  return cp_.ToSequence(L.atty, S.heads_out, B, Tf, out, S.ul_send, S.ul_recv);
}

Status GPT::UlyssesBackward(const LayerActs& L, int64_t B, int64_t T, const cpu::AttentionHeads& heads) {
  Scratch& S = *scratch_;
  const int64_t Tf = T * cp_.size();
  const cpu::AttentionHeads h = UlyssesHeads(heads);
  ContextParallel::Columns out;
  out.width[0] = heads.NH * heads.hs;
  if (recompute_ == ActivationRecompute::kSelective) {
    cpu::GqaAttentionForward(S.heads_out, L.att, L.qkv_heads, B, Tf, h);  // the probabilities again
  }
  ST_RETURN_IF_ERROR(cp_.ToHeads(S.heads_out, S.datty, B, Tf, out, S.ul_send, S.ul_recv));
  Zero(S.dqkv_heads, B * T * qkv_width_);
  cpu::GqaAttentionBackward(S.dqkv_heads, S.datt, S.heads_out, L.qkv_heads, L.att, B, Tf, h);
  return cp_.ToSequence(S.dqkv, S.dqkv_heads, B, Tf, QkvColumns(heads), S.ul_send, S.ul_recv);
}

Status GPT::AttentionForward(LayerActs& L, int64_t B, int64_t T, const cpu::AttentionHeads& heads) {
  if (ulysses()) return UlyssesForward(L, B, T, heads);
  if (context_parallel()) {
    return cp_.AttentionForward(L.atty, L.att, L.qkv, B, T * cp_.size(), heads, cp_buf_);
  }
  cpu::GqaAttentionForward(L.atty, L.att, L.qkv, B, T, heads);
  return Status::Ok();
}

Status GPT::AttentionBackward(const LayerActs& L, int64_t B, int64_t T,
                              const cpu::AttentionHeads& heads) {
  Scratch& S = *scratch_;
  if (ulysses()) return UlyssesBackward(L, B, T, heads);
  if (context_parallel()) {
    return cp_.AttentionBackward(S.dqkv, S.datty, L.atty, L.qkv, L.att, B, T * cp_.size(), heads,
                                 cp_buf_);
  }
  cpu::GqaAttentionBackward(S.dqkv, S.datt, S.datty, L.qkv, L.att, B, T, heads);
  return Status::Ok();
}

Status GPT::LayerForward(int64_t l, LayerActs& L, const float* x, int64_t B, int64_t T) {
  const int64_t tp = shard_.tp, N = B * T, Nr = LocalResidualRows(B, T);
  const int64_t C = spec_.n_embd, Cl = C / tp, Fl = fc_out_width_;
  const cpu::AttentionHeads heads = HeadsOf(spec_, tp, kv_heads_local_, q_head0_);
  const LayerOffsets& o = layer_off_[l];
  float* partial = scratch_->partial;
  // Attention half: res2 = x + proj(attention(qkv(norm1(x)))); Llama turns
  // q and k (the first NH + NKV heads of each row) by their positions.
  NormForward(L.ln1, L.ln1_mean, L.ln1_rstd, x, P(o.ln1w), P(o.ln1b), Nr);
  ST_RETURN_IF_ERROR(
      tp_.ColumnLinearForward(L.qkv, L.ln1_full, L.ln1, P(o.qkvw), P(o.qkvb), N, C, qkv_width_));
  if (llama()) Rope(L.qkv, N, T, heads, false);
  ST_RETURN_IF_ERROR(AttentionForward(L, B, T, heads));
  ST_RETURN_IF_ERROR(tp_.RowLinearResidualForward(L.res2, x, L.atty, P(o.attprojw), P(o.attprojb),
                                                  partial, N, Cl, C));
  // MLP half: res3 = res2 + proj(act(fc(norm2(res2)))).
  NormForward(L.ln2, L.ln2_mean, L.ln2_rstd, L.res2, P(o.ln2w), P(o.ln2b), Nr);
  ST_RETURN_IF_ERROR(
      tp_.ColumnLinearForward(L.fch, L.ln2_full, L.ln2, P(o.fcw), P(o.fcb), N, C, fc_width_));
  if (llama()) {
    cpu::SwiGLUForward(L.fch_gelu, L.fch, N, Fl);
  } else {
    cpu::GeluForward(L.fch_gelu, L.fch, N * Fl);
  }
  return tp_.RowLinearResidualForward(L.res3, L.res2, L.fch_gelu, P(o.fcprojw), P(o.fcprojb),
                                      partial, N, Fl, C);
}

Status GPT::LayerBackward(int64_t l, LayerActs& L, const float* x, int64_t B, int64_t T) {
  const int64_t tp = shard_.tp, N = B * T, Nr = LocalResidualRows(B, T);
  const int64_t C = spec_.n_embd, Cl = C / tp, Fl = fc_out_width_;
  const cpu::AttentionHeads heads = HeadsOf(spec_, tp, kv_heads_local_, q_head0_);
  Scratch& S = *scratch_;
  const LayerOffsets& o = layer_off_[l];
  const float* dy = nullptr;
  // S.dres is the gradient of the residual stream; each residual add passes
  // it through unchanged, so one buffer serves all layers. Each op's input
  // gradient first, then its weight gradient (Weight: now, or kept for W).
  // MLP half.
  ST_RETURN_IF_ERROR(
      tp_.RowLinearBackwardInput(S.dfch_gelu, S.dres, S.dres_full, P(o.fcprojw), N, Fl, C, &dy));
  ST_RETURN_IF_ERROR(Weight({WeightOp::kRow, l, G(o.fcprojw), G(o.fcprojb), dy, L.fch_gelu,
                             nullptr, nullptr, nullptr, N, Fl, C},
                            N * C));
  Zero(S.dfch, N * fc_width_);
  if (llama()) {
    cpu::SwiGLUBackward(S.dfch, L.fch, S.dfch_gelu, N, Fl);
  } else {
    cpu::GeluBackward(S.dfch, L.fch, S.dfch_gelu, N * Fl);
  }
  ST_RETURN_IF_ERROR(tp_.ColumnLinearBackwardInput(S.dln_shard, S.dln, S.dfch, P(o.fcw), N, C,
                                                   fc_width_));
  ST_RETURN_IF_ERROR(Weight({WeightOp::kColumn, l, G(o.fcw), G(o.fcb), S.dfch, L.ln2_full, nullptr,
                             nullptr, nullptr, N, C, fc_width_},
                            N * fc_width_));
  NormBackward(S.dres, nullptr, nullptr, S.dln_shard, L.res2, P(o.ln2w), L.ln2_mean, L.ln2_rstd, Nr);
  ST_RETURN_IF_ERROR(Weight({WeightOp::kNorm, l, G(o.ln2w), G(o.ln2b), S.dln_shard, L.res2,
                             L.ln2_mean, L.ln2_rstd, nullptr, Nr, C, C},
                            Nr * C));
  // Attention half. Under selective recompute the probabilities are not
  // kept: rebuild them from the kept q, k, v (the output goes to S.datty,
  // which the next call overwrites). The ring never keeps them.
  if (recompute_ == ActivationRecompute::kSelective && !context_parallel()) {
    cpu::GqaAttentionForward(S.datty, L.att, L.qkv, B, T, heads);
  }
  ST_RETURN_IF_ERROR(
      tp_.RowLinearBackwardInput(S.datty, S.dres, S.dres_full, P(o.attprojw), N, Cl, C, &dy));
  ST_RETURN_IF_ERROR(Weight({WeightOp::kRow, l, G(o.attprojw), G(o.attprojb), dy, L.atty, nullptr,
                             nullptr, nullptr, N, Cl, C},
                            N * C));
  Zero(S.dqkv, N * qkv_width_);
  ST_RETURN_IF_ERROR(AttentionBackward(L, B, T, heads));
  // The gradients of the turned q, k turned back: those of the matmul's output.
  if (llama()) Rope(S.dqkv, N, T, heads, true);
  ST_RETURN_IF_ERROR(tp_.ColumnLinearBackwardInput(S.dln_shard, S.dln, S.dqkv, P(o.qkvw), N, C,
                                                   qkv_width_));
  ST_RETURN_IF_ERROR(Weight({kv_replicated_ ? WeightOp::kQkvReplicated : WeightOp::kColumn, l,
                             G(o.qkvw), kv_replicated_ ? nullptr : G(o.qkvb), S.dqkv, L.ln1_full,
                             nullptr, nullptr, nullptr, N, C, qkv_width_},
                            N * qkv_width_));
  NormBackward(S.dres, nullptr, nullptr, S.dln_shard, x, P(o.ln1w), L.ln1_mean, L.ln1_rstd, Nr);
  ST_RETURN_IF_ERROR(Weight({WeightOp::kNorm, l, G(o.ln1w), G(o.ln1b), S.dln_shard, x, L.ln1_mean,
                             L.ln1_rstd, nullptr, Nr, C, C},
                            Nr * C));
  return Weight({WeightOp::kReduceReplicated, l}, 0);
}

Status GPT::Weight(WeightOp op, int64_t dy_floats) {
  SlotActs* s = deferring_;
  if (s == nullptr) return RunWeightOp(op);
  if (dy_floats > 0) {
    const size_t n = Rounded(dy_floats);
    if (s->stash_used + n > s->stash_floats) {
      return Internal("split backward: the weight-gradient stash is too small");
    }
    float* copy = s->stash + s->stash_used;
    std::memcpy(copy, op.dy, static_cast<size_t>(dy_floats) * sizeof(float));
    s->stash_used += n;
    op.dy = copy;
  }
  s->weight_ops.push_back(op);
  return Status::Ok();
}

Status GPT::RunWeightOp(const WeightOp& op) {
  ReplicatedGrads& rg = *replicated_grads_;
  switch (op.kind) {
    case WeightOp::kColumn:
      tp_.ColumnLinearBackwardWeights(op.dw, op.db, op.dy, op.x, op.rows, op.in, op.out);
      return Status::Ok();
    case WeightOp::kQkvReplicated: {
      // wk, wv follow wq's rows: keep their gradient aside, let the matmul
      // write this rank's part alone, sum that over TP and add it back.
      const int64_t q_rows = spec_.n_embd / shard_.tp, kv_numel = (op.out - q_rows) * op.in;
      float* g_kv = op.dw + q_rows * op.in;
      float* saved = scratch_->kv_saved;
      std::memcpy(saved, g_kv, static_cast<size_t>(kv_numel) * sizeof(float));
      Zero(g_kv, kv_numel);
      tp_.ColumnLinearBackwardWeights(op.dw, nullptr, op.dy, op.x, op.rows, op.in, op.out);
      ST_RETURN_IF_ERROR(tp_.comm()->Allreduce(g_kv, kv_numel));
      for (int64_t i = 0; i < kv_numel; ++i) g_kv[i] += saved[i];
      return Status::Ok();
    }
    case WeightOp::kRow:
      tp_.RowLinearBackwardWeights(op.dw, rg.Target(op.db), op.dy, op.x, op.rows, op.in, op.out);
      return Status::Ok();
    case WeightOp::kNorm:
      NormBackward(nullptr, rg.Target(op.dw), rg.Target(op.db), op.dy, op.x, nullptr, op.mean,
                   op.rstd, op.rows);
      return Status::Ok();
    case WeightOp::kEmbedding: {
      // With context parallelism the position table's gradient goes to
      // this rank's positions (op.in is its T_local).
      const bool at = context_parallel() && wpe_ >= 0;
      ST_RETURN_IF_ERROR(tp_.VocabEmbeddingBackward(G(wte_), at ? nullptr : G(wpe_), op.dy,
                                                    scratch_->dres_full, op.tokens, vocab_, op.rows,
                                                    op.in, spec_.n_embd));
      if (at) {
        // Under sp the call above gathered every row into dres_full.
        cpu::PositionBackwardAt(G(wpe_), tp_.sp() ? scratch_->dres_full : op.dy,
                                PositionsOf(op.in).data(), 0, op.rows * op.in, op.in, spec_.n_embd);
      }
      return Status::Ok();
    }
    case WeightOp::kReduceReplicated:
      return rg.Reduce();
    case WeightOp::kLayerDone:
      break;
  }
  return Status::Ok();
}

// With context parallelism the position table is read at this rank's
// positions, after the token lookup (whose sum it then joins the same way).
Status GPT::EmbeddingForward(SlotActs& s, int64_t B, int64_t T) {
  const bool at = context_parallel() && wpe_ >= 0;
  ST_RETURN_IF_ERROR(tp_.VocabEmbeddingForward(s.input, scratch_->partial, s.tokens.data(), P(wte_),
                                               at ? nullptr : P(wpe_), vocab_, B, T, spec_.n_embd));
  if (at) {
    const int64_t N = B * T;
    cpu::PositionForwardAt(s.input, P(wpe_), PositionsOf(T).data(), tp_.FirstResidualRow(N),
                           tp_.ResidualRows(N), T, spec_.n_embd);
  }
  return Status::Ok();
}

Status GPT::EmbeddingBackward(SlotActs& s, int64_t B, int64_t T) {
  // All of it is a weight gradient (the embedding has no input to pass one to).
  return Weight({WeightOp::kEmbedding, kEmbeddingLayer, nullptr, nullptr, scratch_->dres, nullptr,
                 nullptr, nullptr, s.tokens.data(), B, T, 0},
                LocalResidualRows(B, T) * spec_.n_embd);
}

Result<float> GPT::HeadForward(SlotActs& s, const float* x, int64_t B, int64_t T) {
  const int64_t C = spec_.n_embd, N = B * T, Nr = LocalResidualRows(B, T);
  NormForward(s.lnf, s.lnf_mean, s.lnf_rstd, x, P(lnfw_), P(lnfb_), Nr);
  // The head (the tied embedding or its own): logits of this rank's
  // vocabulary rows only.
  ST_RETURN_IF_ERROR(
      tp_.ColumnLinearForward(s.logits, s.lnf_full, s.lnf, P(head_w_), nullptr, N, C, vocab_.rows));
  if (s.targets.empty()) return 0.0f;
  ST_RETURN_IF_ERROR(tp_.VocabCrossEntropyForward(s.losses, s.probs, s.ce_stats, s.logits,
                                                  s.targets.data(), N, spec_.vocab_size, vocab_));
  double sum = 0.0;
  for (int64_t i = 0; i < N; ++i) sum += s.losses[i];
  return static_cast<float>(sum / static_cast<double>(N));
}

Status GPT::HeadBackward(SlotActs& s, const float* x, float loss_scale, int64_t B, int64_t T) {
  const int64_t C = spec_.n_embd, N = B * T, Nr = LocalResidualRows(B, T);
  Scratch& S = *scratch_;
  float* dlogits = s.probs;  // in place
  tp_.VocabCrossEntropyBackward(dlogits, s.probs, s.targets.data(),
                                loss_scale / static_cast<float>(N), N, spec_.vocab_size, vocab_);
  ST_RETURN_IF_ERROR(tp_.ColumnLinearBackwardInput(S.dln_shard, S.dln, dlogits, P(head_w_), N, C,
                                                   vocab_.rows));
  // dlogits stays in the slot until its W: no copy.
  ST_RETURN_IF_ERROR(Weight({WeightOp::kColumn, HeadLayer(spec_.n_layer), G(head_w_), nullptr,
                             dlogits, s.lnf_full, nullptr, nullptr, nullptr, N, C, vocab_.rows},
                            0));
  Zero(S.dres, Nr * C);
  NormBackward(S.dres, nullptr, nullptr, S.dln_shard, x, P(lnfw_), s.lnf_mean, s.lnf_rstd, Nr);
  ST_RETURN_IF_ERROR(Weight({WeightOp::kNorm, HeadLayer(spec_.n_layer), G(lnfw_), G(lnfb_),
                             S.dln_shard, x, s.lnf_mean, s.lnf_rstd, nullptr, Nr, C, C},
                            Nr * C));
  return Weight({WeightOp::kReduceReplicated, HeadLayer(spec_.n_layer)}, 0);
}

Status GPT::CheckChunkCall(int64_t chunk, int64_t slot, int64_t B, int64_t T) const {
  if (chunk < 0 || chunk >= num_chunks() || slot < 0 || slot >= num_slots(chunk)) {
    return InvalidArgument("no chunk " + std::to_string(chunk) + " slot " + std::to_string(slot) +
                           " on this rank");
  }
  if (B <= 0 || B > max_batch_ || T <= 0 || T > spec_.block_size) {
    return InvalidArgument("batch " + std::to_string(B) + " x " + std::to_string(T) +
                           " exceeds the model's " + std::to_string(max_batch_) + " x " +
                           std::to_string(spec_.block_size));
  }
  if (context_parallel() && T % (2 * cp_.size()) != 0) {
    return InvalidArgument("context parallelism needs T = " + std::to_string(T) +
                           " divisible by 2 x cp = " + std::to_string(2 * cp_.size()));
  }
  if (tp_.sp() && (B * T / cp_.size()) % shard_.tp != 0) {
    return InvalidArgument("sequence parallelism needs B x T / cp divisible by tp");
  }
  return Status::Ok();
}

Status GPT::ForwardChunkInput(const Chunk& ch, SlotActs& s, const int32_t* tokens,
                              const float* input,
                              const std::function<void(int64_t)>& on_layer_done) {
  if (!ch.embedding) {
    std::memcpy(s.input, input,
                static_cast<size_t>(LocalResidualRows(s.B, s.T) * spec_.n_embd) * sizeof(float));
    return Status::Ok();
  }
  s.tokens.assign(tokens, tokens + s.B * s.T);  // this rank's positions (ForwardChunk)
  ST_RETURN_IF_ERROR(Use(kEmbeddingLayer, false));
  ST_RETURN_IF_ERROR(EmbeddingForward(s, s.B, s.T));
  Notify(on_layer_done, kEmbeddingLayer);
  return Status::Ok();
}

Result<float> GPT::ForwardChunk(int64_t chunk, int64_t slot, const int32_t* tokens,
                                const int32_t* targets, const float* input, int64_t B, int64_t T,
                                const std::function<void(int64_t)>& on_layer_done) {
  ST_RETURN_IF_ERROR(CheckChunkCall(chunk, slot, B, T));
  Chunk& ch = chunks_[chunk];
  SlotActs& s = ch.slots[slot];
  // From here T counts this rank's positions of each sequence.
  std::vector<int32_t> local_tokens, local_targets;
  if (context_parallel()) {
    const int64_t Tl = cp_.LocalRows(T);
    local_tokens.resize(static_cast<size_t>(B * Tl));
    local_targets.resize(local_tokens.size());
    if (tokens != nullptr) cp_.LocalTokens(tokens, local_tokens.data(), B, T);
    if (targets != nullptr) cp_.LocalTokens(targets, local_targets.data(), B, T);
    tokens = tokens != nullptr ? local_tokens.data() : nullptr;
    targets = targets != nullptr ? local_targets.data() : nullptr;
    T = Tl;
  }
  s.B = B;
  s.T = T;
  ST_RETURN_IF_ERROR(ForwardChunkInput(ch, s, tokens, input, on_layer_done));
  if (ch.head && targets != nullptr) {
    s.targets.assign(targets, targets + B * T);
  } else {
    s.targets.clear();
  }
  const float* x = s.input;
  for (size_t i = 0; i < ch.layers.size(); ++i) {
    LayerActs L = ForwardActs(s, i);
    ST_RETURN_IF_ERROR(Use(ch.layers[i], false));
    ST_RETURN_IF_ERROR(LayerForward(ch.layers[i], L, x, B, T));
    x = s.layers[i].res3;
    Notify(on_layer_done, ch.layers[i]);
  }
  float loss = 0.0f;
  if (ch.head) {
    ST_RETURN_IF_ERROR(Use(HeadLayer(spec_.n_layer), false));
    ST_ASSIGN_OR_RETURN(loss, HeadForward(s, x, B, T));
    Notify(on_layer_done, HeadLayer(spec_.n_layer));
  }
  ST_RETURN_IF_ERROR(Unuse());
  return loss;
}

GPT::LayerActs GPT::ForwardActs(SlotActs& s, size_t i) {
  if (recompute_ != ActivationRecompute::kFull) return s.layers[i];
  LayerActs L = *work_;
  L.res3 = s.layers[i].res3;
  return L;
}

const float* GPT::ChunkOutput(int64_t chunk, int64_t slot) const {
  const SlotActs& s = chunks_[chunk].slots[slot];
  return s.layers.empty() ? s.input : s.layers.back().res3;
}

Status GPT::BackwardChunk(int64_t chunk, int64_t slot, const float* dout, float loss_scale,
                          const std::function<void(int64_t)>& on_grads_ready) {
  return ChunkBackward(chunk, slot, dout, loss_scale, on_grads_ready, false);
}

Status GPT::BackwardChunkInput(int64_t chunk, int64_t slot, const float* dout, float loss_scale) {
  if (!split_backward_) {
    return FailedPrecondition("a split backward needs a model created with split_backward");
  }
  return ChunkBackward(chunk, slot, dout, loss_scale, nullptr, true);
}

Status GPT::BackwardChunkWeights(int64_t chunk, int64_t slot,
                                 const std::function<void(int64_t)>& on_grads_ready) {
  if (chunk < 0 || chunk >= num_chunks() || slot < 0 || slot >= num_slots(chunk)) {
    return InvalidArgument("no chunk " + std::to_string(chunk) + " slot " + std::to_string(slot) +
                           " on this rank");
  }
  SlotActs& s = chunks_[chunk].slots[slot];
  if (!s.weights_pending) {
    return FailedPrecondition("a weight-gradient pass needs its input-gradient pass first");
  }
  for (const WeightOp& op : s.weight_ops) {
    if (op.kind == WeightOp::kLayerDone) {
      Notify(on_grads_ready, op.layer);
    } else {
      ST_RETURN_IF_ERROR(RunWeightOp(op));
    }
  }
  s.weight_ops.clear();
  s.stash_used = 0;
  s.weights_pending = false;
  return Status::Ok();
}

Status GPT::LayerDone(int64_t layer, const std::function<void(int64_t)>& on_grads_ready) {
  if (deferring_ != nullptr) return Weight({WeightOp::kLayerDone, layer}, 0);
  Notify(on_grads_ready, layer);
  return Status::Ok();
}

Status GPT::ChunkBackward(int64_t chunk, int64_t slot, const float* dout, float loss_scale,
                          const std::function<void(int64_t)>& on_grads_ready, bool defer) {
  Chunk& ch = chunks_[chunk];
  SlotActs& s = ch.slots[slot];
  const int64_t B = s.B, T = s.T;
  if (s.weights_pending) {
    return FailedPrecondition("a backward of a slot whose weight-gradient pass has not run");
  }
  // The deferring slot is cleared however this returns.
  struct Deferring {
    SlotActs*& target;
    ~Deferring() { target = nullptr; }
  } deferring{deferring_};
  if (defer) deferring_ = &s;
  s.weights_pending = defer;
  if (ch.head) {
    if (s.targets.empty()) {
      return FailedPrecondition("backward needs a forward with targets first");
    }
    ST_RETURN_IF_ERROR(Use(HeadLayer(spec_.n_layer), true));
    ST_RETURN_IF_ERROR(HeadBackward(s, ChunkOutput(chunk, slot), loss_scale, B, T));
    ST_RETURN_IF_ERROR(LayerDone(HeadLayer(spec_.n_layer), on_grads_ready));
  } else {
    std::memcpy(scratch_->dres, dout,
                static_cast<size_t>(LocalResidualRows(B, T) * spec_.n_embd) * sizeof(float));
  }
  for (size_t i = ch.layers.size(); i-- > 0;) {
    const float* x = i == 0 ? s.input : s.layers[i - 1].res3;
    LayerActs* L = &s.layers[i];
    ST_RETURN_IF_ERROR(Use(ch.layers[i], true));
    if (recompute_ == ActivationRecompute::kFull) {
      // The block's forward again, from its kept input, into the working
      // set (whose own res3 takes the output: the slot's may be in flight
      // to the next stage).
      L = work_.get();
      ST_RETURN_IF_ERROR(LayerForward(ch.layers[i], *L, x, B, T));
    }
    ST_RETURN_IF_ERROR(LayerBackward(ch.layers[i], *L, x, B, T));
    ST_RETURN_IF_ERROR(LayerDone(ch.layers[i], on_grads_ready));
  }
  if (ch.embedding) {  // (reads no parameters: nothing to acquire)
    ST_RETURN_IF_ERROR(EmbeddingBackward(s, B, T));
    ST_RETURN_IF_ERROR(LayerDone(kEmbeddingLayer, on_grads_ready));
  }
  return Unuse();
}

const float* GPT::InputGrad() const { return scratch_->dres; }

void GPT::SetParamSource(ParamSource* source) {
  source_ = source;
  if (source != nullptr) params_ = Buffer();
}

namespace {
void Fatal(const Status& st) {
  std::fprintf(stderr, "internal error: %s\n", st.message().c_str());
  std::abort();
}
}  // namespace

float GPT::Forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                   const std::function<void(int64_t)>& on_layer_done) {
  if (num_chunks() != 1 || !chunks_[0].embedding || !chunks_[0].head || shard_.tp != 1 ||
      context_parallel()) {
    Fatal(FailedPrecondition("GPT::Forward runs a whole single-rank model; use ForwardChunk"));
  }
  auto r = ForwardChunk(0, 0, tokens, targets, nullptr, B, T, on_layer_done);
  if (!r.ok()) Fatal(r.status());
  last_slot_T_ = T;
  return *r;
}

void GPT::Backward(float loss_scale, const std::function<void(int64_t)>& on_grads_ready) {
  Status st = BackwardChunk(0, 0, nullptr, loss_scale, on_grads_ready);
  if (!st.ok()) Fatal(st);
}

const float* GPT::logits(int64_t b, int64_t t) const {
  return chunks_[0].slots[0].logits + (b * last_slot_T_ + t) * spec_.padded_vocab_size;
}

}  // namespace scaletrain
