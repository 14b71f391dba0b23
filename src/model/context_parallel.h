// Context parallelism (parallel.cp; Liu et al. 2023's ring attention with
// the load-balanced causal chunks of Megatron-Core / Transformer Engine):
// each sequence of T positions is cut into 2 cp chunks and rank r of the cp
// group holds chunks r and 2 cp - 1 - r (so every rank has the same share
// of the causal triangle's work). Everything but attention is per token and
// runs on the rank's T / cp rows unchanged; attention passes each rank's
// key/value block round the ring (cp - 1 transfers forward) while the
// queries meet the block in hand (kernels/cpu/ops.h RingAttention*). The
// backward passes the blocks again (cp - 1 transfers) and their dk, dv
// accumulators after them (cp transfers: the last brings each rank its own).
// It sits beside the model like TensorParallel: the model calls it.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "kernels/cpu/ops.h"
#include "model/spec.h"

namespace scaletrain {

// cp ranks cut a sequence of block_size positions into 2 cp chunks: the
// error (naming parallel.cp and model.block_size) where they do not.
Status CheckContextParallel(int64_t block_size, int64_t cp);
// Ulysses splits each rank's query and key/value heads (after tp) over the
// cp ranks: the error (naming parallel.cp_impl, parallel.cp, model.n_head
// or model.n_kv_head and parallel.tp) where they do not divide, or where
// tp > n_kv_head replicates the key/value heads.
Status CheckUlysses(const ModelSpec& spec, int64_t tp, int64_t cp);

class ContextParallel {
 public:
  // The ring's buffers (the model's activation arena): two key/value blocks
  // and two of their gradients, [B, T/cp, 2 NKV hs] each; row statistics
  // [B, NH, T/cp]; the kernels' scores (RingAttentionScratchFloats).
  struct Buffers {
    float* kv[2] = {nullptr, nullptr};
    float* dkv[2] = {nullptr, nullptr};
    float* stats = nullptr;
    float* scores = nullptr;
  };

  // comm: the cp group (null at cp = 1).
  ContextParallel(Communicator* comm, int64_t cp, int64_t rank) : comm_(comm), cp_(cp), rank_(rank) {}

  // Ulysses: a set of column segments of a row (q, k, v heads; or the
  // output's heads), each split evenly over the cp ranks.
  struct Columns {
    int64_t offset[3] = {0, 0, 0};
    int64_t width[3] = {0, 0, 0};
    int count = 1;
    int64_t total() const { return width[0] + width[1] + width[2]; }
  };
  // Sequence -> heads: src [B, T/cp, cols.total()] (this rank's positions)
  // becomes dst [B, T, cols.total() / cp] (every position in order, this
  // rank's share cp_rank of each segment). `send`, `recv`: B x T/cp x
  // cols.total() floats each. Collective over the cp group.
  Status ToHeads(float* dst, const float* src, int64_t B, int64_t T, const Columns& cols,
                 float* send, float* recv);
  // The inverse: src [B, T, cols.total() / cp] -> dst [B, T/cp, cols.total()].
  Status ToSequence(float* dst, const float* src, int64_t B, int64_t T, const Columns& cols,
                    float* send, float* recv);

  int64_t size() const { return cp_; }
  int64_t rank() const { return rank_; }
  // The rows a rank holds of a sequence of T positions.
  int64_t LocalRows(int64_t T) const { return T / cp_; }
  cpu::SeqChunks ChunksOf(int64_t r, int64_t T) const;
  // The position of each of this rank's T / cp rows.
  std::vector<int32_t> Positions(int64_t T) const;
  // This rank's rows of [B, T] tokens: local[B, T / cp].
  void LocalTokens(const int32_t* tokens, int32_t* local, int64_t B, int64_t T) const;

  // out[B, T/cp, NH hs] = causal attention of this rank's queries (the q part
  // of qkv [B, T/cp, (NH + 2 NKV) hs]) over the whole sequence; lse[B, NH,
  // T/cp] each row's log-sum-exp, kept for the backward. Collective over the
  // cp group.
  Status AttentionForward(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                          const cpu::AttentionHeads& heads, const Buffers& buf);
  // dqkv += the gradient of qkv from dout, given the forward's out and lse.
  // Collective over the cp group.
  Status AttentionBackward(float* dqkv, const float* dout, const float* out, const float* qkv,
                           const float* lse, int64_t B, int64_t T, const cpu::AttentionHeads& heads,
                           const Buffers& buf);

 private:
  // Posts the exchange of the block in `send` (to the next rank) for the
  // one in `recv` (from the previous).
  void Exchange(const float* send, float* recv, int64_t count, int tag, CommHandle* sent,
                CommHandle* received);

  // Sends block j of `send` to rank j and receives rank j's into block j of
  // `recv` (this rank's own block copied), blocks of `block` floats.
  Status AllToAll(const float* send, float* recv, int64_t block);

  Communicator* comm_;
  int64_t cp_, rank_;
};

}  // namespace scaletrain
