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
      if (wpe == nullptr) {
        std::copy(e, e + C, o);
        continue;
      }
      const float* p = wpe + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

namespace {

// Scatter-adds into rows that repeated tokens or positions make collide: the
// threads split the channels instead of the rows, each owning a column block
// of every row, which needs no atomics and sums in the same order whatever
// the thread count. body(c0, width) handles columns [c0, c0 + width).
template <typename Body>
void ForColumnBlocks(int64_t C, Body body) {
  constexpr int64_t kBlock = 32;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    body(c0, std::min(kBlock, C - c0));
  }
}

inline void AddSpan(float* dst, const float* src, int64_t width) {
#pragma omp simd
  for (int64_t c = 0; c < width; ++c) dst[c] += src[c];
}

}  // namespace

void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                     int64_t T, int64_t C) {
  ForColumnBlocks(C, [&](int64_t c0, int64_t width) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const float* d = dout + (b * T + t) * C + c0;
        AddSpan(dwte + static_cast<int64_t>(tokens[b * T + t]) * C + c0, d, width);
        if (dwpe != nullptr) AddSpan(dwpe + t * C + c0, d, width);
      }
    }
  });
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
  ForColumnBlocks(C, [&](int64_t c0, int64_t width) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = static_cast<int64_t>(tokens[n]) - vocab_begin;
      if (r >= 0 && r < rows) AddSpan(dwte + r * C + c0, dout + n * C + c0, width);
    }
  });
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
  ForColumnBlocks(C, [&](int64_t c0, int64_t width) {
    for (int64_t i = 0; i < rows; ++i) AddSpan(dwpe + ((row_begin + i) % T) * C + c0, dout + i * C + c0, width);
  });
}

void PositionForwardAt(float* out, const float* wpe, const int32_t* positions, int64_t row_begin,
                       int64_t rows, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * C;
    const float* p = wpe + static_cast<int64_t>(positions[(row_begin + i) % T]) * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] += p[c];
  }
}

void PositionBackwardAt(float* dwpe, const float* dout, const int32_t* positions,
                        int64_t row_begin, int64_t rows, int64_t T, int64_t C) {
  ForColumnBlocks(C, [&](int64_t c0, int64_t width) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = positions[(row_begin + i) % T];
      AddSpan(dwpe + t * C + c0, dout + i * C + c0, width);
    }
  });
}

}  // namespace scaletrain::cpu
