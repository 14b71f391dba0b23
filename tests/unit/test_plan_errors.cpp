// Bad input: one clear message that names the fix.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model_preset.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

bool Has(const Status& st, const std::string& text) { return st.message().find(text) != std::string::npos; }

TEST(PlanErrors, UnknownNamesSuggestTheNearest) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto g = cat.Gpu("h100-sxn");
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Has(g.status(), "unknown GPU 'h100-sxn'; did you mean 'h100-sxm'?")) << g.status().message();
  auto c = cat.Cluster("dgx-h10");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Has(c.status(), "did you mean 'dgx-h100'?")) << c.status().message();
  // Names as published runs write them.
  EXPECT_EQ(cat.Gpu("A100 80GB")->name, "a100-80g");
  EXPECT_EQ(cat.Gpu("H100_SXM5")->name, "h100-sxm");
  EXPECT_EQ(cat.ClusterForGpu("H100")->gpu.name, "h100-sxm");
  EXPECT_EQ(cat.Gpu("NVIDIA A100 80GB")->name, "a100-80g");  // the vendor's name dropped
  EXPECT_EQ(cat.Gpu("NVIDIA H100")->name, "h100-sxm");
  EXPECT_EQ(cat.Gpu("AMD Instinct MI300X")->name, "mi300x");
  for (const auto& [given, name] :
       std::vector<std::pair<std::string, std::string>>{{"NVIDIA A100-SXM4-40GB", "a100-40g"},
                                                        {"A100 (40GB)", "a100-40g"},
                                                        {"a100_40gb", "a100-40g"},
                                                        {"A100", "a100-80g"},
                                                        {"H100 80GB HBM3", "h100-sxm"},
                                                        {"H100-SXM5-80GB", "h100-sxm"},
                                                        {"NVIDIA H100 PCIe", "h100-pcie"},
                                                        {"H200 SXM 141GB", "h200"},
                                                        {"H100 SXM5 80 GB", "h100-sxm"},
                                                        {"Tesla MI300", "mi300x"},
                                                        {"NVIDIA A100 PCIe 80GB", "a100-pcie"},
                                                        {"A100 PCIe 40GB", "a100-pcie-40g"},
                                                        {"H100 NVL", "h100-nvl"},
                                                        {"Tesla V100-SXM2-16GB", "v100-16g"},
                                                        {"V100 32GB", "v100-32g"},
                                                        {"NVIDIA H800", "h800"},
                                                        {"A800 80GB", "a800"},
                                                        {"GH200", "gh200"},
                                                        {"H20", "h20"},
                                                        {"AMD Instinct MI250X", "mi250x"},
                                                        {"MI325X", "mi325x"}}) {
    const auto gpu = cat.Gpu(given);
    ASSERT_TRUE(gpu.ok()) << given << ": " << gpu.status().message();
    EXPECT_EQ(gpu->name, name) << given;
  }
  // A form or size the catalog lacks is not read as another part.
  for (const char* lacking :
       {"A100 PCIe 120GB", "A100 120GB", "H200 NVL", "V100 PCIe", "MI250", "B100"}) {
    const auto gpu = cat.Gpu(lacking);
    EXPECT_FALSE(gpu.ok()) << lacking << " read as " << gpu->name;
    if (!gpu.ok()) {
      EXPECT_TRUE(Has(gpu.status(), "known: a100-40g")) << gpu.status().message();
    }
  }
  auto m = LoadModel("llama3-450b", kConfigs);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(Has(m.status(), "did you mean 'llama3-405b'?")) << m.status().message();
}

// A size the name states that is not the part's is a variant of it: H100
// 94 / 96 GB parts run as the 80 GB part with their memory.
TEST(PlanErrors, GpuNamesStateTheirMemory) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  const GpuSpec h100 = *cat.Gpu("h100-sxm");
  EXPECT_EQ(cat.Gpu("H100 94GB")->name, "h100-sxm");
  EXPECT_NEAR(StatedMemoryGib("H100 94GB", h100), 87.5, 0.05);
  EXPECT_NEAR(StatedMemoryGib("NVIDIA H100 SXM5 96GB HBM2e", h100), 89.4, 0.05);
  EXPECT_EQ(StatedMemoryGib("H100 80GB HBM3", h100), 0.0);
  EXPECT_EQ(StatedMemoryGib("H100", h100), 0.0);
  EXPECT_EQ(StatedMemoryGib("H200 141GB", *cat.Gpu("h200")), 0.0);
  EXPECT_EQ(StatedMemoryGib("A100 40GB", *cat.Gpu("a100-40g")), 0.0);
  EXPECT_EQ(StatedMemoryGib("MI300X 192GB", *cat.Gpu("mi300x")), 0.0);
}

// Stacks go by the names runs are written with, whatever their case, spaces
// or underscores (the stack files' names and aliases, configs/stacks); an
// unknown one lists the stacks and how to add one.
TEST(PlanErrors, StackNamesAsRunsWriteThem) {
  for (const auto& [given, stack] : std::vector<std::pair<std::string, std::string>>{
           {"Megatron-LM", "modern"},
           {"NeMo", "modern"},
           {"Megatron_DeepSpeed", "megatron-deepspeed"},
           {"DeepSpeed", "megatron-deepspeed"},
           {"megatron 2021", "legacy"},
           {"NeMo Megatron (2022)", "legacy"},
           {"Megatron-LM 2023", "modern"},
           {"Composer", "modern-triton"},
           {"llm-foundry", "modern-triton"},
           {"FSDP1", "pytorch-fsdp1"},
           {"Hugging Face", "pytorch-fsdp1"},
           {"FSDP2", "pytorch"},
           {"torchtitan", "pytorch"},
           // Descriptions, versions and combinations as runs write them.
           {"NeMo 2.0", "modern"},
           {"Megatron-Core 0.8", "modern"},
           {"FSDP2 + torch.compile", "pytorch-compile"},
           {"torchtitan (compile)", "pytorch-compile"},
           {"torch.compile", "pytorch-compile"},
           {"HF Accelerate FSDP", "pytorch-fsdp1"},
           {"MosaicML Composer", "modern-triton"},
           {"DeepSpeed ZeRO-3", "megatron-deepspeed"},
           {"fsdp 2", "pytorch"},
           {"JAX", ""}}) {
    auto sw = ShippedStack(given);
    if (stack.empty()) {
      ASSERT_FALSE(sw.ok()) << given;
      EXPECT_TRUE(Has(sw.status(), "unknown software stack 'JAX' stacks: cpu, legacy (also megatron-2019"))
          << sw.status().message();
      EXPECT_TRUE(Has(sw.status(), "or describe yours in a stack file (--stack-file FILE")) << sw.status().message();
      EXPECT_TRUE(Has(sw.status(), "megatron-deepspeed")) << sw.status().message();
      EXPECT_TRUE(Has(sw.status(), "pytorch-fsdp1")) << sw.status().message();
    } else {
      ASSERT_TRUE(sw.ok()) << given << ": " << sw.status().message();
      EXPECT_EQ(sw->name, stack) << given;
    }
  }
}

// Loads a catalog file holding one GPU, [gpu.NAME] with the required keys and
// `extra`, and returns what the loader says.
Status LoadOneGpu(const std::string& name, const std::string& extra) {
  const std::string path = ::testing::TempDir() + "/" + name + ".toml";
  {
    std::ofstream f(path);
    f << "[gpu." << name << "]\nbf16_tflops = 100.0\nhbm_gib = 10.0\nhbm_tbps = 1.0\ntdp_w = 300.0\n"
      << extra;
  }
  HardwareCatalog cat;
  return cat.LoadFile(path);
}

TEST(PlanErrors, SustainedClockRatioOutOfRangeNamesTheField) {
  const Status st = LoadOneGpu("hot", "sustained_clock_ratio = 1.2\n");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "[gpu.hot]")) << st.message();
  EXPECT_TRUE(Has(st, "sustained_clock_ratio = 1.2 must be in (0, 1] (a fraction: an achieved share of the peak)"))
      << st.message();
}

TEST(PlanErrors, SpeedSpreadOutOfRangeNamesTheField) {
  const Status st = LoadOneGpu("wide", "speed_spread = 4.5\n");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "[gpu.wide]")) << st.message();
  EXPECT_TRUE(Has(st, "speed_spread = 4.5 must be in [0, 0.2)")) << st.message();
}

TEST(PlanErrors, GemmKOverheadOutOfRangeNamesTheField) {
  const Status st = LoadOneGpu("deep", "gemm_k_overhead = -130\n");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "[gpu.deep]")) << st.message();
  EXPECT_TRUE(Has(st, "gemm_k_overhead = -130 must be in [0, 4096]")) << st.message();
}

TEST(PlanErrors, Fp8MatmulEfficiencyOutOfRangeNamesTheField) {
  const Status st = LoadOneGpu("eight", "fp8_matmul_efficiency = 1.6\n");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "[gpu.eight]")) << st.message();
  EXPECT_TRUE(Has(st, "fp8_matmul_efficiency = 1.6 must be in [0, 1]")) << st.message();
}

class LayoutErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = LoadModel("gpt3-1.3b", kConfigs);  // 24 layers, 16 heads, MLP 8192
    ASSERT_TRUE(p.ok());
    spec = p->spec;
  }
  ModelSpec spec;
};

TEST_F(LayoutErrors, TpNotDividingHeadsNamesNearestTp) {
  Layout l{6, 1, 2, 1, 1, 64};
  Status st = ValidateLayout(spec, 12, l);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "tp=6 does not divide heads (16)")) << st.message();
  EXPECT_TRUE(Has(st, "nearest valid tp: 4 or 8")) << st.message();
}

TEST_F(LayoutErrors, GpuCountMismatchNamesDp) {
  Layout l{2, 2, 3, 1, 1, 64};
  Status st = ValidateLayout(spec, 16, l);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "use dp=4")) << st.message();
  Layout odd{4, 4, 1, 1, 1, 64};
  st = ValidateLayout(spec, 24, odd);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "nearest valid tp x pp: 12 or 24")) << st.message();
  // Context-parallel ranks count: tp x cp x pp x dp.
  Layout cp{2, 1, 2, 1, 1, 64};
  cp.cp = 2;
  st = ValidateLayout(spec, 16, cp);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "tp x cp x pp x dp = 2 x 2 x 1 x 2 = 8 but there are 16 GPUs; use dp=4")) << st.message();
  cp.dp = 4;
  EXPECT_TRUE(ValidateLayout(spec, 16, cp).ok()) << ValidateLayout(spec, 16, cp).message();
}

TEST_F(LayoutErrors, GlobalBatchNotDivisibleNamesNearestBatches) {
  Layout l{1, 1, 8, 1, 2, 100};
  Status st = ValidateLayout(spec, 8, l);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "not divisible by dp x micro-batch = 8 x 2 = 16")) << st.message();
  EXPECT_TRUE(Has(st, "nearest valid global batch: 96 or 112")) << st.message();
}

TEST_F(LayoutErrors, PipelineAndInterleavingLimits) {
  Layout deep{1, 32, 1, 1, 1, 64};
  Status st = ValidateLayout(spec, 32, deep);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "use pp <= 24")) << st.message();
  Layout vpp{1, 4, 1, 4, 1, 64};  // 24 layers in 16 chunks
  st = ValidateLayout(spec, 4, vpp);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "nearest valid vpp at pp=4: 3 or 6")) << st.message();
  // An interleaving that leaves chunks unequal is an error naming the split
  // (Llama 3 405B's 126 layers at pp 16, vpp 4 once passed as "6 layers a
  // stage"); pp alone may leave stages a layer apart, as the trainer splits them.
  Layout uneven{1, 5, 1, 2, 1, 60};
  st = ValidateLayout(spec, 5, uneven);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "interleaving cuts the 24 layers of gpt3-1.3b into pp x vpp = 5 x 2 = 10 equal chunks, "
                      "and 24 layers do not split so (2.40 a chunk)"))
      << st.message();
  EXPECT_TRUE(Has(st, "no vpp above 1 does at pp=5: use vpp=1")) << st.message();
  EXPECT_TRUE(Has(st, "or at vpp=2 a pp of 4 or 6")) << st.message();
  uneven.vpp = 1;
  EXPECT_TRUE(ValidateLayout(spec, 5, uneven).ok());
  Layout sp{1, 1, 4, 1, 1, 64};
  sp.sp = true;
  EXPECT_FALSE(ValidateLayout(spec, 4, sp).ok());
  Layout good{4, 2, 2, 3, 1, 64};
  EXPECT_TRUE(ValidateLayout(spec, 16, good).ok()) << ValidateLayout(spec, 16, good).message();
}

// Hybrid sharding: a group that shards something and cuts the dp x cp ranks
// evenly.
TEST_F(LayoutErrors, ShardGroupMustDivideTheDataParallelRanks) {
  Layout l{1, 1, 16, 1, 1, 64};
  l.zero = 3, l.shard_group = 6;
  Status st = ValidateLayout(spec, 16, l);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "--shard-group 6 must divide the 16 data-parallel ranks; nearest: 4 or 8"))
      << st.message();
  l.shard_group = 1;
  st = ValidateLayout(spec, 16, l);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "a group of one rank shards nothing")) << st.message();
  l.shard_group = 8, l.zero = 0;
  st = ValidateLayout(spec, 16, l);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "ZeRO-0 shards nothing; use --zero 1, 2 or 3")) << st.message();
  l.zero = 1;
  EXPECT_TRUE(ValidateLayout(spec, 16, l).ok()) << ValidateLayout(spec, 16, l).message();
  l.shard_group = 16;  // one group of all: no hybrid sharding
  EXPECT_TRUE(ValidateLayout(spec, 16, l).ok());
  // With context parallelism the groups cut the dp x cp ranks.
  Layout cp{1, 1, 4, 1, 1, 64};
  cp.cp = 2, cp.zero = 3, cp.shard_group = 4;
  EXPECT_TRUE(ValidateLayout(spec, 8, cp).ok()) << ValidateLayout(spec, 8, cp).message();
  cp.shard_group = 3;
  st = ValidateLayout(spec, 8, cp);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "must divide the 8 data-parallel ranks (dp x cp)")) << st.message();
}

}  // namespace
}  // namespace scaletrain::plan
