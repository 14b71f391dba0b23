// The straggler detector and the per-rank records (telemetry/rank_records.h)
// on made-up windows: who is flagged, when, in which phase, and who is not.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/stats.h"
#include "telemetry/rank_records.h"

namespace scaletrain {
namespace {

RankWindow Window(int64_t rank, int64_t stage, double forward_s, double backward_s = 0.020) {
  RankWindow w;
  w.rank = rank;
  w.host = "host" + std::to_string(rank);
  w.stage = stage;
  w.step = 10;
  w.steps = 5;
  w.mean[static_cast<int>(RankPhase::kData)] = 0.001;
  w.mean[static_cast<int>(RankPhase::kForward)] = forward_s;
  w.mean[static_cast<int>(RankPhase::kBackward)] = backward_s;
  w.mean[static_cast<int>(RankPhase::kOptimizer)] = 0.002;
  // Waiting for the slowest rank is not compute: a fast rank waits a lot.
  w.mean[static_cast<int>(RankPhase::kWait)] = 0.050;
  w.median_compute_s = w.lower_quartile_compute_s = RankCompute(w);  // every step alike
  return w;
}

TEST(StragglerDetector, FlagsASlowRankAfterTheConfiguredWindowsAndNamesThePhase) {
  StragglerDetector d({0.2, 2});
  const std::vector<RankWindow> slow1 = {Window(0, 0, 0.010), Window(1, 0, 0.050),
                                         Window(2, 0, 0.011), Window(3, 0, 0.010)};
  EXPECT_TRUE(d.Observe(slow1).empty()) << "one window is not enough";
  const std::vector<Straggler> s = d.Observe(slow1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 1);
  EXPECT_EQ(s[0].host, "host1");
  EXPECT_EQ(s[0].phase, RankPhase::kForward);
  EXPECT_DOUBLE_EQ(s[0].seconds, 0.050);
  EXPECT_DOUBLE_EQ(s[0].median_seconds, 0.0105);  // median of 0.010, 0.010, 0.011, 0.050
  // compute = data + forward + backward + optimizer: 0.073 against the median 0.0335
  EXPECT_NEAR(s[0].compute_ratio, 0.073 / 0.0335, 1e-12);
  EXPECT_EQ(s[0].windows, 2);
  // Against the fastest rank (rank 0 or 3: compute 0.033) and the median
  // of the four (0.0335): 0.073 / 0.033 = 2.21x and 2.18x.
  EXPECT_DOUBLE_EQ(s[0].compute_s, 0.073);
  EXPECT_DOUBLE_EQ(s[0].fastest_compute_s, 0.033);
  EXPECT_DOUBLE_EQ(s[0].stage_median_compute_s, 0.0335);
  EXPECT_DOUBLE_EQ(s[0].fastest_phase_seconds, 0.010);
  EXPECT_EQ(s[0].ranks_compared, 4);
  EXPECT_EQ(StragglerLine(s[0]),
            "straggler: rank 1 on host1 is slow in the forward pass: it computes 2.21x the fastest "
            "rank and 2.18x "
            "the median (73.0 ms per step against 33.0 ms and 33.5 ms; the forward pass 50.0 ms "
            "against 10.0 ms), "
            "2 windows in a row");
  // Back to normal: cleared; slow again: it takes two windows again.
  const std::vector<RankWindow> even = {Window(0, 0, 0.010), Window(1, 0, 0.010),
                                        Window(2, 0, 0.010), Window(3, 0, 0.010)};
  EXPECT_TRUE(d.Observe(even).empty());
  EXPECT_TRUE(d.Observe(slow1).empty());
  EXPECT_EQ(d.Observe(slow1).size(), 1u);
  ASSERT_EQ(d.history().size(), 1u);
  EXPECT_EQ(d.history()[0], (std::pair<int64_t, int64_t>{1, 2}));
}

TEST(StragglerDetector, WithTwoRanksTheLineComparesWithTheOtherNotTheMidpoint) {
  // Rank 1 computes 18.1 ms to rank 0's 9.8: the median of two is their
  // midpoint (13.95 ms, 1.30x), which understates it; the line says 1.85x.
  RankWindow fast = Window(0, 0, 0.0038, 0.003), slow = Window(1, 0, 0.0121, 0.003);
  StragglerDetector d({0.2, 1});
  const auto s = d.Observe({fast, slow});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(StragglerLine(s[0]),
            "straggler: rank 1 on host1 is slow in the forward pass: it computes 1.85x the fastest "
            "rank (18.1 ms per "
            "step against 9.8 ms; the forward pass 12.1 ms against 3.8 ms), 1 window in a row");
}

TEST(StragglerDetector, ThresholdAndStagesDecide) {
  // Compute 19% over the median: under the 20% threshold; 21%: over it.
  StragglerDetector strict({0.2, 1});
  const double median_compute = 0.001 + 0.010 + 0.020 + 0.002;
  const double just_under = 0.010 + 0.19 * median_compute,
               just_over = 0.010 + 0.21 * median_compute;
  EXPECT_TRUE(
      strict.Observe({Window(0, 0, 0.010), Window(1, 0, 0.010), Window(2, 0, just_under)}).empty());
  EXPECT_EQ(
      strict.Observe({Window(0, 0, 0.010), Window(1, 0, 0.010), Window(2, 0, just_over)}).size(),
      1u);
  // A pipeline's stages differ by design (the last runs the head): ranks are
  // compared within their stage only, and a stage of one rank not at all.
  StragglerDetector staged({0.2, 1});
  EXPECT_TRUE(staged.Observe({Window(0, 0, 0.010), Window(1, 1, 0.090)}).empty());
  EXPECT_TRUE(staged
                  .Observe({Window(0, 0, 0.010), Window(1, 0, 0.010), Window(2, 1, 0.09),
                            Window(3, 1, 0.09)})
                  .empty());
  // The slow phase is the one furthest above its median: here backward.
  StragglerDetector phase({0.2, 1});
  const auto s = phase.Observe(
      {Window(0, 0, 0.010, 0.020), Window(1, 0, 0.012, 0.090), Window(2, 0, 0.010, 0.020)});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].phase, RankPhase::kBackward);
}

TEST(StragglerDetector, AFewMillisecondsOfJitterIsNotAStraggler) {
  // Compute 3.0, 3.0 and 4.9 ms a step: 1.63x the median, but only 1.9 ms over it.
  const std::vector<RankWindow> tiny = {Window(0, 0, 0.0, 0.0), Window(1, 0, 0.0, 0.0), Window(2, 0, 0.0019, 0.0)};
  StragglerDetector floor2({0.2, 1, 0.002});
  EXPECT_TRUE(floor2.Observe(tiny).empty());
  StragglerDetector floor1({0.2, 1, 0.001});
  const auto s = floor1.Observe(tiny);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 2);
}

TEST(StragglerDetector, AFewDescheduledStepsAreNotAStraggler) {
  // Rank 0 lost the CPU for 20 ms on two steps of each 5-step window: its
  // mean compute is 8 ms over the others', its median 4 ms (33 -> 37 ms), its
  // lower quartile is theirs.
  RankWindow hit = Window(0, 0, 0.010 + 0.040 / 5);
  hit.lower_quartile_compute_s = Window(0, 0, 0.010).lower_quartile_compute_s;
  hit.median_compute_s = hit.lower_quartile_compute_s + 0.004;
  StragglerDetector d({0.1, 1});
  const std::vector<RankWindow> windows = {hit, Window(1, 0, 0.010), Window(2, 0, 0.010)};
  EXPECT_TRUE(d.Observe(windows).empty());
  EXPECT_TRUE(d.Observe(windows).empty());
  // Slow on most steps: the lower quartile moves and the rank is flagged, in forward.
  hit.lower_quartile_compute_s += 0.004;
  const auto s = d.Observe({hit, Window(1, 0, 0.010), Window(2, 0, 0.010)});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 0);
  EXPECT_EQ(s[0].phase, RankPhase::kForward);
}

TEST(Stats, QuantileIsLinearBetweenTheNearestValues) {
  EXPECT_EQ(Quantile({}, 0.25), 0.0);
  EXPECT_EQ(Quantile({7}, 0.25), 7.0);
  const std::vector<double> five = {9, 1, 5, 3, 7};  // sorted: 1 3 5 7 9
  EXPECT_DOUBLE_EQ(Quantile(five, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(Quantile(five, 0.25), 3.0);
  EXPECT_DOUBLE_EQ(Quantile(five, 0.3), 3.4);
  EXPECT_DOUBLE_EQ(Quantile(five, 1.0), 9.0);
  EXPECT_DOUBLE_EQ(Median(five), 5.0);
  EXPECT_DOUBLE_EQ(Median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(Quantile({4, 1, 2, 3}, 0.25), 1.75);
}

TEST(RankRecords, JsonLineHasEveryPhase) {
  const nlohmann::json j = nlohmann::json::parse(RankWindowJson(Window(3, 1, 0.01)));
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["host"], "host3");
  EXPECT_EQ(j["stage"], 1);
  EXPECT_EQ(j["step"], 10);
  EXPECT_EQ(j["steps"], 5);
  for (int i = 0; i < kNumRankPhases; ++i) {
    EXPECT_TRUE(j["phases"].contains(RankPhaseName(static_cast<RankPhase>(i)))) << i;
  }
  EXPECT_DOUBLE_EQ(j["phases"]["forward_s"].get<double>(), 0.01);
  EXPECT_DOUBLE_EQ(j["median_compute_s"].get<double>(), 0.033);
  EXPECT_DOUBLE_EQ(j["lower_quartile_compute_s"].get<double>(), 0.033);
}

}  // namespace
}  // namespace scaletrain
