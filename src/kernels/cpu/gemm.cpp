#include "kernels/cpu/gemm.h"

#include <omp.h>

#include <cstdio>
#include <string>

#ifdef SCALETRAIN_BLAS_ONEDNN
#include <dnnl.h>
#else
#include <cblas.h>
#endif

namespace scaletrain::cpu {

#ifdef SCALETRAIN_BLAS_ONEDNN

void Sgemm(char trans_a, char trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // dnnl_sgemm is row-major already.
  dnnl_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void SetBlasThreads(int) {}  // oneDNN follows omp_set_num_threads

const char* BlasName() {
  static std::string name;
  const dnnl_version_t* v = dnnl_version();
  char buf[96];
  std::snprintf(buf, sizeof buf, "oneDNN %d.%d.%d (%d threads)", v->major, v->minor, v->patch,
                omp_get_max_threads());
  name = buf;
  return name.c_str();
}

#else

void Sgemm(char trans_a, char trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a == 'T' ? CblasTrans : CblasNoTrans,
              trans_b == 'T' ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
}

void SetBlasThreads(int n) { openblas_set_num_threads(n); }

const char* BlasName() {
  static std::string name;
  char buf[64];
  std::snprintf(buf, sizeof(buf), " (OpenMP build, %d threads)", openblas_get_num_threads());
  name = std::string(openblas_get_config()) + buf;
  return name.c_str();
}

#endif

}  // namespace scaletrain::cpu
