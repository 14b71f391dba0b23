// 16-bit float conversions (core/half.h) and the gradient compressor
// (parallel/grad_compression.h) on a group of one; the multi-rank sums are
// tests/mpi/comm_test.cpp's (16-bit all-reduce) and
// tests/cli/test_dp_compress.sh's (training).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "comm/self_communicator.h"
#include "core/half.h"
#include "parallel/dp_layout.h"
#include "parallel/grad_compression.h"

namespace scaletrain {
namespace {

TEST(HalfTest, EveryF16ValueRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const f16 h{static_cast<uint16_t>(b)};
    const float x = FromF16(h);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(FromF16(ToF16(x)))) << b;
      continue;
    }
    EXPECT_EQ(ToF16(x).bits, h.bits) << "bits " << b << " value " << x;
  }
}

TEST(HalfTest, F16RoundsToNearestEven) {
  EXPECT_EQ(FromF16(ToF16(1.0f + 1.0f / 2048)), 1.0f);                // a tie: to even (1.0)
  EXPECT_EQ(FromF16(ToF16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // a tie: to even (up)
  EXPECT_EQ(FromF16(ToF16(1.0f + 1.1f / 2048)), 1.0f + 1.0f / 1024);  // past the tie
  EXPECT_EQ(FromF16(ToF16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(FromF16(ToF16(65520.0f))));  // the tie above the largest: to inf
  EXPECT_EQ(FromF16(ToF16(65519.0f)), 65504.0f);
  EXPECT_EQ(FromF16(ToF16(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(FromF16(ToF16(std::ldexp(1.0f, -25))), 0.0f);                   // its half: a tie to 0
  EXPECT_EQ(FromF16(ToF16(std::ldexp(1.5f, -25))), std::ldexp(1.0f, -24));
  EXPECT_EQ(FromF16(ToF16(-3.0f)), -3.0f);
}

TEST(HalfTest, Bf16KeepsTheFloatRangeAndRoundsToNearestEven) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float x = FromBf16(bf16{static_cast<uint16_t>(b)});
    if (!std::isnan(x)) {
      EXPECT_EQ(ToBf16(x).bits, b) << b;
    }
  }
  EXPECT_EQ(FromBf16(ToBf16(1.0f + 1.0f / 256)), 1.0f);               // tie to even
  EXPECT_EQ(FromBf16(ToBf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);   // tie to even (up)
  EXPECT_EQ(FromBf16(ToBf16(3e38f)), FromBf16(bf16{0x7F62}));         // 0x7F61B1E6 rounds up; no overflow
  EXPECT_TRUE(std::isnan(FromBf16(ToBf16(std::nanf("")))));
}

std::vector<float> Gradients(int64_t n, uint32_t seed, float magnitude) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, magnitude);
  std::vector<float> g(n);
  for (float& x : g) x = d(gen);
  return g;
}

TEST(GradCompressorTest, Bf16AndF16SumsAreTheRoundedInputs) {
  auto comm = CreateSelfCommunicator("dp");
  const int64_t n = 1000;
  const std::vector<float> g = Gradients(n, 1, 1e-3f);
  GradCompressor bf(DpCompression::kBf16, n);
  std::vector<float> buf = g;
  ASSERT_TRUE(bf.Start(comm.get(), buf.data(), n, 0).Wait().ok());
  ASSERT_TRUE(bf.Finish(comm.get(), buf.data(), n, 0).ok());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(buf[i], FromBf16(ToBf16(g[i])));

  // fp16: the first reduction is fp32 (it sets the scale), later ones are
  // the scaled fp16 values: relative error <= 2^-11 for values near the max.
  GradCompressor h(DpCompression::kFp16, n);
  for (int step = 0; step < 2; ++step) {
    buf = g;
    ASSERT_TRUE(h.Start(comm.get(), buf.data(), n, 0).Wait().ok());
    ASSERT_TRUE(h.Finish(comm.get(), buf.data(), n, 0).ok());
  }
  EXPECT_EQ(h.fp32_fallbacks(), 1);
  float absmax = 0;
  for (float x : g) absmax = std::max(absmax, std::fabs(x));
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(buf[i], g[i], absmax * std::ldexp(1.0f, -11)) << i;
}

TEST(GradCompressorTest, F16OverflowRedoesTheRegionInFp32) {
  auto comm = CreateSelfCommunicator("dp");
  const int64_t n = 64;
  GradCompressor h(DpCompression::kFp16, n);
  std::vector<float> small(n, 1e-4f), big(n, 1e-4f);
  big[7] = 50.0f;  // 2^12 / 1e-4 x 50 overflows fp16 at the scale the small step set
  std::vector<float> buf = small;
  for (const auto* in : {&small, &small, &big}) {
    buf = *in;
    ASSERT_TRUE(h.Start(comm.get(), buf.data(), n, 0).Wait().ok());
    ASSERT_TRUE(h.Finish(comm.get(), buf.data(), n, 0).ok());
  }
  EXPECT_EQ(h.fp32_fallbacks(), 2);  // the first reduction and the overflow
  EXPECT_EQ(buf, big);               // the fp32 sum of one rank: the input
}

// Error feedback: after T steps, what was sent adds up to what came in, less
// the residual, and the residual stays bounded (it does not grow with T).
TEST(GradCompressorTest, SignErrorFeedbackSendsWhatItLeftOutLater) {
  auto comm = CreateSelfCommunicator("dp");
  const int64_t n = 1000;  // 3 blocks of 256 and a partial one
  GradCompressor sign(DpCompression::kSign, n);
  std::vector<double> sent(n, 0), came(n, 0);
  double worst_residual = 0;
  for (int t = 0; t < 200; ++t) {
    std::vector<float> buf = Gradients(n, 100 + t, 1e-3f);
    for (int64_t i = 0; i < n; ++i) came[i] += buf[i];
    ASSERT_TRUE(sign.Start(comm.get(), buf.data(), n, 0).Wait().ok());
    ASSERT_TRUE(sign.Finish(comm.get(), buf.data(), n, 0).ok());
    // Each decoded value is +-(its block's scale).
    for (int64_t b0 = 0; b0 < n; b0 += kSignBlock) {
      for (int64_t i = b0; i < std::min(n, b0 + kSignBlock); ++i)
        ASSERT_FLOAT_EQ(std::fabs(buf[i]), std::fabs(buf[b0])) << i;
    }
    for (int64_t i = 0; i < n; ++i) sent[i] += buf[i];
    double r = 0;
    for (int64_t i = 0; i < n; ++i) r = std::max(r, std::fabs(came[i] - sent[i]));
    worst_residual = std::max(worst_residual, r);
  }
  // One step's gradients are N(0, 1e-3); the residual stays within a few of them.
  EXPECT_LT(worst_residual, 2e-2);
  EXPECT_EQ(SignMessageBytes(n), 32 * 4 + 4 * 4);  // 1000 bits in 32 words, 4 block scales
}

TEST(GradCompressorTest, StepCollectivesCountTheCompressedBytes) {
  const std::vector<GradBucket> buckets = CutGradBuckets(1000, 2, 2000);  // 500-element buckets
  ASSERT_EQ(buckets.size(), 2u);
  auto bytes = [&](DpCompression c) {
    return DataParallelStepCollectives(buckets, 2, 0, 1, 0, 4, 4, c).at(0).payload_bytes;
  };
  EXPECT_EQ(bytes(DpCompression::kNone), 4000);
  EXPECT_EQ(bytes(DpCompression::kBf16), 2000);
  EXPECT_EQ(bytes(DpCompression::kFp16), 2000);
  EXPECT_EQ(bytes(DpCompression::kSign), 2 * 2 * SignMessageBytes(500));
  EXPECT_EQ(DataParallelStepCollectives(buckets, 2, 0, 1, 0, 4, 4, DpCompression::kSign).at(0).kind,
            CollectiveKind::kAllgather);
}

}  // namespace
}  // namespace scaletrain
