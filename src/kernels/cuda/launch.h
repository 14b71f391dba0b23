// Host-side decisions of the CUDA backend, in plain C++ with no CUDA headers:
// grid and block shapes, workspace sizes, the cuBLASLt description of each
// row-major product, and the index and per-element maths the kernels share
// with the host. Kept apart from the kernels so that all of it can be
// unit-tested on a machine without a GPU (tests/unit/test_cuda_host.cpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define ST_HD __host__ __device__ __forceinline__
#else
#define ST_HD inline
#endif

namespace scaletrain::cuda {

enum class DType { kF32, kBF16 };
inline constexpr size_t DTypeBytes(DType t) { return t == DType::kF32 ? 4 : 2; }

// ---- launch shapes -----------------------------------------------------------

// A 1-D grid-stride loop: thread (blk, thr) handles i = blk*block + thr,
// then i += grid*block, while i < n. grid is capped (max_grid) so very large
// n reuse threads instead of asking for an oversized grid.
inline constexpr int64_t kMaxGrid1D = 65536;
struct Launch1D {
  int64_t grid = 0;  // 0 when n == 0: nothing to launch
  int block = 0;
};
Launch1D ElementwiseLaunch(int64_t n, int block = 256, int64_t max_grid = kMaxGrid1D);

// One warp per row, warps_per_block rows per block (LayerNorm, attention
// softmax). Row r is handled by block r / warps_per_block.
struct RowLaunch {
  int64_t grid = 0;
  int block = 0;  // threads: 32 * warps_per_block
  int warps_per_block = 0;
};
RowLaunch WarpPerRowLaunch(int64_t rows, int warps_per_block = 8);

// One block per row for the cross-entropy over a (long) vocabulary row.
int CrossEntropyBlock(int64_t V);

// Deterministic column sums over N rows of a row-major [N, C] matrix (bias
// gradients, LayerNorm weight/bias gradients): blocks of (kColTile x
// kRowThreads) threads; grid (col_tiles, num_chunks); chunk j covers rows
// [j*rows_per_chunk, min(N, (j+1)*rows_per_chunk)). Each chunk writes one
// fp32 partial row; a second kernel adds the partials in chunk order, so the
// result does not depend on scheduling (no float atomics).
inline constexpr int kColTile = 32;
inline constexpr int kRowThreads = 8;
struct ColumnReducePlan {
  int64_t col_tiles = 0;
  int64_t num_chunks = 0;
  int64_t rows_per_chunk = 0;
};
ColumnReducePlan PlanColumnReduce(int64_t N, int64_t C);

// ---- workspaces (caller-allocated; sizes in bytes) ---------------------------

// cuBLASLt scratch handed to every matmul (32 MiB: what cuBLAS recommends
// for Hopper).
inline constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;
// MatmulBackward with dbias: fp32 partial column sums.
size_t MatmulBackwardWorkspaceBytes(int64_t N, int64_t OC);
// LayerNormBackward with dweight or dbias: two fp32 partial rows per chunk.
size_t LayerNormBackwardWorkspaceBytes(int64_t N, int64_t C);
// Attention: q, k, v, y (forward) and dy, dq, dk, dv (backward), each
// [B, NH, T, hs] in the activation dtype; the forward uses the first four.
size_t AttentionWorkspaceBytes(int64_t B, int64_t T, int64_t C, DType dtype);
// EncoderBackward: int32 counts[V], offsets[V+1], sorted positions[N].
struct EncoderWorkspaceLayout {
  size_t counts_offset = 0, offsets_offset = 0, positions_offset = 0, total_bytes = 0;
};
EncoderWorkspaceLayout EncoderBackwardWorkspace(int64_t N, int64_t V);
// SumSquares: one double per block of its fixed grid.
int64_t SumSquaresGrid(int64_t n);
size_t SumSquaresWorkspaceBytes(int64_t n);

// ---- cuBLASLt descriptions -----------------------------------------------------

// A row-major product C[m,n] (ld ldc) = alpha op(A)[m,k] op(B)[k,n] + beta C,
// optionally strided-batched. op(X) = X^T when trans_x; A is stored [m,k]
// (or [k,m] when transposed) with leading dimension lda, likewise B.
struct RowMajorGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};
// cuBLASLt's (column-major) view: D[m,n] = op(A)[m,k] op(B)[k,n], each
// operand described as cublasLtMatrixLayoutCreate wants it (rows and cols of
// the stored matrix, before the op).
struct LtMatrix {
  int64_t rows = 0, cols = 0, ld = 0, batch = 1, stride = 0;
};
struct LtGemmPlan {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  LtMatrix a, b, c;  // c also describes D
};
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
// operands swap, m and n swap, and the transpose flags carry over.
LtGemmPlan ToCublasLt(const RowMajorGemm& g);

// The three products of a linear layer (weight [OC, C], row-major, as
// torch.nn.Linear): out[N,OC] = inp W^T; dinp[N,C] = dout W; dW[OC,C] = dout^T inp.
RowMajorGemm LinearForwardGemm(int64_t N, int64_t C, int64_t OC);
RowMajorGemm LinearBackwardInputGemm(int64_t N, int64_t C, int64_t OC);
RowMajorGemm LinearBackwardWeightGemm(int64_t N, int64_t C, int64_t OC);

// Attention products over the permuted per-head buffers q, k, v, y [B*NH, T, hs]
// and scores/probabilities [B*NH, T, T], batched over B*NH.
struct AttentionGemms {
  RowMajorGemm scores;  // S = q k^T          (alpha = 1/sqrt(hs))
  RowMajorGemm values;  // y = P v
  RowMajorGemm dprobs;  // dP = dy v^T
  RowMajorGemm dvalues; // dv = P^T dy
  RowMajorGemm dq;      // dq = dS k
  RowMajorGemm dk;      // dk = dS^T q
};
AttentionGemms PlanAttentionGemms(int64_t B, int64_t T, int64_t C, int64_t NH);

// Which cuBLASLt epilogue a forward matmul uses. The aux (pre-GELU) buffer
// needs a leading dimension divisible by 8; otherwise the GELU is applied by
// a separate kernel (kBias or kNone plus BiasGelu).
enum class Epilogue { kNone, kBias, kGelu, kGeluBias, kGeluAux, kGeluAuxBias, kDGelu };
struct ForwardEpiloguePlan {
  Epilogue epilogue = Epilogue::kNone;
  bool separate_gelu_kernel = false;  // GELU (and bias) applied after the product
};
ForwardEpiloguePlan PlanForwardEpilogue(bool has_bias, bool gelu, bool save_pre_gelu,
                                        int64_t aux_ld);
// Backward through GELU fused into dinp = dout W (DGELU): needs C % 8 == 0.
bool CanFuseDGelu(int64_t C);

// ---- index maps shared with the kernels ----------------------------------------

// qkv[B, T, 3C] (q, k, v along the last dim, head h at columns h*hs) <->
// per-head [which][B, NH, T, hs]. Returns the qkv offset of element
// (which, b, h, t, d).
ST_HD int64_t QkvOffset(int64_t which, int64_t b, int64_t h, int64_t t, int64_t d, int64_t T,
                        int64_t C, int64_t hs) {
  return (b * T + t) * 3 * C + which * C + h * hs + d;
}
// Offset of (b, h, t, d) in a [B, NH, T, hs] buffer.
ST_HD int64_t HeadOffset(int64_t b, int64_t h, int64_t t, int64_t d, int64_t NH, int64_t T,
                         int64_t hs) {
  return ((b * NH + h) * T + t) * hs + d;
}

// ---- per-element maths shared with the kernels ----------------------------------

// GELU, tanh approximation (as cpu::GeluForward), in its sigmoid form:
// 0.5 (1 + tanh(u)) == sigmoid(2u), which does not cancel for large negative x.
ST_HD float GeluValue(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-2.0f * u));
}
// d/dx = s + 2 x s (1 - s) du/dx with s = sigmoid(2u).
ST_HD float GeluDerivative(float x) {
  const float kS = 0.7978845608028654f;
  const float u = kS * (x + 0.044715f * x * x * x);
  const float s = 1.0f / (1.0f + expf(-2.0f * u));
  const float du = kS * (1.0f + 3.0f * 0.044715f * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du;
}

// AdamW step constants, computed in double on the host (see cpu::AdamWUpdate).
struct AdamWConstants {
  float inv_bc1 = 1.0f, inv_bc2 = 1.0f, one_minus_b1 = 0.0f, one_minus_b2 = 0.0f;
};
AdamWConstants MakeAdamWConstants(float beta1, float beta2, int64_t t);
// One element of AdamW; updates param, m, v in place.
ST_HD void AdamWElement(float& param, float& m, float& v, float g, float lr, float beta1,
                        float beta2, float eps, float weight_decay, const AdamWConstants& k) {
  const float mi = beta1 * m + k.one_minus_b1 * g;
  const float vi = beta2 * v + k.one_minus_b2 * g * g;
  m = mi;
  v = vi;
  const float mhat = mi * k.inv_bc1;
  const float vhat = vi * k.inv_bc2;
  param -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param);
}

}  // namespace scaletrain::cuda
