// Causal attention over one key/value block at a time, for context
// parallelism's ring (parallel.cp): a rank's queries meet each rank's keys
// and values in turn, and the softmax is merged across blocks with a running
// row maximum and sum (the online softmax of Milakov and Gimelshein 2018, as
// ring attention, Liu et al. 2023, uses it). The backward recomputes each
// block's probabilities from the kept log-sum-exp of every row, so no rank
// ever holds a row's probabilities over the whole sequence.
//
// Rows of queries and of key/value blocks are chunks of consecutive
// positions (SeqChunks); a pair of chunks is skipped when every key comes
// after every query, taken whole when every key comes before, and masked
// below the diagonal when the two are the same chunk. The products are sgemm
// calls on strided views, per (batch, head) as attention.cpp's.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

enum class PairKind { kSkip, kFull, kDiagonal };

PairKind KindOf(int64_t q_chunk, int64_t k_chunk) {
  if (k_chunk > q_chunk) return PairKind::kSkip;
  return k_chunk < q_chunk ? PairKind::kFull : PairKind::kDiagonal;
}

// Where (batch b, query head h) reads its queries and the block's keys and
// values, and writes its output.
struct BlockView {
  const float *q, *k, *v;
  int64_t ldq, ldkv;
};

BlockView ViewOf(const float* qkv, const float* kv, int64_t b, int64_t h, int64_t rows,
                 const AttentionHeads& H) {
  const int64_t C = H.NH * H.hs, kvc = H.NKV * H.hs;
  const int64_t kvh = (H.h0 + h) / H.group;
  BlockView v;
  v.ldq = C + 2 * kvc;
  v.ldkv = 2 * kvc;
  v.q = qkv + b * rows * v.ldq + h * H.hs;
  v.k = kv + b * rows * v.ldkv + kvh * H.hs;
  v.v = v.k + kvc;
  return v;
}

// One pair of chunks of the forward: s = scale q k^T (len x len), masked
// on the diagonal; the rows' running maximum and sum take it in, the output
// rows are rescaled to the new maximum and p v added.
void ForwardPair(float* o, int64_t ldo, float* row_max, float* row_sum, float* s, const float* q,
                 int64_t ldq, const float* k, const float* v, int64_t ldkv, int64_t len, int64_t hs,
                 float scale, PairKind kind) {
  Sgemm('N', 'T', len, len, hs, scale, q, ldq, k, ldkv, 0.0f, s, len);
  for (int64_t i = 0; i < len; ++i) {
    float* row = s + i * len;
    const int64_t valid = kind == PairKind::kDiagonal ? i + 1 : len;
    float mx = row_max[i];
    for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, row[j]);
    // The old terms shrink by exp(old max - new max); 0 when there were none.
    const float alpha = row_max[i] == kNegInf ? 0.0f : std::exp(row_max[i] - mx);
    float sum = 0.0f;
    for (int64_t j = 0; j < valid; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    std::fill(row + valid, row + len, 0.0f);
    row_sum[i] = row_sum[i] * alpha + sum;
    row_max[i] = mx;
    float* orow = o + i * ldo;
    for (int64_t c = 0; c < hs; ++c) orow[c] *= alpha;
  }
  Sgemm('N', 'N', len, hs, len, 1.0f, s, len, v, ldkv, 1.0f, o, ldo);
}

// One pair of chunks of the backward, for one query head: p from the kept
// log-sum-exp, then dv += p^T do, dp = do v^T, ds = scale p (dp - D),
// dq += ds k, dk += ds^T q. `p` and `ds` are len x len scratch.
struct PairGrads {
  float *dq, *dk, *dv;
  int64_t ldq, ldkv;
};

void BackwardPair(const PairGrads& g, float* p, float* ds, const float* q, const float* k,
                  const float* v, int64_t ldq, int64_t ldkv, const float* dout, int64_t ldo,
                  const float* lse, const float* dsum, int64_t len, int64_t hs, float scale,
                  PairKind kind) {
  Sgemm('N', 'T', len, len, hs, scale, q, ldq, k, ldkv, 0.0f, p, len);
  for (int64_t i = 0; i < len; ++i) {
    float* row = p + i * len;
    const int64_t valid = kind == PairKind::kDiagonal ? i + 1 : len;
    for (int64_t j = 0; j < valid; ++j) row[j] = std::exp(row[j] - lse[i]);
    std::fill(row + valid, row + len, 0.0f);
  }
  Sgemm('T', 'N', len, hs, len, 1.0f, p, len, dout, ldo, 1.0f, g.dv, g.ldkv);
  Sgemm('N', 'T', len, len, hs, 1.0f, dout, ldo, v, ldkv, 0.0f, ds, len);
  for (int64_t i = 0; i < len; ++i) {
    const float* prow = p + i * len;
    float* drow = ds + i * len;
    for (int64_t j = 0; j < len; ++j) drow[j] = scale * prow[j] * (drow[j] - dsum[i]);
  }
  Sgemm('N', 'N', len, hs, len, 1.0f, ds, len, k, ldkv, 1.0f, g.dq, g.ldq);
  Sgemm('T', 'N', len, hs, len, 1.0f, ds, len, q, ldq, 1.0f, g.dk, g.ldkv);
}

// Row statistics are [B, NH, rows]: row r of (b, h).
int64_t StatRow(int64_t b, int64_t h, int64_t rows, const AttentionHeads& H) {
  return (b * H.NH + h) * rows;
}

}  // namespace

void RingAttentionBegin(float* out, float* row_max, float* row_sum, int64_t B,
                        const SeqChunks& q, const AttentionHeads& H) {
  const int64_t rows = q.rows(), stats = B * H.NH * rows;
  std::fill(out, out + B * rows * H.NH * H.hs, 0.0f);
  std::fill(row_max, row_max + stats, kNegInf);
  std::fill(row_sum, row_sum + stats, 0.0f);
}

void RingAttentionForwardBlock(float* out, float* row_max, float* row_sum, float* scratch,
                               const float* qkv, const float* kv, int64_t B, const SeqChunks& q,
                               const SeqChunks& k, const AttentionHeads& H) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(H.hs));
  const int64_t rows = q.rows(), len = q.len, ldo = H.NH * H.hs;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H.NH; ++h) {
      const BlockView bv = ViewOf(qkv, kv, b, h, rows, H);
      float* s = scratch + (b * H.NH + h) * len * len;
      const int64_t stat = StatRow(b, h, rows, H);
      for (int64_t qi = 0; qi < q.count; ++qi) {
        for (int64_t kj = 0; kj < k.count; ++kj) {
          const PairKind kind = KindOf(q.ids[qi], k.ids[kj]);
          if (kind == PairKind::kSkip) continue;
          ForwardPair(out + (b * rows + qi * len) * ldo + h * H.hs, ldo, row_max + stat + qi * len,
                      row_sum + stat + qi * len, s, bv.q + qi * len * bv.ldq, bv.ldq,
                      bv.k + kj * len * bv.ldkv, bv.v + kj * len * bv.ldkv, bv.ldkv, len, H.hs,
                      scale, kind);
        }
      }
    }
  }
}

void RingAttentionEnd(float* out, float* lse, const float* row_sum, int64_t B, const SeqChunks& q,
                      const AttentionHeads& H) {
  const int64_t rows = q.rows(), ldo = H.NH * H.hs;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H.NH; ++h) {
      const int64_t stat = StatRow(b, h, rows, H);
      for (int64_t r = 0; r < rows; ++r) {
        const float l = row_sum[stat + r];
        float* orow = out + (b * rows + r) * ldo + h * H.hs;
        for (int64_t c = 0; c < H.hs; ++c) orow[c] /= l;
        lse[stat + r] += std::log(l);  // lse held the row maximum
      }
    }
  }
}

void RingAttentionBackwardBegin(float* dsum, const float* dout, const float* out, int64_t B,
                                const SeqChunks& q, const AttentionHeads& H) {
  const int64_t rows = q.rows(), ldo = H.NH * H.hs;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H.NH; ++h) {
      const int64_t stat = StatRow(b, h, rows, H);
      for (int64_t r = 0; r < rows; ++r) {
        const float* o = out + (b * rows + r) * ldo + h * H.hs;
        const float* d = dout + (b * rows + r) * ldo + h * H.hs;
        float dot = 0.0f;
        for (int64_t c = 0; c < H.hs; ++c) dot += o[c] * d[c];
        dsum[stat + r] = dot;
      }
    }
  }
}

void RingAttentionBackwardBlock(float* dqkv, float* dkv, float* scratch, const float* dout,
                                const float* qkv, const float* kv, const float* lse,
                                const float* dsum, int64_t B, const SeqChunks& q,
                                const SeqChunks& k, const AttentionHeads& H) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(H.hs));
  const int64_t rows = q.rows(), len = q.len, ldo = H.NH * H.hs;
  // Threads take (batch, key/value head) pairs: the query heads sharing a
  // key/value head add to the same dk, dv.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t kvh = 0; kvh < H.NKV; ++kvh) {
      float* p = scratch + (b * H.NKV + kvh) * 2 * len * len;
      float* ds = p + len * len;
      for (int64_t h = 0; h < H.NH; ++h) {
        if ((H.h0 + h) / H.group != kvh) continue;
        const BlockView bv = ViewOf(qkv, kv, b, h, rows, H);
        const int64_t stat = StatRow(b, h, rows, H);
        for (int64_t qi = 0; qi < q.count; ++qi) {
          for (int64_t kj = 0; kj < k.count; ++kj) {
            const PairKind kind = KindOf(q.ids[qi], k.ids[kj]);
            if (kind == PairKind::kSkip) continue;
            PairGrads g;
            g.ldq = bv.ldq;
            g.ldkv = bv.ldkv;
            g.dq = dqkv + (bv.q - qkv) + qi * len * bv.ldq;
            g.dk = dkv + (bv.k - kv) + kj * len * bv.ldkv;
            g.dv = dkv + (bv.v - kv) + kj * len * bv.ldkv;
            BackwardPair(g, p, ds, bv.q + qi * len * bv.ldq, bv.k + kj * len * bv.ldkv,
                         bv.v + kj * len * bv.ldkv, bv.ldq, bv.ldkv,
                         dout + (b * rows + qi * len) * ldo + h * H.hs, ldo,
                         lse + stat + qi * len, dsum + stat + qi * len, len, H.hs, scale, kind);
          }
        }
      }
    }
  }
}

void PackKeyValues(float* kv, const float* qkv, int64_t N, const AttentionHeads& H) {
  const int64_t C = H.NH * H.hs, kvw = 2 * H.NKV * H.hs, ld = C + kvw;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) std::copy(qkv + n * ld + C, qkv + (n + 1) * ld, kv + n * kvw);
}

void AddKeyValueGrads(float* dqkv, const float* dkv, int64_t N, const AttentionHeads& H) {
  const int64_t C = H.NH * H.hs, kvw = 2 * H.NKV * H.hs, ld = C + kvw;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* d = dqkv + n * ld + C;
    const float* g = dkv + n * kvw;
    for (int64_t c = 0; c < kvw; ++c) d[c] += g[c];
  }
}

int64_t RingAttentionScratchFloats(int64_t B, const SeqChunks& q, const AttentionHeads& H) {
  // Forward: one len x len block per (batch, query head); backward: two per
  // (batch, key/value head).
  return B * std::max(H.NH, 2 * H.NKV) * q.len * q.len;
}

}  // namespace scaletrain::cpu
