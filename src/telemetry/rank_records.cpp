#include "telemetry/rank_records.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/jsonl.h"
#include "core/stats.h"
#include "core/strings.h"

namespace scaletrain {

namespace fs = std::filesystem;

const char* RankPhaseName(RankPhase p) {
  switch (p) {
    case RankPhase::kData:
      return "data_s";
    case RankPhase::kForward:
      return "forward_s";
    case RankPhase::kBackward:
      return "backward_s";
    case RankPhase::kTpComm:
      return "tp_comm_s";
    case RankPhase::kPpComm:
      return "pp_comm_s";
    case RankPhase::kDpComm:
      return "dp_comm_s";
    case RankPhase::kOptimizer:
      return "optimizer_s";
    case RankPhase::kCheckpoint:
      return "checkpoint_s";
    case RankPhase::kWait:
      return "wait_s";
    case RankPhase::kStep:
      return "step_s";
  }
  return "?";
}

std::string RankWindowJson(const RankWindow& w) {
  nlohmann::json phases = nlohmann::json::object();
  for (int i = 0; i < kNumRankPhases; ++i)
    phases[RankPhaseName(static_cast<RankPhase>(i))] = w.mean[i];
  const nlohmann::json line = {{"step", w.step},
                               {"rank", w.rank},
                               {"host", w.host},
                               {"stage", w.stage},
                               {"steps", w.steps},
                               {"phases", phases},
                               {"median_compute_s", w.median_compute_s},
                               {"lower_quartile_compute_s", w.lower_quartile_compute_s}};
  return line.dump();
}

Result<RankLog> RankLog::Open(const std::string& run_dir, std::optional<int64_t> resume_step) {
  ST_ASSIGN_OR_RETURN(JsonlLog log, JsonlLog::Open((fs::path(run_dir) / "ranks.jsonl").string(), resume_step));
  return RankLog(std::move(log));
}

Status RankLog::Append(const std::vector<RankWindow>& windows) {
  std::string lines;
  for (const RankWindow& w : windows) lines += RankWindowJson(w) + "\n";
  return log_.Append(lines);
}

namespace {

constexpr RankPhase kComputePhases[] = {RankPhase::kData, RankPhase::kForward, RankPhase::kBackward,
                                        RankPhase::kOptimizer};

}  // namespace

double StepCompute(const RankPhases& phases) {
  double s = 0;
  for (RankPhase p : kComputePhases) s += phases[static_cast<int>(p)];
  return s;
}

double RankCompute(const RankWindow& w) { return StepCompute(w.mean); }

namespace {

// The compute phase in which `w` is furthest above the stage's median, with
// its value on `w` and on the stage's fastest rank.
void SlowestPhase(const RankWindow& w, const std::vector<const RankWindow*>& ranks,
                  const RankWindow& fastest, Straggler* s) {
  double worst = -1;
  for (RankPhase p : kComputePhases) {
    std::vector<double> phase;
    for (const RankWindow* o : ranks) phase.push_back(o->mean[static_cast<int>(p)]);
    const double m = Median(phase), excess = w.mean[static_cast<int>(p)] - m;
    if (excess > worst) {
      worst = excess;
      s->phase = p;
      s->seconds = w.mean[static_cast<int>(p)];
      s->median_seconds = m;
      s->fastest_phase_seconds = fastest.mean[static_cast<int>(p)];
    }
  }
}

}  // namespace

Straggler StragglerDetector::Describe(const RankWindow& w,
                                      const std::vector<const RankWindow*>& ranks,
                                      double median) const {
  const RankWindow* fastest = *std::min_element(
      ranks.begin(), ranks.end(),
      [](const auto* a, const auto* b) { return a->median_compute_s < b->median_compute_s; });
  Straggler s;
  s.rank = w.rank;
  s.host = w.host;
  s.windows = slow_in_a_row_[w.rank];
  s.compute_ratio = w.lower_quartile_compute_s / median;
  s.compute_s = w.median_compute_s;
  s.fastest_compute_s = fastest->median_compute_s;
  s.stage_median_compute_s = median;
  s.ranks_compared = static_cast<int64_t>(ranks.size());
  SlowestPhase(w, ranks, *fastest, &s);
  return s;
}

void StragglerDetector::Remember(int64_t rank) {
  auto h = std::find_if(history_.begin(), history_.end(),
                        [&](const auto& e) { return e.first == rank; });
  if (h == history_.end()) {
    history_.push_back({rank, 1});
  } else {
    ++h->second;
  }
}

std::vector<Straggler> StragglerDetector::Observe(const std::vector<RankWindow>& windows) {
  std::map<int64_t, std::vector<const RankWindow*>> by_stage;
  for (const RankWindow& w : windows) {
    by_stage[w.stage].push_back(&w);
    if (w.rank >= static_cast<int64_t>(slow_in_a_row_.size())) slow_in_a_row_.resize(w.rank + 1, 0);
  }
  std::vector<Straggler> flagged;
  for (const auto& [stage, ranks] : by_stage) {
    if (ranks.size() < 2) continue;  // nothing to compare with
    std::vector<double> compute;
    for (const RankWindow* w : ranks) compute.push_back(w->median_compute_s);
    const double median = Median(compute);
    for (const RankWindow* w : ranks) {
      int64_t& in_a_row = slow_in_a_row_[w->rank];
      const double compute = w->lower_quartile_compute_s;
      const bool slow = median > 0 && compute > (1.0 + options_.threshold) * median &&
                        compute - median >= options_.min_excess_s;
      in_a_row = slow ? in_a_row + 1 : 0;
      if (in_a_row < options_.windows) continue;
      flagged.push_back(Describe(*w, ranks, median));
      Remember(w->rank);
    }
  }
  return flagged;
}

std::string StragglerLine(const Straggler& s) {
  const double vs_fastest = s.fastest_compute_s > 0 ? s.compute_s / s.fastest_compute_s : 0;
  std::string ratios = Fmt("it computes %.2fx the fastest rank", vs_fastest);
  std::string times =
      Fmt("%.1f ms per step against %.1f ms", s.compute_s * 1e3, s.fastest_compute_s * 1e3);
  if (s.ranks_compared >= 3 && s.stage_median_compute_s > 0) {
    ratios += Fmt(" and %.2fx the median", s.compute_s / s.stage_median_compute_s);
    times += Fmt(" and %.1f ms", s.stage_median_compute_s * 1e3);
  }
  const std::string phase = PhaseInWords(RankPhaseName(s.phase));
  return Fmt(
      "straggler: rank %lld on %s is slow in %s: %s (%s; %s %.1f ms against %.1f ms), %lld "
      "window%s in a row",
      static_cast<long long>(s.rank), s.host.c_str(), phase.c_str(), ratios.c_str(), times.c_str(),
      phase.c_str(), s.seconds * 1e3, s.fastest_phase_seconds * 1e3,
      static_cast<long long>(s.windows), s.windows == 1 ? "" : "s");
}

}  // namespace scaletrain
