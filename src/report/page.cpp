#include "report/page.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "core/jsonl.h"
#include "core/stats.h"
#include "core/strings.h"
#include "core/svg.h"
#include "report/charts.h"
#include "report/flight.h"

namespace scaletrain::report {

namespace {

// The parts' colours, kBreakdownNames order: the planner's sweep plot uses
// the same for the same parts (core/svg.h's palette).
const char* const kPartColors[kBreakdownParts] = {
    palette::kCompute, palette::kTpComm,    palette::kPpComm, palette::kDpComm,
    palette::kWaiting, palette::kOptimizer, palette::kOther};

// A step of rank 0 split into kBreakdownNames: compute is forward + backward
// less the TP waits inside them; the pipeline's waits and the DP gradient
// wait are their own, less up to `wait_budget_s` of the DP wait that was
// waiting for a slower rank (report/attribution.h); what the parts leave of
// the step is data + other.
std::array<double, kBreakdownParts> Split(const StepPoint& p, double wait_budget_s) {
  const double compute = std::max(0.0, p.forward_s + p.backward_s - p.tp_wait_s);
  const double waiting = std::min(wait_budget_s, p.grad_sync_wait_s);
  std::array<double, kBreakdownParts> a = {
      compute, p.tp_wait_s, p.pp_wait_s, p.grad_sync_wait_s - waiting, waiting, p.optimizer_s, 0};
  double sum = 0;
  for (int i = 0; i < kPartOther; ++i) sum += a[static_cast<size_t>(i)];
  a[kPartOther] = std::max(0.0, p.step_time_s - sum);
  return a;
}

std::string Esc(const std::string& s) { return XmlEscape(s); }

std::string Row(const std::string& k, const std::string& v) {
  return "<tr><th>" + Esc(k) + "</th><td>" + Esc(v) + "</td></tr>\n";
}

std::string Ms(double s) { return s < 0.01 ? Fmt("%.3g ms", s * 1e3) : Fmt("%.1f ms", s * 1e3); }

std::vector<Stack> PartStacks() {
  std::vector<Stack> stacks;
  for (int k = 0; k < kBreakdownParts; ++k)
    stacks.push_back({kBreakdownNames[k], kPartColors[k], {}});
  return stacks;
}

// Rank 0's steps grouped into at most 60 consecutive runs, each drawn as
// one bar of its mean split.
std::string BreakdownChart(const RunData& run, const Attribution& attribution) {
  const size_t n = run.steps.size(), bins = std::min<size_t>(n, 60);
  std::vector<std::string> labels;
  std::vector<Stack> stacks = PartStacks();
  for (size_t b = 0; b < bins; ++b) {
    const size_t lo = b * n / bins, hi = (b + 1) * n / bins;
    std::array<double, kBreakdownParts> mean{};
    for (size_t i = lo; i < hi; ++i) {
      const auto a = Split(run.steps[i], attribution.WaitBudget(0, run.steps[i].step));
      for (int k = 0; k < kBreakdownParts; ++k)
        mean[k] += a[k] * 1e3 / static_cast<double>(hi - lo);
    }
    for (int k = 0; k < kBreakdownParts; ++k) stacks[k].values.push_back(mean[k]);
    labels.push_back(std::to_string(run.steps[hi - 1].step));
  }
  return StackedBars("Where each step's time went: rank 0, step by step", "step", "ms per step",
                     labels, stacks);
}

// Every rank's mean step (or the fastest, median and slowest), by cause.
std::string RankSplitChart(const Attribution& attribution) {
  std::vector<std::string> labels;
  std::vector<Stack> stacks = PartStacks();
  for (const auto& [label, split] : RanksToShow(attribution)) {
    labels.push_back(label);
    for (int k = 0; k < kBreakdownParts; ++k)
      stacks[k].values.push_back(split->parts[k].second * 1e3);
  }
  return StackedBars("Where each rank's step went (ranks.jsonl, windows after the first)", "rank",
                     "ms per step", labels, stacks);
}

// Compute (data + forward + backward + optimizer) per rank and window,
// each against its pipeline stage's healthy pace: the lower quartile of the
// stage's windows (a rank slow on half the windows, or half the ranks slow,
// leaves it at a healthy one; the median would sit between them with two).
std::string RankHeatmap(const RunData& run) {
  std::map<int64_t, std::map<int64_t, double>> by_rank;  // rank -> step -> ms
  std::map<int64_t, int64_t> stage_of;
  std::map<int64_t, std::vector<double>> by_stage;  // stage -> ms of every window
  std::set<int64_t> steps;
  for (const RankWindowPoint& w : run.windows) {
    by_rank[w.rank][w.step] = w.Compute() * 1e3;
    stage_of[w.rank] = w.stage;
    by_stage[w.stage].push_back(w.Compute() * 1e3);
    steps.insert(w.step);
  }
  std::vector<std::string> rows, cols;
  std::vector<std::vector<double>> values;
  std::vector<double> reference;
  for (int64_t s : steps) cols.push_back(std::to_string(s));
  for (const auto& [rank, series] : by_rank) {
    rows.push_back("rank " + std::to_string(rank));
    reference.push_back(Quantile(by_stage[stage_of[rank]], 0.25));
    std::vector<double> row;
    for (int64_t s : steps) {
      auto it = series.find(s);
      row.push_back(it == series.end() ? 0.0 : it->second);
    }
    values.push_back(std::move(row));
  }
  return Heatmap("Compute per step, each rank and window (ranks.jsonl)", "step (end of window)",
                 "rank", rows, cols, values, "ms", reference,
                 "a healthy window of the rank's stage (the lower quartile of its windows)");
}

// The per-rank plots, or why there are none.
std::string PerRankCharts(const RunData& run, const Attribution& a) {
  if (run.windows.empty()) {
    return "<p class=note>No per-rank records (ranks.jsonl): the run has telemetry.rank_interval = "
           "0, or has "
           "not finished its first window of " +
           std::to_string(run.config.telemetry.rank_interval) + " steps.</p>\n";
  }
  return RankSplitChart(a) + RankHeatmap(run);
}

std::string MemoryChart(const RunData& run) {
  std::vector<std::string> labels;
  std::vector<Stack> stacks = {{"parameters", palette::kParams, {}},
                               {"gradients", palette::kGrads, {}},
                               {"optimizer state", palette::kOptimizerState, {}},
                               {"activations", palette::kActivations, {}}};
  for (size_t s = 0; s < run.memory_by_stage.size(); ++s) {
    const MemoryPoint& m = run.memory_by_stage[s];
    labels.push_back("stage " + std::to_string(s));
    const double mib = 1.0 / (1024.0 * 1024.0);
    stacks[0].values.push_back(m.params * mib), stacks[1].values.push_back(m.grads * mib);
    stacks[2].values.push_back(m.optimizer * mib), stacks[3].values.push_back(m.activations * mib);
  }
  return StackedBars("Memory per rank, by pipeline stage (memory.json)", "pipeline stage", "MiB",
                     labels, stacks);
}

// Model FLOPs utilisation at `tokens_per_s` (a fraction); none without the
// model's FLOPs or telemetry.peak_tflops.
std::optional<double> Mfu(const RunData& run, const PageOptions& o, double tokens_per_s) {
  const double peak = run.config.telemetry.peak_tflops;
  if (!o.flops_per_token || !(peak > 0)) return std::nullopt;
  return tokens_per_s * *o.flops_per_token / static_cast<double>(run.world_size()) / (peak * 1e12);
}

std::string ThroughputCharts(const RunData& run, const PageOptions& o) {
  Series tps{"tokens/s", palette::kThroughput, {}};
  for (const StepPoint& p : run.steps) tps.points.emplace_back(p.step, p.tokens_per_s);
  std::string out = LineChart("Throughput", "step", "tokens per second", {tps});
  if (o.flops_per_token && run.config.telemetry.peak_tflops > 0) {
    Series mfu{"MFU", palette::kMfu, {}};
    for (const StepPoint& p : run.steps) mfu.points.emplace_back(p.step, 100 * *Mfu(run, o, p.tokens_per_s));
    out += LineChart(Fmt("Model FLOPs utilisation (peak %g TFLOP/s per rank)", run.config.telemetry.peak_tflops),
                     "step", "MFU %", {mfu});
  }
  return out;
}

std::string LossChart(const RunData& run) {
  Series train{"train loss", palette::kLoss, {}}, val{"validation loss", palette::kValLoss, {}};
  val.markers = true;
  for (const StepPoint& p : run.steps) {
    train.points.emplace_back(p.step, p.loss);
    if (p.val_loss) val.points.emplace_back(p.step, *p.val_loss);
  }
  return LineChart("Loss", "step", "cross-entropy", {train, val});
}

// Why measured and predicted differ, before the table: a slow rank first.
std::string PredictionLead(const MeasuredStep& m, const Prediction& p) {
  if (!m.slow) return "";
  const std::string verdict = m.step_time_s > p.step_time_s
                                  ? "The step is slower than predicted because "
                                  : "Measured against a rank of equal speed: ";
  return "<p class=alert>" + Esc(verdict + SlowRankWords(*m.slow)) +
         ".</p>\n<p>The planner predicts ranks of equal speed, so the measured column is rank " +
         std::to_string(m.slow->rank) +
         "'s step, and the other ranks' time spent waiting for it is charged to 'waiting for a "
         "slower rank', not "
         "to communication (see where each rank's step went, above). Remedies: the machine (a "
         "throttled or shared "
         "host), or parallel.rebalance = true (docs/training.md).</p>\n";
}

std::string PredictionSection(const MeasuredStep& m, const PageOptions& o) {
  std::string h = "<h2>Measured against the planner</h2>\n";
  if (!o.prediction) {
    return h + "<p class=note>" + Esc(o.prediction_note) + "</p>\n";
  }
  const Prediction& p = *o.prediction;
  if (!o.prediction_warning.empty()) h += "<p class=alert>" + Esc(o.prediction_warning) + "</p>\n";
  h += PredictionLead(m, p);
  h += "<p>Planner: " + Esc(p.source) + ". Measured: " + Esc(m.whose) +
       ".</p>\n<table><tr><th>part</th><th>measured</th><th>predicted</th><th>error</th></tr>\n";
  auto line = [&](const std::string& name, double meas, double pred) {
    const std::string err = meas > 0 ? Fmt("%+.1f%%", (pred - meas) / meas * 100) : "";
    return "<tr><td>" + Esc(name) + "</td><td>" + Ms(meas) + "</td><td>" + Ms(pred) + "</td><td>" + err +
           "</td></tr>\n";
  };
  for (int k = 0; k < kBreakdownParts; ++k)
    h += line(kBreakdownNames[k], m.parts[k].second, p.parts[k].second);
  h += line("step", m.step_time_s, p.step_time_s) + "</table>\n";
  std::vector<Stack> stacks;
  for (int k = 0; k < kBreakdownParts; ++k) {
    stacks.push_back(
        {kBreakdownNames[k], kPartColors[k], {m.parts[k].second * 1e3, p.parts[k].second * 1e3}});
  }
  return h + StackedBars("Step time: measured and predicted",
                         "measured (left) and the planner's prediction", "ms per step",
                         {"measured", "predicted"}, stacks);
}

std::string FlightSection(const RunData& run) {
  if (run.flight.empty()) return "";
  const HangDiagnosis d = DiagnoseHang(run.flight);
  std::string h = "<h2>Flight records</h2>\n<p" + std::string(d.hang ? " class=alert" : "") + ">" +
                  Esc(d.summary) + "</p>\n<ul>\n";
  for (const std::string& l : d.details) h += "<li>" + Esc(l) + "</li>\n";
  h += "</ul>\n<p class=note>From " + std::to_string(run.flight.size()) + " file(s) in " + Esc(run.dir) +
       "/flight: each rank's last collectives when its watchdog fired, it died of a fatal signal, or it was "
       "sent SIGTERM.</p>\n";
  return h;
}

std::string JoinedNames(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

// The launcher's record (events.jsonl): each start's layout, each failure's
// lost hosts and redone steps.
std::string RestartsSection(const RunData& run) {
  int failures = 0;
  int64_t redone = 0;
  std::string rows;
  for (const LaunchEvent& e : run.events) {
    std::string what;
    if (e.event == "start") {
      what = Fmt("%zu host(s): %s; dp %lld; ", e.hosts.size(), JoinedNames(e.hosts).c_str(),
                 static_cast<long long>(e.dp)) +
             (e.resume_step >= 0 ? Fmt("from the checkpoint of step %lld", static_cast<long long>(e.resume_step))
                                 : std::string("from scratch"));
    } else if (e.event == "failure") {
      ++failures;
      redone += e.steps_lost;
      what = Fmt("exit %lld after step %lld; lost: %s; %lld step(s) redone from step %lld",
                 static_cast<long long>(e.exit_code), static_cast<long long>(e.last_step),
                 e.failed_hosts.empty() ? "no host (a rank failed)" : JoinedNames(e.failed_hosts).c_str(),
                 static_cast<long long>(e.steps_lost), static_cast<long long>(e.checkpoint_step));
    } else if (e.event == "done" || e.event == "stopped") {
      what = Fmt("exit %lld", static_cast<long long>(e.exit_code));
    }
    rows += "<tr><td>" + Esc(e.time) + "</td><td>" + Esc(e.event) + "</td><td>" + Esc(what) + "</td></tr>\n";
  }
  if (run.events.empty()) return "";
  return "<h2>Restarts</h2>\n<p" + std::string(failures > 0 ? " class=alert" : "") + ">" +
         Fmt("%d failure(s), %lld step(s) redone (scaletrain launch)", failures, static_cast<long long>(redone)) +
         "</p>\n<table><tr><th>time (UTC)</th><th>event</th><th></th></tr>\n" + rows + "</table>\n";
}

// "rank 1 (vm), flagged last in the window to step 30: slow in the forward
// pass, computes 1.85x the fastest rank (18.1 ms against 9.8 ms a step)": a
// window's figures (the time split below is the run's); a run written before
// those figures were recorded gives the detector's ratio to its stage's median.
std::string StragglerWords(const StragglerNote& n, int64_t step) {
  std::string s = Fmt("rank %lld (%s), flagged last in the window to step %lld: slow in %s",
                      static_cast<long long>(n.rank), n.host.c_str(), static_cast<long long>(step),
                      PhaseInWords(n.phase).c_str());
  if (!(n.fastest_compute_s > 0))
    return s + Fmt(", compute %.2fx its stage's median", n.compute_ratio);
  s += Fmt(", computes %.2fx the fastest rank", n.compute_s / n.fastest_compute_s);
  if (n.ranks_compared >= 3 && n.median_compute_s > 0)
    s += Fmt(" and %.2fx the median", n.compute_s / n.median_compute_s);
  return s + " (" + Ms(n.compute_s) + " against " + Ms(n.fastest_compute_s) + " a step)";
}

// The latest note of each rank the detector flagged, "none flagged" without.
std::string StragglersRow(const RunData& run) {
  std::map<int64_t, std::string> latest;
  for (const StepPoint& p : run.steps) {
    for (const StragglerNote& n : p.stragglers) latest[n.rank] = StragglerWords(n, p.step);
  }
  std::string s;
  for (const auto& [rank, words] : latest) s += (s.empty() ? "" : "; ") + words;
  return Row("stragglers", s.empty() ? "none flagged" : s);
}

// Who waited for whom, and how long a step.
std::string WaitingRow(const Attribution& a) {
  if (!a.slow) return "";
  std::string s;
  for (const RankSplit& r : a.ranks) {
    const double w = r.parts[kPartWaiting].second;
    if (w > 0)
      s += (s.empty() ? "" : ", ") +
           Fmt("rank %lld %s", static_cast<long long>(r.rank), Ms(w).c_str());
  }
  return Row("waiting for a slower rank", SlowRankWords(*a.slow) + "; per step, waiting for it: " +
                                              (s.empty() ? "none measured" : s));
}

std::string RunRows(const RunData& run) {
  const RunConfig& c = run.config;
  const int64_t last = run.steps.empty() ? 0 : run.steps.back().step;
  std::string h = Row("status", run.finished() ? "finished: " + std::to_string(last) + " steps"
                                               : Fmt("in progress (or stopped): step %lld of %lld",
                                                     static_cast<long long>(last),
                                                     static_cast<long long>(c.training.steps)));
  h += Row("model", Fmt("%lld layers, %lld heads, %lld wide, context %lld", static_cast<long long>(c.model.n_layer),
                        static_cast<long long>(c.model.n_head), static_cast<long long>(c.model.n_embd),
                        static_cast<long long>(c.model.block_size)));
  h += Row("layout",
           Fmt("dp %lld x tp %lld x pp %lld, ZeRO-%lld, %lld sequences per step, on %s",
               static_cast<long long>(c.parallel.dp), static_cast<long long>(c.parallel.tp),
               static_cast<long long>(c.parallel.pp), static_cast<long long>(c.parallel.zero),
               static_cast<long long>(c.training.global_batch_size), c.training.device.c_str()));
  return h;
}

std::string SummaryTable(const RunData& run, const MeasuredStep& m, const Attribution& a,
                         const PageOptions& o) {
  std::string h = "<table>\n" + RunRows(run);
  if (!run.steps.empty()) {
    h += Row("last loss", Fmt("%.4f", run.steps.back().loss));
    for (auto it = run.steps.rbegin(); it != run.steps.rend(); ++it) {
      if (it->val_loss) {
        h += Row("last validation loss", Fmt("%.4f (step %lld)", *it->val_loss, static_cast<long long>(it->step)));
        break;
      }
    }
    h += Row("step time (median)", Ms(m.step_time_s));
    std::vector<double> tps;
    for (const StepPoint& p : run.steps) tps.push_back(p.tokens_per_s);
    h += Row("tokens/s (median)", Fmt("%.0f", Median(tps)));
    if (const std::optional<double> mfu = Mfu(run, o, Median(tps))) h += Row("MFU (median)", Fmt("%.1f%%", *mfu * 100));
  }
  return h + StragglersRow(run) + WaitingRow(a) + "</table>\n";
}

// Rank 0's medians over the steps after the first few.
MeasuredStep RankZeroStep(const RunData& run) {
  MeasuredStep m;
  const size_t n = run.steps.size(), skip = n > 4 ? std::min<size_t>(3, n / 4) : 0;
  std::array<std::vector<double>, kBreakdownParts> parts;
  std::vector<double> total;
  for (size_t i = skip; i < n; ++i) {
    const auto a = Split(run.steps[i], 0);
    for (int k = 0; k < kBreakdownParts; ++k) parts[k].push_back(a[k]);
    total.push_back(run.steps[i].step_time_s);
  }
  m.steps_used = static_cast<int64_t>(total.size());
  m.step_time_s = Median(total);
  for (int k = 0; k < kBreakdownParts; ++k)
    m.parts.emplace_back(kBreakdownNames[k], Median(parts[k]));
  m.whose =
      Fmt("rank 0, medians over %lld steps after warm-up", static_cast<long long>(m.steps_used));
  return m;
}

MeasuredStep MeasureStep(const RunData& run, const Attribution& a) {
  if (!a.slow) return RankZeroStep(run);
  const RankSplit& r = *std::find_if(a.ranks.begin(), a.ranks.end(),
                                     [&](const RankSplit& x) { return x.rank == a.slow->rank; });
  MeasuredStep m;
  m.step_time_s = r.step_s;
  m.parts = r.parts;
  m.steps_used = a.windows_used * run.config.telemetry.rank_interval;
  m.whose =
      Fmt("rank %lld, the slowest, which the others wait for: its mean over %lld windows of "
          "ranks.jsonl "
          "after the first",
          static_cast<long long>(r.rank), static_cast<long long>(a.windows_used));
  m.slow = a.slow;
  return m;
}

const char* const kStyle =
    "<style>body{font-family:sans-serif;max-width:760px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}th,td{text-align:left;padding:3px "
    "10px;border-bottom:1px solid "
    "#ddd}th{font-weight:600}svg{display:block;margin:1.5em 0}.note{color:#666;font-size:90%}"
    ".alert{color:#b00;font-weight:600}</style>";

}  // namespace

MeasuredStep MeasureStep(const RunData& run) { return MeasureStep(run, AttributeWaits(run)); }

std::string ReportHtml(const RunData& run, const PageOptions& o) {
  const Attribution a = AttributeWaits(run);
  const MeasuredStep m = MeasureStep(run, a);
  std::string h =
      "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>\n<title>scaletrain report: " +
      Esc(run.dir) + "</title>\n" + kStyle +
      "</head><body>\n<h1>scaletrain report</h1>\n<p class=note>" + Esc(run.dir) + "</p>\n";
  h += SummaryTable(run, m, a, o);
  h += FlightSection(run);
  h += RestartsSection(run);
  h += "<h2>Training</h2>\n" + LossChart(run) + ThroughputCharts(run, o);
  h += "<h2>Time</h2>\n" + BreakdownChart(run, a) + PerRankCharts(run, a);
  h += PredictionSection(m, o);
  h += "<h2>Memory</h2>\n" + MemoryChart(run);
  return h + "</body></html>\n";
}

int CountSvgs(const std::string& html) {
  int n = 0;
  for (size_t at = html.find("<svg "); at != std::string::npos; at = html.find("<svg ", at + 1)) ++n;
  return n;
}

}  // namespace scaletrain::report
