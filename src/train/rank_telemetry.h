// The trainer's side of per-rank telemetry (telemetry/rank_records.h): each
// rank adds up its phases step by step; every telemetry.rank_interval steps
// one world all-gather brings every rank's window to the lead, which appends
// them to ranks.jsonl and asks the straggler detector. Also the run's totals
// for the end-of-run summary.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "telemetry/metrics.h"
#include "telemetry/prometheus.h"
#include "telemetry/rank_records.h"
#include "comm/communicator.h"
#include "core/config.h"
#include "model/spec.h"
#include "parallel/mesh.h"
#include "parallel/process_groups.h"

namespace scaletrain {

// The bytes and calls this rank's groups moved since the last call, and the
// time blocked on them, into `rec`; with pipeline parallelism one rank's of
// every stage (collective).
void TakeStepTraffic(ProcessGroups& groups, StepRecord& rec);

// What per-rank telemetry reads of the run.
struct RankTelemetryContext {
  Communicator* world = nullptr;  // the lead (rank 0) writes ranks.jsonl
  const Mesh* mesh = nullptr;     // each rank's pipeline stage
  TelemetryConfig config;
  ModelSpec spec;                  // for model FLOPs
  std::vector<std::string> hosts;  // by world rank
  int64_t memory_bytes = 0;        // this rank's (RankMemory's sum)
  RankLog* rank_log = nullptr;     // the lead's ranks.jsonl; null: none
};

class RankTelemetry {
 public:
  // Collective (every rank's memory is gathered once).
  explicit RankTelemetry(RankTelemetryContext ctx);

  // This rank's phases of step `rec`, with the time it spent on checkpoints
  // and waiting at the step boundary since the last call.
  void AddStep(const StepRecord& rec, double checkpoint_s, double wait_s);
  // At the end of a window (every telemetry.rank_interval steps): gathers
  // every rank's window (collective), and on the lead writes ranks.jsonl and
  // returns the stragglers flagged now; nothing otherwise.
  Result<std::vector<Straggler>> EndOfWindow(int64_t step);

  // The end-of-run summary (lead): mean time split of a step, tokens/s, MFU
  // when telemetry.peak_tflops is given, the stragglers seen.
  std::string Summary(double tokens_per_s) const;
  // Model TFLOP/s per rank at this throughput, and MFU where
  // telemetry.peak_tflops is given, as TensorBoard scalars.
  std::vector<std::pair<std::string, double>> ThroughputScalars(double tokens_per_s) const;
  // What rank 0's Prometheus endpoint serves after step `rec` (lead).
  PrometheusSnapshot Snapshot(const StepRecord& rec) const;
  const std::vector<std::string>& hosts() const { return ctx_.hosts; }
  // Every rank: each rank's compute per step (RankCompute) in the last
  // window, by world rank, and the step that window ended at (0: none yet).
  const std::vector<double>& window_compute() const { return window_compute_; }
  int64_t last_window_step() const { return last_window_step_; }

 private:
  // Model FLOPs (no recompute) per second per rank at this throughput, in TFLOP/s.
  double ModelTflopsPerRank(double tokens_per_s) const;

  bool lead() const { return ctx_.world->rank() == 0; }

  RankTelemetryContext ctx_;
  std::vector<int64_t> memory_bytes_;        // by world rank
  std::vector<double> last_step_s_;          // by world rank: mean step time of the last window
  std::vector<int64_t> flagged_;             // ranks the last window flagged
  std::vector<double> window_compute_;       // by world rank, every rank
  int64_t last_window_step_ = 0;
  RankPhases window_{};                      // sums over the current window
  std::vector<double> window_step_compute_;  // each of its steps' compute (StepCompute)
  RankPhases run_total_{};  // sums over the run (this rank)
  int64_t run_steps_ = 0;
  StragglerDetector detector_;
};

}  // namespace scaletrain
