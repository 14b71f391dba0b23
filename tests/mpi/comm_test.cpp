// Multi-rank test of the communication layer, launched by ctest through
// mpirun (or run as one process, with or without mpirun). Every collective
// runs on rank-dependent inputs in every group of the mesh, and each rank
// checks its result against the value it computes locally from the mesh's
// member lists; byte counters are checked against exact figures.
//
//   comm_test [--backend mpi|self] [--dp D --tp T --pp P]
//   comm_test --watchdog hang|kill [--timeout S] [--on-error abort|exit] [--dp D ...]
//
// Watchdog modes: the last rank sleeps forever (hang) or SIGKILLs itself
// (kill) at step 5; the others must fail their next collective within the
// timeout with a message naming the collective, the group and the step, and
// end the job (Abort). ctest checks exit code, message and elapsed time.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "parallel/mesh.h"
#include "parallel/process_groups.h"

namespace scaletrain {
namespace {

struct Options {
  std::string backend = "mpi";
  ParallelConfig parallel;
  std::string watchdog;  // "", "hang", "kill"
  // After a watchdog error: "abort" (Communicator::Abort) or "exit" (return
  // from main with the error, as the trainer does).
  std::string on_error = "abort";
  double timeout_s = 3;
};

int g_failures = 0;
int g_rank = 0;

#define CHECK_TRUE(cond, ...)                                                                \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      ++g_failures;                                                                          \
      std::fprintf(stderr, "[rank %d] FAIL %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                     \
      std::fprintf(stderr, "\n");                                                            \
    }                                                                                        \
  } while (0)

#define CHECK_OK(expr)                                 \
  do {                                                 \
    Status st_ = (expr);                               \
    CHECK_TRUE(st_.ok(), "%s", st_.message().c_str()); \
  } while (0)

// Values that float holds exactly (< 2^24 summed over 16 ranks).
float FloatInput(int64_t world_rank, int64_t i) {
  return static_cast<float>(world_rank * 1000 + (i % 997));
}
int64_t IntInput(int64_t world_rank, int64_t i) {
  return (int64_t{1} << 40) * (world_rank + 1) + i;  // beyond 32 bits on purpose
}

struct Group {
  Communicator* comm;
  std::vector<int64_t> members;  // world ranks, index = group rank
};

void TestMembership(const Group& g, int64_t world_rank) {
  std::vector<int64_t> gathered(g.members.size(), -1);
  int64_t mine = world_rank;
  CHECK_OK(g.comm->Allgather(&mine, gathered.data(), 1));
  CHECK_TRUE(gathered == g.members, "group %s members differ from the mesh",
             g.comm->name().c_str());
  CHECK_TRUE(g.comm->size() == static_cast<int>(g.members.size()), "size");
  CHECK_TRUE(g.members[g.comm->rank()] == world_rank, "rank");
}

void TestAllreduce(const Group& g, int64_t world_rank, int64_t count) {
  const int n = g.comm->size();
  std::vector<float> buf(count);
  for (int64_t i = 0; i < count; ++i) buf[i] = FloatInput(world_rank, i);
  CHECK_OK(g.comm->Allreduce(buf.data(), count));
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    float want = 0;
    for (int64_t m : g.members) want += FloatInput(m, i);
    if (buf[i] != want) ++bad;
  }
  CHECK_TRUE(bad == 0, "allreduce sum on %s: %lld of %lld wrong", g.comm->name().c_str(),
             static_cast<long long>(bad), static_cast<long long>(count));

  // Average in float64: the mean of the members' inputs.
  std::vector<double> dbuf(count);
  for (int64_t i = 0; i < count; ++i) dbuf[i] = FloatInput(world_rank, i) + 0.25;
  CHECK_OK(g.comm->Allreduce(dbuf.data(), count, ReduceOp::kAverage));
  bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    double want = 0;
    for (int64_t m : g.members) want += FloatInput(m, i) + 0.25;
    want /= n;
    if (std::fabs(dbuf[i] - want) > 1e-9 * std::fabs(want)) ++bad;
  }
  CHECK_TRUE(bad == 0, "allreduce average on %s", g.comm->name().c_str());

  std::vector<int64_t> ibuf(count);
  for (int64_t i = 0; i < count; ++i) ibuf[i] = IntInput(world_rank, i);
  CHECK_OK(g.comm->Allreduce(ibuf.data(), count));
  bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t want = 0;
    for (int64_t m : g.members) want += IntInput(m, i);
    if (ibuf[i] != want) ++bad;
  }
  CHECK_TRUE(bad == 0, "allreduce int64 on %s", g.comm->name().c_str());
}

// The 16-bit floats (the compressed gradient reduction): small integers and
// their sums are exact in bf16 (8 significant bits) and fp16 (11), so the
// sums must equal exactly; max too; the element count past MPI's eager limit.
template <typename H, H (*To)(float), float (*From)(H)>
void TestHalfAllreduce(const Group& g, int64_t world_rank, int64_t count, const char* what) {
  auto input = [](int64_t r, int64_t i) { return static_cast<float>((r * 7 + i) % 32) - 8.0f; };
  std::vector<H> buf(count), mx(count);
  for (int64_t i = 0; i < count; ++i) buf[i] = mx[i] = To(input(world_rank, i));
  CHECK_OK(g.comm->Allreduce(buf.data(), count));
  CHECK_OK(g.comm->Allreduce(mx.data(), count, ReduceOp::kMax));
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    float want = 0, want_max = -1e9f;
    for (int64_t m : g.members) want += input(m, i), want_max = std::max(want_max, input(m, i));
    if (From(buf[i]) != want || From(mx[i]) != want_max) ++bad;
  }
  CHECK_TRUE(bad == 0, "%s allreduce on %s: %lld of %lld wrong", what, g.comm->name().c_str(),
             static_cast<long long>(bad), static_cast<long long>(count));
  std::vector<H> avg(1, To(1.0f));
  CHECK_TRUE(!g.comm->Allreduce(avg.data(), 1, ReduceOp::kAverage).ok(), "%s average accepted", what);
}

void TestReduceScatter(const Group& g, int64_t world_rank, int64_t block) {
  const int n = g.comm->size();
  const int me = g.comm->rank();
  std::vector<float> send(block * n), recv(block, -1.0f);
  for (int64_t i = 0; i < block * n; ++i) send[i] = FloatInput(world_rank, i);
  const std::vector<float> original = send;
  CHECK_OK(g.comm->ReduceScatter(send.data(), recv.data(), block));
  int64_t bad = 0;
  for (int64_t i = 0; i < block; ++i) {
    float want = 0;
    for (int64_t m : g.members) want += FloatInput(m, me * block + i);
    if (recv[i] != want) ++bad;
  }
  CHECK_TRUE(bad == 0, "reduce_scatter on %s", g.comm->name().c_str());
  CHECK_TRUE(send == original, "reduce_scatter wrote into its input");

  // In place with average: only block `me` is defined afterwards.
  CHECK_OK(g.comm->ReduceScatterInPlace(send.data(), block, ReduceOp::kAverage));
  bad = 0;
  for (int64_t i = 0; i < block; ++i) {
    float want = 0;
    for (int64_t m : g.members) want += FloatInput(m, me * block + i);
    want /= static_cast<float>(n);
    if (send[me * block + i] != want) ++bad;
  }
  CHECK_TRUE(bad == 0, "reduce_scatter in place (average) on %s", g.comm->name().c_str());
}

void TestAllgather(const Group& g, int64_t world_rank, int64_t block) {
  const int n = g.comm->size();
  const int me = g.comm->rank();
  std::vector<uint8_t> send(block), recv(block * n, 0);
  for (int64_t i = 0; i < block; ++i) send[i] = static_cast<uint8_t>(world_rank * 31 + i);
  CHECK_OK(g.comm->Allgather(send.data(), recv.data(), block));
  int64_t bad = 0;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < block; ++i) {
      if (recv[r * block + i] != static_cast<uint8_t>(g.members[r] * 31 + i)) ++bad;
    }
  }
  CHECK_TRUE(bad == 0, "allgather bytes on %s", g.comm->name().c_str());

  std::vector<float> buf(block * n, -7.0f);
  for (int64_t i = 0; i < block; ++i) buf[me * block + i] = FloatInput(world_rank, i);
  CHECK_OK(g.comm->AllgatherInPlace(buf.data(), block));
  bad = 0;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < block; ++i) {
      if (buf[r * block + i] != FloatInput(g.members[r], i)) ++bad;
    }
  }
  CHECK_TRUE(bad == 0, "allgather in place on %s", g.comm->name().c_str());
}

void TestBroadcast(const Group& g, int64_t world_rank, int64_t count) {
  for (int root = 0; root < g.comm->size(); ++root) {
    std::vector<float> buf(count);
    for (int64_t i = 0; i < count; ++i) buf[i] = FloatInput(world_rank, i);
    CHECK_OK(g.comm->Broadcast(buf.data(), count, root));
    int64_t bad = 0;
    for (int64_t i = 0; i < count; ++i) {
      if (buf[i] != FloatInput(g.members[root], i)) ++bad;
    }
    CHECK_TRUE(bad == 0, "broadcast from %d on %s", root, g.comm->name().c_str());
  }
}

// Each rank sends to the next and receives from the previous, both posted
// before either is waited on: with blocking sends of this size (beyond any
// eager limit) the ring would deadlock.
void TestSendRecv(const Group& g, int64_t world_rank, int64_t count) {
  const int n = g.comm->size();
  const int me = g.comm->rank();
  std::vector<float> out(count), in(count, -1.0f);
  for (int64_t i = 0; i < count; ++i) out[i] = FloatInput(world_rank, i);
  if (n == 1 && std::string(g.comm->backend()) == "self") {
    Status st = g.comm->Send(out.data(), count, 0);
    CHECK_TRUE(!st.ok() && st.message().find("no peer") != std::string::npos, "self send: %s",
               st.message().c_str());
    CHECK_TRUE(g.comm->stats().of(CommOp::kSend).calls == 1, "self send not counted");
    return;
  }
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  CommHandle s = g.comm->ISend(out.data(), count, next, 5);
  CommHandle r = g.comm->IRecv(in.data(), count, prev, 5);
  CHECK_OK(r.Wait());
  CHECK_OK(s.Wait());
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (in[i] != FloatInput(g.members[prev], i)) ++bad;
  }
  CHECK_TRUE(bad == 0, "send/recv ring on %s", g.comm->name().c_str());

  // A message shorter than the receive buffer is an error, not silence.
  // (An MPI group of one sends to itself above, like any ring.)
  if (n == 1) return;
  if (me == 0) {
    CHECK_OK(g.comm->Send(out.data(), 3, 1, 9));
  } else if (me == 1) {
    Status st = g.comm->Recv(in.data(), 5, 0, 9);
    CHECK_TRUE(
        !st.ok() && st.message().find("received 3 elements, expected 5") != std::string::npos,
        "short message: %s", st.message().c_str());
  }
}

// Operations of several groups in flight together, waited on in reverse.
void TestConcurrent(const std::vector<Group>& groups, int64_t world_rank) {
  const int64_t count = 50000;
  std::vector<std::vector<float>> bufs(groups.size(), std::vector<float>(count));
  std::vector<CommHandle> handles;
  for (size_t k = 0; k < groups.size(); ++k) {
    for (int64_t i = 0; i < count; ++i) bufs[k][i] = FloatInput(world_rank, i + k);
    handles.push_back(groups[k].comm->IAllreduce(bufs[k].data(), count));
  }
  CommHandle barrier = groups[0].comm->IBarrier();
  for (size_t k = groups.size(); k-- > 0;) CHECK_OK(handles[k].Wait());
  CHECK_OK(barrier.Wait());
  for (size_t k = 0; k < groups.size(); ++k) {
    int64_t bad = 0;
    for (int64_t i = 0; i < count; ++i) {
      float want = 0;
      for (int64_t m : groups[k].members) want += FloatInput(m, i + k);
      if (bufs[k][i] != want) ++bad;
    }
    CHECK_TRUE(bad == 0, "concurrent allreduce on %s", groups[k].comm->name().c_str());
    CHECK_TRUE(handles[k].Test(), "finished handle does not test true");
    CHECK_TRUE(handles[k].end_time() >= handles[k].start_time() &&
                   handles[k].start_time() >= handles[k].issue_time(),
               "handle times out of order");
  }
}

// Exact payload figures (see communicator.h), and the ring helper.
void TestByteCounts(const Group& g) {
  Communicator& c = *g.comm;
  const int n = c.size();
  c.ResetStats();
  std::vector<float> f(1000 * n, 1.0f), shard(1000);
  std::vector<int64_t> ints(7, 1);
  CHECK_OK(c.Allreduce(f.data(), 1000));                    // 4000
  CHECK_OK(c.Allreduce(ints.data(), 7));                    // 56
  CHECK_OK(c.ReduceScatter(f.data(), shard.data(), 1000));  // 4000 n
  CHECK_OK(c.AllgatherInPlace(f.data(), 1000));             // 4000 n
  CHECK_OK(c.Broadcast(f.data(), 10, 0));                   // 40
  CHECK_OK(c.Barrier());                                    // 0
  // Invalid calls move nothing and count nothing.
  Status bad_root = c.Broadcast(f.data(), 10, n);
  CHECK_TRUE(!bad_root.ok() && bad_root.message().find("root") != std::string::npos,
             "root %d accepted: %s", n, bad_root.message().c_str());
  std::vector<uint8_t> bytes(4);
  CHECK_TRUE(!c.Allreduce(bytes.data(), 4).ok(), "reduction of bytes accepted");
  CHECK_TRUE(!c.Allreduce(ints.data(), 7, ReduceOp::kAverage).ok(), "int64 average accepted");
  CHECK_TRUE(!c.ReduceScatter(f.data(), f.data() + 10, 100).ok(), "overlap accepted");

  const CommStats s = c.TakeStats();
  CHECK_TRUE(s.of(CommOp::kAllreduce).calls == 2, "allreduce calls %lld",
             static_cast<long long>(s.of(CommOp::kAllreduce).calls));
  CHECK_TRUE(s.of(CommOp::kAllreduce).payload_bytes == 4056, "allreduce bytes");
  CHECK_TRUE(s.of(CommOp::kReduceScatter).payload_bytes == 4000 * n, "reduce_scatter bytes");
  CHECK_TRUE(s.of(CommOp::kAllgather).payload_bytes == 4000 * n, "allgather bytes");
  CHECK_TRUE(s.of(CommOp::kBroadcast).payload_bytes == 40, "broadcast bytes");
  CHECK_TRUE(s.of(CommOp::kBroadcast).calls == 1, "failed broadcast counted");
  CHECK_TRUE(s.of(CommOp::kBarrier).calls == 1, "barrier calls");
  CHECK_TRUE(s.calls() == 6, "calls %lld", static_cast<long long>(s.calls()));
  CHECK_TRUE(s.payload_bytes() == 4056 + 8000 * n + 40, "total bytes");
  const double ring =
      2.0 * (n - 1) / n * 4056 + 2.0 * (n - 1) / n * 4000 * n + static_cast<double>(n - 1) / n * 40;
  CHECK_TRUE(std::fabs(s.ring_equivalent_bytes(n) - ring) < 1e-6, "ring bytes %f vs %f",
             s.ring_equivalent_bytes(n), ring);
  CHECK_TRUE(c.stats().payload_bytes() == 0, "TakeStats did not reset");
}

Group MakeGroup(Communicator* comm, const Mesh& mesh, MeshAxis axis, int64_t rank) {
  return {comm, mesh.GroupMembers(axis, rank)};
}

int RunSuite(ProcessGroups& pg) {
  const int64_t rank = pg.rank;
  std::vector<Group> groups;
  std::vector<int64_t> everyone(pg.mesh.world_size());
  std::iota(everyone.begin(), everyone.end(), 0);
  groups.push_back({pg.world.get(), everyone});
  groups.push_back(MakeGroup(pg.dp.get(), pg.mesh, MeshAxis::kDp, rank));
  groups.push_back(MakeGroup(pg.tp.get(), pg.mesh, MeshAxis::kTp, rank));
  groups.push_back(MakeGroup(pg.pp.get(), pg.mesh, MeshAxis::kPp, rank));

  // Groups of one axis run together: each rank's groups are disjoint
  // halves of the world, so a mistake in which ranks take part shows up as
  // a wrong sum or a hang, not as a lucky match.
  for (const Group& g : groups) {
    TestMembership(g, rank);
    TestAllreduce(g, rank, 1);
    TestAllreduce(g, rank, 1 << 20);  // 4 MiB: past every eager limit
    TestReduceScatter(g, rank, 4099);
    TestReduceScatter(g, rank, 0);
    TestAllgather(g, rank, 1031);
    TestBroadcast(g, rank, 100000);
    TestSendRecv(g, rank, 300000);
    TestByteCounts(g);
    TestHalfAllreduce<bf16, ToBf16, FromBf16>(g, rank, 300000, "bf16");
    TestHalfAllreduce<f16, ToF16, FromF16>(g, rank, 1000, "fp16");
  }
  TestConcurrent(groups, rank);

  int64_t failures = g_failures;
  Status st = pg.world->Allreduce(&failures, 1);
  if (!st.ok()) {
    std::fprintf(stderr, "[rank %lld] error: %s\n", static_cast<long long>(rank),
                 st.message().c_str());
    return 1;
  }
  if (rank == 0) {
    std::printf("comm_test %s %s: %lld failures over %lld ranks\n", pg.world->backend(),
                pg.mesh.ToString().c_str(), static_cast<long long>(failures),
                static_cast<long long>(pg.mesh.world_size()));
  }
  return failures == 0 ? 0 : 1;
}

int RunWatchdog(ProcessGroups& pg, const std::string& mode, const std::string& on_error) {
  const int64_t last = pg.mesh.world_size() - 1;
  std::vector<float> grad(1 << 16, 1.0f);
  for (int64_t step = 0; step < 100; ++step) {
    pg.SetStep(step);
    if (step == 5 && pg.rank == last) {
      std::fprintf(stderr, "[rank %lld] %s at step %lld\n", static_cast<long long>(pg.rank),
                   mode == "hang" ? "hanging" : "killing itself", static_cast<long long>(step));
      std::fflush(stderr);
      if (mode == "kill") raise(SIGKILL);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
    }
    Status st = pg.dp->Allreduce(grad.data(), static_cast<int64_t>(grad.size()));
    if (st.ok()) st = pg.world->Barrier();
    if (!st.ok()) {
      std::fprintf(stderr, "[rank %lld] error: %s\n", static_cast<long long>(pg.rank),
                   st.message().c_str());
      std::fflush(stderr);
      if (on_error == "abort") pg.world->Abort(3);
      return 3;
    }
  }
  std::fprintf(stderr, "[rank %lld] watchdog never fired\n", static_cast<long long>(pg.rank));
  return 0;  // the test expects a non-zero exit: finishing is the failure
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--backend")
      opt.backend = next();
    else if (arg == "--dp")
      opt.parallel.dp = std::stoll(next());
    else if (arg == "--tp")
      opt.parallel.tp = std::stoll(next());
    else if (arg == "--pp")
      opt.parallel.pp = std::stoll(next());
    else if (arg == "--watchdog")
      opt.watchdog = next();
    else if (arg == "--timeout")
      opt.timeout_s = std::stod(next());
    else if (arg == "--on-error")
      opt.on_error = next();
    else {
      std::fprintf(stderr, "error: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  // The suite itself must never need the watchdog; a generous limit still
  // turns a hang into a failure instead of a stuck ctest.
  const double timeout_s = opt.watchdog.empty() ? 60 : opt.timeout_s;
  Result<std::unique_ptr<ProcessGroups>> pg =
      CreateCommunicators(opt.parallel, opt.backend, timeout_s);
  if (!pg.ok()) {
    std::fprintf(stderr, "error: %s\n", pg.status().message().c_str());
    return 1;
  }
  g_rank = static_cast<int>((*pg)->rank);
  if (!opt.watchdog.empty()) return RunWatchdog(**pg, opt.watchdog, opt.on_error);
  return RunSuite(**pg);
}

}  // namespace
}  // namespace scaletrain

int main(int argc, char** argv) { return scaletrain::Main(argc, argv); }
