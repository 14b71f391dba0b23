#include "plan/goodput.h"

#include <algorithm>
#include <cmath>

#include "core/strings.h"
#include "plan/compute_terms.h"

namespace scaletrain::plan {

const char* MtbfUnitName(MtbfUnit u) { return u == MtbfUnit::kGpu ? "gpu" : "node"; }

Result<MtbfUnit> MtbfUnitFromName(const std::string& name) {
  if (name == "node") return MtbfUnit::kNode;
  if (name == "gpu") return MtbfUnit::kGpu;
  return InvalidArgument("--mtbf-per '" + name +
                         "' is unknown; use node (the MTBF of one node) or gpu (of one GPU)");
}

double JobMtbfSeconds(double unit_mtbf_hours, int64_t units) {
  return unit_mtbf_hours * 3600.0 / static_cast<double>(units);
}

double YoungIntervalSeconds(double write_s, double mtbf_s) {
  return std::sqrt(2.0 * write_s * mtbf_s);
}

double DalyIntervalSeconds(double write_s, double mtbf_s) {
  if (write_s >= 2.0 * mtbf_s) return mtbf_s;
  const double x = write_s / (2.0 * mtbf_s);
  return YoungIntervalSeconds(write_s, mtbf_s) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - write_s;
}

namespace {

// One segment: `work_s` of compute and its write need `work_s + C` without a
// failure. Each try fails with probability 1 - e^(-L/M), so a segment sees
// e^(L/M) - 1 failed tries, which spend M (e^(L/M) - 1) - L in all (the
// memoryless clock: a try lasts min(X, L)); each failed try needs a restart
// of R without a failure, M (e^(R/M) - 1) in expectation with its own failed
// tries.
GoodputTimes SegmentTimes(double work_s, double write_s, double restart_s, double mtbf_s) {
  const double failed_tries = std::expm1((work_s + write_s) / mtbf_s);
  GoodputTimes t;
  t.checkpoint_s = write_s;
  t.rework_s = mtbf_s * failed_tries - (work_s + write_s);
  t.restart_s = failed_tries * mtbf_s * std::expm1(restart_s / mtbf_s);
  return t;
}

}  // namespace

GoodputTimes ExpectedRunTimes(double useful_s, double interval_s, double write_s, double restart_s,
                              double mtbf_s) {
  // Whole segments, then what is left (the run's last checkpoint ends it).
  double whole = std::floor(useful_s / interval_s);
  double rest_s = useful_s - whole * interval_s;
  if (rest_s < 1e-9 * interval_s) rest_s = 0;  // the rounding of N x tau / tau
  if (rest_s > (1 - 1e-9) * interval_s) whole += 1, rest_s = 0;
  const GoodputTimes seg = SegmentTimes(interval_s, write_s, restart_s, mtbf_s);
  const GoodputTimes last =
      rest_s > 0 ? SegmentTimes(rest_s, write_s, restart_s, mtbf_s) : GoodputTimes{};
  GoodputTimes t;
  t.checkpoint_s = whole * seg.checkpoint_s + last.checkpoint_s;
  t.rework_s = whole * seg.rework_s + last.rework_s;
  t.restart_s = whole * seg.restart_s + last.restart_s;
  t.wall_s = useful_s + t.checkpoint_s + t.rework_s + t.restart_s;
  // A Poisson process of rate 1/M over a run that ends at a stopping time
  // counts wall / M failures in expectation (Wald).
  t.interruptions = t.wall_s / mtbf_s;
  return t;
}

double CheckpointBytes(int64_t params, Precision p) {
  const double optimizer = p == Precision::kFP32 ? 8.0 : 12.0;
  return static_cast<double>(params) * (ActivationElemBytes(p) + optimizer);
}

GoodputJob GoodputJobFor(const Prediction& p, const Sizing& s, const ClusterSpec& c, int64_t params,
                         double gpu_utilization) {
  GoodputJob job;
  job.step_time_s = p.step_time_s;
  job.useful_s = s.time_to_train_days * 86400.0;
  job.gpus = p.layout.num_gpus();
  job.nodes = s.nodes;
  job.checkpoint_bytes = CheckpointBytes(params, p.layout.precision);
  job.usd_per_gpu_hour = s.usd_per_gpu_hour;
  const auto gpus = static_cast<double>(job.gpus), nodes = static_cast<double>(job.nodes);
  job.train_power_w = TrainingPowerW(c, gpus, nodes, gpu_utilization, s.pue);
  job.idle_power_w = IdlePowerW(c, gpus, nodes, s.pue);
  return job;
}

namespace {

Status CheckPositive(double v, const char* flag, const char* fix) {
  if (std::isfinite(v) && v > 0) return Status::Ok();
  return InvalidArgument(Fmt("%s %g must be positive; %s", flag, v, fix));
}

// The job's MTBF: the flag's, else the preset's, per node or GPU.
Status ResolveMtbf(const GoodputJob& job, const ClusterSpec& c, const GoodputOptions& o,
                   Goodput* g) {
  if (o.mtbf_hours) {
    ST_RETURN_IF_ERROR(CheckPositive(*o.mtbf_hours, "--mtbf-hours",
                                     "give the mean time between failures of one node (or one GPU "
                                     "with --mtbf-per gpu) in hours"));
    g->unit_mtbf_hours = *o.mtbf_hours;
  } else if (c.mtbf_hours > 0) {
    g->unit_mtbf_hours = c.mtbf_hours;
  } else {
    return InvalidArgument("cluster " + c.name +
                           " carries no MTBF figure (mtbf_hours); give --mtbf-hours H, the mean "
                           "time between failures of one node (or one GPU with --mtbf-per gpu)");
  }
  // --mtbf-hours counts per node unless --mtbf-per says otherwise; the
  // preset's figure counts in the preset's unit, which --mtbf-per cannot change.
  const std::string per = !o.mtbf_per.empty() ? o.mtbf_per : o.mtbf_hours ? "node" : c.mtbf_per;
  ST_ASSIGN_OR_RETURN(const MtbfUnit unit, MtbfUnitFromName(per));
  if (!o.mtbf_hours && !o.mtbf_per.empty() && o.mtbf_per != c.mtbf_per) {
    return InvalidArgument("--mtbf-per " + o.mtbf_per + " without --mtbf-hours: cluster " + c.name +
                           "'s MTBF is per " + c.mtbf_per + "; give --mtbf-hours per " +
                           o.mtbf_per);
  }
  g->mtbf_per = MtbfUnitName(unit);
  g->job_mtbf_s = JobMtbfSeconds(g->unit_mtbf_hours, unit == MtbfUnit::kGpu ? job.gpus : job.nodes);
  return Status::Ok();
}

// C and R from the checkpoint's bytes and the storage's bandwidth.
Status ResolveStorage(const GoodputJob& job, const ClusterSpec& c, const GoodputOptions& o,
                      Goodput* g) {
  if (o.storage_write_gbps) {
    ST_RETURN_IF_ERROR(CheckPositive(*o.storage_write_gbps, "--storage-gbps",
                                     "give the GB/s the job's checkpoint writes reach in all"));
  } else if (!(c.storage_write_gbps > 0)) {
    return InvalidArgument(
        "cluster " + c.name +
        " carries no storage bandwidth (storage_write_gbps); give --storage-gbps "
        "GB/s, the rate the whole job writes a checkpoint at");
  }
  g->storage_write_gbps = o.storage_write_gbps.value_or(c.storage_write_gbps);
  if (o.storage_read_gbps) {
    ST_RETURN_IF_ERROR(CheckPositive(*o.storage_read_gbps, "--storage-read-gbps",
                                     "give the GB/s a restart reads the checkpoint at"));
  }
  g->storage_read_gbps = o.storage_read_gbps ? *o.storage_read_gbps
                         : o.storage_write_gbps || !(c.storage_read_gbps > 0)
                             ? g->storage_write_gbps
                             : c.storage_read_gbps;
  const double relaunch = o.relaunch_s       ? *o.relaunch_s
                          : c.relaunch_s > 0 ? c.relaunch_s
                                             : kDefaultRelaunchS;
  if (!std::isfinite(relaunch) || relaunch < 0) {
    return InvalidArgument(
        Fmt("--restart-s %g must be >= 0 (seconds to relaunch the job, the checkpoint read aside)",
            relaunch));
  }
  g->checkpoint_bytes = job.checkpoint_bytes;
  g->checkpoint_write_s = job.checkpoint_bytes / (g->storage_write_gbps * 1e9);
  g->relaunch_s = relaunch;
  g->restart_s = relaunch + job.checkpoint_bytes / (g->storage_read_gbps * 1e9);
  return Status::Ok();
}

// The interval the run checkpoints at: the flag's steps, or Daly's optimum
// rounded to whole steps (at least one).
Status ResolveInterval(const GoodputJob& job, const GoodputOptions& o, Goodput* g) {
  g->young_interval_s = YoungIntervalSeconds(g->checkpoint_write_s, g->job_mtbf_s);
  g->daly_interval_s = DalyIntervalSeconds(g->checkpoint_write_s, g->job_mtbf_s);
  if (o.interval_steps) {
    if (*o.interval_steps < 1) {
      return InvalidArgument("--checkpoint-interval-steps " + std::to_string(*o.interval_steps) +
                             " must be >= 1 (steps between checkpoints); leave it out for the "
                             "optimum");
    }
    g->interval_given = true;
    g->interval_steps = *o.interval_steps;
  } else {
    g->interval_steps = std::max<int64_t>(1, std::llround(g->daly_interval_s / job.step_time_s));
  }
  g->interval_s = static_cast<double>(g->interval_steps) * job.step_time_s;
  return Status::Ok();
}

}  // namespace

Result<Goodput> EvaluateGoodput(const GoodputJob& job, const ClusterSpec& c,
                                const GoodputOptions& o) {
  Goodput g;
  ST_RETURN_IF_ERROR(ResolveMtbf(job, c, o, &g));
  ST_RETURN_IF_ERROR(ResolveStorage(job, c, o, &g));
  ST_RETURN_IF_ERROR(ResolveInterval(job, o, &g));
  g.useful_s = job.useful_s;
  g.times =
      ExpectedRunTimes(job.useful_s, g.interval_s, g.checkpoint_write_s, g.restart_s, g.job_mtbf_s);
  g.checkpoints = std::ceil(job.useful_s / g.interval_s - 1e-9);
  g.goodput = job.useful_s / g.times.wall_s;  // 0 where the run never ends (wall inf)
  g.downtime_s = g.times.wall_s - job.useful_s;
  g.downtime_gpu_hours = g.downtime_s * static_cast<double>(job.gpus) / 3600.0;
  g.downtime_usd = g.downtime_gpu_hours * job.usd_per_gpu_hour;
  // Rework computes at full power; writes, reads and relaunches leave the
  // GPUs idle.
  const double busy_j = g.times.rework_s * job.train_power_w;
  const double idle_j = (g.times.checkpoint_s + g.times.restart_s) * job.idle_power_w;
  g.downtime_mwh = (busy_j + idle_j) / 3600.0 / 1e6;
  return g;
}

}  // namespace scaletrain::plan
