// Internal to src/comm: the shared state behind a CommHandle, which a
// backend completes, and the counters a Communicator keeps. Not a public
// header: the layers above see only communicator.h.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "comm/communicator.h"
#include "comm/flight_recorder.h"
#include "comm/host_probe.h"
#include "core/status.h"

namespace scaletrain::internal {

// Atomics because a backend may count from its own thread while the caller
// reads per-step figures.
struct CommCounters {
  std::array<std::atomic<int64_t>, kNumCommOps> calls{};
  std::array<std::atomic<int64_t>, kNumCommOps> payload_bytes{};
  std::atomic<int64_t> wait_ns{0};
};

// What a backend wants to know about callers blocked in Wait(): the MPI
// backend polls hard while someone waits and lightly while they compute.
class CommProgress {
 public:
  virtual ~CommProgress() = default;
  virtual void WaitBegin() {}
  virtual void WaitEnd() {}
  // A watchdog fired: the job is broken and must not shut MPI down cleanly
  // (MPI_Finalize would wait for the lost rank).
  virtual void WaitTimedOut(const Status& status) {}
};

struct CommState {
  using Clock = std::chrono::steady_clock;

  // "allreduce of 4096 bytes (float32, sum) on group 'dp' (rank 1 of 2)"
  std::string what;
  int64_t step = -1;
  double timeout_s = 0;
  std::shared_ptr<CommCounters> counters;
  std::shared_ptr<CommProgress> progress;
  int64_t flight_id = -1;  // the flight recorder's record of this operation (-1: none)
  // The group's other members and this rank's host (Communicator::SetPeers),
  // which the watchdog probes to say whether a host is cut off; null: unknown.
  std::shared_ptr<const GroupPeers> peers;
  std::string self_host;

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  Status status;
  Clock::time_point issue_time = Clock::now();
  Clock::time_point start_time = issue_time;
  Clock::time_point end_time = issue_time;

  void MarkStarted() {
    {
      std::lock_guard<std::mutex> lock(mu);
      start_time = Clock::now();
    }
    FlightRecorder::Get().MarkStarted(flight_id);
  }
  // The status, on failure, is prefixed with `what` and the step.
  void Complete(Status result) {
    const bool ok = result.ok();
    {
      std::lock_guard<std::mutex> lock(mu);
      end_time = Clock::now();
      status = result.ok() ? std::move(result)
                           : result.WithContext(what + " at step " + std::to_string(step));
      done.store(true, std::memory_order_release);
    }
    FlightRecorder::Get().MarkEnded(flight_id, ok);
    cv.notify_all();
  }
};

}  // namespace scaletrain::internal
