// The one single-precision GEMM every CPU kernel calls, row-major:
// C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, op = transpose when
// the flag is 'T'. Backed by OpenBLAS (OpenMP build) or oneDNN, chosen at
// build time (-DSCALETRAIN_BLAS=openblas|onednn; bench/blas_choice.sh and
// docs/benchmarks.md hold the measurement behind the default). Called inside
// an OpenMP parallel region it runs on the calling thread only.
#pragma once

#include <cstdint>

namespace scaletrain::cpu {

void Sgemm(char trans_a, char trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Sets the BLAS's own thread count (OpenMP-based either way).
void SetBlasThreads(int n);
// "OpenBLAS 0.3.21 ... (OpenMP build, 2 threads)" or "oneDNN 2.6.3 ...".
const char* BlasName();

}  // namespace scaletrain::cpu
