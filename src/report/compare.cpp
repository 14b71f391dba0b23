#include "report/compare.h"

#include <algorithm>
#include <cstdio>

#include "core/svg.h"
#include "report/charts.h"
#include "report/page.h"

namespace scaletrain::report {

namespace {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The run with the fewest ranks (the first of them).
size_t BaseRun(const std::vector<ScalingRun>& runs) {
  size_t base = 0;
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i].ranks < runs[base].ranks) base = i;
  return base;
}

std::string RunTable(const std::vector<ScalingRun>& runs) {
  const std::vector<double> measured = ScalingEfficiency(runs, false), predicted = ScalingEfficiency(runs, true);
  std::string h =
      "<table><tr><th>run</th><th>layout</th><th>ranks</th><th>tokens/s</th><th>predicted</th><th>error</th>"
      "<th>efficiency</th><th>predicted</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const ScalingRun& r = runs[i];
    const bool has_pred = r.predicted_tokens_per_s.has_value();
    const double err = has_pred ? (*r.predicted_tokens_per_s / r.tokens_per_s - 1.0) * 100.0 : 0.0;
    h += "<tr><td>" + XmlEscape(r.dir) + "</td><td>" + XmlEscape(r.layout) + "</td><td>" +
         std::to_string(r.ranks) + "</td><td>" + Fmt("%.0f", r.tokens_per_s) + "</td><td>" +
         (has_pred ? Fmt("%.0f", *r.predicted_tokens_per_s) : "-") + "</td><td>" +
         (has_pred ? Fmt("%+.1f%%", err) : "-") + "</td><td>" + Fmt("%.2f", measured[i]) + "</td><td>" +
         (has_pred ? Fmt("%.2f", predicted[i]) : "-") + "</td></tr>\n";
  }
  return h + "</table>\n";
}

// (ranks, value) points in rank order.
std::vector<std::pair<double, double>> ByRanks(const std::vector<ScalingRun>& runs,
                                                const std::vector<double>& values) {
  std::vector<std::pair<double, double>> points;
  for (size_t i = 0; i < runs.size(); ++i)
    if (values[i] > 0) points.emplace_back(static_cast<double>(runs[i].ranks), values[i]);
  std::sort(points.begin(), points.end());
  return points;
}

}  // namespace

ScalingRun ScalingRunOf(const RunData& run) {
  const ParallelConfig& p = run.config.parallel;
  ScalingRun r;
  r.dir = run.dir;
  r.ranks = p.dp * p.tp * p.pp * p.cp;
  r.layout = "dp " + std::to_string(p.dp) + " x tp " + std::to_string(p.tp) + " x pp " + std::to_string(p.pp) +
             (p.cp > 1 ? " x cp " + std::to_string(p.cp) : "");
  const MeasuredStep m = MeasureStep(run);
  const double tokens = static_cast<double>(run.config.training.global_batch_size * run.config.model.block_size);
  if (m.step_time_s > 0) r.tokens_per_s = tokens / m.step_time_s;
  return r;
}

std::vector<double> ScalingEfficiency(const std::vector<ScalingRun>& runs, bool predicted) {
  std::vector<double> out(runs.size(), 0.0);
  if (runs.empty()) return out;
  auto rate = [predicted](const ScalingRun& r) {
    return predicted ? r.predicted_tokens_per_s.value_or(0.0) : r.tokens_per_s;
  };
  const ScalingRun& base = runs[BaseRun(runs)];
  const double base_per_rank = rate(base) / static_cast<double>(base.ranks);
  if (base_per_rank <= 0) return out;
  for (size_t i = 0; i < runs.size(); ++i)
    out[i] = rate(runs[i]) / static_cast<double>(runs[i].ranks) / base_per_rank;
  return out;
}

std::string CompareHtml(const std::vector<ScalingRun>& runs, const std::string& prediction_note) {
  const std::vector<double> measured = ScalingEfficiency(runs, false), predicted = ScalingEfficiency(runs, true);
  std::vector<double> tps, ptps;
  for (const ScalingRun& r : runs) {
    tps.push_back(r.tokens_per_s);
    ptps.push_back(r.predicted_tokens_per_s.value_or(0.0));
  }
  const ScalingRun& base = runs[BaseRun(runs)];
  std::string h =
      "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>\n<title>scaletrain: scaling over " +
      std::to_string(runs.size()) +
      " runs</title>\n<style>body{font-family:sans-serif;max-width:760px;margin:2em auto;color:#222}"
      "table{border-collapse:collapse;margin:1em 0}th,td{text-align:left;padding:3px 10px;border-bottom:1px solid "
      "#ddd}svg{display:block;margin:1.5em 0}.note{color:#666;font-size:90%}</style></head><body>\n"
      "<h1>Scaling over " + std::to_string(runs.size()) + " runs</h1>\n<p class=note>Efficiency: tokens/s per rank "
      "against the run with the fewest ranks (" + XmlEscape(base.dir) + ", " + std::to_string(base.ranks) +
      " rank" + (base.ranks == 1 ? "" : "s") + "); 1.0 is linear scaling. " + XmlEscape(prediction_note) + "</p>\n";
  h += LineChart("Scaling efficiency", "ranks", "tokens/s per rank / the smallest run's",
                 {{"measured", "#1f77b4", ByRanks(runs, measured), false, true},
                  {"predicted", "#ff7f0e", ByRanks(runs, predicted), true, true}});
  h += LineChart("Throughput", "ranks", "tokens/s",
                 {{"measured", "#1f77b4", ByRanks(runs, tps), false, true},
                  {"predicted", "#ff7f0e", ByRanks(runs, ptps), true, true}});
  h += RunTable(runs);
  return h + "</body></html>\n";
}

}  // namespace scaletrain::report
