// Element-wise ops: GELU and the residual add, grid-stride loops.
#include "kernels/cuda/common.cuh"

namespace scaletrain::cuda {
namespace {
using detail::FromFloat;
using detail::Grid;
using detail::ToFloat;

template <typename T>
__global__ void GeluForwardKernel(T* out, const T* inp, int64_t n) {
  ST_GRID_STRIDE(i, n) { out[i] = FromFloat<T>(GeluValue(ToFloat(inp[i]))); }
}

template <typename T>
__global__ void GeluBackwardKernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  ST_GRID_STRIDE(i, n) {
    dinp[i] = FromFloat<T>(ToFloat(dinp[i]) + ToFloat(dout[i]) * GeluDerivative(ToFloat(inp[i])));
  }
}

template <typename T>
__global__ void ResidualForwardKernel(T* out, const T* a, const T* b, int64_t n) {
  ST_GRID_STRIDE(i, n) { out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i])); }
}

template <typename T>
__global__ void ResidualBackwardKernel(T* da, T* db, const T* dout, int64_t n) {
  ST_GRID_STRIDE(i, n) {
    const float d = ToFloat(dout[i]);
    if (da != nullptr) da[i] = FromFloat<T>(ToFloat(da[i]) + d);
    if (db != nullptr) db[i] = FromFloat<T>(ToFloat(db[i]) + d);
  }
}

}  // namespace

template <typename T>
Status GeluForward(const Context& ctx, T* out, const T* inp, int64_t n) {
  const Launch1D l = ElementwiseLaunch(n);
  if (l.grid == 0) return Status::Ok();
  GeluForwardKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(out, inp, n);
  return detail::LaunchStatus("GeluForwardKernel");
}

template <typename T>
Status GeluBackward(const Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n) {
  const Launch1D l = ElementwiseLaunch(n);
  if (l.grid == 0) return Status::Ok();
  GeluBackwardKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(dinp, inp, dout, n);
  return detail::LaunchStatus("GeluBackwardKernel");
}

template <typename T>
Status ResidualForward(const Context& ctx, T* out, const T* a, const T* b, int64_t n) {
  const Launch1D l = ElementwiseLaunch(n);
  if (l.grid == 0) return Status::Ok();
  ResidualForwardKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(out, a, b, n);
  return detail::LaunchStatus("ResidualForwardKernel");
}

template <typename T>
Status ResidualBackward(const Context& ctx, T* da, T* db, const T* dout, int64_t n) {
  const Launch1D l = ElementwiseLaunch(n);
  if (l.grid == 0 || (da == nullptr && db == nullptr)) return Status::Ok();
  ResidualBackwardKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(da, db, dout, n);
  return detail::LaunchStatus("ResidualBackwardKernel");
}

#define ST_INSTANTIATE(T)                                                                 \
  template Status GeluForward<T>(const Context&, T*, const T*, int64_t);                  \
  template Status GeluBackward<T>(const Context&, T*, const T*, const T*, int64_t);       \
  template Status ResidualForward<T>(const Context&, T*, const T*, const T*, int64_t);    \
  template Status ResidualBackward<T>(const Context&, T*, T*, const T*, int64_t);
ST_INSTANTIATE(float)
ST_INSTANTIATE(__nv_bfloat16)
#undef ST_INSTANTIATE

}  // namespace scaletrain::cuda
