// Tensor-parallel layers (Megatron-LM, Shoeybi et al. 2019) with sequence
// parallelism (Korthikanti et al. 2022), over one TP group. The model calls
// them the same way at every layout; at tp = 1 each is the plain layer and
// issues no collective. They live beside the model (model -> comm is the
// allowed direction) and hold no parameters: the model passes views of its
// flat buffers.
//
// Rows. A layer sees N = B x T token rows. The residual stream, the norms
// and the element-wise ops between the linear layers are "sequence-parallel
// regions": under sp each rank holds N / tp contiguous rows of them
// (ResidualRows), without sp all N. The linear layers' own inputs and
// outputs always have all N rows.
//
// Collectives per call (what TensorParallelStepCollectives in
// src/parallel/tp_pp_layout.h counts, byte for byte):
//   column-parallel linear   forward: all-gather of the input rows (sp)
//                            backward: all-reduce of the input gradient, or
//                            its reduce-scatter to this rank's rows (sp)
//   row-parallel linear      forward: all-reduce of the partial product, or
//                            its reduce-scatter (sp)
//                            backward: all-gather of the output gradient (sp)
//   vocab-parallel embedding forward: all-reduce (reduce-scatter under sp)
//                            backward: all-gather of the output gradient (sp)
//   vocab-parallel loss      forward: all-reduce max, then one all-reduce sum
//   replicated gradients     one all-reduce of the partial sums (sp only)
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace scaletrain {

// The rows of a [padded vocabulary, C] embedding one TP rank holds.
struct VocabShard {
  int64_t begin = 0;  // first vocabulary id held
  int64_t rows = 0;   // padded_vocab / tp
  int64_t valid = 0;  // how many of them are real ids (the rest padding, never scored)
};

class TensorParallel {
 public:
  // `comm`: the TP group, needed when tp > 1. Sequence parallelism only
  // means something at tp > 1.
  TensorParallel(Communicator* comm, int64_t tp, int64_t rank, bool sp);

  int64_t tp() const { return tp_; }
  int64_t rank() const { return rank_; }
  bool sp() const { return sp_; }
  // Rows of an N-row sequence-parallel region this rank holds, and the first
  // of them in the whole.
  int64_t ResidualRows(int64_t N) const { return sp_ ? N / tp_ : N; }
  int64_t FirstResidualRow(int64_t N) const { return sp_ ? rank_ * (N / tp_) : 0; }
  VocabShard VocabShardOf(int64_t vocab_size, int64_t padded_vocab_size) const;

  // Column-parallel linear: y[N, out_local] = X[N, in] @ w[out_local, in]^T
  // + b (b optional). `x` holds this rank's rows of X; under sp they are
  // all-gathered into `x_full` (N rows, kept for backward), otherwise
  // `x_full` must be `x`.
  Status ColumnLinearForward(float* y, float* x_full, const float* x, const float* w,
                             const float* b, int64_t N, int64_t in, int64_t out_local);
  // Writes dx (this rank's rows of dX) = the TP sum of dy @ w, through
  // `dx_full` (N x in scratch; may be dx without sp); adds to dw and db (db
  // optional). x_full as the forward left it.
  Status ColumnLinearBackward(float* dx, float* dx_full, float* dw, float* db, const float* dy,
                              const float* x_full, const float* w, int64_t N, int64_t in,
                              int64_t out_local);
  // Its two halves, for zero-bubble schedules (the input gradient now, the
  // weight gradient later from a kept dy): ColumnLinearBackward is the one
  // then the other, bit for bit.
  Status ColumnLinearBackwardInput(float* dx, float* dx_full, const float* dy, const float* w,
                                   int64_t N, int64_t in, int64_t out_local);
  void ColumnLinearBackwardWeights(float* dw, float* db, const float* dy, const float* x_full,
                                   int64_t N, int64_t in, int64_t out_local) const;

  // Row-parallel linear into the residual stream: out = residual + (the TP
  // sum of x[N, in_local] @ w[out, in_local]^T) + b, on this rank's residual
  // rows. The bias is added once, after the sum. `partial`: N x out scratch.
  Status RowLinearResidualForward(float* out, const float* residual, const float* x, const float* w,
                                  const float* b, float* partial, int64_t N, int64_t in_local,
                                  int64_t out_dim);
  // From the residual gradient `dres` (this rank's rows; all-gathered into
  // `dres_full` under sp, N x out scratch): writes dx[N, in_local], adds to
  // dw, and adds the bias gradient to `db` (under sp a partial sum over this
  // rank's rows: pass a ReplicatedGrads::Target).
  Status RowLinearBackward(float* dx, float* dw, float* db, const float* dres, float* dres_full,
                           const float* x, const float* w, int64_t N, int64_t in_local,
                           int64_t out_dim);
  // Its two halves. The input half leaves the output gradient in `dy_out`
  // (dres_full under sp, else dres): the weight half reads it (or a copy).
  Status RowLinearBackwardInput(float* dx, const float* dres, float* dres_full, const float* w,
                                int64_t N, int64_t in_local, int64_t out_dim,
                                const float** dy_out);
  void RowLinearBackwardWeights(float* dw, float* db, const float* dy, const float* x, int64_t N,
                                int64_t in_local, int64_t out_dim) const;

  // Vocab-parallel token embedding plus positions: out (this rank's residual
  // rows) = wte[token] + wpe[position] (wpe null: no position table, as
  // Llama; dwpe null in backward likewise). Biases of the linear layers
  // may be null too (Llama has none). This rank looks up the tokens it
  // holds; the TP sum completes the lookup. `partial`: N x C scratch.
  Status VocabEmbeddingForward(float* out, float* partial, const int32_t* tokens,
                               const float* wte_shard, const float* wpe, const VocabShard& vocab,
                               int64_t B, int64_t T, int64_t C);
  // Adds the embedding gradients from the residual gradient `dres` (this
  // rank's rows; all-gathered into `dres_full` under sp). Every TP rank sees
  // all rows there, so the replicated position table gets the same whole
  // gradient on each.
  Status VocabEmbeddingBackward(float* dwte_shard, float* dwpe, const float* dres, float* dres_full,
                                const int32_t* tokens, const VocabShard& vocab, int64_t B,
                                int64_t T, int64_t C);

  // Vocab-parallel softmax cross-entropy over logits[N, vocab.rows] of this
  // rank's vocabulary: no rank ever holds all logits of a token. Writes
  // losses[N] and this shard's probabilities; `stats`: 3 x N scratch.
  Status VocabCrossEntropyForward(float* losses, float* probs, float* stats, const float* logits,
                                  const int32_t* targets, int64_t N, int64_t vocab_size,
                                  const VocabShard& vocab);
  // dlogits = (probs - onehot(target)) x dloss on this shard (may alias probs).
  void VocabCrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                 float dloss, int64_t N, int64_t vocab_size,
                                 const VocabShard& vocab) const;

  // Sequence parallelism: this rank's N / tp rows <-> all N rows.
  Status GatherRows(const float* shard, float* full, int64_t N, int64_t width);
  // Sums the TP ranks' partial [N, width] into `out`: all-reduce (in place
  // when out == partial), or reduce-scatter to this rank's rows under sp.
  Status ReduceRows(float* partial, float* out, int64_t N, int64_t width);

  Communicator* comm() const { return comm_; }

 private:
  Communicator* comm_;
  int64_t tp_, rank_;
  bool sp_;
};

// Gradients of the parameters every TP rank holds whole inside a
// sequence-parallel region (the norms, the row-parallel biases). Under sp a
// rank sees only its rows, so its gradient is a partial sum: Target() hands
// out a zeroed scratch row for it, and Reduce() sums all of them over the TP
// group in one all-reduce and adds them to the gradients. Without sp,
// Target() is the gradient itself and Reduce() does nothing.
class ReplicatedGrads {
 public:
  // `scratch`: max_targets x width floats.
  ReplicatedGrads(TensorParallel* tp, float* scratch, int64_t max_targets, int64_t width);
  float* Target(float* grad);
  Status Reduce();

 private:
  TensorParallel* tp_;
  float* scratch_;
  int64_t max_targets_, width_;
  std::vector<float*> grads_;  // Target()'s gradients since the last Reduce, in slot order
  std::vector<int64_t> order_;
  std::vector<float> sums_;  // the partial sums in parameter order, for the all-reduce
};

}  // namespace scaletrain
