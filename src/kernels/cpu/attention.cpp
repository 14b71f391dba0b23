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
#include "kernels/cpu/vec_exp.h"

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
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < len; ++j) mx = std::max(mx, row[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < len; ++j) {
    const float e = VecExp(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) row[j] *= inv;
  std::fill(row + len, row + T, 0.0f);
}

}  // namespace

void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH) {
  const int64_t hs = C / NH;
  const int64_t ld3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* q = qkv + b * T * ld3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + (b * NH + h) * T * T;
      float* o = out + b * T * C + h * hs;
      for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, T - i0);
        const int64_t cols = i0 + rows;  // keys visible to the block's last row
        float* ablk = a + i0 * T;
        Sgemm('N', 'T', static_cast<int>(rows),
                    static_cast<int>(cols), static_cast<int>(hs), scale, q + i0 * ld3,
                    static_cast<int>(ld3), k, static_cast<int>(ld3), 0.0f, ablk,
                    static_cast<int>(T));
        for (int64_t t = i0; t < i0 + rows; ++t) {
          CausalSoftmaxRow(a + t * T, t + 1, PaddedLength(t + 1, cols), T);
        }
        // Masked entries inside the block are now 0, so the product over the
        // block's full key range equals the causal one.
        Sgemm('N', 'N', static_cast<int>(rows),
                    static_cast<int>(hs), static_cast<int>(cols), 1.0f, ablk, static_cast<int>(T),
                    v, static_cast<int>(ld3), 0.0f, o + i0 * C, static_cast<int>(C));
      }
    }
  }
}

void AttentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const int64_t ld3 = 3 * C;
  const int ild3 = static_cast<int>(ld3), iT = static_cast<int>(T), iC = static_cast<int>(C),
            ihs = static_cast<int>(hs);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* q = qkv + b * T * ld3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      const float* a = att + (b * NH + h) * T * T;
      float* da = datt + (b * NH + h) * T * T;
      const float* dout_bh = dout + b * T * C + h * hs;
      float* dq = dqkv + b * T * ld3 + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      // Row blocks: dP = dout V^T, then dS = scale * P (dP - rowsum(P dP)),
      // written over dP, then dq += dS K.
      for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, T - i0);
        const int64_t cols = i0 + rows;
        float* dablk = da + i0 * T;
        Sgemm('N', 'T', static_cast<int>(rows),
                    static_cast<int>(cols), ihs, 1.0f, dout_bh + i0 * C, iC, v, ild3, 0.0f, dablk,
                    iT);
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
        Sgemm('N', 'N', static_cast<int>(rows), ihs,
                    static_cast<int>(cols), 1.0f, dablk, iT, k, ild3, 1.0f, dq + i0 * ld3, ild3);
      }
      // Column blocks: key/value block j0 is seen only by queries t >= j0, so
      // dv[j0..] += P[j0:, blk]^T dout[j0:] and dk[j0..] += dS[j0:, blk]^T q[j0:].
      // The upper-triangle entries these blocks touch are 0 in P (forward) and
      // dS (zeroed above).
      for (int64_t j0 = 0; j0 < T; j0 += kRowBlock) {
        const int64_t width = std::min(kRowBlock, T - j0);
        const int depth = static_cast<int>(T - j0);
        Sgemm('T', 'N', static_cast<int>(width), ihs, depth,
                    1.0f, a + j0 * T + j0, iT, dout_bh + j0 * C, iC, 1.0f, dv + j0 * ld3, ild3);
        Sgemm('T', 'N', static_cast<int>(width), ihs, depth,
                    1.0f, da + j0 * T + j0, iT, q + j0 * ld3, ild3, 1.0f, dk + j0 * ld3, ild3);
      }
    }
  }
}

}  // namespace scaletrain::cpu
