// Causal multi-head self-attention. Threads take whole (batch, head) pairs;
// inside one, the products are per-head sgemm calls on strided views of qkv
// (the OpenMP build of OpenBLAS runs them single-threaded inside our parallel
// region). The T x T score matrix is processed in row blocks and only blocks
// on or below the diagonal are multiplied, which skips nearly half of the
// work that a full T x T product would do for a causal mask.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/softmax.h"

namespace scaletrain::cpu {

namespace {

// Rows per block of the score matrix. Smaller blocks skip more of the masked
// upper triangle but make more (and smaller) sgemm calls; 64 measured a few
// percent faster than 32 or 128 at T = 128 and 256 (hs = 32, 64).
constexpr int64_t kRowBlock = 64;

// Row lengths handed to the softmax loops are rounded up to this many
// floats (one AVX-512 vector), so that the vectorised loops run without a
// scalar remainder (measured 5-10% faster softmax at T = 128 and 256). The
// extra entries are masked ones, on the same row, inside the block the
// sgemm wrote.
constexpr int64_t kLanes = 16;

int64_t PaddedLength(int64_t valid, int64_t limit) {
  return std::min((valid + kLanes - 1) / kLanes * kLanes, limit);
}

// row[0..valid) = softmax(row[0..valid)); row[valid..T) = 0. row[valid..len)
// is scratch (future keys' scores), set to -inf so that it drops out of the
// max and the sum without a separate masked loop.
void CausalSoftmaxRow(float* row, int64_t valid, int64_t len, int64_t T) {
  std::fill(row + valid, row + len, -std::numeric_limits<float>::infinity());
  SoftmaxRow(row, row, len, T);
}

// One (batch, query head): rows of q, k, v and out with strides ld, ld, ld
// and ldo; a the head's T x T probabilities.
struct HeadView {
  const float *q, *k, *v;
  float* o;
  float* a;
  int64_t ld, ldo;
};

void ForwardHead(const HeadView& hv, int64_t T, int64_t hs, float scale) {
  const int64_t ld = hv.ld;
  for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, T - i0);
    const int64_t cols = i0 + rows;  // keys visible to the block's last row
    float* ablk = hv.a + i0 * T;
    Sgemm('N', 'T', static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(hs), scale,
          hv.q + i0 * ld, static_cast<int>(ld), hv.k, static_cast<int>(ld), 0.0f, ablk,
          static_cast<int>(T));
    for (int64_t t = i0; t < i0 + rows; ++t) {
      CausalSoftmaxRow(hv.a + t * T, t + 1, PaddedLength(t + 1, cols), T);
    }
    // Masked entries inside the block are now 0, so the product over the
    // block's full key range equals the causal one.
    Sgemm('N', 'N', static_cast<int>(rows), static_cast<int>(hs), static_cast<int>(cols), 1.0f,
          ablk, static_cast<int>(T), hv.v, static_cast<int>(ld), 0.0f, hv.o + i0 * hv.ldo,
          static_cast<int>(hv.ldo));
  }
}

// One (batch, query head) of the backward: dq += ..., dk/dv (the head's
// key/value head) += .... hv.o is dout here; da the T x T scratch.
void BackwardHead(const HeadView& hv, float* da, float* dq, float* dk, float* dv, int64_t T,
                  int64_t hs, float scale) {
  const int ild = static_cast<int>(hv.ld), iT = static_cast<int>(T),
            ildo = static_cast<int>(hv.ldo), ihs = static_cast<int>(hs);
  const float* dout_bh = hv.o;
  const float* a = hv.a;
  // Row blocks: dP = dout V^T, then dS = scale * P (dP - rowsum(P dP)),
  // written over dP, then dq += dS K.
  for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, T - i0);
    const int64_t cols = i0 + rows;
    float* dablk = da + i0 * T;
    Sgemm('N', 'T', static_cast<int>(rows), static_cast<int>(cols), ihs, 1.0f,
          dout_bh + i0 * hv.ldo, ildo, hv.v, ild, 0.0f, dablk, iT);
    for (int64_t t = i0; t < i0 + rows; ++t) {
      const float* p = a + t * T;
      float* d = da + t * T;
      // P is 0 above the diagonal, so running the loops past t (up to a
      // whole vector) adds nothing to the dot product and writes the
      // 0 that the block products below must read there.
      const int64_t len = PaddedLength(t + 1, cols);
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < len; ++j) dot += p[j] * d[j];
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) d[j] = scale * p[j] * (d[j] - dot);
      std::fill(d + len, d + cols, 0.0f);
    }
    Sgemm('N', 'N', static_cast<int>(rows), ihs, static_cast<int>(cols), 1.0f, dablk, iT, hv.k,
          ild, 1.0f, dq + i0 * hv.ld, ild);
  }
  // Column blocks: key/value block j0 is seen only by queries t >= j0, so
  // dv[j0..] += P[j0:, blk]^T dout[j0:] and dk[j0..] += dS[j0:, blk]^T q[j0:].
  // The upper-triangle entries these blocks touch are 0 in P (forward) and
  // dS (zeroed above).
  for (int64_t j0 = 0; j0 < T; j0 += kRowBlock) {
    const int64_t width = std::min(kRowBlock, T - j0);
    const int depth = static_cast<int>(T - j0);
    Sgemm('T', 'N', static_cast<int>(width), ihs, depth, 1.0f, a + j0 * T + j0, iT,
          dout_bh + j0 * hv.ldo, ildo, 1.0f, dv + j0 * hv.ld, ild);
    Sgemm('T', 'N', static_cast<int>(width), ihs, depth, 1.0f, da + j0 * T + j0, iT,
          hv.q + j0 * hv.ld, ild, 1.0f, dk + j0 * hv.ld, ild);
  }
}

// The pointers of (batch b, query head h) into qkv, out (or dout) and att.
HeadView ViewOf(const float* qkv, const float* out, const float* att, int64_t b, int64_t h,
                int64_t T, const AttentionHeads& H) {
  const int64_t C = H.NH * H.hs, kvc = H.NKV * H.hs, ld = C + 2 * kvc;
  const int64_t kv = (H.h0 + h) / H.group;
  HeadView hv;
  hv.ld = ld;
  hv.ldo = C;
  hv.q = qkv + b * T * ld + h * H.hs;
  hv.k = qkv + b * T * ld + C + kv * H.hs;
  hv.v = hv.k + kvc;
  hv.o = const_cast<float*>(out) + b * T * C + h * H.hs;
  hv.a = const_cast<float*>(att) + (b * H.NH + h) * T * T;
  return hv;
}

}  // namespace

void GqaAttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                         const AttentionHeads& heads) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(heads.hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < heads.NH; ++h) {
      ForwardHead(ViewOf(qkv, out, att, b, h, T, heads), T, heads.hs, scale);
    }
  }
}

void GqaAttentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int64_t B, int64_t T, const AttentionHeads& heads) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(heads.hs));
  // Threads take (batch, key/value head) pairs and run that head's query
  // heads in order: the heads sharing a key/value head add to the same dk,
  // dv.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t kv = 0; kv < heads.NKV; ++kv) {
      for (int64_t h = 0; h < heads.NH; ++h) {
        if ((heads.h0 + h) / heads.group != kv) continue;
        const HeadView hv = ViewOf(qkv, dout, att, b, h, T, heads);
        float* dq = dqkv + (hv.q - qkv);
        float* dk = dqkv + (hv.k - qkv);
        float* dv = dqkv + (hv.v - qkv);
        BackwardHead(hv, datt + (b * heads.NH + h) * T * T, dq, dk, dv, T, heads.hs, scale);
      }
    }
  }
}

void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH) {
  GqaAttentionForward(out, att, qkv, B, T, AttentionHeads{NH, NH, C / NH, 1, 0});
}

void AttentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  GqaAttentionBackward(dqkv, datt, dout, qkv, att, B, T, AttentionHeads{NH, NH, C / NH, 1, 0});
}

}  // namespace scaletrain::cpu
