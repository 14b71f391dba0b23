// bench/gpu_calibrate: measures one GPU (GEMMs by shape and precision, the
// project's attention kernel, streaming bandwidth, kernel issue time), fits
// the planner's efficiency factors to the measurements with the cost model's
// own roofline (plan/gpu_calibration.h), and writes a [calibration.GPU]
// hardware file that `scaletrain plan --hardware FILE` loads. Run through
// bench/gpu_calibrate.sh, which builds it and adds the torch cross-check.
//
//   gpu_calibrate --out FILE [--quick] [--gpu NAME] [--torch TORCH.toml]
//                 [--config-dir DIR] [--budget-s S]
//
// Exit codes: 0 written; 1 an error (the message says which and the fix);
// 77 no CUDA device (nothing measured, nothing written).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/gpu_calibrate.h"
#include "core/strings.h"
#include "plan/gpu_calibration.h"
#include "plan/hardware.h"
#include "plan/toml_util.h"

namespace scaletrain::gpucal {
namespace {

using plan::GpuCalibration;
using plan::GpuSpec;
using plan::MeasuredGemmRate;
using plan::Precision;

constexpr int kNoDeviceExit = 77;

struct Args {
  std::string out, gpu, config_dir, torch;
  bool quick = false;
  double budget_s = 0;  // 0: 50 s quick, 420 s full
};

// How hard each mode measures: seconds of timed runs a GEMM shape aims at,
// at most this many timed runs, the streaming arrays' size.
struct Effort {
  double gemm_target_s = 0.3;
  int gemm_max_reps = 30;
  int64_t stream_bytes = int64_t{1} << 30;
  int stream_reps = 20;
  int attention_reps = 10;
  // Fewer launches than the launch queue holds (about a thousand), so
  // that the host is not made to wait for the GPU.
  int launches = 1000, launch_rounds = 7;
};
Effort EffortFor(bool quick) {
  if (!quick) return {};
  return {0.05, 10, int64_t{256} << 20, 5, 3, 1000, 3};
}

// The planner's weight GEMMs at tp 1 (tokens x hidden, hidden x 4 hidden and
// back): QKV-like (T, h, h), MLP up (T, 4h, h), MLP down (T, h, 4h), for
// tokens and hidden 1k-16k (quick: 2k and 8k). FP32 without tensor cores is
// ~15x slower: its grid stops at 4k.
std::vector<GemmShape> GemmGrid(bool quick, Precision p) {
  std::vector<int64_t> sizes = quick ? std::vector<int64_t>{2048, 8192}
                                     : std::vector<int64_t>{1024, 2048, 4096, 8192, 16384};
  if (p == Precision::kFP32) sizes = quick ? std::vector<int64_t>{2048} : std::vector<int64_t>{1024, 2048, 4096};
  std::vector<GemmShape> shapes;
  for (int64_t tokens : sizes) {
    for (int64_t h : sizes) {
      shapes.push_back({tokens, h, h});
      shapes.push_back({tokens, 4 * h, h});
      shapes.push_back({tokens, h, 4 * h});
    }
  }
  return shapes;
}

// Head dimension 128 (GPT-3 / Llama), 8k-16k tokens a micro-batch.
std::vector<AttentionShape> AttentionGrid(bool quick) {
  if (quick) return {{2, 2048, 2048, 16}};
  return {{8, 1024, 2048, 16}, {4, 2048, 2048, 16}, {2, 4096, 2048, 16}, {1, 8192, 4096, 32}};
}

GemmType GemmTypeOf(Precision p) {
  switch (p) {
    case Precision::kBF16:
      return GemmType::kBF16;
    case Precision::kFP16:
      return GemmType::kFP16;
    case Precision::kFP8:
      return GemmType::kFP8;
    case Precision::kTF32:
      return GemmType::kTF32;
    case Precision::kFP32:
      return GemmType::kFP32;
  }
  return GemmType::kBF16;
}

// What the run found, beside the calibration itself.
struct Run {
  GpuCalibration cal;
  std::map<std::string, std::string> notes;  // key -> how it was measured
  GpuSpec gpu;                               // the catalog's entry
  GpuSpec fitted;                            // with the shares fitted so far (FP8's fit uses bf16's)
  std::vector<std::string> skipped;          // what was not measured, and why
};

Status CheckOutputWritable(const std::string& out) {
  const std::string tmp = out + ".tmp";
  std::ofstream probe(tmp);
  if (!probe) {
    return IoError("cannot write " + out + " (does its folder exist and is it writable?); pass --out to a writable path");
  }
  probe.close();
  std::error_code ignored;
  std::filesystem::remove(tmp, ignored);
  return Status::Ok();
}

// The catalog's entry for the device: --gpu NAME, else the device's own
// name as the catalog reads it; its SM count must agree.
Result<GpuSpec> CatalogGpu(const plan::HardwareCatalog& catalog, const DeviceInfo& d, const std::string& gpu) {
  auto g = catalog.Gpu(gpu.empty() ? d.name : gpu);
  if (!g.ok()) {
    return NotFound("the catalog (configs/hardware) has no entry for " +
                    (gpu.empty() ? "the device '" + d.name + "'" : "--gpu " + gpu) + ": " + g.status().message() +
                    "; pass --gpu NAME (the catalog entry of this part) or add a [gpu.NAME] table with its peaks");
  }
  if (auto own = catalog.Gpu(d.name); own.ok() && own->name != g->name) {
    return InvalidArgument("the device '" + d.name + "' is the catalog's " + own->name + ", not " + g->name +
                           " (--gpu); drop --gpu, or pass --gpu " + own->name);
  }
  if (g->sm_count > 0 && g->sm_count != d.sm_count) {
    return InvalidArgument(Fmt("the device '%s' has %d SMs, the catalog's %s %g: another part; pass --gpu NAME "
                               "for the entry of this part",
                               d.name.c_str(), d.sm_count, g->name.c_str(), g->sm_count));
  }
  return *g;
}

void MeasureLaunches(const Effort& e, Run* run) {
  std::printf("\nkernel launches (%d back-to-back, median of %d rounds)\n", e.launches, e.launch_rounds);
  auto l = TimeLaunches(e.launches, e.launch_rounds);
  if (!l.ok()) {
    run->skipped.push_back("kernel launches: " + l.status().message());
    std::printf("  failed: %s\n", l.status().message().c_str());
    return;
  }
  std::printf("  host issue time per launch (empty kernel): %.3f us\n", l->issue_us);
  std::printf("  GPU time per empty kernel, back to back:   %.3f us\n", l->empty_gpu_us);
  std::printf("  GPU time per 64 KiB copy kernel, back to back: %.3f us\n", l->small_gpu_us);
  run->cal.kernel_issue_us = l->issue_us;
  run->notes["kernel_issue_us"] =
      Fmt("host time per cudaLaunchKernel of an empty kernel, %d back to back, median of %d rounds; on the GPU "
          "%.2f us per empty kernel, %.2f us per 64 KiB copy kernel",
          e.launches, e.launch_rounds, l->empty_gpu_us, l->small_gpu_us);
}

void MeasureBandwidth(const Effort& e, const Budget& budget, Run* run) {
  std::printf("\nstreaming bandwidth (arrays of %.0f MiB, median of %d)\n",
              static_cast<double>(e.stream_bytes) / 1048576.0, e.stream_reps);
  auto b = TimeBandwidth(e.stream_bytes, e.stream_reps, budget);
  if (!b.ok()) {
    run->skipped.push_back("bandwidth: " + b.status().message());
    std::printf("  failed: %s\n", b.status().message().c_str());
    return;
  }
  const double peak_gbps = run->gpu.hbm_tbps * 1000;
  std::printf("  copy kernel:        %8.1f GB/s  (%.3f of the catalog's %.0f GB/s)\n", b->copy_gbps,
              b->copy_gbps / peak_gbps, peak_gbps);
  std::printf("  cudaMemcpy D2D:     %8.1f GB/s  (%.3f)\n", b->memcpy_gbps, b->memcpy_gbps / peak_gbps);
  std::printf("  ResidualForward bf16 (the project's): %8.1f GB/s  (%.3f)\n", b->residual_gbps,
              b->residual_gbps / peak_gbps);
  if (!b->note.empty()) std::printf("  note: %s\n", b->note.c_str());
  if (!(b->copy_gbps > 0)) {
    run->skipped.push_back("bandwidth: " + b->note);
    return;
  }
  if (b->copy_gbps > peak_gbps) {
    const std::string why = Fmt("hbm_efficiency: the copy kernel's %.0f GB/s is above the catalog's %.0f; check "
                                "its hbm_tbps for %s",
                                b->copy_gbps, peak_gbps, run->gpu.name.c_str());
    std::printf("  not written: %s\n", why.c_str());
    run->skipped.push_back(why);
    return;
  }
  run->cal.hbm_efficiency = b->copy_gbps / peak_gbps;
  run->notes["hbm_efficiency"] =
      Fmt("a 16-byte copy kernel over %.0f MiB arrays: %.1f GB/s of the catalog's %.0f (cudaMemcpy %.1f, the "
          "project's residual add %.1f)",
          static_cast<double>(b->bytes) / 1048576.0, b->copy_gbps, peak_gbps, b->memcpy_gbps, b->residual_gbps);
}

// Whether the device and the catalog have a rate for `p`; why not, if not.
std::string WhyNoPrecision(const GpuSpec& gpu, const DeviceInfo& d, Precision p) {
  if (gpu.PeakTflops(p) <= 0) return "the catalog has no " + std::string(PrecisionName(p)) + " rate for " + gpu.name;
  if (p == Precision::kFP8 && d.cc_major * 10 + d.cc_minor < 89) {
    return Fmt("FP8 tensor cores need compute capability 8.9 or later (this device: %d.%d)", d.cc_major, d.cc_minor);
  }
  return "";
}

void PrintGemmRow(const GpuSpec& fitted, Precision p, const GemmTiming& g, std::vector<MeasuredGemmRate>* rows) {
  const GemmShape& s = g.shape;
  if (!(g.median_s > 0)) {
    std::printf("  %6lld x %6lld x %6lld  %s\n", static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), g.note.c_str());
    return;
  }
  const double tflops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) /
                        g.median_s / 1e12;
  const MeasuredGemmRate row{s.m, s.n, s.k, tflops};
  auto implied = plan::ImpliedMatmulEfficiency(fitted, p, row);
  std::printf("  %6lld x %6lld x %6lld  %9.1f TFLOP/s  %.3f of peak  roofline share %s  (%d runs)\n",
              static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), tflops,
              tflops / fitted.PeakTflops(p), implied.ok() ? Fmt("%.3f", *implied).c_str() : "-", g.reps);
  rows->push_back(row);
}

void MeasureGemmPrecision(const DeviceInfo& d, const Effort& e, const Budget& budget, bool quick, Precision p,
                          Run* run) {
  const std::string why = WhyNoPrecision(run->gpu, d, p);
  std::printf("\n%s GEMMs (m tokens x n outputs x k inputs; peak %.1f TFLOP/s)\n", PrecisionName(p),
              run->gpu.PeakTflops(p));
  if (!why.empty()) {
    std::printf("  not measured: %s\n", why.c_str());
    run->skipped.push_back(std::string(PrecisionName(p)) + " GEMMs: " + why);
    return;
  }
  auto timings = TimeGemms(GemmTypeOf(p), GemmGrid(quick, p), run->gpu.PeakTflops(p), e.gemm_target_s,
                           e.gemm_max_reps, budget);
  if (!timings.ok()) {
    std::printf("  failed: %s\n", timings.status().message().c_str());
    run->skipped.push_back(std::string(PrecisionName(p)) + " GEMMs: " + timings.status().message());
    return;
  }
  std::vector<MeasuredGemmRate> rows;
  for (const GemmTiming& g : *timings) PrintGemmRow(run->fitted, p, g, &rows);
  auto fit = plan::FitMatmulEfficiency(run->fitted, p, rows);
  if (!fit.ok()) {
    std::printf("  no share fitted: %s\n", fit.status().message().c_str());
    run->skipped.push_back(std::string(PrecisionName(p)) + " share: " + fit.status().message());
    return;
  }
  run->cal.gemms[p] = rows;
  const std::string key = p == Precision::kBF16 ? "matmul_efficiency" : std::string(PrecisionName(p)) + "_matmul_efficiency";
  const double catalog = run->gpu.MatmulEfficiency(p == Precision::kFP8 ? Precision::kBF16 : p);
  std::printf("  %s = %.4f (catalog: %.4f)\n", key.c_str(), *fit,
              p == Precision::kFP8 && run->gpu.fp8_matmul_efficiency > 0 ? run->gpu.fp8_matmul_efficiency : catalog);
  run->notes[key] = Fmt("median over the %s rows below with >= 4 Mi outputs of the share of the %.1f TFLOP/s peak "
                        "at which the planner's roofline takes the measured time",
                        PrecisionName(p), run->gpu.PeakTflops(p));
  switch (p) {
    case Precision::kBF16:
      run->cal.matmul_efficiency = *fit, run->fitted.matmul_efficiency = *fit;
      break;
    case Precision::kFP16:
      run->cal.fp16_matmul_efficiency = *fit;
      break;
    case Precision::kFP8:
      run->cal.fp8_matmul_efficiency = *fit;
      break;
    case Precision::kTF32:
      run->cal.tf32_matmul_efficiency = *fit;
      break;
    case Precision::kFP32:
      run->cal.fp32_matmul_efficiency = *fit;
      break;
  }
}

void MeasureAttention(const Effort& e, const Budget& budget, bool quick, Run* run) {
  std::printf("\nthe project's attention kernel, bf16 (unfused: cuBLASLt products and a causal softmax; "
              "TFLOP/s count the causal half, as the planner does)\n");
  auto timings = TimeProjectAttention(AttentionGrid(quick), e.attention_reps, run->gpu.PeakTflops(Precision::kBF16),
                                      run->gpu.hbm_tbps, budget);
  if (!timings.ok()) {
    std::printf("  failed: %s\n", timings.status().message().c_str());
    run->skipped.push_back("attention: " + timings.status().message());
    return;
  }
  for (const AttentionTiming& a : *timings) {
    const AttentionShape& s = a.shape;
    std::printf("  batch %lld seq %5lld hidden %5lld heads %2lld: ", static_cast<long long>(s.batch),
                static_cast<long long>(s.seq), static_cast<long long>(s.hidden), static_cast<long long>(s.heads));
    if (!(a.fwd_s > 0 && a.bwd_s > 0)) {
      std::printf("%s\n", a.note.c_str());
      continue;
    }
    const double fwd_flops = 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.seq) *
                             static_cast<double>(s.seq) * static_cast<double>(s.hidden);
    std::printf("forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n", a.fwd_s * 1e3,
                fwd_flops / a.fwd_s / 1e12, a.bwd_s * 1e3, 2.5 * fwd_flops / a.bwd_s / 1e12);
    run->cal.measured_attention.push_back({s.batch, s.seq, s.hidden, s.heads, a.fwd_s, a.bwd_s});
  }
  run->notes["measured_attention"] =
      "the project's unfused CUDA attention (src/kernels/cuda/attention.cu), bf16; the planner takes these for "
      "stacks without FlashAttention at exactly these shapes";
  std::printf("  cuDNN's fused attention is not measured (its graph API needs cudnn-frontend, not installed); "
              "FlashAttention's share comes from torch's SDPA where torch is present\n");
}

// ---- the torch cross-check (bench/gpu_calibrate_torch.py's file) ----

struct TorchResults {
  std::string version, device, sdpa_backend;
  std::map<Precision, std::vector<std::vector<double>>> gemms;  // [m, n, k, seconds]
  std::vector<std::vector<double>> sdpa;                        // [batch, seq, hidden, heads, fwd s, bwd s]
};

Result<TorchResults> ReadTorch(const std::string& path) {
  ST_ASSIGN_OR_RETURN(const toml::table t, plan::ParseTomlFile(path));
  TorchResults r;
  plan::TableReader reader(path);
  reader.Add("torch", &r.version, true);
  reader.Add("device", &r.device, true);
  reader.Add("sdpa_backend", &r.sdpa_backend);
  reader.Add("gemms_bf16", &r.gemms[Precision::kBF16], 4);
  reader.Add("gemms_fp16", &r.gemms[Precision::kFP16], 4);
  reader.Add("gemms_tf32", &r.gemms[Precision::kTF32], 4);
  reader.Add("sdpa", &r.sdpa, 6);
  ST_RETURN_IF_ERROR(reader.Read(t));
  return r;
}

// ours / torch for every shape both measured.
void PrintTorchRatios(const TorchResults& torch, const Run& run) {
  std::printf("\ntorch %s cross-check (torch.matmul of x[m, k] and w[n, k]^T, CUDA events, median)\n",
              torch.version.c_str());
  int matched = 0;
  for (const auto& [p, rows] : torch.gemms) {
    auto ours = run.cal.gemms.find(p);
    for (const auto& row : rows) {
      if (ours == run.cal.gemms.end() || !(row[3] > 0)) continue;
      for (const MeasuredGemmRate& g : ours->second) {
        if (static_cast<double>(g.m) != row[0] || static_cast<double>(g.n) != row[1] ||
            static_cast<double>(g.k) != row[2]) {
          continue;
        }
        const double torch_tflops = 2.0 * row[0] * row[1] * row[2] / row[3] / 1e12;
        std::printf("  %s %6.0f x %6.0f x %6.0f: ours %7.1f, torch %7.1f TFLOP/s, ours/torch %.3f\n",
                    PrecisionName(p), row[0], row[1], row[2], g.tflops, torch_tflops, g.tflops / torch_tflops);
        ++matched;
      }
    }
  }
  if (matched == 0) std::printf("  no shape measured by both\n");
}

// FlashAttention's share from torch's scaled_dot_product_attention.
void TorchAttention(const TorchResults& torch, Run* run) {
  std::vector<double> shares;
  for (const auto& row : torch.sdpa) {
    if (!(row[4] > 0 && row[5] > 0)) continue;
    const double share = plan::ImpliedAttentionEfficiency(run->gpu, row[0], row[1], row[2], row[4], row[5]);
    std::printf("  SDPA (%s) batch %.0f seq %.0f hidden %.0f heads %.0f: forward %.3f ms, backward %.3f ms, "
                "attention share %.3f\n",
                torch.sdpa_backend.c_str(), row[0], row[1], row[2], row[3], row[4] * 1e3, row[5] * 1e3, share);
    shares.push_back(share);
  }
  if (shares.empty()) return;
  std::sort(shares.begin(), shares.end());
  const size_t n = shares.size();
  const double median = n % 2 ? shares[n / 2] : 0.5 * (shares[n / 2 - 1] + shares[n / 2]);
  if (median > 1.0) {
    const std::string why = Fmt("attention_efficiency: torch's SDPA share %.3f is above the bf16 peak; check the "
                                "catalog's bf16_tflops for %s and torch's timings",
                                median, run->gpu.name.c_str());
    std::printf("  not written: %s\n", why.c_str());
    run->skipped.push_back(why);
    return;
  }
  run->cal.attention_efficiency = median;
  run->notes["attention_efficiency"] =
      Fmt("torch %s scaled_dot_product_attention (%s backend), causal bf16, head dim 128: median over %zu sequence "
          "lengths of the share at which the planner's FlashAttention term takes the measured forward + backward",
          torch.version.c_str(), torch.sdpa_backend.c_str(), n);
  std::printf("  attention_efficiency = %.4f (catalog: %.4f)\n", run->cal.attention_efficiency,
              run->gpu.attention_efficiency);
}

void CrossCheckTorch(const std::string& path, Run* run) {
  if (path.empty()) {
    std::printf("\ntorch cross-check: none (no --torch file); attention_efficiency stays the catalog's\n");
    run->skipped.push_back("attention_efficiency: no torch SDPA measurement (the catalog's stays)");
    return;
  }
  auto torch = ReadTorch(path);
  if (!torch.ok()) {
    std::printf("\ntorch cross-check: cannot read %s: %s\n", path.c_str(), torch.status().message().c_str());
    run->skipped.push_back("torch cross-check: " + torch.status().message());
    return;
  }
  PrintTorchRatios(*torch, *run);
  TorchAttention(*torch, run);
}

// ---- the profile ----

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string Header(const DeviceInfo& d, const Run& run, const std::string& cluster, const std::string& out,
                   double elapsed_s) {
  std::string h = "GPU calibration written by bench/gpu_calibrate.sh (" + run.cal.mode + " mode, " +
                  Fmt("%.0f s", elapsed_s) + ", " + UtcNow() + ")\n";
  h += Fmt("device: %s (compute capability %d.%d, %d SMs, %.1f GiB); %s\n", d.name.c_str(), d.cc_major, d.cc_minor,
           d.sm_count, d.memory_gib, d.software.c_str());
  h += "Each factor is a share of the catalog's peak for " + run.gpu.name +
       " (configs/hardware/gpus.toml) with which the planner's own terms take the measured time:\n"
       "docs/planner.md, \"A GPU's own calibration\". Rates were timed in bursts on one idle GPU, as the\n"
       "catalog's MAMF figures were: the catalog's sustained_clock_ratio still applies on top.\n";
  for (const std::string& s : run.skipped) h += "not measured: " + s + "\n";
  h += "use: scaletrain plan --hardware " + out + " --cluster " + (cluster.empty() ? "<a cluster of " + run.gpu.name + ">" : cluster) + " ...";
  return h;
}

Status WriteProfile(const std::string& out, const std::string& text, const std::string& config_dir) {
  const std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f) return IoError("error writing " + tmp + " (disk full?)");
  }
  // It must load as the planner will load it, before it replaces anything.
  plan::HardwareCatalog check;
  ST_RETURN_IF_ERROR(check.LoadDir(config_dir + "/hardware"));
  std::error_code ec;
  if (Status st = check.LoadFile(tmp); !st.ok()) {
    std::filesystem::remove(tmp, ec);
    return st.WithContext("the profile as written does not load (a bug: please report it)");
  }
  std::filesystem::rename(tmp, out, ec);
  if (ec) return IoError("cannot rename " + tmp + " to " + out + ": " + ec.message());
  return Status::Ok();
}

Status Calibrate(const Args& a) {
  ST_RETURN_IF_ERROR(CheckOutputWritable(a.out));
  std::string config_dir = a.config_dir;
  if (config_dir.empty()) {
    ST_ASSIGN_OR_RETURN(config_dir, plan::FindConfigDir());
  }
  plan::HardwareCatalog catalog;
  ST_RETURN_IF_ERROR(catalog.LoadDir(config_dir + "/hardware"));
  ST_ASSIGN_OR_RETURN(const DeviceInfo d, OpenDevice());
  Run run;
  ST_ASSIGN_OR_RETURN(run.gpu, CatalogGpu(catalog, d, a.gpu));
  run.fitted = run.gpu;
  run.cal.gpu = run.gpu.name, run.cal.device = d.name, run.cal.sm_count = d.sm_count;
  run.cal.compute_capability = Fmt("%d.%d", d.cc_major, d.cc_minor);
  run.cal.software = d.software;
  run.cal.mode = a.quick ? "quick" : "full";
  const Budget budget(a.budget_s > 0 ? a.budget_s : a.quick ? 50.0 : 420.0);
  const Effort e = EffortFor(a.quick);
  std::printf("gpu_calibrate: %s (compute capability %d.%d, %d SMs, %.1f GiB) as the catalog's %s; %s mode, "
              "budget %.0f s\n%s\n",
              d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count, d.memory_gib, run.gpu.name.c_str(),
              run.cal.mode.c_str(), budget.LeftSeconds(), d.software.c_str());
  MeasureLaunches(e, &run);
  MeasureBandwidth(e, budget, &run);
  for (Precision p : {Precision::kBF16, Precision::kFP16, Precision::kFP8, Precision::kTF32, Precision::kFP32}) {
    MeasureGemmPrecision(d, e, budget, a.quick, p, &run);
  }
  // The project's kernel last: it has never run on a device before, and a
  // fault in it must not cost the figures above.
  MeasureAttention(e, budget, a.quick, &run);
  CrossCheckTorch(a.torch, &run);
  auto cluster = catalog.ClusterForGpu(run.gpu.name);
  const std::string text = plan::CalibrationToToml(
      run.cal, Header(d, run, cluster.ok() ? cluster->name : "", a.out, budget.ElapsedSeconds()), run.notes);
  ST_RETURN_IF_ERROR(WriteProfile(a.out, text, config_dir));
  std::printf("\nprofile written to %s in %.0f s; use: scaletrain plan --hardware %s --cluster %s ...\n",
              a.out.c_str(), budget.ElapsedSeconds(), a.out.c_str(),
              cluster.ok() ? cluster->name.c_str() : ("<a cluster of " + run.gpu.name + ">").c_str());
  return Status::Ok();
}

}  // namespace
}  // namespace scaletrain::gpucal

int main(int argc, char** argv) {
  using scaletrain::gpucal::Args;
  Args a;
  CLI::App app{"Measure this GPU and write a calibration the planner loads (scaletrain plan --hardware FILE)"};
  app.add_option("--out", a.out, "the calibration TOML to write")->required();
  app.add_flag("--quick", a.quick, "a smaller grid and fewer runs (under a minute)");
  app.add_option("--gpu", a.gpu, "the catalog entry of this part (default: the device's name as the catalog reads it)");
  app.add_option("--torch", a.torch, "results of bench/gpu_calibrate_torch.py: ours/torch ratios, FlashAttention's share");
  app.add_option("--config-dir", a.config_dir, "folder with hardware/ (default: ./configs)");
  app.add_option("--budget-s", a.budget_s, "wall-clock budget of the measurements (default 50 quick, 420 full)");
  CLI11_PARSE(app, argc, argv);
  const scaletrain::Status st = scaletrain::gpucal::Calibrate(a);
  if (st.ok()) return 0;
  if (st.code() == scaletrain::StatusCode::kNotFound && st.message().rfind("no CUDA device", 0) == 0) {
    std::fprintf(stderr, "gpu_calibrate: skipped: %s; run it on a machine with an NVIDIA GPU\n", st.message().c_str());
    return scaletrain::gpucal::kNoDeviceExit;
  }
  std::fprintf(stderr, "error: %s\n", st.message().c_str());
  return 1;
}
