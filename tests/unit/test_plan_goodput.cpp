// The goodput term (plan/goodput.h): Young's and Daly's intervals against
// the values Daly's paper prints, the expected wall time against a direct
// simulation of failures on a timeline with checkpoints, and the plan's
// goodput against hand arithmetic and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>

#include "plan/goodput.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

TEST(Goodput, YoungIntervalIsSqrtTwoCM) {
  // C = 60 s, M = 24 h: sqrt(2 x 60 x 86400) = sqrt(10,368,000); 3220^2 is
  // 10,368,400, so the root is 3220 - 400 / 6440 - ... = 3219.93789.
  EXPECT_NEAR(YoungIntervalSeconds(60, 86400), 3219.93789, 1e-4);
}

TEST(Goodput, DalyIntervalMatchesHisPublishedOptima) {
  // Daly (2006), Figs. 3-5: delta = 5 min, and M = 24 h, 6 h and 15 min give
  // tau_opt = 117, 57 and 9.1 min (the paper's rounding).
  EXPECT_NEAR(DalyIntervalSeconds(300, 24 * 3600.0) / 60, 117, 0.5);
  EXPECT_NEAR(DalyIntervalSeconds(300, 6 * 3600.0) / 60, 57, 0.5);
  EXPECT_NEAR(DalyIntervalSeconds(300, 15 * 60.0) / 60, 9.1, 0.05);
  // By hand for M = 24 h: sqrt(2 x 300 x 86400) = 7200; x = 300 / 172800;
  // 7200 (1 + sqrt(x) / 3 + x / 9) - 300 = 7001.39 s.
  EXPECT_NEAR(DalyIntervalSeconds(300, 86400), 7001.389, 1e-3);
  // A write as long as two MTBFs or more: checkpoint every MTBF.
  EXPECT_DOUBLE_EQ(DalyIntervalSeconds(500, 250), 250);
  EXPECT_DOUBLE_EQ(DalyIntervalSeconds(900, 250), 250);
}

TEST(Goodput, JobMtbfAndCheckpointBytes) {
  // Llama 3: 419 unexpected interruptions in 54 days on 16,384 GPUs is one
  // every 54 x 24 / 419 = 3.0931 h, a GPU's MTBF of 3.0931 x 16384 h.
  const double per_gpu_h = 54 * 24 * 16384.0 / 419;
  EXPECT_NEAR(JobMtbfSeconds(per_gpu_h, 16384) / 3600, 3.0931, 1e-4);
  EXPECT_DOUBLE_EQ(JobMtbfSeconds(100, 8), 45000);
  // 14 B a parameter in mixed precision, 12 in fp32.
  EXPECT_DOUBLE_EQ(CheckpointBytes(1000, Precision::kBF16), 14000);
  EXPECT_DOUBLE_EQ(CheckpointBytes(1000, Precision::kFP32), 12000);
}

TEST(Goodput, PartsSumToTheWallAndVanishWithoutFailures) {
  // 1000 segments of 600 s.
  const GoodputTimes t = ExpectedRunTimes(6e5, 600, 60, 300, 3600);
  EXPECT_NEAR(t.wall_s, 6e5 + t.checkpoint_s + t.rework_s + t.restart_s, 1e-6);
  // Daly's closed form: M e^(R/M) (e^((tau+C)/M) - 1) T / tau.
  const double daly = 3600 * std::exp(300 / 3600.0) * std::expm1(660 / 3600.0) * 1000;
  EXPECT_NEAR(t.wall_s, daly, 1e-9 * daly);
  EXPECT_NEAR(t.interruptions, t.wall_s / 3600, 1e-9);
  EXPECT_NEAR(t.checkpoint_s, 1000 * 60, 1e-6);
  // A run shorter than the interval is one segment: the run and its final
  // checkpoint.
  const GoodputTimes one = ExpectedRunTimes(1000, 5000, 60, 300, 3600);
  const double one_daly = 3600 * std::exp(300 / 3600.0) * std::expm1(1060 / 3600.0);
  EXPECT_NEAR(one.wall_s, one_daly, 1e-9 * one_daly);
  EXPECT_DOUBLE_EQ(one.checkpoint_s, 60);
  // 2.5 intervals: two whole segments and a half one.
  const GoodputTimes half = ExpectedRunTimes(1500, 600, 60, 300, 3600);
  const double seg = 3600 * std::exp(300 / 3600.0);
  EXPECT_NEAR(half.wall_s, seg * (2 * std::expm1(660 / 3600.0) + std::expm1(360 / 3600.0)),
              1e-9 * half.wall_s);
  EXPECT_DOUBLE_EQ(half.checkpoint_s, 180);
  // Failures far apart: only the writes are lost.
  const GoodputTimes none = ExpectedRunTimes(6e5, 600, 60, 300, 1e15);
  EXPECT_NEAR(none.wall_s, 6e5 * 660 / 600, 1e-3);
  EXPECT_NEAR(none.interruptions, 0, 1e-6);
  // Rare failures: the first-order loss C/tau + (tau/2 + R)/M per unit of
  // useful time (Young's), to within its second-order terms.
  const GoodputTimes rare = ExpectedRunTimes(6e5, 600, 6, 30, 1e6);
  const double first_order = 6.0 / 600 + (600.0 / 2 + 30) / 1e6;
  EXPECT_NEAR(rare.wall_s / 6e5 - 1, first_order, 2e-5);
}

// A direct simulation of one run: exponential failures on a timeline of
// segments (compute then checkpoint); a failure sends the run back to the
// segment's start after a restart, which a failure can also interrupt.
GoodputTimes Simulate(int64_t segments, double tau, double c, double r, double m,
                      std::mt19937_64& rng) {
  std::exponential_distribution<double> next_failure(1.0 / m);
  GoodputTimes t;
  for (int64_t s = 0; s < segments; ++s) {
    for (;;) {
      const double x = next_failure(rng);
      if (x >= tau + c) {
        t.wall_s += tau + c;
        t.checkpoint_s += c;
        break;
      }
      t.wall_s += x;
      t.rework_s += x;
      t.interruptions += 1;
      for (;;) {  // the restart, until one runs R without a failure
        const double y = next_failure(rng);
        const double spent = std::min(y, r);
        t.wall_s += spent;
        t.restart_s += spent;
        if (y >= r) break;
        t.interruptions += 1;
      }
    }
  }
  return t;
}

TEST(Goodput, ExpectedTimesMatchASimulation) {
  // M = 1 h, tau = 10 min, C = 1 min, R = 5 min: a segment fails about one
  // time in six. 2000 runs of 200 segments: the mean wall time's relative
  // standard error is below 0.2% (segment times' spread about their mean),
  // so 1% is a 5-sigma bound; the parts get 2%.
  const double tau = 600, c = 60, r = 300, m = 3600;
  const int64_t segments = 200, runs = 2000;
  std::mt19937_64 rng(20261128);
  GoodputTimes sum;
  for (int64_t i = 0; i < runs; ++i) {
    const GoodputTimes t = Simulate(segments, tau, c, r, m, rng);
    sum.wall_s += t.wall_s, sum.checkpoint_s += t.checkpoint_s, sum.rework_s += t.rework_s;
    sum.restart_s += t.restart_s, sum.interruptions += t.interruptions;
  }
  const GoodputTimes e = ExpectedRunTimes(segments * tau, tau, c, r, m);
  const double n = static_cast<double>(runs);
  EXPECT_NEAR(sum.wall_s / n / e.wall_s, 1, 0.01);
  EXPECT_NEAR(sum.rework_s / n / e.rework_s, 1, 0.02);
  EXPECT_NEAR(sum.restart_s / n / e.restart_s, 1, 0.02);
  EXPECT_NEAR(sum.interruptions / n / e.interruptions, 1, 0.02);
  EXPECT_DOUBLE_EQ(sum.checkpoint_s / n, e.checkpoint_s);
  // Goodput = useful / wall, near 0.79 here.
  EXPECT_NEAR(segments * tau / (sum.wall_s / n), segments * tau / e.wall_s, 0.01);
}

// 16 GPUs on 2 nodes of a made-up cluster at $2 a GPU-hour, 1 kW training
// and 200 W idle for the job.
GoodputJob SmallJob() {
  GoodputJob job;
  job.step_time_s = 10;
  job.useful_s = 1e6;
  job.gpus = 16;
  job.nodes = 2;
  job.checkpoint_bytes = 1e12;
  job.usd_per_gpu_hour = 2;
  job.train_power_w = 1000;
  job.idle_power_w = 200;
  return job;
}

ClusterSpec StorageCluster() {
  ClusterSpec c;
  c.name = "made-up";
  c.storage_write_gbps = 10;  // C = 1e12 / 10e9 = 100 s
  c.storage_read_gbps = 20;   // read 50 s
  c.mtbf_hours = 100;         // per node: the job's is 50 h
  return c;
}

TEST(Goodput, EvaluateByHand) {
  GoodputOptions o;
  auto g = EvaluateGoodput(SmallJob(), StorageCluster(), o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->mtbf_per, "node");
  EXPECT_DOUBLE_EQ(g->job_mtbf_s, 180000);
  EXPECT_DOUBLE_EQ(g->checkpoint_write_s, 100);
  EXPECT_DOUBLE_EQ(g->restart_s, kDefaultRelaunchS + 50);
  // Daly: sqrt(2 x 100 x 180000) = 6000; x = 100 / 360000;
  // 6000 (1 + sqrt(x)/3 + x/9) - 100 = 5933.52 s: 593 steps of 10 s.
  EXPECT_NEAR(g->daly_interval_s, 5933.52, 0.01);
  EXPECT_EQ(g->interval_steps, 593);
  EXPECT_FALSE(g->interval_given);
  const GoodputTimes t = ExpectedRunTimes(1e6, 5930, 100, 650, 180000);
  EXPECT_DOUBLE_EQ(g->checkpoints, 169);  // 1e6 / 5930 = 168.6: 168 whole intervals and the rest
  EXPECT_DOUBLE_EQ(g->times.wall_s, t.wall_s);
  EXPECT_DOUBLE_EQ(g->goodput, 1e6 / t.wall_s);
  EXPECT_DOUBLE_EQ(g->downtime_gpu_hours, (t.wall_s - 1e6) * 16 / 3600);
  EXPECT_DOUBLE_EQ(g->downtime_usd, g->downtime_gpu_hours * 2);
  EXPECT_NEAR(g->downtime_mwh, (t.rework_s * 1000 + (t.checkpoint_s + t.restart_s) * 200) / 3.6e9,
              1e-12);
  // The flags win: per GPU, a given interval, another storage and relaunch.
  o.mtbf_hours = 800;
  o.mtbf_per = "gpu";
  o.interval_steps = 30;
  o.storage_write_gbps = 100;
  o.relaunch_s = 0;
  g = EvaluateGoodput(SmallJob(), StorageCluster(), o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_DOUBLE_EQ(g->job_mtbf_s, 800 * 3600.0 / 16);
  EXPECT_DOUBLE_EQ(g->checkpoint_write_s, 10);
  EXPECT_DOUBLE_EQ(g->restart_s,
                   10);  // the write rate reads too, where only --storage-gbps is given
  EXPECT_TRUE(g->interval_given);
  EXPECT_DOUBLE_EQ(g->interval_s, 300);
}

std::string ErrorOf(const GoodputOptions& o, ClusterSpec c = StorageCluster()) {
  auto g = EvaluateGoodput(SmallJob(), c, o);
  return g.ok() ? "" : g.status().message();
}

TEST(Goodput, BadValuesNameTheFlag) {
  GoodputOptions o;
  for (double bad : {0.0, -5.0, std::nan("")}) {
    o.mtbf_hours = bad;
    EXPECT_NE(ErrorOf(o).find("--mtbf-hours"), std::string::npos) << bad;
  }
  o = {};
  o.mtbf_hours = 10;
  o.mtbf_per = "rack";
  EXPECT_NE(ErrorOf(o).find("--mtbf-per 'rack' is unknown; use node"), std::string::npos);
  o = {};
  o.storage_write_gbps = -1;
  EXPECT_NE(ErrorOf(o).find("--storage-gbps"), std::string::npos);
  o = {};
  o.interval_steps = 0;
  EXPECT_NE(ErrorOf(o).find("--checkpoint-interval-steps 0 must be >= 1"), std::string::npos);
  o = {};
  o.relaunch_s = -1;
  EXPECT_NE(ErrorOf(o).find("--restart-s"), std::string::npos);
  // A cluster without the figures: the flags that give them.
  ClusterSpec bare;
  bare.name = "bare";
  EXPECT_NE(ErrorOf({}, bare).find("give --mtbf-hours"), std::string::npos);
  o = {};
  o.mtbf_hours = 10;
  EXPECT_NE(ErrorOf(o, bare).find("give --storage-gbps"), std::string::npos);
  // The preset's MTBF is per node: --mtbf-per gpu alone cannot reread it.
  o = {};
  o.mtbf_per = "gpu";
  EXPECT_NE(ErrorOf(o).find("--mtbf-per gpu without --mtbf-hours"), std::string::npos);
}

TEST(Goodput, PresetCarriesLlama3Figures) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto c = cat.Cluster("h100-roce");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mtbf_per, "gpu");
  EXPECT_NEAR(c->mtbf_hours, 54 * 24 * 16384.0 / 419, 1.0);
  EXPECT_DOUBLE_EQ(c->storage_write_gbps, 2000);
}

TEST(Goodput, CatalogRefusesABadUnit) {
  const std::string path = ::testing::TempDir() + "/goodput_bad_unit.toml";
  std::ofstream(path)
      << "[cluster.x]\ngpu = \"h100-sxm\"\nnode = \"dgx-h100\"\nfabric = \"ib-ndr-8x400\"\n"
         "mtbf_hours = 100\nmtbf_per = \"rack\"\n";
  HardwareCatalog cat;
  const Status st = cat.LoadFile(path);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mtbf_per"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace scaletrain::plan
