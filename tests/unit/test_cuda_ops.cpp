// Each CUDA op against the CPU kernel on random inputs, in float32 (relative
// error <= 1e-4) and bfloat16 (<= 1e-2). bf16 inputs are rounded to bf16
// before the CPU reference sees them, so only the GPU's arithmetic and
// output rounding are measured. Outputs are poisoned (NaN) before each run;
// accumulated gradients start from the same random values on both sides.
// Without a GPU every test skips with "no GPU: <reason>".
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops_cuda.h"

namespace scaletrain::cuda {
namespace {

#define CUDA_OK(expr)                                                   \
  do {                                                                  \
    const cudaError_t e_ = (expr);                                      \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)
#define ST_OK(expr)                                      \
  do {                                                   \
    const ::scaletrain::Status st_ = (expr);             \
    ASSERT_TRUE(st_.ok()) << #expr << ": " << st_.message(); \
  } while (0)

template <typename T>
float ToF(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return __bfloat162float(x);
  }
}
template <typename T>
T FromF(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return __float2bfloat16_rn(x);
  }
}
template <typename T>
constexpr float Tolerance() {
  return std::is_same_v<T, float> ? 1e-4f : 1e-2f;
}

// Values representable in T (so CPU and GPU start from the same numbers).
template <typename T>
std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = ToF(FromF<T>(u(rng)));
  return v;
}

// A device buffer of n elements of T, filled with NaN (all bits set).
template <typename E>
class Dev {
 public:
  explicit Dev(size_t n) : n_(n) {
    void* raw = nullptr;
    if (cudaMalloc(&raw, std::max<size_t>(n, 1) * sizeof(E)) == cudaSuccess) {
      p_ = static_cast<E*>(raw);
    }
    Poison();
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() {
    if (p_) cudaFree(p_);
  }
  E* get() const { return p_; }
  void Poison() {
    if (p_) cudaMemset(p_, 0xFF, n_ * sizeof(E));
  }

 private:
  E* p_ = nullptr;
  size_t n_;
};

template <typename T>
void Upload(Dev<T>& d, const std::vector<float>& h) {
  std::vector<T> t(h.size());
  for (size_t i = 0; i < h.size(); ++i) t[i] = FromF<T>(h[i]);
  ASSERT_EQ(cudaMemcpy(d.get(), t.data(), t.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
}
void UploadInts(Dev<int32_t>& d, const std::vector<int32_t>& h) {
  ASSERT_EQ(cudaMemcpy(d.get(), h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
}
template <typename T>
std::vector<float> Download(const Dev<T>& d, size_t n) {
  std::vector<T> t(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(t.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = ToF(t[i]);
  return h;
}

// max |got - want| / max |want|; NaN anywhere (a poisoned output left
// unwritten) gives infinity.
double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, scale = 1e-12;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / scale;
}
#define EXPECT_CLOSE(got, want, tol) EXPECT_LE(RelError(got, want), tol) << #got

template <typename T>
class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      cudaGetLastError();  // clear the sticky error for later tests
      GTEST_SKIP() << "no GPU: "
                   << (err != cudaSuccess ? cudaGetErrorString(err)
                                          : "cudaGetDeviceCount found 0 devices");
    }
    ASSERT_EQ(cudaStreamCreate(&ctx_.stream), cudaSuccess);
    ASSERT_EQ(cublasLtCreate(&ctx_.lt), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaMalloc(&ctx_.lt_workspace, kCublasLtWorkspaceBytes), cudaSuccess);
    ctx_.lt_workspace_bytes = kCublasLtWorkspaceBytes;
  }
  void TearDown() override {
    if (ctx_.lt_workspace) cudaFree(ctx_.lt_workspace);
    if (ctx_.lt) cublasLtDestroy(ctx_.lt);
    if (ctx_.stream) cudaStreamDestroy(ctx_.stream);
  }
  Context ctx_;
};

using Types = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(CudaOps, Types);

TYPED_TEST(CudaOps, Matmul) {
  using T = TypeParam;
  const float tol = Tolerance<T>();
  // OC % 8 == 0 takes the fused epilogues; OC = 30 / C = 42 the fallbacks.
  for (auto [N, C, OC] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{64, 96, 136},
                                                                             {37, 42, 30}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC));
    const auto inp = Random<T>(N * C, 1), w = Random<T>(OC * C, 2), bias = Random<T>(OC, 3);
    const auto dout = Random<T>(N * OC, 4);
    Dev<T> d_inp(N * C), d_w(OC * C), d_bias(OC), d_out(N * OC), d_pre(N * OC), d_dout(N * OC);
    Upload(d_inp, inp);
    Upload(d_w, w);
    Upload(d_bias, bias);
    Upload(d_dout, dout);

    // Plain with bias.
    std::vector<float> out(N * OC);
    cpu::MatmulForward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    ST_OK(MatmulForward<T>(this->ctx_, d_out.get(), nullptr, d_inp.get(), d_w.get(), d_bias.get(),
                           N, C, OC));
    EXPECT_CLOSE(Download(d_out, N * OC), out, tol);
    // Bias + GELU, saving the pre-activation.
    std::vector<float> act(N * OC);
    cpu::GeluForward(act.data(), out.data(), N * OC);
    d_out.Poison();
    ST_OK(MatmulForward<T>(this->ctx_, d_out.get(), d_pre.get(), d_inp.get(), d_w.get(),
                           d_bias.get(), N, C, OC, /*gelu=*/true));
    EXPECT_CLOSE(Download(d_out, N * OC), act, tol);
    EXPECT_CLOSE(Download(d_pre, N * OC), out, tol);

    // Backward, accumulating.
    auto dinp = Random<T>(N * C, 5), dw = Random<T>(OC * C, 6), db = Random<T>(OC, 7);
    Dev<T> d_dinp(N * C), d_dw(OC * C), d_db(OC);
    Upload(d_dinp, dinp);
    Upload(d_dw, dw);
    Upload(d_db, db);
    Dev<float> ws(MatmulBackwardWorkspaceBytes(N, OC) / 4);
    cpu::MatmulBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N,
                        C, OC);
    ST_OK(MatmulBackward<T>(this->ctx_, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(),
                            d_inp.get(), d_w.get(), ws.get(), N, C, OC));
    EXPECT_CLOSE(Download(d_dinp, N * C), dinp, tol);
    EXPECT_CLOSE(Download(d_dw, OC * C), dw, tol);
    EXPECT_CLOSE(Download(d_db, OC), db, tol);

    // Backward through a GELU before this layer: dinp = gelu'(pre) * (dout W).
    const auto pre = Random<T>(N * C, 8, -3.0f, 3.0f);
    Dev<T> d_gpre(N * C);
    Upload(d_gpre, pre);
    std::vector<float> tmp(N * C, 0.0f), want(N * C, 0.0f);
    cpu::MatmulBackward(tmp.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
    cpu::GeluBackward(want.data(), pre.data(), tmp.data(), N * C);
    d_dinp.Poison();
    ST_OK(MatmulBackward<T>(this->ctx_, d_dinp.get(), nullptr, nullptr, d_dout.get(), d_inp.get(),
                            d_w.get(), nullptr, N, C, OC, d_gpre.get()));
    EXPECT_CLOSE(Download(d_dinp, N * C), want, tol);
  }
}

TYPED_TEST(CudaOps, LayerNorm) {
  using T = TypeParam;
  const float tol = Tolerance<T>();
  const int64_t N = 33, C = 100;
  const auto x = Random<T>(N * C, 10, -2.0f, 3.0f), w = Random<T>(C, 11), b = Random<T>(C, 12);
  const auto dout = Random<T>(N * C, 13);
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  Dev<T> d_x(N * C), d_w(C), d_b(C), d_out(N * C), d_dout(N * C);
  Dev<float> d_mean(N), d_rstd(N);
  Upload(d_x, x);
  Upload(d_w, w);
  Upload(d_b, b);
  Upload(d_dout, dout);
  ST_OK(LayerNormForward<T>(this->ctx_, d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(),
                            d_w.get(), d_b.get(), N, C));
  EXPECT_CLOSE(Download(d_out, N * C), out, tol);
  EXPECT_CLOSE(Download(d_mean, N), mean, 1e-4);  // statistics are fp32 either way
  EXPECT_CLOSE(Download(d_rstd, N), rstd, 1e-4);

  auto dx = Random<T>(N * C, 14), dw = Random<T>(C, 15), db = Random<T>(C, 16);
  Dev<T> d_dx(N * C), d_dw(C), d_db(C);
  Upload(d_dx, dx);
  Upload(d_dw, dw);
  Upload(d_db, db);
  Dev<float> ws(LayerNormBackwardWorkspaceBytes(N, C) / 4);
  cpu::LayerNormBackward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  ST_OK(LayerNormBackward<T>(this->ctx_, d_dx.get(), d_dw.get(), d_db.get(), d_dout.get(),
                             d_x.get(), d_w.get(), d_mean.get(), d_rstd.get(), ws.get(), N, C));
  EXPECT_CLOSE(Download(d_dx, N * C), dx, tol);
  EXPECT_CLOSE(Download(d_dw, C), dw, tol);
  EXPECT_CLOSE(Download(d_db, C), db, tol);
}

TYPED_TEST(CudaOps, GeluAndResidual) {
  using T = TypeParam;
  const float tol = Tolerance<T>();
  const int64_t n = 10007;
  const auto x = Random<T>(n, 20, -5.0f, 5.0f), y = Random<T>(n, 21), dout = Random<T>(n, 22);
  Dev<T> d_x(n), d_y(n), d_out(n), d_dout(n);
  Upload(d_x, x);
  Upload(d_y, y);
  Upload(d_dout, dout);
  std::vector<float> out(n);
  cpu::GeluForward(out.data(), x.data(), n);
  ST_OK(GeluForward<T>(this->ctx_, d_out.get(), d_x.get(), n));
  EXPECT_CLOSE(Download(d_out, n), out, tol);

  auto dx = Random<T>(n, 23);
  Dev<T> d_dx(n);
  Upload(d_dx, dx);
  cpu::GeluBackward(dx.data(), x.data(), dout.data(), n);
  ST_OK(GeluBackward<T>(this->ctx_, d_dx.get(), d_x.get(), d_dout.get(), n));
  EXPECT_CLOSE(Download(d_dx, n), dx, tol);

  d_out.Poison();
  cpu::ResidualForward(out.data(), x.data(), y.data(), n);
  ST_OK(ResidualForward<T>(this->ctx_, d_out.get(), d_x.get(), d_y.get(), n));
  EXPECT_CLOSE(Download(d_out, n), out, tol);

  auto da = Random<T>(n, 24), db = Random<T>(n, 25);
  Dev<T> d_da(n), d_db(n);
  Upload(d_da, da);
  Upload(d_db, db);
  cpu::ResidualBackward(da.data(), db.data(), dout.data(), n);
  ST_OK(ResidualBackward<T>(this->ctx_, d_da.get(), d_db.get(), d_dout.get(), n));
  EXPECT_CLOSE(Download(d_da, n), da, tol);
  EXPECT_CLOSE(Download(d_db, n), db, tol);
}

TYPED_TEST(CudaOps, Encoder) {
  using T = TypeParam;
  const float tol = Tolerance<T>();
  const int64_t B = 3, Tn = 16, C = 40, V = 50;
  std::mt19937 rng(30);
  std::vector<int32_t> tokens(B * Tn);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % 7) * 7;  // many repeats
  const auto wte = Random<T>(V * C, 31), wpe = Random<T>(Tn * C, 32);
  const auto dout = Random<T>(B * Tn * C, 33);
  Dev<int32_t> d_tok(B * Tn);
  UploadInts(d_tok, tokens);
  Dev<T> d_wte(V * C), d_wpe(Tn * C), d_out(B * Tn * C), d_dout(B * Tn * C);
  Upload(d_wte, wte);
  Upload(d_wpe, wpe);
  Upload(d_dout, dout);
  std::vector<float> out(B * Tn * C);
  cpu::EncoderForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
  ST_OK(EncoderForward<T>(this->ctx_, d_out.get(), d_tok.get(), d_wte.get(), d_wpe.get(), B, Tn,
                          C));
  EXPECT_CLOSE(Download(d_out, B * Tn * C), out, tol);

  const auto dwte0 = Random<T>(V * C, 34), dwpe0 = Random<T>(Tn * C, 35);
  auto dwte = dwte0, dwpe = dwpe0;
  cpu::EncoderBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C);
  const EncoderWorkspaceLayout layout = EncoderBackwardWorkspace(B * Tn, V);
  Dev<char> ws(layout.total_bytes);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Dev<T> d_dwte(V * C), d_dwpe(Tn * C);
    Upload(d_dwte, dwte0);
    Upload(d_dwpe, dwpe0);
    ws.Poison();
    ST_OK(EncoderBackward<T>(this->ctx_, d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tok.get(),
                             ws.get(), B, Tn, C, V));
    const auto got = Download(d_dwte, V * C);
    EXPECT_CLOSE(got, dwte, tol);
    EXPECT_CLOSE(Download(d_dwpe, Tn * C), dwpe, tol);
    if (run == 0) {
      first = got;
    } else {
      EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * 4)) << "not deterministic";
    }
  }
}

TYPED_TEST(CudaOps, Attention) {
  using T = TypeParam;
  const float tol = Tolerance<T>();
  const int64_t B = 2, Tn = 64, C = 64, NH = 4;
  const int64_t n = B * Tn * C, natt = B * NH * Tn * Tn;
  const auto qkv = Random<T>(3 * n, 40), dout = Random<T>(n, 41);
  std::vector<float> out(n), att(natt);
  cpu::AttentionForward(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
  Dev<T> d_qkv(3 * n), d_out(n), d_att(natt), d_datt(natt), d_dout(n), d_dqkv(3 * n);
  Dev<T> ws(AttentionWorkspaceBytes(B, Tn, C, std::is_same_v<T, float> ? DType::kF32
                                                                       : DType::kBF16) /
            sizeof(T));
  Upload(d_qkv, qkv);
  Upload(d_dout, dout);
  ST_OK(AttentionForward<T>(this->ctx_, d_out.get(), d_att.get(), d_qkv.get(), ws.get(), B, Tn, C,
                            NH));
  const auto att_gpu = Download(d_att, natt);
  EXPECT_CLOSE(att_gpu, att, tol);
  EXPECT_CLOSE(Download(d_out, n), out, tol);
  for (int64_t r = 0; r < B * NH * Tn; ++r) {  // exact zeros above the diagonal
    for (int64_t j = r % Tn + 1; j < Tn; ++j) ASSERT_EQ(att_gpu[r * Tn + j], 0.0f);
  }

  auto dqkv = Random<T>(3 * n, 42);
  Upload(d_dqkv, dqkv);
  std::vector<float> datt(natt);
  cpu::AttentionBackward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, Tn, C,
                         NH);
  ST_OK(AttentionBackward<T>(this->ctx_, d_dqkv.get(), d_datt.get(), d_dout.get(), d_qkv.get(),
                             d_att.get(), ws.get(), B, Tn, C, NH));
  EXPECT_CLOSE(Download(d_dqkv, 3 * n), dqkv, tol);
}

TYPED_TEST(CudaOps, CrossEntropy) {
  using T = TypeParam;
  const float tol = Tolerance<T>();
  const int64_t N = 17, V = 1000, Vp = 1024;
  const float dloss = 1.0f / N;
  auto logits = Random<T>(N * Vp, 50, -4.0f, 4.0f);
  std::mt19937 rng(51);
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % V);
  std::vector<float> losses(N), probs(N * Vp), dlogits(N * Vp);
  cpu::CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  cpu::CrossEntropyBackward(dlogits.data(), probs.data(), targets.data(), dloss, N, V, Vp);
  Dev<T> d_logits(N * Vp), d_probs(N * Vp);
  Dev<float> d_losses(N);
  Dev<int32_t> d_tgt(N);
  Upload(d_logits, logits);
  UploadInts(d_tgt, targets);
  ST_OK(CrossEntropyForward<T>(this->ctx_, d_losses.get(), d_probs.get(), d_logits.get(),
                               d_tgt.get(), N, V, Vp));
  EXPECT_CLOSE(Download(d_losses, N), losses, tol);
  EXPECT_CLOSE(Download(d_probs, N * Vp), probs, tol);
  // Backward in place over probs.
  ST_OK(CrossEntropyBackward<T>(this->ctx_, d_probs.get(), d_probs.get(), d_tgt.get(), dloss, N,
                                V, Vp));
  EXPECT_CLOSE(Download(d_probs, N * Vp), dlogits, tol);
  // Fused, in place over the logits.
  d_losses.Poison();
  ST_OK(CrossEntropyFused<T>(this->ctx_, d_losses.get(), d_logits.get(), d_logits.get(),
                             d_tgt.get(), dloss, N, V, Vp));
  EXPECT_CLOSE(Download(d_losses, N), losses, tol);
  EXPECT_CLOSE(Download(d_logits, N * Vp), dlogits, tol);
}

TYPED_TEST(CudaOps, AdamWAndSumSquares) {
  using T = TypeParam;
  const int64_t n = 100003;
  auto param = Random<float>(n, 60), m = Random<float>(n, 61, -0.1f, 0.1f);
  auto v = Random<float>(n, 62, 0.0f, 0.1f);
  const auto grad = Random<T>(n, 63);
  Dev<float> d_p(n), d_m(n), d_v(n);
  Dev<T> d_g(n), d_copy(n);
  Upload(d_p, param);
  Upload(d_m, m);
  Upload(d_v, v);
  Upload(d_g, grad);
  cpu::AdamWUpdate(param.data(), grad.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
                   0.1f, 3, 0.5f);
  ST_OK(AdamWUpdate<T>(this->ctx_, d_p.get(), d_copy.get(), d_g.get(), d_m.get(), d_v.get(), n,
                       1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f));
  // fp32 state on both sides: fp32 tolerance whatever T is.
  EXPECT_CLOSE(Download(d_p, n), param, 1e-4);
  EXPECT_CLOSE(Download(d_m, n), m, 1e-4);
  EXPECT_CLOSE(Download(d_v, n), v, 1e-4);
  EXPECT_CLOSE(Download(d_copy, n), param, Tolerance<T>());

  const double want = cpu::SumSquares(grad.data(), n);
  Dev<double> d_sum(1), d_ws(SumSquaresWorkspaceBytes(n) / 8);
  double got[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    d_sum.Poison();
    ST_OK(SumSquares<T>(this->ctx_, d_sum.get(), d_g.get(), n, d_ws.get()));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(&got[run], d_sum.get(), sizeof(double), cudaMemcpyDeviceToHost));
  }
  EXPECT_NEAR(got[0], want, 1e-9 * want);
  EXPECT_EQ(std::memcmp(&got[0], &got[1], sizeof(double)), 0) << "not reproducible";
}

}  // namespace
}  // namespace scaletrain::cuda
