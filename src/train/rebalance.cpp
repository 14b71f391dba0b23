#include "train/rebalance.h"

#include <algorithm>
#include <numeric>

namespace scaletrain {

namespace {

// The slowest replica's compute per step if replica d ran shares[d] at
// `speed[d]` micro-batches per second.
double SlowestSeconds(const std::vector<int64_t>& shares, const std::vector<double>& speed) {
  double worst = 0;
  for (size_t d = 0; d < shares.size(); ++d) worst = std::max(worst, static_cast<double>(shares[d]) / speed[d]);
  return worst;
}

}  // namespace

std::vector<int64_t> RebalanceShares(const std::vector<int64_t>& current, const std::vector<double>& compute_s,
                                     int64_t total, double min_gain) {
  const size_t n = current.size();
  if (n < 2 || compute_s.size() != n || total < static_cast<int64_t>(n)) return current;
  std::vector<double> speed(n);
  for (size_t d = 0; d < n; ++d) {
    if (!(compute_s[d] > 0) || current[d] < 1) return current;  // nothing measured yet
    speed[d] = static_cast<double>(current[d]) / compute_s[d];
  }
  const double sum = std::accumulate(speed.begin(), speed.end(), 0.0);
  // One each first, the rest by largest remainder of the ideal shares.
  std::vector<int64_t> shares(n, 1);
  std::vector<double> rest(n);
  int64_t left = total - static_cast<int64_t>(n);
  for (size_t d = 0; d < n; ++d) {
    const double ideal = std::max(0.0, static_cast<double>(total) * speed[d] / sum - 1.0);
    const auto whole = std::min(left, static_cast<int64_t>(ideal));
    shares[d] += whole;
    left -= whole;
    rest[d] = ideal - static_cast<double>(whole);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rest[a] > rest[b]; });
  for (size_t i = 0; left > 0; i = (i + 1) % n, --left) ++shares[order[i]];
  if (SlowestSeconds(shares, speed) < (1.0 - min_gain) * SlowestSeconds(current, speed)) return shares;
  return current;
}

int64_t FirstMicroBatch(const std::vector<int64_t>& shares, int64_t d) {
  return std::accumulate(shares.begin(), shares.begin() + d, int64_t{0});
}

}  // namespace scaletrain
