// Reading a table of published training runs (the CSV of `plan validate`,
// tests/plan/*.csv) into typed rows. Everything about how tables are written
// lives here: RFC 4180 quoting, a spreadsheet's byte-order mark and CRLF,
// spaces after commas, the names other tables give a column, numbers as
// tables write them ("~150", "3,760", "41%", "38-43%", "n/a") and the words a
// typed column may hold ("bfloat16", "ZeRO-1", "FULL_SHARD", "NeMo 2.0" is left
// to the stack catalog). The validation (validate.h) sees only the typed row:
// `source` and `notes` are carried for people, never read for an input.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"
#include "plan/hardware.h"
#include "plan/layout.h"

namespace scaletrain::plan {

// One published run, as its row states it; an empty optional or a 0 count is
// "not stated" (searched, or the default the validation documents).
struct PublishedRun {
  std::string id, model, gpu;
  // For people: the citation and the prose around the numbers. No input is
  // read from either (a hint may quote them).
  std::string source, notes;
  double params_b = 0;
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, num_gpus = 0;
  int64_t tp = 0, pp = 0, dp = 0, vpp = 0, micro_batch = 0, global_batch = 0;
  std::optional<bool> sp;
  std::optional<Recompute> recompute;
  // The optional `stack` column as written ("modern", "NeMo 2.0"): a name the
  // stack catalog reads (StackCatalog::Find); "": not stated.
  std::string stack;
  // The optional `cluster` column: a catalog cluster preset (its GPU must be
  // the row's `gpu`); "": the GPU's reference cluster.
  std::string cluster;
  // Optional architecture columns: grouped-query KV heads, the MLP width, its
  // activation and whether the head is tied to the embedding.
  int64_t kv_heads = 0, ffn_hidden = 0;
  std::optional<Activation> activation;
  std::optional<bool> tied_embeddings;
  // Optional GPU-variant columns (0: as catalogued): a power cap (W), a
  // memory size (GiB) and bandwidth (TB/s).
  double power_cap_w = 0, hbm_gib = 0, hbm_tbps = 0;
  // The optional `zero` column: the ZeRO stage the run used.
  std::optional<int> zero;
  // The optional `precision` column: the compute precision.
  std::optional<Precision> precision;
  // The optional `grad_reduce` column: the dtype the gradients were reduced
  // in, fp32 or the compute precision's 16 bits (FSDP's reduce_dtype,
  // Megatron's --accumulate-allreduce-grads-in-fp32, Composer's DEFAULT / PURE).
  std::optional<GradReduce> grad_reduce;
  // The optional `cp` column: context-parallel ranks (num_gpus = tp x cp x pp x dp).
  int64_t cp = 1;
  // The optional `shard_group` column: hybrid sharding's group size
  // (Layout::shard_group; 0: one group of all).
  int64_t shard_group = 0;
  // The optional `recompute_layers` column: with full recomputation, the
  // layers of each model chunk that recompute (0: all of them).
  int64_t recompute_layers = 0;
  double tflops_per_gpu = 0, mfu = 0, step_s = 0,
         tokens_per_s = 0;  // the measured figures; 0: not stated
  // Why the row could not be read (a cell that is no number or no value of
  // its column, a required column left empty); "" for a row read whole. Only
  // `id` is set beside it.
  std::string error;
};

// Parses the CSV; the header must hold every required column (docs/planner.md
// lists them), in any order, under its name or a synonym other tables use.
// `ignored`, where given, gets the header's columns that are not read. A file
// that is no CSV of runs (a quote left open, a missing column) is an error; a
// row that cannot be read is that row's `error`, the others are read.
Result<std::vector<PublishedRun>> ReadPublishedRuns(const std::string& path,
                                                    std::vector<std::string>* ignored = nullptr);

}  // namespace scaletrain::plan
