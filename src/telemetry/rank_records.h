// Per-rank step records and the straggler detector. Every rank times its
// phases each step (RankPhases); every telemetry.rank_interval steps the lead
// gathers each rank's means over that window (one small collective in the
// trainer) and hands them here: RankLog appends them to RUN_DIR/ranks.jsonl
// and StragglerDetector compares the ranks.
#pragma once

#include <array>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "telemetry/jsonl_log.h"

namespace scaletrain {

// Where a rank's step goes. Compute phases (data, forward, backward,
// optimizer) are what the straggler detector compares; forward and backward
// include the tensor- and context-parallel transfers inside them (also given
// alone as tp_comm). `wait` is the step boundary's all-reduce: time spent waiting for
// the slowest rank.
enum class RankPhase {
  kData,
  kForward,
  kBackward,
  kTpComm,
  kPpComm,
  kDpComm,
  kOptimizer,
  kCheckpoint,
  kWait,
  kStep,
};
inline constexpr int kNumRankPhases = 10;
const char* RankPhaseName(RankPhase phase);  // "data_s", "forward_s", ...
using RankPhases = std::array<double, kNumRankPhases>;

// One rank's window of steps: mean seconds per step of each phase.
struct RankWindow {
  int64_t rank = 0;
  std::string host;
  int64_t stage = 0;  // its pipeline stage: ranks are compared within a stage
  int64_t step = 0;   // the window's last step
  int64_t steps = 0;  // steps in the window
  RankPhases mean{};
  // One step's compute (RankCompute's phases) over the window's steps: the
  // median and the lower quartile, what the straggler detector compares. A
  // rank descheduled on a few steps (a busy host, a page-cache flush) has a
  // high mean but a typical lower quartile; a straggler is slow on most steps.
  double median_compute_s = 0;
  double lower_quartile_compute_s = 0;
};
std::string RankWindowJson(const RankWindow& w);

// RUN_DIR/ranks.jsonl: one line per rank per window.
class RankLog {
 public:
  // With `resume_step`, keeps the records up to that step of a resumed run.
  static Result<RankLog> Open(const std::string& run_dir, std::optional<int64_t> resume_step);
  Status Append(const std::vector<RankWindow>& windows);

 private:
  explicit RankLog(JsonlLog log) : log_(std::move(log)) {}
  JsonlLog log_;
};

struct StragglerOptions {
  // A rank whose compute is, on three quarters of the window's steps
  // (lower_quartile_compute_s), ...
  double threshold =
      0.2;  // ...more than (1 + threshold) x the median of its stage's median_compute_s...
  int64_t windows = 2;     // ...this many windows in a row
  // ...and by at least this much (seconds per step): on a step of a few
  // milliseconds, scheduling jitter alone is 20%.
  double min_excess_s = 0.002;
};

struct Straggler {
  int64_t rank = 0;
  std::string host;
  RankPhase phase = RankPhase::kForward;   // the compute phase furthest above its median
  double seconds = 0, median_seconds = 0;  // that phase, per step
  double compute_ratio = 0;  // the rank's lower-quartile compute over the stage's median
  int64_t windows = 0;                     // slow windows in a row so far
  // Median compute per step of this rank, of the fastest rank of its stage
  // and the stage's median (the detector's reference): what the console and
  // the report say, the ratio against the fastest always, against the
  // median with 3+ ranks (with 2, the median is their midpoint).
  double compute_s = 0, fastest_compute_s = 0, stage_median_compute_s = 0;
  double fastest_phase_seconds = 0;  // `phase` on the fastest rank
  int64_t ranks_compared = 0;        // ranks in the stage
};

// A window's compute per step: data + forward + backward + optimizer (not
// communication or waiting), the mean that rebalancing compares.
double RankCompute(const RankWindow& w);
// The same of one step's phases.
double StepCompute(const RankPhases& p);

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options) : options_(options) {}
  // One window of every rank. Returns the ranks flagged now (slow for at
  // least options.windows windows in a row, counting this one); a rank that
  // is no longer slow is cleared.
  std::vector<Straggler> Observe(const std::vector<RankWindow>& windows);
  // Every rank ever flagged in this run, with the windows it was flagged in.
  const std::vector<std::pair<int64_t, int64_t>>& history() const { return history_; }

 private:
  // A flagged rank `w` against the other ranks of its stage, whose median compute is `median`.
  Straggler Describe(const RankWindow& w, const std::vector<const RankWindow*>& ranks,
                     double median) const;
  void Remember(int64_t rank);  // one more flagged window in history_

  StragglerOptions options_;
  std::vector<int64_t> slow_in_a_row_;                // by rank
  std::vector<std::pair<int64_t, int64_t>> history_;  // (rank, flagged windows)
};

// "straggler: rank 1 on vm is slow in the forward pass: it computes 1.85x the
// fastest rank (18.1 ms per step against 9.8 ms; the forward pass 14.0 ms
// against 6.0 ms), 2 windows in a row"; with 3+ ranks also "and 1.80x the
// median" (and its compute).
std::string StragglerLine(const Straggler& s);

}  // namespace scaletrain
