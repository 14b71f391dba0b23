// A GPU calibration: what bench/gpu_calibrate.sh measured on one GPU of a
// catalogued part (its GEMM rates by shape and precision, memory bandwidth,
// kernel issue time, attention), and the efficiency factors derived from it
// that replace the catalog's for that part. It is a `[calibration.GPU]` table
// of a hardware TOML file, loaded with `plan --hardware FILE` like a
// `scaletrain bench` profile (HardwareCatalog::LoadFile applies it to the
// catalog's [gpu.GPU]). The factors are derived here, with the cost model's
// own terms, so that the planner's charge for each measured shape is the
// measured time (docs/planner.md, "A GPU's own calibration").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "core/status.h"
#include "plan/hardware.h"

namespace scaletrain::plan {

// One GEMM measured alone: an m x n output of depth k (the planner's
// GemmSeconds convention: m tokens, n output features, k input features),
// at `tflops` = 2mnk / median seconds.
struct MeasuredGemmRate {
  int64_t m = 0, n = 0, k = 0;
  double tflops = 0;
};

struct GpuCalibration {
  std::string gpu;     // the catalog entry calibrated ([calibration.GPU])
  std::string device;  // the name the device reports (cudaGetDeviceProperties)
  std::string source;  // the file it was read from (errors, the report)
  int64_t sm_count = 0;
  // As written, for the reader: "9.0"; "CUDA 13.0, cuBLASLt 130000"; quick or full.
  std::string compute_capability, software, mode;
  // Achieved shares of the catalog's peaks, each the planner's
  // GpuSpec factor of the same name (0: not measured, the catalog's stays).
  double matmul_efficiency = 0;  // bf16
  double fp16_matmul_efficiency = 0, fp8_matmul_efficiency = 0, tf32_matmul_efficiency = 0,
         fp32_matmul_efficiency = 0;
  double attention_efficiency = 0;  // FlashAttention's (a fused kernel measured beside)
  double hbm_efficiency = 0;
  double kernel_issue_us = 0;  // host time to issue one kernel (cudaLaunchKernel)
  // The evidence: every GEMM measured, by precision; the attention kernel's
  // times at [batch, seq, hidden, heads] (the CPU profile's
  // measured_attention rows, used as they are).
  std::map<Precision, std::vector<MeasuredGemmRate>> gemms;
  std::vector<GpuSpec::MeasuredAttention> measured_attention;
};

// The key of a precision's GEMM rows: "gemms_bf16", ...
std::string GemmRowsKey(Precision p);

// Reads one [calibration.NAME] table (no catalog checks: ApplyCalibration).
Result<GpuCalibration> CalibrationFromTable(const std::string& name, const toml::table& t,
                                            const std::string& path, const std::string& context);

// `gpu` with the calibration's measured factors in place of the catalog's.
// An error naming the file and the fix where the calibration was measured on
// another part: its SM count differs from the catalog's, or `device_part` (the
// catalog's reading of the device name, "" if it reads none) is another entry.
Result<GpuSpec> ApplyCalibration(const GpuSpec& gpu, const GpuCalibration& cal,
                                 const std::string& device_part);

// The share of `gpu`'s peak at precision `p` (matmul_efficiency, or FP8's,
// ...) with which the planner's GEMM roofline (GpuRatesFor, GemmSecondsEach:
// tile and wave quantization, gemm_k_overhead; at the burst clock, since a
// calibration times bursts as the catalog's MAMF figures do) takes the
// measured time for `row`'s shape. Found by bisection on the cost model's
// own terms; an error where the catalog has no rate for `p`.
Result<double> ImpliedMatmulEfficiency(const GpuSpec& gpu, Precision p, const MeasuredGemmRate& row);
// The median of ImpliedMatmulEfficiency over the compute-bound rows with
// outputs of at least kFitMinOutputs elements (all compute-bound rows where
// none has); an error where none is compute-bound or the median is above 1
// (the catalog's peak is not this part's).
inline constexpr double kFitMinOutputs = 4.0 * 1024 * 1024;
Result<double> FitMatmulEfficiency(const GpuSpec& gpu, Precision p,
                                   const std::vector<MeasuredGemmRate>& rows);
// The attention_efficiency with which FlashAttentionSeconds (no stack
// slowdown, tp = cp = 1) gives a fused causal attention's measured forward
// plus backward time at [batch, seq, hidden].
double ImpliedAttentionEfficiency(const GpuSpec& gpu, double batch, double seq, double hidden,
                                  double fwd_s, double bwd_s);

// The calibration as a hardware TOML file: a header comment (`header`, each
// line prefixed with "# "), the [calibration.GPU] table with its factors and
// rows. `notes` maps a key to its comment (how it was measured).
std::string CalibrationToToml(const GpuCalibration& cal, const std::string& header,
                              const std::map<std::string, std::string>& notes);

}  // namespace scaletrain::plan
