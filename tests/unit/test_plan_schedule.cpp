// Pipeline schedules: structure, simulated bubble and in-flight micro-batches.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "plan/schedule.h"

namespace scaletrain::plan {
namespace {

// Every stage runs each (micro-batch, chunk) forward once and backward once,
// the backward after the forward.
void ExpectWellFormed(const PipelineSchedule& s) {
  for (int st = 0; st < s.pp; ++st) {
    std::set<std::tuple<int, int, int>> seen;
    for (const auto& a : s.stages[st]) {
      const int op = a.op == PipeOp::kForward ? 0 : 1;
      EXPECT_TRUE(seen.insert({op, a.micro_batch, a.chunk}).second) << "stage " << st << " repeats an action";
      if (op == 1) {
        EXPECT_TRUE(seen.count({0, a.micro_batch, a.chunk})) << "backward before forward";
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(2 * s.micro_batches * s.vpp));
  }
}

TEST(PlanSchedule, OneFOneBIdleIsPMinusOneSlots) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      auto s = BuildSchedule(ScheduleKind::k1F1B, p, 1, m);
      ASSERT_TRUE(s.ok());
      ExpectWellFormed(*s);
      const double tf = 1.0, tb = 2.0;
      auto t = SimulateSchedule(*s, tf, tb);
      ASSERT_TRUE(t.ok()) << t.status().message();
      EXPECT_NEAR(t->makespan, (m + p - 1) * (tf + tb), 1e-9) << "p=" << p << " m=" << m;
      for (int st = 0; st < p; ++st) EXPECT_NEAR(t->idle[st], (p - 1) * (tf + tb), 1e-9);
      const auto live = PeakInFlight(*s);
      for (int st = 0; st < p; ++st) EXPECT_EQ(live[st], std::min(p - st, m));
    }
  }
}

TEST(PlanSchedule, InterleavingDividesTheBubbleByVpp) {
  const int p = 4, m = 8;
  for (int v : {2, 4}) {
    auto s = BuildSchedule(ScheduleKind::kInterleaved, p, v, m);
    ASSERT_TRUE(s.ok());
    ExpectWellFormed(*s);
    // A chunk holds 1/v of a stage's layers, so it takes 1/v of the time.
    const double tf = 1.0 / v, tb = 2.0 / v;
    auto t = SimulateSchedule(*s, tf, tb);
    ASSERT_TRUE(t.ok()) << t.status().message();
    const double ideal = m * 3.0;
    EXPECT_NEAR(t->makespan - ideal, (p - 1) * 3.0 / v, 1e-9) << "v=" << v;
    auto flat = SimulateSchedule(*BuildSchedule(ScheduleKind::k1F1B, p, 1, m), 1.0, 2.0);
    EXPECT_LT(t->makespan, flat->makespan);
  }
}

TEST(PlanSchedule, GpipeHoldsEveryMicroBatch) {
  auto s = BuildSchedule(ScheduleKind::kGPipe, 4, 1, 6);
  ASSERT_TRUE(s.ok());
  ExpectWellFormed(*s);
  for (int live : PeakInFlight(*s)) EXPECT_EQ(live, 6);
  auto t = SimulateSchedule(*s, 1.0, 2.0);
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(t->makespan, (6 + 3) * 3.0, 1e-9);
}

TEST(PlanSchedule, RejectsWhatTheScheduleCannotRun) {
  EXPECT_FALSE(BuildSchedule(ScheduleKind::kInterleaved, 4, 2, 6).ok());  // 6 % 4 != 0
  EXPECT_FALSE(BuildSchedule(ScheduleKind::k1F1B, 4, 2, 8).ok());
  // A malformed action list is reported, not hung on.
  PipelineSchedule bad;
  bad.pp = 2, bad.vpp = 1, bad.micro_batches = 1;
  bad.stages = {{{PipeOp::kBackward, 0, 0}, {PipeOp::kForward, 0, 0}}, {{PipeOp::kForward, 0, 0}, {PipeOp::kBackward, 0, 0}}};
  EXPECT_FALSE(SimulateSchedule(bad, 1, 2).ok());
}

}  // namespace
}  // namespace scaletrain::plan
