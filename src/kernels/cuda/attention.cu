// Causal multi-head attention as batched cuBLASLt products around a fused
// causal softmax. q, k, v are first copied into per-head [B, NH, T, hs]
// buffers so that each product is one strided-batched call over B*NH heads.
// The score products run over the full T x T square (the masked half is
// wasted work that a flash-style kernel would skip).
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace scaletrain::cuda {
namespace {
using detail::FromFloat;
using detail::Grid;
using detail::ToFloat;
using detail::WarpMax;
using detail::WarpSum;

// Decodes a [B, NH, T, hs] index.
struct HeadIndex {
  int64_t b, h, t, d;
};
__device__ __forceinline__ HeadIndex DecodeHead(int64_t i, int64_t NH, int64_t T_, int64_t hs) {
  HeadIndex x;
  x.d = i % hs;
  x.t = (i / hs) % T_;
  x.h = (i / (hs * T_)) % NH;
  x.b = i / (hs * T_ * NH);
  return x;
}

template <typename T>
__global__ void SplitQkvKernel(T* q, T* k, T* v, const T* qkv, int64_t n, int64_t NH, int64_t T_,
                               int64_t C) {
  const int64_t hs = C / NH;
  ST_GRID_STRIDE(i, n) {
    const HeadIndex x = DecodeHead(i, NH, T_, hs);
    q[i] = qkv[QkvOffset(0, x.b, x.h, x.t, x.d, T_, C, hs)];
    k[i] = qkv[QkvOffset(1, x.b, x.h, x.t, x.d, T_, C, hs)];
    v[i] = qkv[QkvOffset(2, x.b, x.h, x.t, x.d, T_, C, hs)];
  }
}

// out[b, t, h*hs + d] = y[b, h, t, d] (to_heads = false), or the reverse.
template <typename T>
__global__ void HeadsToRowsKernel(T* dst, const T* src, int64_t n, int64_t NH, int64_t T_,
                                  int64_t C, bool to_heads) {
  const int64_t hs = C / NH;
  ST_GRID_STRIDE(i, n) {
    const HeadIndex x = DecodeHead(i, NH, T_, hs);
    const int64_t row = (x.b * T_ + x.t) * C + x.h * hs + x.d;
    if (to_heads) {
      dst[i] = src[row];
    } else {
      dst[row] = src[i];
    }
  }
}

template <typename T>
__global__ void AccumulateQkvGradKernel(T* dqkv, const T* dq, const T* dk, const T* dv, int64_t n,
                                        int64_t NH, int64_t T_, int64_t C) {
  const int64_t hs = C / NH;
  ST_GRID_STRIDE(i, n) {
    const HeadIndex x = DecodeHead(i, NH, T_, hs);
    T* g0 = dqkv + QkvOffset(0, x.b, x.h, x.t, x.d, T_, C, hs);
    T* g1 = dqkv + QkvOffset(1, x.b, x.h, x.t, x.d, T_, C, hs);
    T* g2 = dqkv + QkvOffset(2, x.b, x.h, x.t, x.d, T_, C, hs);
    *g0 = FromFloat<T>(ToFloat(*g0) + ToFloat(dq[i]));
    *g1 = FromFloat<T>(ToFloat(*g1) + ToFloat(dk[i]));
    *g2 = FromFloat<T>(ToFloat(*g2) + ToFloat(dv[i]));
  }
}

// In place over scores [rows = B*NH*T, T]: row (.., t) keeps keys 0..t.
template <typename T>
__global__ void CausalSoftmaxKernel(T* att, int64_t rows, int64_t T_) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row % T_;
  T* a = att + row * T_;
  float mx = -INFINITY;
  for (int64_t j = lane; j <= t; j += 32) mx = fmaxf(mx, ToFloat(a[j]));
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) sum += expf(ToFloat(a[j]) - mx);
  const float inv = 1.0f / WarpSum(sum);
  for (int64_t j = lane; j < T_; j += 32) {
    a[j] = FromFloat<T>(j <= t ? expf(ToFloat(a[j]) - mx) * inv : 0.0f);
  }
}

// In place over dP: dS = scale * P (dP - rowsum(P dP)), 0 above the diagonal.
template <typename T>
__global__ void CausalSoftmaxBackwardKernel(T* datt, const T* att, int64_t rows, int64_t T_,
                                            float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row % T_;
  const T* p = att + row * T_;
  T* d = datt + row * T_;
  float dot = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) dot += ToFloat(p[j]) * ToFloat(d[j]);
  dot = WarpSum(dot);
  for (int64_t j = lane; j < T_; j += 32) {
    d[j] = FromFloat<T>(j <= t ? scale * ToFloat(p[j]) * (ToFloat(d[j]) - dot) : 0.0f);
  }
}

}  // namespace

template <typename T>
Status AttentionForward(const Context& ctx, T* out, T* att, const T* qkv, T* workspace,
                        int64_t B, int64_t T_, int64_t C, int64_t NH) {
  const int64_t n = B * T_ * C;
  if (n == 0) return Status::Ok();
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  T* q = workspace;
  T* k = q + n;
  T* v = k + n;
  T* y = v + n;
  const cudaDataType_t type = detail::CudaType<T>();
  const AttentionGemms g = PlanAttentionGemms(B, T_, C, NH);
  const Launch1D l = ElementwiseLaunch(n);

  SplitQkvKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(q, k, v, qkv, n, NH, T_, C);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("SplitQkvKernel"));
  ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, g.scores, type, q, k, att, scale, 0.0f));
  const RowLaunch rl = WarpPerRowLaunch(B * NH * T_);
  CausalSoftmaxKernel<T><<<Grid(rl.grid), rl.block, 0, ctx.stream>>>(att, B * NH * T_, T_);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("CausalSoftmaxKernel"));
  ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, g.values, type, att, v, y, 1.0f, 0.0f));
  HeadsToRowsKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(out, y, n, NH, T_, C, false);
  return detail::LaunchStatus("HeadsToRowsKernel");
}

template <typename T>
Status AttentionBackward(const Context& ctx, T* dqkv, T* datt, const T* dout, const T* qkv,
                         const T* att, T* workspace, int64_t B, int64_t T_, int64_t C,
                         int64_t NH) {
  const int64_t n = B * T_ * C;
  if (n == 0) return Status::Ok();
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  T* q = workspace;
  T* k = q + n;
  T* v = k + n;
  T* dy = v + 2 * n;  // slot 3 (y) is the forward's
  T* dq = dy + n;
  T* dk = dq + n;
  T* dv = dk + n;
  const cudaDataType_t type = detail::CudaType<T>();
  const AttentionGemms g = PlanAttentionGemms(B, T_, C, NH);
  const Launch1D l = ElementwiseLaunch(n);

  SplitQkvKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(q, k, v, qkv, n, NH, T_, C);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("SplitQkvKernel"));
  HeadsToRowsKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(dy, dout, n, NH, T_, C, true);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("HeadsToRowsKernel"));
  ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, g.dprobs, type, dy, v, datt, 1.0f, 0.0f));
  ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, g.dvalues, type, att, dy, dv, 1.0f, 0.0f));
  const RowLaunch rl = WarpPerRowLaunch(B * NH * T_);
  CausalSoftmaxBackwardKernel<T><<<Grid(rl.grid), rl.block, 0, ctx.stream>>>(
      datt, att, B * NH * T_, T_, scale);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("CausalSoftmaxBackwardKernel"));
  ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, g.dq, type, datt, k, dq, 1.0f, 0.0f));
  ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, g.dk, type, datt, q, dk, 1.0f, 0.0f));
  AccumulateQkvGradKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(dqkv, dq, dk, dv, n, NH,
                                                                       T_, C);
  return detail::LaunchStatus("AccumulateQkvGradKernel");
}

#define ST_INSTANTIATE(T)                                                                    \
  template Status AttentionForward<T>(const Context&, T*, T*, const T*, T*, int64_t, int64_t, \
                                      int64_t, int64_t);                                     \
  template Status AttentionBackward<T>(const Context&, T*, T*, const T*, const T*, const T*,  \
                                       T*, int64_t, int64_t, int64_t, int64_t);
ST_INSTANTIATE(float)
ST_INSTANTIATE(__nv_bfloat16)
#undef ST_INSTANTIATE

}  // namespace scaletrain::cuda
