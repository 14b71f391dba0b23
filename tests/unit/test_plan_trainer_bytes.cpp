// The data-parallel arithmetic the trainer and the planner share
// (src/parallel/dp_layout.h), and the planner's fp32 figures, against hand
// computation. The same figures are checked against a running trainer by
// tests/cli/test_plan_vs_trainer.sh.
#include <gtest/gtest.h>

#include "parallel/dp_layout.h"
#include "plan/cost_model.h"
#include "plan/hardware.h"
#include "plan/model_preset.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

TEST(DpLayout, BucketsTileThePaddedBufferFromTheEnd) {
  // 1003 elements at dp 4 pad to 1004; 1 KiB buckets hold 256 floats.
  const int64_t padded = DpPaddedNumel(1003, 4);
  ASSERT_EQ(padded, 1004);
  const auto b = CutGradBuckets(padded, 4, 1024);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].end, 1004);
  EXPECT_EQ(b[0].begin, 748);
  EXPECT_EQ(b[3].begin, 0);
  EXPECT_EQ(b[3].size(), 1004 - 3 * 256);
  for (size_t i = 0; i + 1 < b.size(); ++i) EXPECT_EQ(b[i].begin, b[i + 1].end);
  for (const auto& x : b) EXPECT_EQ(x.size() % 4, 0);
  // A bucket smaller than dp elements is raised to dp.
  EXPECT_EQ(CutGradBuckets(12, 4, 4).size(), 3u);
}

TEST(DpLayout, StepCollectivesPerZeroStage) {
  const auto b = CutGradBuckets(1004, 4, 1024);  // 4 buckets, 4016 bytes in all
  auto total = [](const std::vector<DpCollective>& cs) {
    int64_t n = 0, calls = 0;
    for (const auto& c : cs) n += c.payload_bytes, calls += c.calls;
    return std::pair{n, calls};
  };
  EXPECT_TRUE(DataParallelStepCollectives(b, 1, 2, 3, 4).empty());
  // ZeRO-0: 4 bucket all-reduces + the loss average.
  EXPECT_EQ(total(DataParallelStepCollectives(b, 4, 0, 3, 4)), (std::pair<int64_t, int64_t>{4016 + 8, 5}));
  // ZeRO-1: reduce-scatter and all-gather of every bucket, norm and loss.
  EXPECT_EQ(total(DataParallelStepCollectives(b, 4, 1, 3, 4)), (std::pair<int64_t, int64_t>{2 * 4016 + 16, 10}));
  // ZeRO-2: the reduce-scatter after each of 3 micro-batches.
  EXPECT_EQ(total(DataParallelStepCollectives(b, 4, 2, 3, 4)), (std::pair<int64_t, int64_t>{4 * 4016 + 16, 18}));
  // Ring bytes: all-reduce 2(n-1)/n, the others (n-1)/n of the payload.
  DpCollective ar{"x", DpCollectiveKind::kAllreduce, 1, 4000};
  DpCollective ag{"x", DpCollectiveKind::kAllgather, 1, 4000};
  EXPECT_DOUBLE_EQ(ar.RingBytes(4), 6000.0);
  EXPECT_DOUBLE_EQ(ag.RingBytes(4), 3000.0);
}

TEST(PlanTrainerBytes, Fp32HasNoMasterCopy) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto preset = LoadModel("gpt2-124m", kConfigs);
  ASSERT_TRUE(preset.ok());
  auto cluster = cat.Cluster("dgx-a100");
  ASSERT_TRUE(cluster.ok());
  CostModel model(preset->spec, *cluster, Software{});
  const int64_t n = 124439808;  // GPT-2 124M, a multiple of 8: no padding
  Layout l;
  l.dp = 8, l.global_batch = 64, l.micro_batch = 2, l.zero = 1;
  l.precision = Precision::kFP32;
  auto p = model.Predict(l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->rank_bytes.params, 4 * n);
  EXPECT_EQ(p->rank_bytes.grads, 4 * n);
  EXPECT_EQ(p->rank_bytes.optimizer, 8 * n / 8);  // two fp32 moments, 1/dp
  l.precision = Precision::kBF16;
  l.zero = 2;
  p = model.Predict(l);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rank_bytes.params, 2 * n);
  EXPECT_EQ(p->rank_bytes.grads, 4 * n / 8);
  EXPECT_EQ(p->rank_bytes.optimizer, 12 * n / 8);  // fp32 master + two moments, 1/dp
  // ZeRO-2 reduces every micro-batch (4 here): 4 reduce-scatters of the
  // bf16 gradients, one parameter all-gather, two scalars.
  EXPECT_EQ(p->DpPayloadBytes(), 5 * 2 * n + 16);
}

TEST(PlanTrainerBytes, TensorParallelPayloadOfAStep) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto preset = LoadModel("gpt2-124m", kConfigs);
  ASSERT_TRUE(preset.ok());
  CostModel model(preset->spec, *cat.Cluster("dgx-a100"), Software{});
  Layout l;
  l.tp = 2, l.dp = 4, l.global_batch = 16, l.micro_batch = 2;  // 2 micro-batches of 2 x 1024 tokens
  auto p = model.Predict(l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const int64_t tokens = 2 * 1024, msg = tokens * 768 * 2;  // bf16 activations
  // Per micro-batch: 4 all-reduces per layer x 12, the embedding output, the
  // head's input gradient, three fp32 values per token for the loss; once:
  // the gradient-norm sum.
  EXPECT_EQ(p->tp_payload_bytes, 2 * (4 * 12 * msg + 2 * msg + 3 * tokens * 4) + 8);
}

}  // namespace
}  // namespace scaletrain::plan
