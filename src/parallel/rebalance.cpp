#include "parallel/rebalance.h"

#include <algorithm>
#include <numeric>

#include "core/strings.h"

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

MicroBatchShares::MicroBatchShares(int64_t dp, int64_t per_replica, int64_t replica)
    : shares_(static_cast<size_t>(dp), per_replica), compute_s_(static_cast<size_t>(dp), 0.0), replica_(replica) {}

int64_t MicroBatchShares::total() const { return std::accumulate(shares_.begin(), shares_.end(), int64_t{0}); }

bool MicroBatchShares::Update(const std::vector<double>& compute_s, const std::vector<int64_t>& replica_of) {
  std::fill(compute_s_.begin(), compute_s_.end(), 0.0);
  for (size_t r = 0; r < compute_s.size() && r < replica_of.size(); ++r) {
    double& c = compute_s_[static_cast<size_t>(replica_of[r])];
    c = std::max(c, compute_s[r]);
  }
  std::vector<int64_t> next = RebalanceShares(shares_, compute_s_, total());
  if (next == shares_) return false;
  shares_ = std::move(next);
  return true;
}

std::string MicroBatchShares::Line() const {
  std::string line = "rebalance: micro-batches per DP rank now";
  for (size_t i = 0; i < shares_.size(); ++i) {
    line += Fmt("%s %lld (%.1f ms compute)", i ? "," : "", static_cast<long long>(shares_[i]), compute_s_[i] * 1e3);
  }
  return line;
}

}  // namespace scaletrain
