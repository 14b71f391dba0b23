#include "train/rank_telemetry.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/stats.h"
#include "telemetry/metrics.h"
#include "train/run_setup.h"

namespace scaletrain {

// The bytes and calls this rank's groups moved since the last call, and
// the time blocked on them; with pipeline parallelism, one rank's of every
// stage (collective).
void TakeStepTraffic(ProcessGroups& g, StepRecord& rec) {
  CommStats stats[kNumCommGroups] = {g.dp->TakeStats(), g.tp->TakeStats(), g.pp->TakeStats(),
                                     g.cp->TakeStats()};
  // The hierarchical DP reduction's traffic is the DP group's.
  for (Communicator* sub : {g.dp_host.get(), g.dp_cross.get()}) {
    if (sub == nullptr) continue;
    const CommStats s = sub->TakeStats();
    CommStats& dp = stats[static_cast<int>(CommGroup::kDp)];
    for (int op = 0; op < kNumCommOps; ++op) {
      dp.ops[op].calls += s.ops[op].calls;
      dp.ops[op].payload_bytes += s.ops[op].payload_bytes;
    }
    dp.wait_s += s.wait_s;
  }
  const int64_t sizes[kNumCommGroups] = {g.dp->size(), g.tp->size(), g.pp->size(), g.cp->size()};
  std::vector<int64_t> mine;
  for (int i = 0; i < kNumCommGroups; ++i) {
    rec.traffic[i] = {stats[i].payload_bytes(), stats[i].calls()};
    rec.groups_used[i] = sizes[i] > 1;
    mine.insert(mine.end(), {rec.traffic[i].payload_bytes, rec.traffic[i].calls});
  }
  rec.exposed_comm_s = stats[static_cast<int>(CommGroup::kDp)].wait_s;
  if (sizes[static_cast<int>(CommGroup::kTp)] > 1)
    rec.tp_comm_wait_s = stats[static_cast<int>(CommGroup::kTp)].wait_s;
  if (sizes[static_cast<int>(CommGroup::kCp)] > 1)
    rec.cp_comm_wait_s = stats[static_cast<int>(CommGroup::kCp)].wait_s;
  if (g.pp->size() > 1) {
    rec.traffic_by_stage.clear();
    for (const std::vector<int64_t>& s : GatherByStage(g, mine)) {
      StepTraffic t{};
      for (int i = 0; i < kNumCommGroups; ++i) t[i] = {s[2 * i], s[2 * i + 1]};
      rec.traffic_by_stage.push_back(t);
    }
  }
}

RankTelemetry::RankTelemetry(RankTelemetryContext ctx)
    : ctx_(std::move(ctx)),
      detector_({ctx_.config.straggler_threshold, ctx_.config.straggler_windows,
                 ctx_.config.straggler_min_ms * 1e-3}) {
  Communicator& world = *ctx_.world;
  memory_bytes_.assign(static_cast<size_t>(world.size()), 0);
  AbortIfFailed(world, world.Allgather(&ctx_.memory_bytes, memory_bytes_.data(), 1));
  last_step_s_.assign(static_cast<size_t>(world.size()), 0.0);
}

void RankTelemetry::AddStep(const StepRecord& rec, double checkpoint_s, double wait_s) {
  RankPhases p{};
  p[static_cast<int>(RankPhase::kData)] = rec.data_s;
  p[static_cast<int>(RankPhase::kForward)] = rec.forward_s;
  p[static_cast<int>(RankPhase::kBackward)] = rec.backward_s;
  // The context-parallel waits sit inside forward and backward as TP's do
  // (the report's "TP + CP comm").
  p[static_cast<int>(RankPhase::kTpComm)] = rec.tp_comm_wait_s.value_or(0) + rec.cp_comm_wait_s.value_or(0);
  p[static_cast<int>(RankPhase::kPpComm)] = rec.pipeline_wait_s.value_or(0);
  p[static_cast<int>(RankPhase::kDpComm)] = rec.grad_sync_wait_s;
  p[static_cast<int>(RankPhase::kOptimizer)] = rec.optimizer_s;
  p[static_cast<int>(RankPhase::kCheckpoint)] = checkpoint_s;
  p[static_cast<int>(RankPhase::kWait)] = wait_s;
  p[static_cast<int>(RankPhase::kStep)] = rec.step_time_s + checkpoint_s + wait_s;
  for (int i = 0; i < kNumRankPhases; ++i) {
    window_[i] += p[i];
    run_total_[i] += p[i];
  }
  // Kept only where windows end (telemetry.rank_interval > 0), so it never grows past one.
  if (ctx_.config.rank_interval > 0) window_step_compute_.push_back(StepCompute(p));
  ++run_steps_;
}

Result<std::vector<Straggler>> RankTelemetry::EndOfWindow(int64_t step) {
  const int64_t interval = ctx_.config.rank_interval;
  if (interval <= 0 || step % interval != 0 || window_step_compute_.empty())
    return std::vector<Straggler>();
  Communicator& world = *ctx_.world;
  // One record per rank: its window's sums, its step count, and the median
  // and lower quartile of its compute per step.
  constexpr int64_t kRecord = kNumRankPhases + 3;
  std::vector<double> mine(window_.begin(), window_.end()),
      all(static_cast<size_t>(kRecord * world.size()));
  mine.push_back(static_cast<double>(window_step_compute_.size()));
  mine.push_back(Median(window_step_compute_));
  mine.push_back(Quantile(window_step_compute_, 0.25));
  AbortIfFailed(world, world.Allgather(mine.data(), all.data(), kRecord));
  window_ = {};
  window_step_compute_.clear();
  std::vector<RankWindow> windows;
  for (int64_t r = 0; r < world.size(); ++r) {
    const double* rec = all.data() + r * kRecord;
    RankWindow w;
    w.rank = r;
    w.host = ctx_.hosts[static_cast<size_t>(r)];
    w.stage = ctx_.mesh->Coord(r).pp;
    w.step = step;
    w.steps = static_cast<int64_t>(rec[kNumRankPhases]);
    for (int i = 0; i < kNumRankPhases; ++i) w.mean[i] = rec[i] / static_cast<double>(w.steps);
    w.median_compute_s = rec[kNumRankPhases + 1];
    w.lower_quartile_compute_s = rec[kNumRankPhases + 2];
    windows.push_back(std::move(w));
  }
  window_compute_.clear();
  for (const RankWindow& w : windows) window_compute_.push_back(RankCompute(w));
  last_window_step_ = step;
  if (!lead()) return std::vector<Straggler>();
  if (ctx_.rank_log) ST_RETURN_IF_ERROR(ctx_.rank_log->Append(windows));
  for (const RankWindow& w : windows) {
    last_step_s_[static_cast<size_t>(w.rank)] = w.mean[static_cast<int>(RankPhase::kStep)];
  }
  std::vector<Straggler> flagged = detector_.Observe(windows);
  flagged_.clear();
  for (const Straggler& f : flagged) flagged_.push_back(f.rank);
  return flagged;
}

PrometheusSnapshot RankTelemetry::Snapshot(const StepRecord& rec) const {
  PrometheusSnapshot s;
  s.step = rec.step;
  s.step_seconds = rec.step_time_s;
  s.tokens_per_second = rec.tokens_per_s;
  s.loss = rec.loss;
  s.grad_norm = rec.grad_norm;
  s.dp_exposed_s = rec.exposed_comm_s;
  s.tp_exposed_s = rec.tp_comm_wait_s.value_or(0);
  s.pp_exposed_s = rec.pipeline_wait_s.value_or(0);
  const double peak = ctx_.config.peak_tflops;
  if (peak > 0) s.mfu = ModelTflopsPerRank(rec.tokens_per_s) / peak;
  for (size_t r = 0; r < ctx_.hosts.size(); ++r) {
    const bool slow = std::find(flagged_.begin(), flagged_.end(), static_cast<int64_t>(r)) != flagged_.end();
    s.ranks.push_back({static_cast<int64_t>(r), ctx_.hosts[r], last_step_s_[r], memory_bytes_[r], slow});
  }
  return s;
}

std::vector<std::pair<std::string, double>> RankTelemetry::ThroughputScalars(double tokens_per_s) const {
  const double tflops = ModelTflopsPerRank(tokens_per_s);
  std::vector<std::pair<std::string, double>> s = {{"perf/model_tflops_per_rank", tflops}};
  if (ctx_.config.peak_tflops > 0) s.emplace_back("perf/mfu", tflops / ctx_.config.peak_tflops);
  return s;
}

double RankTelemetry::ModelTflopsPerRank(double tokens_per_s) const {
  const double flops_per_token = ModelFlopsPerSequence(ctx_.spec) / static_cast<double>(ctx_.spec.block_size);
  return tokens_per_s * flops_per_token / static_cast<double>(ctx_.hosts.size()) / 1e12;
}

std::string RankTelemetry::Summary(double tokens_per_s) const {
  if (run_steps_ == 0) return "";
  const double n = static_cast<double>(run_steps_);
  const double step = run_total_[static_cast<int>(RankPhase::kStep)] / n;
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof buf, "summary (rank 0): %lld steps, %.1f ms per step: ",
                static_cast<long long>(run_steps_), step * 1e3);
  out += buf;
  const RankPhase shown[] = {RankPhase::kData,      RankPhase::kForward,    RankPhase::kBackward,
                             RankPhase::kTpComm,    RankPhase::kPpComm,     RankPhase::kDpComm,
                             RankPhase::kOptimizer, RankPhase::kCheckpoint, RankPhase::kWait};
  bool first = true;
  for (RankPhase p : shown) {
    const double share = run_total_[static_cast<int>(p)] / n / step;
    if (share < 0.0005 && p != RankPhase::kForward && p != RankPhase::kBackward) continue;
    std::string name = RankPhaseName(p);
    name.resize(name.size() - 2);
    std::snprintf(buf, sizeof buf, "%s%s %.1f%%", first ? "" : ", ", name.c_str(), 100.0 * share);
    out += buf;
    first = false;
  }
  std::snprintf(buf, sizeof buf, "\nsummary: %.0f tokens/s", tokens_per_s);
  out += buf;
  const double peak = ctx_.config.peak_tflops, tflops = ModelTflopsPerRank(tokens_per_s);
  std::snprintf(buf, sizeof buf, ", %.3f model TFLOP/s per rank", tflops);
  out += buf;
  if (peak > 0) {
    std::snprintf(buf, sizeof buf, ", MFU %.1f%% (of telemetry.peak_tflops = %g)", 100.0 * tflops / peak, peak);
    out += buf;
  }
  out += "\nsummary: stragglers: ";
  if (detector_.history().empty()) {
    out += ctx_.config.rank_interval > 0 ? "none"
                                                 : "not watched (telemetry.rank_interval = 0)";
  } else {
    first = true;
    for (const auto& [rank, windows] : detector_.history()) {
      std::snprintf(buf, sizeof buf, "%srank %lld on %s (flagged in %lld window%s)",
                    first ? "" : ", ", static_cast<long long>(rank),
                    ctx_.hosts[static_cast<size_t>(rank)].c_str(), static_cast<long long>(windows),
                    windows == 1 ? "" : "s");
      out += buf;
      first = false;
    }
  }
  return out;
}

}  // namespace scaletrain
