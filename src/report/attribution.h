// Who waited for whom. A rank blocked in a collective is either paying for
// the transfer or waiting for a rank that has not reached it yet; the time
// in metrics.jsonl cannot tell them apart, so a slow rank shows up as
// "communication" on every other rank. Here each rank's step (ranks.jsonl)
// is split by cause: a rank's exposed wait is charged to "waiting for a
// slower rank" (up to the slower rank's extra compute) when the straggler
// detector flagged that rank, or when the per-rank compute shows it slower
// by the detector's own margins (telemetry.straggler_threshold and
// straggler_min_ms, against the fastest rank of its pipeline stage).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/run_data.h"

namespace scaletrain::report {

// A step's time in the categories measured and predicted times share; the
// planner predicts ranks of equal speed, so its "waiting" is always 0.
using Breakdown = std::vector<std::pair<std::string, double>>;
inline constexpr int kBreakdownParts = 7;
inline const char* const kBreakdownNames[kBreakdownParts] = {"compute",
                                                             "TP + CP comm",
                                                             "PP comm + bubble",
                                                             "DP comm (exposed)",
                                                             "waiting for a slower rank",
                                                             "optimizer",
                                                             "data + other"};
enum BreakdownPart {
  kPartCompute,
  kPartTp,
  kPartPp,
  kPartDp,
  kPartWaiting,
  kPartOptimizer,
  kPartOther
};

// One rank's step: the mean of its windows after the first (warm-up).
struct RankSplit {
  int64_t rank = 0, stage = 0;
  std::string host;
  double compute_s =
      0;              // data + forward + backward + optimizer, as the straggler detector counts it
  double step_s = 0;  // its step, checkpoint writes left out (the planner does not predict them)
  Breakdown parts;    // kBreakdownNames order
};

// The rank the others of its stage waited for.
struct SlowRank {
  int64_t rank = -1;
  std::string host;
  double compute_s = 0;
  double others_compute_s = 0;   // the median of the other ranks of its stage
  double fastest_compute_s = 0;  // the fastest rank of its stage
  int64_t ranks_in_stage = 0;
  bool flagged = false;  // named by the straggler detector (else found from the per-rank compute)
  double Ratio() const { return others_compute_s > 0 ? compute_s / others_compute_s : 0; }
};

struct Attribution {
  std::vector<RankSplit> ranks;  // by rank
  std::optional<SlowRank> slow;  // the slowest such rank, when any rank was waited for
  int64_t windows_used = 0;
  // Window (its last step) -> rank -> seconds per step that rank computed
  // less than the rank its stage waited for: the most of its exposed wait
  // that is charged to waiting. Empty without a slow rank.
  std::map<int64_t, std::map<int64_t, double>> wait_budget_s;
  // The budget of `rank` at `step`: its window's (the first ending at or
  // after the step; past the last window, the last one's); 0 without one.
  double WaitBudget(int64_t rank, int64_t step) const;
};

Attribution AttributeWaits(const RunData& run);

// "rank 1 computes 1.85x the others (18.1 ms against 9.8 ms a step)"; with
// 3+ ranks in its stage, "the median of the others".
std::string SlowRankWords(const SlowRank& s);

// The ranks a chart shows: every rank up to 8, else the fastest, the
// median and the slowest by compute, each labelled ("rank 3 (slowest)").
std::vector<std::pair<std::string, const RankSplit*>> RanksToShow(const Attribution& a);

}  // namespace scaletrain::report
