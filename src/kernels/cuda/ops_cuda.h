// CUDA kernels: the same op list and contract as kernels/cpu/ops.h (shapes,
// row-major [out, in] weights, every backward ACCUMULATES into its gradients,
// optional gradients may be null), for float32 and bfloat16 activations.
//
// Precision: T is float or __nv_bfloat16 (storage type of activations,
// weights and gradients); all arithmetic is in fp32 (matmuls: cuBLASLt with
// CUBLAS_COMPUTE_32F, i.e. fp32 accumulation; with T = float no TF32).
// LayerNorm statistics and losses are always fp32; AdamW keeps fp32 master
// weights and moments.
//
// Memory: every buffer, including scratch, is allocated by the caller (sizes
// from launch.h); nothing here calls cudaMalloc. Every call is enqueued on
// ctx.stream and returns without synchronising; the Status reports launch
// and cuBLASLt errors, not asynchronous kernel faults.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/launch.h"

namespace scaletrain::cuda {

using bf16 = __nv_bfloat16;

// What every call needs: a cuBLASLt handle, its scratch and a stream. The
// caller creates and owns all three.
struct Context {
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;  // kCublasLtWorkspaceBytes recommended
  size_t lt_workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

// ---- matmul.cu -------------------------------------------------------------
// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]   (bias optional).
// gelu: out = gelu(that); pre_gelu[N,OC] (optional) then receives the value
// before the GELU, for the backward. Bias and GELU run in the cuBLASLt
// epilogue where it allows (see PlanForwardEpilogue).
template <typename T>
Status MatmulForward(const Context& ctx, T* out, T* pre_gelu, const T* inp, const T* weight,
                     const T* bias, int64_t N, int64_t C, int64_t OC, bool gelu = false);
// dinp[N,C] += dout @ weight; dweight[OC,C] += dout^T @ inp;
// dbias[OC] += column sums of dout (deterministic; needs
// bias_workspace of MatmulBackwardWorkspaceBytes(N, OC)). All optional.
// If gelu_pre is given (the pre_gelu of the forward that produced this
// layer's input), dinp is instead OVERWRITTEN with
// gelu'(gelu_pre) * (dout @ weight): the backward of "linear after GELU",
// fused into the cuBLASLt epilogue (DGELU) when C % 8 == 0.
template <typename T>
Status MatmulBackward(const Context& ctx, T* dinp, T* dweight, T* dbias, const T* dout,
                      const T* inp, const T* weight, float* bias_workspace, int64_t N, int64_t C,
                      int64_t OC, const T* gelu_pre = nullptr);

// ---- norm.cu ----------------------------------------------------------------
// LayerNorm over the last dimension, eps = 1e-5; mean[N], rstd[N] fp32.
template <typename T>
Status LayerNormForward(const Context& ctx, T* out, float* mean, float* rstd, const T* inp,
                        const T* weight, const T* bias, int64_t N, int64_t C);
// workspace: LayerNormBackwardWorkspaceBytes(N, C), needed when dweight or
// dbias is given. dinp, dweight, dbias accumulate and are optional.
template <typename T>
Status LayerNormBackward(const Context& ctx, T* dinp, T* dweight, T* dbias, const T* dout,
                         const T* inp, const T* weight, const float* mean, const float* rstd,
                         float* workspace, int64_t N, int64_t C);

// ---- activation.cu -------------------------------------------------------------
template <typename T>
Status GeluForward(const Context& ctx, T* out, const T* inp, int64_t n);
template <typename T>  // dinp += dout * gelu'(inp)
Status GeluBackward(const Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n);
template <typename T>  // out = a + b
Status ResidualForward(const Context& ctx, T* out, const T* a, const T* b, int64_t n);
template <typename T>  // da += dout; db += dout (either optional)
Status ResidualBackward(const Context& ctx, T* da, T* db, const T* dout, int64_t n);

// ---- embedding.cu ----------------------------------------------------------------
// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
template <typename T>
Status EncoderForward(const Context& ctx, T* out, const int32_t* tokens, const T* wte,
                      const T* wpe, int64_t B, int64_t T_, int64_t C);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] (dwpe optional).
// Deterministic, no float atomics: positions are bucketed by token (integer
// counting sort in workspace, EncoderBackwardWorkspace(B*T, V).total_bytes)
// and each row of dwte sums its bucket in position order. tokens in [0, V).
template <typename T>
Status EncoderBackward(const Context& ctx, T* dwte, T* dwpe, const T* dout,
                       const int32_t* tokens, void* workspace, int64_t B, int64_t T_, int64_t C,
                       int64_t V);

// ---- attention.cu -----------------------------------------------------------------
// As cpu::AttentionForward/Backward: qkv[B,T,3C], out[B,T,C], att[B,NH,T,T]
// (probabilities, exact zeros above the diagonal), datt scratch. Products by
// cuBLASLt (batched over B*NH) on per-head copies of q, k, v kept in
// workspace (AttentionWorkspaceBytes); the causal softmax is one fused kernel.
template <typename T>
Status AttentionForward(const Context& ctx, T* out, T* att, const T* qkv, T* workspace,
                        int64_t B, int64_t T_, int64_t C, int64_t NH);
template <typename T>  // dqkv += gradient
Status AttentionBackward(const Context& ctx, T* dqkv, T* datt, const T* dout, const T* qkv,
                         const T* att, T* workspace, int64_t B, int64_t T_, int64_t C,
                         int64_t NH);

// ---- loss.cu -----------------------------------------------------------------------
// Softmax cross-entropy over the first V of Vp columns; losses[N] fp32;
// probs[N,Vp] with padding columns 0.
template <typename T>
Status CrossEntropyForward(const Context& ctx, float* losses, T* probs, const T* logits,
                           const int32_t* targets, int64_t N, int64_t V, int64_t Vp);
// dlogits = (probs - onehot) * dloss, padding 0; overwrites, may alias probs.
template <typename T>
Status CrossEntropyBackward(const Context& ctx, T* dlogits, const T* probs,
                            const int32_t* targets, float dloss, int64_t N, int64_t V,
                            int64_t Vp);
// Forward and backward in one pass over the logits (no probs buffer):
// losses[N] and dlogits[N,Vp]; dlogits may alias logits (in place).
template <typename T>
Status CrossEntropyFused(const Context& ctx, float* losses, T* dlogits, const T* logits,
                         const int32_t* targets, float dloss, int64_t N, int64_t V, int64_t Vp);

// ---- optimizer.cu --------------------------------------------------------------------
// AdamW on fp32 master weights (cpu::AdamWUpdate semantics); grad in T.
// param_copy (optional): receives the updated weights in T (the bf16 copy
// the forward reads).
template <typename T>
Status AdamWUpdate(const Context& ctx, float* param, T* param_copy, const T* grad, float* m,
                   float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int64_t t, float grad_scale);
// *out = sum of squares of x[0..n) in double (device pointer), in a fixed
// order: the same bits run to run. workspace: SumSquaresWorkspaceBytes(n).
template <typename T>
Status SumSquares(const Context& ctx, double* out, const T* x, int64_t n, double* workspace);

}  // namespace scaletrain::cuda
