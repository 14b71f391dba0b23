// The communication layer without MPI: the self backend (a world of one),
// the checks every backend shares (argument validation, byte counting), and
// the process-group factory's errors. Multi-rank behaviour is tested by
// tests/mpi/comm_test.cpp under mpirun.
#include <gtest/gtest.h>

#include <vector>

#include "comm/communicator.h"
#include "comm/self_communicator.h"
#include "parallel/process_groups.h"

namespace scaletrain {
namespace {

TEST(SelfCommunicatorTest, CollectivesOfOneRankKeepOrCopyTheData) {
  auto comm = CreateSelfCommunicator("dp");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->name(), "dp");

  std::vector<float> buf = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(comm->Allreduce(buf.data(), 3, ReduceOp::kAverage).ok());
  EXPECT_EQ(buf, (std::vector<float>{1.5f, -2.0f, 3.25f}));

  std::vector<float> shard(3, 0.0f);
  ASSERT_TRUE(comm->ReduceScatter(buf.data(), shard.data(), 3).ok());
  EXPECT_EQ(shard, buf);

  std::vector<int64_t> gathered(2, 0);
  const int64_t mine[2] = {7, 9};
  ASSERT_TRUE(comm->Allgather(mine, gathered.data(), 2).ok());
  EXPECT_EQ(gathered, (std::vector<int64_t>{7, 9}));

  CommHandle h = comm->IBroadcast(buf.data(), 3, 0);
  EXPECT_TRUE(h.Test());
  EXPECT_TRUE(h.Wait().ok());
  EXPECT_TRUE(comm->Barrier().ok());
}

TEST(SelfCommunicatorTest, SendHasNoPeer) {
  auto comm = CreateSelfCommunicator("pp");
  float x = 1;
  Status st = comm->Send(&x, 1, 0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("send of 4 bytes (float32, to 0) on group 'pp' (rank 0 of 1)"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("no peer"), std::string::npos);
}

TEST(SelfCommunicatorTest, CountsPayloadBytesPerOperation) {
  auto comm = CreateSelfCommunicator("world");
  std::vector<float> f(100, 1.0f);
  std::vector<double> d(10, 1.0);
  ASSERT_TRUE(comm->Allreduce(f.data(), 100).ok());
  ASSERT_TRUE(comm->Allreduce(d.data(), 10).ok());
  ASSERT_TRUE(comm->ReduceScatterInPlace(f.data(), 100).ok());
  ASSERT_TRUE(comm->AllgatherInPlace(f.data(), 25).ok());
  ASSERT_TRUE(comm->Broadcast(f.data(), 3, 0).ok());
  ASSERT_TRUE(comm->Barrier().ok());

  CommStats s = comm->TakeStats();
  EXPECT_EQ(s.of(CommOp::kAllreduce).calls, 2);
  EXPECT_EQ(s.of(CommOp::kAllreduce).payload_bytes, 400 + 80);
  EXPECT_EQ(s.of(CommOp::kReduceScatter).payload_bytes, 400);
  EXPECT_EQ(s.of(CommOp::kAllgather).payload_bytes, 100);
  EXPECT_EQ(s.of(CommOp::kBroadcast).payload_bytes, 12);
  EXPECT_EQ(s.of(CommOp::kBarrier).calls, 1);
  EXPECT_EQ(s.payload_bytes(), 992);
  EXPECT_EQ(s.calls(), 6);
  // Nothing leaves a rank that is alone.
  EXPECT_EQ(s.ring_equivalent_bytes(1), 0.0);
  EXPECT_EQ(comm->stats().calls(), 0);
}

TEST(CommunicatorTest, RingEquivalentBytes) {
  EXPECT_DOUBLE_EQ(RingEquivalentBytes(CommOp::kAllreduce, 4, 1000), 1500);
  EXPECT_DOUBLE_EQ(RingEquivalentBytes(CommOp::kReduceScatter, 4, 1000), 750);
  EXPECT_DOUBLE_EQ(RingEquivalentBytes(CommOp::kAllgather, 2, 1000), 500);
  EXPECT_DOUBLE_EQ(RingEquivalentBytes(CommOp::kBroadcast, 8, 800), 700);
  EXPECT_DOUBLE_EQ(RingEquivalentBytes(CommOp::kSend, 2, 64), 64);
  EXPECT_DOUBLE_EQ(RingEquivalentBytes(CommOp::kBarrier, 8, 0), 0);
  EXPECT_DOUBLE_EQ(RingEquivalentBytes(CommOp::kAllreduce, 1, 1000), 0);
}

TEST(CommunicatorTest, InvalidCallsFailAndAreNotCounted) {
  auto comm = CreateSelfCommunicator("tp");
  std::vector<float> f(8, 1.0f);
  std::vector<uint8_t> bytes(8, 1);
  std::vector<int64_t> ints(8, 1);

  Status st = comm->Broadcast(f.data(), 8, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("root 1 is not a rank of this group of 1"), std::string::npos)
      << st.message();
  st = comm->Allreduce(f.data(), -1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("negative element count"), std::string::npos);
  EXPECT_FALSE(comm->Allreduce(bytes.data(), 8).ok());
  EXPECT_FALSE(comm->Allreduce(ints.data(), 8, ReduceOp::kAverage).ok());
  EXPECT_FALSE(comm->Allreduce<float>(nullptr, 8).ok());
  EXPECT_FALSE(comm->ReduceScatter(f.data(), f.data() + 2, 4).ok());  // overlap
  EXPECT_FALSE(comm->Allgather(f.data() + 2, f.data(), 4).ok());      // overlap
  EXPECT_FALSE(comm->Allreduce(f.data(), int64_t{1} << 31).ok());     // beyond an MPI count
  EXPECT_EQ(comm->stats().calls(), 0);
  // The error names the operation and group.
  st = comm->Broadcast(f.data(), 8, 3);
  EXPECT_EQ(st.message().rfind("broadcast of 32 bytes (float32, root 3) on group 'tp'", 0), 0u)
      << st.message();
}

TEST(CommunicatorTest, UnknownBackendIsNamed) {
  auto comm = CreateWorldCommunicator("nccl");
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().message(),
            "unknown communication backend 'nccl'; valid backends: self, mpi");
}

TEST(ProcessGroupsTest, SelfBackendGivesGroupsOfOne) {
  ParallelConfig parallel;
  auto groups = CreateCommunicators(parallel, "self", 12);
  ASSERT_TRUE(groups.ok()) << groups.status().message();
  ProcessGroups& pg = **groups;
  EXPECT_EQ(pg.rank, 0);
  EXPECT_EQ(pg.world->name(), "world");
  EXPECT_EQ(pg.group(MeshAxis::kDp).name(), "dp");
  EXPECT_EQ(pg.group(MeshAxis::kTp).name(), "tp");
  EXPECT_EQ(pg.group(MeshAxis::kPp).name(), "pp");
  EXPECT_EQ(pg.dp->timeout_s(), 12);
  pg.SetStep(42);
  EXPECT_EQ(pg.tp->step(), 42);
  EXPECT_EQ(pg.world->step(), 42);
}

TEST(ProcessGroupsTest, WorldSizeMismatchSaysHowToLaunch) {
  ParallelConfig parallel;
  parallel.dp = 2;
  parallel.tp = 2;
  auto groups = CreateCommunicators(parallel, "self");
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().message(),
            "world size 1 does not equal dp x tp x pp = 2 x 2 x 1 = 4; launch with mpirun -np 4 "
            "or change parallel.dp/tp/pp");
}

}  // namespace
}  // namespace scaletrain
