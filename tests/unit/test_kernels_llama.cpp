// The Llama block's CPU kernels (RMSNorm, SwiGLU, rotary embeddings,
// grouped-query attention) against float64 loops written here: forward
// outputs directly, backward against central finite differences of
// L = sum(r * out) on the float64 loop (as test_kernels.cpp does for GPT-2's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/ops.h"

namespace scaletrain::cpu {
namespace {

using namespace test;  // VecF, VecD, RandomVec, the tolerances (kernel_test_util.h)

VecD ToDouble(const VecF& v) { return VecD(v.begin(), v.end()); }

// max |got - want| <= tol * max|want| (1 if want is all zero); NaN fails.
::testing::AssertionResult AllClose(const VecF& got, const VecD& want, double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  double scale = 0.0, worst = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  if (scale == 0.0) scale = 1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * scale)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs "
                                           << want[i] << " (allowed " << tol * scale << ")";
    }
    worst = std::max(worst, err);
  }
  return ::testing::AssertionSuccess();
}

// d/dx sum(r * f(x)) by central differences.
VecD FiniteDiffGrad(const std::function<VecD(const VecD&)>& f, VecD x, const VecD& r) {
  VecD grad(x.size(), 0.0);
  auto dot = [&](const VecD& y) {
    double s = 0.0;
    for (size_t i = 0; i < y.size(); ++i) s += r[i] * y[i];
    return s;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kFdStep;
    const double lp = dot(f(x));
    x[i] = saved - kFdStep;
    const double lm = dot(f(x));
    x[i] = saved;
    grad[i] = (lp - lm) / (2.0 * kFdStep);
  }
  return grad;
}

// ---- float64 loops ---------------------------------------------------------

VecD RMSNormRef(const VecD& x, const VecD& w, int64_t N, int64_t C, double eps) {
  VecD out(x.size());
  for (int64_t i = 0; i < N; ++i) {
    double sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sq += x[i * C + c] * x[i * C + c];
    const double r = 1.0 / std::sqrt(sq / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] * r * w[c];
  }
  return out;
}

VecD SwiGLURef(const VecD& gu, int64_t N, int64_t F) {
  VecD out(static_cast<size_t>(N * F));
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < F; ++j) {
      const double g = gu[i * 2 * F + j], u = gu[i * 2 * F + F + j];
      out[i * F + j] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  return out;
}

// Hugging Face's form: x * cos + rotate_half(x) * sin, rotate_half([a, b]) =
// [-b, a], with cos/sin of t * theta^(-2i/hs) repeated over both halves.
VecD RopeRef(const VecD& x, int64_t N, int64_t T, int64_t ld, int64_t heads, int64_t hs,
             double theta) {
  VecD out = x;
  const int64_t half = hs / 2;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < hs; ++j) {
        const int64_t i = j % half;
        const double angle = static_cast<double>(n % T) * std::pow(theta, -2.0 * i / hs);
        const double* v = &x[n * ld + h * hs];
        const double rot = j < half ? -v[j + half] : v[j - half];
        out[n * ld + h * hs + j] = v[j] * std::cos(angle) + rot * std::sin(angle);
      }
    }
  }
  return out;
}

// Grouped-query causal attention over rows [q (NH) | k (NKV) | v (NKV)].
VecD GqaRef(const VecD& qkv, int64_t B, int64_t T, const AttentionHeads& H) {
  const int64_t C = H.NH * H.hs, ld = C + 2 * H.NKV * H.hs;
  VecD out(static_cast<size_t>(B * T * C), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H.NH; ++h) {
      const int64_t kv = (H.h0 + h) / H.group;
      for (int64_t t = 0; t < T; ++t) {
        VecD s(static_cast<size_t>(t + 1));
        double mx = -1e300, sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0.0;
          for (int64_t e = 0; e < H.hs; ++e) {
            d += qkv[(b * T + t) * ld + h * H.hs + e] * qkv[(b * T + j) * ld + C + kv * H.hs + e];
          }
          s[j] = d / std::sqrt(static_cast<double>(H.hs));
          mx = std::max(mx, s[j]);
        }
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t e = 0; e < H.hs; ++e) {
            out[(b * T + t) * C + h * H.hs + e] +=
                s[j] / sum * qkv[(b * T + j) * ld + C + (H.NKV + kv) * H.hs + e];
          }
        }
      }
    }
  }
  return out;
}

// ---- tests -----------------------------------------------------------------

TEST(RMSNorm, ForwardAndBackwardMatchFloat64) {
  const int64_t N = 7, C = 19;
  const float eps = 1e-5f;
  const VecF x = RandomVec(N * C, 1, -2.0f, 2.0f), w = RandomVec(C, 2, 0.5f, 1.5f);
  VecF out(N * C), rstd(N);
  RMSNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  const VecD xd = ToDouble(x), wd = ToDouble(w);
  EXPECT_TRUE(AllClose(out, RMSNormRef(xd, wd, N, C, eps), kFwdTol));
  const VecF dout = RandomVec(N * C, 3);
  VecF dx(N * C, 0.0f), dw(C, 0.0f);
  RMSNormBackward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  const VecD r = ToDouble(dout);
  EXPECT_TRUE(AllClose(
      dx, FiniteDiffGrad([&](const VecD& v) { return RMSNormRef(v, wd, N, C, eps); }, xd, r),
      kGradTol));
  EXPECT_TRUE(AllClose(
      dw, FiniteDiffGrad([&](const VecD& v) { return RMSNormRef(xd, v, N, C, eps); }, wd, r),
      kGradTol));
  // Backward accumulates: a second call doubles both.
  VecF dx2 = dx, dw2 = dw;
  RMSNormBackward(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx2[i], 2.0f * dx[i], 1e-5f);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw2[i], 2.0f * dw[i], 1e-5f);
}

TEST(RMSNorm, EpsilonIsUsed) {
  // All-zero rows: the output is 0 and rstd is 1/sqrt(eps).
  const int64_t N = 2, C = 4;
  const VecF x(N * C, 0.0f), w(C, 1.0f);
  VecF out(N * C, 1.0f), rstd(N);
  RMSNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 0.25f);
  EXPECT_FLOAT_EQ(rstd[0], 2.0f);
  EXPECT_FLOAT_EQ(out[3], 0.0f);
}

TEST(SwiGLU, ForwardAndBackwardMatchFloat64) {
  const int64_t N = 5, F = 11;
  const VecF gu = RandomVec(N * 2 * F, 4, -4.0f, 4.0f);
  VecF out(N * F);
  SwiGLUForward(out.data(), gu.data(), N, F);
  const VecD gud = ToDouble(gu);
  EXPECT_TRUE(AllClose(out, SwiGLURef(gud, N, F), kFwdTol));
  const VecF dout = RandomVec(N * F, 5);
  VecF dgu(N * 2 * F, 0.0f);
  SwiGLUBackward(dgu.data(), gu.data(), dout.data(), N, F);
  EXPECT_TRUE(AllClose(
      dgu, FiniteDiffGrad([&](const VecD& v) { return SwiGLURef(v, N, F); }, gud, ToDouble(dout)),
      kGradTol));
}

TEST(Rope, ForwardMatchesHuggingFaceForm) {
  // Two sequences of T = 6, rows 2 q heads + 1 k head (then a v head left
  // alone), hs = 8, a small theta so the angles wrap.
  const int64_t T = 6, N = 2 * T, hs = 8, heads = 3, ld = 4 * hs;
  const VecF x = RandomVec(N * ld, 6);
  for (double theta : {10000.0, 3.0}) {
    VecF y = x;
    RopeApply(y.data(), N, T, ld, heads, hs, theta, false);
    EXPECT_TRUE(AllClose(y, RopeRef(ToDouble(x), N, T, ld, heads, hs, theta), kFwdTol));
    // The v head is untouched; position 0 is the identity.
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = heads * hs; c < ld; ++c) EXPECT_EQ(y[n * ld + c], x[n * ld + c]);
    }
    for (int64_t c = 0; c < ld; ++c) EXPECT_FLOAT_EQ(y[c], x[c]);
  }
}

TEST(Rope, InverseIsTheBackward) {
  const int64_t T = 5, N = T, hs = 4, heads = 2, ld = heads * hs;
  const double theta = 100.0;
  const VecF r = RandomVec(N * ld, 7);
  VecF g = r;
  RopeApply(g.data(), N, T, ld, heads, hs, theta, true);
  const VecD x = ToDouble(RandomVec(N * ld, 8));
  EXPECT_TRUE(AllClose(
      g, FiniteDiffGrad([&](const VecD& v) { return RopeRef(v, N, T, ld, heads, hs, theta); }, x,
                        ToDouble(r)),
      kGradTol));
}

void CheckGqa(const AttentionHeads& H, int64_t B, int64_t T, uint32_t seed) {
  const int64_t C = H.NH * H.hs, ld = C + 2 * H.NKV * H.hs;
  const VecF qkv = RandomVec(B * T * ld, seed, -1.5f, 1.5f);
  VecF out(B * T * C), att(B * H.NH * T * T);
  GqaAttentionForward(out.data(), att.data(), qkv.data(), B, T, H);
  const VecD qd = ToDouble(qkv);
  EXPECT_TRUE(AllClose(out, GqaRef(qd, B, T, H), kFwdTol)) << "NH " << H.NH << " NKV " << H.NKV;
  const VecF dout = RandomVec(B * T * C, seed + 1);
  VecF dqkv(qkv.size(), 0.0f), datt(att.size());
  GqaAttentionBackward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, H);
  EXPECT_TRUE(AllClose(
      dqkv, FiniteDiffGrad([&](const VecD& v) { return GqaRef(v, B, T, H); }, qd, ToDouble(dout)),
      kGradTol))
      << "NH " << H.NH << " NKV " << H.NKV << " h0 " << H.h0;
}

TEST(GqaAttention, MatchesFloat64) {
  CheckGqa(AttentionHeads{4, 2, 4, 2, 0}, 2, 5, 10);  // groups of 2
  CheckGqa(AttentionHeads{4, 1, 4, 4, 0}, 1, 6, 11);  // multi-query
  CheckGqa(AttentionHeads{2, 2, 4, 1, 0}, 2, 4, 12);  // plain multi-head
  // A TP rank holding query heads 2, 3 of 8 with both key/value heads of 2
  // replicated (group 4): its heads read key/value head 0.
  CheckGqa(AttentionHeads{2, 2, 4, 4, 2}, 1, 5, 13);
  // Query heads 4, 5 of 8, group 4: key/value head 1.
  CheckGqa(AttentionHeads{2, 2, 4, 4, 4}, 1, 5, 14);
}

// Context parallelism's ring: `cp` ranks each hold the load-balanced chunks
// r and 2 cp - 1 - r of every sequence (chunk_len positions each); each
// rank's queries meet every rank's key/value block in ring order (rank r
// sees r, r - 1, ...), and the backward's dk, dv of a block are summed on
// its way round. The gathered output and gradients equal the float64
// attention over the whole sequence and its finite-difference gradient.
void CheckRing(const AttentionHeads& H, int64_t B, int64_t cp, int64_t len, uint32_t seed) {
  const int64_t T = 2 * cp * len, C = H.NH * H.hs, kvw = 2 * H.NKV * H.hs, ld = C + kvw;
  const int64_t rows = 2 * len;
  const VecF qkv = RandomVec(B * T * ld, seed, -1.5f, 1.5f);
  const VecF dout = RandomVec(B * T * C, seed + 1);
  auto chunks_of = [&](int64_t r) {
    SeqChunks c;
    c.ids[0] = r;
    c.ids[1] = 2 * cp - 1 - r;
    c.len = len;
    return c;
  };
  // Global row of (b, local row i) on rank r.
  auto global_row = [&](int64_t r, int64_t b, int64_t i) {
    const SeqChunks c = chunks_of(r);
    return b * T + c.ids[i / len] * len + i % len;
  };
  std::vector<VecF> local(cp), kv(cp);
  for (int64_t r = 0; r < cp; ++r) {
    local[r].resize(B * rows * ld);
    kv[r].resize(B * rows * kvw);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < rows; ++i)
        std::copy_n(qkv.begin() + global_row(r, b, i) * ld, ld, local[r].begin() + (b * rows + i) * ld);
    PackKeyValues(kv[r].data(), local[r].data(), B * rows, H);
  }
  VecF out(B * T * C), dqkv(qkv.size(), 0.0f);
  std::vector<VecF> dkv(cp, VecF(B * rows * kvw, 0.0f));
  for (int64_t r = 0; r < cp; ++r) {
    const SeqChunks q = chunks_of(r);
    VecF o(B * rows * C), lse(B * H.NH * rows), sum(lse.size()), dsum(lse.size());
    VecF scratch(RingAttentionScratchFloats(B, q, H)), dl(B * rows * C), dq(local[r].size(), 0.0f);
    RingAttentionBegin(o.data(), lse.data(), sum.data(), B, q, H);
    for (int64_t s = 0; s < cp; ++s) {
      const int64_t src = (r - s + cp) % cp;
      RingAttentionForwardBlock(o.data(), lse.data(), sum.data(), scratch.data(), local[r].data(),
                                kv[src].data(), B, q, chunks_of(src), H);
    }
    RingAttentionEnd(o.data(), lse.data(), sum.data(), B, q, H);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < rows; ++i) {
        std::copy_n(o.begin() + (b * rows + i) * C, C, out.begin() + global_row(r, b, i) * C);
        std::copy_n(dout.begin() + global_row(r, b, i) * C, C, dl.begin() + (b * rows + i) * C);
      }
    RingAttentionBackwardBegin(dsum.data(), dl.data(), o.data(), B, q, H);
    for (int64_t s = 0; s < cp; ++s) {
      const int64_t src = (r - s + cp) % cp;
      RingAttentionBackwardBlock(dq.data(), dkv[src].data(), scratch.data(), dl.data(),
                                 local[r].data(), kv[src].data(), lse.data(), dsum.data(), B, q,
                                 chunks_of(src), H);
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = 0; c < ld; ++c) dqkv[global_row(r, b, i) * ld + c] += dq[(b * rows + i) * ld + c];
  }
  for (int64_t r = 0; r < cp; ++r) {
    VecF dlocal(B * rows * ld, 0.0f);
    AddKeyValueGrads(dlocal.data(), dkv[r].data(), B * rows, H);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = C; c < ld; ++c) dqkv[global_row(r, b, i) * ld + c] += dlocal[(b * rows + i) * ld + c];
  }
  const VecD qd = ToDouble(qkv);
  EXPECT_TRUE(AllClose(out, GqaRef(qd, B, T, H), kFwdTol)) << "cp " << cp << " NH " << H.NH;
  EXPECT_TRUE(AllClose(
      dqkv, FiniteDiffGrad([&](const VecD& v) { return GqaRef(v, B, T, H); }, qd, ToDouble(dout)),
      kGradTol))
      << "cp " << cp << " NH " << H.NH << " NKV " << H.NKV;
}

TEST(RingAttention, MatchesFullCausalAttentionInFloat64) {
  CheckRing(AttentionHeads{2, 2, 4, 1, 0}, 2, 1, 3, 20);  // one rank: chunks 0 and 1
  CheckRing(AttentionHeads{2, 2, 4, 1, 0}, 2, 2, 2, 21);
  CheckRing(AttentionHeads{4, 2, 4, 2, 0}, 1, 4, 2, 22);  // grouped-query
  CheckRing(AttentionHeads{2, 2, 4, 4, 2}, 1, 3, 2, 23);  // a TP rank's heads 2, 3 of 8
}

// One block over a whole longer sequence equals GqaAttentionForward to
// float rounding (attention.cpp's several row blocks against one).
TEST(RingAttention, EqualsTheSingleRankKernel) {
  const AttentionHeads H{4, 2, 8, 2, 0};
  const int64_t B = 2, T = 160, ld = (H.NH + 2 * H.NKV) * H.hs;
  const VecF qkv = RandomVec(B * T * ld, 30);
  VecF want(B * T * H.NH * H.hs), att(B * H.NH * T * T);
  GqaAttentionForward(want.data(), att.data(), qkv.data(), B, T, H);
  // One block of one chunk holding the whole sequence.
  SeqChunks q;
  q.count = 1;
  q.len = T;
  q.ids[0] = 0;
  VecF kv(B * T * 2 * H.NKV * H.hs), o(want.size()), lse(B * H.NH * T), sum(lse.size());
  VecF scratch(RingAttentionScratchFloats(B, q, H));
  PackKeyValues(kv.data(), qkv.data(), B * T, H);
  RingAttentionBegin(o.data(), lse.data(), sum.data(), B, q, H);
  RingAttentionForwardBlock(o.data(), lse.data(), sum.data(), scratch.data(), qkv.data(), kv.data(),
                            B, q, q, H);
  RingAttentionEnd(o.data(), lse.data(), sum.data(), B, q, H);
  double worst = 0;
  for (size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::abs(double(o[i]) - want[i]));
  EXPECT_LT(worst, 1e-5);
}

// GPT-2's AttentionForward/Backward are the NKV = NH case, bit for bit.
TEST(GqaAttention, MultiHeadFormIsTheGpt2Kernel) {
  const int64_t B = 2, T = 70, C = 16, NH = 2;
  const VecF qkv = RandomVec(B * T * 3 * C, 15);
  VecF o1(B * T * C), o2(B * T * C), a1(B * NH * T * T), a2(B * NH * T * T);
  AttentionForward(o1.data(), a1.data(), qkv.data(), B, T, C, NH);
  GqaAttentionForward(o2.data(), a2.data(), qkv.data(), B, T, AttentionHeads{NH, NH, C / NH, 1, 0});
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(a1, a2);
}

}  // namespace
}  // namespace scaletrain::cpu
