// Rebalancing (parallel.rebalance): each data-parallel replica's share of a
// step's micro-batches follows its measured speed, the remedy for a slow rank
// that operators call dynamic batch sizing. The global batch stays the same
// sequences (the sampler is a function of the batch and sequence index), and
// every micro-batch's gradient is scaled by 1 / (all micro-batches of the
// step) before the DP sum, so the update equals the uniform one up to the
// order of the additions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace scaletrain {

// New shares of `total` micro-batches among the replicas: proportional to
// each one's speed (its current share over its compute seconds per step),
// rounded by largest remainder, at least one each. The current shares are
// kept unless the new ones cut the slowest replica's predicted time by more
// than `min_gain` (a fraction), so measurement noise does not move them back
// and forth.
std::vector<int64_t> RebalanceShares(const std::vector<int64_t>& current, const std::vector<double>& compute_s,
                                     int64_t total, double min_gain = 0.03);

// The first micro-batch of replica `d` under `shares` (micro-batches are
// numbered over the whole step, replica 0's first).
int64_t FirstMicroBatch(const std::vector<int64_t>& shares, int64_t d);

// The step's micro-batches per DP replica, as rebalancing moves them.
class MicroBatchShares {
 public:
  // dp replicas of `per_replica` micro-batches each; this rank is in `replica`.
  MicroBatchShares(int64_t dp, int64_t per_replica, int64_t replica);

  int64_t total() const;  // the step's micro-batches over every replica
  int64_t mine() const { return shares_[static_cast<size_t>(replica_)]; }
  int64_t first_micro_batch() const { return FirstMicroBatch(shares_, replica_); }

  // After a window of per-rank records: `compute_s[r]` is world rank r's
  // compute per step, `replica_of[r]` its DP replica (a replica is as fast as
  // its slowest member). True when the shares moved (RebalanceShares).
  bool Update(const std::vector<double>& compute_s, const std::vector<int64_t>& replica_of);
  // "rebalance: micro-batches per DP rank now 10 (57.6 ms compute), 6 (86.8 ms compute)"
  std::string Line() const;

 private:
  std::vector<int64_t> shares_;
  std::vector<double> compute_s_;  // per replica, at the last update
  int64_t replica_;
};

}  // namespace scaletrain
