// A run directory as `scaletrain report` reads it: metrics.jsonl, ranks.jsonl,
// memory.json, config.resolved.toml and flight/rank-*.json. A run still in
// progress is read as far as it got (a last line cut short is skipped).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace scaletrain::report {

// A rank the straggler detector flagged at a step (metrics.jsonl's
// `stragglers`; runs before these fields carry only compute_ratio).
struct StragglerNote {
  int64_t rank = -1, ranks_compared = 0;
  std::string host, phase;  // phase: a ranks.jsonl key, e.g. "forward_s"
  double compute_s = 0, fastest_compute_s = 0, median_compute_s = 0;
  double compute_ratio = 0;  // the detector's: lower quartile over the stage's median
};

// One line of metrics.jsonl (times in seconds).
struct StepPoint {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, step_time_s = 0, tokens_per_s = 0;
  double data_s = 0, forward_s = 0, backward_s = 0, grad_sync_wait_s = 0, optimizer_s = 0;
  double tp_wait_s = 0, pp_wait_s = 0;
  std::optional<double> val_loss;
  std::vector<StragglerNote> stragglers;
};

// One line of ranks.jsonl: a rank's mean seconds per step of each phase
// (data_s, forward_s, ..., wait_s, step_s) over the window ending at `step`.
struct RankWindowPoint {
  int64_t step = 0, rank = 0, stage = 0;
  std::string host;
  std::map<std::string, double> phases;
  // Compute as the straggler detector counts it: data + forward + backward + optimizer.
  double Compute() const;
};

struct MemoryPoint {
  double params = 0, grads = 0, optimizer = 0, activations = 0;  // bytes
};

// One operation of a rank's flight record (comm/flight_recorder.h).
struct FlightOp {
  int64_t id = 0, seq = 0, bytes = 0, step = 0, issued_ns = 0;
  std::string group, op, state;  // state: "done", "in flight", "failed"
};

struct FlightFile {
  int64_t rank = 0;
  std::string host, reason;
  std::map<std::string, std::vector<int64_t>> groups;  // name -> world ranks
  std::vector<FlightOp> ops;                           // oldest first
};

// One record of RUN_DIR/events.jsonl, written by `scaletrain launch`
// (launch/elastic.h): a start, a failure, a stop, the end.
struct LaunchEvent {
  std::string time, event;  // "start", "failure", "stop_requested", "done", ...
  std::vector<std::string> hosts, failed_hosts;
  int64_t dp = 0, resume_step = -1, exit_code = 0, last_step = -1, checkpoint_step = -1, steps_lost = 0;
};

struct RunData {
  std::string dir;
  RunConfig config;  // config.resolved.toml
  std::vector<StepPoint> steps;
  std::vector<RankWindowPoint> windows;
  std::vector<MemoryPoint> memory_by_stage;  // memory.json's per_stage (a rank of each stage)
  std::vector<FlightFile> flight;            // flight/rank-*.json, by rank
  std::vector<LaunchEvent> events;           // events.jsonl (runs under scaletrain launch)
  int64_t world_size() const;
  bool finished() const;  // the last step recorded is training.steps
};

// Errors name the file; a directory without metrics.jsonl or
// config.resolved.toml is not a run directory (the message says what is).
Result<RunData> ReadRunDir(const std::string& dir);

}  // namespace scaletrain::report
