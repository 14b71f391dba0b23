// Validation against published training runs: the typed rows of a table of
// measured runs (table_reader.h; tests/plan/*.csv), each predicted with one
// method for all rows and compared on the figure its source measured.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "plan/cost_model.h"
#include "plan/hardware.h"
#include "plan/stacks.h"
#include "plan/table_reader.h"
#include "plan/uncertainty.h"

namespace scaletrain::plan {

struct ValidationRow {
  PublishedRun run;
  std::string stack;     // software stack assumed (modern / legacy)
  // Where that stack came from: "column" (the row's stack), "--stack" (the
  // default given) or "default" (modern).
  std::string stack_from;
  // For a row without a stack: the software its source or notes mention that
  // is not the stack it ran on ("'fsdp' (pytorch)"), for a person to act on;
  // never applied. "" where they mention none.
  std::string stack_hint;
  // The knobs of the layout the row does not state (tp, pp, vpp, mb, zero,
  // rc, sp; each only where it has a choice): `searched` the search chose,
  // `assumed` the stack's conventions set (Software::legacy_conventions: full
  // recomputation and no SP for Megatron-LM 2021-22's papers).
  std::vector<std::string> searched, assumed;
  std::string metric;    // step_s, tokens_per_s, tflops_per_gpu or mfu
  double measured = 0, predicted = 0;
  double error_pct = 0;  // (predicted - measured) / measured * 100
  // The prediction's range in the metric's units (the step time's range,
  // StepTimeRange, as the metric reads it) and whether it holds the
  // measured figure.
  double predicted_lo = 0, predicted_hi = 0;
  bool in_range = false;
  Prediction prediction;
  bool fits = true;
  std::string error;     // non-empty if the row could not be predicted
};

struct ValidationReport {
  std::vector<ValidationRow> rows;
  double mape = 0;         // mean |error_pct| over predicted rows
  double max_abs_error = 0;
  // Over the predicted rows: the share whose measured figure lies in its
  // range, and the mean of each range's half-width as a % of its prediction.
  double coverage = 0;
  double mean_half_width_pct = 0;
  int64_t layouts_evaluated = 0;
  std::vector<std::string> ignored_columns;  // the header's columns not read
};

// How a published run is predicted: the knobs the row states are fixed,
// the rest are searched as the authors would have tuned them (best tokens/s
// that fits), on the row's `stack`; where the row has none, on
// `default_stack` (`plan validate --stack`) if given, else on `modern`.
// Each row's range takes the sourced spans of its cluster (uncertainty.h),
// or the override's where it gives one. Documented in docs/planner.md.
Result<ValidationRow> ValidateRun(const PublishedRun& run, const HardwareCatalog& catalog,
                                  const StackCatalog& stacks, const std::string& config_dir,
                                  const std::string& default_stack = "",
                                  const UncertaintyOverride& spans = {});
Result<ValidationReport> ValidateFile(const std::string& csv_path, const HardwareCatalog& catalog,
                                      const StackCatalog& stacks, const std::string& config_dir,
                                      const std::string& default_stack = "",
                                      const UncertaintyOverride& spans = {});
// The coverage and mean half-width of the report's predicted rows
// (ValidationReport::coverage, mean_half_width_pct), from their ranges.
void SetRangeSummary(ValidationReport* rep);

}  // namespace scaletrain::plan
