// A test double of bench/gpu_calibrate.h's measurements, for checking the
// calibration's host side (the grid, the fits, the profile, the torch
// cross-check) where no GPU is: every figure is made from known shares
// through the planner's own GEMM roofline (TileWaveEfficiency, a k overhead
// of 130), so the shares the program fits and writes must come back.
// tests/cli/gpu_calibrate_fake_run.sh runs it. Not a measurement of anything.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/gpu_calibrate.h"
#include "plan/compute_terms.h"

namespace scaletrain::gpucal {

namespace {

constexpr double kSms = 132, kKOverhead = 130;

// The share each precision's GEMMs run at (the test expects these back).
double ShareOf(GemmType t) {
  switch (t) {
    case GemmType::kBF16:
      return 0.7;
    case GemmType::kFP16:
      return 0.72;
    case GemmType::kFP8:
      return 0.6;
    case GemmType::kTF32:
      return 0.65;
    case GemmType::kFP32:
      return 0.9;
  }
  return 0;
}

}  // namespace

Result<DeviceInfo> OpenDevice() {
  if (std::getenv("GPUCAL_FAKE_NO_DEVICE") != nullptr) return NotFound("no CUDA device (the fake has none)");
  DeviceInfo d;
  const char* name = std::getenv("GPUCAL_FAKE_DEVICE");
  d.name = name != nullptr ? name : "NVIDIA H200";
  d.cc_major = 9, d.cc_minor = 0, d.sm_count = 132, d.memory_gib = 139.8;
  d.software = "fake device (tests/fakes)";
  return d;
}

Result<std::vector<GemmTiming>> TimeGemms(GemmType type, const std::vector<GemmShape>& shapes, double peak_tflops,
                                          double, int max_reps, const Budget&) {
  std::vector<GemmTiming> out;
  const double share = ShareOf(type);
  // FP8: the planner counts its per-tile work at the bf16 rate (half the
  // FP8 peak here) as more depth at the FP8 rate.
  const double overhead = type == GemmType::kFP8 ? kKOverhead * share / 0.7 * 2.0 : kKOverhead;
  for (const GemmShape& s : shapes) {
    const double m = static_cast<double>(s.m), n = static_cast<double>(s.n), k = static_cast<double>(s.k);
    const double rate = peak_tflops * 1e12 * share * (1 + overhead / plan::kMatmulEfficiencyK) *
                        plan::TileWaveEfficiency(m, n, 1, kSms);
    out.push_back({s, 2 * m * n * (k + overhead) / rate, max_reps, ""});
  }
  return out;
}

Result<BandwidthTiming> TimeBandwidth(int64_t bytes, int, const Budget&) {
  BandwidthTiming b;
  b.bytes = bytes, b.copy_gbps = 4320, b.memcpy_gbps = 4100, b.residual_gbps = 3900;
  return b;
}

Result<LaunchTiming> TimeLaunches(int launches, int) {
  LaunchTiming l;
  l.launches = launches, l.issue_us = 2.25, l.empty_gpu_us = 2.5, l.small_gpu_us = 3.0;
  return l;
}

Result<std::vector<AttentionTiming>> TimeProjectAttention(const std::vector<AttentionShape>& shapes, int, double,
                                                          double, const Budget&) {
  std::vector<AttentionTiming> out;
  for (const AttentionShape& s : shapes) {
    // 1 ms per 2^30 causal forward FLOPs... any positive figure; backward 3x.
    const double fwd = 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.seq * s.seq) *
                       static_cast<double>(s.hidden) / 1073741824.0 * 1e-3;
    out.push_back({s, fwd, 3 * fwd, ""});
  }
  return out;
}

}  // namespace scaletrain::gpucal
