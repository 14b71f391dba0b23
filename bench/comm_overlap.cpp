// Does a non-blocking all-reduce make progress while the rank computes?
//
// OpenMPI moves a non-blocking collective forward only inside MPI calls, so
// an MPI_Iallreduce followed by a long compute loop typically does all its
// work in the final MPI_Wait. scaletrain's mpi backend makes every MPI call
// from a communication thread that keeps polling. This benchmark starts a
// 16 MiB all-reduce, runs a ~200 ms single-threaded compute loop, then waits,
// and reports how much of the all-reduce was still left after the compute
// (the exposed time) for three ways of driving MPI:
//   plain   MPI_Iallreduce, compute, MPI_Wait (no helper thread)
//   probe   as plain, with an MPI_Test call every ~1 ms of compute (the
//           manual alternative: the compute loop must know about MPI)
//   thread  scaletrain's Communicator::IAllreduce + CommHandle::Wait
//
//   cmake --build build --target comm_overlap
//   mpirun -np 2 build/tests/comm_overlap plain|probe|thread [MiB] [compute_ms] [reps]
//   (SCALETRAIN_COMM_POLL_US sets the thread's polling interval)
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A cache-resident floating-point loop: its time depends on the core only,
// not on memory bandwidth the all-reduce also uses. `probe` is called every
// `probe_every` blocks.
volatile float g_sink;
template <typename Probe>
void Compute(int64_t blocks, int64_t probe_every, Probe probe) {
  static std::vector<float> a(4096, 1.0001f), b(4096, 0.9999f);
  float acc = 0;
  for (int64_t k = 0; k < blocks; ++k) {
    for (int rep = 0; rep < 16; ++rep) {
      for (size_t i = 0; i < a.size(); ++i) acc = acc * 0.999f + a[i] * b[i];
    }
    if (probe_every > 0 && k % probe_every == 0) probe();
  }
  g_sink = acc;
}

struct Sample {
  double comm_alone_s = 0;       // the all-reduce by itself
  double compute_alone_s = 0;    // the compute loop by itself
  double compute_overlap_s = 0;  // the compute loop with the all-reduce in flight
  double exposed_s = 0;          // wait after the compute loop
  double done_after_s = -1;      // thread mode: when the all-reduce finished, from its start
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "thread";
  const int64_t mib = argc > 2 ? std::atoll(argv[2]) : 16;
  const double compute_ms = argc > 3 ? std::atof(argv[3]) : 200;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 5;
  if (mode != "plain" && mode != "probe" && mode != "thread") {
    std::fprintf(stderr, "usage: comm_overlap plain|probe|thread [MiB] [compute_ms] [reps]\n");
    return 2;
  }
  const int64_t count = mib * (1 << 20) / 4;
  std::vector<float> buf(count, 1.0f);

  std::unique_ptr<scaletrain::Communicator> world;
  int rank = 0, size = 1;
  if (mode == "thread") {
    auto created = scaletrain::CreateWorldCommunicator("mpi");
    if (!created.ok()) {
      std::fprintf(stderr, "error: %s\n", created.status().message().c_str());
      return 1;
    }
    world = std::move(created).value();
    rank = world->rank();
    size = world->size();
  } else {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  auto barrier = [&] {
    if (world) {
      (void)world->Barrier();
    } else {
      MPI_Barrier(MPI_COMM_WORLD);
    }
  };

  // Calibrate the compute loop to ~compute_ms on this core, then agree on
  // one block count (the slowest rank's) so every rank computes the same.
  // The fastest of three short runs: the core's speed when not shared.
  double per_block_s = 1e9;
  Clock::time_point t0;
  for (int k = 0; k < 3; ++k) {
    t0 = Clock::now();
    Compute(50, 0, [] {});
    per_block_s = std::min(per_block_s, Seconds(t0, Clock::now()) / 50);
  }
  double blocks_d = compute_ms * 1e-3 / per_block_s;
  if (world) {
    std::vector<double> all(size);
    (void)world->Allgather(&blocks_d, all.data(), 1);
    blocks_d = *std::min_element(all.begin(), all.end());
  } else {
    MPI_Allreduce(MPI_IN_PLACE, &blocks_d, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  }
  const int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(blocks_d));
  // ~1 ms between probes.
  const int64_t probe_every = std::max<int64_t>(1, static_cast<int64_t>(1e-3 / per_block_s));

  std::vector<Sample> samples;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first is warm-up
    Sample s;
    barrier();
    t0 = Clock::now();
    if (world) {
      (void)world->Allreduce(buf.data(), count);
    } else {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    s.comm_alone_s = Seconds(t0, Clock::now());

    barrier();
    t0 = Clock::now();
    Compute(blocks, 0, [] {});
    s.compute_alone_s = Seconds(t0, Clock::now());

    barrier();
    t0 = Clock::now();
    if (world) {
      scaletrain::CommHandle h = world->IAllreduce(buf.data(), count);
      Compute(blocks, 0, [] {});
      const auto t1 = Clock::now();
      scaletrain::Status st = h.Wait();
      const auto t2 = Clock::now();
      if (!st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        return 1;
      }
      s.compute_overlap_s = Seconds(t0, t1);
      s.exposed_s = Seconds(t1, t2);
      s.done_after_s = Seconds(h.start_time(), h.end_time());
    } else {
      MPI_Request req;
      MPI_Iallreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
      int flag = 0;
      Compute(blocks, mode == "probe" ? probe_every : 0,
              [&] { MPI_Test(&req, &flag, MPI_STATUS_IGNORE); });
      const auto t1 = Clock::now();
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      const auto t2 = Clock::now();
      s.compute_overlap_s = Seconds(t0, t1);
      s.exposed_s = Seconds(t1, t2);
    }
    if (rep > 0) samples.push_back(s);
  }

  // Medians of each figure; the exposed time as the worst rank's median.
  auto median = [&](double Sample::*field) {
    std::vector<double> v;
    for (const Sample& s : samples) v.push_back(s.*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double mine[5] = {median(&Sample::comm_alone_s), median(&Sample::compute_alone_s),
                    median(&Sample::compute_overlap_s), median(&Sample::exposed_s),
                    median(&Sample::done_after_s)};
  std::vector<double> all(5 * size);
  if (world) {
    (void)world->Allgather(mine, all.data(), 5);
  } else {
    MPI_Allgather(mine, 5, MPI_DOUBLE, all.data(), 5, MPI_DOUBLE, MPI_COMM_WORLD);
  }
  if (rank == 0) {
    double worst[5] = {0, 0, 0, 0, -1};
    for (int r = 0; r < size; ++r) {
      for (int k = 0; k < 5; ++k) worst[k] = std::max(worst[k], all[5 * r + k]);
    }
    const char* poll = std::getenv("SCALETRAIN_COMM_POLL_US");
    std::printf(
        "mode=%s ranks=%d size=%lld MiB poll_us=%s | allreduce alone %.1f ms | compute alone "
        "%.1f ms, with allreduce in flight %.1f ms (%+.1f%%) | exposed wait after compute "
        "%.1f ms (%.0f%% of the allreduce hidden)",
        mode.c_str(), size, static_cast<long long>(mib),
        mode == "thread" ? (poll ? poll : "100") : "-", worst[0] * 1e3, worst[1] * 1e3,
        worst[2] * 1e3, (worst[2] / worst[1] - 1) * 100, worst[3] * 1e3,
        std::max(0.0, 100 * (1 - worst[3] / worst[0])));
    if (worst[4] >= 0) std::printf(" | allreduce done %.1f ms after its start", worst[4] * 1e3);
    std::printf("  (worst rank, median of %d)\n", reps);
  }
  if (!world) MPI_Finalize();
  return 0;
}
