// Host-side launch decisions of the CUDA backend (see launch.h).
#include "kernels/cuda/launch.h"

#include <algorithm>

namespace scaletrain::cuda {
namespace {
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

Launch1D ElementwiseLaunch(int64_t n, int block, int64_t max_grid) {
  if (n <= 0) return {0, block};
  return {std::min(CeilDiv(n, block), max_grid), block};
}

RowLaunch WarpPerRowLaunch(int64_t rows, int warps_per_block) {
  RowLaunch l;
  l.warps_per_block = warps_per_block;
  l.block = 32 * warps_per_block;
  l.grid = rows <= 0 ? 0 : CeilDiv(rows, warps_per_block);
  return l;
}

int CrossEntropyBlock(int64_t V) {
  // Enough threads that each walks a few dozen columns of a 50k vocabulary,
  // few enough that small vocabularies do not leave most threads idle.
  if (V >= 16384) return 1024;
  if (V >= 2048) return 512;
  return 128;
}

ColumnReducePlan PlanColumnReduce(int64_t N, int64_t C) {
  ColumnReducePlan p;
  if (N <= 0 || C <= 0) return p;
  p.col_tiles = CeilDiv(C, kColTile);
  // Aim at >= ~512 blocks in all (several per SM of an H100) but keep at
  // least 64 rows per chunk, so each thread sums >= 8 rows before the
  // partials are combined. A function of the shape only: the summation
  // order, hence the result, is the same on every GPU.
  constexpr int64_t kTargetBlocks = 512;
  constexpr int64_t kMinRows = 64;
  const int64_t want_chunks = std::max<int64_t>(1, CeilDiv(kTargetBlocks, p.col_tiles));
  p.rows_per_chunk = std::max(kMinRows, CeilDiv(N, want_chunks));
  p.num_chunks = CeilDiv(N, p.rows_per_chunk);
  return p;
}

size_t MatmulBackwardWorkspaceBytes(int64_t N, int64_t OC) {
  const ColumnReducePlan p = PlanColumnReduce(N, OC);
  return static_cast<size_t>(p.num_chunks * OC) * sizeof(float);
}

size_t LayerNormBackwardWorkspaceBytes(int64_t N, int64_t C) {
  const ColumnReducePlan p = PlanColumnReduce(N, C);
  return static_cast<size_t>(2 * p.num_chunks * C) * sizeof(float);
}

size_t AttentionWorkspaceBytes(int64_t B, int64_t T, int64_t C, DType dtype) {
  return static_cast<size_t>(8 * B * T * C) * DTypeBytes(dtype);
}

EncoderWorkspaceLayout EncoderBackwardWorkspace(int64_t N, int64_t V) {
  // Each part starts on a 256-byte boundary (cudaMalloc's alignment).
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  EncoderWorkspaceLayout w;
  w.counts_offset = 0;
  w.offsets_offset = align(static_cast<size_t>(V) * sizeof(int32_t));
  w.positions_offset = w.offsets_offset + align(static_cast<size_t>(V + 1) * sizeof(int32_t));
  w.total_bytes = w.positions_offset + align(static_cast<size_t>(N) * sizeof(int32_t));
  return w;
}

int64_t SumSquaresGrid(int64_t n) {
  // A fixed function of n (not of the GPU), so the reduction order and the
  // result are reproducible across devices.
  constexpr int64_t kPerBlock = 256 * 16;
  return std::clamp<int64_t>(CeilDiv(n, kPerBlock), 1, 1024);
}

size_t SumSquaresWorkspaceBytes(int64_t n) {
  return static_cast<size_t>(SumSquaresGrid(n)) * sizeof(double);
}

LtGemmPlan ToCublasLt(const RowMajorGemm& g) {
  // A row-major [r, c] matrix with leading dimension ld is the column-major
  // [c, r] matrix with the same ld. So C^T[n, m] = op(B)^T op(A)^T, where
  // op(B)^T is B's storage read column-major with B's own transpose flag.
  LtGemmPlan p;
  p.trans_a = g.trans_b;
  p.trans_b = g.trans_a;
  p.m = g.n;
  p.n = g.m;
  p.k = g.k;
  // First operand (B's storage): op gives [m, k] = [g.n, g.k].
  p.a.rows = p.trans_a ? p.k : p.m;
  p.a.cols = p.trans_a ? p.m : p.k;
  p.a.ld = g.ldb;
  p.a.batch = g.batch;
  p.a.stride = g.stride_b;
  // Second operand (A's storage): op gives [k, n] = [g.k, g.m].
  p.b.rows = p.trans_b ? p.n : p.k;
  p.b.cols = p.trans_b ? p.k : p.n;
  p.b.ld = g.lda;
  p.b.batch = g.batch;
  p.b.stride = g.stride_a;
  p.c.rows = p.m;
  p.c.cols = p.n;
  p.c.ld = g.ldc;
  p.c.batch = g.batch;
  p.c.stride = g.stride_c;
  return p;
}

RowMajorGemm LinearForwardGemm(int64_t N, int64_t C, int64_t OC) {
  RowMajorGemm g;  // out[N,OC] = inp[N,C] W[OC,C]^T
  g.trans_b = true;
  g.m = N, g.n = OC, g.k = C;
  g.lda = C, g.ldb = C, g.ldc = OC;
  return g;
}

RowMajorGemm LinearBackwardInputGemm(int64_t N, int64_t C, int64_t OC) {
  RowMajorGemm g;  // dinp[N,C] = dout[N,OC] W[OC,C]
  g.m = N, g.n = C, g.k = OC;
  g.lda = OC, g.ldb = C, g.ldc = C;
  return g;
}

RowMajorGemm LinearBackwardWeightGemm(int64_t N, int64_t C, int64_t OC) {
  RowMajorGemm g;  // dW[OC,C] = dout[N,OC]^T inp[N,C]
  g.trans_a = true;
  g.m = OC, g.n = C, g.k = N;
  g.lda = OC, g.ldb = C, g.ldc = C;
  return g;
}

AttentionGemms PlanAttentionGemms(int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const int64_t batch = B * NH;
  const int64_t th = T * hs, tt = T * T;
  auto make = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                  int64_t ldc, int64_t sa, int64_t sb, int64_t sc) {
    RowMajorGemm g;
    g.trans_a = ta, g.trans_b = tb;
    g.m = m, g.n = n, g.k = k;
    g.lda = lda, g.ldb = ldb, g.ldc = ldc;
    g.batch = batch, g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
    return g;
  };
  AttentionGemms a;
  a.scores = make(false, true, T, T, hs, hs, hs, T, th, th, tt);   // q[T,hs] k[T,hs]^T
  a.values = make(false, false, T, hs, T, T, hs, hs, tt, th, th);  // P[T,T] v[T,hs]
  a.dprobs = make(false, true, T, T, hs, hs, hs, T, th, th, tt);   // dy[T,hs] v^T
  a.dvalues = make(true, false, T, hs, T, T, hs, hs, tt, th, th);  // P^T dy
  a.dq = make(false, false, T, hs, T, T, hs, hs, tt, th, th);      // dS k
  a.dk = make(true, false, T, hs, T, T, hs, hs, tt, th, th);       // dS^T q
  return a;
}

ForwardEpiloguePlan PlanForwardEpilogue(bool has_bias, bool gelu, bool save_pre_gelu,
                                        int64_t aux_ld) {
  ForwardEpiloguePlan p;
  if (!gelu) {
    p.epilogue = has_bias ? Epilogue::kBias : Epilogue::kNone;
    return p;
  }
  if (save_pre_gelu) {
    if (aux_ld % 8 == 0) {
      p.epilogue = has_bias ? Epilogue::kGeluAuxBias : Epilogue::kGeluAux;
    } else {
      // cuBLASLt wants the aux leading dimension divisible by 8.
      p.epilogue = has_bias ? Epilogue::kBias : Epilogue::kNone;
      p.separate_gelu_kernel = true;
    }
    return p;
  }
  p.epilogue = has_bias ? Epilogue::kGeluBias : Epilogue::kGelu;
  return p;
}

bool CanFuseDGelu(int64_t C) { return C % 8 == 0; }

AdamWConstants MakeAdamWConstants(float beta1, float beta2, int64_t t) {
  const double td = static_cast<double>(t);
  AdamWConstants k;
  k.inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), td)));
  k.inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), td)));
  k.one_minus_b1 = 1.0f - beta1;
  k.one_minus_b2 = 1.0f - beta2;
  return k;
}

}  // namespace scaletrain::cuda
