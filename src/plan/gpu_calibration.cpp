#include "plan/gpu_calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/strings.h"
#include "plan/compute_terms.h"
#include "plan/toml_util.h"

namespace scaletrain::plan {

namespace {

constexpr Precision kPrecisions[] = {Precision::kBF16, Precision::kFP16, Precision::kFP8,
                                     Precision::kTF32, Precision::kFP32};

// Where each precision's measured share goes in a GpuSpec (and a calibration).
double* EfficiencyField(GpuSpec* g, Precision p) {
  switch (p) {
    case Precision::kBF16:
      return &g->matmul_efficiency;
    case Precision::kFP16:
      return &g->fp16_matmul_efficiency;
    case Precision::kFP8:
      return &g->fp8_matmul_efficiency;
    case Precision::kTF32:
      return &g->tf32_matmul_efficiency;
    case Precision::kFP32:
      return &g->fp32_matmul_efficiency;
  }
  return &g->matmul_efficiency;
}

double CalibrationEfficiency(const GpuCalibration& c, Precision p) {
  switch (p) {
    case Precision::kBF16:
      return c.matmul_efficiency;
    case Precision::kFP16:
      return c.fp16_matmul_efficiency;
    case Precision::kFP8:
      return c.fp8_matmul_efficiency;
    case Precision::kTF32:
      return c.tf32_matmul_efficiency;
    case Precision::kFP32:
      return c.fp32_matmul_efficiency;
  }
  return 0;
}

std::string EfficiencyKey(Precision p) {
  return p == Precision::kBF16 ? "matmul_efficiency" : std::string(PrecisionName(p)) + "_matmul_efficiency";
}

// A count stored as int64: at least 1 and below 2^63 (casting NaN or a
// larger value is undefined behaviour).
bool IsCount(double v) { return v >= 1 && v < 9223372036854775808.0; }

Status ReadGemmRows(const std::vector<std::vector<double>>& rows, Precision p, const std::string& where,
                    GpuCalibration* c) {
  for (const auto& row : rows) {
    if (!IsCount(row[0]) || !IsCount(row[1]) || !IsCount(row[2]) || !(row[3] > 0) || !std::isfinite(row[3])) {
      return InvalidArgument(where + ": " + GemmRowsKey(p) +
                             " rows are [m, n, k, TFLOP/s] with every entry positive; re-run "
                             "bench/gpu_calibrate.sh");
    }
    c->gemms[p].push_back({static_cast<int64_t>(row[0]), static_cast<int64_t>(row[1]),
                           static_cast<int64_t>(row[2]), row[3]});
  }
  return Status::Ok();
}

Status ReadAttentionRows(const std::vector<std::vector<double>>& rows, const std::string& where,
                         GpuCalibration* c) {
  for (const auto& row : rows) {
    bool ok = row[4] > 0 && row[5] > 0 && std::isfinite(row[4]) && std::isfinite(row[5]);
    for (int i = 0; i < 4; ++i) ok = ok && IsCount(row[i]);
    if (!ok) {
      return InvalidArgument(where +
                             ": measured_attention rows are [batch, seq, hidden, heads, forward s, "
                             "backward s] with every entry positive; re-run bench/gpu_calibrate.sh");
    }
    c->measured_attention.push_back({static_cast<int64_t>(row[0]), static_cast<int64_t>(row[1]),
                                     static_cast<int64_t>(row[2]), static_cast<int64_t>(row[3]), row[4],
                                     row[5]});
  }
  return Status::Ok();
}

bool HasFactor(const GpuCalibration& c) {
  for (Precision p : kPrecisions) {
    if (CalibrationEfficiency(c, p) > 0) return true;
  }
  return c.attention_efficiency > 0 || c.hbm_efficiency > 0 || c.kernel_issue_us > 0 ||
         !c.measured_attention.empty();
}

}  // namespace

std::string GemmRowsKey(Precision p) { return std::string("gemms_") + PrecisionName(p); }

Result<GpuCalibration> CalibrationFromTable(const std::string& name, const toml::table& t,
                                            const std::string& path, const std::string& context) {
  GpuCalibration c;
  c.gpu = name;
  c.source = path;
  constexpr Bounds kShare{0, 1, true, false, "an achieved share of the catalog's peak"};
  TableReader r(path, context);
  r.SetMissingHint("re-run bench/gpu_calibrate.sh, which writes it");
  r.Add("device", &c.device, true);
  r.Add("compute_capability", &c.compute_capability);
  r.Add("software", &c.software);
  r.Add("mode", &c.mode);
  r.Add("sm_count", &c.sm_count, {0, 1e6, true, false, "a count of SMs"});
  r.Add("matmul_efficiency", &c.matmul_efficiency, kShare);
  r.Add("fp16_matmul_efficiency", &c.fp16_matmul_efficiency, kShare);
  r.Add("fp8_matmul_efficiency", &c.fp8_matmul_efficiency, kShare);
  r.Add("tf32_matmul_efficiency", &c.tf32_matmul_efficiency, kShare);
  r.Add("fp32_matmul_efficiency", &c.fp32_matmul_efficiency, kShare);
  r.Add("attention_efficiency", &c.attention_efficiency, kShare);
  r.Add("hbm_efficiency", &c.hbm_efficiency, kShare);
  r.Add("kernel_issue_us", &c.kernel_issue_us, {0, 1000, true, false, "microseconds to issue one kernel"});
  std::map<Precision, std::vector<std::vector<double>>> rows;
  std::vector<std::string> keys;  // TableReader keeps the key's pointer
  keys.reserve(std::size(kPrecisions));
  for (Precision p : kPrecisions) {
    keys.push_back(GemmRowsKey(p));
    r.Add(keys.back().c_str(), &rows[p], 4);
  }
  std::vector<std::vector<double>> attention;
  r.Add("measured_attention", &attention, 6);
  ST_RETURN_IF_ERROR(r.Read(t));
  const std::string where = path + ": " + context;
  for (Precision p : kPrecisions) ST_RETURN_IF_ERROR(ReadGemmRows(rows[p], p, where, &c));
  ST_RETURN_IF_ERROR(ReadAttentionRows(attention, where, &c));
  if (!HasFactor(c)) {
    return InvalidArgument(where +
                           ": no measured factor (matmul_efficiency, hbm_efficiency, kernel_issue_us, "
                           "...); the calibration stopped before measuring anything: re-run "
                           "bench/gpu_calibrate.sh and read its output");
  }
  return c;
}

Result<GpuSpec> ApplyCalibration(const GpuSpec& gpu, const GpuCalibration& cal, const std::string& device_part) {
  const std::string fix = "re-run bench/gpu_calibrate.sh on a " + gpu.name + ", or name the table [calibration." +
                          (device_part.empty() ? std::string("GPU") : device_part) +
                          "] for the part it was measured on";
  if (!device_part.empty() && device_part != gpu.name) {
    return InvalidArgument("measured on '" + cal.device + "', which the catalog reads as " + device_part +
                           ", not " + gpu.name + ": the calibration is for another GPU; " + fix);
  }
  if (cal.sm_count > 0 && gpu.sm_count > 0 && static_cast<double>(cal.sm_count) != gpu.sm_count) {
    return InvalidArgument(Fmt("measured on '%s' with %lld SMs, where the catalog's %s has %g: the calibration "
                               "is for another GPU; ",
                               cal.device.c_str(), static_cast<long long>(cal.sm_count), gpu.name.c_str(),
                               gpu.sm_count) +
                           fix);
  }
  GpuSpec g = gpu;
  for (Precision p : kPrecisions) {
    const double e = CalibrationEfficiency(cal, p);
    if (e <= 0) continue;
    if (gpu.PeakTflops(p) <= 0) {
      return InvalidArgument(EfficiencyKey(p) + " is given, but the catalog's " + gpu.name + " has no " +
                             PrecisionName(p) + " rate to take a share of; remove the key or fix the catalog");
    }
    *EfficiencyField(&g, p) = e;
  }
  if (cal.attention_efficiency > 0) g.attention_efficiency = cal.attention_efficiency;
  if (cal.hbm_efficiency > 0) g.hbm_efficiency = cal.hbm_efficiency;
  if (cal.kernel_issue_us > 0) g.kernel_issue_us = cal.kernel_issue_us;
  g.measured_attention.insert(g.measured_attention.end(), cal.measured_attention.begin(),
                              cal.measured_attention.end());
  // A factor measured here is no longer an assumption (the range's spread).
  std::erase_if(g.assumed, [&](const std::string& a) {
    return (a == "matmul_efficiency" && cal.matmul_efficiency > 0) ||
           (a == "attention_efficiency" && cal.attention_efficiency > 0) ||
           (a == "hbm_efficiency" && cal.hbm_efficiency > 0);
  });
  g.calibration = cal.source;
  g.description = gpu.description + ", calibrated by " + cal.source;
  return g;
}

namespace {

// The planner's compute charge for one GEMM of `row`'s shape with the
// precision's share of peak `eff`, at the burst clock.
Result<double> ComputeChargeSeconds(const GpuSpec& gpu, Precision p, const MeasuredGemmRate& row, double eff) {
  GpuSpec g = gpu;
  g.sustained_clock_ratio = 1.0;
  *EfficiencyField(&g, p) = eff;
  ST_ASSIGN_OR_RETURN(GpuRates r, GpuRatesFor(g, p));
  if (p == Precision::kFP8) {  // the Linears' FP8 rate
    r.matmul_flops_per_s = r.linear_flops_per_s;
    r.gemm_k_overhead = r.linear_gemm_k_overhead;
  }
  r.hbm_bytes_per_s = std::numeric_limits<double>::infinity();
  return GemmSecondsEach(r, 2.0, 1.0, static_cast<double>(row.m), static_cast<double>(row.n),
                         static_cast<double>(row.k));
}

double MeasuredSeconds(const MeasuredGemmRate& row) {
  return 2.0 * static_cast<double>(row.m) * static_cast<double>(row.n) * static_cast<double>(row.k) /
         (row.tflops * 1e12);
}

// The planner's memory charge for the shape (bytes of its three matrices
// over the catalog's achieved bandwidth).
double MemoryChargeSeconds(const GpuSpec& gpu, Precision p, const MeasuredGemmRate& row) {
  const double m = static_cast<double>(row.m), n = static_cast<double>(row.n), k = static_cast<double>(row.k);
  const double elem_bytes = p == Precision::kTF32 || p == Precision::kFP32 ? 4.0 : 2.0;
  return elem_bytes * (m * k + k * n + m * n) / (gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency);
}

}  // namespace

Result<double> ImpliedMatmulEfficiency(const GpuSpec& gpu, Precision p, const MeasuredGemmRate& row) {
  ST_RETURN_IF_ERROR(MatmulPeakFlopsPerS(gpu, p).status());
  const double measured = MeasuredSeconds(row);
  // The charge falls as the share rises: bisect for the share that gives
  // the measured time.
  double lo = 1e-6, hi = 4.0;
  ST_ASSIGN_OR_RETURN(const double fastest, ComputeChargeSeconds(gpu, p, row, hi));
  if (fastest > measured) {
    return InvalidArgument(Fmt("a %s GEMM of %lld x %lld x %lld at %g TFLOP/s is faster than 4x %s's catalog "
                               "peak allows; check the catalog's %s_tflops",
                               PrecisionName(p), static_cast<long long>(row.m), static_cast<long long>(row.n),
                               static_cast<long long>(row.k), row.tflops, gpu.name.c_str(), PrecisionName(p)));
  }
  for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
    const double mid = 0.5 * (lo + hi);
    ST_ASSIGN_OR_RETURN(const double t, ComputeChargeSeconds(gpu, p, row, mid));
    (t > measured ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Result<double> FitMatmulEfficiency(const GpuSpec& gpu, Precision p, const std::vector<MeasuredGemmRate>& rows) {
  std::vector<double> large, all;
  for (const MeasuredGemmRate& row : rows) {
    ST_ASSIGN_OR_RETURN(const double eff, ImpliedMatmulEfficiency(gpu, p, row));
    // A shape the planner charges by its bytes says nothing of the share.
    ST_ASSIGN_OR_RETURN(const double compute, ComputeChargeSeconds(gpu, p, row, eff));
    if (MemoryChargeSeconds(gpu, p, row) >= compute) continue;
    all.push_back(eff);
    if (static_cast<double>(row.m) * static_cast<double>(row.n) >= kFitMinOutputs) large.push_back(eff);
  }
  std::vector<double>& use = large.empty() ? all : large;
  if (use.empty()) {
    return InvalidArgument(std::string("no compute-bound ") + PrecisionName(p) +
                           " GEMM to fit a share of the peak to; measure larger shapes");
  }
  std::sort(use.begin(), use.end());
  const size_t n = use.size();
  const double median = n % 2 ? use[n / 2] : 0.5 * (use[n / 2 - 1] + use[n / 2]);
  if (median > 1.0) {
    return InvalidArgument(Fmt("the fitted %s share is %.3f, above the catalog's peak (%g TFLOP/s for %s); check the "
                               "catalog's %s_tflops for this part",
                               PrecisionName(p), median, gpu.PeakTflops(p), gpu.name.c_str(), PrecisionName(p)));
  }
  return median;
}

double ImpliedAttentionEfficiency(const GpuSpec& gpu, double batch, double seq, double hidden, double fwd_s,
                                  double bwd_s) {
  GpuSpec g = gpu;
  g.attention_efficiency = 1.0;
  g.sustained_clock_ratio = 1.0;
  LayerShape s;
  s.micro_batch = batch, s.seq = seq, s.tokens = batch * seq, s.hidden = hidden;
  // The charge is inversely proportional to the share: the share is the
  // charge at a share of 1 over the measured time.
  const PassSeconds at_one = FlashAttentionSeconds(s, g, Software{});
  return (at_one.fwd + at_one.bwd) / (fwd_s + bwd_s);
}

namespace {

std::string Line(const std::string& key, const std::string& value, const std::map<std::string, std::string>& notes) {
  auto it = notes.find(key);
  return key + " = " + value + (it == notes.end() ? "" : "  # " + it->second) + "\n";
}

std::string Quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) q += c;
  }
  return q + "\"";
}

std::string GemmRowsToToml(Precision p, const std::vector<MeasuredGemmRate>& rows,
                           const std::map<std::string, std::string>& notes) {
  if (rows.empty()) return "";
  const std::string key = GemmRowsKey(p);
  auto it = notes.find(key);
  std::string out = key + " = [  # [m, n, k, TFLOP/s]" + (it == notes.end() ? "" : "; " + it->second) + "\n";
  for (const auto& g : rows) {
    out += Fmt("  [%lld, %lld, %lld, %.6g],\n", static_cast<long long>(g.m), static_cast<long long>(g.n),
               static_cast<long long>(g.k), g.tflops);
  }
  return out + "]\n";
}

}  // namespace

std::string CalibrationToToml(const GpuCalibration& cal, const std::string& header,
                              const std::map<std::string, std::string>& notes) {
  std::string out;
  size_t start = 0;
  while (start < header.size()) {
    const size_t end = std::min(header.find('\n', start), header.size());
    out += "# " + header.substr(start, end - start) + "\n";
    start = end + 1;
  }
  out += "\n[calibration." + cal.gpu + "]\n";
  out += Line("device", Quoted(cal.device), notes);
  if (cal.sm_count > 0) out += Line("sm_count", std::to_string(cal.sm_count), notes);
  if (!cal.compute_capability.empty()) out += Line("compute_capability", Quoted(cal.compute_capability), notes);
  if (!cal.software.empty()) out += Line("software", Quoted(cal.software), notes);
  if (!cal.mode.empty()) out += Line("mode", Quoted(cal.mode), notes);
  for (Precision p : kPrecisions) {
    const double e = CalibrationEfficiency(cal, p);
    if (e > 0) out += Line(EfficiencyKey(p), Fmt("%.4f", e), notes);
  }
  if (cal.attention_efficiency > 0) out += Line("attention_efficiency", Fmt("%.4f", cal.attention_efficiency), notes);
  if (cal.hbm_efficiency > 0) out += Line("hbm_efficiency", Fmt("%.4f", cal.hbm_efficiency), notes);
  if (cal.kernel_issue_us > 0) out += Line("kernel_issue_us", Fmt("%.3f", cal.kernel_issue_us), notes);
  for (Precision p : kPrecisions) {
    auto it = cal.gemms.find(p);
    if (it != cal.gemms.end()) out += GemmRowsToToml(p, it->second, notes);
  }
  if (!cal.measured_attention.empty()) {
    auto it = notes.find("measured_attention");
    out += std::string("measured_attention = [  # [batch, seq, hidden, heads, forward s, backward s]") +
           (it == notes.end() ? "" : "; " + it->second) + "\n";
    for (const auto& a : cal.measured_attention) {
      out += Fmt("  [%lld, %lld, %lld, %lld, %.6g, %.6g],\n", static_cast<long long>(a.batch),
                 static_cast<long long>(a.seq), static_cast<long long>(a.hidden), static_cast<long long>(a.heads),
                 a.fwd_s, a.bwd_s);
    }
    out += "]\n";
  }
  return out;
}

}  // namespace scaletrain::plan
