// The prediction's range (plan/uncertainty.h): it holds the prediction, it
// is the prediction where no input is uncertain, it widens when an input's
// span widens (an assumed factor, a wider flag, a power cap), and it combines
// the inputs as root-sum-square of their effects one at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "plan/cost_model.h"
#include "plan/hardware.h"
#include "plan/model_preset.h"
#include "plan/uncertainty.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

struct RangeSetup {
  ModelSpec spec;
  ClusterSpec cluster;
  Layout layout;
  Software sw;
};

// A 4-layer GPT on 16 GPUs of `cluster` (tp 8 in a node, dp 2 across two),
// so that every input moves the step: GEMMs, attention, element-wise work,
// NVLink and the fabric.
Result<RangeSetup> SmallGptOn(const std::string& cluster) {
  HardwareCatalog cat;
  ST_RETURN_IF_ERROR(cat.LoadDir(kConfigs + "/hardware"));
  RangeSetup s;
  ST_ASSIGN_OR_RETURN(s.spec, GptSpecFromDims("gpt", 4, 2048, 16, 4096, 50304));
  ST_ASSIGN_OR_RETURN(s.cluster, cat.Cluster(cluster));
  s.layout.tp = 8, s.layout.dp = 2, s.layout.micro_batch = 1, s.layout.global_batch = 8;
  s.sw = *ShippedStack("modern");
  return s;
}

double PointSeconds(const RangeSetup& s) {
  CostModel m(s.spec, s.cluster, s.sw);
  return m.Predict(s.layout)->step_time_s;
}

std::pair<double, double> RangeOf(const RangeSetup& s, const Uncertainty& u) {
  auto r = StepTimeRange(s.spec, s.cluster, s.sw, s.layout, u);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::pair<double, double>{0, 0};
}

TEST(PlanRange, HoldsThePredictionAndIsItWithoutUncertainty) {
  auto s = SmallGptOn("dgx-h100");
  ASSERT_TRUE(s.ok()) << s.status().message();
  const double t = PointSeconds(*s);
  const auto [fast, slow] = RangeOf(*s, SourcedUncertainty(s->cluster));
  EXPECT_LT(fast, t);
  EXPECT_GT(slow, t);
  const auto [lo, hi] = RangeOf(*s, Uncertainty{});
  EXPECT_DOUBLE_EQ(lo, t);
  EXPECT_DOUBLE_EQ(hi, t);
}

// The range is the root-sum-square of each input's effect alone.
TEST(PlanRange, InputsCombineAsRootSumSquare) {
  auto s = SmallGptOn("dgx-h100");
  ASSERT_TRUE(s.ok()) << s.status().message();
  const double t = PointSeconds(*s);
  Uncertainty matmul_only, clock_only, both;
  matmul_only.matmul = both.matmul = {0.1, 0.1};
  clock_only.clock = both.clock = {0.05, 0.05};
  const auto m = RangeOf(*s, matmul_only), c = RangeOf(*s, clock_only), b = RangeOf(*s, both);
  EXPECT_NEAR(t - b.first, std::hypot(t - m.first, t - c.first), 1e-12 * t);
  EXPECT_NEAR(b.second - t, std::hypot(m.second - t, c.second - t), 1e-12 * t);
  // Each alone moves the step.
  EXPECT_GT(t - m.first, 0.01 * t);
  EXPECT_GT(c.second - t, 0.01 * t);
}

TEST(PlanRange, WidensWhenAnInputWidens) {
  auto s = SmallGptOn("dgx-h100");
  ASSERT_TRUE(s.ok()) << s.status().message();
  const Uncertainty base = SourcedUncertainty(s->cluster);
  const auto r = RangeOf(*s, base);
  for (Span Uncertainty::*input :
       {&Uncertainty::software, &Uncertainty::matmul, &Uncertainty::attention, &Uncertainty::hbm,
        &Uncertainty::clock, &Uncertainty::intra_link, &Uncertainty::fabric}) {
    Uncertainty wider = base;
    (wider.*input).down += 0.1, (wider.*input).up += 0.1;
    const auto w = RangeOf(*s, wider);
    EXPECT_LT(w.first, r.first);
    EXPECT_GT(w.second, r.second);
  }
}

// A factor the catalog marks assumed gets the spread of the measured parts;
// H100 SXM's matmul factor is measured, so marking it assumed widens it.
TEST(PlanRange, AssumedFactorsTakeTheMeasuredPartsSpread) {
  auto s = SmallGptOn("dgx-h100");
  ASSERT_TRUE(s.ok()) << s.status().message();
  const Uncertainty measured = SourcedUncertainty(s->cluster);
  // A measured MAMF: the version's and the clock's span only.
  EXPECT_DOUBLE_EQ(measured.matmul.up, 0.0);
  EXPECT_DOUBLE_EQ(measured.software.up, kStackVersionSpan.up);
  EXPECT_DOUBLE_EQ(measured.fabric.up, kInfinibandSpan.up);
  RangeSetup assumed = *s;
  assumed.cluster.gpu.assumed = {"matmul_efficiency"};
  assumed.cluster.fabric.assumed = {"efficiency"};
  const Uncertainty u = SourcedUncertainty(assumed.cluster);
  EXPECT_DOUBLE_EQ(u.matmul.down, kAssumedMatmulSpan);
  EXPECT_DOUBLE_EQ(u.fabric.down, kAssumedLinkSpan);
  EXPECT_DOUBLE_EQ(u.attention.up, measured.attention.up);  // not marked: as measured
  const auto r = RangeOf(*s, measured), w = RangeOf(assumed, u);
  EXPECT_LT(w.first, r.first);
  EXPECT_GT(w.second, r.second);
  // The catalog's own assumed parts: MI300X's attention and clock, RoCE's fabric.
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  const Uncertainty mi = SourcedUncertainty(*cat.Cluster("mi300x-ib"));
  EXPECT_DOUBLE_EQ(mi.attention.up, kAssumedAttentionSpan);
  EXPECT_DOUBLE_EQ(mi.clock.down, kAssumedClockSpan);
  // Never narrower than a measured clock's; its MAMF is measured.
  EXPECT_DOUBLE_EQ(mi.clock.up, kSustainedClockSpan.up);
  EXPECT_DOUBLE_EQ(mi.matmul.up, 0.0);
  EXPECT_DOUBLE_EQ(SourcedUncertainty(*cat.Cluster("h100-roce")).fabric.up, kAssumedLinkSpan);
}

// Under a power cap the clock may keep up to what the flattest measured
// response gives (A100 PCIe against SXM): the span's top grows with the cap.
TEST(PlanRange, CappedClockMayHoldMore) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  const ClusterSpec capped = *cat.Cluster("dgx-h100-500w");
  const double share = (500.0 - 70.0) / (700.0 - 70.0);
  EXPECT_NEAR(capped.gpu.capped_power_share, share, 1e-12);
  const Span clock = SourcedUncertainty(capped).clock;
  EXPECT_NEAR(
      clock.up,
      (1 + kSustainedClockSpan.up) * std::pow(share, kCappedClockExponentLow) / std::cbrt(share) -
          1,
      1e-12);
  EXPECT_GT(clock.up, 0.15);  // 500 W of 700: up to ~19% above the cube-root law's clock
  EXPECT_DOUBLE_EQ(clock.down, kSustainedClockSpan.down);
  EXPECT_DOUBLE_EQ(SourcedUncertainty(*cat.Cluster("dgx-h100")).clock.up, kSustainedClockSpan.up);
}

TEST(PlanRange, FlagsReplaceTheSpansAndAreChecked) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  const ClusterSpec c = *cat.Cluster("dgx-a100");
  auto u = UncertaintyFor(c, {0.1, std::nullopt});
  ASSERT_TRUE(u.ok());
  EXPECT_DOUBLE_EQ(u->matmul.down, 0.1);
  EXPECT_DOUBLE_EQ(u->hbm.up, 0.1);
  // The flag replaces the version's span too; the links' not given stay sourced.
  EXPECT_DOUBLE_EQ(u->software.up, 0.0);
  EXPECT_DOUBLE_EQ(u->fabric.up, kInfinibandSpan.up);
  auto bad = UncertaintyFor(c, {std::nullopt, 1.5});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--fabric-uncertainty = 1.5 is not a fraction"),
            std::string::npos)
      << bad.status().message();
}

// A misspelt `assumed` entry is an error naming what may be listed.
TEST(PlanRange, AssumedListsOnlyTheRangesInputs) {
  const std::string path = ::testing::TempDir() + "/assumed.toml";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(
      "[gpu.x]\nbf16_tflops = 100\nhbm_gib = 10\nhbm_tbps = 1\ntdp_w = 100\nassumed = "
      "[\"matmul_efficency\"]\n",
      f);
  std::fclose(f);
  HardwareCatalog cat;
  const Status st = cat.LoadFile(path);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("assumed lists 'matmul_efficency'"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(
                "matmul_efficiency, attention_efficiency, hbm_efficiency, sustained_clock_ratio"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace scaletrain::plan
