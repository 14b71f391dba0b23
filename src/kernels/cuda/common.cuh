// Device helpers shared by the kernel files (not a public header).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops_cuda.h"

namespace scaletrain::cuda::detail {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Butterfly reductions: every lane ends with the same value, and the order
// of additions is fixed (deterministic).
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double WarpSum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Status of the last launch on this thread (configuration errors; faults
// inside a kernel surface at the next synchronisation).
inline Status LaunchStatus(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string("CUDA launch of ") + what + " failed: " + cudaGetErrorString(err));
}
inline Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + " failed: " + cudaGetErrorString(err));
}

template <typename T>
constexpr cudaDataType_t CudaType();
template <>
constexpr cudaDataType_t CudaType<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t CudaType<__nv_bfloat16>() {
  return CUDA_R_16BF;
}

// Runs one product described by plan with cuBLASLt (matmul.cu).
// Returns kFailedPrecondition when cuBLASLt offers no algorithm for this
// epilogue/layout, so a caller can fall back to an unfused path.
struct GemmArgs {
  const void* a = nullptr;  // plan.a's storage
  const void* b = nullptr;  // plan.b's storage
  void* c = nullptr;        // C and D (in place: D = alpha AB + beta C)
  float alpha = 1.0f, beta = 0.0f;
  Epilogue epilogue = Epilogue::kNone;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};
Status RunLtGemm(const Context& ctx, const LtGemmPlan& plan, cudaDataType_t type,
                 const GemmArgs& args);

// Row-major form: A is the row-major op(A) operand and B likewise.
inline Status RunRowMajorGemm(const Context& ctx, const RowMajorGemm& g, cudaDataType_t type,
                              const void* A, const void* B, void* C, float alpha, float beta,
                              Epilogue ep = Epilogue::kNone, const void* bias = nullptr,
                              void* aux = nullptr, int64_t aux_ld = 0) {
  GemmArgs args;
  args.a = B;  // operands swap in the column-major view (ToCublasLt)
  args.b = A;
  args.c = C;
  args.alpha = alpha;
  args.beta = beta;
  args.epilogue = ep;
  args.bias = bias;
  args.aux = aux;
  args.aux_ld = aux_ld;
  return RunLtGemm(ctx, ToCublasLt(g), type, args);
}

// ---- deterministic column reductions ----------------------------------------
// partial[q][chunk][c] = sum over the chunk's rows r of f(r, c).{x, y}
// (q = 0, 1), written for the first nq of the two quantities.
// Block (kColTile, kRowThreads), grid (plan.col_tiles, plan.num_chunks).
template <typename F>
__global__ void ColumnPartialsKernel(float* partial, int64_t N, int64_t C, int64_t rows_per_chunk,
                                     int64_t num_chunks, int nq, F f) {
  __shared__ float s0[kRowThreads][kColTile + 1];
  __shared__ float s1[kRowThreads][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = min(N, r0 + rows_per_chunk);
  float a0 = 0.0f, a1 = 0.0f;
  if (c < C) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowThreads) {
      const float2 v = f(r, c);
      a0 += v.x;
      a1 += v.y;
    }
  }
  s0[threadIdx.y][threadIdx.x] = a0;
  s1[threadIdx.y][threadIdx.x] = a1;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t0 = 0.0f, t1 = 0.0f;
    for (int y = 0; y < kRowThreads; ++y) {
      t0 += s0[y][threadIdx.x];
      t1 += s1[y][threadIdx.x];
    }
    partial[chunk * C + c] = t0;
    if (nq > 1) partial[(num_chunks + chunk) * C + c] = t1;
  }
}

// out_q[c] += sum over chunks (in order) of partial[q][chunk][c]; out_q may be null.
template <typename T>
__global__ void ColumnFinalizeKernel(T* out0, T* out1, const float* partial, int64_t num_chunks,
                                     int64_t C) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  if (out0 != nullptr) {
    float s = 0.0f;
    for (int64_t j = 0; j < num_chunks; ++j) s += partial[j * C + c];
    out0[c] = FromFloat<T>(ToFloat(out0[c]) + s);
  }
  if (out1 != nullptr) {
    float s = 0.0f;
    for (int64_t j = 0; j < num_chunks; ++j) s += partial[(num_chunks + j) * C + c];
    out1[c] = FromFloat<T>(ToFloat(out1[c]) + s);
  }
}

template <typename T, typename F>
Status ColumnReduce(const Context& ctx, T* out0, T* out1, float* partial, int64_t N, int64_t C,
                    F f, const char* what) {
  const ColumnReducePlan p = PlanColumnReduce(N, C);
  if (p.num_chunks == 0) return Status::Ok();
  const int nq = out1 != nullptr ? 2 : 1;
  ColumnPartialsKernel<<<dim3(static_cast<unsigned>(p.col_tiles),
                              static_cast<unsigned>(p.num_chunks)),
                         dim3(kColTile, kRowThreads), 0, ctx.stream>>>(
      partial, N, C, p.rows_per_chunk, p.num_chunks, nq, f);
  ST_RETURN_IF_ERROR(LaunchStatus(what));
  const int block = 256;
  ColumnFinalizeKernel<T><<<static_cast<unsigned>((C + block - 1) / block), block, 0,
                            ctx.stream>>>(out0, out1, partial, p.num_chunks, C);
  return LaunchStatus(what);
}

inline unsigned Grid(int64_t g) { return static_cast<unsigned>(g); }

// A grid-stride loop: index I visits [0, N) across every thread of the grid.
#define ST_GRID_STRIDE(I, N)                                                          \
  for (int64_t I = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; I < (N); \
       I += static_cast<int64_t>(gridDim.x) * blockDim.x)

}  // namespace scaletrain::cuda::detail
