// The goodput part of `plan`'s output (report.h): JSON and text.
#include <algorithm>
#include <cmath>

#include "core/strings.h"
#include "plan/report.h"

namespace scaletrain::plan {

namespace {

// A duration as a person reads it: seconds to days.
std::string Duration(double s) {
  if (!std::isfinite(s)) return "never";
  if (s < 120) return Fmt("%.1f s", s);
  if (s < 7200) return Fmt("%.1f min", s / 60);
  if (s < 2 * 86400.0) return Fmt("%.1f h", s / 3600);
  return Fmt("%.1f days", s / 86400);
}

}  // namespace

nlohmann::json GoodputToJson(const Goodput& g) {
  const GoodputTimes& t = g.times;
  return {{"mtbf_hours", g.unit_mtbf_hours},
          {"mtbf_per", g.mtbf_per},
          {"job_mtbf_hours", g.job_mtbf_s / 3600.0},
          {"checkpoint_bytes", g.checkpoint_bytes},
          {"storage_write_gbps", g.storage_write_gbps},
          {"storage_read_gbps", g.storage_read_gbps},
          {"checkpoint_write_s", g.checkpoint_write_s},
          {"relaunch_s", g.relaunch_s},
          {"restart_s", g.restart_s},
          {"young_interval_s", g.young_interval_s},
          {"daly_interval_s", g.daly_interval_s},
          {"interval_steps", g.interval_steps},
          {"interval_s", g.interval_s},
          {"interval_given", g.interval_given},
          {"checkpoints", g.checkpoints},
          {"interruptions", t.interruptions},
          {"goodput", g.goodput},
          {"time_to_train_days", t.wall_s / 86400.0},
          {"lost_s",
           {{"checkpoint", t.checkpoint_s}, {"rework", t.rework_s}, {"restart", t.restart_s}}},
          {"downtime_days", g.downtime_s / 86400.0},
          {"downtime_gpu_hours", g.downtime_gpu_hours},
          {"downtime_usd", g.downtime_usd},
          {"downtime_mwh", g.downtime_mwh}};
}

std::string GoodputToText(const Goodput& g) {
  const GoodputTimes& t = g.times;
  const double units = g.unit_mtbf_hours * 3600.0 / g.job_mtbf_s;
  std::string o = Fmt(
      "goodput  %.1f%% of the wall time trains: MTBF %.4g h per %s x %.0f = one failure every %s; "
      "%.4g interruptions expected\n",
      100 * g.goodput, g.unit_mtbf_hours, g.mtbf_per.c_str(), units, Duration(g.job_mtbf_s).c_str(),
      t.interruptions);
  o +=
      Fmt("         checkpoint %.3g GB (weights + optimizer state) written in %s at %.4g GB/s; "
          "restart %s "
          "(relaunch %s, read at %.4g GB/s)\n",
          g.checkpoint_bytes / 1e9, Duration(g.checkpoint_write_s).c_str(), g.storage_write_gbps,
          Duration(g.restart_s).c_str(), Duration(g.relaunch_s).c_str(), g.storage_read_gbps);
  o += Fmt("         checkpoint every %lld steps (%s; %s; Daly's optimum %s, Young's %s)\n",
           static_cast<long long>(g.interval_steps), Duration(g.interval_s).c_str(),
           g.interval_given ? "--checkpoint-interval-steps" : "Daly's optimum in whole steps",
           Duration(g.daly_interval_s).c_str(), Duration(g.young_interval_s).c_str());
  if (!std::isfinite(t.wall_s)) {
    return o +
           Fmt("         the run never ends in expectation: %s of compute and its write between "
               "checkpoints is far beyond one failure every %s; checkpoint more often (Daly's "
               "optimum: %s)\n",
               Duration(std::min(g.interval_s, g.useful_s)).c_str(), Duration(g.job_mtbf_s).c_str(),
               Duration(g.daly_interval_s).c_str());
  }
  o += Fmt(
      "         time lost: checkpoint writes %s, rework %s, restarts %s (%.2g%%, %.2g%%, %.2g%% of "
      "the "
      "wall time)\n",
      Duration(t.checkpoint_s).c_str(), Duration(t.rework_s).c_str(), Duration(t.restart_s).c_str(),
      100 * t.checkpoint_s / t.wall_s, 100 * t.rework_s / t.wall_s, 100 * t.restart_s / t.wall_s);
  o +=
      Fmt("         time to train with failures %s (%s without); downtime %.3g GPU-hours, $%.3g, "
          "%.3g MWh\n",
          Duration(t.wall_s).c_str(), Duration(g.useful_s).c_str(), g.downtime_gpu_hours,
          g.downtime_usd, g.downtime_mwh);
  return o;
}

}  // namespace scaletrain::plan
