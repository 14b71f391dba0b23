// The planner's use of the pipeline schedules (src/parallel/schedule.h): the
// simulated bubble and in-flight micro-batches it reads for a step. The
// schedules themselves are checked in test_schedule.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "parallel/schedule.h"

namespace scaletrain {
namespace {

TEST(PlanSchedule, OneFOneBIdleIsPMinusOneSlots) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      auto s = BuildPipelineSchedule(ScheduleKind::k1F1B, p, 1, m);
      ASSERT_TRUE(s.ok());
      const double tf = 1.0, tb = 2.0;
      auto t = SimulatePipelineSchedule(*s, {tf, tb, 0.0});
      ASSERT_TRUE(t.ok()) << t.status().message();
      EXPECT_NEAR(t->makespan_s, (m + p - 1) * (tf + tb), 1e-9) << "p=" << p << " m=" << m;
      for (int st = 0; st < p; ++st) EXPECT_NEAR(t->idle_s[st], (p - 1) * (tf + tb), 1e-9);
      const auto live = PeakActivations(*s);
      for (int st = 0; st < p; ++st) EXPECT_EQ(live[st], std::min(p - st, m));
    }
  }
}

TEST(PlanSchedule, InterleavingDividesTheBubbleByVpp) {
  const int p = 4, m = 8;
  for (int v : {2, 4}) {
    auto s = BuildPipelineSchedule(ScheduleKind::kInterleaved, p, v, m);
    ASSERT_TRUE(s.ok());
    // A chunk holds 1/v of a stage's layers, so it takes 1/v of the time.
    const double tf = 1.0 / v, tb = 2.0 / v;
    auto t = SimulatePipelineSchedule(*s, {tf, tb, 0.0});
    ASSERT_TRUE(t.ok()) << t.status().message();
    const double ideal = m * 3.0;
    EXPECT_NEAR(t->makespan_s - ideal, (p - 1) * 3.0 / v, 1e-9) << "v=" << v;
    auto flat =
        SimulatePipelineSchedule(*BuildPipelineSchedule(ScheduleKind::k1F1B, p, 1, m), {1.0, 2.0});
    ASSERT_TRUE(flat.ok());
    EXPECT_LT(t->makespan_s, flat->makespan_s);
  }
}

TEST(PlanSchedule, GpipeHoldsEveryMicroBatch) {
  auto s = BuildPipelineSchedule(ScheduleKind::kGPipe, 4, 1, 6);
  ASSERT_TRUE(s.ok());
  for (int live : PeakActivations(*s)) EXPECT_EQ(live, 6);
  auto t = SimulatePipelineSchedule(*s, {1.0, 2.0});
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(t->makespan_s, (6 + 3) * 3.0, 1e-9);
}

TEST(PlanSchedule, RejectsWhatTheScheduleCannotRun) {
  EXPECT_FALSE(BuildPipelineSchedule(ScheduleKind::kInterleaved, 4, 2, 6).ok());  // 6 % 4 != 0
  EXPECT_FALSE(BuildPipelineSchedule(ScheduleKind::k1F1B, 4, 2, 8).ok());
}

}  // namespace
}  // namespace scaletrain
