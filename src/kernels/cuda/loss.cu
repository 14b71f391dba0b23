// Softmax cross-entropy over the first V of Vp columns. One block per row;
// the max and the sum of exponentials come from one pass (online softmax),
// combined across threads in a fixed order.
#include "kernels/cuda/common.cuh"

namespace scaletrain::cuda {
namespace {
using detail::FromFloat;
using detail::Grid;
using detail::ToFloat;

struct MaxSum {
  float m, s;  // running max, and sum of exp(x - m)
};
__device__ __forceinline__ MaxSum Merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ MaxSum WarpMerge(MaxSum v) {
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = Merge(v, other);
  }
  return v;
}

// Max and sum of exp over x[0..V) for the whole block (blockDim.x a
// multiple of 32, at most 1024); every thread gets the result.
template <typename T>
__device__ MaxSum BlockMaxSum(const T* x, int64_t V) {
  __shared__ float sm[32], ss[32];
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float xj = ToFloat(x[j]);
    if (xj > acc.m) {
      acc.s = acc.s * expf(acc.m - xj) + 1.0f;
      acc.m = xj;
    } else {
      acc.s += expf(xj - acc.m);
    }
  }
  acc = WarpMerge(acc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm[warp] = acc.m;
    ss[warp] = acc.s;
  }
  __syncthreads();
  const int nwarps = blockDim.x / 32;
  MaxSum all = lane < nwarps ? MaxSum{sm[lane], ss[lane]} : MaxSum{-INFINITY, 0.0f};
  return WarpMerge(all);  // every warp merges the same values in the same order
}

// fused = false: out = probs; fused = true: out = (probs - onehot) * dloss.
// out may alias logits: every read of a row happens before the barrier in
// BlockMaxSum, except x[j] re-read by the same thread that then writes out[j].
template <typename T, bool kFused>
__global__ void CrossEntropyKernel(float* losses, T* out, const T* logits,
                                   const int32_t* targets, float dloss, int64_t V, int64_t Vp) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  T* o = out + row * Vp;
  const int32_t target = targets[row];
  const float x_target = ToFloat(x[target]);
  const MaxSum ms = BlockMaxSum(x, V);
  if (threadIdx.x == 0) losses[row] = logf(ms.s) - (x_target - ms.m);
  const float inv = 1.0f / ms.s;
  for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x) {
    float val = 0.0f;
    if (j < V) {
      const float p = expf(ToFloat(x[j]) - ms.m) * inv;
      val = kFused ? (p - (j == target ? 1.0f : 0.0f)) * dloss : p;
    }
    o[j] = FromFloat<T>(val);
  }
}

template <typename T>
__global__ void CrossEntropyBackwardKernel(T* dlogits, const T* probs, const int32_t* targets,
                                           float dloss, int64_t N, int64_t V, int64_t Vp) {
  const int64_t n = N * Vp;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / Vp, j = i % Vp;
    float val = 0.0f;
    if (j < V) val = (ToFloat(probs[i]) - (j == targets[row] ? 1.0f : 0.0f)) * dloss;
    dlogits[i] = FromFloat<T>(val);
  }
}

}  // namespace

template <typename T>
Status CrossEntropyForward(const Context& ctx, float* losses, T* probs, const T* logits,
                           const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
  if (N == 0) return Status::Ok();
  CrossEntropyKernel<T, false><<<Grid(N), CrossEntropyBlock(V), 0, ctx.stream>>>(
      losses, probs, logits, targets, 0.0f, V, Vp);
  return detail::LaunchStatus("CrossEntropyKernel");
}

template <typename T>
Status CrossEntropyBackward(const Context& ctx, T* dlogits, const T* probs,
                            const int32_t* targets, float dloss, int64_t N, int64_t V,
                            int64_t Vp) {
  const Launch1D l = ElementwiseLaunch(N * Vp);
  if (l.grid == 0) return Status::Ok();
  CrossEntropyBackwardKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(dlogits, probs, targets,
                                                                          dloss, N, V, Vp);
  return detail::LaunchStatus("CrossEntropyBackwardKernel");
}

template <typename T>
Status CrossEntropyFused(const Context& ctx, float* losses, T* dlogits, const T* logits,
                         const int32_t* targets, float dloss, int64_t N, int64_t V, int64_t Vp) {
  if (N == 0) return Status::Ok();
  CrossEntropyKernel<T, true><<<Grid(N), CrossEntropyBlock(V), 0, ctx.stream>>>(
      losses, dlogits, logits, targets, dloss, V, Vp);
  return detail::LaunchStatus("CrossEntropyKernel (fused)");
}

#define ST_INSTANTIATE(T)                                                                       \
  template Status CrossEntropyForward<T>(const Context&, float*, T*, const T*, const int32_t*,  \
                                         int64_t, int64_t, int64_t);                            \
  template Status CrossEntropyBackward<T>(const Context&, T*, const T*, const int32_t*, float,  \
                                          int64_t, int64_t, int64_t);                           \
  template Status CrossEntropyFused<T>(const Context&, float*, T*, const T*, const int32_t*,    \
                                       float, int64_t, int64_t, int64_t);
ST_INSTANTIATE(float)
ST_INSTANTIATE(__nv_bfloat16)
#undef ST_INSTANTIATE

}  // namespace scaletrain::cuda
