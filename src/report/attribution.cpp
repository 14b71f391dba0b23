#include "report/attribution.h"

#include <algorithm>
#include <set>

#include "core/stats.h"
#include "core/strings.h"

namespace scaletrain::report {

namespace {

double Phase(const RankWindowPoint& w, const char* key) {
  auto it = w.phases.find(key);
  return it == w.phases.end() ? 0.0 : it->second;
}

// One window of one rank in kBreakdownNames' parts: forward and backward
// include the TP collectives inside them; what the named parts leave of the
// step (data, the step-boundary wait, anything untimed) is data + other.
RankSplit SplitOf(const RankWindowPoint& w) {
  RankSplit r;
  r.rank = w.rank, r.stage = w.stage, r.host = w.host;
  r.compute_s = w.Compute();
  r.step_s = std::max(0.0, Phase(w, "step_s") - Phase(w, "checkpoint_s"));
  const double tp = Phase(w, "tp_comm_s");
  double parts[kBreakdownParts] = {
      std::max(0.0, Phase(w, "forward_s") + Phase(w, "backward_s") - tp),
      tp,
      Phase(w, "pp_comm_s"),
      Phase(w, "dp_comm_s"),
      0,
      Phase(w, "optimizer_s"),
      0};
  double named = 0;
  for (double p : parts) named += p;
  parts[kPartOther] = std::max(0.0, r.step_s - named);
  for (int k = 0; k < kBreakdownParts; ++k) r.parts.emplace_back(kBreakdownNames[k], parts[k]);
  return r;
}

// The windows after the first (a warm-up window, unless it is the only one).
std::map<int64_t, std::vector<const RankWindowPoint*>> UsedWindows(const RunData& run) {
  std::map<int64_t, std::vector<const RankWindowPoint*>> by_step;
  for (const RankWindowPoint& w : run.windows) by_step[w.step].push_back(&w);
  if (by_step.size() > 1) by_step.erase(by_step.begin());
  return by_step;
}

// Each rank's mean split over the used windows.
std::vector<RankSplit> MeanSplits(
    const std::map<int64_t, std::vector<const RankWindowPoint*>>& windows) {
  std::map<int64_t, std::pair<RankSplit, int>> sums;  // rank -> (sum, windows)
  for (const auto& [step, ranks] : windows) {
    for (const RankWindowPoint* w : ranks) {
      const RankSplit s = SplitOf(*w);
      auto [it, fresh] = sums.try_emplace(w->rank, s, 0);
      RankSplit& sum = it->second.first;
      if (!fresh) {
        sum.compute_s += s.compute_s, sum.step_s += s.step_s;
        for (int k = 0; k < kBreakdownParts; ++k) sum.parts[k].second += s.parts[k].second;
      }
      ++it->second.second;
    }
  }
  std::vector<RankSplit> out;
  for (auto& [rank, sum_n] : sums) {
    auto& [s, n] = sum_n;
    s.compute_s /= n, s.step_s /= n;
    for (auto& p : s.parts) p.second /= n;
    out.push_back(std::move(s));
  }
  return out;
}

std::set<int64_t> FlaggedRanks(const RunData& run) {
  std::set<int64_t> flagged;
  for (const StepPoint& p : run.steps) {
    for (const StragglerNote& n : p.stragglers) flagged.insert(n.rank);
  }
  return flagged;
}

// The slowest rank of each stage, where the others waited for it: the
// detector flagged it, or its compute is above the stage's fastest by the
// detector's threshold and minimum.
std::vector<SlowRank> SlowRanks(const RunData& run, const std::vector<RankSplit>& splits) {
  std::map<int64_t, std::vector<const RankSplit*>> by_stage;
  for (const RankSplit& s : splits) by_stage[s.stage].push_back(&s);
  const std::set<int64_t> flagged = FlaggedRanks(run);
  const TelemetryConfig& t = run.config.telemetry;
  std::vector<SlowRank> out;
  for (const auto& [stage, ranks] : by_stage) {
    if (ranks.size() < 2) continue;
    auto by_compute = [](const RankSplit* a, const RankSplit* b) {
      return a->compute_s < b->compute_s;
    };
    const RankSplit* slowest = *std::max_element(ranks.begin(), ranks.end(), by_compute);
    const RankSplit* fastest = *std::min_element(ranks.begin(), ranks.end(), by_compute);
    SlowRank s;
    s.rank = slowest->rank, s.host = slowest->host, s.compute_s = slowest->compute_s;
    s.fastest_compute_s = fastest->compute_s;
    s.ranks_in_stage = static_cast<int64_t>(ranks.size());
    s.flagged = flagged.count(s.rank) > 0;
    std::vector<double> others;
    for (const RankSplit* r : ranks) {
      if (r != slowest) others.push_back(r->compute_s);
    }
    s.others_compute_s = Median(others);
    const double excess = s.compute_s - s.fastest_compute_s;
    const bool slower = s.compute_s > (1.0 + t.straggler_threshold) * s.fastest_compute_s &&
                        excess >= t.straggler_min_ms * 1e-3;
    if (s.flagged || slower) out.push_back(s);
  }
  return out;
}

// Moves up to `budget` seconds of a rank's exposed DP wait, then of its
// step-boundary wait (in data + other), to waiting for a slower rank.
void ChargeWait(double budget, double boundary_wait_s, RankSplit* r) {
  double& dp = r->parts[kPartDp].second;
  double& other = r->parts[kPartOther].second;
  const double from_dp = std::min(budget, dp);
  const double from_other = std::min({budget - from_dp, boundary_wait_s, other});
  dp -= from_dp, other -= from_other;
  r->parts[kPartWaiting].second += from_dp + from_other;
}

// Per window: each rank's compute short of the rank its stage waits for.
std::map<int64_t, std::map<int64_t, double>> WindowBudgets(
    const RunData& run, const std::map<int64_t, int64_t>& slow_of_stage) {
  std::map<int64_t, std::vector<const RankWindowPoint*>> by_step;
  for (const RankWindowPoint& w : run.windows) by_step[w.step].push_back(&w);
  std::map<int64_t, std::map<int64_t, double>> budgets;
  for (const auto& [step, ranks] : by_step) {
    for (const RankWindowPoint* k : ranks) {
      auto s = slow_of_stage.find(k->stage);
      if (s == slow_of_stage.end() || s->second != k->rank) continue;
      for (const RankWindowPoint* o : ranks) {
        if (o->stage == k->stage)
          budgets[step][o->rank] = std::max(0.0, k->Compute() - o->Compute());
      }
    }
  }
  return budgets;
}

// A rank's mean step-boundary wait over the used windows.
double BoundaryWait(const std::map<int64_t, std::vector<const RankWindowPoint*>>& used,
                    int64_t rank) {
  double sum = 0;
  for (const auto& [step, ranks] : used) {
    for (const RankWindowPoint* w : ranks) sum += w->rank == rank ? Phase(*w, "wait_s") : 0.0;
  }
  return used.empty() ? 0.0 : sum / static_cast<double>(used.size());
}

}  // namespace

double Attribution::WaitBudget(int64_t rank, int64_t step) const {
  if (wait_budget_s.empty()) return 0;
  auto it = wait_budget_s.lower_bound(step);
  if (it == wait_budget_s.end()) it = std::prev(it);
  auto r = it->second.find(rank);
  return r == it->second.end() ? 0.0 : r->second;
}

Attribution AttributeWaits(const RunData& run) {
  Attribution a;
  const auto used = UsedWindows(run);
  a.windows_used = static_cast<int64_t>(used.size());
  a.ranks = MeanSplits(used);
  const std::vector<SlowRank> slow = SlowRanks(run, a.ranks);
  if (slow.empty()) return a;
  a.slow = *std::max_element(slow.begin(), slow.end(), [](const SlowRank& x, const SlowRank& y) {
    return x.Ratio() < y.Ratio();
  });
  std::map<int64_t, int64_t> slow_of_stage;  // stage -> the rank its other ranks wait for
  std::map<int64_t, double> slow_compute;    // stage -> that rank's compute
  for (const SlowRank& s : slow) {
    for (const RankSplit& r : a.ranks) {
      if (r.rank == s.rank) slow_of_stage[r.stage] = r.rank, slow_compute[r.stage] = r.compute_s;
    }
  }
  a.wait_budget_s = WindowBudgets(run, slow_of_stage);
  for (RankSplit& r : a.ranks) {
    auto s = slow_of_stage.find(r.stage);
    if (s == slow_of_stage.end() || s->second == r.rank) continue;
    ChargeWait(std::max(0.0, slow_compute[r.stage] - r.compute_s), BoundaryWait(used, r.rank), &r);
  }
  return a;
}

std::string SlowRankWords(const SlowRank& s) {
  return Fmt("rank %lld computes %.2fx the %s (%.1f ms against %.1f ms a step)",
             static_cast<long long>(s.rank), s.Ratio(),
             s.ranks_in_stage > 2 ? "median of the others" : "others", s.compute_s * 1e3,
             s.others_compute_s * 1e3);
}

std::vector<std::pair<std::string, const RankSplit*>> RanksToShow(const Attribution& a) {
  std::vector<std::pair<std::string, const RankSplit*>> out;
  if (a.ranks.size() <= 8) {
    for (const RankSplit& r : a.ranks) out.emplace_back("rank " + std::to_string(r.rank), &r);
    return out;
  }
  std::vector<const RankSplit*> sorted;
  for (const RankSplit& r : a.ranks) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(),
            [](const RankSplit* x, const RankSplit* y) { return x->compute_s < y->compute_s; });
  const RankSplit* picks[] = {sorted.front(), sorted[sorted.size() / 2], sorted.back()};
  const char* what[] = {"fastest", "median", "slowest"};
  for (int i = 0; i < 3; ++i)
    out.emplace_back("rank " + std::to_string(picks[i]->rank) + " (" + what[i] + ")", picks[i]);
  return out;
}

}  // namespace scaletrain::report
