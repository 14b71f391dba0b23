// Fused AdamW over flat fp32 master buffers, and a reproducible sum of
// squares for the global gradient norm.
#include "kernels/cuda/common.cuh"

namespace scaletrain::cuda {
namespace {
using detail::FromFloat;
using detail::Grid;
using detail::ToFloat;
using detail::WarpSum;

template <typename T>
__global__ void AdamWKernel(float* param, T* param_copy, const T* grad, float* m, float* v,
                            int64_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, float grad_scale, AdamWConstants k) {
  ST_GRID_STRIDE(i, n) {
    float p = param[i], mi = m[i], vi = v[i];
    AdamWElement(p, mi, vi, ToFloat(grad[i]) * grad_scale, lr, beta1, beta2, eps, weight_decay,
                 k);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (param_copy != nullptr) param_copy[i] = FromFloat<T>(p);
  }
}

constexpr int kSumBlock = 256;

// The block's sum of each thread's `acc`, in a fixed order (warps, then the
// warps' sums in warp order); valid in thread 0. Blocks of kSumBlock threads.
__device__ double BlockSum(double acc) {
  __shared__ double warp_sums[kSumBlock / 32];
  acc = WarpSum(acc);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  double s = 0.0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kSumBlock / 32; ++w) s += warp_sums[w];
  }
  return s;
}

// partial[block] = sum of squares of the block's grid-stride elements; the
// grid size is fixed by SumSquaresGrid(n), so the order is too.
template <typename T>
__global__ void SumSquaresPartialKernel(double* partial, const T* x, int64_t n) {
  double acc = 0.0;
  ST_GRID_STRIDE(i, n) {
    const double xi = ToFloat(x[i]);
    acc += xi * xi;
  }
  const double s = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void SumPartialsKernel(double* out, const double* partial, int64_t count) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  const double s = BlockSum(acc);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

template <typename T>
Status AdamWUpdate(const Context& ctx, float* param, T* param_copy, const T* grad, float* m,
                   float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int64_t t, float grad_scale) {
  const Launch1D l = ElementwiseLaunch(n);
  if (l.grid == 0) return Status::Ok();
  AdamWKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(
      param, param_copy, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
      MakeAdamWConstants(beta1, beta2, t));
  return detail::LaunchStatus("AdamWKernel");
}

template <typename T>
Status SumSquares(const Context& ctx, double* out, const T* x, int64_t n, double* workspace) {
  const int64_t grid = SumSquaresGrid(n);
  SumSquaresPartialKernel<T><<<Grid(grid), kSumBlock, 0, ctx.stream>>>(workspace, x, n);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("SumSquaresPartialKernel"));
  SumPartialsKernel<<<1, kSumBlock, 0, ctx.stream>>>(out, workspace, grid);
  return detail::LaunchStatus("SumPartialsKernel");
}

#define ST_INSTANTIATE(T)                                                                      \
  template Status AdamWUpdate<T>(const Context&, float*, T*, const T*, float*, float*, int64_t, \
                                 float, float, float, float, float, int64_t, float);           \
  template Status SumSquares<T>(const Context&, double*, const T*, int64_t, double*);
ST_INSTANTIATE(float)
ST_INSTANTIATE(__nv_bfloat16)
#undef ST_INSTANTIATE

}  // namespace scaletrain::cuda
