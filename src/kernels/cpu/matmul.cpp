// Linear layers through the BLAS (gemm.h), plus the thread settings shared by
// every CPU kernel. Both BLAS choices run on our OpenMP thread pool, so one
// thread count governs our loops and the sgemm calls.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {

void SetNumThreads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  SetBlasThreads(n);
}

int NumThreads() { return omp_get_max_threads(); }

const char* BlasInfo() { return BlasName(); }

void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                   int64_t C, int64_t OC) {
  float beta = 0.0f;
  if (bias != nullptr) {
    // Seeding out with the bias lets sgemm add it (beta = 1) while it writes
    // the tile, instead of a second pass over out afterwards.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      std::copy(bias, bias + OC, out + i * OC);
    }
    beta = 1.0f;
  }
  Sgemm('N', 'T', static_cast<int>(N), static_cast<int>(OC),
              static_cast<int>(C), 1.0f, inp, static_cast<int>(C), weight, static_cast<int>(C),
              beta, out, static_cast<int>(OC));
}

namespace {

// dbias[o] += sum_i dout[i, o]. Threads own disjoint column blocks (no
// reduction across threads, so the result does not depend on the thread
// count); within a block rows are walked in order so the inner loop is a
// contiguous, vectorisable row segment.
void BiasBackward(float* dbias, const float* dout, int64_t N, int64_t OC) {
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t o0 = blk * kBlock;
    const int64_t width = std::min(kBlock, OC - o0);
    float acc[kBlock] = {};
    for (int64_t i = 0; i < N; ++i) {
      const float* row = dout + i * OC + o0;
#pragma omp simd
      for (int64_t o = 0; o < width; ++o) acc[o] += row[o];
    }
    for (int64_t o = 0; o < width; ++o) dbias[o0 + o] += acc[o];
  }
}

}  // namespace

void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int64_t N, int64_t C, int64_t OC) {
  const int n = static_cast<int>(N), c = static_cast<int>(C), oc = static_cast<int>(OC);
  if (dinp != nullptr) {
    Sgemm('N', 'N', n, c, oc, 1.0f, dout, oc, weight, c,
                1.0f, dinp, c);
  }
  if (dweight != nullptr) {
    Sgemm('T', 'N', oc, c, n, 1.0f, dout, oc, inp, c, 1.0f,
                dweight, c);
  }
  if (dbias != nullptr) BiasBackward(dbias, dout, N, OC);
}

}  // namespace scaletrain::cpu
