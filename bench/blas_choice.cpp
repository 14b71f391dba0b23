// Which BLAS for the CPU matmuls: OpenBLAS (Debian's OpenMP build) against
// oneDNN's sgemm (Debian's libdnnl), on the matmul shapes of the benchmark
// models' forward and backward. Prints GFLOP/s of each and the ratio.
//
// Build and run (bench/blas_choice.sh does this):
//   g++ -O3 -march=native -fopenmp bench/blas_choice.cpp \
//     -I/usr/include/x86_64-linux-gnu/openblas-openmp \
//     -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp \
//     -lopenblas -ldnnl -o build/blas_choice
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct Shape {
  const char* what;
  int m, n, k;
  bool trans_b;  // C[m,n] = A[m,k] @ B^T (forward, dinp uses no transpose)
};

double Time(const std::function<void()>& f) {
  f();  // warm up
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  // The small model (4L/128 wide, B16 x T128) and the larger (6L/384, B8 x T256).
  const Shape shapes[] = {
      {"small qkv fwd", 2048, 384, 128, true},   {"small fc fwd", 2048, 512, 128, true},
      {"small proj fwd", 2048, 128, 512, true},  {"small head fwd", 2048, 128, 128, true},
      {"small fc dinp", 2048, 128, 512, false},  {"large qkv fwd", 2048, 1152, 384, true},
      {"large fc fwd", 2048, 1536, 384, true},   {"large proj fwd", 2048, 384, 1536, true},
      {"large fc dinp", 2048, 384, 1536, false},
  };
  std::printf("threads %d, %s\n", threads, openblas_get_config());
  std::printf("%-16s %6s %6s %6s %12s %12s %7s\n", "shape", "m", "n", "k", "openblas", "onednn",
              "ratio");
  double sum_ob = 0, sum_dn = 0;
  for (const Shape& s : shapes) {
    std::vector<float> a(size_t(s.m) * s.k, 0.5f), b(size_t(s.n) * s.k, 0.25f), c(size_t(s.m) * s.n);
    const int ldb = s.trans_b ? s.k : s.n;
    const double flops = 2.0 * s.m * s.n * s.k;
    const double t_ob = Time([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                  1.0f, a.data(), s.k, b.data(), ldb, 0.0f, c.data(), s.n);
    });
    const double t_dn = Time([&] {
      dnnl_sgemm('N', s.trans_b ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), ldb, 0.0f,
                 c.data(), s.n);
    });
    sum_ob += t_ob;
    sum_dn += t_dn;
    std::printf("%-16s %6d %6d %6d %9.1f GF/s %9.1f GF/s %6.2fx\n", s.what, s.m, s.n, s.k,
                flops / t_ob / 1e9, flops / t_dn / 1e9, t_dn / t_ob);
  }
  std::printf("total time: openblas %.3f ms, onednn %.3f ms: openblas %.2fx the speed of onednn\n",
              sum_ob * 1e3, sum_dn * 1e3, sum_dn / sum_ob);
  return 0;
}
