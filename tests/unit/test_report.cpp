// `scaletrain report`'s parts: the SVG writer's helpers, reading a run
// directory (also one still being written), the page, and the hang diagnosis
// from flight records.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/svg.h"
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
  EXPECT_NE(Heatmap("t", "x", "y", {}, {}, {}, "s").find("no data yet"), std::string::npos);
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
      r << "{\"step\": 5, \"rank\": " << rank << ", \"host\": \"h\", \"stage\": 0, \"steps\": 5, \"phases\": "
        << "{\"forward_s\": " << 0.03 * (rank + 1) << ", \"backward_s\": 0.05, \"step_s\": 0.1}}\n";
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
  EXPECT_DOUBLE_EQ(run->windows[1].Compute(), 0.06 + 0.05);
  const MeasuredStep m = MeasureStep(*run);
  EXPECT_DOUBLE_EQ(m.step_time_s, 0.1);
  EXPECT_DOUBLE_EQ(m.parts[0].second, 0.08);                  // compute
  EXPECT_NEAR(m.parts[5].second, 0.1 - 0.08 - 0.01 - 0.005, 1e-12);  // data + other
  PageOptions o;
  o.prediction = Prediction{"test", 0.11, m.parts};
  const std::string html = ReportHtml(*run, o);
  EXPECT_GE(CountSvgs(html), 6);  // loss, tokens/s, breakdown, heat map, predicted, memory
  EXPECT_NE(html.find("in progress (or stopped): step 6 of 10"), std::string::npos);
  EXPECT_NE(html.find("+10.0%"), std::string::npos);  // step time predicted 0.11 against 0.1
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no fetches
}

TEST_F(RunDirTest, ADirectoryThatIsNotARunIsOneClearError) {
  auto run = ReadRunDir((dir_ / "nothing").string());
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("no run directory"), std::string::npos);
  run = ReadRunDir(dir_.string());  // no metrics.jsonl
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("is not a run directory"), std::string::npos) << run.status().message();
}

}  // namespace
}  // namespace scaletrain::report
