// The flight recorder: a ring of the last N collectives and messages this
// process issued (group, operation, bytes, the group's sequence number, the
// step, when it was issued, started and ended), after PyTorch's NCCL flight
// recorder. It costs a few stores per operation. When a job hangs or dies,
// each rank's ring is written to DIR/rank-R.json:
//   - the watchdog fired (CommHandle::Wait timed out): before the error returns;
//   - a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT): from the
//     handler, best effort, then the signal's default action;
//   - a caller asks (the trainer does on SIGTERM: what mpirun sends every rank
//     when another rank ends the job, and what a scheduler sends on preemption).
// `scaletrain report` reads the files and names the rank and collective the
// job stuck at (report/flight.h).
//
// File format (JSON): {"rank", "host", "reason", "time_unix_ns", "capacity",
// "groups": {name: [world ranks]}, "records": [{"id", "group", "seq", "op",
// "dtype", "bytes", "peer", "step", "group_rank", "group_size", "state"
// ("in flight" | "done" | "failed"), "issued_ns", "started_ns", "ended_ns"}]},
// records oldest first; times are Unix nanoseconds (0: not yet), so ranks on
// one host order on one clock.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace scaletrain {

class FlightRecorder {
 public:
  // The process's recorder (one per process: every group records into it).
  static FlightRecorder& Get();

  // Starts recording the last `capacity` operations (> 0); dumps go to
  // dir/rank-<world_rank>.json (dir is created when a dump is written).
  // `groups`: this rank's groups by name, with their members' world ranks.
  // Also installs the fatal-signal handler. Call before the operations to
  // record; a later call (another run in the same process) moves the dumps
  // to its directory and groups, keeping the ring.
  void Enable(const std::string& dir, int64_t world_rank, const std::string& host, int64_t capacity,
              const std::vector<std::pair<std::string, std::vector<int64_t>>>& groups);
  bool enabled() const;

  // Communicator::Issue: a new operation; returns its id (-1 when off).
  int64_t Record(const std::string& group, int64_t seq, const Communicator::OpDesc& op, int64_t bytes,
                 int64_t step, int group_rank, int group_size);
  // From the backend (any thread): the operation started / ended.
  void MarkStarted(int64_t id);
  void MarkEnded(int64_t id, bool ok);

  // Writes the file (atomically: a temporary file, then a rename). Returns
  // the path written.
  Result<std::string> Dump(const std::string& reason);
  // The oldest operation still in flight, in words ("allreduce of 4096
  // bytes on group 'dp' at step 12, in flight for 8.1 s"); empty if none.
  std::string OldestInFlight() const;
  int64_t world_rank() const;  // as Enable gave it (0 when off)

  struct Impl;  // internal: set once by Enable, never freed (a signal handler reads it)

 private:
  FlightRecorder() = default;
};

}  // namespace scaletrain
