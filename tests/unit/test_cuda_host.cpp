// Host-side logic of the CUDA backend, checked without a GPU: launch shapes
// cover every element exactly once, the cuBLASLt descriptions of the
// row-major products compute what the CPU kernels compute (on a reference
// that follows cuBLASLt's documented column-major semantics), workspace
// sizes, and the per-element maths the kernels share with the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/launch.h"

namespace scaletrain::cuda {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// ---- launch shapes -----------------------------------------------------------

// Emulates the kernels' grid-stride loop and counts visits per element.
std::vector<int> GridStrideVisits(const Launch1D& l, int64_t n) {
  std::vector<int> visits(static_cast<size_t>(n), 0);
  for (int64_t blk = 0; blk < l.grid; ++blk) {
    for (int thr = 0; thr < l.block; ++thr) {
      for (int64_t i = blk * l.block + thr; i < n; i += l.grid * l.block) ++visits[i];
    }
  }
  return visits;
}

TEST(CudaLaunch, ElementwiseCoversEveryElementOnce) {
  for (int64_t n : {1, 31, 255, 256, 257, 1000, 4097}) {
    for (int64_t max_grid : {int64_t{1}, int64_t{3}, kMaxGrid1D}) {
      const Launch1D l = ElementwiseLaunch(n, 256, max_grid);
      ASSERT_GE(l.grid, 1);
      ASSERT_LE(l.grid, max_grid);
      const auto visits = GridStrideVisits(l, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[i], 1) << "n=" << n << " i=" << i;
    }
  }
  EXPECT_EQ(ElementwiseLaunch(0).grid, 0);
  // Large n: capped grid (the loop strides over the rest).
  const Launch1D big = ElementwiseLaunch(int64_t{1} << 32);
  EXPECT_EQ(big.grid, kMaxGrid1D);
  EXPECT_EQ(ElementwiseLaunch(1000).grid, 4);
}

TEST(CudaLaunch, WarpPerRowCoversEveryRow) {
  for (int64_t rows : {1, 7, 8, 9, 1024, 12 * 1024 + 3}) {
    const RowLaunch l = WarpPerRowLaunch(rows);
    EXPECT_EQ(l.block, 32 * l.warps_per_block);
    std::vector<int> visits(static_cast<size_t>(rows), 0);
    for (int64_t blk = 0; blk < l.grid; ++blk) {
      for (int thr = 0; thr < l.block; thr += 32) {
        const int64_t row = blk * (l.block / 32) + thr / 32;  // as the kernels compute it
        if (row < rows) ++visits[row];
      }
    }
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(visits[r], 1) << rows;
    EXPECT_LT((l.grid - 1) * l.warps_per_block, rows);  // no block entirely idle
  }
  EXPECT_EQ(WarpPerRowLaunch(0).grid, 0);
}

TEST(CudaLaunch, CrossEntropyBlockIsWarpMultipleWithinLimit) {
  for (int64_t V : {2, 100, 2048, 50257, 50304}) {
    const int b = CrossEntropyBlock(V);
    EXPECT_EQ(b % 32, 0);
    EXPECT_LE(b, 1024);  // BlockMaxSum keeps one slot per warp: at most 32 warps
  }
}

TEST(CudaLaunch, ColumnReduceChunksCoverRowsAndColumns) {
  for (auto [N, C] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 33}, {64, 768}, {65, 768}, {8192, 768}, {16384, 3072}, {1000, 50304}}) {
    const ColumnReducePlan p = PlanColumnReduce(N, C);
    EXPECT_GE(p.col_tiles * kColTile, C);
    EXPECT_LT((p.col_tiles - 1) * kColTile, C);
    std::vector<int> rows(static_cast<size_t>(N), 0);
    for (int64_t chunk = 0; chunk < p.num_chunks; ++chunk) {
      const int64_t r0 = chunk * p.rows_per_chunk;
      const int64_t r1 = std::min(N, r0 + p.rows_per_chunk);
      ASSERT_LT(r0, N) << "empty chunk " << chunk;
      for (int64_t y = 0; y < kRowThreads; ++y) {
        for (int64_t r = r0 + y; r < r1; r += kRowThreads) ++rows[r];
      }
    }
    for (int64_t r = 0; r < N; ++r) ASSERT_EQ(rows[r], 1) << N << "x" << C << " row " << r;
    EXPECT_EQ(MatmulBackwardWorkspaceBytes(N, C), size_t(p.num_chunks * C) * 4);
    EXPECT_EQ(LayerNormBackwardWorkspaceBytes(N, C), size_t(2 * p.num_chunks * C) * 4);
  }
  // GPT-2 124M bias gradient, B*T = 8 * 1024 rows: 24 column tiles,
  // 22 chunks of 373 rows.
  const ColumnReducePlan g = PlanColumnReduce(8192, 768);
  EXPECT_EQ(g.col_tiles, 24);
  EXPECT_EQ(g.rows_per_chunk, 373);
  EXPECT_EQ(g.num_chunks, 22);
}

TEST(CudaLaunch, SumSquaresGridIsAFunctionOfNOnly) {
  EXPECT_EQ(SumSquaresGrid(0), 1);
  EXPECT_EQ(SumSquaresGrid(1), 1);
  EXPECT_EQ(SumSquaresGrid(4096), 1);
  EXPECT_EQ(SumSquaresGrid(4097), 2);
  EXPECT_EQ(SumSquaresGrid(124'000'000), 1024);
  EXPECT_EQ(SumSquaresWorkspaceBytes(4097), 16u);
}

// ---- workspaces ----------------------------------------------------------------

TEST(CudaWorkspace, ExactSizes) {
  EXPECT_EQ(kCublasLtWorkspaceBytes, 33554432u);
  // 8 buffers of B*T*C: q, k, v, y, dy, dq, dk, dv.
  EXPECT_EQ(AttentionWorkspaceBytes(4, 1024, 768, DType::kBF16), 8u * 4 * 1024 * 768 * 2);
  EXPECT_EQ(AttentionWorkspaceBytes(1, 2, 3, DType::kF32), 8u * 6 * 4);
  const EncoderWorkspaceLayout w = EncoderBackwardWorkspace(8192, 50304);
  EXPECT_EQ(w.counts_offset, 0u);
  EXPECT_EQ(w.offsets_offset, 201216u);                  // 50304*4, 256-aligned
  EXPECT_EQ(w.positions_offset, 201216u + 201472u);      // 50305*4 -> 201472
  EXPECT_EQ(w.total_bytes, 201216u + 201472u + 32768u);  // 8192*4
  // Odd sizes: parts aligned, disjoint, each big enough.
  const EncoderWorkspaceLayout o = EncoderBackwardWorkspace(7, 5);
  EXPECT_EQ(o.offsets_offset % 256, 0u);
  EXPECT_EQ(o.positions_offset % 256, 0u);
  EXPECT_GE(o.offsets_offset, 5u * 4);
  EXPECT_GE(o.positions_offset - o.offsets_offset, 6u * 4);
  EXPECT_GE(o.total_bytes - o.positions_offset, 7u * 4);
}

// ---- cuBLASLt descriptions ---------------------------------------------------------

// D = alpha op(A) op(B) + beta C in cuBLASLt's column-major convention,
// reading each operand through the layout the plan gives it (element (r, c)
// of a stored matrix at r + c*ld). Checks the layouts are consistent first.
void LtReference(const LtGemmPlan& p, const float* A, const float* B, float* C, float alpha,
                 float beta, const float* bias = nullptr) {
  ASSERT_EQ(p.trans_a ? p.a.cols : p.a.rows, p.m);
  ASSERT_EQ(p.trans_a ? p.a.rows : p.a.cols, p.k);
  ASSERT_EQ(p.trans_b ? p.b.cols : p.b.rows, p.k);
  ASSERT_EQ(p.trans_b ? p.b.rows : p.b.cols, p.n);
  ASSERT_EQ(p.c.rows, p.m);
  ASSERT_EQ(p.c.cols, p.n);
  ASSERT_GE(p.a.ld, p.a.rows);
  ASSERT_GE(p.b.ld, p.b.rows);
  ASSERT_GE(p.c.ld, p.c.rows);
  ASSERT_EQ(p.a.batch, p.c.batch);
  ASSERT_EQ(p.b.batch, p.c.batch);
  for (int64_t bt = 0; bt < p.c.batch; ++bt) {
    const float* a = A + bt * p.a.stride;
    const float* b = B + bt * p.b.stride;
    float* c = C + bt * p.c.stride;
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0.0;
        for (int64_t l = 0; l < p.k; ++l) {
          const float av = p.trans_a ? a[l + i * p.a.ld] : a[i + l * p.a.ld];
          const float bv = p.trans_b ? b[j + l * p.b.ld] : b[l + j * p.b.ld];
          s += static_cast<double>(av) * bv;
        }
        float& d = c[i + j * p.c.ld];
        d = alpha * static_cast<float>(s) + (beta == 0.0f ? 0.0f : beta * d);
        if (bias != nullptr) d += bias[i];  // cuBLASLt's bias: one value per row of D
      }
    }
  }
}

// As detail::RunRowMajorGemm: the row-major operands swap places.
void RowMajorViaLt(const RowMajorGemm& g, const float* A, const float* B, float* C, float alpha,
                   float beta, const float* bias = nullptr) {
  LtReference(ToCublasLt(g), B, A, C, alpha, beta, bias);
}

TEST(CudaGemmPlan, SwapsOperandsAndDimensions) {
  const LtGemmPlan p = ToCublasLt(LinearForwardGemm(/*N=*/6, /*C=*/4, /*OC=*/10));
  // out^T[OC, N] = W[OC, C] (col-major view of row-major W is [C, OC], transposed)
  //               x inp^T[C, N] (col-major view of row-major inp).
  EXPECT_TRUE(p.trans_a);
  EXPECT_FALSE(p.trans_b);
  EXPECT_EQ(p.m, 10);
  EXPECT_EQ(p.n, 6);
  EXPECT_EQ(p.k, 4);
  EXPECT_EQ(p.a.rows, 4);
  EXPECT_EQ(p.a.cols, 10);
  EXPECT_EQ(p.a.ld, 4);
  EXPECT_EQ(p.b.rows, 4);
  EXPECT_EQ(p.b.cols, 6);
  EXPECT_EQ(p.b.ld, 4);
  EXPECT_EQ(p.c.rows, 10);
  EXPECT_EQ(p.c.cols, 6);
  EXPECT_EQ(p.c.ld, 10);  // the GELU aux buffer shares this ld: OC
}

TEST(CudaGemmPlan, LinearProductsMatchCpuKernels) {
  const int64_t N = 7, C = 5, OC = 9;
  const auto inp = Random(N * C, 1), w = Random(OC * C, 2), bias = Random(OC, 3);
  const auto dout = Random(N * OC, 4);

  std::vector<float> out_cpu(N * OC), out_lt(N * OC, 123.0f);
  cpu::MatmulForward(out_cpu.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  RowMajorViaLt(LinearForwardGemm(N, C, OC), inp.data(), w.data(), out_lt.data(), 1.0f, 0.0f,
                bias.data());
  EXPECT_LT(MaxAbsDiff(out_cpu, out_lt), 1e-5f);

  // Backward accumulates: start both from the same non-zero gradients.
  auto dinp_cpu = Random(N * C, 5), dw_cpu = Random(OC * C, 6);
  auto dinp_lt = dinp_cpu, dw_lt = dw_cpu;
  cpu::MatmulBackward(dinp_cpu.data(), dw_cpu.data(), nullptr, dout.data(), inp.data(), w.data(),
                      N, C, OC);
  RowMajorViaLt(LinearBackwardInputGemm(N, C, OC), dout.data(), w.data(), dinp_lt.data(), 1.0f,
                1.0f);
  RowMajorViaLt(LinearBackwardWeightGemm(N, C, OC), dout.data(), inp.data(), dw_lt.data(), 1.0f,
                1.0f);
  EXPECT_LT(MaxAbsDiff(dinp_cpu, dinp_lt), 1e-5f);
  EXPECT_LT(MaxAbsDiff(dw_cpu, dw_lt), 1e-5f);
}

// The attention pipeline of attention.cu, with the products run through the
// plans on the reference above and the kernels' index maps, against
// cpu::AttentionForward/Backward.
TEST(CudaGemmPlan, AttentionProductsMatchCpuKernels) {
  const int64_t B = 2, T = 6, C = 12, NH = 3, hs = C / NH;
  const int64_t n = B * T * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const auto qkv = Random(B * T * 3 * C, 7);
  const auto dout = Random(n, 8);

  std::vector<float> out_cpu(n), att_cpu(B * NH * T * T);
  cpu::AttentionForward(out_cpu.data(), att_cpu.data(), qkv.data(), B, T, C, NH);

  std::vector<float> q(n), k(n), v(n), y(n), att(B * NH * T * T, -7.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hs; ++d) {
          const int64_t i = HeadOffset(b, h, t, d, NH, T, hs);
          q[i] = qkv[QkvOffset(0, b, h, t, d, T, C, hs)];
          k[i] = qkv[QkvOffset(1, b, h, t, d, T, C, hs)];
          v[i] = qkv[QkvOffset(2, b, h, t, d, T, C, hs)];
        }
  const AttentionGemms g = PlanAttentionGemms(B, T, C, NH);
  RowMajorViaLt(g.scores, q.data(), k.data(), att.data(), scale, 0.0f);
  for (int64_t row = 0; row < B * NH * T; ++row) {  // causal softmax as the kernel does it
    const int64_t t = row % T;
    float* a = att.data() + row * T;
    const float mx = *std::max_element(a, a + t + 1);
    float sum = 0.0f;
    for (int64_t j = 0; j <= t; ++j) sum += std::exp(a[j] - mx);
    for (int64_t j = 0; j < T; ++j) a[j] = j <= t ? std::exp(a[j] - mx) / sum : 0.0f;
  }
  RowMajorViaLt(g.values, att.data(), v.data(), y.data(), 1.0f, 0.0f);
  std::vector<float> out(n);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hs; ++d)
          out[(b * T + t) * C + h * hs + d] = y[HeadOffset(b, h, t, d, NH, T, hs)];
  EXPECT_LT(MaxAbsDiff(att_cpu, att), 1e-5f);
  EXPECT_LT(MaxAbsDiff(out_cpu, out), 1e-5f);

  // Backward.
  auto dqkv_cpu = Random(B * T * 3 * C, 9);
  auto dqkv = dqkv_cpu;
  std::vector<float> datt_cpu(B * NH * T * T);
  cpu::AttentionBackward(dqkv_cpu.data(), datt_cpu.data(), dout.data(), qkv.data(),
                         att_cpu.data(), B, T, C, NH);
  std::vector<float> dy(n), datt(B * NH * T * T), dq(n), dk(n), dv(n);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hs; ++d)
          dy[HeadOffset(b, h, t, d, NH, T, hs)] = dout[(b * T + t) * C + h * hs + d];
  RowMajorViaLt(g.dprobs, dy.data(), v.data(), datt.data(), 1.0f, 0.0f);
  RowMajorViaLt(g.dvalues, att.data(), dy.data(), dv.data(), 1.0f, 0.0f);
  for (int64_t row = 0; row < B * NH * T; ++row) {
    const int64_t t = row % T;
    const float* p = att.data() + row * T;
    float* d = datt.data() + row * T;
    float dot = 0.0f;
    for (int64_t j = 0; j <= t; ++j) dot += p[j] * d[j];
    for (int64_t j = 0; j < T; ++j) d[j] = j <= t ? scale * p[j] * (d[j] - dot) : 0.0f;
  }
  RowMajorViaLt(g.dq, datt.data(), k.data(), dq.data(), 1.0f, 0.0f);
  RowMajorViaLt(g.dk, datt.data(), q.data(), dk.data(), 1.0f, 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hs; ++d) {
          const int64_t i = HeadOffset(b, h, t, d, NH, T, hs);
          dqkv[QkvOffset(0, b, h, t, d, T, C, hs)] += dq[i];
          dqkv[QkvOffset(1, b, h, t, d, T, C, hs)] += dk[i];
          dqkv[QkvOffset(2, b, h, t, d, T, C, hs)] += dv[i];
        }
  EXPECT_LT(MaxAbsDiff(dqkv_cpu, dqkv), 1e-5f);
}

TEST(CudaGemmPlan, QkvAndHeadOffsetsAreBijections) {
  const int64_t B = 2, T = 3, C = 8, NH = 2, hs = C / NH;
  std::set<int64_t> qkv_seen, head_seen;
  for (int64_t w = 0; w < 3; ++w)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < hs; ++d) {
            qkv_seen.insert(QkvOffset(w, b, h, t, d, T, C, hs));
            if (w == 0) head_seen.insert(HeadOffset(b, h, t, d, NH, T, hs));
          }
  EXPECT_EQ(qkv_seen.size(), size_t(B * T * 3 * C));
  EXPECT_EQ(*qkv_seen.rbegin(), B * T * 3 * C - 1);
  EXPECT_EQ(head_seen.size(), size_t(B * T * C));
  EXPECT_EQ(*head_seen.rbegin(), B * T * C - 1);
}

TEST(CudaGemmPlan, EpilogueChoice) {
  EXPECT_EQ(PlanForwardEpilogue(false, false, false, 768).epilogue, Epilogue::kNone);
  EXPECT_EQ(PlanForwardEpilogue(true, false, false, 768).epilogue, Epilogue::kBias);
  EXPECT_EQ(PlanForwardEpilogue(true, true, false, 3072).epilogue, Epilogue::kGeluBias);
  EXPECT_EQ(PlanForwardEpilogue(false, true, false, 3072).epilogue, Epilogue::kGelu);
  EXPECT_EQ(PlanForwardEpilogue(true, true, true, 3072).epilogue, Epilogue::kGeluAuxBias);
  EXPECT_EQ(PlanForwardEpilogue(false, true, true, 3072).epilogue, Epilogue::kGeluAux);
  // aux ld not divisible by 8: cuBLASLt refuses, GELU goes to its own kernel.
  const ForwardEpiloguePlan odd = PlanForwardEpilogue(true, true, true, 3070);
  EXPECT_EQ(odd.epilogue, Epilogue::kBias);
  EXPECT_TRUE(odd.separate_gelu_kernel);
  EXPECT_FALSE(PlanForwardEpilogue(true, true, true, 3072).separate_gelu_kernel);
  EXPECT_TRUE(CanFuseDGelu(768));
  EXPECT_FALSE(CanFuseDGelu(770));
}

// ---- per-element maths ----------------------------------------------------------------

TEST(CudaElementMath, GeluMatchesCpu) {
  std::vector<float> x = Random(4096, 10, 8.0f);
  x.push_back(-20.0f);
  x.push_back(20.0f);
  x.push_back(0.0f);
  std::vector<float> y_cpu(x.size()), dx_cpu(x.size(), 0.5f);
  const std::vector<float> dy(x.size(), 1.0f);
  cpu::GeluForward(y_cpu.data(), x.data(), static_cast<int64_t>(x.size()));
  cpu::GeluBackward(dx_cpu.data(), x.data(), dy.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(GeluValue(x[i]), y_cpu[i], 1e-5f * (1.0f + std::abs(y_cpu[i]))) << x[i];
    EXPECT_NEAR(0.5f + GeluDerivative(x[i]), dx_cpu[i], 1e-5f) << x[i];
  }
}

TEST(CudaElementMath, AdamWMatchesCpu) {
  const int64_t n = 1000;
  for (int64_t t : {1, 2, 1000}) {
    auto p_cpu = Random(n, 11), m_cpu = Random(n, 12, 0.1f), v_cpu = Random(n, 13, 0.1f);
    for (auto& x : v_cpu) x = std::abs(x);
    const auto grad = Random(n, 14);
    auto p = p_cpu, m = m_cpu, v = v_cpu;
    cpu::AdamWUpdate(p_cpu.data(), grad.data(), m_cpu.data(), v_cpu.data(), n, 3e-4f, 0.9f,
                     0.95f, 1e-8f, 0.1f, t, 0.5f);
    const AdamWConstants k = MakeAdamWConstants(0.9f, 0.95f, t);
    for (int64_t i = 0; i < n; ++i) {
      AdamWElement(p[i], m[i], v[i], grad[i] * 0.5f, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, k);
    }
    EXPECT_LT(MaxAbsDiff(p_cpu, p), 1e-6f) << t;
    EXPECT_LT(MaxAbsDiff(m_cpu, m), 1e-7f) << t;
    EXPECT_LT(MaxAbsDiff(v_cpu, v), 1e-7f) << t;
  }
  // Bias corrections in double: at t = 1, 1/(1 - 0.999) = 1000 exactly-ish.
  EXPECT_NEAR(MakeAdamWConstants(0.9f, 0.999f, 1).inv_bc2, 1000.0f, 0.05f);
}

}  // namespace
}  // namespace scaletrain::cuda
