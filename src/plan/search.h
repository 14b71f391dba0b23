// Layout search and GPU-count sweep: enumerate every valid layout for a GPU
// count and global batch, rank those that fit by tokens/s, and say why each
// rejected (tp, pp) family loses.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/cost_model.h"

namespace scaletrain::plan {

struct SearchOptions {
  int64_t num_gpus = 0;
  int64_t global_batch = 0;
  Precision precision = Precision::kBF16;
  GradReduce grad_reduce = GradReduce::kAuto;  // Layout::grad_reduce
  int64_t bucket_bytes = 0;  // gradient buckets (Layout::bucket_bytes; 0: the stack's)
  DpCompression dp_compress = DpCompression::kNone;  // Layout::dp_compress
  bool dp_hierarchical = false;                        // Layout::dp_hierarchical
  // A set field is held fixed; an empty one is searched.
  std::optional<int64_t> tp, pp, dp, vpp, micro_batch;
  // Context-parallel ranks: held at this (1: none). The search does not try
  // context parallelism on its own.
  int64_t cp = 1;
  std::optional<int> zero;
  // Hybrid sharding (Layout::shard_group): held at this many data-parallel
  // ranks per sharding group; unset: one group of all. The search does not
  // try it on its own.
  std::optional<int64_t> shard_group;
  std::optional<Recompute> recompute;
  // Full recomputation's layers per chunk (Layout::recompute_layers), held
  // where given; otherwise, on a stack with partial recomputation, each
  // fitting full-recomputation layout is also tried with the fewest layers
  // that still fit.
  std::optional<int64_t> recompute_layers;
  std::optional<bool> sp;
  int64_t max_micro_batch = 64;
  int64_t max_vpp = 16;
  size_t top_k = 5;
};

struct FamilyVerdict {
  int64_t tp = 0, pp = 0, dp = 0;
  int64_t evaluated = 0;
  bool fits = false;
  double best_tokens_per_s = 0;   // of its best fitting layout
  double min_memory_gib = 0;      // of its leanest layout
  std::string reason;             // why it is not the winner ("" for the winner)
  std::optional<Prediction> best;
};

struct SearchResult {
  std::vector<Prediction> top;          // fitting layouts, fastest first
  std::optional<Prediction> fastest_unfit;  // fastest overall when none fits
  int64_t evaluated = 0;
  int64_t fitting = 0;
  std::vector<FamilyVerdict> families;  // best first
};

Result<SearchResult> SearchLayouts(CostModel& model, const SearchOptions& opt);

struct SweepPoint {
  int64_t gpus = 0;
  bool found = false;
  Prediction best;
  double speedup = 0;      // tokens/s over the first point's
  double efficiency = 0;   // speedup / (gpus / first point's gpus)
  std::string note;        // why this step scales badly, if it does
};

// The best layout at each GPU count (same global batch). A point whose
// speedup over the previous point is below 70% of the GPU ratio gets a note
// naming the term of the step time that grew.
Result<std::vector<SweepPoint>> SweepGpuCounts(CostModel& model, const SearchOptions& base,
                                               const std::vector<int64_t>& gpu_counts);

}  // namespace scaletrain::plan
