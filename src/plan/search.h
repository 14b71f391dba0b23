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
  bool cp_ulysses = false;  // Layout::cp_ulysses, held
  // Also searched: every cp (from 1, `cp` above ignored) that divides the
  // GPUs and whose 2 cp chunks divide the sequence (with cp_ulysses, that
  // divides the heads per GPU too).
  bool search_cp = false;
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
  int64_t tp = 0, pp = 0, dp = 0, cp = 1;
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
  double gain = 0;         // tokens/s over the previous point's (0 for the first)
  std::string note;        // why this step scales badly, if it does: the part of the step that grew
  std::string cause;       // and why that part grew (what the search would have had otherwise)
};

// A point scales badly when it adds less than this share of the ideal gain
// over the previous point: with `ratio` times the GPUs, tokens/s below
// 1 + kSweepGainShare x (ratio - 1) times the previous (1.7x for a doubling).
inline constexpr double kSweepGainShare = 0.7;

// The best layout at each GPU count (same global batch). A point that
// scales badly (kSweepGainShare) gets a note naming the part of the step
// time that grew and a cause: why that part grew, from the layout the
// search would have kept (the previous point's, with more data parallelism)
// where it moved to another.
Result<std::vector<SweepPoint>> SweepGpuCounts(CostModel& model, const SearchOptions& base,
                                               const std::vector<int64_t>& gpu_counts);

// The sweep's answer in a sentence: where to stop adding GPUs and why
// ("stop at 64 GPUs: from 64 to 128 GPUs the step gets 2% slower because
// ..."), or that every step still scales.
std::string SweepVerdict(const std::vector<SweepPoint>& pts);

}  // namespace scaletrain::plan
