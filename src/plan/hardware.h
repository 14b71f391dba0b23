// The hardware catalog: GPUs, nodes, fabrics and the cluster presets built
// from them, read from TOML files (configs/hardware/*.toml) that a user can
// extend with their own file. Every number the cost model uses about a
// machine lives here, so a prediction can be traced to a cited figure.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace scaletrain::plan {

enum class Precision { kBF16, kFP16, kFP8, kTF32, kFP32 };
const char* PrecisionName(Precision p);
Result<Precision> PrecisionFromName(const std::string& name);

struct GpuSpec {
  std::string name;
  std::string description;
  double bf16_tflops = 0, fp16_tflops = 0, fp8_tflops = 0, tf32_tflops = 0, fp32_tflops = 0;
  double hbm_gib = 0;
  double hbm_tbps = 0;
  double tdp_w = 0;
  // Achieved fraction of peak for the three kinds of work the cost model
  // separates; each is justified in configs/hardware/gpus.toml and
  // docs/planner.md.
  double matmul_efficiency = 0.8;
  double hbm_efficiency = 0.85;
  double attention_efficiency = 0.5;
  // Tensor-core clock held under sustained dense-matmul load (the GPU at its
  // power limit) relative to the short benchmarks matmul_efficiency and
  // attention_efficiency come from (MAMF, the FlashAttention papers): scales
  // both rates, not HBM bandwidth. 1 where the rates are already sustained.
  double sustained_clock_ratio = 1.0;
  // Spread of that sustained rate from GPU to GPU of one part (silicon,
  // cooling, power delivery), as a relative standard deviation: a synchronous
  // job runs at its slowest GPU's pace (SlowestGpuFactor). 0: not modelled.
  double speed_spread = 0;
  // Static power (W) the GPU draws whatever its clock: the part of tdp_w a
  // power cap cannot take from the clock (PowerCapped); 0: 10% of tdp_w.
  double idle_w = 0;
  // A GEMM's fixed work per output tile (loading its pipeline, writing the
  // tile out) in units of its depth k: an m x n x k GEMM takes as long as
  // m x n x (k + gemm_k_overhead) at the large-k rate (GemmSecondsEach).
  // 0: not modelled (no measurement for the part).
  double gemm_k_overhead = 0;
  // Achieved / peak of a large FP8 GEMM (E4M3 x E4M3 or E4M3 x E5M2 into
  // bf16), where it differs from matmul_efficiency's bf16 share; 0: the same
  // share. Transformer Engine runs only the layers' Linear GEMMs in FP8
  // (GpuRatesFor).
  double fp8_matmul_efficiency = 0;
  // Streaming multiprocessors (compute units): a GEMM's output tiles run in
  // waves of this many, so a last partial wave idles the rest (wave
  // quantization). 0 = not modelled.
  double sm_count = 0;
  std::string reference_cluster;
  // The factors above the catalog could not source for this part (its
  // `assumed` list: matmul_efficiency, attention_efficiency, hbm_efficiency,
  // sustained_clock_ratio): the prediction's range gives them the spread of
  // the measured parts' values, not their own measurement's (uncertainty.h).
  std::vector<std::string> assumed;
  // Under a power cap (PowerCapped): the share of the power above idle the
  // cap leaves, (cap - idle) / (tdp - idle); 1 uncapped. The range takes the
  // clock under it from this share (uncertainty.h).
  double capped_power_share = 1.0;
  // Measured by `scaletrain bench` on this device (profiles only): the rate
  // of a GEMM of output m x n and depth k as the trainer runs it, forward
  // (2mnk FLOPs) and backward (both gradients, 4mnk); and the attention
  // kernel's time at micro-batch b, sequence s, hidden h, heads a. The cost
  // model uses a measurement where the shape is exactly the one it charges,
  // and its roofline elsewhere.
  struct MeasuredGemm {
    int64_t m = 0, n = 0, k = 0;
    double fwd_tflops = 0, bwd_tflops = 0;
  };
  struct MeasuredAttention {
    int64_t batch = 0, seq = 0, hidden = 0, heads = 0;
    double fwd_s = 0, bwd_s = 0;
  };
  std::vector<MeasuredGemm> measured_gemms;
  std::vector<MeasuredAttention> measured_attention;
  // One micro-batch through a whole model at one rank (the trainer's
  // forward and backward, kernels in a step's order): the cost model scales
  // its kernel-by-kernel compute for that model by measured / predicted.
  struct MeasuredModelStep {
    int64_t batch = 0, seq = 0, hidden = 0, heads = 0, layers = 0, vocab = 0;
    double fwd_s = 0, bwd_s = 0;
  };
  std::vector<MeasuredModelStep> measured_model_step;
  // Set by a GPU calibration (gpu_calibration.h, bench/gpu_calibrate.sh):
  // the share of the fp16 / tf32 / fp32 peak a GEMM reaches where it was
  // measured apart from bf16's matmul_efficiency (0: matmul_efficiency); the
  // host time to issue one kernel, in place of the part of a stack's
  // launch_us that is cudaLaunchKernel (0: not measured); the file applied.
  double fp16_matmul_efficiency = 0, tf32_matmul_efficiency = 0, fp32_matmul_efficiency = 0;
  double kernel_issue_us = 0;
  std::string calibration;

  // Dense tensor-core peak for `p` in TFLOP/s; 0 if the GPU lacks it.
  double PeakTflops(Precision p) const;
  // The achieved share of that peak a large GEMM reaches: matmul_efficiency,
  // or the precision's own where a calibration measured it (FP8's is
  // GpuRatesFor's).
  double MatmulEfficiency(Precision p) const;
};

struct GpuCalibration;  // gpu_calibration.h

struct NodeSpec {
  std::string name;
  int64_t gpus_per_node = 8;
  std::string intra_kind;     // nvswitch, pcie, xgmi
  double intra_gbps = 0;      // GB/s per GPU, one direction
  double intra_efficiency = 0.8;
  double intra_latency_us = 8;
  double max_power_kw = 0;    // whole node at full load
  double overhead_w = 0;      // max_power minus the GPUs' TDP
  // Figures not sourced for this node (its `assumed` list: intra_efficiency):
  // the range gives them the spread of links in general (uncertainty.h).
  std::vector<std::string> assumed;
};

struct FabricSpec {
  std::string name;
  std::string kind;
  int64_t nics_per_node = 1;
  double nic_gbit = 0;
  double efficiency = 0.9;
  double latency_us = 5;
  // Measured profiles: the rate one GPU's point-to-point message to another
  // node reaches (pipeline sends), when it differs from its share of the
  // collectives' nic_gbit; 0: that share.
  double p2p_gbit = 0;
  // Figures not sourced for this fabric (its `assumed` list: efficiency):
  // the range gives them the spread of links in general (uncertainty.h).
  std::vector<std::string> assumed;
};

// Whether `field` is in an `assumed` list of the catalog.
bool IsAssumed(const std::vector<std::string>& assumed, const std::string& field);

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  NodeSpec node;
  FabricSpec fabric;
  double usd_per_gpu_hour = 0;
  double pue = 1.2;
  // Checkpoint storage and failures, for goodput (goodput.h), where a preset
  // has a figure with its source; 0: none (the plan's flags give them). The
  // storage rates are what the whole job's checkpoint reaches, in GB/s.
  double storage_write_gbps = 0, storage_read_gbps = 0;
  double mtbf_hours = 0;         // of one node or GPU (mtbf_per)
  std::string mtbf_per = "node";
  double relaunch_s = 0;         // a restart's relaunch, the checkpoint read aside

  // Achievable bus bandwidth (bytes/s) for a collective among GPUs of one node.
  double IntraBusBytesPerS() const { return node.intra_gbps * 1e9 * node.intra_efficiency; }
  // Achievable scale-out bandwidth (bytes/s) of one GPU's share of its node's NICs.
  double NicBytesPerSPerGpu() const {
    return fabric.nics_per_node * fabric.nic_gbit / 8.0 * 1e9 * fabric.efficiency /
           static_cast<double>(node.gpus_per_node);
  }
};

// A fleet's variant of a catalogued GPU; 0: as catalogued.
struct GpuVariantSpec {
  double power_cap_w = 0, hbm_gib = 0, hbm_tbps = 0;
};

class HardwareCatalog {
 public:
  // Adds every [gpu.X], [node.X], [fabric.X], [cluster.X] table of the file;
  // a later file may redefine an entry (a user's own numbers win).
  Status LoadFile(const std::string& path);
  // Loads every *.toml file of `dir` in name order.
  Status LoadDir(const std::string& dir);

  Result<GpuSpec> Gpu(const std::string& name) const;
  Result<ClusterSpec> Cluster(const std::string& name) const;
  // The reference cluster of a GPU (used when a published run names only the GPU).
  Result<ClusterSpec> ClusterForGpu(const std::string& gpu_name) const;

  std::vector<std::string> GpuNames() const;
  std::vector<std::string> ClusterNames() const;
  // Where GPU calibrations were loaded (a [calibration.GPU] table), an
  // error naming them and the fix if none calibrates `c`'s GPU: the profile
  // would change nothing, so it was meant for another cluster.
  Status CheckCalibrationApplies(const ClusterSpec& c) const;

 private:
  struct ClusterRef {
    std::string gpu, node, fabric;
    double usd_per_gpu_hour = 0, pue = 1.2;
    double storage_write_gbps = 0, storage_read_gbps = 0, mtbf_hours = 0, relaunch_s = 0;
    std::string mtbf_per = "node";
    // A fleet's variant of the GPU: a power cap (W) and a memory size (GiB); 0: as catalogued.
    GpuVariantSpec variant;
  };
  std::map<std::string, GpuSpec> gpus_;
  std::map<std::string, NodeSpec> nodes_;
  std::map<std::string, FabricSpec> fabrics_;
  std::map<std::string, ClusterRef> clusters_;
  // GPU name -> the calibration applied to it: "FILE (measured on DEVICE)".
  std::map<std::string, std::string> calibrated_;
  // Applies a calibration read from a file to its catalog entry.
  Status AddCalibration(const GpuCalibration& cal);
};

// The GPU under a power cap (W): what it draws above idle_w is dynamic power,
// C V^2 f with the voltage following the clock along the DVFS curve, so about
// f^3; the clock it sustains under the cap is the one at tdp_w times
// ((cap - idle) / (tdp - idle))^(1/3). tdp_w becomes the cap (energy, power).
// A cap at or above tdp_w changes nothing; one at or below idle_w is an error.
Result<GpuSpec> PowerCapped(const GpuSpec& g, double cap_w);
// The GPU with another memory size (a 94 or 96 GB part of an 80 GB design).
Result<GpuSpec> WithMemory(const GpuSpec& g, double hbm_gib);
// The GPU with another memory bandwidth (TB/s): an HBM2e part of an HBM3
// design (H100 96 GB HBM2e: 2.4 TB/s).
Result<GpuSpec> WithBandwidth(const GpuSpec& g, double hbm_tbps);
// PowerCapped, WithMemory and WithBandwidth, each where its value is not 0.
// A cluster preset's, `plan --power-cap --hbm-gib --hbm-tbps` and a
// validation row's columns all go through here.
Result<GpuSpec> GpuVariant(const GpuSpec& g, const GpuVariantSpec& v);
// The memory a GPU's name states ("H100 94GB", "H100 SXM5 96GB HBM2e": GB are
// 1e9 bytes), in GiB, where it is not the catalogued part's (more than 5%
// apart); 0 otherwise. A validation row without an hbm_gib column runs that
// variant of the part.
double StatedMemoryGib(const std::string& gpu_name, const GpuSpec& part);

// "unknown cluster 'x'; did you mean 'y'? known: a, b, c" — the shared form
// of every unknown-name error in the planner.
std::string UnknownNameMessage(const std::string& what, const std::string& name,
                               const std::vector<std::string>& known);

// Where configs/ is: $SCALETRAIN_CONFIG_DIR, ./configs, or configs/ beside
// (or up to three levels above) the running executable.
Result<std::string> FindConfigDir();

// The expected pace of the slowest of `gpus` GPUs relative to a typical one,
// for a relative spread `spread` of their sustained rates: 1 - spread x z, z
// the expected largest of `gpus` standard normal draws (Blom's
// approximation, the normal quantile at (n - 0.375) / (n + 0.25)).
double SlowestGpuFactor(double spread, int64_t gpus);
// `gpu` as it runs in a job of `gpus` of them: its sustained clock scaled by
// SlowestGpuFactor.
GpuSpec PacedBySlowest(GpuSpec gpu, int64_t gpus);

}  // namespace scaletrain::plan
