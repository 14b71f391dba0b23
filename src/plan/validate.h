// Validation against published training runs: read the CSV of measured runs
// (tests/plan/published-runs.csv), predict each with one method for all rows,
// and compare on the figure the source measured.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "plan/cost_model.h"
#include "plan/hardware.h"
#include "plan/stacks.h"

namespace scaletrain::plan {

struct PublishedRun {
  std::string id, source, model, gpu, notes;
  double params_b = 0;
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, num_gpus = 0;
  int64_t tp = 0, pp = 0, dp = 0, vpp = 0, micro_batch = 0, global_batch = 0;  // 0: not stated
  std::string sp, recompute;                                                  // "": not stated
  // The software stack (StackCatalog::Find): the optional `stack` column;
  // "": not stated (ValidateRun's default_stack, else modern).
  std::string stack;
  // Optional architecture columns (0 / "": not stated): grouped-query KV
  // heads, the MLP width, its activation (gelu, swiglu, squared_relu) and
  // whether the head is tied to the embedding (true / false).
  int64_t kv_heads = 0, ffn_hidden = 0;
  std::string activation, tied_embeddings;
  // Optional GPU-variant columns (0: as catalogued): a power cap (W) and a memory size (GiB).
  double power_cap_w = 0, hbm_gib = 0, hbm_tbps = 0;
  // Why the row could not be read (a cell that is no number, a required
  // column left empty); "" for a row read whole. Only `id` is set beside it.
  std::string error;
  // The optional `zero` column: the ZeRO stage the run used (-1: not stated;
  // FULL_SHARD / ZeRO-n in the notes, or the stack's default, else searched).
  int64_t zero = -1;
  // The optional `precision` column (bf16, fp16, fp8, fp32, tf32); "": fp16
  // where the notes say so, else bf16.
  std::string precision;
  // The optional `cluster` column: a catalog cluster preset the run used (its
  // node and fabric); "": the GPU's reference cluster. Its GPU must be the
  // row's `gpu`.
  std::string cluster;
  // The optional `cp` column: context-parallel ranks (1 or empty: none);
  // num_gpus = tp x cp x pp x dp.
  int64_t cp = 1;
  // The optional `shard_group` column: hybrid sharding's group size
  // (Layout::shard_group; 0: not stated). Without it, notes naming HSDP or
  // HYBRID_SHARD shard within a node.
  int64_t shard_group = 0;
  // The optional `recompute_layers` column: with full recomputation, the
  // layers of each model chunk that recompute (Layout::recompute_layers; 0:
  // not stated, all of them when the row says full).
  int64_t recompute_layers = 0;
  double tflops_per_gpu = 0, mfu = 0, step_s = 0, tokens_per_s = 0;           // 0: not stated
};

// Parses the CSV (RFC 4180 quoting); the header must hold every column the
// issue lists, in any order; `stack` and the architecture columns
// (`kv_heads`, `ffn_hidden`, `activation`, `tied_embeddings`) are optional.
// `ignored`, where given, gets the header's columns that are not read (no
// column of the format and none of its other names). A file that is no CSV
// of runs (a quote left open, a missing column) is an error; a row that
// cannot be read is that row's `error`, the others are read.
Result<std::vector<PublishedRun>> ReadPublishedRuns(const std::string& path,
                                                    std::vector<std::string>* ignored = nullptr);

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
  std::string metric;    // step_s, tokens_per_s, tflops_per_gpu or mfu
  double measured = 0, predicted = 0;
  double error_pct = 0;  // (predicted - measured) / measured * 100
  Prediction prediction;
  bool fits = true;
  std::string error;     // non-empty if the row could not be predicted
};

struct ValidationReport {
  std::vector<ValidationRow> rows;
  double mape = 0;         // mean |error_pct| over predicted rows
  double max_abs_error = 0;
  int64_t layouts_evaluated = 0;
  std::vector<std::string> ignored_columns;  // the header's columns not read
};

// How a published run is predicted: the knobs the row states are fixed,
// the rest are searched as the authors would have tuned them (best tokens/s
// that fits), on the row's `stack`; where the row has none, on
// `default_stack` (`plan validate --stack`) if given, else on `modern`.
// Documented in docs/planner.md.
Result<ValidationRow> ValidateRun(const PublishedRun& run, const HardwareCatalog& catalog,
                                  const StackCatalog& stacks, const std::string& config_dir,
                                  const std::string& default_stack = "");
Result<ValidationReport> ValidateFile(const std::string& csv_path, const HardwareCatalog& catalog,
                                      const StackCatalog& stacks, const std::string& config_dir,
                                      const std::string& default_stack = "");

}  // namespace scaletrain::plan
