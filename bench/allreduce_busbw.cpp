// All-reduce bus bandwidth: scaletrain's bucketed gradient all-reduce against
// one plain MPI_Allreduce of the same total size, on this machine.
//
// For each total gradient size S (float32):
//   mpi_allreduce     one MPI_Allreduce(MPI_IN_PLACE, S, MPI_SUM), the baseline
//   scaletrain        what DataParallel does with ZeRO-0: S cut into buckets of
//                     --bucket-mb (default 25 MiB, a multiple of n elements,
//                     cut from the end of the buffer), one
//                     Communicator::IAllreduce(kSum) per bucket issued back
//                     to back, then every handle waited on (mpi backend: the
//                     calls run on its communication thread; DataParallel
//                     sums: backward already scaled the gradients by 1/dp)
// and, to take the difference apart:
//   scaletrain_avg    as scaletrain with kAverage (the mpi backend divides
//                     each bucket in a second pass after MPI)
//   mpi_iallreduce    the same buckets as MPI_Iallreduce from this thread, then
//                     MPI_Waitall (the same non-blocking algorithm, no comm thread)
//
// Time of one repetition = the slowest rank's time from the end of a barrier
// to the end of its last wait; the median and the best over --reps
// repetitions (after --warmup) are reported, the modes interleaved rep by rep (in an order that
// rotates) so that load from other processes falls on all of them alike. Bus bandwidth (nccl-tests'
// definition) = 2(n-1)/n x S / time. Besides the ratio of medians, the
// "paired" ratio is the median over repetitions of mpi_allreduce's time over
// this mode's time in the same repetition: on a machine shared with other
// jobs, load that comes and goes then cancels out of each pair. The buffer is refilled, untimed, before
// every repetition. For the scaletrain mode, rank 0's time is also split
// into its hand-offs between threads (issue -> comm thread -> caller), whose
// wake-up latencies a loaded machine stretches.
//
// MPI is initialised here with MPI_THREAD_SERIALIZED, before the Communicator,
// so that this thread may call MPI too (the mpi backend accepts that and then
// does not own MPI); the two never call MPI at the same time: this thread
// only does while no Communicator operation is in flight. The backend's
// default for the non-blocking all-reduce algorithm (libnbc ring, see
// src/comm/mpi_communicator.h) is read at MPI_Init, so it is set here first,
// likewise only if the environment does not set it.
//
//   cmake --build build --target allreduce_busbw
//   mpirun -np 2 build/bench/allreduce_busbw [--sizes-mib 4,16,64] [--bucket-mb 25]
//          [--reps 20] [--warmup 3]
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/stats.h"

namespace {

using Clock = std::chrono::steady_clock;
using scaletrain::CommHandle;
using scaletrain::Communicator;
using scaletrain::Median;
using scaletrain::ReduceOp;

struct Options {
  std::vector<double> sizes_mib = {4, 16, 64};
  double bucket_mb = 25;
  int reps = 20;
  int warmup = 3;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "error: %s\nusage: allreduce_busbw [--sizes-mib 4,16,64] [--bucket-mb 25] "
               "[--reps 20] [--warmup 3]\n",
               why);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage(("missing value after " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--sizes-mib") {
      o.sizes_mib.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) o.sizes_mib.push_back(std::atof(item.c_str()));
    } else if (a == "--bucket-mb") {
      o.bucket_mb = std::atof(v.c_str());
    } else if (a == "--reps") {
      o.reps = std::atoi(v.c_str());
    } else if (a == "--warmup") {
      o.warmup = std::atoi(v.c_str());
    } else {
      Usage(("unknown option " + a).c_str());
    }
  }
  if (o.sizes_mib.empty() || o.bucket_mb <= 0 || o.reps < 1 || o.warmup < 0) Usage("bad value");
  for (double s : o.sizes_mib) {
    if (s <= 0) Usage("sizes must be positive");
  }
  return o;
}

struct Bucket {
  int64_t begin, count;
};

// DataParallel's cut (src/parallel/data_parallel.cpp): buckets of
// bucket_bytes / 4 rounded down to a multiple of n elements, from the end.
std::vector<Bucket> CutBuckets(int64_t numel, int64_t bucket_bytes, int64_t n) {
  const int64_t per = std::max<int64_t>(n, bucket_bytes / 4 / n * n);
  std::vector<Bucket> out;
  for (int64_t end = numel; end > 0;) {
    const int64_t begin = std::max<int64_t>(0, end - per);
    out.push_back({begin, end - begin});
    end = begin;
  }
  return out;
}

// Nearest-rank percentile, q in (0, 1].
double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(k, 1)) - 1];
}

void Check(const scaletrain::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", what, st.message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = Parse(argc, argv);
  // As the mpi backend does (it cannot once MPI is up); a user's setting wins.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", /*overwrite=*/0);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "error: MPI gives thread level %d; this benchmark needs SERIALIZED\n",
                 provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::unique_ptr<Communicator> world;
  {
    auto created = scaletrain::CreateWorldCommunicator("mpi");
    if (!created.ok()) {
      std::fprintf(stderr, "error: %s\n", created.status().message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    world = std::move(created).value();
  }
  const int rank = world->rank(), n = world->size();
  const int64_t bucket_bytes = static_cast<int64_t>(opt.bucket_mb * 1048576.0);
  const double bus_factor = 2.0 * (n - 1) / n;

  if (rank == 0) {
    const char* algo = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
    std::printf("all-reduce bus bandwidth, %d ranks, float32; buckets of %g MiB; median of %d reps "
                "(after %d warm-up), slowest rank per rep; libnbc iallreduce algorithm: %s\n",
                n, opt.bucket_mb, opt.reps, opt.warmup, algo ? algo : "(default)");
    std::printf("busbw = 2(n-1)/n x bytes / median time; ratio = mpi_allreduce time / this "
                "mode's time (of the medians; paired: median over reps of the same rep's ratio; "
                "best: of the fastest reps)\n\n");
    std::printf("| %8s | %7s | %-15s | %9s | %7s | %10s | %6s | %6s | %6s |\n", "size MiB",
                "buckets", "mode", "median ms", "best ms", "busbw GB/s", "ratio", "paired", "best");
    std::printf("|----------|---------|-----------------|-----------|---------|------------|--------|"
                "--------|--------|\n");
    std::fflush(stdout);
  }

  enum Mode { kMpiAllreduce, kScaletrain, kScaletrainAvg, kMpiIallreduce, kNumModes };
  const char* mode_names[kNumModes] = {"mpi_allreduce", "scaletrain", "scaletrain_avg",
                                       "mpi_iallreduce"};

  std::vector<double> hand_offs;  // per size: size, then median and p90 of each phase
  for (double size_mib : opt.sizes_mib) {
    const int64_t numel = static_cast<int64_t>(size_mib * 1048576.0 / 4) / n * n;
    const double bytes = static_cast<double>(numel) * 4;
    std::vector<float> buf(static_cast<size_t>(numel));
    const std::vector<Bucket> buckets = CutBuckets(numel, bucket_bytes, n);
    std::vector<std::vector<double>> times(kNumModes);
    std::vector<MPI_Request> reqs(buckets.size());
    std::vector<CommHandle> handles;
    handles.reserve(buckets.size());
    // The scaletrain mode's time on this rank, split (microseconds): from
    // issue until the comm thread starts the first bucket; from then until it
    // finishes the last (MPI); from then until
    // this thread is running again.
    std::vector<double> phases[3];

    for (int rep = 0; rep < opt.warmup + opt.reps; ++rep) {
      // The order rotates from rep to rep, so no mode always follows the same one.
      for (int k = 0; k < kNumModes; ++k) {
        const int m = (k + rep) % kNumModes;
        std::fill(buf.begin(), buf.end(), 1.0f + 0.001f * static_cast<float>(rank));
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = Clock::now();
        switch (m) {
          case kMpiAllreduce:
            MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(numel), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
            break;
          case kScaletrain:
          case kScaletrainAvg: {
            const ReduceOp op = m == kScaletrainAvg ? ReduceOp::kAverage : ReduceOp::kSum;
            handles.clear();
            for (const Bucket& b : buckets) {
              handles.push_back(world->IAllreduce(buf.data() + b.begin, b.count, op));
            }
            for (CommHandle& h : handles) Check(h.Wait(), "scaletrain all-reduce");
            if (m == kScaletrain && rep >= opt.warmup) {
              const auto now = Clock::now();
              auto us = [](Clock::duration d) {
                return std::chrono::duration<double, std::micro>(d).count();
              };
              phases[0].push_back(us(handles.front().start_time() - handles.front().issue_time()));
              phases[1].push_back(us(handles.back().end_time() - handles.front().start_time()));
              phases[2].push_back(us(now - handles.back().end_time()));
            }
            break;
          }
          case kMpiIallreduce:
            for (size_t i = 0; i < buckets.size(); ++i) {
              MPI_Iallreduce(MPI_IN_PLACE, buf.data() + buckets[i].begin,
                             static_cast<int>(buckets[i].count), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD, &reqs[i]);
            }
            MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
            break;
        }
        double s = std::chrono::duration<double>(Clock::now() - t0).count();
        MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        // A wrong result would make the timing meaningless: spot-check it.
        double expect_sum = 0;
        for (int r = 0; r < n; ++r) expect_sum += 1.0 + 0.001 * r;
        const double expect = m == kScaletrainAvg ? expect_sum / n : expect_sum;
        for (int64_t i : {int64_t{0}, numel / 2, numel - 1}) {
          if (std::abs(buf[static_cast<size_t>(i)] - expect) > 1e-4 * expect) {
            std::fprintf(stderr, "error: rank %d, %s, element %lld is %g, expected %g\n", rank,
                         mode_names[m], static_cast<long long>(i), buf[static_cast<size_t>(i)],
                         expect);
            MPI_Abort(MPI_COMM_WORLD, 1);
          }
        }
        if (rep >= opt.warmup) times[m].push_back(s);
      }
    }

    if (rank == 0) {
      const double base = Median(times[kMpiAllreduce]);
      const double base_best = *std::min_element(times[kMpiAllreduce].begin(),
                                                 times[kMpiAllreduce].end());
      for (int m = 0; m < kNumModes; ++m) {
        const double t = Median(times[m]);
        const double best = *std::min_element(times[m].begin(), times[m].end());
        std::vector<double> paired(times[m].size());
        for (size_t r = 0; r < paired.size(); ++r) paired[r] = times[kMpiAllreduce][r] / times[m][r];
        std::printf("| %8g | %7zu | %-15s | %9.2f | %7.2f | %10.2f | %6.2f | %6.2f | %6.2f |\n",
                    size_mib, m == kMpiAllreduce ? size_t{1} : buckets.size(), mode_names[m],
                    t * 1e3, best * 1e3, bus_factor * bytes / t / 1e9, base / t, Median(paired),
                    base_best / best);
      }
      hand_offs.push_back(size_mib);
      for (auto& p : phases) {
        hand_offs.push_back(Median(p));
        hand_offs.push_back(Percentile(p, 0.9));
      }
      std::fflush(stdout);
    }
  }
  if (rank == 0) {
    std::printf("\nscaletrain mode on rank 0, median / 90th percentile in microseconds: issue to the "
                "comm thread starting MPI | MPI on the comm thread | finish to the caller "
                "running again\n");
    for (size_t i = 0; i < hand_offs.size(); i += 7) {
      std::printf("  %g MiB: %.0f / %.0f | %.0f / %.0f | %.0f / %.0f\n", hand_offs[i],
                  hand_offs[i + 1], hand_offs[i + 2], hand_offs[i + 3], hand_offs[i + 4],
                  hand_offs[i + 5], hand_offs[i + 6]);
    }
  }
  world.reset();  // before MPI_Finalize: the backend does not own MPI here
  MPI_Finalize();
  return 0;
}
