// The compute-time terms of the cost model against hand computation: tile and
// wave quantization of GEMMs, FlashAttention's sequence-length dependence, and
// the unfused gradient accumulation of the legacy stack (fp32 buffer, fp16 in fp16),
// the optimizer's bytes per parameter on each stack and precision, ZeRO-2's
// per-micro-batch reduce-scatters hiding chunk by chunk under the backward,
// and FSDP2's copy-out of gathered parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "plan/comm_terms.h"
#include "plan/compute_terms.h"
#include "plan/cost_model.h"
#include "plan/hardware.h"
#include "plan/model_preset.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

TEST(PlanCompute, TileAndWaveQuantization) {
  // 108 tiles of 256x128 fill one wave of an A100 exactly.
  EXPECT_DOUBLE_EQ(TileWaveEfficiency(256.0 * 12, 128.0 * 9, 1, 108), 1.0);
  // One more row of 128x128 tiles: 256x128 needs 2 waves for 114 tiles
  // (114 x 32768 / (216 x 32768)); 128x128 needs 3 waves for 225 tiles
  // (225 / 324) and wins.
  EXPECT_DOUBLE_EQ(TileWaveEfficiency(128.0 * 25, 128.0 * 9, 1, 108), 225.0 / 324.0);
  // A ragged edge pads the last tile: m = 100 in one 128-row tile.
  EXPECT_DOUBLE_EQ(TileWaveEfficiency(100, 128, 1, 1), 100.0 / 128.0);
  // Batched GEMMs share the waves.
  EXPECT_DOUBLE_EQ(TileWaveEfficiency(128, 128, 216, 108), 1.0);
  EXPECT_DOUBLE_EQ(TileWaveEfficiency(128, 128, 1, 0), 1.0);
}

// Compute time of one layout with the given GPU and software.
double ComputeSeconds(const ModelSpec& spec, const ClusterSpec& c, const Software& sw, const Layout& l) {
  CostModel model(spec, c, sw);
  auto p = model.Predict(l);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? p->time_s.compute : 0.0;
}

// A 4-layer GPT (hidden 2048, seq 4096) on a DGX H100 node, 3 micro-batches
// of 2 sequences on one GPU.
struct SmallGptOnDgxH100 {
  ModelSpec spec;
  ClusterSpec cluster;
  Layout layout;
};
Result<SmallGptOnDgxH100> LoadSmallGptOnDgxH100() {
  HardwareCatalog cat;
  ST_RETURN_IF_ERROR(cat.LoadDir(kConfigs + "/hardware"));
  ST_ASSIGN_OR_RETURN(ModelSpec spec, GptSpecFromDims("gpt", 4, 2048, 16, 4096, 50304));
  ST_ASSIGN_OR_RETURN(ClusterSpec cluster, cat.Cluster("dgx-h100"));
  Layout l;
  l.dp = 1, l.micro_batch = 2, l.global_batch = 6;
  return SmallGptOnDgxH100{spec, cluster, l};
}

// A GEMM's fixed work per output tile, counted as extra depth: at the same
// output, depth k takes (k + overhead) / (2k + overhead) of depth 2k, and the
// rate is the catalog's at the depth it was measured at (kMatmulEfficiencyK).
TEST(PlanCompute, GemmDepthOverheadSlowsShallowGemms) {
  GpuSpec gpu;
  gpu.bf16_tflops = 1000, gpu.matmul_efficiency = 0.8, gpu.sustained_clock_ratio = 0.9;
  gpu.hbm_tbps = 100, gpu.hbm_efficiency = 1;  // compute-bound throughout
  GpuRates flat = GpuRatesAt(gpu, 1000e12);
  gpu.gemm_k_overhead = 130;
  GpuRates deep = GpuRatesAt(gpu, 1000e12);
  EXPECT_DOUBLE_EQ(deep.matmul_flops_per_s, 720e12 * (1 + 130 / kMatmulEfficiencyK));
  const double m = 16384, n = 4096;
  // At the measured depth both give the catalog's rate.
  EXPECT_NEAR(GemmSecondsEach(deep, 2, 1, m, n, kMatmulEfficiencyK),
              GemmSecondsEach(flat, 2, 1, m, n, kMatmulEfficiencyK), 1e-15);
  // At k = 768 (a 125M model's hidden size) it takes (768 + 130) / 768 as long
  // as at the large-k rate.
  const double t768 = GemmSecondsEach(deep, 2, 1, m, n, 768);
  EXPECT_NEAR(t768, 2 * m * n * (768 + 130) / deep.matmul_flops_per_s, 1e-15);
  EXPECT_NEAR(t768 / GemmSecondsEach(flat, 2, 1, m, n, 768),
              (768.0 + 130) / 768 / (1 + 130 / kMatmulEfficiencyK), 1e-12);
  // The catalog's Hopper parts carry the measured figure, the A100 the same
  // (assumed), Blackwell its own table's; MI300X none.
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  EXPECT_EQ(cat.Gpu("h100-sxm")->gemm_k_overhead, 130);
  EXPECT_EQ(cat.Gpu("h200")->gemm_k_overhead, 130);
  EXPECT_EQ(cat.Gpu("a100-80g")->gemm_k_overhead, 130);
  EXPECT_EQ(cat.Gpu("b200")->gemm_k_overhead, 140);
  EXPECT_EQ(cat.Gpu("mi300x")->gemm_k_overhead, 0);
}

// FP8 training as Transformer Engine runs it: the layers' Linear GEMMs at
// the FP8 peak's achieved share, the attention core and the head at bf16's;
// each Linear's input and output gradient cast to FP8 (with its transpose) in
// a pass of its own, except the inputs the fused norm writes in FP8.
TEST(PlanCompute, Fp8RunsOnlyTheLayersLinearsInFp8) {
  GpuSpec gpu;
  gpu.name = "fp8-gpu";
  gpu.bf16_tflops = 1000, gpu.fp8_tflops = 2000;
  gpu.matmul_efficiency = 0.8, gpu.fp8_matmul_efficiency = 0.6, gpu.sustained_clock_ratio = 0.9;
  gpu.hbm_tbps = 1, gpu.hbm_efficiency = 1, gpu.attention_efficiency = 0.5;
  auto bf16 = GpuRatesFor(gpu, Precision::kBF16), fp8 = GpuRatesFor(gpu, Precision::kFP8);
  ASSERT_TRUE(bf16.ok() && fp8.ok());
  EXPECT_DOUBLE_EQ(bf16->linear_flops_per_s, bf16->matmul_flops_per_s);
  EXPECT_DOUBLE_EQ(fp8->matmul_flops_per_s, 720e12);  // attention core, head: bf16
  EXPECT_DOUBLE_EQ(fp8->linear_flops_per_s, 720e12 * (2000 * 0.6) / (1000 * 0.8));
  gpu.fp8_matmul_efficiency = 0;  // not catalogued: bf16's share of the FP8 peak
  EXPECT_DOUBLE_EQ(GpuRatesFor(gpu, Precision::kFP8)->linear_flops_per_s, 1440e12);
  gpu.fp8_tflops = 0;
  const auto none = GpuRatesFor(gpu, Precision::kFP8);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("fp8-gpu has no fp8 matrix rate"), std::string::npos)
      << none.status().message();

  // One layer of a Llama-style model, tp 2, on the FP8 rates: the Linears
  // take 1 / 1.5 of their bf16 time, attention and head the same time.
  ModelSpec m;
  m.arch = Arch::kLlama, m.n_layer = 2, m.n_head = 32, m.n_kv_head = 8, m.n_embd = 4096;
  m.ffn_hidden = 14336, m.block_size = 4096, m.vocab_size = m.padded_vocab_size = 32000;
  Layout l;
  l.tp = 2, l.dp = 1, l.micro_batch = 1, l.global_batch = 1;
  const LayerShape s16 = LayerShapeOf(m, l);
  l.precision = Precision::kFP8;
  const LayerShape s8 = LayerShapeOf(m, l);
  ASSERT_TRUE(s8.fp8_linears && !s16.fp8_linears);
  gpu.hbm_tbps = 1e6;  // the GEMMs compute-bound
  gpu.fp8_tflops = 2000, gpu.fp8_matmul_efficiency = 0.6;
  const GpuRates r = *GpuRatesFor(gpu, Precision::kFP8);
  const Software sw = *ShippedStack("modern");
  const PassSeconds g8 = LayerGemmSeconds(s8, gpu, r),
                    g16 = LayerGemmSeconds(s16, gpu, *GpuRatesFor(gpu, Precision::kBF16));
  EXPECT_NEAR(g8.fwd / g16.fwd, 1 / 1.5, 1e-12);
  EXPECT_NEAR(g8.bwd / g16.bwd, 1 / 1.5, 1e-12);
  EXPECT_DOUBLE_EQ(AttentionSeconds(s8, gpu, sw, r).fwd, AttentionSeconds(s16, gpu, sw, r).fwd);
  EXPECT_DOUBLE_EQ(HeadSeconds(s8, gpu, sw, r).bwd, HeadSeconds(s16, gpu, sw, r).bwd);
  // The casts, bytes per token over the rank's 1/tp: forward the attention
  // output (h) and the MLP's activation output (F), read 2 and write 1 + 1;
  // backward the gradients of QKV's output (h + 2 kv), gate and up (2F) and
  // of the two row-parallel outputs (tp x h each).
  const double T = 4096, h = 4096, F = 14336, kv = 1024, tp = 2, bw = 1e6 * 1e12;
  const PassSeconds e8 = ElementwiseSeconds(s8, sw, bw), e16 = ElementwiseSeconds(s16, sw, bw);
  EXPECT_NEAR((e8.fwd - e16.fwd) * bw, T * 4 * (h + F) / tp, 1e-3);
  EXPECT_NEAR((e8.bwd - e16.bwd) * bw, T * 4 * (h + 2 * kv + 2 * F + 2 * tp * h) / tp, 1e-3);
  const PassSeconds k8 = LayerKernels(s8, sw), k16 = LayerKernels(s16, sw);
  EXPECT_EQ(k8.fwd - k16.fwd, 2);
  EXPECT_EQ(k8.bwd - k16.bwd, 4);

  // torchao's dynamic scaling (the PyTorch stacks): every cast reads its
  // tensor twice (the amax, then the cast) and writes 1 byte; all four
  // Linear inputs are cast (QKV's and up's whole rows, tp x h; torch.compile
  // casts each input once), again in backward, each output gradient twice
  // after one amax (3 reads, 2 writes); the weights, 5 bytes each per pass.
  const Software tao = *ShippedStack("pytorch-compile");
  ASSERT_TRUE(tao.fp8_dynamic_scaling);
  const double W = h * (h + 2 * kv) + h * h + 3 * h * F;
  EXPECT_DOUBLE_EQ(LayerLinearWeights(s8), W);
  const PassSeconds d8 = ElementwiseSeconds(s8, tao, bw), d16 = ElementwiseSeconds(s16, tao, bw);
  const double inputs = 5 * (2 * tp * h + h + F) / tp;
  EXPECT_NEAR((d8.fwd - d16.fwd) * bw, T * inputs + 5 * W / tp, 1e-3);
  EXPECT_NEAR((d8.bwd - d16.bwd) * bw,
              T * (inputs + 8 * (h + 2 * kv + 2 * F + 2 * tp * h) / tp) + 5 * W / tp, 1e-3);
}

TEST(PlanCompute, FlashAttentionRateFollowsSequenceLength) {
  auto setup = LoadSmallGptOnDgxH100();
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const ModelSpec& spec = setup->spec;
  ClusterSpec c = setup->cluster;
  const Layout& l = setup->layout;
  const Software sw = *ShippedStack("modern");
  const double base = ComputeSeconds(spec, c, sw, l);
  // Halving the attention efficiency adds exactly the attention time once more.
  const double e = c.gpu.attention_efficiency;
  c.gpu.attention_efficiency = e / 2;
  const double slow = ComputeSeconds(spec, c, sw, l);
  const double s = 4096, b = 2, h = 2048;
  const double fwd_flops = 0.5 * 4 * b * s * s * h;  // causal half, one layer, one micro-batch
  const double rate = c.gpu.bf16_tflops * 1e12 * e * c.gpu.sustained_clock_ratio * s / (s + 256);
  const double attention = 3 * 4 * 3.5 * fwd_flops / rate;  // 3 micro-batches, 4 layers, fwd + 2.5x bwd
  EXPECT_NEAR(slow - base, attention, 1e-9 * attention);

  // MPT's Triton FlashAttention: forward 1.4x, backward 2x FlashAttention-2's
  // time, so 1.4 + 2 x 2.5 = 6.4 units instead of 3.5; nothing else changes.
  c.gpu.attention_efficiency = e;
  const Software triton = *ShippedStack("modern-triton");
  const double with_triton = ComputeSeconds(spec, c, triton, l);
  EXPECT_NEAR(with_triton - base, attention * (6.4 - 3.5) / 3.5, 1e-9 * attention);
}

TEST(PlanCompute, SustainedClockScalesTensorCoreWorkOnly) {
  // The clock a GPU holds at its power limit slows its matmul and attention
  // rates, not its HBM: a ratio r is the same as both efficiencies times r.
  auto setup = LoadSmallGptOnDgxH100();
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const ModelSpec& spec = setup->spec;
  const ClusterSpec& c = setup->cluster;
  const Layout& l = setup->layout;
  ASSERT_GT(c.gpu.sustained_clock_ratio, 0.5);
  ASSERT_LT(c.gpu.sustained_clock_ratio, 1.0);
  for (const char* stack : {"modern", "legacy"}) {
    const Software sw = *ShippedStack(stack);
    ClusterSpec folded = c;
    folded.gpu.matmul_efficiency *= c.gpu.sustained_clock_ratio;
    folded.gpu.attention_efficiency *= c.gpu.sustained_clock_ratio;
    folded.gpu.sustained_clock_ratio = 1.0;
    const double with_ratio = ComputeSeconds(spec, c, sw, l);
    EXPECT_NEAR(with_ratio, ComputeSeconds(spec, folded, sw, l), 1e-12 * with_ratio) << stack;
    ClusterSpec boost = c;
    boost.gpu.sustained_clock_ratio = 1.0;
    EXPECT_GT(with_ratio, ComputeSeconds(spec, boost, sw, l)) << stack;
  }
}

// GPT-2 124M (124,439,808 parameters) on a DGX A100 node, from the
// repository's catalog.
struct Gpt2OnDgxA100 {
  ModelSpec spec;
  ClusterSpec cluster;
};
Result<Gpt2OnDgxA100> LoadGpt2OnDgxA100() {
  HardwareCatalog cat;
  ST_RETURN_IF_ERROR(cat.LoadDir(kConfigs + "/hardware"));
  ST_ASSIGN_OR_RETURN(auto preset, LoadModel("gpt2-124m", kConfigs));
  ST_ASSIGN_OR_RETURN(auto cluster, cat.Cluster("dgx-a100"));
  return Gpt2OnDgxA100{preset.spec, cluster};
}

TEST(PlanCompute, LegacyGradientAccumulationIsChargedPerMicroBatch) {
  auto setup = LoadGpt2OnDgxA100();
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const ModelSpec& spec = setup->spec;
  const ClusterSpec& c = setup->cluster;
  Layout l;
  l.dp = 2, l.micro_batch = 2, l.global_batch = 16;  // 4 micro-batches
  Software legacy = *ShippedStack("legacy");
  ASSERT_FALSE(legacy.fused_grad_accumulation);
  const double unfused = ComputeSeconds(spec, c, legacy, l);
  legacy.fused_grad_accumulation = true;
  const double fused = ComputeSeconds(spec, c, legacy, l);
  // Read the 16-bit gradient and the fp32 buffer, write the buffer: 10 bytes
  // per parameter per micro-batch, at the achievable HBM bandwidth.
  const double n = 124439808;
  const double expected = 4 * n * 10 / (c.gpu.hbm_tbps * 1e12 * c.gpu.hbm_efficiency);
  EXPECT_NEAR(unfused - fused, expected, 1e-9 * expected);

  // fp16: Megatron-LM keeps the buffer in fp16 (read 2 + 2, write 2 bytes).
  l.precision = Precision::kFP16;
  const double fp16_fused = ComputeSeconds(spec, c, legacy, l);
  legacy.fused_grad_accumulation = false;
  const double fp16_unfused = ComputeSeconds(spec, c, legacy, l);
  EXPECT_NEAR(fp16_unfused - fp16_fused, expected * 6 / 10, 1e-9 * expected);
}

TEST(PlanCompute, OptimizerBytesPerParameterFollowTheStackAndPrecision) {
  auto setup = LoadGpt2OnDgxA100();
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const ModelSpec& spec = setup->spec;
  const ClusterSpec& c = setup->cluster;
  const double n = 124439808, hbm = c.gpu.hbm_tbps * 1e12 * c.gpu.hbm_efficiency;
  auto optimizer_seconds = [&](const std::string& stack, Precision precision, int zero) {
    Layout l;
    l.dp = 2, l.micro_batch = 2, l.global_batch = 8, l.zero = zero, l.precision = precision;
    CostModel model(spec, c, *ShippedStack(stack));
    auto p = model.Predict(l);
    EXPECT_TRUE(p.ok()) << p.status().message();
    return p.ok() ? p->time_s.optimizer : 0.0;
  };
  const auto expect_bytes = [&](const std::string& stack, Precision precision, double bytes) {
    SCOPED_TRACE(stack + " " + std::string(PrecisionName(precision)));
    EXPECT_NEAR(optimizer_seconds(stack, precision, 0), n * bytes / hbm, 1e-9);
    // ZeRO-1 updates half the parameters on each of the two ranks.
    EXPECT_NEAR(optimizer_seconds(stack, precision, 1), n / 2 * bytes / hbm, 1e-9);
  };
  // AdamW with fp32 master weights: read master, moments, gradient (16), write
  // master and moments (12), write the 16-bit copy (2), norm and zeroing (4 + 4).
  expect_bytes("modern", Precision::kBF16, 38);
  // fp16 unscales the fp32 gradients with the inf check (read 4, write 4).
  expect_bytes("modern", Precision::kFP16, 46);
  // Megatron-LM's Float16Optimizer copies master to 16-bit weights in its own
  // pass (reads the master again: 4).
  expect_bytes("legacy", Precision::kBF16, 42);
  // ... and in fp16 casts its fp16 gradient buffer to fp32 (read 2, write 4)
  // and zeroes 2 bytes instead of 4: 38 + 8 + 4 + 6 - 2.
  expect_bytes("legacy", Precision::kFP16, 54);
  // fp32: the parameters are the master copy.
  expect_bytes("modern", Precision::kFP32, 36);
}

TEST(PlanCompute, ZeroTwoReduceScattersEachChunkUnderItsBackward) {
  auto setup = LoadGpt2OnDgxA100();
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const ModelSpec& spec = setup->spec;
  const ClusterSpec& c = setup->cluster;
  // The hiding rule alone: communication kernels take no SMs here, and
  // MPI's latency per ring step of every bucket rather than NCCL's.
  Software free_overlap = *ShippedStack("modern");
  free_overlap.overlap_slowdown = 0;
  free_overlap.nccl_collectives = false;
  Software contended_sw = *ShippedStack("modern");
  contended_sw.nccl_collectives = false;
  CostModel model(spec, c, free_overlap);
  CostModel contended(spec, c, contended_sw);
  // 8 GPUs of one node: pp 2 x dp 4, ZeRO-2, 4 micro-batches of 4 sequences,
  // 16 MiB buckets (few enough that their calls' latencies hide too).
  Layout l;
  l.pp = 2, l.dp = 4, l.zero = 2, l.micro_batch = 4, l.global_batch = 64;
  l.bucket_bytes = 16 << 20;
  // A reduce-scatter or all-gather call over the 4 DP ranks of the node.
  const double call = 3 * c.node.intra_latency_us * 1e-6;
  const double bucket_s = (16 << 20) / c.IntraBusBytesPerS();
  for (int64_t vpp : {1, 2}) {
    SCOPED_TRACE("vpp " + std::to_string(vpp));
    l.vpp = vpp;
    auto p = model.Predict(l);
    ASSERT_TRUE(p.ok()) << p.status().message();
    // Over NVSwitch each chunk's share of a micro-batch's reduce-scatter is
    // shorter than that chunk's backward, so only one bucket shows each
    // time: the last of each chunk's reduce-scatter per micro-batch, and the
    // parameter all-gather's first; each at least a call's latency, at most
    // that and a 16 MiB bucket's transfer.
    const double shown = 4.0 * vpp + 1.0;
    EXPECT_GE(p->time_s.dp_comm, shown * call - 1e-12);
    EXPECT_LE(p->time_s.dp_comm, shown * (call + bucket_s) + 1e-12);
    // Compute overlapped by the rest runs 18.9% slower (the measured mean
    // slowdown, Software::overlap_slowdown): hidden x 0.189 more.
    auto q = contended.Predict(l);
    ASSERT_TRUE(q.ok()) << q.status().message();
    const double hidden = p->dp_comm_total_s - p->time_s.dp_comm;
    EXPECT_NEAR(q->time_s.dp_comm, p->time_s.dp_comm + hidden * 0.189, 1e-12);
  }
}

// Context parallelism as the cost model composes it: a cp-way layout holds
// the activations of its seq / cp tokens, runs cp x its chunk's attention,
// shards and reduces its gradients over the dp x cp ranks (the collectives of
// a layout with dp x cp data-parallel ranks), and adds the ring's transfers.
TEST(PlanCompute, ContextParallelSplitsTheSequenceAndReducesOverDpTimesCp) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto cluster = cat.Cluster("dgx-h100");
  ASSERT_TRUE(cluster.ok());
  auto whole = GptSpecFromDims("gpt", 4, 2048, 16, 8192, 50304);
  auto half = GptSpecFromDims("gpt", 4, 2048, 16, 4096, 50304);  // what one of 2 CP ranks holds
  ASSERT_TRUE(whole.ok() && half.ok());
  const Software sw = *ShippedStack("modern");
  Layout cp;
  cp.tp = 2, cp.cp = 2, cp.dp = 2, cp.micro_batch = 1, cp.global_batch = 8, cp.zero = 1, cp.sp = true;
  Layout dp = cp;  // the same 8 GPUs and 4 micro-batches a step, cp ranks as dp ranks
  dp.cp = 1, dp.dp = 4, dp.global_batch = 16;
  CostModel model(*whole, *cluster, sw), half_model(*half, *cluster, sw);
  auto p_cp = model.Predict(cp);
  auto p_dp = model.Predict(dp);
  auto p_half = half_model.Predict(dp);
  ASSERT_TRUE(p_cp.ok()) << p_cp.status().message();
  ASSERT_TRUE(p_dp.ok() && p_half.ok());
  EXPECT_EQ(p_cp->layout.num_gpus(), 8);
  // Activations: the rank's 4096 tokens of each sequence.
  EXPECT_DOUBLE_EQ(p_cp->memory.activations, p_half->memory.activations);
  // Gradients and optimizer state: sharded and reduced over dp x cp = 4.
  EXPECT_EQ(p_cp->rank_bytes.optimizer, p_dp->rank_bytes.optimizer);
  EXPECT_EQ(p_cp->DpPayloadBytes(), p_dp->DpPayloadBytes());
  EXPECT_EQ(p_cp->dp_buckets, p_dp->dp_buckets);
  // Compute: the half-length model's, but every layer's attention runs over
  // both chunks of keys, twice its chunk's own (4 micro-batches x 4 layers).
  const GpuSpec gpu = PacedBySlowest(cluster->gpu, 8);
  const PassSeconds a = FlashAttentionSeconds(LayerShapeOf(*half, dp), gpu, sw);
  EXPECT_NEAR(p_cp->time_s.compute - p_half->time_s.compute, 4 * 4 * (a.fwd + a.bwd),
              1e-9 * p_cp->time_s.compute);
  // The ring (tp x cp = 4 GPUs of one node, over NVLink) adds a little.
  EXPECT_GT(p_cp->time_s.cp_comm, 0.0);
  EXPECT_LT(p_cp->time_s.cp_comm, 0.05 * p_cp->step_time_s);
  EXPECT_EQ(p_dp->time_s.cp_comm, 0.0);
  EXPECT_NE(LayoutToString(p_cp->layout).find(" cp=2"), std::string::npos);
}

}  // namespace
}  // namespace scaletrain::plan

namespace scaletrain::plan {
namespace {

// measured_model_step: the compute of every layout of that model scales by
// measured / the kernel-by-kernel prediction of the same micro-batch at one
// rank, forward and backward apart; a row for another model changes nothing.
// FSDP2 copies each gathered unit out of the all-gather buffer on the
// compute stream: a read and a write of every gathered byte, exposed; the
// same layout without the copy (FSDP1's views) is faster by exactly that.
TEST(PlanCompute, Fsdp2CopiesGatheredParametersOutOnTheComputeStream) {
  auto setup = LoadGpt2OnDgxA100();
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const ClusterSpec& c = setup->cluster;
  Software fsdp2 = *ShippedStack("pytorch");
  ASSERT_TRUE(fsdp2.gather_copy_out);
  EXPECT_FALSE(ShippedStack("modern-triton")->gather_copy_out);  // FSDP1's flat views
  EXPECT_FALSE(ShippedStack("pytorch-fsdp1")->gather_copy_out);  // the same, eager model code
  EXPECT_TRUE(ShippedStack("pytorch-compile")->gather_copy_out);
  EXPECT_FALSE(ShippedStack("modern")->gather_copy_out);
  Software views = fsdp2;
  views.gather_copy_out = false;
  Layout l;
  l.dp = 8, l.zero = 3, l.micro_batch = 2, l.global_batch = 32;  // 2 micro-batches
  auto with = CostModel(setup->spec, c, fsdp2).Predict(l);
  auto without = CostModel(setup->spec, c, views).Predict(l);
  ASSERT_TRUE(with.ok() && without.ok());
  double gathered = 0;
  for (const StepCollective& sc : with->dp_collectives) {
    if (sc.kind == CollectiveKind::kAllgather) gathered += static_cast<double>(sc.payload_bytes);
  }
  // Two gathers (forward, backward) of about the 124 M bf16 parameters per micro-batch.
  EXPECT_GT(gathered, 4 * 124e6 * 2);
  const double expected = 2 * gathered / (c.gpu.hbm_tbps * 1e12 * c.gpu.hbm_efficiency);
  EXPECT_NEAR(with->time_s.dp_comm - without->time_s.dp_comm, expected, 1e-9 * expected);
  EXPECT_NEAR(FsdpCopyOutSeconds(with->dp_collectives, 1e12), 2 * gathered / 1e12, 1e-15);
  // Not without sharding.
  l.zero = 1;
  EXPECT_EQ(CostModel(setup->spec, c, fsdp2).Predict(l)->time_s.dp_comm,
            CostModel(setup->spec, c, views).Predict(l)->time_s.dp_comm);
}

TEST(PlanCompute, MeasuredModelStepScalesTheComputeOfItsModel) {
  auto setup = LoadSmallGptOnDgxH100();
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const Software sw = *ShippedStack("cpu");
  ClusterSpec c = setup->cluster;
  const ModelSpec& spec = setup->spec;
  Layout one;
  one.micro_batch = one.global_batch = 2;
  const double plain = ComputeSeconds(spec, c, sw, one);
  // Measured: 1 s forward and 1 s backward for that micro-batch.
  c.gpu.measured_model_step = {{2, spec.block_size, spec.n_embd, spec.n_head, spec.n_layer,
                                spec.vocab_size, 1.0, 1.0}};
  EXPECT_NEAR(ComputeSeconds(spec, c, sw, one), 2.0, 1e-9);
  // Every micro-batch of another layout of the model: 3 per rank at dp 2.
  Layout dp2 = one;
  dp2.dp = 2, dp2.global_batch = 12;
  EXPECT_NEAR(ComputeSeconds(spec, c, sw, dp2), 3 * 2.0, 1e-9);
  // A row of another model (one more layer) is not this model's.
  c.gpu.measured_model_step[0].layers += 1;
  EXPECT_DOUBLE_EQ(ComputeSeconds(spec, c, sw, one), plain);
}

}  // namespace
}  // namespace scaletrain::plan
