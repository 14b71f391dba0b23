// Rebalancing (parallel.rebalance): each data-parallel replica's share of a
// step's micro-batches follows its measured speed, the remedy for a slow rank
// that operators call dynamic batch sizing. The global batch stays the same
// sequences (the sampler is a function of the batch and sequence index), and
// every micro-batch's gradient is scaled by 1 / (all micro-batches of the
// step) before the DP sum, so the update equals the uniform one up to the
// order of the additions.
#pragma once

#include <cstdint>
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

}  // namespace scaletrain
