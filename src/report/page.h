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

#include "report/run_data.h"

namespace scaletrain::report {

// A step's time in the categories measured and predicted times share.
using Breakdown = std::vector<std::pair<std::string, double>>;
inline const char* const kBreakdownNames[] = {"compute", "TP comm", "PP comm + bubble", "DP comm (exposed)",
                                              "optimizer", "data + other"};

// The measured step: medians over the steps after the first few (warm-up).
struct MeasuredStep {
  double step_time_s = 0;
  Breakdown parts;  // kBreakdownNames order
  int64_t steps_used = 0;
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
};

std::string ReportHtml(const RunData& run, const PageOptions& options);

// How many <svg> documents the page holds (tests and the CLI's message).
int CountSvgs(const std::string& html);

}  // namespace scaletrain::report
