#include "plan/sizing.h"

#include <algorithm>
#include <cmath>

namespace scaletrain::plan {

std::string CoolingClass(double kw_per_rack) {
  // Air with hot/cold aisle containment (and rear-door heat exchangers at the
  // top end) handles ~30-40 kW a rack; cold plates on the chips carry it to
  // ~120-150 kW (GB200 NVL72 racks are ~120-132 kW, liquid-cooled); beyond
  // that, immersion.
  if (kw_per_rack <= 40.0) return "air";
  if (kw_per_rack <= 150.0) return "direct liquid";
  return "immersion";
}

double TrainingPowerW(const ClusterSpec& c, double gpus, double nodes, double gpu_utilization, double pue) {
  return (gpus * c.gpu.tdp_w * gpu_utilization + nodes * c.node.overhead_w) * pue;
}

double IdlePowerW(const ClusterSpec& c, double gpus, double nodes, double pue) {
  const double idle_w = c.gpu.idle_w > 0 ? c.gpu.idle_w : 0.1 * c.gpu.tdp_w;
  return (gpus * idle_w + nodes * c.node.overhead_w) * pue;
}

Sizing SizeRun(const Prediction& p, const ClusterSpec& c, const SizingOptions& o) {
  Sizing s;
  const double n_gpus = static_cast<double>(p.layout.num_gpus());
  s.tokens = o.tokens;
  s.pue = o.pue > 0 ? o.pue : c.pue;
  s.usd_per_gpu_hour = o.usd_per_gpu_hour > 0 ? o.usd_per_gpu_hour : c.usd_per_gpu_hour;
  const double seconds = o.tokens / p.tokens_per_s;
  s.time_to_train_days = seconds / 86400.0;
  s.gpu_hours = n_gpus * seconds / 3600.0;
  s.nodes = (p.layout.num_gpus() + c.node.gpus_per_node - 1) / c.node.gpus_per_node;
  const double nodes = static_cast<double>(s.nodes);
  // The rest of a node (CPUs, NICs, fans) is counted at its full overhead,
  // as it does not idle during training.
  s.energy_mwh = TrainingPowerW(c, n_gpus, nodes, o.gpu_utilization, s.pue) * seconds / 3600.0 / 1e6;
  const double node_kw = c.node.max_power_kw > 0 ? c.node.max_power_kw
                                                 : (c.node.gpus_per_node * c.gpu.tdp_w + c.node.overhead_w) / 1000.0;
  s.peak_power_mw = nodes * node_kw * s.pue / 1000.0;
  s.nodes_per_rack = std::max<int64_t>(1, static_cast<int64_t>(std::floor(o.rack_kw / node_kw)));
  s.racks = (s.nodes + s.nodes_per_rack - 1) / s.nodes_per_rack;
  s.kw_per_rack = static_cast<double>(std::min(s.nodes_per_rack, s.nodes)) * node_kw;
  s.cooling = CoolingClass(s.kw_per_rack);
  s.cost_usd = s.gpu_hours * s.usd_per_gpu_hour;
  return s;
}

}  // namespace scaletrain::plan
