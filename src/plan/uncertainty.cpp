#include "plan/uncertainty.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/strings.h"
#include "plan/cost_model.h"

namespace scaletrain::plan {

namespace {

Span Symmetric(double w) { return {w, w}; }

// An assumed figure is at least as uncertain as a measured one: on each side
// the wider of its measured span and the assumed spread.
Span Assumed(Span measured, double spread) {
  return {std::max(measured.down, spread), std::max(measured.up, spread)};
}

// A capped GPU's clock: the cube-root law's (PowerCapped) at the low end of
// the measured span, at most what the flattest measured response gives at
// the high end.
Span CappedClock(const GpuSpec& g, Span at_tdp) {
  const double share = g.capped_power_share;
  if (!(share > 0) || share >= 1) return at_tdp;
  const double flattest = std::pow(share, kCappedClockExponentLow) / std::cbrt(share);
  return {at_tdp.down, (1 + at_tdp.up) * flattest - 1};
}

}  // namespace

Uncertainty SourcedUncertainty(const ClusterSpec& c) {
  const GpuSpec& g = c.gpu;
  auto gpu_span = [&](const char* field, Span measured, double assumed) {
    return IsAssumed(g.assumed, field) ? Assumed(measured, assumed) : measured;
  };
  Uncertainty u;
  const bool measured_here = !g.measured_gemms.empty() || !g.measured_model_step.empty();
  u.software = measured_here ? Span{} : kStackVersionSpan;
  u.matmul = gpu_span("matmul_efficiency", Span{}, kAssumedMatmulSpan);
  u.attention = gpu_span("attention_efficiency", kFlashAttentionSpan, kAssumedAttentionSpan);
  u.hbm = kStreamSpan;  // every part's 0.85 comes from the same streaming range
  u.clock =
      CappedClock(g, gpu_span("sustained_clock_ratio", kSustainedClockSpan, kAssumedClockSpan));
  u.intra_link = IsAssumed(c.node.assumed, "intra_efficiency")
                     ? Assumed(kNvlinkBusSpan, kAssumedLinkSpan)
                     : kNvlinkBusSpan;
  u.fabric = IsAssumed(c.fabric.assumed, "efficiency") ? Assumed(kInfinibandSpan, kAssumedLinkSpan)
                                                       : kInfinibandSpan;
  return u;
}

Result<Uncertainty> UncertaintyFor(const ClusterSpec& c, const UncertaintyOverride& o) {
  Uncertainty u = SourcedUncertainty(c);
  for (const auto& [flag, v] :
       {std::pair{"--kernel-uncertainty", o.kernel}, {"--fabric-uncertainty", o.fabric}}) {
    if (v && !(*v >= 0 && *v < 1)) {
      return InvalidArgument(std::string(flag) +
                             Fmt(" = %g is not a fraction; give a value in [0, 1)", *v));
    }
  }
  if (o.kernel) u.software = Span{}, u.matmul = u.attention = u.hbm = Symmetric(*o.kernel);
  if (o.fabric) u.intra_link = u.fabric = Symmetric(*o.fabric);
  return u;
}

Result<std::pair<double, double>> StepTimeRange(const ModelSpec& spec, const ClusterSpec& cluster,
                                                const Software& sw, const Layout& l,
                                                const Uncertainty& u) {
  // Each input as a span and the figure of the cluster it moves.
  const auto scale = [](double* v, double by) { *v = std::min(1.0, *v * by); };
  const auto matmul = [&](ClusterSpec* c, double by) {
    scale(&c->gpu.matmul_efficiency, by);
    if (c->gpu.fp8_matmul_efficiency > 0) scale(&c->gpu.fp8_matmul_efficiency, by);
  };
  const std::vector<std::pair<Span, std::function<void(ClusterSpec*, double)>>> inputs = {
      {u.software,
       [&](ClusterSpec* c, double by) {
         matmul(c, by);
         scale(&c->gpu.attention_efficiency, by);
         scale(&c->gpu.hbm_efficiency, by);
       }},
      {u.matmul, matmul},
      {u.attention, [&](ClusterSpec* c, double by) { scale(&c->gpu.attention_efficiency, by); }},
      {u.hbm, [&](ClusterSpec* c, double by) { scale(&c->gpu.hbm_efficiency, by); }},
      {u.clock, [&](ClusterSpec* c, double by) { scale(&c->gpu.sustained_clock_ratio, by); }},
      {u.intra_link, [&](ClusterSpec* c, double by) { scale(&c->node.intra_efficiency, by); }},
      {u.fabric, [&](ClusterSpec* c, double by) { scale(&c->fabric.efficiency, by); }},
  };
  CostModel nominal(spec, cluster, sw);
  ST_ASSIGN_OR_RETURN(const Prediction p, nominal.Evaluate(l));
  const double t = p.step_time_s;
  double faster2 = 0, slower2 = 0;
  for (const auto& [span, apply] : inputs) {
    // Either end may speed the step up or slow it down (a faster link can
    // shift which transfer is exposed); each input counts once on each side,
    // by its larger effect there.
    double faster = 0, slower = 0;
    for (const double by : {1.0 - span.down, 1.0 + span.up}) {
      if (by == 1.0) continue;
      ClusterSpec c = cluster;
      apply(&c, by);
      CostModel m(spec, c, sw);
      ST_ASSIGN_OR_RETURN(const Prediction q, m.Evaluate(l));
      faster = std::max(faster, t - q.step_time_s);
      slower = std::max(slower, q.step_time_s - t);
    }
    faster2 += faster * faster;
    slower2 += slower * slower;
  }
  return std::make_pair(t - std::sqrt(faster2), t + std::sqrt(slower2));
}

}  // namespace scaletrain::plan
