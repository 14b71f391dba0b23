// `scaletrain report --compare RUN_DIR...`: a set of runs of one model on
// growing rank counts as a scaling curve: each run's throughput per rank
// against the run with the fewest ranks (its scaling efficiency), measured
// and, where the planner could model the runs, predicted beside it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/run_data.h"

namespace scaletrain::report {

struct ScalingRun {
  std::string dir;
  std::string layout;  // "dp 2 x tp 1 x pp 1"
  int64_t ranks = 1;
  double tokens_per_s = 0;  // the median step's
  std::optional<double> predicted_tokens_per_s;
};

// A run as the curve counts it: its ranks and layout from its config, its
// tokens per second from its median step (MeasureStep); no prediction.
ScalingRun ScalingRunOf(const RunData& run);

// Tokens per second per rank relative to the run with the fewest ranks
// (the first of them): measured, or predicted (against the predicted
// throughput of that run); 0 where a figure is missing.
std::vector<double> ScalingEfficiency(const std::vector<ScalingRun>& runs, bool predicted);

// The page: the efficiency curve (measured and predicted), throughput
// against ranks, and a table of every run. `prediction_note` says where the
// predictions came from, or why there are none.
std::string CompareHtml(const std::vector<ScalingRun>& runs, const std::string& prediction_note);

}  // namespace scaletrain::report
