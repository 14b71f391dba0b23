#include "model/parallel_layers.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/ops.h"

namespace scaletrain {

namespace {

void Zero(float* x, int64_t n) { std::memset(x, 0, static_cast<size_t>(n) * sizeof(float)); }

// out = x + y + bias (the row-parallel output plus its bias, added once after
// the TP sum; bias optional). out may alias y.
void ResidualBiasAdd(float* out, const float* x, const float* y, const float* bias, int64_t rows,
                     int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    if (bias == nullptr) {
      for (int64_t c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] + y[i * C + c];
    } else {
      for (int64_t c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] + (y[i * C + c] + bias[c]);
    }
  }
}

// out[C] += column sums of x[rows, C].
void AddColumnSums(float* out, const float* x, int64_t rows, int64_t C) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < C; ++c) out[c] += x[i * C + c];
  }
}

}  // namespace

TensorParallel::TensorParallel(Communicator* comm, int64_t tp, int64_t rank, bool sp)
    : comm_(comm), tp_(tp), rank_(rank), sp_(sp && tp > 1) {}

VocabShard TensorParallel::VocabShardOf(int64_t vocab_size, int64_t padded_vocab_size) const {
  VocabShard v;
  v.rows = padded_vocab_size / tp_;
  v.begin = rank_ * v.rows;
  v.valid = std::clamp<int64_t>(vocab_size - v.begin, 0, v.rows);
  return v;
}

Status TensorParallel::GatherRows(const float* shard, float* full, int64_t N, int64_t width) {
  return comm_->Allgather(shard, full, N / tp_ * width);
}

Status TensorParallel::ReduceRows(float* partial, float* out, int64_t N, int64_t width) {
  if (tp_ == 1) {
    if (out != partial) std::memcpy(out, partial, static_cast<size_t>(N * width) * sizeof(float));
    return Status::Ok();
  }
  if (sp_) return comm_->ReduceScatter(partial, out, N / tp_ * width);
  ST_RETURN_IF_ERROR(comm_->Allreduce(partial, N * width));
  if (out != partial) std::memcpy(out, partial, static_cast<size_t>(N * width) * sizeof(float));
  return Status::Ok();
}

Status TensorParallel::ColumnLinearForward(float* y, float* x_full, const float* x, const float* w,
                                           const float* b, int64_t N, int64_t in,
                                           int64_t out_local) {
  if (sp_) ST_RETURN_IF_ERROR(GatherRows(x, x_full, N, in));
  cpu::MatmulForward(y, x_full, w, b, N, in, out_local);
  return Status::Ok();
}

Status TensorParallel::ColumnLinearBackward(float* dx, float* dx_full, float* dw, float* db,
                                            const float* dy, const float* x_full, const float* w,
                                            int64_t N, int64_t in, int64_t out_local) {
  ST_RETURN_IF_ERROR(ColumnLinearBackwardInput(dx, dx_full, dy, w, N, in, out_local));
  ColumnLinearBackwardWeights(dw, db, dy, x_full, N, in, out_local);
  return Status::Ok();
}

Status TensorParallel::ColumnLinearBackwardInput(float* dx, float* dx_full, const float* dy,
                                                 const float* w, int64_t N, int64_t in,
                                                 int64_t out_local) {
  Zero(dx_full, N * in);
  cpu::MatmulBackward(dx_full, nullptr, nullptr, dy, nullptr, w, N, in, out_local);
  if (tp_ == 1) return Status::Ok();
  return ReduceRows(dx_full, dx, N, in);
}

void TensorParallel::ColumnLinearBackwardWeights(float* dw, float* db, const float* dy,
                                                 const float* x_full, int64_t N, int64_t in,
                                                 int64_t out_local) const {
  cpu::MatmulBackward(nullptr, dw, db, dy, x_full, nullptr, N, in, out_local);
}

Status TensorParallel::RowLinearResidualForward(float* out, const float* residual, const float* x,
                                                const float* w, const float* b, float* partial,
                                                int64_t N, int64_t in_local, int64_t C) {
  if (tp_ == 1) {
    cpu::MatmulForward(partial, x, w, b, N, in_local, C);
    cpu::ResidualForward(out, residual, partial, N * C);
    return Status::Ok();
  }
  // Each rank's product is a partial sum over its in_local columns.
  cpu::MatmulForward(partial, x, w, nullptr, N, in_local, C);
  float* summed = sp_ ? out : partial;
  ST_RETURN_IF_ERROR(ReduceRows(partial, summed, N, C));
  ResidualBiasAdd(out, residual, summed, b, ResidualRows(N), C);
  return Status::Ok();
}

Status TensorParallel::RowLinearBackward(float* dx, float* dw, float* db, const float* dres,
                                         float* dres_full, const float* x, const float* w,
                                         int64_t N, int64_t in_local, int64_t C) {
  const float* dy = nullptr;
  ST_RETURN_IF_ERROR(RowLinearBackwardInput(dx, dres, dres_full, w, N, in_local, C, &dy));
  RowLinearBackwardWeights(dw, db, dy, x, N, in_local, C);
  return Status::Ok();
}

Status TensorParallel::RowLinearBackwardInput(float* dx, const float* dres, float* dres_full,
                                              const float* w, int64_t N, int64_t in_local,
                                              int64_t C, const float** dy_out) {
  const float* dy = dres;
  if (sp_) {
    ST_RETURN_IF_ERROR(GatherRows(dres, dres_full, N, C));
    dy = dres_full;
  }
  Zero(dx, N * in_local);
  cpu::MatmulBackward(dx, nullptr, nullptr, dy, nullptr, w, N, in_local, C);
  *dy_out = dy;
  return Status::Ok();
}

void TensorParallel::RowLinearBackwardWeights(float* dw, float* db, const float* dy,
                                              const float* x, int64_t N, int64_t in_local,
                                              int64_t C) const {
  // Under sp the bias gradient is this rank's rows' partial sum (dy holds
  // all rows, gathered in rank order): the caller sums it over TP.
  if (sp_ && db != nullptr) AddColumnSums(db, dy + FirstResidualRow(N) * C, ResidualRows(N), C);
  cpu::MatmulBackward(nullptr, dw, sp_ ? nullptr : db, dy, x, nullptr, N, in_local, C);
}

Status TensorParallel::VocabEmbeddingForward(float* out, float* partial, const int32_t* tokens,
                                             const float* wte_shard, const float* wpe,
                                             const VocabShard& vocab, int64_t B, int64_t T,
                                             int64_t C) {
  if (tp_ == 1) {
    cpu::EncoderForward(out, tokens, wte_shard, wpe, B, T, C);
    return Status::Ok();
  }
  const int64_t N = B * T;
  float* dst = sp_ ? partial : out;
  cpu::EmbeddingShardForward(dst, tokens, wte_shard, vocab.begin, vocab.rows, N, C);
  ST_RETURN_IF_ERROR(ReduceRows(dst, out, N, C));
  if (wpe != nullptr) cpu::PositionForward(out, wpe, FirstResidualRow(N), ResidualRows(N), T, C);
  return Status::Ok();
}

Status TensorParallel::VocabEmbeddingBackward(float* dwte_shard, float* dwpe, const float* dres,
                                              float* dres_full, const int32_t* tokens,
                                              const VocabShard& vocab, int64_t B, int64_t T,
                                              int64_t C) {
  if (tp_ == 1) {
    cpu::EncoderBackward(dwte_shard, dwpe, dres, tokens, B, T, C);
    return Status::Ok();
  }
  const int64_t N = B * T;
  const float* d = dres;
  if (sp_) {
    ST_RETURN_IF_ERROR(GatherRows(dres, dres_full, N, C));
    d = dres_full;
  }
  cpu::EmbeddingShardBackward(dwte_shard, d, tokens, vocab.begin, vocab.rows, N, C);
  if (dwpe != nullptr) cpu::PositionBackward(dwpe, d, 0, N, T, C);
  return Status::Ok();
}

Status TensorParallel::VocabCrossEntropyForward(float* losses, float* probs, float* stats,
                                                const float* logits, const int32_t* targets,
                                                int64_t N, int64_t vocab_size,
                                                const VocabShard& vocab) {
  if (tp_ == 1) {
    cpu::CrossEntropyForward(losses, probs, logits, targets, N, vocab_size, vocab.rows);
    return Status::Ok();
  }
  float* row_max = stats;
  float* sums = stats + N;  // the sum of exp, then the target's logit: one reduction
  cpu::CrossEntropyShardMax(row_max, logits, N, vocab.rows, vocab.valid);
  ST_RETURN_IF_ERROR(comm_->Allreduce(row_max, N, ReduceOp::kMax));
  cpu::CrossEntropyShardSums(sums, sums + N, logits, row_max, targets, vocab.begin, N, vocab.rows,
                             vocab.valid);
  ST_RETURN_IF_ERROR(comm_->Allreduce(sums, 2 * N));
  cpu::CrossEntropyShardFinish(losses, probs, logits, row_max, sums, sums + N, N, vocab.rows,
                               vocab.valid);
  return Status::Ok();
}

void TensorParallel::VocabCrossEntropyBackward(float* dlogits, const float* probs,
                                               const int32_t* targets, float dloss, int64_t N,
                                               int64_t vocab_size, const VocabShard& vocab) const {
  if (tp_ == 1) {
    cpu::CrossEntropyBackward(dlogits, probs, targets, dloss, N, vocab_size, vocab.rows);
  } else {
    cpu::CrossEntropyShardBackward(dlogits, probs, targets, vocab.begin, dloss, N, vocab.rows,
                                   vocab.valid);
  }
}

ReplicatedGrads::ReplicatedGrads(TensorParallel* tp, float* scratch, int64_t max_targets,
                                 int64_t width)
    : tp_(tp),
      scratch_(scratch),
      max_targets_(max_targets),
      width_(width),
      sums_(static_cast<size_t>(max_targets * width)) {
  grads_.reserve(static_cast<size_t>(max_targets));
  order_.reserve(static_cast<size_t>(max_targets));
}

float* ReplicatedGrads::Target(float* grad) {
  if (!tp_->sp() || grad == nullptr) return grad;
  const int64_t slot = static_cast<int64_t>(grads_.size());
  // A layer has a fixed set of these (6 in a GPT-2 block): more is a bug.
  if (slot >= max_targets_) std::abort();
  grads_.push_back(grad);
  float* row = scratch_ + slot * width_;
  Zero(row, width_);
  return row;
}

Status ReplicatedGrads::Reduce() {
  if (grads_.empty()) return Status::Ok();
  const int64_t n = static_cast<int64_t>(grads_.size());
  // Reduced in parameter order (the gradients' order in the flat buffer), not
  // in the order backward reached them: an all-reduce may sum an element in
  // an order set by its position in the message, and the result should not
  // depend on how the model's code is arranged.
  std::vector<int64_t>& order = order_;
  order.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return grads_[static_cast<size_t>(a)] < grads_[static_cast<size_t>(b)];
  });
  float* sums = sums_.data();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(sums + i * width_, scratch_ + order[static_cast<size_t>(i)] * width_,
                static_cast<size_t>(width_) * sizeof(float));
  }
  Status st = tp_->comm()->Allreduce(sums, n * width_);
  if (st.ok()) {
    for (int64_t i = 0; i < n; ++i) {
      const float* src = sums + i * width_;
      float* g = grads_[static_cast<size_t>(order[static_cast<size_t>(i)])];
      for (int64_t c = 0; c < width_; ++c) g[c] += src[c];
    }
  }
  grads_.clear();
  return st;
}

}  // namespace scaletrain
