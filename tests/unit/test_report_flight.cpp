// The flight recorder (comm/flight_recorder.h) as `scaletrain report` reads
// it: a ring of the last N operations with per-group sequence numbers, dumped
// on request and from a fatal signal.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "comm/flight_recorder.h"
#include "comm/self_communicator.h"
#include "report/run_data.h"

namespace fs = std::filesystem;

namespace scaletrain {
namespace {

class FlightRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = fs::temp_directory_path() / ("st_flight_" + std::to_string(::getpid()));
    fs::create_directories(run_);
    std::ofstream(run_ / "config.resolved.toml") << "[data]\ntrain = \"x.bin\"\nval = \"y.bin\"\n";
    std::ofstream(run_ / "metrics.jsonl") << "";
  }
  void TearDown() override { fs::remove_all(run_); }
  fs::path run_;
};

// Every test here runs in a child process: the recorder is one per process
// and is enabled once.
template <typename F>
int InChild(F f) {
  const pid_t pid = fork();
  if (pid == 0) {
    f();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST_F(FlightRecorderTest, KeepsTheLastNOperationsWithGroupSequenceNumbers) {
  const int status = InChild([&] {
    FlightRecorder::Get().Enable((run_ / "flight").string(), 3, "node-a", 4, {{"dp", {2, 3}}});
    auto dp = CreateSelfCommunicator("dp");
    auto tp = CreateSelfCommunicator("tp");
    float x[8] = {};
    for (int i = 0; i < 5; ++i) (void)dp->Allreduce(x, 8, ReduceOp::kSum);
    dp->set_step(12);
    (void)tp->Allgather(x, x + 4, 4);
    (void)dp->Broadcast(x, 2, 0);
    if (!FlightRecorder::Get().Dump("asked").ok()) _exit(2);
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto run = report::ReadRunDir(run_.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->flight.size(), 1u);
  const report::FlightFile& f = run->flight[0];
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.host, "node-a");
  EXPECT_EQ(f.reason, "asked");
  EXPECT_EQ(f.groups.at("dp"), (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(f.ops.size(), 4u);  // the last 4 of 7
  EXPECT_EQ(f.ops[0].id, 3);
  EXPECT_EQ(f.ops[0].group, "dp");
  EXPECT_EQ(f.ops[0].seq, 3);
  EXPECT_EQ(f.ops[0].bytes, 32);
  EXPECT_EQ(f.ops[0].state, "done");
  EXPECT_EQ(f.ops[2].group, "tp");
  EXPECT_EQ(f.ops[2].op, "allgather");
  EXPECT_EQ(f.ops[2].seq, 0);
  EXPECT_EQ(f.ops[3].op, "broadcast");
  EXPECT_EQ(f.ops[3].seq, 5);
  EXPECT_EQ(f.ops[3].step, 12);
}

TEST_F(FlightRecorderTest, AFatalSignalWritesTheRecordAndStillKillsTheProcess) {
  const int status = InChild([&] {
    FlightRecorder::Get().Enable((run_ / "flight").string(), 1, "node-b", 16, {});
    auto dp = CreateSelfCommunicator("dp");
    float x[2] = {};
    (void)dp->Allreduce(x, 2, ReduceOp::kSum);
    std::raise(SIGSEGV);
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  auto run = report::ReadRunDir(run_.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->flight.size(), 1u);
  EXPECT_EQ(run->flight[0].reason.rfind("fatal signal 11", 0), 0u) << run->flight[0].reason;
  ASSERT_EQ(run->flight[0].ops.size(), 1u);
  EXPECT_EQ(run->flight[0].ops[0].op, "allreduce");
}

TEST_F(FlightRecorderTest, OffByDefault) {
  const int status = InChild([&] {
    auto dp = CreateSelfCommunicator("dp");
    float x[2] = {};
    (void)dp->Allreduce(x, 2, ReduceOp::kSum);
    _exit(FlightRecorder::Get().enabled() || FlightRecorder::Get().Dump("x").ok() ? 1 : 0);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::exists(run_ / "flight"));
}

}  // namespace
}  // namespace scaletrain
