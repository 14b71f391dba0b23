// A GPU calibration (plan/gpu_calibration.h): the factors fitted from
// measured GEMMs against the roofline written out by hand, a profile
// written by hand loaded through the catalog and changing the prediction by
// the ratio it states, and every bad or mismatched profile refused with the
// file and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/strings.h"
#include "plan/compute_terms.h"
#include "plan/cost_model.h"
#include "plan/gpu_calibration.h"
#include "plan/hardware.h"
#include "plan/model_preset.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

bool Has(const Status& st, const std::string& text) { return st.message().find(text) != std::string::npos; }

// A file in the test's temporary folder holding `text`.
std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "st_test_plan_calibration";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

HardwareCatalog Catalog() {
  HardwareCatalog cat;
  EXPECT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  return cat;
}

// The catalog with `text` loaded as a --hardware file: its status.
Status LoadInto(HardwareCatalog* cat, const std::string& name, const std::string& text) {
  return cat->LoadFile(WriteTemp(name, text));
}

// ---- the fit ----

// The H100 SXM of the catalog, with round factors the arithmetic below uses.
GpuSpec RoundH100() {
  GpuSpec g = *Catalog().Gpu("h100-sxm");
  g.bf16_tflops = 1000, g.tf32_tflops = 500, g.sm_count = 132, g.gemm_k_overhead = 130;
  return g;
}

TEST(PlanCalibration, ImpliedEfficiencyInvertsTheRooflineByHand) {
  const GpuSpec g = RoundH100();
  // 8192^3 on 132 SMs: 2048 tiles of 256x128 in 16 waves keep 2048 / (16 x
  // 132) of the SMs busy; at a share e of the peak (burst clock), the depth
  // overhead counted as more depth and the rate raised by it at the depth
  // the factor is measured at: t = 2 x 8192^2 x (8192 + 130) /
  // (1e15 x e x (1 + 130 / 16384) x util).
  const double util = 2048.0 / (16 * 132), m = 8192;
  const auto time_at = [&](double e, double peak) {
    return 2 * m * m * (m + 130) / (peak * e * (1 + 130.0 / 16384) * util);
  };
  const double t = time_at(0.6, 1e15);
  const MeasuredGemmRate row{8192, 8192, 8192, 2 * m * m * m / t / 1e12};
  auto e = ImpliedMatmulEfficiency(g, Precision::kBF16, row);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_NEAR(*e, 0.6, 1e-9);
  // TF32: the same against its own peak.
  const MeasuredGemmRate tf32{8192, 8192, 8192, 2 * m * m * m / time_at(0.7, 5e14) / 1e12};
  auto e32 = ImpliedMatmulEfficiency(g, Precision::kTF32, tf32);
  ASSERT_TRUE(e32.ok()) << e32.status().message();
  EXPECT_NEAR(*e32, 0.7, 1e-9);
  // A rate above 4x the peak: the catalog's peak must be wrong.
  auto fast = ImpliedMatmulEfficiency(g, Precision::kBF16, {8192, 8192, 8192, 5000});
  ASSERT_FALSE(fast.ok());
  EXPECT_TRUE(Has(fast.status(), "faster than 4x h100-sxm's catalog peak allows; check the catalog's bf16_tflops"))
      << fast.status().message();
}

TEST(PlanCalibration, FitIsTheMedianOfTheLargeShapes) {
  const GpuSpec g = RoundH100();
  // Rows whose implied shares are 0.5, 0.6 and 0.7 (large outputs) and one
  // small output at 0.1 that the median over large outputs leaves out.
  std::vector<MeasuredGemmRate> rows;
  for (const auto& [m, n, k, e] : std::vector<std::tuple<int64_t, int64_t, int64_t, double>>{
           {8192, 8192, 8192, 0.5}, {4096, 16384, 4096, 0.7}, {16384, 4096, 16384, 0.6}, {1024, 1024, 1024, 0.1}}) {
    MeasuredGemmRate r{m, n, k, 1};
    auto at_one = ImpliedMatmulEfficiency(g, Precision::kBF16, r);  // share at 1 TFLOP/s
    ASSERT_TRUE(at_one.ok());
    r.tflops = e / *at_one;  // the share is proportional to the rate
    rows.push_back(r);
  }
  auto fit = FitMatmulEfficiency(g, Precision::kBF16, rows);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  EXPECT_NEAR(*fit, 0.6, 1e-9);
  // Only small shapes: their median is all there is.
  auto small = FitMatmulEfficiency(g, Precision::kBF16, {rows[3]});
  ASSERT_TRUE(small.ok());
  EXPECT_NEAR(*small, 0.1, 1e-9);
  // A median above the peak: the catalog's peak is not this part's.
  MeasuredGemmRate fast = rows[0];
  fast.tflops *= 1.3 / 0.5;
  auto above = FitMatmulEfficiency(g, Precision::kBF16, {fast});
  ASSERT_FALSE(above.ok());
  EXPECT_TRUE(Has(above.status(), "the fitted bf16 share is 1.300, above the catalog's peak (1000 TFLOP/s for "
                                  "h100-sxm); check the catalog's bf16_tflops for this part"))
      << above.status().message();
}

TEST(PlanCalibration, AttentionShareInvertsFlashAttention) {
  GpuSpec g = RoundH100();
  // Causal forward 0.5 x 4 b s^2 h, backward 2.5x: at b 2, s 4096, h 4096
  // and a share e, (1 + 2.5) x 2 x 4096^3 x 2 / (1e15 x e x 4096 / 4352).
  const double flops = 3.5 * 0.5 * 4 * 2 * 4096.0 * 4096 * 4096;
  const double total_s = flops / (1e15 * 0.42 * 4096 / (4096 + 256.0));
  EXPECT_NEAR(ImpliedAttentionEfficiency(g, 2, 4096, 4096, total_s / 3.5, 2.5 * total_s / 3.5), 0.42, 1e-12);
}

// ---- loading a profile ----

// A hand-written calibration of the catalog's H100 SXM with every kernel
// factor at half the catalog's: the step of a layout on one GPU (compute and
// the optimizer, no communication) takes twice as long.
TEST(PlanCalibration, HalfTheFactorsDoublesTheStep) {
  HardwareCatalog cat = Catalog();
  const GpuSpec before = *cat.Gpu("h100-sxm");
  const std::string path = WriteTemp(
      "half.toml", Fmt("[calibration.h100-sxm]\ndevice = \"NVIDIA H100 80GB HBM3\"\nsm_count = 132\n"
                       "matmul_efficiency = %.17g\nattention_efficiency = %.17g\nhbm_efficiency = %.17g\n",
                       before.matmul_efficiency / 2, before.attention_efficiency / 2, before.hbm_efficiency / 2));
  ASSERT_TRUE(cat.LoadFile(path).ok());
  const GpuSpec after = *cat.Gpu("h100-sxm");
  EXPECT_EQ(after.calibration, path);
  EXPECT_DOUBLE_EQ(after.matmul_efficiency, before.matmul_efficiency / 2);
  auto cluster = cat.Cluster("dgx-h100");
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(cluster->gpu.calibration, path);
  EXPECT_TRUE(cat.CheckCalibrationApplies(*cluster).ok());

  auto preset = LoadModel("gpt3-1.3b", kConfigs);
  ASSERT_TRUE(preset.ok());
  Layout l;
  l.micro_batch = 1, l.global_batch = 8;
  auto base = CostModel(preset->spec, *Catalog().Cluster("dgx-h100"), *ShippedStack("modern")).Predict(l);
  auto cal = CostModel(preset->spec, *cluster, *ShippedStack("modern")).Predict(l);
  ASSERT_TRUE(base.ok() && cal.ok());
  EXPECT_NEAR(cal->time_s.compute / base->time_s.compute, 2.0, 1e-9);
  EXPECT_NEAR(cal->step_time_s / base->step_time_s, 2.0, 1e-9);
}

TEST(PlanCalibration, PrecisionSharesAndIssueTime) {
  HardwareCatalog cat = Catalog();
  const GpuSpec before = *cat.Gpu("h100-sxm");
  ASSERT_TRUE(LoadInto(&cat, "prec.toml",
                       "[calibration.h100-sxm]\ndevice = \"NVIDIA H100 80GB HBM3\"\n"
                       "tf32_matmul_efficiency = 0.5\nfp16_matmul_efficiency = 0.7\nkernel_issue_us = 10\n")
                  .ok());
  const GpuSpec g = *cat.Gpu("h100-sxm");
  // TF32: 494.7 x 0.5 where the catalog charges 494.7 x matmul_efficiency;
  // bf16 keeps the catalog's share.
  const double ratio = GpuRatesFor(g, Precision::kTF32)->matmul_flops_per_s /
                       GpuRatesFor(before, Precision::kTF32)->matmul_flops_per_s;
  EXPECT_NEAR(ratio, 0.5 / before.matmul_efficiency, 1e-12);
  EXPECT_NEAR(GpuRatesFor(g, Precision::kFP16)->matmul_flops_per_s /
                  GpuRatesFor(before, Precision::kFP16)->matmul_flops_per_s,
              0.7 / before.matmul_efficiency, 1e-12);
  EXPECT_DOUBLE_EQ(GpuRatesFor(g, Precision::kBF16)->matmul_flops_per_s,
                   GpuRatesFor(before, Precision::kBF16)->matmul_flops_per_s);
  // Issuing: the stack's 6 us less the 2.5 us of cudaLaunchKernel it
  // assumes, plus the measured 10; the CPU trainer's 0 stays 0.
  EXPECT_DOUBLE_EQ(KernelLaunchMicroseconds(*ShippedStack("modern"), g), 6 - 2.5 + 10);
  EXPECT_DOUBLE_EQ(KernelLaunchMicroseconds(*ShippedStack("cpu"), g), 0);
  EXPECT_DOUBLE_EQ(KernelLaunchMicroseconds(*ShippedStack("modern"), before), 6);
  // A layer small enough to be bound by issuing takes kernels x 13.5 us.
  LayerShape s;
  s.micro_batch = 1, s.seq = 16, s.tokens = 16, s.hidden = 64, s.ffn_hidden = 256, s.heads = 4, s.head_dim = 16;
  s.kv_dim = 64, s.vocab = 128;
  const Software sw = *ShippedStack("modern");
  const MicroBatchSeconds mb = MicroBatchComputeSeconds(s, g, sw, *GpuRatesFor(g, Precision::kBF16), Recompute::kNone);
  EXPECT_DOUBLE_EQ(mb.layer.fwd, LayerKernels(s, sw).fwd * 13.5e-6);
}

TEST(PlanCalibration, WrittenProfileLoadsBack) {
  GpuCalibration c;
  c.gpu = "h200", c.device = "NVIDIA H200", c.sm_count = 132, c.compute_capability = "9.0", c.mode = "quick";
  c.software = "CUDA 13.0 \"test\"";
  c.matmul_efficiency = 0.7812, c.fp8_matmul_efficiency = 0.6543, c.hbm_efficiency = 0.9, c.kernel_issue_us = 2.25;
  c.gemms[Precision::kBF16] = {{4096, 4096, 4096, 712.5}, {8192, 32768, 8192, 745.25}};
  c.measured_attention = {{2, 4096, 2048, 16, 0.0125, 0.0375}};
  const std::string text = CalibrationToToml(c, "written by a test\nsecond line", {{"matmul_efficiency", "median"}});
  EXPECT_NE(text.find("# second line\n"), std::string::npos) << text;
  EXPECT_NE(text.find("matmul_efficiency = 0.7812  # median\n"), std::string::npos) << text;
  HardwareCatalog cat = Catalog();
  const std::string path = WriteTemp("roundtrip.toml", text);
  const Status st = cat.LoadFile(path);
  ASSERT_TRUE(st.ok()) << st.message() << "\n" << text;
  const GpuSpec g = *cat.Gpu("h200");
  EXPECT_DOUBLE_EQ(g.matmul_efficiency, 0.7812);
  EXPECT_DOUBLE_EQ(g.fp8_matmul_efficiency, 0.6543);
  EXPECT_DOUBLE_EQ(g.hbm_efficiency, 0.9);
  EXPECT_DOUBLE_EQ(g.kernel_issue_us, 2.25);
  ASSERT_EQ(g.measured_attention.size(), 1u);
  EXPECT_EQ(g.measured_attention[0].seq, 4096);
  EXPECT_DOUBLE_EQ(g.measured_attention[0].bwd_s, 0.0375);
  // The rows are read back as written.
  auto root = toml::parse_file(path);
  auto back = CalibrationFromTable("h200", *root["calibration"]["h200"].as_table(), path, "[calibration.h200]");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->gemms[Precision::kBF16].size(), 2u);
  EXPECT_EQ(back->gemms[Precision::kBF16][1].n, 32768);
  EXPECT_DOUBLE_EQ(back->gemms[Precision::kBF16][1].tflops, 745.25);
  EXPECT_EQ(back->software, "CUDA 13.0 \"test\"");
}

// A user's own GPU and its calibration in one file: the [gpu.X] table is
// read first whatever the file's order (TOML tables have none).
TEST(PlanCalibration, OwnGpuAndItsCalibrationInOneFile) {
  HardwareCatalog cat;
  const Status st = LoadInto(&cat, "own.toml",
                             "[calibration.g]\ndevice = \"Test GPU\"\nsm_count = 100\nmatmul_efficiency = 0.75\n"
                             "kernel_issue_us = 2.5\n\n[gpu.g]\nbf16_tflops = 100.0\nhbm_gib = 16.0\n"
                             "hbm_tbps = 2.0\ntdp_w = 300.0\nsm_count = 100\n");
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_DOUBLE_EQ(cat.Gpu("g")->matmul_efficiency, 0.75);
  EXPECT_DOUBLE_EQ(cat.Gpu("g")->kernel_issue_us, 2.5);
}

// ---- bad and mismatched profiles ----

TEST(PlanCalibration, BadProfilesNameTheFileAndTheFix) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"[calibration.h100-sxm]\ndevice = \"x\"\nmatmul_efficiency = 1.5\n", "matmul_efficiency"},
      {"[calibration.h100-sxm]\nmatmul_efficiency = 0.5\n", "re-run bench/gpu_calibrate.sh, which writes it"},
      {"[calibration.h300]\ndevice = \"x\"\nmatmul_efficiency = 0.5\n",
       "unknown GPU 'h300'; did you mean 'h200'?"},
      {"[calibration.h100-sxm]\ndevice = \"x\"\n", "no measured factor"},
      {"[calibration.h100-sxm]\ndevice = \"x\"\ngemms_bf16 = [[1024, 0, 1024, 5]]\nhbm_efficiency = 0.9\n",
       "gemms_bf16 rows are [m, n, k, TFLOP/s] with every entry positive"},
      {"[calibration.h100-sxm]\ndevice = \"x\"\nmatmul_efficiency = 0.5\ngemm_bf16 = []\n", "gemm_bf16"},
      {"[calibration.a100-80g]\ndevice = \"x\"\nfp8_matmul_efficiency = 0.5\n",
       "fp8_matmul_efficiency is given, but the catalog's a100-80g has no fp8 rate"},
      // Measured on another part than the table names.
      {"[calibration.h200]\ndevice = \"NVIDIA H100 80GB HBM3\"\nmatmul_efficiency = 0.5\n",
       "measured on 'NVIDIA H100 80GB HBM3', which the catalog reads as h100-sxm, not h200: the calibration is "
       "for another GPU; re-run bench/gpu_calibrate.sh on a h200, or name the table [calibration.h100-sxm]"},
      {"[calibration.h100-sxm]\ndevice = \"Custom board\"\nsm_count = 114\nmatmul_efficiency = 0.5\n",
       "measured on 'Custom board' with 114 SMs, where the catalog's h100-sxm has 132"},
  };
  int i = 0;
  for (const Case& c : cases) {
    HardwareCatalog cat = Catalog();
    const std::string name = "bad" + std::to_string(i++) + ".toml";
    const Status st = LoadInto(&cat, name, c.text);
    ASSERT_FALSE(st.ok()) << c.text;
    EXPECT_TRUE(Has(st, c.says)) << st.message();
    EXPECT_TRUE(Has(st, name)) << st.message();
  }
}

TEST(PlanCalibration, ProfileOfAnotherGpuThanTheClusterIsRefused) {
  HardwareCatalog cat = Catalog();
  ASSERT_TRUE(LoadInto(&cat, "h200.toml", "[calibration.h200]\ndevice = \"NVIDIA H200\"\nmatmul_efficiency = 0.8\n").ok());
  const Status st = cat.CheckCalibrationApplies(*cat.Cluster("dgx-h100"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "h200.toml (measured on 'NVIDIA H200') calibrates h200, but cluster dgx-h100 runs h100-sxm, "
                      "so the calibration would change nothing; plan a cluster of the calibrated GPU (hgx-h200), "
                      "or calibrate a h100-sxm with bench/gpu_calibrate.sh"))
      << st.message();
  EXPECT_TRUE(cat.CheckCalibrationApplies(*cat.Cluster("hgx-h200")).ok());
  // Without a calibration, any cluster.
  EXPECT_TRUE(Catalog().CheckCalibrationApplies(*cat.Cluster("dgx-h100")).ok());
}

}  // namespace
}  // namespace scaletrain::plan
