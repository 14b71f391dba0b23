// The GPT-2 or Llama model on one rank: parameters, gradients and activations each in
// one flat buffer allocated at creation, a forward and a backward written out
// op by op (DESIGN principle 3), reading the parameter-layout table for every
// offset (principle 1).
//
// The same code runs every layout (DESIGN: a parallelism is applied to a
// model, not written into it): the linear layers, the embedding and the loss
// are the tensor-parallel layers of model/parallel_layers.h, which are the
// plain layers at tp = 1. A rank of a tp x pp layout (ModelShard) holds the
// layers of its pipeline chunks, each as its tensor-parallel shard:
//  - attention splits its heads over the TP group (q,k,v column-parallel,
//    output projection row-parallel), the MLP its hidden width (fc column,
//    proj row); one TP all-reduce forward and one backward per block half,
//    as in Megatron-LM (Shoeybi et al. 2019);
//  - the tied embedding is split by vocabulary rows: lookup and cross-
//    entropy are vocab-parallel, no rank ever holds all logits of a token;
//  - with sequence parallelism (Korthikanti et al. 2022) the residual
//    stream, the norms and the dropout-free element-wise ops hold 1/tp of the
//    B*T token rows (tp contiguous blocks of the [B*T, C] rows); each
//    all-reduce becomes an all-gather before the column-parallel matmul and
//    a reduce-scatter after the row-parallel one, and the gradients of the
//    norms and row-parallel biases (partial sums over a rank's rows) are
//    all-reduced over the TP group.
// Llama blocks (spec.arch kLlama) run the same code with RMSNorm for the
// norms, no biases, rotary embeddings applied to q and k after the fused
// q,k,v projection (wq, wk, wv are adjacent in the layout, so one column-
// parallel matmul makes [q | k | v]), grouped-query attention, and SwiGLU
// (w1 and w3 adjacent: one column-parallel matmul makes [gate | up], w2
// row-parallel); no position table; the head is the tied embedding or
// output.weight. With fewer key/value heads than tp ranks each rank holds
// wk and wv whole (KvHeadsReplicated) and their gradients are summed over
// the TP group after each block's backward.
// Pipeline parallelism drives chunks one micro-batch at a time through
// ForwardChunk/BackwardChunk; each chunk keeps activations for `slots`
// micro-batches in flight (the schedule's peak).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/status.h"
#include "model/context_parallel.h"
#include "model/parallel_layers.h"
#include "model/param_layout.h"
#include "model/spec.h"

namespace scaletrain {

// What the backward pass recomputes instead of keeping (training.recompute;
// Korthikanti et al. 2022):
//  - kNone: every activation a block's backward reads is kept, per layer and
//    micro-batch in flight;
//  - kSelective: the attention probabilities (B x heads x T x T per layer,
//    the only s x s tensor) are not kept: the forward writes them into one
//    buffer shared by all layers and slots, and the backward recomputes them
//    from the kept q, k, v just before the attention backward;
//  - kFull: only each block's input is kept (per layer and micro-batch in
//    flight; the chunk's input and every block's output residual); the
//    forward and, before each block's backward, its recomputation run in one
//    block's working set shared by all blocks and slots. The recomputed
//    forward repeats the block's TP collectives.
// The ops and their order are the same in every mode, so losses and
// gradients are bitwise those of kNone. The head (final norm, logits,
// softmax) is kept in every mode.
enum class ActivationRecompute { kNone, kSelective, kFull };
const char* ActivationRecomputeName(ActivationRecompute r);

// Where the model reads its parameters when it does not hold them itself
// (ZeRO-3, parallel/zero3.h): before each layer's forward or backward the
// model calls Acquire(layer, backward); the layer's parameters are then
// readable through At(flat offset) until the next Acquire. After a chunk's
// forward or backward, Release(): what was gathered may go.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual Status Acquire(int64_t layer, bool backward) = 0;
  virtual Status Release() = 0;
  virtual const float* At(int64_t offset) const = 0;
};

class GPT {
 public:
  // The whole model on one rank. Allocates parameters and gradients (zeroed)
  // and the activations for up to max_batch sequences of spec.block_size
  // tokens. The flat parameter and gradient buffers are padded to a multiple
  // of `flat_multiple` elements (data parallelism splits them evenly); the
  // padding stays zero.
  static Result<std::unique_ptr<GPT>> Create(
      const ModelSpec& spec, int64_t max_batch, int64_t flat_multiple = 1,
      ActivationRecompute recompute = ActivationRecompute::kNone);
  // One rank of a tp x pp (x cp) layout. `tp_comm` is the TP group (needed
  // when shard.tp > 1), `cp_comm` the context-parallel ring (shard.cp > 1).
  // `slots[c]`: micro-batches chunk c holds activations for at once (empty:
  // one each). spec.padded_vocab_size must divide by tp.
  // With shard.cp > 1 the callers still pass whole sequences of T tokens
  // (ForwardChunk); the rank keeps its T / cp positions (ContextParallel),
  // and the activations between chunks are its rows only (residual_rows).
  // `split_backward`: each slot also keeps what a deferred weight-gradient
  // pass reads (BackwardChunkInput / BackwardChunkWeights; not with full
  // recompute, whose block inputs live in a shared working set).
  static Result<std::unique_ptr<GPT>> CreateShard(const ModelSpec& spec, const ModelShard& shard,
                                                  Communicator* tp_comm, int64_t max_batch,
                                                  int64_t flat_multiple,
                                                  std::vector<int64_t> slots = {},
                                                  ActivationRecompute recompute =
                                                      ActivationRecompute::kNone,
                                                  Communicator* cp_comm = nullptr,
                                                  bool split_backward = false);
  ~GPT();

  const ModelSpec& spec() const { return spec_; }
  const ModelShard& shard() const { return shard_; }
  int64_t shard_head_stage() const { return HeadStage(shard_); }
  // This rank's parameters (BuildRankLayout).
  const ParamLayout& layout() const { return layout_; }
  int64_t num_params() const { return layout_.total_numel; }
  int64_t flat_numel() const { return flat_numel_; }  // num_params() + padding
  float* params() { return params_.f32(); }
  const float* params() const { return params_.f32(); }
  float* grads() { return grads_.f32(); }
  const float* grads() const { return grads_.f32(); }
  // The activation buffer (every slot's kept activations, the shared working
  // set and the gradient scratch), sized for the recompute mode.
  size_t activation_bytes() const { return acts_.size_bytes(); }
  ActivationRecompute recompute() const { return recompute_; }

  // GPT-2 initialisation (as nanoGPT): N(0, 0.02) for weights and embeddings,
  // residual projections N(0, 0.02/sqrt(2 n_layer)), biases 0, norms 1; the
  // padding rows of the embedding are 0. Llama blocks the same way (wo and w2
  // are the residual projections; an untied output.weight is a weight, its
  // padding rows 0). Each tensor is drawn whole from a
  // stream of (seed, its index in the full layout) and this rank keeps its
  // shard, so every layout starts from the same model.
  void InitWeights(uint64_t seed);

  // ---- One chunk, one micro-batch (pipeline and tensor parallelism) -----
  int64_t num_chunks() const;
  bool chunk_has_embedding(int64_t c) const;
  bool chunk_has_head(int64_t c) const;
  // The layer ids chunk c runs (param_layout.h): its hooks report these.
  LayerRange ChunkLayers(int64_t c) const;
  int64_t num_slots(int64_t c) const;
  // Rows of the residual stream a rank holds for B sequences of T tokens:
  // B*T/cp, or B*T/cp/tp with sequence parallelism. Activations between
  // pipeline stages are [residual_rows, n_embd].
  int64_t residual_rows(int64_t B, int64_t T) const;

  // Forward of chunk c on a micro-batch kept in `slot`. The first chunk of
  // the model reads `tokens`; the others read `input` (the previous chunk's
  // output; copied). The chunk with the head needs `targets` for a loss
  // (null: logits only, loss 0) and returns the mean loss of the micro-batch.
  // `on_layer_done(layer)` as in Forward below. Collective errors (TP) are
  // returned.
  Result<float> ForwardChunk(int64_t chunk, int64_t slot, const int32_t* tokens,
                             const int32_t* targets, const float* input, int64_t B, int64_t T,
                             const std::function<void(int64_t)>& on_layer_done = nullptr);
  // The chunk's output residual of the micro-batch in `slot`.
  const float* ChunkOutput(int64_t chunk, int64_t slot) const;
  // Backward of chunk c for the micro-batch in `slot`, adding to grads().
  // The head chunk starts from loss_scale x its mean loss; the others from
  // `dout`, the gradient of their output. The gradient of the chunk's input
  // is then InputGrad() (until the next backward); the embedding chunk
  // instead finishes the embedding gradients. `on_grads_ready` as Backward.
  Status BackwardChunk(int64_t chunk, int64_t slot, const float* dout, float loss_scale,
                       const std::function<void(int64_t)>& on_grads_ready = nullptr);
  const float* InputGrad() const;
  // The same backward in two passes (zero-bubble pipelines, Qi et al. 2024;
  // a model created with split_backward). B: the gradient of the chunk's
  // input (InputGrad(), what the previous stage waits for); it writes no
  // parameter gradient, but keeps in the slot the output gradient of every
  // op with weights. W: from those, every weight and bias gradient of the
  // chunk (and the embedding's), calling `on_grads_ready` per layer as
  // BackwardChunk does; it reads no parameters (ZeRO-3 gathers nothing for
  // it). The slot's activations stay until its W. B then W adds bitwise what
  // BackwardChunk adds.
  Status BackwardChunkInput(int64_t chunk, int64_t slot, const float* dout, float loss_scale);
  Status BackwardChunkWeights(int64_t chunk, int64_t slot,
                              const std::function<void(int64_t)>& on_grads_ready = nullptr);
  bool split_backward() const { return split_backward_; }

  // ---- The whole model on this rank (pp = 1, one slot) --------------------
  // tokens, targets: [B, T] with B <= max_batch, T <= block_size. targets
  // may be null (inference). Returns the mean cross-entropy (0 if no
  // targets). Logits of the last call stay readable through logits().
  // `on_layer_done(layer)`, if given, is called after the embeddings
  // (kEmbeddingLayer), each block, and the final norm, head and loss
  // (HeadLayer): for traces.
  // Single-rank models only (no collectives that could fail).
  float Forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                const std::function<void(int64_t layer)>& on_layer_done = nullptr);
  // Back-propagates loss_scale x the mean loss of the last Forward (which
  // must have had targets) and ADDS to grads(): micro-batches accumulate.
  // `on_grads_ready(layer)`, if given, is called as soon as the gradients of
  // every parameter entry with that `layer` (see ParamEntry) are complete:
  // HeadLayer (final norm), then the blocks n_layer-1 ... 0, then
  // kEmbeddingLayer (whose tied weight also collects the head's gradient).
  // Data parallelism starts
  // reducing a gradient bucket from there while backward goes on.
  void Backward(float loss_scale, const std::function<void(int64_t layer)>& on_grads_ready = nullptr);
  void ZeroGrad() { grads_.Zero(); }

  // Reads the parameters from `source` from now on (null: params()) and,
  // with one, frees params(): it returns null after (ZeRO-3 keeps a shard).
  void SetParamSource(ParamSource* source);

  // Row (b, t) of the last forward's logits, padded_vocab_size wide
  // (single-rank models).
  const float* logits(int64_t b, int64_t t) const;

 private:
  struct LayerActs;
  struct SlotActs;
  struct WeightOp;
  struct Chunk;
  struct Scratch;
  struct LayerOffsets {
    int64_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  static LayerOffsets OffsetsOf(const ParamLayout& lay, const ModelSpec& spec, int64_t layer);
  bool llama() const { return spec_.arch == Arch::kLlama; }
  // The block's norms (LayerNorm or RMSNorm; mean unused by RMSNorm) and
  // MLP nonlinearity (GeLU, or SwiGLU over [gate | up]).
  void NormForward(float* out, float* mean, float* rstd, const float* x, const float* w,
                   const float* b, int64_t rows) const;
  void NormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                    const float* w, const float* mean, const float* rstd, int64_t rows) const;
  GPT(const ModelSpec& spec, const ModelShard& shard, Communicator* tp_comm, Communicator* cp_comm,
      int64_t max_batch, ActivationRecompute recompute);
  // Rows of the residual stream for B x T_local of this rank's positions.
  int64_t LocalResidualRows(int64_t B, int64_t T_local) const { return tp_.ResidualRows(B * T_local); }
  bool context_parallel() const { return cp_.size() > 1; }
  bool ulysses() const { return context_parallel() && shard_.ulysses; }
  // Ulysses: the heads a rank attends after the all-to-all, and the column
  // segments (q, k, v heads; the output's heads) it splits.
  cpu::AttentionHeads UlyssesHeads(const cpu::AttentionHeads& heads) const;
  ContextParallel::Columns QkvColumns(const cpu::AttentionHeads& heads) const;
  Status UlyssesForward(LayerActs& L, int64_t B, int64_t T, const cpu::AttentionHeads& heads);
  Status UlyssesBackward(const LayerActs& L, int64_t B, int64_t T, const cpu::AttentionHeads& heads);
  // The positions of this rank's T_local rows of a sequence.
  std::vector<int32_t> PositionsOf(int64_t T_local) const { return cp_.Positions(T_local * cp_.size()); }
  // The attention of a block, plain or over the context-parallel ring
  // (L.att then holds each row's log-sum-exp).
  Status AttentionForward(LayerActs& L, int64_t B, int64_t T, const cpu::AttentionHeads& heads);
  Status AttentionBackward(const LayerActs& L, int64_t B, int64_t T, const cpu::AttentionHeads& heads);
  // Rotary embeddings of q and k (Llama) at this rank's positions.
  void Rope(float* qkv, int64_t N, int64_t T, const cpu::AttentionHeads& heads, bool inverse) const;
  void TakeContextParallelBuffers(FloatArena& arena);
  // CreateShard's steps, in this order: the activation buffer is sized from
  // the widths and the chunks' slots.
  void LocateEmbeddingAndHead();
  void SetTensorParallelWidths();
  void AssignChunks(const std::vector<int64_t>& slots);
  void AllocateBuffers(int64_t flat_multiple);
  // Points every activation slice into `base` (null: a dry run); returns
  // the floats used.
  size_t LayOutActivations(float* base);
  // One block's full set of activations; the attention probabilities its
  // own or (shared_att) the scratch's shared buffer.
  void TakeLayerActs(FloatArena& arena, LayerActs& L, bool shared_att) const;
  void TakeScratch(FloatArena& arena);
  // The activations block i of slot s writes in the forward: its own set, or
  // (full recompute) the shared working set with the block's output residual
  // kept in the slot.
  LayerActs ForwardActs(SlotActs& s, size_t i);

  // ForwardChunk's arguments against this rank's chunks and the model's
  // batch; then the chunk's input: the embedding of the tokens, or a copy of
  // the previous chunk's output.
  Status CheckChunkCall(int64_t chunk, int64_t slot, int64_t B, int64_t T) const;
  Status ForwardChunkInput(const Chunk& ch, SlotActs& s, const int32_t* tokens, const float* input,
                           const std::function<void(int64_t)>& on_layer_done);
  Status LayerForward(int64_t layer, LayerActs& L, const float* x, int64_t B, int64_t T);
  Status LayerBackward(int64_t layer, LayerActs& L, const float* x, int64_t B, int64_t T);
  // The backward of a chunk; with `defer` its weight-gradient ops go to the
  // slot's list (Weight) instead of running.
  Status ChunkBackward(int64_t chunk, int64_t slot, const float* dout, float loss_scale,
                       const std::function<void(int64_t)>& on_grads_ready, bool defer);
  // A weight-gradient op: run now, or (during a deferred backward) kept
  // with a copy of its `dy_floats` output-gradient floats in the slot.
  Status Weight(WeightOp op, int64_t dy_floats);
  Status RunWeightOp(const WeightOp& op);
  Status LayerDone(int64_t layer, const std::function<void(int64_t)>& on_grads_ready);
  // Floats a slot of chunk c keeps for its deferred weight gradients.
  size_t WeightStashFloats(const Chunk& ch) const;
  Status EmbeddingForward(SlotActs& s, int64_t B, int64_t T);
  Status EmbeddingBackward(SlotActs& s, int64_t B, int64_t T);
  Result<float> HeadForward(SlotActs& s, const float* x, int64_t B, int64_t T);
  Status HeadBackward(SlotActs& s, const float* x, float loss_scale, int64_t B, int64_t T);
  // Offset -1 (a tensor the arch has not, e.g. Llama's biases): null.
  const float* P(int64_t offset) const {
    if (offset < 0) return nullptr;
    return source_ != nullptr ? source_->At(offset) : params_.f32() + offset;
  }
  Status Use(int64_t layer, bool backward) {
    return source_ != nullptr ? source_->Acquire(layer, backward) : Status::Ok();
  }
  Status Unuse() { return source_ != nullptr ? source_->Release() : Status::Ok(); }
  float* G(int64_t offset) { return offset < 0 ? nullptr : grads_.f32() + offset; }

  ModelSpec spec_;
  ModelShard shard_;
  TensorParallel tp_;
  ContextParallel cp_;
  ContextParallel::Buffers cp_buf_;
  ParamLayout layout_;
  int64_t max_batch_;
  int64_t flat_numel_ = 0;
  int64_t wte_ = -1, wpe_ = -1, lnfw_ = -1, lnfb_ = -1;
  int64_t head_w_ = -1;  // the logits' weight: wte_ when tied
  // Per rank: the fused q,k,v width, the MLP's first matmul width (ffn/tp,
  // or twice that for SwiGLU's [gate | up]) and its output width.
  int64_t qkv_width_ = 0, fc_width_ = 0, fc_out_width_ = 0;
  int64_t kv_heads_local_ = 0, q_head0_ = 0;  // grouped-query attention on this rank
  bool kv_replicated_ = false;
  VocabShard vocab_;                     // this rank's embedding rows
  std::vector<LayerOffsets> layer_off_;  // by global layer; only this rank's are set
  std::vector<Chunk> chunks_;
  std::unique_ptr<Scratch> scratch_;
  ActivationRecompute recompute_ = ActivationRecompute::kNone;
  bool split_backward_ = false;
  SlotActs* deferring_ = nullptr;  // the slot whose B is recording weight ops
  // Full recompute: the one block's working set (forward and recomputation).
  std::unique_ptr<LayerActs> work_;
  std::unique_ptr<ReplicatedGrads> replicated_grads_;
  Buffer params_, grads_, acts_;
  ParamSource* source_ = nullptr;
  // The single-rank API's last forward.
  int64_t last_slot_T_ = 0;
};

}  // namespace scaletrain
