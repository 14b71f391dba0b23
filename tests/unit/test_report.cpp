// `scaletrain report`'s parts: the SVG writer's helpers, reading a run
// directory (also one still being written), the page, and the hang diagnosis
// from flight records.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/svg.h"
#include "report/attribution.h"
#include "report/charts.h"
#include "report/flight.h"
#include "report/page.h"
#include "report/run_data.h"

namespace fs = std::filesystem;

namespace scaletrain::report {
namespace {

TEST(Svg, EscapesTextAndPicksRoundTicks) {
  EXPECT_EQ(XmlEscape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  EXPECT_EQ(NiceTicks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0}));
  EXPECT_EQ(NiceTicks(3.1, 4.4, 4), (std::vector<double>{3.5, 4.0}));
  EXPECT_EQ(TickLabel(25000), "25k");
  EXPECT_EQ(TickLabel(0.25), "0.25");
  Svg svg(10, 10);
  svg.Text(1, 1, "<x>");
  const std::string doc = svg.Finish();
  EXPECT_EQ(doc.rfind("<svg ", 0), 0u);
  EXPECT_NE(doc.find("&lt;x&gt;"), std::string::npos);
  EXPECT_EQ(doc.substr(doc.size() - 7), "</svg>\n");
}

// A chart without a point to draw says so instead of an empty frame (a run
// that has not logged a step yet); a series without a finite point has no
// legend entry, and a lone point is drawn as a dot.
TEST(Charts, WithoutDataEachChartSaysSo) {
  const double nan = std::nan("");
  const std::string no_line = LineChart("t", "x", "y", {{"loss", "#000", {{1, nan}, {nan, 2}}}});
  EXPECT_NE(no_line.find("no data yet"), std::string::npos);
  EXPECT_NE(StackedBars("t", "x", "y", {}, {{"f", "#000", {}}}).find("no data yet"),
            std::string::npos);
  EXPECT_NE(Heatmap("t", "x", "y", {}, {}, {}, "s", {}, "ref").find("no data yet"),
            std::string::npos);
  const std::string one_point =
      LineChart("t", "x", "y", {{"empty", "#111", {{nan, 1}}}, {"loss", "#222", {{5, 3}}}});
  EXPECT_EQ(one_point.find("no data yet"), std::string::npos);
  EXPECT_EQ(one_point.find(">empty<"), std::string::npos) << one_point;
  EXPECT_NE(one_point.find(">loss<"), std::string::npos) << one_point;
  EXPECT_NE(one_point.find("<circle"), std::string::npos) << one_point;
}

FlightOp Op(int64_t id, const std::string& group, int64_t seq, const std::string& state, int64_t issued = 0) {
  FlightOp op;
  op.id = id, op.group = group, op.seq = seq, op.op = "allreduce", op.bytes = 4096, op.step = 7;
  op.state = state, op.issued_ns = issued ? issued : 1000 + id;
  return op;
}

FlightFile File(int64_t rank, const std::string& reason, std::vector<FlightOp> ops) {
  FlightFile f;
  f.rank = rank, f.host = "h" + std::to_string(rank), f.reason = reason;
  f.groups = {{"world", {0, 1, 2}}, {"dp", {0, 1, 2}}};
  f.ops = std::move(ops);
  return f;
}

TEST(DiagnoseHang, NamesTheRankThatNeverEnteredTheCollective) {
  const std::vector<FlightFile> files = {
      File(0, "watchdog: allreduce ...", {Op(0, "dp", 3, "done"), Op(1, "dp", 4, "in flight")}),
      File(1, "SIGTERM", {Op(0, "dp", 3, "done"), Op(1, "world", 9, "done")}),
      File(2, "watchdog: allreduce ...", {Op(0, "dp", 3, "done"), Op(1, "dp", 4, "in flight")})};
  const HangDiagnosis d = DiagnoseHang(files);
  EXPECT_TRUE(d.hang);
  EXPECT_EQ(d.culprits, std::vector<int64_t>{1});
  EXPECT_NE(d.summary.find("allreduce #4 of 4096 bytes on group 'dp'"), std::string::npos) << d.summary;
  EXPECT_NE(d.summary.find("rank 1 never entered it"), std::string::npos) << d.summary;
  ASSERT_EQ(d.details.size(), 3u);
  EXPECT_NE(d.details[0].find("entered it and waited"), std::string::npos) << d.details[0];
  EXPECT_NE(d.details[1].find("never entered it; its last operation on the group was allreduce #3"),
            std::string::npos)
      << d.details[1];
}

TEST(DiagnoseHang, ARankWithoutARecordIsTheSuspect) {
  const std::vector<FlightFile> files = {
      File(0, "watchdog: x", {Op(0, "dp", 4, "in flight")}), File(2, "watchdog: x", {Op(0, "dp", 4, "in flight")})};
  const HangDiagnosis d = DiagnoseHang(files);
  EXPECT_EQ(d.culprits, std::vector<int64_t>{1});
  EXPECT_NE(d.details[1].find("rank 1: no flight record"), std::string::npos) << d.details[1];
}

TEST(DiagnoseHang, AFatalSignalIsNamedAndAStopIsNotAHang) {
  const HangDiagnosis dead =
      DiagnoseHang({File(1, "fatal signal 11 (Segmentation fault)", {Op(0, "dp", 2, "done")})});
  EXPECT_TRUE(dead.hang);
  EXPECT_EQ(dead.culprits, std::vector<int64_t>{1});
  EXPECT_NE(dead.summary.find("rank 1 (h1) died of signal 11"), std::string::npos) << dead.summary;
  const HangDiagnosis stop = DiagnoseHang({File(0, "SIGTERM", {Op(0, "dp", 2, "done")})});
  EXPECT_FALSE(stop.hang);
  EXPECT_NE(stop.summary.find("no rank reported a hang"), std::string::npos);
  EXPECT_TRUE(DiagnoseHang({}).summary.empty());
}

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("st_report_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.resolved.toml") << "[training]\nsteps = 10\nglobal_batch_size = 32\n[parallel]\ndp = 2\n"
                                                 << "[data]\ntrain = \"x.bin\"\nval = \"y.bin\"\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RunDirTest, ReadsARunInProgressAndDrawsEveryPlot) {
  {
    std::ofstream m(dir_ / "metrics.jsonl");
    for (int s = 1; s <= 6; ++s) {
      m << "{\"step\": " << s << ", \"loss\": " << 4.0 - 0.1 * s << ", \"step_time_s\": 0.1, \"tokens_per_s\": 1000"
        << ", \"forward_s\": 0.03, \"backward_s\": 0.05, \"grad_sync_wait_s\": 0.01, \"optimizer_s\": 0.005"
        << (s == 5 ? ", \"val_loss\": 3.6" : "") << "}\n";
    }
    m << "{\"step\": 7, \"loss\": 3.";  // being written
    std::ofstream r(dir_ / "ranks.jsonl");
    for (int rank = 0; rank < 2; ++rank) {
      r << "{\"step\": 5, \"rank\": " << rank
        << ", \"host\": \"h\", \"stage\": 0, \"steps\": 5, \"phases\": "
        << "{\"forward_s\": " << 0.03 + 0.001 * rank
        << ", \"backward_s\": 0.05, \"step_s\": 0.1}}\n";
    }
    std::ofstream(dir_ / "memory.json") << "{\"per_stage\": [{\"params_bytes\": 1048576, \"grads_bytes\": 1048576,"
                                        << " \"optimizer_bytes\": 2097152, \"activations_bytes\": 524288}]}";
  }
  auto run = ReadRunDir(dir_.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->steps.size(), 6u);
  EXPECT_FALSE(run->finished());
  EXPECT_EQ(run->world_size(), 2);
  ASSERT_EQ(run->windows.size(), 2u);
  EXPECT_DOUBLE_EQ(run->windows[1].Compute(), 0.031 + 0.05);
  const MeasuredStep m = MeasureStep(*run);
  EXPECT_DOUBLE_EQ(m.step_time_s, 0.1);
  EXPECT_DOUBLE_EQ(m.parts[0].second, 0.08);                  // compute
  EXPECT_NEAR(m.parts[kPartOther].second, 0.1 - 0.08 - 0.01 - 0.005, 1e-12);  // data + other
  EXPECT_FALSE(m.slow) << "ranks 1.25% apart: no rank waited for another";
  EXPECT_EQ(m.whose, "rank 0, medians over 5 steps after warm-up");  // the first step is warm-up
  PageOptions o;
  o.prediction = Prediction{"test", 0.11, m.parts};
  const std::string html = ReportHtml(*run, o);
  EXPECT_GE(CountSvgs(html),
            7);  // loss, tokens/s, breakdown, per rank, heat map, predicted, memory
  EXPECT_NE(html.find("in progress (or stopped): step 6 of 10"), std::string::npos);
  EXPECT_NE(html.find("+10.0%"), std::string::npos);  // step time predicted 0.11 against 0.1
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no fetches
}

// A run of two ranks where rank 1 computes 18.1 ms a step and rank 0 9.8 ms
// (the figures): rank 0 spends 8.5 ms a step blocked in the
// gradient all-reduce, of which 8.3 ms is waiting for rank 1.
class SlowRankRun : public RunDirTest {
 protected:
  void Write(double rank1_forward_s, bool flagged, int ranks = 2) {
    std::ofstream m(dir_ / "metrics.jsonl");
    for (int s = 1; s <= 30; ++s) {
      m << "{\"step\": " << s << ", \"loss\": 3, \"step_time_s\": 0.0185, \"tokens_per_s\": 1000"
        << ", \"data_s\": 0.0008, \"forward_s\": 0.004, \"backward_s\": 0.004, "
           "\"grad_sync_wait_s\": 0.0085"
        << ", \"optimizer_s\": 0.001";
      if (flagged && s % 10 == 0) {
        m << ", \"stragglers\": [{\"rank\": 1, \"host\": \"vm\", \"phase\": \"forward_s\", "
             "\"compute_s\": 0.0181, "
          << "\"fastest_compute_s\": 0.0098, \"median_compute_s\": 0.01395, \"compute_ratio\": "
             "1.3, "
          << "\"ranks_compared\": 2}]";
      }
      m << "}\n";
    }
    std::ofstream r(dir_ / "ranks.jsonl");
    for (int step : {10, 20, 30}) {
      for (int rank = 0; rank < ranks; ++rank) {
        const bool slow = rank == 1;
        r << "{\"step\": " << step << ", \"rank\": " << rank
          << ", \"host\": \"vm\", \"stage\": 0, \"phases\": {"
          << "\"data_s\": 0.0008, \"forward_s\": "
          << (slow ? rank1_forward_s : 0.004 + 0.0002 * rank)
          << ", \"backward_s\": 0.004, \"optimizer_s\": 0.001, \"dp_comm_s\": "
          << (slow ? 0.0004 : 0.0085) << ", \"wait_s\": 0.0001, \"step_s\": 0.0186}}\n";
      }
    }
  }
  RunData Read() {
    auto run = ReadRunDir(dir_.string());
    EXPECT_TRUE(run.ok()) << run.status().message();
    return run.ok() ? *run : RunData{};
  }
};

TEST_F(SlowRankRun, TheOthersWaitIsChargedToTheSlowRankNotToCommunication) {
  Write(0.0123, /*flagged=*/false);  // found from the per-rank compute alone
  const RunData run = Read();
  const Attribution a = AttributeWaits(run);
  ASSERT_TRUE(a.slow);
  EXPECT_EQ(a.slow->rank, 1);
  EXPECT_FALSE(a.slow->flagged);
  EXPECT_EQ(a.windows_used, 2);  // the first window is warm-up
  EXPECT_EQ(SlowRankWords(*a.slow),
            "rank 1 computes 1.85x the others (18.1 ms against 9.8 ms a step)");
  ASSERT_EQ(a.ranks.size(), 2u);
  // Rank 0: 8.3 ms of its 8.5 ms DP wait was waiting for rank 1.
  EXPECT_NEAR(a.ranks[0].parts[kPartWaiting].second, 0.0083, 1e-12);
  EXPECT_NEAR(a.ranks[0].parts[kPartDp].second, 0.0002, 1e-12);
  EXPECT_DOUBLE_EQ(a.ranks[1].parts[kPartWaiting].second, 0.0);
  EXPECT_DOUBLE_EQ(a.ranks[1].parts[kPartDp].second, 0.0004);
  // Per step of rank 0: its window's budget (step 15 is in the window ending at 20).
  EXPECT_NEAR(a.WaitBudget(0, 15), 0.0083, 1e-12);
  EXPECT_NEAR(a.WaitBudget(0, 99), 0.0083, 1e-12);  // past the last window: the last one's
  EXPECT_DOUBLE_EQ(a.WaitBudget(1, 15), 0.0);
  // The planner is compared with the slow rank's step, whose DP comm is
  // the transfer alone: 0.4 ms against 0.38 predicted, not -95%.
  const MeasuredStep m = MeasureStep(run);
  ASSERT_TRUE(m.slow);
  EXPECT_NEAR(m.parts[kPartCompute].second, 0.0163, 1e-12);
  EXPECT_DOUBLE_EQ(m.parts[kPartDp].second, 0.0004);
  EXPECT_NE(m.whose.find("rank 1, the slowest"), std::string::npos) << m.whose;
  PageOptions o;
  Breakdown predicted = m.parts;
  predicted[kPartCompute].second = 0.0089, predicted[kPartDp].second = 0.00038;
  o.prediction = Prediction{"test", 0.0105, predicted};
  const std::string html = ReportHtml(run, o);
  EXPECT_NE(html.find("The step is slower than predicted because rank 1 computes 1.85x the others"),
            std::string::npos);
  EXPECT_NE(html.find("<td>DP comm (exposed)</td><td>0.4 ms</td><td>0.38 ms</td><td>-5.0%</td>"),
            std::string::npos);
  EXPECT_NE(html.find("Where each rank&#39;s step went"), std::string::npos);
  EXPECT_NE(html.find("per step, waiting for it: rank 0 8.3 ms"), std::string::npos);
}

TEST_F(SlowRankRun, NoiseIsNotAStragglerButAFlaggedRankIs) {
  // 10.5 against 9.8 ms (7%): within the detector's 20%, nothing is charged.
  Write(0.0047, /*flagged=*/false);
  Attribution a = AttributeWaits(Read());
  EXPECT_FALSE(a.slow);
  for (const RankSplit& r : a.ranks) EXPECT_DOUBLE_EQ(r.parts[kPartWaiting].second, 0.0);
  EXPECT_FALSE(MeasureStep(Read()).slow);
  // 12% apart, but the detector flagged rank 1 (it looks at each step): charged.
  Write(0.0052, /*flagged=*/true);
  a = AttributeWaits(Read());
  ASSERT_TRUE(a.slow);
  EXPECT_TRUE(a.slow->flagged);
  EXPECT_NEAR(a.ranks[0].parts[kPartWaiting].second, 0.0012, 1e-12);
}

TEST_F(SlowRankRun, WithThreeRanksTheOthersAreTheirMedian) {
  Write(0.0123, /*flagged=*/false, /*ranks=*/3);  // ranks 0 and 2: 9.8 and 10.2 ms
  const Attribution a = AttributeWaits(Read());
  ASSERT_TRUE(a.slow);
  EXPECT_EQ(SlowRankWords(*a.slow),
            "rank 1 computes 1.81x the median of the others (18.1 ms against 10.0 ms a step)");
  EXPECT_NEAR(a.ranks[2].parts[kPartWaiting].second, 0.0079, 1e-12);
}

TEST_F(SlowRankRun, TheSummaryNamesThePhaseInWordsAndTheRatioToTheFastest) {
  Write(0.0123, /*flagged=*/true);
  const std::string html = ReportHtml(Read(), {});
  EXPECT_NE(
      html.find(
          "rank 1 (vm), flagged last in the window to step 30: slow in the forward pass, computes "
          "1.85x the fastest rank (18.1 ms against 9.8 ms a step)"),
      std::string::npos)
      << html.substr(0, 2000);
  EXPECT_EQ(html.find("forward_s"), std::string::npos) << "a raw field name on the page";
  EXPECT_EQ(html.find("1.30x"), std::string::npos) << "the median of two ranks is their midpoint";
}

TEST(Charts, TheHeatMapScaleIsFixedAgainstTheReference) {
  // A cell 10% over its reference is white on any run; 2.5x is the fourth bin.
  const std::string svg = Heatmap("t", "x", "y", {"rank 0", "rank 1"}, {"10", "20"},
                                  {{10, 11}, {10, 25}}, "ms", {10, 10}, "a healthy window");
  // (Cells are drawn with a light border, the key's swatches with a grey one.)
  auto cells = [](const std::string& doc, const char* color) {
    size_t n = 0;
    const std::string cell = std::string("fill=\"") + color + "\" stroke=\"#eee\"";
    for (size_t at = doc.find(cell); at != std::string::npos; at = doc.find(cell, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(cells(svg, "#ffffff"), 3u) << svg;
  EXPECT_EQ(cells(svg, "#d7301f"), 1u) << "25 ms is 2.5x";
  EXPECT_NE(svg.find(">25<"), std::string::npos) << "values in the cells";
  EXPECT_NE(svg.find(">times a healthy window<"), std::string::npos);
  EXPECT_NE(svg.find(">(10 ms)<"), std::string::npos);
  // Alone, the 11 ms cell is still white: the scale is not the run's spread.
  const std::string alone =
      Heatmap("t", "x", "y", {"rank 0"}, {"10", "20"}, {{10, 11}}, "ms", {10}, "ref");
  EXPECT_EQ(cells(alone, "#ffffff"), 2u) << alone;
}

TEST(Attribution, ManyRanksShowTheFastestTheMedianAndTheSlowest) {
  Attribution a;
  for (int r = 0; r < 10; ++r) {
    RankSplit s;
    s.rank = r, s.compute_s = r == 7 ? 0.05 : 0.01 + 0.001 * r;
    a.ranks.push_back(s);
  }
  const auto shown = RanksToShow(a);
  ASSERT_EQ(shown.size(), 3u);
  EXPECT_EQ(shown[0].first, "rank 0 (fastest)");
  EXPECT_EQ(shown[2].first, "rank 7 (slowest)");
  a.ranks.resize(8);
  EXPECT_EQ(RanksToShow(a).size(), 8u);
}

TEST_F(RunDirTest, WithoutPerRankRecordsThePageSaysWhyInsteadOfEmptyCharts) {
  std::ofstream(dir_ / "metrics.jsonl") << "{\"step\": 1, \"loss\": 4, \"step_time_s\": 0.1}\n";
  auto run = ReadRunDir(dir_.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  const std::string html = ReportHtml(*run, {});
  EXPECT_NE(html.find("No per-rank records (ranks.jsonl)"), std::string::npos);
  EXPECT_EQ(html.find("Where each rank&#39;s step went"), std::string::npos);
}

TEST_F(RunDirTest, ADirectoryThatIsNotARunIsOneClearError) {
  auto run = ReadRunDir((dir_ / "nothing").string());
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("no run directory"), std::string::npos);
  run = ReadRunDir(dir_.string());  // no metrics.jsonl
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("is not a run directory"), std::string::npos) << run.status().message();
}

TEST_F(RunDirTest, TheLaunchersRestartsAreATableWithTheLostHostsAndRedoneSteps) {
  std::ofstream(dir_ / "metrics.jsonl") << "{\"step\": 1, \"loss\": 4.0, \"step_time_s\": 0.1}\n";
  std::ofstream(dir_ / "events.jsonl")
      << "{\"event\":\"start\",\"restart\":0,\"hosts\":[\"h0\",\"h1\",\"h2\"],\"dp\":3,\"resume_step\":-1,\"time\":\"T0\"}\n"
      << "{\"event\":\"failure\",\"exit_code\":205,\"failed_hosts\":[\"h2\"],\"last_step\":845,\"checkpoint_step\":800,"
      << "\"steps_lost\":45,\"time\":\"T1\"}\n"
      << "{\"event\":\"start\",\"restart\":1,\"hosts\":[\"h0\",\"h1\"],\"dp\":2,\"resume_step\":800,\"time\":\"T2\"}\n"
      << "{\"event\":\"done\",\"exit_code\":0,\"time\":\"T3\"}\n{\"event\":\"fail";  // cut short
  auto run = ReadRunDir(dir_.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->events.size(), 4u);
  EXPECT_EQ(run->events[1].failed_hosts, std::vector<std::string>{"h2"});
  const std::string html = ReportHtml(*run, PageOptions());
  EXPECT_NE(html.find("1 failure(s), 45 step(s) redone"), std::string::npos);
  EXPECT_NE(html.find("exit 205 after step 845; lost: h2; 45 step(s) redone from step 800"), std::string::npos);
  EXPECT_NE(html.find("2 host(s): h0, h1; dp 2; from the checkpoint of step 800"), std::string::npos);
  fs::remove(dir_ / "events.jsonl");
  EXPECT_EQ(ReportHtml(*ReadRunDir(dir_.string()), PageOptions()).find("<h2>Restarts"), std::string::npos);
}

}  // namespace
}  // namespace scaletrain::report
