// `scaletrain report --compare`'s arithmetic (report/compare.h): efficiency
// against the run with the fewest ranks, measured and predicted, and a page
// whose charts hold each run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "report/compare.h"

namespace scaletrain::report {
namespace {

std::vector<ScalingRun> Runs() {
  // 4 ranks first: the base is the fewest ranks wherever it is listed.
  return {{"r4", "dp 4 x tp 1 x pp 1", 4, 3000.0, 3600.0},
          {"r1", "dp 1 x tp 1 x pp 1", 1, 1000.0, 1000.0},
          {"r2", "dp 2 x tp 1 x pp 1", 2, 1800.0, std::nullopt}};
}

TEST(ScalingEfficiency, IsThroughputPerRankAgainstTheSmallestRun) {
  const std::vector<double> m = ScalingEfficiency(Runs(), false);
  EXPECT_DOUBLE_EQ(m[0], 3000.0 / 4 / 1000.0);
  EXPECT_DOUBLE_EQ(m[1], 1.0);
  EXPECT_DOUBLE_EQ(m[2], 1800.0 / 2 / 1000.0);
  // Predicted against the smallest run's prediction; 0 where none.
  const std::vector<double> p = ScalingEfficiency(Runs(), true);
  EXPECT_DOUBLE_EQ(p[0], 3600.0 / 4 / 1000.0);
  EXPECT_DOUBLE_EQ(p[1], 1.0);
  EXPECT_EQ(p[2], 0.0);
}

TEST(ScalingEfficiency, WithoutABasePredictionEveryPredictedFigureIsZero) {
  std::vector<ScalingRun> runs = Runs();
  runs[1].predicted_tokens_per_s.reset();
  for (double e : ScalingEfficiency(runs, true)) EXPECT_EQ(e, 0.0);
}

TEST(CompareHtml, DrawsTheCurvesAndListsEveryRun) {
  const std::string html = CompareHtml(Runs(), "Predicted on cluster test.");
  size_t svgs = 0;
  for (size_t at = html.find("<svg "); at != std::string::npos; at = html.find("<svg ", at + 1)) ++svgs;
  EXPECT_EQ(svgs, 2u);
  for (const char* want : {"r4", "r1", "r2", "0.75", "0.90", "+20.0%", "Predicted on cluster test."})
    EXPECT_NE(html.find(want), std::string::npos) << want;
}

}  // namespace
}  // namespace scaletrain::report
