// The planner's zero-bubble schedules (zb-h1, zb-v) on the cpu stack, the
// trainer's: against 1F1B at the same layout the bubble shrinks as the
// simulated schedules say (ZB-H1's W deferred into the cool-down, ZB-V's
// chunks in a V), the stage's activation memory grows (every stage holds pp
// micro-batches, and the W copies of the output gradients), and the search
// offers them where they fit. Stacks without them refuse them by name.
#include <gtest/gtest.h>

#include "plan/hardware.h"
#include "plan/model_preset.h"
#include "plan/search.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

struct Fixture {
  HardwareCatalog cat;
  std::unique_ptr<CostModel> model;
  explicit Fixture(const std::string& stack) {
    EXPECT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
    auto p = LoadModel("gpt2-124m", kConfigs);
    EXPECT_TRUE(p.ok());
    model = std::make_unique<CostModel>(p->spec, *cat.Cluster("dgx-a100"), *ShippedStack(stack));
  }
};

Layout PipelineLayout(int64_t vpp, bool zero_bubble) {
  Layout l;
  l.tp = 1, l.pp = 3, l.dp = 2, l.vpp = vpp, l.micro_batch = 2, l.global_batch = 24;
  l.precision = Precision::kFP32;
  l.zero_bubble = zero_bubble;
  return l;
}

TEST(PlanZeroBubble, BubbleShrinksAndActivationsGrow) {
  Fixture f("cpu");
  auto one = f.model->Predict(PipelineLayout(1, false));
  auto h1 = f.model->Predict(PipelineLayout(1, true));
  auto v = f.model->Predict(PipelineLayout(2, true));
  ASSERT_TRUE(one.ok() && h1.ok() && v.ok()) << one.status().message() << h1.status().message()
                                             << v.status().message();
  EXPECT_EQ(h1->layout.schedule(), ScheduleKind::kZbH1);
  EXPECT_EQ(v->layout.schedule(), ScheduleKind::kZbV);
  // The same work: compute and the stage's transfers are not the schedule's.
  EXPECT_DOUBLE_EQ(h1->time_s.compute, one->time_s.compute);
  EXPECT_GT(one->time_s.bubble, 0.0);
  EXPECT_LT(h1->time_s.bubble, 0.6 * one->time_s.bubble);
  // (zb-v's first stage also runs GPT-2's heavy head: its V is no better
  // balanced than 1F1B's cost split, and here idles more than zb-h1.)
  EXPECT_LT(v->time_s.bubble, one->time_s.bubble);
  EXPECT_LT(h1->step_time_s, one->step_time_s);
  // Stage 0 holds as many micro-batches as under 1F1B, plus the W copies;
  // the last stage pp (3) micro-batches to 1F1B's one (beside one shared
  // backward scratch).
  EXPECT_GT(h1->stage_bytes[0].activations, one->stage_bytes[0].activations);
  EXPECT_GT(h1->stage_bytes[2].activations, 2 * one->stage_bytes[2].activations);
  // zb-v: the first stage runs the embedding and the head, no tied copy.
  EXPECT_LT(v->stage_bytes[2].params, one->stage_bytes[2].params);
}

TEST(PlanZeroBubble, SearchOffersThemWhereTheStackHasThem) {
  Fixture cpu("cpu");
  SearchOptions o;
  o.num_gpus = 6, o.global_batch = 24, o.pp = 3, o.precision = Precision::kFP32;
  o.top_k = 100;
  auto r = SearchLayouts(*cpu.model, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  bool h1 = false, v = false;
  for (const Prediction& p : r->top) {
    h1 |= p.layout.schedule() == ScheduleKind::kZbH1;
    v |= p.layout.schedule() == ScheduleKind::kZbV;
    if (p.layout.zero_bubble) {
      EXPECT_NE(p.layout.recompute, Recompute::kFull);
    }
  }
  EXPECT_TRUE(h1 && v);
  Fixture modern("modern");
  auto m = SearchLayouts(*modern.model, o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (const Prediction& p : m->top) EXPECT_FALSE(p.layout.zero_bubble);
  auto refused = modern.model->Predict(PipelineLayout(1, true));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no zero-bubble schedule"), std::string::npos);
}

}  // namespace
}  // namespace scaletrain::plan
