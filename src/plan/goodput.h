// Goodput: the share of a run's wall time that trains, when failures stop
// the whole job. A synchronous job loses its progress since the last
// checkpoint at each failure, restarts (relaunch, then read the checkpoint)
// and computes that part again; checkpoints cost their write time. The terms
// are Young's (1974) and Daly's (2006) model of checkpoint/restart under
// failures that arrive as a Poisson process; method, constants and their
// sources: docs/planner.md, "Goodput".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "plan/cost_model.h"
#include "plan/hardware.h"
#include "plan/sizing.h"

namespace scaletrain::plan {

// What one MTBF figure counts: the mean time between failures of one node
// or of one GPU. A job of n such units fails n times as often.
enum class MtbfUnit { kNode, kGpu };
const char* MtbfUnitName(MtbfUnit u);
Result<MtbfUnit> MtbfUnitFromName(const std::string& name);  // "node" or "gpu"

// The job's mean time between failures (s): the unit's MTBF over the units
// the job holds (failures of different units independent).
double JobMtbfSeconds(double unit_mtbf_hours, int64_t units);

// Young's first-order optimum of the compute time between checkpoints:
// sqrt(2 C M), C the checkpoint's write time, M the job's MTBF (s).
double YoungIntervalSeconds(double write_s, double mtbf_s);
// Daly's higher-order optimum (Daly 2006, eq. for tau_opt):
// sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C while C < 2M;
// M beyond (a checkpoint as long as the MTBF: checkpoint every MTBF).
double DalyIntervalSeconds(double write_s, double mtbf_s);

// Expected time of the parts of a run under Daly's complete model: the run
// is cut into segments of `interval_s` of compute each followed by a
// checkpoint of `write_s` (the last segment what is left, with the run's
// final checkpoint); a failure (exponential, mean `mtbf_s`) anywhere, in a
// write or a restart too, costs a restart of `restart_s` and the segment
// again. Each part is exact in expectation for that model; for whole
// segments they sum to wall_s = M e^(R/M) (e^((tau+C)/M) - 1) x useful_s / tau.
struct GoodputTimes {
  double wall_s = 0;
  double checkpoint_s = 0;   // the completed checkpoint writes
  double rework_s = 0;       // compute and writes lost to failures
  double restart_s = 0;      // relaunches and checkpoint reads, failed ones included
  double interruptions = 0;  // failures over the run: wall_s / M
};
GoodputTimes ExpectedRunTimes(double useful_s, double interval_s, double write_s, double restart_s,
                              double mtbf_s);

// The bytes a checkpoint writes: every parameter once (shards, not
// replicas) with its optimizer state, as the trainer's checkpoint and
// Megatron's distributed checkpoint hold them: 16-bit weights + fp32 master
// + two fp32 moments = 14 B a parameter in mixed precision, 12 in fp32
// (the weights are the master copy).
double CheckpointBytes(int64_t params, Precision p);

// Job relaunch without the checkpoint read, where neither the flag nor the
// cluster preset gives one: ASSUMED, 10 minutes (docs/planner.md,
// "Goodput": no fleet figure was found; Daly's worked example uses it).
inline constexpr double kDefaultRelaunchS = 600;

// What `plan --mtbf-hours` needs besides the prediction; a value not given
// is the cluster preset's.
struct GoodputOptions {
  std::optional<double> mtbf_hours;          // --mtbf-hours
  std::string mtbf_per;                      // --mtbf-per: node or gpu
  std::optional<double> storage_write_gbps;  // --storage-gbps: GB/s the job's writes reach in all
  std::optional<double>
      storage_read_gbps;             // --storage-read-gbps; none: the preset's, else the write rate
  std::optional<double> relaunch_s;  // --restart-s; none: the preset's, else kDefaultRelaunchS
  std::optional<int64_t> interval_steps;  // --checkpoint-interval-steps; none: Daly's optimum
};

// The job as the plan predicts it: its step, its size, its run and power.
struct GoodputJob {
  double step_time_s = 0;
  double useful_s = 0;  // the failure-free time to train (Sizing)
  int64_t gpus = 0, nodes = 0;
  double checkpoint_bytes = 0;
  double usd_per_gpu_hour = 0;
  double train_power_w = 0;  // facility power while computing (PUE included)
  double idle_power_w = 0;   // while writing, reading or relaunching
};

// The job a plan predicted: `p`'s step and layout, `s`'s run, `c`'s power
// (`gpu_utilization` as the sizing's), `params` the model's parameters.
GoodputJob GoodputJobFor(const Prediction& p, const Sizing& s, const ClusterSpec& c, int64_t params,
                         double gpu_utilization);

struct Goodput {
  std::string mtbf_per;  // node or gpu
  double unit_mtbf_hours = 0;
  double job_mtbf_s = 0;
  double checkpoint_bytes = 0;
  double storage_write_gbps = 0, storage_read_gbps = 0;
  double checkpoint_write_s = 0;  // C
  double relaunch_s = 0;
  double restart_s = 0;  // R: relaunch + read
  double young_interval_s = 0, daly_interval_s = 0;
  bool interval_given = false;  // --checkpoint-interval-steps, not the optimum
  int64_t interval_steps = 0;
  double interval_s = 0;   // interval_steps x step
  double checkpoints = 0;  // writes over the run
  GoodputTimes times;
  double useful_s = 0;
  double goodput = 0;     // useful_s / times.wall_s
  double downtime_s = 0;  // wall - useful
  double downtime_gpu_hours = 0, downtime_usd = 0, downtime_mwh = 0;
};

// The goodput of `job` under `o`, the cluster preset's figures where `o`
// has none. Errors name the flag: an MTBF that is not positive, an unknown
// --mtbf-per, no storage bandwidth, a negative interval or relaunch.
Result<Goodput> EvaluateGoodput(const GoodputJob& job, const ClusterSpec& c,
                                const GoodputOptions& o);

}  // namespace scaletrain::plan
