// Token + position embedding lookup and its scatter-add backward.
#include <algorithm>

#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {

void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                    int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + (b * T + t) * C;
      const float* e = wte + static_cast<int64_t>(tokens[b * T + t]) * C;
      const float* p = wpe + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                     int64_t T, int64_t C) {
  // Repeated tokens make rows of dwte collide, so threads split the channels
  // instead of the positions: each owns a column block of every row, which
  // needs no atomics and sums in the same order whatever the thread count.
  constexpr int64_t kBlock = 32;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t width = std::min(kBlock, C - c0);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const float* d = dout + (b * T + t) * C + c0;
        float* w = dwte + static_cast<int64_t>(tokens[b * T + t]) * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) w[c] += d[c];
        if (dwpe != nullptr) {
          float* p = dwpe + t * C + c0;
#pragma omp simd
          for (int64_t c = 0; c < width; ++c) p[c] += d[c];
        }
      }
    }
  }
}

void EmbeddingShardForward(float* out, const int32_t* tokens, const float* wte,
                           int64_t vocab_begin, int64_t rows, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * C;
    const int64_t r = static_cast<int64_t>(tokens[n]) - vocab_begin;
    if (r < 0 || r >= rows) {
      std::fill(o, o + C, 0.0f);
    } else {
      std::copy(wte + r * C, wte + (r + 1) * C, o);
    }
  }
}

void EmbeddingShardBackward(float* dwte, const float* dout, const int32_t* tokens,
                            int64_t vocab_begin, int64_t rows, int64_t N, int64_t C) {
  // Column blocks per thread, as EncoderBackward: no atomics, fixed order.
  constexpr int64_t kBlock = 32;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t width = std::min(kBlock, C - c0);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = static_cast<int64_t>(tokens[n]) - vocab_begin;
      if (r < 0 || r >= rows) continue;
      const float* d = dout + n * C + c0;
      float* w = dwte + r * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) w[c] += d[c];
    }
  }
}

void PositionForward(float* out, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                     int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * C;
    const float* p = wpe + ((row_begin + i) % T) * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] += p[c];
  }
}

void PositionBackward(float* dwpe, const float* dout, int64_t row_begin, int64_t rows, int64_t T,
                      int64_t C) {
  constexpr int64_t kBlock = 32;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t width = std::min(kBlock, C - c0);
    for (int64_t i = 0; i < rows; ++i) {
      const float* d = dout + i * C + c0;
      float* p = dwpe + ((row_begin + i) % T) * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) p[c] += d[c];
    }
  }
}

}  // namespace scaletrain::cpu
