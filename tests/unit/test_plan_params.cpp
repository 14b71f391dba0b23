// Preset parameter counts (from the shared parameter layout) against the
// counts their sources publish, and the hardware catalog as shipped.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/hardware.h"
#include "plan/model_preset.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

int64_t Params(const std::string& preset) {
  auto p = LoadModel(preset, kConfigs);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? CountParams(p->spec) : 0;
}

TEST(PlanParams, Gpt2SmallIsExact) {
  // HF gpt2: 124,439,808 with vocab 50257 and a tied head.
  EXPECT_EQ(Params("gpt2-124m"), 124439808);
  EXPECT_EQ(Params("gpt2-350m"), 354823168);
  EXPECT_EQ(Params("gpt2-774m"), 774030080);
  EXPECT_EQ(Params("gpt2-1.5b"), 1557611200);
}

TEST(PlanParams, Gpt3AndLlamaMatchPublished) {
  // GPT-3 175B is usually quoted as 174.6B when counted exactly.
  EXPECT_NEAR(Params("gpt3-175b") / 1e9, 174.6, 0.1);
  // Llama 3 405B: 405.85B in the released checkpoint (126 layers, 16384, GQA 8).
  EXPECT_NEAR(Params("llama3-405b") / 1e9, 405.85, 0.05);
  EXPECT_NEAR(Params("llama3-8b") / 1e9, 8.03, 0.01);
  EXPECT_NEAR(Params("llama3-70b") / 1e9, 70.55, 0.01);
  EXPECT_NEAR(Params("llama2-7b") / 1e9, 6.74, 0.01);
  EXPECT_NEAR(Params("llama2-70b") / 1e9, 68.98, 0.01);
}

// The architecture fields drive the count: an MLP of two matrices for GeLU
// and squared ReLU (three for SwiGLU), a head of its own unless tied. A
// model file may state them (`activation`, `tied_embeddings`).
TEST(PlanParams, ActivationAndTyingSetTheCount) {
  auto base = LoadModel("llama3-8b", kConfigs);
  ASSERT_TRUE(base.ok()) << base.status().message();
  const ModelSpec llama = base->spec;
  const int64_t C = llama.n_embd, F = llama.ffn_hidden, L = llama.n_layer, V = llama.padded_vocab_size;
  EXPECT_EQ(llama.activation(), Activation::kSwiGLU);
  EXPECT_FALSE(llama.tied_embeddings());
  ModelSpec relu2 = llama;
  relu2.activation_given = Activation::kSquaredReLU;
  EXPECT_EQ(CountParams(llama) - CountParams(relu2), L * F * C);  // no gate matrix
  ModelSpec tied = llama;
  tied.tied_given = true;
  EXPECT_EQ(CountParams(llama) - CountParams(tied), V * C);  // no output matrix
  ModelSpec gpt_untied = *GptSpecFromDims("g", 2, 64, 4, 32, 100);
  const int64_t tied_count = CountParams(gpt_untied);
  gpt_untied.tied_given = false;
  EXPECT_EQ(CountParams(gpt_untied) - tied_count, 100 * 64);

  const std::string path = ::testing::TempDir() + "/nemotron-like.toml";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("[model]\narch = \"llama\"\nn_layer = 2\nn_embd = 64\nn_head = 4\nn_kv_head = 2\n"
             "ffn_hidden = 256\nseq_len = 32\nvocab_size = 100\nactivation = \"squared_relu\"\n"
             "tied_embeddings = true\n",
             f);
  std::fclose(f);
  auto file = LoadModel(path, kConfigs);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->spec.activation(), Activation::kSquaredReLU);
  EXPECT_TRUE(file->spec.tied_embeddings());
  f = std::fopen(path.c_str(), "w");
  std::fputs("[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 32\nvocab_size = 100\n"
             "activation = \"tanh\"\n",
             f);
  std::fclose(f);
  auto bad = LoadModel(path, kConfigs);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown activation 'tanh'"), std::string::npos) << bad.status().message();
}

TEST(PlanParams, EveryPresetWithinThreePercentOfItsSource) {
  for (const auto& name : ModelPresetNames(kConfigs)) {
    auto p = LoadModel(name, kConfigs);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().message();
    ASSERT_GT(p->published_params, 0) << name;
    const double rel = std::fabs(CountParams(p->spec) / p->published_params - 1.0);
    EXPECT_LT(rel, 0.03) << name << " counts " << CountParams(p->spec) << " vs published " << p->published_params;
  }
  EXPECT_GE(ModelPresetNames(kConfigs).size(), 28u);
}

// A power cap: the clock follows the cube root of the power above idle; the
// catalog's capped and larger-memory H100 clusters resolve to variants.
TEST(PlanCatalog, PowerCapsAndMemoryVariants) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto h100 = cat.Gpu("h100-sxm");
  ASSERT_TRUE(h100.ok());
  // 700 W, idle 10% (70 W): at 500 W the dynamic power is 430 / 630 of full.
  auto capped = PowerCapped(*h100, 500);
  ASSERT_TRUE(capped.ok());
  EXPECT_DOUBLE_EQ(capped->sustained_clock_ratio, h100->sustained_clock_ratio * std::cbrt(430.0 / 630.0));
  EXPECT_EQ(capped->tdp_w, 500);
  EXPECT_EQ(PowerCapped(*h100, 800)->sustained_clock_ratio, h100->sustained_clock_ratio);  // above TDP
  EXPECT_FALSE(PowerCapped(*h100, 60).ok());  // below idle
  auto c500 = cat.Cluster("dgx-h100-500w");
  ASSERT_TRUE(c500.ok()) << c500.status().message();
  EXPECT_DOUBLE_EQ(c500->gpu.sustained_clock_ratio, capped->sustained_clock_ratio);
  auto c94 = cat.Cluster("dgx-h100-94g");
  ASSERT_TRUE(c94.ok()) << c94.status().message();
  EXPECT_DOUBLE_EQ(c94->gpu.hbm_gib, 87.5);
  EXPECT_EQ(c94->gpu.bf16_tflops, h100->bf16_tflops);
}

// A synchronous job runs at its slowest GPU's pace: for a spread (relative
// sd) of 1%, the expected slowest of 8 sits 1.434 sd below the typical one
// and of 8,192 3.787 sd (normal quantiles at (n - 0.375) / (n + 0.25)).
TEST(PlanCatalog, JobsRunAtTheirSlowestGpusPace) {
  EXPECT_EQ(SlowestGpuFactor(0.01, 1), 1.0);
  EXPECT_EQ(SlowestGpuFactor(0.0, 8192), 1.0);
  EXPECT_NEAR(SlowestGpuFactor(0.01, 8), 1 - 0.01 * 1.4342, 1e-6);
  EXPECT_NEAR(SlowestGpuFactor(0.01, 8192), 1 - 0.01 * 3.7868, 1e-6);
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto h100 = cat.Gpu("h100-sxm");
  ASSERT_TRUE(h100.ok());
  EXPECT_GT(h100->speed_spread, 0);  // measured (H200, the same die at the same power)
  EXPECT_EQ(cat.Gpu("a100-80g")->speed_spread, 0);  // not measured: not modelled
  EXPECT_DOUBLE_EQ(PacedBySlowest(*h100, 64).sustained_clock_ratio,
                   h100->sustained_clock_ratio * SlowestGpuFactor(h100->speed_spread, 64));
}

TEST(PlanCatalog, EveryClusterResolvesAndHasSaneNumbers) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  for (const auto& g : {"a100-40g", "a100-80g", "h100-sxm", "h100-pcie", "h200", "b200", "gb200", "mi300x"}) {
    auto gpu = cat.Gpu(g);
    ASSERT_TRUE(gpu.ok()) << g;
    EXPECT_GT(gpu->bf16_tflops, 100) << g;
    EXPECT_TRUE(cat.ClusterForGpu(g).ok()) << g;
  }
  for (const auto& name : cat.ClusterNames()) {
    auto c = cat.Cluster(name);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_GT(c->NicBytesPerSPerGpu(), 0);
    EXPECT_GT(c->IntraBusBytesPerS(), c->NicBytesPerSPerGpu() * 0.99) << name;
  }
  // A100 80GB: 312 TFLOP/s dense BF16 (datasheet).
  EXPECT_DOUBLE_EQ(cat.Gpu("a100-80g")->PeakTflops(Precision::kBF16), 312.0);
}

}  // namespace
}  // namespace scaletrain::plan
