// `scaletrain report`'s page: one self-contained HTML file (inline CSS and
// SVG, no fetches) with a summary table and the run's plots: loss, throughput
// (and MFU), the time split per step, a per-rank heat map, memory, measured
// against predicted (when the planner can model the run), and where the job
// stuck (flight records).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/attribution.h"
#include "report/run_data.h"

namespace scaletrain::report {

// The measured step the planner is compared with: rank 0's medians over the
// steps after the first few (warm-up); where the others waited for a slower
// rank (report/attribution.h), that rank's mean step instead, since the
// planner predicts ranks of equal speed and the run went at the slow one's.
struct MeasuredStep {
  double step_time_s = 0;
  Breakdown parts;  // kBreakdownNames order
  int64_t steps_used = 0;
  std::string whose;  // "rank 0, medians over 27 steps after warm-up"
  std::optional<SlowRank> slow;
};
MeasuredStep MeasureStep(const RunData& run);

struct Prediction {
  std::string source;  // what the planner was given, e.g. "cluster cpu-bench (profile hw.toml)"
  double step_time_s = 0;
  Breakdown parts;     // kBreakdownNames order
};

struct PageOptions {
  std::optional<double> flops_per_token;  // model FLOPs per token (forward + backward), for MFU
  std::optional<Prediction> prediction;
  std::string prediction_note;            // why there is none, when there is none
  std::string prediction_warning;         // e.g. the cluster is not the hardware the run trained on
};

std::string ReportHtml(const RunData& run, const PageOptions& options);

// How many <svg> documents the page holds (tests and the CLI's message).
int CountSvgs(const std::string& html);

}  // namespace scaletrain::report
