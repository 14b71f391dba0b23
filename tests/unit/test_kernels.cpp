// CPU kernels against independent float64 references written here: forward
// outputs compared directly, backward compared with central finite
// differences of L = sum(r * out) taken on the float64 reference (so a wrong
// backward cannot agree with a wrong forward by sharing its mistake).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {
namespace {

using namespace test;  // VecF, VecD, RandomVec, the tolerances (kernel_test_util.h)

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<int32_t> RandomTokens(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(gen);
  return v;
}

VecD ToDouble(const VecF& v) { return VecD(v.begin(), v.end()); }

double MaxAbs(const VecD& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// max |got - want| <= tol * max|want| (max|want| taken as 1 if want is all
// zero). NaN in got fails, since the comparison is written so that it must
// be true.
::testing::AssertionResult AllClose(const VecF& got, const VecD& want, double tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs reference " << want.size();
  }
  double scale = MaxAbs(want);
  if (scale == 0.0) scale = 1.0;
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (std::isnan(err)) {
      return ::testing::AssertionFailure()
             << "element " << i << " is " << got[i] << ", reference " << want[i];
    }
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  if (worst <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max error " << worst << " at element " << worst_i << " (got " << got[worst_i]
         << ", reference " << want[worst_i] << "), allowed " << tol * scale << " = " << tol
         << " * max|reference| " << scale;
}

double Dot(const VecD& a, const VecD& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d/dx of sum(r * f(x)) by central differences, for the elements listed in
// `indices` (all if empty); other entries stay 0.
VecD FiniteDiffGrad(const std::function<VecD(const VecD&)>& f, VecD x, const VecD& r,
                    const std::vector<size_t>& indices = {}) {
  VecD grad(x.size(), 0.0);
  auto one = [&](size_t i) {
    const double saved = x[i];
    x[i] = saved + kFdStep;
    const double lp = Dot(r, f(x));
    x[i] = saved - kFdStep;
    const double lm = Dot(r, f(x));
    x[i] = saved;
    grad[i] = (lp - lm) / (2.0 * kFdStep);
  };
  if (indices.empty()) {
    for (size_t i = 0; i < x.size(); ++i) one(i);
  } else {
    for (size_t i : indices) one(i);
  }
  return grad;
}

// Runs `backward` on gradient buffers seeded with random values, once and
// then again, and checks each buffer grew by G and then by G again, with G
// not all zero (else the check would prove nothing).
void ExpectAccumulates(const std::vector<VecF*>& grads, const std::function<void()>& backward) {
  std::vector<VecF> base;
  uint32_t seed = 1000;
  for (VecF* g : grads) {
    *g = RandomVec(static_cast<int64_t>(g->size()), seed++);
    base.push_back(*g);
  }
  backward();
  std::vector<VecF> once;
  for (VecF* g : grads) once.push_back(*g);
  backward();
  for (size_t k = 0; k < grads.size(); ++k) {
    VecD inc1(base[k].size()), want2(base[k].size());
    for (size_t i = 0; i < inc1.size(); ++i) {
      inc1[i] = static_cast<double>(once[k][i]) - base[k][i];
      want2[i] = base[k][i] + 2.0 * inc1[i];
    }
    EXPECT_GT(MaxAbs(inc1), 1e-3) << "gradient " << k << " did not change";
    EXPECT_TRUE(AllClose(*grads[k], want2, 1e-5)) << "gradient " << k;
  }
}

// ---- float64 references ----------------------------------------------------

VecD MatmulRef(const VecD& inp, const VecD& w, const VecD* bias, int64_t N, int64_t C, int64_t OC) {
  VecD out(static_cast<size_t>(N * OC));
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t o = 0; o < OC; ++o) {
      double s = bias != nullptr ? (*bias)[o] : 0.0;
      for (int64_t c = 0; c < C; ++c) s += inp[i * C + c] * w[o * C + c];
      out[i * OC + o] = s;
    }
  }
  return out;
}

struct LayerNormOut {
  VecD out, mean, rstd;
};

LayerNormOut LayerNormRef(const VecD& inp, const VecD& w, const VecD& b, int64_t N, int64_t C) {
  LayerNormOut r{VecD(static_cast<size_t>(N * C)), VecD(N), VecD(N)};
  for (int64_t i = 0; i < N; ++i) {
    double m = 0.0;
    for (int64_t c = 0; c < C; ++c) m += inp[i * C + c];
    m /= static_cast<double>(C);
    double var = 0.0;
    for (int64_t c = 0; c < C; ++c) var += (inp[i * C + c] - m) * (inp[i * C + c] - m);
    var /= static_cast<double>(C);  // biased, as torch.nn.LayerNorm
    const double s = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t c = 0; c < C; ++c) {
      r.out[i * C + c] = (inp[i * C + c] - m) * s * w[c] + b[c];
    }
    r.mean[i] = m;
    r.rstd[i] = s;
  }
  return r;
}

double GeluRef(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

VecD EncoderRef(const std::vector<int32_t>& tokens, const VecD& wte, const VecD& wpe, int64_t B,
                int64_t T, int64_t C) {
  VecD out(static_cast<size_t>(B * T * C));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        out[(b * T + t) * C + c] = wte[tokens[b * T + t] * C + c] + wpe[t * C + c];
      }
    }
  }
  return out;
}

struct AttentionOut {
  VecD out, att;
};

AttentionOut AttentionRef(const VecD& qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  AttentionOut r{VecD(static_cast<size_t>(B * T * C), 0.0),
                 VecD(static_cast<size_t>(B * NH * T * T), 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * 3 * C + h * hs];
        VecD s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          const double* k = &qkv[(b * T + j) * 3 * C + C + h * hs];
          double d = 0.0;
          for (int64_t e = 0; e < hs; ++e) d += q[e] * k[e];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double p = s[j] / sum;
          r.att[((b * NH + h) * T + t) * T + j] = p;
          const double* v = &qkv[(b * T + j) * 3 * C + 2 * C + h * hs];
          for (int64_t e = 0; e < hs; ++e) r.out[(b * T + t) * C + h * hs + e] += p * v[e];
        }
      }
    }
  }
  return r;
}

struct CrossEntropyOut {
  VecD losses, probs;
};

// Reads only the first V columns of each row: the padding is not an input.
CrossEntropyOut CrossEntropyRef(const VecD& logits, const std::vector<int32_t>& targets, int64_t N,
                                int64_t V, int64_t Vp) {
  CrossEntropyOut r{VecD(N), VecD(static_cast<size_t>(N * Vp), 0.0)};
  for (int64_t i = 0; i < N; ++i) {
    double mx = -1e300;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[i * Vp + j]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(logits[i * Vp + j] - mx);
    for (int64_t j = 0; j < V; ++j) r.probs[i * Vp + j] = std::exp(logits[i * Vp + j] - mx) / sum;
    r.losses[i] = std::log(sum) + mx - logits[i * Vp + targets[i]];
  }
  return r;
}

// ---- threads ---------------------------------------------------------------

TEST(KernelThreads, SetAndQuery) {
  const int before = NumThreads();
  SetNumThreads(1);
  EXPECT_EQ(NumThreads(), 1);
  SetNumThreads(3);
  EXPECT_EQ(NumThreads(), 3);
  SetNumThreads(0);
  EXPECT_GE(NumThreads(), 1);
  SetNumThreads(before);
  const std::string info = BlasInfo();
  EXPECT_TRUE(info.find("OpenBLAS") != std::string::npos || info.find("oneDNN") != std::string::npos)
      << info;
  EXPECT_NE(info.find(std::to_string(before) + " threads"), std::string::npos) << info;
}

// ---- matmul ----------------------------------------------------------------

struct MatmulCase {
  int64_t N = 10, C = 8, OC = 12;
  VecF inp = RandomVec(N * C, 1);
  VecF w = RandomVec(OC * C, 2);
  VecF bias = RandomVec(OC, 3);
};

TEST(Matmul, ForwardMatchesReference) {
  MatmulCase m;
  VecF out(m.N * m.OC, kNaN);
  MatmulForward(out.data(), m.inp.data(), m.w.data(), m.bias.data(), m.N, m.C, m.OC);
  const VecD bias = ToDouble(m.bias);
  EXPECT_TRUE(
      AllClose(out, MatmulRef(ToDouble(m.inp), ToDouble(m.w), &bias, m.N, m.C, m.OC), kFwdTol));
  std::fill(out.begin(), out.end(), kNaN);
  MatmulForward(out.data(), m.inp.data(), m.w.data(), nullptr, m.N, m.C, m.OC);
  EXPECT_TRUE(
      AllClose(out, MatmulRef(ToDouble(m.inp), ToDouble(m.w), nullptr, m.N, m.C, m.OC), kFwdTol));
}

// Sizes that are not multiples of any SIMD width or of the bias column block.
TEST(Matmul, ForwardAndBackwardOddLargerShapes) {
  const int64_t N = 37, C = 45, OC = 131;
  const VecF inp = RandomVec(N * C, 11), w = RandomVec(OC * C, 12), bias = RandomVec(OC, 13);
  VecF out(N * OC, kNaN);
  MatmulForward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  const VecD bd = ToDouble(bias), id = ToDouble(inp), wd = ToDouble(w);
  EXPECT_TRUE(AllClose(out, MatmulRef(id, wd, &bd, N, C, OC), kFwdTol));

  // Backward against the closed form (the finite-difference check is on
  // the small shape): dinp = dout W, dW = dout^T inp, db = colsum(dout).
  const VecF dout = RandomVec(N * OC, 14);
  VecF dinp(N * C, 0.0f), dw(OC * C, 0.0f), db(OC, 0.0f);
  MatmulBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  VecD want_dinp(N * C, 0.0), want_dw(OC * C, 0.0), want_db(OC, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t o = 0; o < OC; ++o) {
      const double d = dout[i * OC + o];
      want_db[o] += d;
      for (int64_t c = 0; c < C; ++c) {
        want_dinp[i * C + c] += d * wd[o * C + c];
        want_dw[o * C + c] += d * id[i * C + c];
      }
    }
  }
  EXPECT_TRUE(AllClose(dinp, want_dinp, kFwdTol));
  EXPECT_TRUE(AllClose(dw, want_dw, kFwdTol));
  EXPECT_TRUE(AllClose(db, want_db, kFwdTol));
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  MatmulCase m;
  const VecF dout = RandomVec(m.N * m.OC, 4);
  const VecD r = ToDouble(dout);
  VecF dinp(m.N * m.C, 0.0f), dw(m.OC * m.C, 0.0f), db(m.OC, 0.0f);
  MatmulBackward(dinp.data(), dw.data(), db.data(), dout.data(), m.inp.data(), m.w.data(), m.N, m.C,
                 m.OC);
  const VecD inp = ToDouble(m.inp), w = ToDouble(m.w), bias = ToDouble(m.bias);
  EXPECT_TRUE(AllClose(
      dinp,
      FiniteDiffGrad([&](const VecD& x) { return MatmulRef(x, w, &bias, m.N, m.C, m.OC); }, inp, r),
      kGradTol));
  EXPECT_TRUE(AllClose(
      dw,
      FiniteDiffGrad([&](const VecD& x) { return MatmulRef(inp, x, &bias, m.N, m.C, m.OC); }, w, r),
      kGradTol));
  EXPECT_TRUE(AllClose(
      db,
      FiniteDiffGrad([&](const VecD& x) { return MatmulRef(inp, w, &x, m.N, m.C, m.OC); }, bias, r),
      kGradTol));
}

TEST(Matmul, BackwardSkipsNullGradients) {
  MatmulCase m;
  const VecF dout = RandomVec(m.N * m.OC, 4);
  VecF dw_all(m.OC * m.C, 0.0f), dinp(m.N * m.C, 0.0f), db(m.OC, 0.0f);
  MatmulBackward(dinp.data(), dw_all.data(), db.data(), dout.data(), m.inp.data(), m.w.data(), m.N,
                 m.C, m.OC);
  VecF dw_only(m.OC * m.C, 0.0f);
  MatmulBackward(nullptr, dw_only.data(), nullptr, dout.data(), m.inp.data(), m.w.data(), m.N, m.C,
                 m.OC);
  EXPECT_TRUE(AllClose(dw_only, ToDouble(dw_all), 1e-6));
  VecF dinp_only(m.N * m.C, 0.0f);
  MatmulBackward(dinp_only.data(), nullptr, nullptr, dout.data(), m.inp.data(), m.w.data(), m.N,
                 m.C, m.OC);
  EXPECT_TRUE(AllClose(dinp_only, ToDouble(dinp), 1e-6));
}

TEST(Matmul, BackwardAccumulates) {
  MatmulCase m;
  const VecF dout = RandomVec(m.N * m.OC, 4);
  VecF dinp(m.N * m.C), dw(m.OC * m.C), db(m.OC);
  ExpectAccumulates({&dinp, &dw, &db}, [&] {
    MatmulBackward(dinp.data(), dw.data(), db.data(), dout.data(), m.inp.data(), m.w.data(), m.N,
                   m.C, m.OC);
  });
}

// ---- layernorm -------------------------------------------------------------

struct LayerNormCase {
  int64_t N = 10, C = 8;
  // An offset mean, as in a residual stream, so mean subtraction matters.
  VecF inp = RandomVec(N * C, 21, -0.5f, 1.5f);
  VecF w = RandomVec(C, 22, 0.5f, 1.5f);
  VecF b = RandomVec(C, 23);
};

TEST(LayerNorm, ForwardMatchesReference) {
  LayerNormCase l;
  VecF out(l.N * l.C, kNaN), mean(l.N, kNaN), rstd(l.N, kNaN);
  LayerNormForward(out.data(), mean.data(), rstd.data(), l.inp.data(), l.w.data(), l.b.data(), l.N,
                   l.C);
  const LayerNormOut ref = LayerNormRef(ToDouble(l.inp), ToDouble(l.w), ToDouble(l.b), l.N, l.C);
  EXPECT_TRUE(AllClose(out, ref.out, kFwdTol));
  EXPECT_TRUE(AllClose(mean, ref.mean, kFwdTol));
  EXPECT_TRUE(AllClose(rstd, ref.rstd, kFwdTol));
}

// A common offset 500x the spread: a one-pass E[x^2] - E[x]^2 in float
// loses ~5% of the variance to cancellation here, the two-pass form ~1e-4.
TEST(LayerNorm, ForwardLargeMeanSmallSpread) {
  const int64_t N = 4, C = 64;
  VecF inp = RandomVec(N * C, 24, -0.1f, 0.1f);
  for (float& x : inp) x += 30.0f;
  const VecF w(C, 1.0f), b(C, 0.0f);
  VecF out(N * C, kNaN), mean(N, kNaN), rstd(N, kNaN);
  LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  const LayerNormOut ref = LayerNormRef(ToDouble(inp), ToDouble(w), ToDouble(b), N, C);
  // The float mean of values near 30 is itself rounded by ~1e-6, i.e.
  // ~2e-5 of the spread, so 1e-3 leaves margin only for that.
  EXPECT_TRUE(AllClose(out, ref.out, 1e-3));
  EXPECT_TRUE(AllClose(rstd, ref.rstd, 1e-3));
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  LayerNormCase l;
  VecF out(l.N * l.C), mean(l.N), rstd(l.N);
  LayerNormForward(out.data(), mean.data(), rstd.data(), l.inp.data(), l.w.data(), l.b.data(), l.N,
                   l.C);
  const VecF dout = RandomVec(l.N * l.C, 25);
  const VecD r = ToDouble(dout);
  VecF dinp(l.N * l.C, 0.0f), dw(l.C, 0.0f), db(l.C, 0.0f);
  LayerNormBackward(dinp.data(), dw.data(), db.data(), dout.data(), l.inp.data(), l.w.data(),
                    mean.data(), rstd.data(), l.N, l.C);
  const VecD inp = ToDouble(l.inp), w = ToDouble(l.w), b = ToDouble(l.b);
  EXPECT_TRUE(AllClose(
      dinp,
      FiniteDiffGrad([&](const VecD& x) { return LayerNormRef(x, w, b, l.N, l.C).out; }, inp, r),
      kGradTol));
  EXPECT_TRUE(AllClose(
      dw,
      FiniteDiffGrad([&](const VecD& x) { return LayerNormRef(inp, x, b, l.N, l.C).out; }, w, r),
      kGradTol));
  EXPECT_TRUE(AllClose(
      db,
      FiniteDiffGrad([&](const VecD& x) { return LayerNormRef(inp, w, x, l.N, l.C).out; }, b, r),
      kGradTol));
}

// More rows than threads and a width that is not a SIMD multiple, checked
// against the finite differences on a subset of inputs.
TEST(LayerNorm, BackwardManyRowsOddWidth) {
  const int64_t N = 67, C = 29;
  const VecF inp = RandomVec(N * C, 26), w = RandomVec(C, 27), b = RandomVec(C, 28);
  VecF out(N * C), mean(N), rstd(N);
  LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  const VecF dout = RandomVec(N * C, 29);
  VecF dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  LayerNormBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                    mean.data(), rstd.data(), N, C);
  const VecD id = ToDouble(inp), wd = ToDouble(w), bd = ToDouble(b), r = ToDouble(dout);
  EXPECT_TRUE(AllClose(
      dw, FiniteDiffGrad([&](const VecD& x) { return LayerNormRef(id, x, bd, N, C).out; }, wd, r),
      kGradTol));
  EXPECT_TRUE(AllClose(
      db, FiniteDiffGrad([&](const VecD& x) { return LayerNormRef(id, wd, x, N, C).out; }, bd, r),
      kGradTol));
  // Rows are independent, so a per-row check of a few rows covers dinp.
  for (int64_t i : {int64_t{0}, int64_t{33}, N - 1}) {
    VecD row(id.begin() + i * C, id.begin() + (i + 1) * C);
    VecD rrow(r.begin() + i * C, r.begin() + (i + 1) * C);
    VecF got(dinp.begin() + i * C, dinp.begin() + (i + 1) * C);
    EXPECT_TRUE(AllClose(
        got,
        FiniteDiffGrad([&](const VecD& x) { return LayerNormRef(x, wd, bd, 1, C).out; }, row, rrow),
        kGradTol))
        << "row " << i;
  }
}

TEST(LayerNorm, BackwardAccumulates) {
  LayerNormCase l;
  VecF out(l.N * l.C), mean(l.N), rstd(l.N);
  LayerNormForward(out.data(), mean.data(), rstd.data(), l.inp.data(), l.w.data(), l.b.data(), l.N,
                   l.C);
  const VecF dout = RandomVec(l.N * l.C, 25);
  VecF dinp(l.N * l.C), dw(l.C), db(l.C);
  ExpectAccumulates({&dinp, &dw, &db}, [&] {
    LayerNormBackward(dinp.data(), dw.data(), db.data(), dout.data(), l.inp.data(), l.w.data(),
                      mean.data(), rstd.data(), l.N, l.C);
  });
}

// ---- GELU and residual -----------------------------------------------------

TEST(Gelu, ForwardMatchesReference) {
  VecF inp = RandomVec(101, 31, -6.0f, 6.0f);
  // Far tails: 1 + tanh(u) cancels for large negative x, and exp overflows
  // for large |x| if not guarded.
  for (float x :
       {0.0f, -0.0f, 1e-6f, -1e-6f, -10.0f, 10.0f, -30.0f, 30.0f, -100.0f, 100.0f, -1e4f, 1e4f}) {
    inp.push_back(x);
  }
  VecF out(inp.size(), kNaN);
  GeluForward(out.data(), inp.data(), static_cast<int64_t>(inp.size()));
  VecD ref(inp.size());
  for (size_t i = 0; i < inp.size(); ++i) ref[i] = GeluRef(inp[i]);
  // Relative to max|ref| = 1e4 this would hide errors on small values, so
  // check element by element against a mixed tolerance.
  for (size_t i = 0; i < inp.size(); ++i) {
    EXPECT_NEAR(out[i], ref[i], 1e-6 + 1e-5 * std::abs(ref[i])) << "x = " << inp[i];
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  VecF inp = RandomVec(97, 32, -6.0f, 6.0f);
  for (float x : {0.0f, -3.0f, 3.0f, -12.0f, 12.0f}) inp.push_back(x);
  const int64_t n = static_cast<int64_t>(inp.size());
  const VecF dout = RandomVec(n, 33);
  VecF dinp(n, 0.0f);
  GeluBackward(dinp.data(), inp.data(), dout.data(), n);
  const VecD want = FiniteDiffGrad(
      [](const VecD& x) {
        VecD y(x.size());
        for (size_t i = 0; i < x.size(); ++i) y[i] = GeluRef(x[i]);
        return y;
      },
      ToDouble(inp), ToDouble(dout));
  EXPECT_TRUE(AllClose(dinp, want, kGradTol));
}

TEST(Gelu, BackwardAccumulates) {
  const VecF inp = RandomVec(50, 34, -4.0f, 4.0f), dout = RandomVec(50, 35);
  VecF dinp(50);
  ExpectAccumulates({&dinp}, [&] { GeluBackward(dinp.data(), inp.data(), dout.data(), 50); });
}

TEST(Residual, ForwardAndBackward) {
  const int64_t n = 77;
  const VecF a = RandomVec(n, 41), b = RandomVec(n, 42), dout = RandomVec(n, 43);
  VecF out(n, kNaN);
  ResidualForward(out.data(), a.data(), b.data(), n);
  VecD ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<double>(a[i]) + b[i];
  EXPECT_TRUE(AllClose(out, ref, 1e-7));

  auto add = [&](const VecD& x, const VecD& y) {
    VecD s(x.size());
    for (size_t i = 0; i < x.size(); ++i) s[i] = x[i] + y[i];
    return s;
  };
  VecF da(n, 0.0f), db(n, 0.0f);
  ResidualBackward(da.data(), db.data(), dout.data(), n);
  const VecD ad = ToDouble(a), bd = ToDouble(b), r = ToDouble(dout);
  EXPECT_TRUE(
      AllClose(da, FiniteDiffGrad([&](const VecD& x) { return add(x, bd); }, ad, r), kGradTol));
  EXPECT_TRUE(
      AllClose(db, FiniteDiffGrad([&](const VecD& x) { return add(ad, x); }, bd, r), kGradTol));
  ExpectAccumulates({&da, &db}, [&] { ResidualBackward(da.data(), db.data(), dout.data(), n); });
}

// ---- embedding -------------------------------------------------------------

struct EncoderCase {
  int64_t B = 2, T = 5, C = 8, V = 7;
  // Repeated tokens (within and across sequences) make dwte rows collide.
  std::vector<int32_t> tokens = {3, 1, 3, 0, 6, 6, 3, 2, 1, 3};
  VecF wte = RandomVec(V * C, 51);
  VecF wpe = RandomVec(T * C, 52);
};

TEST(Encoder, ForwardMatchesReference) {
  EncoderCase e;
  VecF out(e.B * e.T * e.C, kNaN);
  EncoderForward(out.data(), e.tokens.data(), e.wte.data(), e.wpe.data(), e.B, e.T, e.C);
  EXPECT_TRUE(
      AllClose(out, EncoderRef(e.tokens, ToDouble(e.wte), ToDouble(e.wpe), e.B, e.T, e.C), 1e-7));
}

TEST(Encoder, BackwardMatchesFiniteDifferences) {
  EncoderCase e;
  const VecF dout = RandomVec(e.B * e.T * e.C, 53);
  const VecD r = ToDouble(dout), wte = ToDouble(e.wte), wpe = ToDouble(e.wpe);
  VecF dwte(e.V * e.C, 0.0f), dwpe(e.T * e.C, 0.0f);
  EncoderBackward(dwte.data(), dwpe.data(), dout.data(), e.tokens.data(), e.B, e.T, e.C);
  EXPECT_TRUE(AllClose(
      dwte,
      FiniteDiffGrad([&](const VecD& x) { return EncoderRef(e.tokens, x, wpe, e.B, e.T, e.C); },
                     wte, r),
      kGradTol));
  EXPECT_TRUE(AllClose(
      dwpe,
      FiniteDiffGrad([&](const VecD& x) { return EncoderRef(e.tokens, wte, x, e.B, e.T, e.C); },
                     wpe, r),
      kGradTol));
  // Token 4 and 5 never occur: their rows must stay exactly zero.
  for (int64_t c = 0; c < e.C; ++c) {
    EXPECT_EQ(dwte[4 * e.C + c], 0.0f);
    EXPECT_EQ(dwte[5 * e.C + c], 0.0f);
  }
  // Without dwpe, dwte is unchanged.
  VecF dwte_only(e.V * e.C, 0.0f);
  EncoderBackward(dwte_only.data(), nullptr, dout.data(), e.tokens.data(), e.B, e.T, e.C);
  EXPECT_TRUE(AllClose(dwte_only, ToDouble(dwte), 1e-7));
}

// A width spanning several column blocks, many repeats of few tokens.
TEST(Encoder, BackwardWideManyRepeats) {
  const int64_t B = 3, T = 17, C = 70, V = 5;
  const std::vector<int32_t> tokens = RandomTokens(B * T, V, 54);
  const VecF dout = RandomVec(B * T * C, 55);
  VecF dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  EncoderBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  VecD want_wte(V * C, 0.0), want_wpe(T * C, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        want_wte[tokens[b * T + t] * C + c] += dout[(b * T + t) * C + c];
        want_wpe[t * C + c] += dout[(b * T + t) * C + c];
      }
    }
  }
  EXPECT_TRUE(AllClose(dwte, want_wte, 1e-6));
  EXPECT_TRUE(AllClose(dwpe, want_wpe, 1e-6));
}

TEST(Encoder, BackwardAccumulates) {
  EncoderCase e;
  const VecF dout = RandomVec(e.B * e.T * e.C, 53);
  VecF dwte(e.V * e.C), dwpe(e.T * e.C);
  ExpectAccumulates({&dwte, &dwpe}, [&] {
    EncoderBackward(dwte.data(), dwpe.data(), dout.data(), e.tokens.data(), e.B, e.T, e.C);
  });
}

// ---- attention -------------------------------------------------------------

struct AttentionCase {
  int64_t B = 2, T = 5, C = 8, NH = 2;
  VecF qkv = RandomVec(B * T * 3 * C, 61, -1.5f, 1.5f);
};

void CheckAttentionForward(int64_t B, int64_t T, int64_t C, int64_t NH, uint32_t seed) {
  const VecF qkv = RandomVec(B * T * 3 * C, seed, -1.5f, 1.5f);
  VecF out(B * T * C, kNaN), att(B * NH * T * T, kNaN);
  AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  const AttentionOut ref = AttentionRef(ToDouble(qkv), B, T, C, NH);
  EXPECT_TRUE(AllClose(out, ref.out, kFwdTol)) << "T=" << T << " C=" << C << " NH=" << NH;
  EXPECT_TRUE(AllClose(att, ref.att, kFwdTol)) << "T=" << T << " C=" << C << " NH=" << NH;
  // Above the diagonal: exactly 0, as documented.
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = t + 1; j < T; ++j) {
        ASSERT_EQ(att[(bh * T + t) * T + j], 0.0f) << "bh=" << bh << " t=" << t << " j=" << j;
      }
    }
  }
}

TEST(Attention, ForwardMatchesReference) {
  CheckAttentionForward(2, 5, 8, 2, 61);
  // Several score row blocks, including a partial one.
  CheckAttentionForward(1, 80, 16, 2, 62);
  // The benchmark shapes' head sizes (32 and 64), one sequence each.
  CheckAttentionForward(1, 128, 128, 4, 63);
  CheckAttentionForward(1, 256, 384, 6, 64);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  AttentionCase a;
  VecF out(a.B * a.T * a.C), att(a.B * a.NH * a.T * a.T);
  AttentionForward(out.data(), att.data(), a.qkv.data(), a.B, a.T, a.C, a.NH);
  const VecF dout = RandomVec(a.B * a.T * a.C, 65);
  VecF dqkv(a.qkv.size(), 0.0f), datt(att.size(), kNaN);
  AttentionBackward(dqkv.data(), datt.data(), dout.data(), a.qkv.data(), att.data(), a.B, a.T, a.C,
                    a.NH);
  EXPECT_TRUE(AllClose(
      dqkv,
      FiniteDiffGrad([&](const VecD& x) { return AttentionRef(x, a.B, a.T, a.C, a.NH).out; },
                     ToDouble(a.qkv), ToDouble(dout)),
      kGradTol));
}

// T spanning several row blocks of the kernel (including a partial last
// one); finite differences on a random subset of qkv to keep it quick.
TEST(Attention, BackwardLongSequenceMatchesFiniteDifferences) {
  const int64_t B = 1, T = 80, C = 16, NH = 2;
  const VecF qkv = RandomVec(B * T * 3 * C, 66, -1.5f, 1.5f);
  VecF out(B * T * C), att(B * NH * T * T);
  AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  const VecF dout = RandomVec(B * T * C, 67);
  VecF dqkv(qkv.size(), 0.0f), datt(att.size(), kNaN);
  AttentionBackward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  std::vector<size_t> idx;
  std::mt19937 gen(68);
  std::uniform_int_distribution<size_t> pick(0, qkv.size() - 1);
  for (int i = 0; i < 300; ++i) idx.push_back(pick(gen));
  // First and last positions' q, k and v (edge blocks) always included.
  for (int64_t c = 0; c < 3 * C; c += 5) {
    idx.push_back(static_cast<size_t>(c));
    idx.push_back(static_cast<size_t>((T - 1) * 3 * C + c));
  }
  const VecD fd = FiniteDiffGrad([&](const VecD& x) { return AttentionRef(x, B, T, C, NH).out; },
                                 ToDouble(qkv), ToDouble(dout), idx);
  VecF got(idx.size());
  VecD want(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    got[k] = dqkv[idx[k]];
    want[k] = fd[idx[k]];
  }
  EXPECT_TRUE(AllClose(got, want, kGradTol));
}

TEST(Attention, BackwardAccumulates) {
  AttentionCase a;
  VecF out(a.B * a.T * a.C), att(a.B * a.NH * a.T * a.T);
  AttentionForward(out.data(), att.data(), a.qkv.data(), a.B, a.T, a.C, a.NH);
  const VecF dout = RandomVec(a.B * a.T * a.C, 65);
  VecF dqkv(a.qkv.size()), datt(att.size(), kNaN);
  ExpectAccumulates({&dqkv}, [&] {
    AttentionBackward(dqkv.data(), datt.data(), dout.data(), a.qkv.data(), att.data(), a.B, a.T,
                      a.C, a.NH);
  });
}

// Changing token s's key and value must leave outputs at positions < s
// bit-for-bit unchanged (masked, not merely down-weighted), and must change
// the output at s (so the check is not vacuous). T = 70 puts s in a later
// row block than some earlier positions and in the same block as others.
TEST(Attention, Causal) {
  const int64_t B = 2, T = 70, C = 16, NH = 2;
  for (int64_t s : {int64_t{3}, int64_t{40}}) {
    VecF qkv = RandomVec(B * T * 3 * C, 69);
    VecF out1(B * T * C), att1(B * NH * T * T);
    AttentionForward(out1.data(), att1.data(), qkv.data(), B, T, C, NH);
    for (int64_t c = C; c < 3 * C; ++c) qkv[(1 * T + s) * 3 * C + c] += 5.0f;  // batch 1
    VecF out2(B * T * C), att2(B * NH * T * T);
    AttentionForward(out2.data(), att2.data(), qkv.data(), B, T, C, NH);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const bool must_match = b == 0 || t < s;
        bool same = true;
        for (int64_t c = 0; c < C; ++c) {
          same = same && out1[(b * T + t) * C + c] == out2[(b * T + t) * C + c];
        }
        if (must_match) {
          EXPECT_TRUE(same) << "b=" << b << " t=" << t << " changed by token " << s;
        } else if (t == s) {
          EXPECT_FALSE(same) << "output at the changed token " << s << " did not change";
        }
      }
    }
  }
}

// ---- cross-entropy ---------------------------------------------------------

struct CrossEntropyCase {
  int64_t N = 6, V = 7, Vp = 8;
  VecF logits = RandomVec(N * Vp, 71, -3.0f, 3.0f);
  std::vector<int32_t> targets = {0, 6, 3, 3, 1, 5};
};

TEST(CrossEntropy, ForwardMatchesReference) {
  CrossEntropyCase x;
  VecF losses(x.N, kNaN), probs(x.N * x.Vp, kNaN);
  CrossEntropyForward(losses.data(), probs.data(), x.logits.data(), x.targets.data(), x.N, x.V,
                      x.Vp);
  const CrossEntropyOut ref = CrossEntropyRef(ToDouble(x.logits), x.targets, x.N, x.V, x.Vp);
  EXPECT_TRUE(AllClose(losses, ref.losses, kFwdTol));
  EXPECT_TRUE(AllClose(probs, ref.probs, kFwdTol));
}

TEST(CrossEntropy, PaddingColumnsTakeNoPart) {
  CrossEntropyCase x;
  VecF losses1(x.N), probs1(x.N * x.Vp);
  CrossEntropyForward(losses1.data(), probs1.data(), x.logits.data(), x.targets.data(), x.N, x.V,
                      x.Vp);
  // A padding logit larger than every real one would dominate the softmax
  // (and the max) if it took part.
  VecF padded = x.logits;
  for (int64_t i = 0; i < x.N; ++i) padded[i * x.Vp + x.V] = (i % 2 == 0) ? 50.0f : -50.0f;
  VecF losses2(x.N, kNaN), probs2(x.N * x.Vp, kNaN);
  CrossEntropyForward(losses2.data(), probs2.data(), padded.data(), x.targets.data(), x.N, x.V,
                      x.Vp);
  for (int64_t i = 0; i < x.N; ++i) {
    EXPECT_EQ(losses1[i], losses2[i]) << "row " << i;
    EXPECT_EQ(probs2[i * x.Vp + x.V], 0.0f) << "row " << i;
    for (int64_t j = 0; j < x.V; ++j) EXPECT_EQ(probs1[i * x.Vp + j], probs2[i * x.Vp + j]);
  }
  VecF dlogits(x.N * x.Vp, kNaN);
  CrossEntropyBackward(dlogits.data(), probs2.data(), x.targets.data(), 0.25f, x.N, x.V, x.Vp);
  for (int64_t i = 0; i < x.N; ++i) EXPECT_EQ(dlogits[i * x.Vp + x.V], 0.0f) << "row " << i;
}

// Logits of magnitude ~1e3 overflow exp() unless the max is subtracted.
TEST(CrossEntropy, LargeLogitsAreStable) {
  const int64_t N = 3, V = 5, Vp = 5;
  const VecF logits = {1000,  990,   1001, -1000, 0,  -2000, -1990, -2001,
                       -1995, -2000, 80,   85,    90, 95,    100};
  const std::vector<int32_t> targets = {3, 3, 0};
  VecF losses(N, kNaN), probs(N * Vp, kNaN);
  CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  const CrossEntropyOut ref = CrossEntropyRef(ToDouble(logits), targets, N, V, Vp);
  EXPECT_TRUE(AllClose(losses, ref.losses, kFwdTol));
  EXPECT_TRUE(AllClose(probs, ref.probs, kFwdTol));
  // Row 0's target has probability ~e^-2001 (0 in float), yet its loss is
  // finite: log(1 + e^-1 + e^-11 + e^-1001) + 2001.
  EXPECT_NEAR(losses[0], 2001.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-11.0)), 1e-3);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  CrossEntropyCase x;
  VecF losses(x.N), probs(x.N * x.Vp);
  CrossEntropyForward(losses.data(), probs.data(), x.logits.data(), x.targets.data(), x.N, x.V,
                      x.Vp);
  // The backward takes one dloss for every row (the mean's 1/N), so
  // L = dloss * sum(losses).
  const float dloss = 0.37f;
  VecF dlogits(x.N * x.Vp, kNaN);
  CrossEntropyBackward(dlogits.data(), probs.data(), x.targets.data(), dloss, x.N, x.V, x.Vp);
  const VecD want = FiniteDiffGrad(
      [&](const VecD& l) { return CrossEntropyRef(l, x.targets, x.N, x.V, x.Vp).losses; },
      ToDouble(x.logits), VecD(x.N, dloss));
  EXPECT_TRUE(AllClose(dlogits, want, kGradTol));

  // In place over probs, as the trainer does to save a buffer.
  CrossEntropyBackward(probs.data(), probs.data(), x.targets.data(), dloss, x.N, x.V, x.Vp);
  EXPECT_TRUE(AllClose(probs, ToDouble(dlogits), 0.0));
}

// A long row (many SIMD iterations plus a remainder) and a padded width.
TEST(CrossEntropy, WideVocabulary) {
  const int64_t N = 5, V = 1001, Vp = 1024;
  const VecF logits = RandomVec(N * Vp, 72, -8.0f, 8.0f);
  const std::vector<int32_t> targets = RandomTokens(N, static_cast<int32_t>(V), 73);
  VecF losses(N, kNaN), probs(N * Vp, kNaN);
  CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  const CrossEntropyOut ref = CrossEntropyRef(ToDouble(logits), targets, N, V, Vp);
  EXPECT_TRUE(AllClose(losses, ref.losses, kFwdTol));
  EXPECT_TRUE(AllClose(probs, ref.probs, kFwdTol));
}

// ---- AdamW and SumSquares --------------------------------------------------

// One step at t = 1 by hand: m = (1-b1) g, v = (1-b2) g^2, so mhat = g and
// vhat = g^2, and param -= lr (g / (|g| + eps) + wd param).
TEST(AdamW, FirstStepByHand) {
  VecF param = {1.0f, -2.0f, 0.5f};
  const VecF grad = {0.5f, 0.25f, -4.0f};
  VecF m(3, 0.0f), v(3, 0.0f);
  AdamWUpdate(param.data(), grad.data(), m.data(), v.data(), 3, /*lr=*/0.1f, /*beta1=*/0.9f,
              /*beta2=*/0.95f, /*eps=*/1e-8f, /*weight_decay=*/0.1f, /*t=*/1, /*grad_scale=*/1.0f);
  // 1 - 0.1 * (0.5/(0.5+1e-8) + 0.1 * 1) etc.
  EXPECT_NEAR(param[0], 0.890000002, 1e-6);
  EXPECT_NEAR(param[1], -2.0 - 0.1 * (0.25 / (0.25 + 1e-8) + 0.1 * -2.0), 1e-6);  // -2.08
  EXPECT_NEAR(param[2], 0.5 - 0.1 * (-4.0 / (4.0 + 1e-8) + 0.1 * 0.5), 1e-6);     // 0.595
  EXPECT_NEAR(m[0], 0.05, 1e-7);
  EXPECT_NEAR(v[2], 0.05 * 16.0, 1e-6);
}

// Three steps against a float64 transcription of the torch.optim.AdamW
// update, with a gradient scale (as used for clipping or loss scaling).
TEST(AdamW, MatchesDoubleStepsWithBiasCorrection) {
  const int64_t n = 37;
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
  VecF param = RandomVec(n, 81), m(n, 0.0f), v(n, 0.0f);
  VecD p_ref = ToDouble(param), m_ref(n, 0.0), v_ref(n, 0.0);
  for (int64_t t = 1; t <= 3; ++t) {
    const VecF grad = RandomVec(n, 82 + static_cast<uint32_t>(t), -2.0f, 2.0f);
    AdamWUpdate(param.data(), grad.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t, gs);
    for (int64_t i = 0; i < n; ++i) {
      const double g = static_cast<double>(grad[i]) * gs;
      m_ref[i] = b1 * m_ref[i] + (1.0 - b1) * g;
      v_ref[i] = b2 * v_ref[i] + (1.0 - b2) * g * g;
      const double mhat = m_ref[i] / (1.0 - std::pow(static_cast<double>(b1), t));
      const double vhat = v_ref[i] / (1.0 - std::pow(static_cast<double>(b2), t));
      p_ref[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p_ref[i]);
    }
    if (t == 1 || t == 3) {
      EXPECT_TRUE(AllClose(m, m_ref, 1e-6)) << "t=" << t;
      EXPECT_TRUE(AllClose(v, v_ref, 1e-6)) << "t=" << t;
      // Each step moves a parameter by about lr, so the tolerance is set
      // relative to lr rather than to the parameter's size.
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(param[i], p_ref[i], 1e-3 * lr) << "t=" << t;
    }
  }
}

TEST(SumSquares, MatchesDoubleSum) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000003}}) {
    const VecF x = RandomVec(n, 91, -3.0f, 3.0f);
    double want = 0.0;
    for (float xi : x) want += static_cast<double>(xi) * xi;
    EXPECT_NEAR(SumSquares(x.data(), n), want, 1e-12 * std::max(1.0, want)) << "n=" << n;
  }
  // 2^20 tiny squares and one large one: a float accumulator would drop
  // the tiny ones (float spacing at 1e8 is 8). The large one comes last:
  // were it first, even a double accumulator would round each of the
  // 1e-8 additions to 1e8 (spacing 1.5e-8) and drift by ~5e-3.
  VecF x(1 << 20, 1e-4f);
  x.back() = 1e4f;
  double tiny = 0.0;
  for (size_t i = 0; i + 1 < x.size(); ++i) tiny += static_cast<double>(x[i]) * x[i];
  EXPECT_NEAR(SumSquares(x.data(), static_cast<int64_t>(x.size())), 1e8 + tiny, 1e-3)
      << "tiny part " << tiny;
}

}  // namespace
}  // namespace scaletrain::cpu

namespace scaletrain::cpu {
namespace {

// Vocab-parallel cross-entropy over two shards, reduced by hand as the TP
// group would, equals the one-rank kernel; so does its backward.
TEST(CrossEntropyShard, TwoShardsEqualTheWholeVocabulary) {
  const int64_t N = 5, V = 13, Vp = 16, Vl = 8;
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(N * Vp);
  for (float& x : logits) x = nd(gen);
  std::vector<int32_t> targets = {0, 7, 8, 12, 3};
  std::vector<float> losses(N), probs(N * Vp);
  CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  std::vector<float> dwhole(N * Vp);
  CrossEntropyBackward(dwhole.data(), probs.data(), targets.data(), 0.5f, N, V, Vp);

  std::vector<std::vector<float>> shard(2, std::vector<float>(N * Vl));
  for (int r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < Vl; ++j) shard[r][i * Vl + j] = logits[i * Vp + r * Vl + j];
    }
  }
  const int64_t valid[2] = {Vl, V - Vl};
  std::vector<float> mx(N, -INFINITY), part(N);
  for (int r = 0; r < 2; ++r) {
    CrossEntropyShardMax(part.data(), shard[r].data(), N, Vl, valid[r]);
    for (int64_t i = 0; i < N; ++i) mx[i] = std::max(mx[i], part[i]);
  }
  std::vector<float> sums(N, 0.0f), tl(N, 0.0f), s(N), t(N);
  for (int r = 0; r < 2; ++r) {
    CrossEntropyShardSums(s.data(), t.data(), shard[r].data(), mx.data(), targets.data(), r * Vl, N, Vl,
                          valid[r]);
    for (int64_t i = 0; i < N; ++i) {
      sums[i] += s[i];
      tl[i] += t[i];
    }
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<float> l(N), p(N * Vl), d(N * Vl);
    CrossEntropyShardFinish(l.data(), p.data(), shard[r].data(), mx.data(), sums.data(), tl.data(), N, Vl,
                            valid[r]);
    CrossEntropyShardBackward(d.data(), p.data(), targets.data(), r * Vl, 0.5f, N, Vl, valid[r]);
    for (int64_t i = 0; i < N; ++i) {
      EXPECT_NEAR(l[i], losses[i], 1e-5f * std::abs(losses[i]));
      for (int64_t j = 0; j < Vl; ++j) EXPECT_NEAR(d[i * Vl + j], dwhole[i * Vp + r * Vl + j], 1e-6f);
    }
  }
}

TEST(EmbeddingShard, ShardsSumToTheLookup) {
  const int64_t N = 6, C = 4, Vp = 8, T = 3;
  std::vector<float> wte(Vp * C), wpe(T * C), whole(N * C);
  for (size_t i = 0; i < wte.size(); ++i) wte[i] = static_cast<float>(i) * 0.25f;
  for (size_t i = 0; i < wpe.size(); ++i) wpe[i] = static_cast<float>(i) * -0.5f;
  std::vector<int32_t> tok = {0, 5, 7, 3, 4, 1};
  EncoderForward(whole.data(), tok.data(), wte.data(), wpe.data(), 2, T, C);
  std::vector<float> sum(N * C, 0.0f), part(N * C);
  for (int r = 0; r < 2; ++r) {
    EmbeddingShardForward(part.data(), tok.data(), wte.data() + r * 4 * C, r * 4, 4, N, C);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  PositionForward(sum.data(), wpe.data(), 0, N, T, C);
  EXPECT_EQ(sum, whole);
  // Backward: shard gradients placed side by side equal the whole's.
  std::vector<float> dout(N * C);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = static_cast<float>(i % 7) - 3.0f;
  std::vector<float> dwte(Vp * C, 0.0f), dwpe(T * C, 0.0f), dwte_s(Vp * C, 0.0f), dwpe_s(T * C, 0.0f);
  EncoderBackward(dwte.data(), dwpe.data(), dout.data(), tok.data(), 2, T, C);
  for (int r = 0; r < 2; ++r) EmbeddingShardBackward(dwte_s.data() + r * 4 * C, dout.data(), tok.data(), r * 4, 4, N, C);
  // Positions from two row blocks (sequence parallelism) add up too.
  PositionBackward(dwpe_s.data(), dout.data(), 0, 3, T, C);
  PositionBackward(dwpe_s.data(), dout.data() + 3 * C, 3, 3, T, C);
  EXPECT_EQ(dwte_s, dwte);
  EXPECT_EQ(dwpe_s, dwpe);
}

}  // namespace
}  // namespace scaletrain::cpu
