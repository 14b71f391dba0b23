#include "report/page.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "core/stats.h"
#include "core/strings.h"
#include "core/svg.h"
#include "report/charts.h"
#include "report/flight.h"

namespace scaletrain::report {

namespace {

const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#9467bd", "#d62728", "#2ca02c", "#8c8c8c"};
constexpr int kParts = 6;

// A step split into kBreakdownNames: compute is forward + backward less the
// TP waits inside them; the pipeline's waits and the DP gradient wait are
// their own; what the parts leave of the step is data + other.
std::array<double, kParts> Split(const StepPoint& p) {
  const double compute = std::max(0.0, p.forward_s + p.backward_s - p.tp_wait_s);
  std::array<double, kParts> a = {compute, p.tp_wait_s, p.pp_wait_s, p.grad_sync_wait_s, p.optimizer_s, 0};
  double sum = 0;
  for (int i = 0; i < kParts - 1; ++i) sum += a[static_cast<size_t>(i)];
  a[kParts - 1] = std::max(0.0, p.step_time_s - sum);
  return a;
}

std::string Esc(const std::string& s) { return XmlEscape(s); }

std::string Row(const std::string& k, const std::string& v) {
  return "<tr><th>" + Esc(k) + "</th><td>" + Esc(v) + "</td></tr>\n";
}

std::string Ms(double s) { return s < 0.01 ? Fmt("%.3g ms", s * 1e3) : Fmt("%.1f ms", s * 1e3); }

// The steps grouped into at most `bins` consecutive runs, each drawn as one
// bar of its mean split.
std::string BreakdownChart(const RunData& run) {
  const size_t n = run.steps.size(), bins = std::min<size_t>(n, 60);
  std::vector<std::string> labels;
  std::vector<Stack> stacks;
  for (int k = 0; k < kParts; ++k) stacks.push_back({kBreakdownNames[k], kColors[k], {}});
  for (size_t b = 0; b < bins; ++b) {
    const size_t lo = b * n / bins, hi = (b + 1) * n / bins;
    std::array<double, kParts> mean{};
    for (size_t i = lo; i < hi; ++i) {
      const auto a = Split(run.steps[i]);
      for (int k = 0; k < kParts; ++k) mean[k] += a[k] * 1e3 / static_cast<double>(hi - lo);
    }
    for (int k = 0; k < kParts; ++k) stacks[k].values.push_back(mean[k]);
    labels.push_back(std::to_string(run.steps[hi - 1].step));
  }
  return StackedBars("Where each step's time went (rank 0)", "step", "ms per step", labels, stacks);
}

// Compute (data + forward + backward + optimizer) per rank and window.
std::string RankHeatmap(const RunData& run) {
  std::map<int64_t, std::map<int64_t, double>> by_rank;  // rank -> step -> seconds
  std::map<int64_t, std::string> hosts;
  std::set<int64_t> steps;
  for (const RankWindowPoint& w : run.windows) {
    by_rank[w.rank][w.step] = w.Compute() * 1e3;
    hosts[w.rank] = w.host;
    steps.insert(w.step);
  }
  std::vector<std::string> rows, cols;
  std::vector<std::vector<double>> values;
  for (int64_t s : steps) cols.push_back(std::to_string(s));
  for (const auto& [rank, series] : by_rank) {
    rows.push_back("rank " + std::to_string(rank));
    std::vector<double> row;
    for (int64_t s : steps) {
      auto it = series.find(s);
      row.push_back(it == series.end() ? 0.0 : it->second);
    }
    values.push_back(std::move(row));
  }
  return Heatmap("Compute time per rank and window (ranks.jsonl; darker is slower)", "step (end of window)", "",
                 rows, cols, values, "ms/step");
}

std::string MemoryChart(const RunData& run) {
  std::vector<std::string> labels;
  std::vector<Stack> stacks = {{"parameters", kColors[0], {}},
                               {"gradients", kColors[1], {}},
                               {"optimizer state", kColors[2], {}},
                               {"activations", kColors[4], {}}};
  for (size_t s = 0; s < run.memory_by_stage.size(); ++s) {
    const MemoryPoint& m = run.memory_by_stage[s];
    labels.push_back("stage " + std::to_string(s));
    const double mib = 1.0 / (1024.0 * 1024.0);
    stacks[0].values.push_back(m.params * mib), stacks[1].values.push_back(m.grads * mib);
    stacks[2].values.push_back(m.optimizer * mib), stacks[3].values.push_back(m.activations * mib);
  }
  return StackedBars("Memory per rank, by pipeline stage (memory.json)", "", "MiB", labels, stacks);
}

// Model FLOPs utilisation at `tokens_per_s` (a fraction); none without the
// model's FLOPs or telemetry.peak_tflops.
std::optional<double> Mfu(const RunData& run, const PageOptions& o, double tokens_per_s) {
  const double peak = run.config.telemetry.peak_tflops;
  if (!o.flops_per_token || !(peak > 0)) return std::nullopt;
  return tokens_per_s * *o.flops_per_token / static_cast<double>(run.world_size()) / (peak * 1e12);
}

std::string ThroughputCharts(const RunData& run, const PageOptions& o) {
  Series tps{"tokens/s", kColors[0], {}};
  for (const StepPoint& p : run.steps) tps.points.emplace_back(p.step, p.tokens_per_s);
  std::string out = LineChart("Throughput", "step", "tokens per second", {tps});
  if (o.flops_per_token && run.config.telemetry.peak_tflops > 0) {
    Series mfu{"MFU", kColors[3], {}};
    for (const StepPoint& p : run.steps) mfu.points.emplace_back(p.step, 100 * *Mfu(run, o, p.tokens_per_s));
    out += LineChart(Fmt("Model FLOPs utilisation (peak %g TFLOP/s per rank)", run.config.telemetry.peak_tflops),
                     "step", "MFU %", {mfu});
  }
  return out;
}

std::string LossChart(const RunData& run) {
  Series train{"train loss", kColors[0], {}}, val{"validation loss", kColors[1], {}};
  val.markers = true;
  for (const StepPoint& p : run.steps) {
    train.points.emplace_back(p.step, p.loss);
    if (p.val_loss) val.points.emplace_back(p.step, *p.val_loss);
  }
  return LineChart("Loss", "step", "cross-entropy", {train, val});
}

std::string PredictionSection(const MeasuredStep& m, const PageOptions& o) {
  std::string h = "<h2>Measured against the planner</h2>\n";
  if (!o.prediction) {
    return h + "<p class=note>" + Esc(o.prediction_note) + "</p>\n";
  }
  const Prediction& p = *o.prediction;
  h += "<p>Planner: " + Esc(p.source) + ". Measured: medians over " + std::to_string(m.steps_used) +
       " steps after warm-up.</p>\n<table><tr><th>part</th><th>measured</th><th>predicted</th><th>error</th></tr>\n";
  auto line = [&](const std::string& name, double meas, double pred) {
    const std::string err = meas > 0 ? Fmt("%+.1f%%", (pred - meas) / meas * 100) : "";
    return "<tr><td>" + Esc(name) + "</td><td>" + Ms(meas) + "</td><td>" + Ms(pred) + "</td><td>" + err +
           "</td></tr>\n";
  };
  for (int k = 0; k < kParts; ++k) h += line(kBreakdownNames[k], m.parts[k].second, p.parts[k].second);
  h += line("step", m.step_time_s, p.step_time_s) + "</table>\n";
  std::vector<Stack> stacks;
  for (int k = 0; k < kParts; ++k) {
    stacks.push_back({kBreakdownNames[k], kColors[k], {m.parts[k].second * 1e3, p.parts[k].second * 1e3}});
  }
  return h + StackedBars("Step time: measured and predicted", "", "ms per step", {"measured", "predicted"}, stacks);
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

std::string SummaryTable(const RunData& run, const MeasuredStep& m, const PageOptions& o) {
  const RunConfig& c = run.config;
  std::string h = "<table>\n";
  const int64_t last = run.steps.empty() ? 0 : run.steps.back().step;
  h += Row("status", run.finished() ? "finished: " + std::to_string(last) + " steps"
                                    : Fmt("in progress (or stopped): step %lld of %lld", static_cast<long long>(last),
                                          static_cast<long long>(c.training.steps)));
  h += Row("model", Fmt("%lld layers, %lld heads, %lld wide, context %lld", static_cast<long long>(c.model.n_layer),
                        static_cast<long long>(c.model.n_head), static_cast<long long>(c.model.n_embd),
                        static_cast<long long>(c.model.block_size)));
  h += Row("layout", Fmt("dp %lld x tp %lld x pp %lld, ZeRO-%lld, %lld sequences per step",
                         static_cast<long long>(c.parallel.dp), static_cast<long long>(c.parallel.tp),
                         static_cast<long long>(c.parallel.pp), static_cast<long long>(c.parallel.zero),
                         static_cast<long long>(c.training.global_batch_size)));
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
  std::set<std::string> flagged;
  for (const StepPoint& p : run.steps) flagged.insert(p.stragglers.begin(), p.stragglers.end());
  std::string s;
  std::set<std::string> ranks_seen;
  for (const std::string& f : flagged) {
    const std::string who = f.substr(0, f.find(' ', 5));  // "rank N"
    if (ranks_seen.insert(who).second) s += (s.empty() ? "" : "; ") + f;
  }
  h += Row("stragglers", s.empty() ? "none flagged" : s);
  return h + "</table>\n";
}

}  // namespace

MeasuredStep MeasureStep(const RunData& run) {
  MeasuredStep m;
  const size_t n = run.steps.size(), skip = n > 4 ? std::min<size_t>(3, n / 4) : 0;
  std::array<std::vector<double>, kParts> parts;
  std::vector<double> total;
  for (size_t i = skip; i < n; ++i) {
    const auto a = Split(run.steps[i]);
    for (int k = 0; k < kParts; ++k) parts[k].push_back(a[k]);
    total.push_back(run.steps[i].step_time_s);
  }
  m.steps_used = static_cast<int64_t>(total.size());
  m.step_time_s = Median(total);
  for (int k = 0; k < kParts; ++k) m.parts.emplace_back(kBreakdownNames[k], Median(parts[k]));
  return m;
}

std::string ReportHtml(const RunData& run, const PageOptions& o) {
  const MeasuredStep m = MeasureStep(run);
  std::string h =
      "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>\n<title>scaletrain report: " + Esc(run.dir) +
      "</title>\n<style>body{font-family:sans-serif;max-width:760px;margin:2em auto;color:#222}"
      "table{border-collapse:collapse;margin:1em 0}th,td{text-align:left;padding:3px 10px;border-bottom:1px solid "
      "#ddd}th{font-weight:600}svg{display:block;margin:1.5em 0}.note{color:#666;font-size:90%}"
      ".alert{color:#b00;font-weight:600}</style></head><body>\n<h1>scaletrain report</h1>\n<p class=note>" +
      Esc(run.dir) + "</p>\n";
  h += SummaryTable(run, m, o);
  h += FlightSection(run);
  h += "<h2>Training</h2>\n" + LossChart(run) + ThroughputCharts(run, o);
  h += "<h2>Time</h2>\n" + BreakdownChart(run) + RankHeatmap(run);
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
