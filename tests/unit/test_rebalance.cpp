// Rebalancing's arithmetic (parallel/rebalance.h): shares follow speed, sum to
// the step's micro-batches, keep one each, and do not move on noise.
#include <gtest/gtest.h>

#include <numeric>

#include "parallel/rebalance.h"

namespace scaletrain {
namespace {

TEST(RebalanceShares, FollowSpeedAndKeepTheTotal) {
  // Replica 1 takes 1.5x as long for the same 8 micro-batches: 16 split 10 / 6
  // (ideal 9.6 / 6.4).
  const std::vector<int64_t> s = RebalanceShares({8, 8}, {0.100, 0.150}, 16);
  EXPECT_EQ(s, (std::vector<int64_t>{10, 6}));
  // Four replicas, one twice as slow: 2 / 7 ideal ~ 4.57 of 16.
  const std::vector<int64_t> f = RebalanceShares({4, 4, 4, 4}, {0.1, 0.1, 0.2, 0.1}, 16);
  EXPECT_EQ(std::accumulate(f.begin(), f.end(), int64_t{0}), 16);
  EXPECT_EQ(f[2], 2);
}

TEST(RebalanceShares, EveryReplicaKeepsOneMicroBatch) {
  EXPECT_EQ(RebalanceShares({4, 4}, {0.01, 10.0}, 8), (std::vector<int64_t>{7, 1}));
}

TEST(RebalanceShares, NoiseAndMissingFiguresKeepTheCurrentShares) {
  EXPECT_EQ(RebalanceShares({8, 8}, {0.100, 0.102}, 16), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(RebalanceShares({8, 8}, {0.100, 0.0}, 16), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(RebalanceShares({16}, {0.1}, 16), (std::vector<int64_t>{16}));
  // Back towards uniform once the slow replica recovers.
  EXPECT_EQ(RebalanceShares({10, 6}, {0.100, 0.060}, 16), (std::vector<int64_t>{8, 8}));
}

TEST(FirstMicroBatch, CountsTheSharesBefore) {
  EXPECT_EQ(FirstMicroBatch({10, 6}, 0), 0);
  EXPECT_EQ(FirstMicroBatch({10, 6}, 1), 10);
  EXPECT_EQ(FirstMicroBatch({3, 5, 8}, 2), 8);
}

}  // namespace
}  // namespace scaletrain
