// Sizing a whole training run from one predicted step: time, GPU-hours,
// energy, facility power, racks, cooling and cost.
#pragma once

#include <string>

#include "plan/cost_model.h"
#include "plan/hardware.h"

namespace scaletrain::plan {

struct SizingOptions {
  double tokens = 0;              // tokens to train on
  double gpu_utilization = 0.85;  // average GPU power / TDP over a run
  double rack_kw = 40.0;          // power a rack may draw
  double pue = 0;                 // 0: the cluster preset's
  double usd_per_gpu_hour = 0;    // 0: the cluster preset's
};

struct Sizing {
  double tokens = 0;
  double time_to_train_days = 0;
  double gpu_hours = 0;
  double energy_mwh = 0;
  double peak_power_mw = 0;
  int64_t nodes = 0;
  int64_t racks = 0;
  int64_t nodes_per_rack = 0;
  double kw_per_rack = 0;        // what a full rack actually draws
  std::string cooling;           // air, direct liquid, immersion
  double cost_usd = 0;
  double usd_per_gpu_hour = 0;
  double pue = 0;
};

// Cooling a rack of this power needs: air up to 40 kW, direct-to-chip liquid
// up to 150 kW, immersion beyond.
std::string CoolingClass(double kw_per_rack);

// Facility power (W, PUE included) of `gpus` GPUs on `nodes` nodes.
// Training: each GPU draws TDP x gpu_utilization on average. Idle (a
// checkpoint write, a restart): each GPU its static power (idle_w; 0: 10% of
// TDP, as PowerCapped). The rest of a node (CPUs, NICs, fans) at its full
// overhead either way.
double TrainingPowerW(const ClusterSpec& c, double gpus, double nodes, double gpu_utilization, double pue);
double IdlePowerW(const ClusterSpec& c, double gpus, double nodes, double pue);

Sizing SizeRun(const Prediction& p, const ClusterSpec& c, const SizingOptions& o);

}  // namespace scaletrain::plan
