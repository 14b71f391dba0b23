#include "model/context_parallel.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/param_layout.h"

namespace scaletrain {

namespace {

// Messages of the ring: key/value blocks and their gradients.
constexpr int kKvTag = 1;
constexpr int kDkvTag = 2;
constexpr int kAllToAllTag = 3;

Status WaitBoth(CommHandle& a, CommHandle& b) {
  ST_RETURN_IF_ERROR(a.Wait());
  return b.Wait();
}

}  // namespace

Status CheckContextParallel(int64_t block_size, int64_t cp) {
  if (cp <= 1 || block_size % (2 * cp) == 0) return Status::Ok();
  std::string fits;
  for (int64_t c = 1; 2 * c <= block_size; ++c) {
    if (block_size % (2 * c) == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(c);
  }
  return InvalidArgument("parallel.cp = " + std::to_string(cp) + " cuts each sequence into 2 x cp = " +
                         std::to_string(2 * cp) + " chunks, which model.block_size = " +
                         std::to_string(block_size) + " does not divide; use parallel.cp in {" + fits +
                         "} or a model.block_size that 2 x cp divides");
}

Status CheckUlysses(const ModelSpec& spec, int64_t tp, int64_t cp) {
  if (cp <= 1) return Status::Ok();
  const std::string layout = " (parallel.cp_impl = \"ulysses\", parallel.cp = " + std::to_string(cp) +
                             ", parallel.tp = " + std::to_string(tp) + ")";
  if ((spec.n_head / tp) % cp != 0) {
    return InvalidArgument("Ulysses splits each rank's n_head / tp = " + std::to_string(spec.n_head / tp) +
                           " query heads over cp ranks" + layout +
                           "; use a cp dividing model.n_head / tp, or parallel.cp_impl = \"ring\"");
  }
  if (KvHeadsReplicated(spec, tp) || LocalKvHeads(spec, tp) % cp != 0) {
    return InvalidArgument("Ulysses splits each rank's key/value heads over cp ranks, and model.n_kv_head = " +
                           std::to_string(spec.n_kv_head) + " leaves " + std::to_string(LocalKvHeads(spec, tp)) +
                           (KvHeadsReplicated(spec, tp) ? " (replicated over tp)" : "") + layout +
                           "; use a cp dividing model.n_kv_head / tp, or parallel.cp_impl = \"ring\"");
  }
  return Status::Ok();
}

Status ContextParallel::AllToAll(const float* send, float* recv, int64_t block) {
  std::vector<CommHandle> handles;
  for (int64_t j = 0; j < cp_; ++j) {
    if (j == rank_) continue;
    handles.push_back(comm_->IRecv(recv + j * block, block, static_cast<int>(j), kAllToAllTag));
  }
  for (int64_t j = 0; j < cp_; ++j) {
    if (j == rank_) continue;
    handles.push_back(comm_->ISend(send + j * block, block, static_cast<int>(j), kAllToAllTag));
  }
  std::copy(send + rank_ * block, send + (rank_ + 1) * block, recv + rank_ * block);
  for (CommHandle& h : handles) ST_RETURN_IF_ERROR(h.Wait());
  return Status::Ok();
}

Status ContextParallel::ToHeads(float* dst, const float* src, int64_t B, int64_t T, const Columns& cols,
                                float* send, float* recv) {
  const int64_t Tl = LocalRows(T), W = cols.total(), w = W / cp_, block = B * Tl * w;
  // Block j: this rank's rows, segment pieces j.
  for (int64_t j = 0; j < cp_; ++j) {
    float* out = send + j * block;
    for (int64_t n = 0; n < B * Tl; ++n) {
      for (int s = 0; s < cols.count; ++s) {
        const int64_t piece = cols.width[s] / cp_;
        out = std::copy_n(src + n * W + cols.offset[s] + j * piece, piece, out);
      }
    }
  }
  ST_RETURN_IF_ERROR(AllToAll(send, recv, block));
  // Block i holds rank i's positions, in its chunks' order.
  for (int64_t i = 0; i < cp_; ++i) {
    const std::vector<int32_t> pos = ContextParallel(comm_, cp_, i).Positions(T);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < Tl; ++t) {
        std::copy_n(recv + i * block + (b * Tl + t) * w, w, dst + (b * T + pos[static_cast<size_t>(t)]) * w);
      }
    }
  }
  return Status::Ok();
}

Status ContextParallel::ToSequence(float* dst, const float* src, int64_t B, int64_t T,
                                   const Columns& cols, float* send, float* recv) {
  const int64_t Tl = LocalRows(T), W = cols.total(), w = W / cp_, block = B * Tl * w;
  // Block i: rank i's positions of this rank's heads.
  for (int64_t i = 0; i < cp_; ++i) {
    const std::vector<int32_t> pos = ContextParallel(comm_, cp_, i).Positions(T);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < Tl; ++t) {
        std::copy_n(src + (b * T + pos[static_cast<size_t>(t)]) * w, w, send + i * block + (b * Tl + t) * w);
      }
    }
  }
  ST_RETURN_IF_ERROR(AllToAll(send, recv, block));
  // Block j holds rank j's heads of this rank's rows: segment pieces j.
  for (int64_t j = 0; j < cp_; ++j) {
    const float* in = recv + j * block;
    for (int64_t n = 0; n < B * Tl; ++n) {
      for (int s = 0; s < cols.count; ++s) {
        const int64_t piece = cols.width[s] / cp_;
        std::copy_n(in, piece, dst + n * W + cols.offset[s] + j * piece);
        in += piece;
      }
    }
  }
  return Status::Ok();
}

cpu::SeqChunks ContextParallel::ChunksOf(int64_t r, int64_t T) const {
  cpu::SeqChunks c;
  c.ids[0] = r;
  c.ids[1] = 2 * cp_ - 1 - r;
  c.count = 2;
  c.len = T / (2 * cp_);
  return c;
}

std::vector<int32_t> ContextParallel::Positions(int64_t T) const {
  const cpu::SeqChunks c = ChunksOf(rank_, T);
  std::vector<int32_t> pos;
  for (int64_t i = 0; i < c.count; ++i) {
    for (int64_t t = 0; t < c.len; ++t) pos.push_back(static_cast<int32_t>(c.ids[i] * c.len + t));
  }
  return pos;
}

void ContextParallel::LocalTokens(const int32_t* tokens, int32_t* local, int64_t B, int64_t T) const {
  const std::vector<int32_t> pos = Positions(T);
  const int64_t Tl = LocalRows(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tl; ++t) local[b * Tl + t] = tokens[b * T + pos[static_cast<size_t>(t)]];
  }
}

void ContextParallel::Exchange(const float* send, float* recv, int64_t count, int tag,
                               CommHandle* sent, CommHandle* received) {
  const int next = static_cast<int>((rank_ + 1) % cp_), prev = static_cast<int>((rank_ + cp_ - 1) % cp_);
  *received = comm_->IRecv(recv, count, prev, tag);
  *sent = comm_->ISend(send, count, next, tag);
}

Status ContextParallel::AttentionForward(float* out, float* lse, const float* qkv, int64_t B,
                                         int64_t T, const cpu::AttentionHeads& H,
                                         const Buffers& buf) {
  const int64_t N = B * LocalRows(T), count = N * 2 * H.NKV * H.hs;
  const cpu::SeqChunks q = ChunksOf(rank_, T);
  cpu::PackKeyValues(buf.kv[0], qkv, N, H);
  cpu::RingAttentionBegin(out, lse, buf.stats, B, q, H);
  // Step s holds rank (rank - s)'s block; the next one travels meanwhile.
  for (int64_t s = 0; s < cp_; ++s) {
    float* cur = buf.kv[s % 2];
    CommHandle sent, received;
    if (s + 1 < cp_) Exchange(cur, buf.kv[(s + 1) % 2], count, kKvTag, &sent, &received);
    const int64_t src = (rank_ - s + cp_) % cp_;
    cpu::RingAttentionForwardBlock(out, lse, buf.stats, buf.scores, qkv, cur, B, q, ChunksOf(src, T), H);
    ST_RETURN_IF_ERROR(WaitBoth(sent, received));
  }
  cpu::RingAttentionEnd(out, lse, buf.stats, B, q, H);
  return Status::Ok();
}

Status ContextParallel::AttentionBackward(float* dqkv, const float* dout, const float* out,
                                          const float* qkv, const float* lse, int64_t B, int64_t T,
                                          const cpu::AttentionHeads& H, const Buffers& buf) {
  const int64_t N = B * LocalRows(T), count = N * 2 * H.NKV * H.hs;
  const cpu::SeqChunks q = ChunksOf(rank_, T);
  cpu::PackKeyValues(buf.kv[0], qkv, N, H);
  std::fill(buf.dkv[0], buf.dkv[0] + count, 0.0f);
  cpu::RingAttentionBackwardBegin(buf.stats, dout, out, B, q, H);
  // Step s holds rank (rank - s)'s block and the sum of its dk, dv so far;
  // both move on after it, the gradient last of all back to its owner.
  for (int64_t s = 0; s < cp_; ++s) {
    float* cur = buf.kv[s % 2];
    float* dcur = buf.dkv[s % 2];
    CommHandle sent, received;
    if (s + 1 < cp_) Exchange(cur, buf.kv[(s + 1) % 2], count, kKvTag, &sent, &received);
    const int64_t src = (rank_ - s + cp_) % cp_;
    cpu::RingAttentionBackwardBlock(dqkv, dcur, buf.scores, dout, qkv, cur, lse, buf.stats, B, q,
                                    ChunksOf(src, T), H);
    ST_RETURN_IF_ERROR(WaitBoth(sent, received));
    CommHandle dsent, dreceived;
    float* dnext = buf.dkv[(s + 1) % 2];
    Exchange(dcur, dnext, count, kDkvTag, &dsent, &dreceived);
    ST_RETURN_IF_ERROR(WaitBoth(dsent, dreceived));
    // The block arriving next starts from the gradient its earlier holders summed.
  }
  // After cp transfers this rank holds its own block's whole gradient.
  cpu::AddKeyValueGrads(dqkv, buf.dkv[cp_ % 2], N, H);
  return Status::Ok();
}

}  // namespace scaletrain
