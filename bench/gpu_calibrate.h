// The measurements of bench/gpu_calibrate (one GPU, CUDA events, medians),
// in plain C++ so that the host side (gpu_calibrate.cpp: the catalog, the
// fits, the profile) is compiled without CUDA headers. Implemented in
// gpu_calibrate_measure.cu. Every call checks every CUDA and cuBLASLt return
// code and frees what it allocated, on success and on error.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace scaletrain::gpucal {

// The wall-clock allowance of the whole run: a measurement whose estimate
// does not fit in what is left is skipped (and says so), so the run never
// overruns.
class Budget {
 public:
  explicit Budget(double seconds) : limit_s_(seconds), start_(std::chrono::steady_clock::now()) {}
  double ElapsedSeconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double LeftSeconds() const { return limit_s_ - ElapsedSeconds(); }
  bool Allows(double estimate_s) const { return estimate_s <= LeftSeconds(); }

 private:
  double limit_s_;
  std::chrono::steady_clock::time_point start_;
};

struct DeviceInfo {
  std::string name;  // as the driver reports it: "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  double memory_gib = 0;
  std::string software;  // "CUDA runtime 13.0, driver 13.0, cuBLASLt 130000"
};
// Device 0, made current. NotFound where there is no CUDA device (the
// message says why: the runtime's error).
Result<DeviceInfo> OpenDevice();

enum class GemmType { kBF16, kFP16, kFP8, kTF32, kFP32 };

// One GEMM as the trainer's Linear forward runs it: out[m, n] = x[m, k] @
// w[n, k]^T (cuBLASLt "TN", the layout FP8 requires), m tokens, n output
// features, k input features; random inputs in [-1, 1].
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
};
struct GemmTiming {
  GemmShape shape;
  double median_s = 0;  // 0: not measured (see note)
  int reps = 0;
  std::string note;  // why not measured: "no cuBLASLt algorithm", "time budget", ...
};
// Each shape with a few warm-up calls, then `reps` (3 to max_reps, as many
// as fit in about target_s) timed one by one with CUDA events; shapes whose
// buffers do not fit in 70% of free memory, or whose estimate (at
// `peak_tflops` x 0.25) does not fit the budget, are left with a note.
Result<std::vector<GemmTiming>> TimeGemms(GemmType type, const std::vector<GemmShape>& shapes, double peak_tflops,
                                          double target_s, int max_reps, const Budget& budget);

struct BandwidthTiming {
  double copy_gbps = 0;      // a grid-stride 16-byte copy kernel: 2 x bytes per run
  double memcpy_gbps = 0;    // cudaMemcpyAsync device to device
  double residual_gbps = 0;  // the project's ResidualForward<bf16> (out = a + b): 3 x bytes
  int64_t bytes = 0;         // each array
  std::string note;
};
// Streaming bandwidth on arrays of `bytes` each (much larger than L2).
Result<BandwidthTiming> TimeBandwidth(int64_t bytes, int reps, const Budget& budget);

struct LaunchTiming {
  double issue_us = 0;         // host time per launch of an empty kernel, queue not full
  double empty_gpu_us = 0;     // back-to-back empty kernels, CUDA events / count
  double small_gpu_us = 0;     // back-to-back 64 KiB copy kernels, CUDA events / count
  int launches = 0;
};
Result<LaunchTiming> TimeLaunches(int launches, int rounds);

struct AttentionShape {
  int64_t batch = 0, seq = 0, hidden = 0, heads = 0;
};
struct AttentionTiming {
  AttentionShape shape;
  double fwd_s = 0, bwd_s = 0;  // 0: not measured (see note)
  std::string note;
};
// The project's CUDA attention (src/kernels/cuda/attention.cu: cuBLASLt
// products over per-head copies and a fused causal softmax; not a fused
// FlashAttention kernel) in bf16, forward and backward, medians of `reps`.
Result<std::vector<AttentionTiming>> TimeProjectAttention(const std::vector<AttentionShape>& shapes, int reps,
                                                          double bf16_peak_tflops, double hbm_tbps,
                                                          const Budget& budget);

}  // namespace scaletrain::gpucal
