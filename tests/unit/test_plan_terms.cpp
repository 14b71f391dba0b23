// Each term of the cost model alone (compute_terms.h, comm_terms.h,
// memory_terms.h), on a made-up GPU and cluster with round numbers, against
// the arithmetic written out by hand in the test.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "plan/comm_terms.h"
#include "plan/compute_terms.h"
#include "plan/memory_terms.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

// A GPU of 100 bf16 TFLOP/s and 2 TB/s, reaching half of each, at 0.8 of its
// clock under load; four to a node at 100 GB/s each way (half achieved, 10 us
// per call); two 80 Gbit/s NICs a node (half achieved, 20 us).
ClusterSpec RoundCluster() {
  ClusterSpec c;
  c.gpu.name = std::string("g");  // a move: GCC 12's -Wrestrict misfires on a literal here
  c.gpu.bf16_tflops = 100;
  c.gpu.hbm_gib = 16;
  c.gpu.hbm_tbps = 2;
  c.gpu.matmul_efficiency = 0.5;
  c.gpu.hbm_efficiency = 0.5;
  c.gpu.attention_efficiency = 0.5;
  c.gpu.sustained_clock_ratio = 0.8;
  c.node.gpus_per_node = 4;
  c.node.intra_gbps = 100;
  c.node.intra_efficiency = 0.5;
  c.node.intra_latency_us = 10;
  c.fabric.nics_per_node = 2;
  c.fabric.nic_gbit = 80;
  c.fabric.efficiency = 0.5;
  c.fabric.latency_us = 20;
  return c;
}
// RoundCluster's links: NVLink 100e9 x 0.5 = 50e9 B/s; a GPU's share of the
// NICs 2 x 80e9 / 8 x 0.5 / 4 = 2.5e9 B/s.
constexpr double kNvlinkBps = 50e9, kNicBps = 2.5e9;

// GpuRatesAt(RoundCluster's GPU): 100e12 x 0.5 x 0.8 = 40e12 FLOP/s and
// 2e12 x 0.5 = 1e12 B/s, no wave quantization.
constexpr GpuRates kRates{40e12, 1e12, 0};

Software Stack(const char* name) {
  auto sw = ShippedStack(name);
  EXPECT_TRUE(sw.ok());
  return sw.ok() ? *sw : Software{};
}

// A 4-layer GPT of hidden 64 (4 heads of 16), sequence 32, vocabulary 100.
ModelSpec SmallGpt() {
  ModelSpec m;
  m.n_layer = 4, m.n_head = 4, m.n_kv_head = 4, m.n_embd = 64, m.ffn_hidden = 256;
  m.block_size = 32, m.vocab_size = 100, m.padded_vocab_size = 100;
  return m;
}

// ---- compute ----

TEST(PlanTerms, MatmulPeakAndRates) {
  const GpuSpec gpu = RoundCluster().gpu;
  auto peak = MatmulPeakFlopsPerS(gpu, Precision::kBF16);
  ASSERT_TRUE(peak.ok());
  EXPECT_DOUBLE_EQ(*peak, 100e12);
  const GpuRates r = GpuRatesAt(gpu, *peak);
  EXPECT_DOUBLE_EQ(r.matmul_flops_per_s, 100e12 * 0.5 * 0.8);
  EXPECT_DOUBLE_EQ(r.hbm_bytes_per_s, 2e12 * 0.5);
  auto fp8 = MatmulPeakFlopsPerS(gpu, Precision::kFP8);
  ASSERT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.status().message(),
            "g has no fp8 matrix rate in the catalog; use --precision bf16 (the rates it has)");
}

TEST(PlanTerms, GemmIsBoundByMathOrByMemory) {
  // 1000^3: math 2 x 1e9 / 40e12 = 5e-5 s; memory 2 B x 3e6 / 1e12 = 6e-6 s.
  EXPECT_DOUBLE_EQ(GemmSecondsEach(kRates, 2, 1, 1000, 1000, 1000), 2.0 * 1e9 / 40e12);
  EXPECT_DOUBLE_EQ(GemmSeconds(kRates, 2, 3, 1000, 1000, 1000), 3 * 2.0 * 1e9 / 40e12);
  // Depth 1: math 2e6 / 40e12 = 5e-8 s; memory 2 B x (1000 + 1000 + 1e6) / 1e12.
  EXPECT_DOUBLE_EQ(GemmSecondsEach(kRates, 2, 1, 1000, 1000, 1), 2.0 * (1000 + 1000 + 1e6) / 1e12);
  // Two SMs, a 384 x 128 output: two 256x128 tiles fill one wave, 384 x 128
  // of 2 x 256 x 128 computed: 0.75 of the rate (128x128 tiles: 3 tiles, 2
  // waves, also 0.75). Math 2 x 384 x 128 x 4096 / (40e12 x 0.75) beats the
  // memory 2 B x (384 x 4096 + 4096 x 128 + 384 x 128) / 1e12.
  const GpuRates two_sms{40e12, 1e12, 2};
  EXPECT_DOUBLE_EQ(GemmSecondsEach(two_sms, 2, 1, 384, 128, 4096),
                   2.0 * 384 * 128 * 4096 / (40e12 * 0.75));
}

TEST(PlanTerms, WeightGemmMeasuredOrRoofline) {
  GpuSpec gpu = RoundCluster().gpu;
  gpu.measured_gemms = {{100, 200, 300, 50, 25}};  // forward 50, backward 25 TFLOP/s
  const PassSeconds measured = WeightGemmSeconds(gpu, kRates, 2, 100, 200, 300);
  EXPECT_DOUBLE_EQ(measured.fwd, 2.0 * 100 * 200 * 300 / 50e12);
  EXPECT_DOUBLE_EQ(measured.bwd, 4.0 * 100 * 200 * 300 / 25e12);
  // Another shape: the roofline, math-bound, backward twice the forward.
  const PassSeconds roofline = WeightGemmSeconds(gpu, kRates, 2, 1000, 1000, 1000);
  EXPECT_DOUBLE_EQ(roofline.fwd, 2.0 * 1e9 / 40e12);
  EXPECT_DOUBLE_EQ(roofline.bwd, 2 * 2.0 * 1e9 / 40e12);
}

// 1000 tokens of hidden 100 (KV 100, MLP 400), tp 2, on a GPU whose HBM is so
// fast that every GEMM is math-bound.
LayerShape ThousandTokens() {
  LayerShape s;
  s.micro_batch = 1, s.seq = 1000, s.tokens = 1000;
  s.hidden = 100, s.ffn_hidden = 400, s.kv_dim = 100, s.heads = 4, s.head_dim = 25, s.vocab = 1000;
  s.tp = 2;
  return s;
}
constexpr GpuRates kMathBound{40e12, 1e18, 0};

TEST(PlanTerms, LayerGemmsSumTheFourWeightGemms) {
  const GpuSpec gpu = RoundCluster().gpu;
  LayerShape s = ThousandTokens();
  // QKV 1000 x (100 + 200) / 2 x 100, output projection 1000 x 100 x 50, MLP
  // up 1000 x 200 x 100 and down 1000 x 100 x 200: 2 x 1000 x (150 x 100 +
  // 100 x 50 + 200 x 100 + 100 x 200) = 1.2e8 FLOPs.
  const double flops = 2.0 * 1000 * (150 * 100 + 100 * 50 + 200 * 100 + 100 * 200);
  PassSeconds t = LayerGemmSeconds(s, gpu, kMathBound);
  // (The four GEMMs' times are rounded one by one: equal to 1e-12.)
  EXPECT_NEAR(t.fwd, flops / 40e12, 1e-12 * t.fwd);
  EXPECT_NEAR(t.bwd, 2 * flops / 40e12, 1e-12 * t.bwd);
  // SwiGLU's up projection has gate and up: 1000 x 400 x 100, 4e7 FLOPs more.
  s.swiglu = true;
  t = LayerGemmSeconds(s, gpu, kMathBound);
  EXPECT_NEAR(t.fwd, (flops + 2.0 * 1000 * 200 * 100) / 40e12, 1e-12 * t.fwd);
}

TEST(PlanTerms, FlashAttentionAtItsSequenceRate) {
  const GpuSpec gpu = RoundCluster().gpu;
  LayerShape s;
  s.micro_batch = 2, s.seq = 768, s.hidden = 128, s.tp = 2;
  // Causal half of 4 b s^2 h / t = 0.5 x 4 x 2 x 768^2 x 128 / 2 FLOPs, at
  // 100e12 x 0.5 (attention) x 0.8 (clock) x 768 / (768 + 256) = 30e12.
  const double flops = 0.5 * 4 * 2 * 768.0 * 768 * 128 / 2;
  const double rate = 100e12 * 0.5 * 0.8 * 768 / (768 + 256);
  PassSeconds t = FlashAttentionSeconds(s, gpu, Stack("modern"));
  EXPECT_DOUBLE_EQ(t.fwd, flops / rate);
  EXPECT_DOUBLE_EQ(t.bwd, 2.5 * flops / rate);
  // Triton's: 1.4x forward, 2x backward.
  t = FlashAttentionSeconds(s, gpu, Stack("modern-triton"));
  EXPECT_DOUBLE_EQ(t.fwd, 1.4 * flops / rate);
  EXPECT_DOUBLE_EQ(t.bwd, 2.0 * 2.5 * flops / rate);
}

TEST(PlanTerms, UnfusedAttentionIsTwoBatchedGemmsAndTheSoftmax) {
  LayerShape s;
  s.micro_batch = 1, s.seq = 256, s.heads = 4, s.head_dim = 32, s.hidden = 128, s.tp = 2;
  // Each GEMM (256 x 256 x 32 and 256 x 32 x 256) is memory-bound: 2 B x
  // (256 x 32 + 32 x 256 + 256 x 256) / 1e12 = 1.6384e-7 s against math
  // 2 x 256 x 256 x 32 / 40e12 = 1.05e-7 s.
  const double gemm = 2.0 * (256 * 32 + 32 * 256 + 256 * 256) / 1e12;
  // The CPU kernel's blocks of 64 rows: 4 blocks compute (4 + 1) / (2 x 4)
  // of the scores; 2 local heads: 1 x 2 x 5/8 = 1.25 GEMMs of each.
  const double batches = 1 * 2 * 5.0 / 8;
  const double bmm = 2 * batches * gemm;
  const double scores = batches * 256 * 256;
  // Softmax: read and write the scores forward (2 x 2 B), 3 x 2 B backward.
  PassSeconds t = UnfusedAttentionSeconds(s, Stack("cpu"), kRates);
  EXPECT_DOUBLE_EQ(t.fwd, bmm + scores * 4 / 1e12);
  EXPECT_DOUBLE_EQ(t.bwd, 2 * bmm + scores * 6 / 1e12);
  // Legacy: every score computed (2 local heads), dropout adds 2 x 2 B + a
  // 1-byte mask each way.
  t = UnfusedAttentionSeconds(s, Stack("legacy"), kRates);
  EXPECT_DOUBLE_EQ(t.fwd, 2 * 2 * gemm + 2 * 256 * 256 * 9.0 / 1e12);
  EXPECT_DOUBLE_EQ(t.bwd, 2 * 2 * 2 * gemm + 2 * 256 * 256 * 11.0 / 1e12);
}

TEST(PlanTerms, AttentionTakesFlashThenTheMeasurementThenTheRoofline) {
  GpuSpec gpu = RoundCluster().gpu;
  gpu.measured_attention = {{1, 256, 128, 4, 0.001, 0.002}};
  LayerShape s;
  s.micro_batch = 1, s.seq = 256, s.heads = 4, s.head_dim = 32, s.hidden = 128, s.tp = 1;
  ASSERT_NE(MeasuredAttentionFor(gpu, s), nullptr);
  PassSeconds t = AttentionSeconds(s, gpu, Stack("cpu"), kRates);
  EXPECT_EQ(t.fwd, 0.001);
  EXPECT_EQ(t.bwd, 0.002);
  // FlashAttention is never replaced by a measurement of another kernel.
  EXPECT_EQ(AttentionSeconds(s, gpu, Stack("modern"), kRates).fwd,
            FlashAttentionSeconds(s, gpu, Stack("modern")).fwd);
  // The measurement holds for tp = 1 only.
  s.tp = 2;
  EXPECT_EQ(MeasuredAttentionFor(gpu, s), nullptr);
  EXPECT_EQ(AttentionSeconds(s, gpu, Stack("cpu"), kRates).fwd,
            UnfusedAttentionSeconds(s, Stack("cpu"), kRates).fwd);
}

TEST(PlanTerms, ElementwiseBytesPerToken) {
  LayerShape s;
  s.tokens = 10, s.hidden = 100, s.ffn_hidden = 400, s.kv_dim = 50, s.tp = 2, s.elem_bytes = 2;
  // GPT, no dropout: forward norms 2 x 2h = 400, adds 2 x 3h = 600 (whole on
  // each TP rank), GeLU 2F = 800 (split); backward 2 x 3h = 600, 600, 3F = 1200.
  PassSeconds t = ElementwiseSeconds(s, Stack("modern"), 1e9);
  EXPECT_DOUBLE_EQ(t.fwd, 10 * 2 * ((400 + 600) + 800 / 2.0) / 1e9);
  EXPECT_DOUBLE_EQ(t.bwd, 10 * 2 * ((600 + 600) + 1200 / 2.0) / 1e9);
  // SP splits the norms and adds too.
  s.sp = true;
  EXPECT_DOUBLE_EQ(ElementwiseSeconds(s, Stack("modern"), 1e9).fwd,
                   10 * 2 * ((400 + 600) / 2.0 + 800 / 2.0) / 1e9);
  // Llama with dropout: bias-dropout-add 2 x 3.5h = 700 forward, 2 x (2.5h +
  // h + 3h) = 1300 backward; SwiGLU 3F = 1200 and 5F = 2000; RoPE 2 (h + kvd) = 300.
  s.sp = false, s.swiglu = true, s.rope = true;
  Software sw = Stack("modern");
  sw.dropout = true;
  t = ElementwiseSeconds(s, sw, 1e9);
  EXPECT_DOUBLE_EQ(t.fwd, 10 * 2 * ((400 + 700) + (1200 + 300) / 2.0) / 1e9);
  EXPECT_DOUBLE_EQ(t.bwd, 10 * 2 * ((600 + 1300) + (2000 + 300) / 2.0) / 1e9);
}

// PyTorch eager (torchtitan's Llama): RMSNorm, RoPE and SwiGLU op by op,
// repeat_kv and the output copy, the sums of the shared inputs' gradients.
TEST(PlanTerms, EagerElementwiseBytesPerToken) {
  LayerShape s;
  s.tokens = 10, s.hidden = 100, s.ffn_hidden = 400, s.kv_dim = 50, s.tp = 2, s.elem_bytes = 2;
  s.swiglu = s.rope = s.rmsnorm = true;
  // Per token, whole rows: 2 RMSNorms x 100 x (4e + 7f = 36) = 7200 forward,
  // x (8e + 15f = 76) = 15200 backward; residual adds 2 x 100 x 3e = 1200
  // both ways; three gradient sums of the shared inputs (q/k/v: 2, gate/up:
  // 1) x 100 x 3e = 1800 backward.
  const double rows_f = 7200 + 1200, rows_b = 15200 + 1200 + 1800;
  // Split over tp: SwiGLU 400 x 5e = 4000 / 400 x 9e = 7200; RoPE (100 + 50)
  // x (2e + 4f = 20) = 3000 each way; repeat_kv 2 x 100 x (e + e x 50/100) =
  // 600 each way; the output copy 100 x 2e = 400 each way.
  const double split_f = 4000 + 3000 + 600 + 400, split_b = 7200 + 3000 + 600 + 400;
  const PassSeconds t = ElementwiseSeconds(s, Stack("pytorch"), 1e9);
  EXPECT_DOUBLE_EQ(t.fwd, 10 * (rows_f + split_f / 2) / 1e9);
  EXPECT_DOUBLE_EQ(t.bwd, 10 * (rows_b + split_b / 2) / 1e9);
  // torch.compile fuses the element-wise ops (as Megatron's kernels); the
  // model code's copies and gradient sums stay.
  const PassSeconds c = ElementwiseSeconds(s, Stack("pytorch-compile"), 1e9);
  // Fused: norms 2 x 100 x 2e = 800 / 2 x 100 x 3e = 1200, SwiGLU 400 x 3e /
  // 400 x 5e, RoPE 150 x 2e.
  EXPECT_DOUBLE_EQ(c.fwd, 10 * (800 + 1200 + (400 * 6 + 150 * 4 + 600 + 400) / 2.0) / 1e9);
  EXPECT_DOUBLE_EQ(c.bwd, 10 * (1200 + 1200 + 1800 + (400 * 10 + 150 * 4 + 600 + 400) / 2.0) / 1e9);
  // Kernels forward, eager: 7 GEMMs, attention, 2 norms x 6, 2 adds, SwiGLU's
  // 2, RoPE's 3 on q and on k, repeat_kv on k and v, the output copy.
  EXPECT_DOUBLE_EQ(LayerKernels(s, Stack("pytorch")).fwd, 7 + 1 + 12 + 2 + 2 + 6 + 2 + 1);
  // Megatron's: 4 GEMMs, attention, 2 norms, 2 adds, SwiGLU, RoPE on q and k.
  EXPECT_DOUBLE_EQ(LayerKernels(s, Stack("modern")).fwd, 4 + 1 + 2 + 2 + 1 + 2);
}

// Separate q, k, v (and gate, up) GEMMs do the fused GEMMs' FLOPs.
TEST(PlanTerms, SeparateProjectionsDoTheSameMath) {
  const GpuSpec gpu = RoundCluster().gpu;
  LayerShape s;
  s.tokens = 1000, s.hidden = 128, s.ffn_hidden = 512, s.kv_dim = 64, s.tp = 1, s.swiglu = true;
  const GpuRates math_bound{40e12, 1e18, 0};
  EXPECT_NEAR(LayerGemmSeconds(s, gpu, math_bound, true).fwd, LayerGemmSeconds(s, gpu, math_bound).fwd, 1e-15);
}

// TP collectives pipelined with the GEMMs: all but one of tp chunks hide
// under the pass's GEMMs, and what hides costs the SMs it takes.
TEST(PlanTerms, OverlappedTpHidesAllButOneChunk) {
  // Forward: 4 s of collectives, 2 s of GEMMs: 2 hide (3 could), 2 show.
  // Backward: 8 s beside 100 s of GEMMs: 6 hide, the first chunk (2) shows.
  PassSeconds t = OverlappedTpSeconds({4, 8}, {2, 100}, 4, 0);
  EXPECT_DOUBLE_EQ(t.fwd, 2);
  EXPECT_DOUBLE_EQ(t.bwd, 2);
  // Transfers on a fifth of the SMs: the hidden time costs 1/4 of itself.
  t = OverlappedTpSeconds({4, 8}, {2, 100}, 4, 0.2);
  EXPECT_DOUBLE_EQ(t.fwd, 2 + 2 * 0.25);
  EXPECT_DOUBLE_EQ(t.bwd, 2 + 6 * 0.25);
  EXPECT_EQ(OverlapCostSeconds(1.0, 0), 0);
}

// With TP collectives pipelined (Transformer Engine's userbuffers), the GEMMs
// beside them run in pieces of the token rows, each quantized on its own:
// QKV and up forward in tp ring steps, the output projection and down forward
// in the pipeline's splits, their input gradients in tp ring steps; the rest
// whole.
TEST(PlanTerms, OverlappedTpGemmsRunInPieces) {
  const GpuSpec gpu = RoundCluster().gpu;
  const LayerShape s = ThousandTokens();  // tp 2
  // 8 SMs: the pieces leave partial waves (a 128-row tile of 250 rows is half empty).
  const GpuRates r{40e12, 1e18, 8};
  const TpOverlapChunks chunks{2, 4};
  auto each = [&](double m, double n, double k) { return GemmSecondsEach(r, 2, 1, m, n, k); };
  auto whole = [&](double n, double k) { return each(1000, n, k); };
  // QKV (n 150, k 100), up (200, 100), out (100, 50), down (100, 200).
  const double fwd = 2 * each(500, 150, 100) + 2 * each(500, 200, 100) + 4 * each(250, 100, 50) +
                     4 * each(250, 100, 200);
  const double bwd = 2 * whole(150, 100) + 2 * whole(200, 100) + 2 * each(500, 100, 50) +
                     whole(100, 50) + 2 * each(500, 100, 200) + whole(100, 200);
  const PassSeconds t = LayerGemmSeconds(s, gpu, r, false, chunks);
  EXPECT_NEAR(t.fwd, fwd, 1e-12 * fwd);
  EXPECT_NEAR(t.bwd, bwd, 1e-12 * bwd);
  // On 8 SMs these pieces cost more than the whole; where no quantization is
  // modelled (no SM count), pieces cost what the whole does.
  EXPECT_GT(t.fwd, LayerGemmSeconds(s, gpu, r).fwd * 1.2);
  EXPECT_NEAR(LayerGemmSeconds(s, gpu, kMathBound, false, chunks).fwd,
              LayerGemmSeconds(s, gpu, kMathBound).fwd, 1e-12);
  // Only the modern stack with SP and tp > 1 pipelines them.
  LayerShape sp = s;
  sp.sp = true;
  EXPECT_EQ(TpOverlapChunksFor(sp, Stack("modern")).ring, 2);
  EXPECT_EQ(TpOverlapChunksFor(sp, Stack("modern")).pipeline, Software::kTpOverlapPipelineSplits);
  EXPECT_EQ(TpOverlapChunksFor(s, Stack("modern")).ring, 0);
  EXPECT_EQ(TpOverlapChunksFor(sp, Stack("legacy")).ring, 0);
}

// A layer runs no faster than the CPU issues its kernels (not the CPU trainer).
TEST(PlanTerms, KernelIssueFloorsASmallLayer) {
  const GpuSpec gpu = RoundCluster().gpu;
  LayerShape s;
  s.tokens = 1, s.seq = 1, s.micro_batch = 1, s.hidden = 8, s.ffn_hidden = 32, s.kv_dim = 8, s.heads = 1,
  s.head_dim = 8, s.vocab = 16;
  const Software sw = Stack("pytorch");
  const MicroBatchSeconds mb = MicroBatchComputeSeconds(s, gpu, sw, kRates, Recompute::kNone);
  EXPECT_DOUBLE_EQ(mb.layer.fwd, LayerKernels(s, sw).fwd * sw.launch_us * 1e-6);
  EXPECT_DOUBLE_EQ(mb.layer.bwd, LayerKernels(s, sw).bwd * sw.launch_us * 1e-6);
  EXPECT_LT(MicroBatchComputeSeconds(s, gpu, Stack("cpu"), kRates, Recompute::kNone).layer.fwd, 1e-6);
}

TEST(PlanTerms, HeadIsTheLogitsGemmAndTheCrossEntropy) {
  const GpuSpec gpu = RoundCluster().gpu;
  const LayerShape s = ThousandTokens();
  // Logits 1000 x (1000 / 2) x 100, math-bound at kRates: 2 x 1000 x 500 x
  // 100 / 40e12 = 2.5e-6 s (memory 2 B x 650000 / 1e12 = 1.3e-6 s).
  const double logits = 2.0 * 1000 * 500 * 100 / 40e12;
  // Fused log-softmax: 18 bytes per logit forward, 22 backward.
  PassSeconds t = HeadSeconds(s, gpu, Stack("modern"), kRates);
  EXPECT_DOUBLE_EQ(t.fwd, logits + 1000 * 500 * 18.0 / 1e12);
  EXPECT_DOUBLE_EQ(t.bwd, 2 * logits + 1000 * 500 * 22.0 / 1e12);
  // Megatron's pass-by-pass cross-entropy: 38 forward, 14 backward.
  t = HeadSeconds(s, gpu, Stack("legacy"), kRates);
  EXPECT_DOUBLE_EQ(t.fwd, logits + 1000 * 500 * 38.0 / 1e12);
  EXPECT_DOUBLE_EQ(t.bwd, 2 * logits + 1000 * 500 * 14.0 / 1e12);
}

TEST(PlanTerms, EmbeddingAndGradientAccumulation) {
  // 1000 tokens x 100 x 2 B, read and written.
  EXPECT_DOUBLE_EQ(EmbeddingSeconds(ThousandTokens(), 1e12), 1000 * 100 * 2 * 2.0 / 1e12);
  // Read the 16-bit gradient (2) and read and write the fp32 buffer (4 + 4).
  EXPECT_DOUBLE_EQ(GradAccumulationSeconds(1000000, 4, 1e12), 1e6 * (2 + 4 + 4) / 1e12);
  // An fp16 buffer: 2 + 2 + 2.
  EXPECT_DOUBLE_EQ(GradAccumulationSeconds(1000000, 2, 1e12), 1e6 * (2 + 2 + 2) / 1e12);
}

TEST(PlanTerms, RecomputeRepeatsTheForwardOrTheAttention) {
  const PassSeconds layer{3, 6}, attention{1, 2};
  EXPECT_EQ(LayerRecomputeSeconds(Recompute::kFull, layer, attention, 1.5), 3);
  // Selective: the core attention's forward again, FlashAttention's too
  // (Megatron-Core checkpoints the core attention whatever its kernel).
  EXPECT_EQ(LayerRecomputeSeconds(Recompute::kSelective, layer, attention, 1.5), 1);
  EXPECT_EQ(LayerRecomputeSeconds(Recompute::kNone, layer, attention, 1.5), 0);
  // PyTorch's op-level policy: the forward less attention and half the GEMMs.
  EXPECT_EQ(LayerRecomputeSeconds(Recompute::kOp, layer, attention, 1.5), 3 - 1 - 0.75);
}

TEST(PlanTerms, MicroBatchPiecesAddUp) {
  GpuSpec gpu = RoundCluster().gpu;
  LayerShape s = ThousandTokens();
  s.tp = 1;
  gpu.measured_attention = {{1, 1000, 100, 4, 0.001, 0.002}};
  // cpu stack: the measured attention; GEMMs 2 x 1000 x (300 x 100 + 100 x
  // 100 + 400 x 100 + 100 x 400) = 2.4e8 FLOPs; element-wise 1000 x 2 B x
  // (400 + 600 + 800) forward, (600 + 600 + 1200) backward, at 1e18 B/s.
  const double gemm = 2.0 * 1000 * (300 * 100 + 100 * 100 + 400 * 100 + 100 * 400) / 40e12;
  const double elem_f = 1000 * 2 * 1800.0 / 1e18, elem_b = 1000 * 2 * 2400.0 / 1e18;
  const MicroBatchSeconds mb =
      MicroBatchComputeSeconds(s, gpu, Stack("cpu"), kMathBound, Recompute::kFull);
  EXPECT_NEAR(mb.layer.fwd, gemm + 0.001 + elem_f, 1e-12);
  EXPECT_NEAR(mb.layer.bwd, 2 * gemm + 0.002 + elem_b, 1e-12);
  EXPECT_EQ(mb.layer_recompute, mb.layer.fwd);  // full recomputation
  // The head's logits GEMM, 2 x 1000 x 1000 x 100 FLOPs, and the cpu stack's
  // fused cross-entropy, 18 B per logit; the embedding 1000 x 100 x 2 x 2 B.
  EXPECT_DOUBLE_EQ(mb.head.fwd, 2.0 * 1000 * 1000 * 100 / 40e12 + 1000 * 1000 * 18.0 / 1e18);
  EXPECT_DOUBLE_EQ(mb.embedding, 1000 * 100 * 2 * 2.0 / 1e18);
}

TEST(PlanTerms, StageComputeCountsItsLayersEmbeddingHeadAndAccumulation) {
  MicroBatchSeconds mb;
  mb.layer = {1, 2}, mb.layer_recompute = 0.5, mb.head = {10, 20}, mb.embedding = 0.25;
  RankParams first;
  first.numel = 1000, first.layers = 3, first.embedding = true;
  // 3 layers and the embedding; the modern stack fuses the accumulation.
  PassSeconds t = StageComputeSeconds(first, mb, Stack("modern"), 4, 1e3);
  EXPECT_EQ(t.fwd, 3 * 1 + 0.25);
  EXPECT_EQ(t.bwd, 3 * 2 + 0.25);
  // Legacy adds 1000 gradients x (2 + 4 + 4) B at 1e3 B/s = 10 s.
  t = StageComputeSeconds(first, mb, Stack("legacy"), 4, 1e3);
  EXPECT_EQ(t.bwd, 3 * 2 + 0.25 + 1000 * 10 / 1e3);
  RankParams last;
  last.numel = 1000, last.layers = 3, last.head = true;
  t = StageComputeSeconds(last, mb, Stack("modern"), 4, 1e3);
  EXPECT_EQ(t.fwd, 3 * 1 + 10);
  EXPECT_EQ(t.bwd, 3 * 2 + 20);
}

TEST(PlanTerms, StageMicroBatchAddsRecomputeToBackwardAndTpToBoth) {
  // 4 layers each recomputing 0.5 s; TP 0.125 s forward, 0.25 s backward.
  const StageSeconds t = StageMicroBatchSeconds({3, 6}, 4, 0.5, {0.125, 0.25});
  EXPECT_EQ(t.fwd, 3 + 0.125);
  EXPECT_EQ(t.bwd, 6 + 4 * 0.5 + 0.25);
  EXPECT_EQ(t.compute, 3 + 6);
  EXPECT_EQ(t.recompute, 4 * 0.5);
  EXPECT_EQ(t.tp_comm, 0.125 + 0.25);
}

TEST(PlanTerms, BubbleIsMakespanLessEveryStagesWork) {
  // 1F1B on 4 stages, 8 micro-batches of forward 1 s and backward 2 s: the
  // makespan is (8 + 4 - 1) x 3 s; the bubble (4 - 1) x 3 s.
  EXPECT_EQ(PipelineBubbleSeconds((8 + 4 - 1) * 3.0, 8, 1, 1, 2), (4 - 1) * 3.0);
  // Two chunks each of 8 micro-batches: 8 x 2 x (0.5 + 1) of work.
  EXPECT_EQ(PipelineBubbleSeconds(30, 8, 2, 0.5, 1), 30 - 8 * 2 * 1.5);
  EXPECT_EQ(PipelineBubbleSeconds(20, 8, 2, 0.5, 1), 0);  // never negative
}

TEST(PlanTerms, OptimizerStepMovesItsBytesPerParameter) {
  Layout l;
  l.dp = 4;
  // bf16 on the modern stack: 38 B per parameter; ZeRO-0 updates all 1e9.
  EXPECT_DOUBLE_EQ(OptimizerSeconds(1000000000, l, Stack("modern"), 1e12), 1e9 * 38 / 1e12);
  // ZeRO-1: a quarter of them.
  l.zero = 1;
  EXPECT_DOUBLE_EQ(OptimizerSeconds(1000000000, l, Stack("modern"), 1e12), 1e9 / 4 * 38 / 1e12);
  // Legacy fp16 (an fp16 gradient buffer): 38 + 8 (unscale) + 4 (the
  // master-to-16-bit copy) + 4 (cast the buffer: read 2, write 4; zero 2
  // bytes, not 4).
  l.precision = Precision::kFP16;
  EXPECT_DOUBLE_EQ(OptimizerSeconds(1000000000, l, Stack("legacy"), 1e12),
                   1e9 / 4 * (38 + 8 + 4 + 4) / 1e12);
  l.precision = Precision::kFP32;
  EXPECT_DOUBLE_EQ(OptimizerSeconds(1000000000, l, Stack("modern"), 1e12), 1e9 / 4 * 36 / 1e12);
}

// ---- tensor parallelism ----

TEST(PlanTerms, TpCollectivesPerMicroBatchOnTheirLink) {
  const ClusterSpec c = RoundCluster();
  const Link nvlink = TpLink(c, 4);
  EXPECT_EQ(nvlink.bytes_per_s, kNvlinkBps);
  EXPECT_DOUBLE_EQ(nvlink.latency_s, 10e-6);
  const Link nics = TpLink(c, 8);  // more ranks than a node holds
  EXPECT_DOUBLE_EQ(nics.bytes_per_s, kNicBps);
  EXPECT_DOUBLE_EQ(nics.latency_s, 20e-6);
  // A step of 3 micro-batches: 6 forward all-reduces of 3e6 B in all, 2
  // backward all-gathers of 1e6 B, one scalar at the optimizer step.
  const std::vector<StepCollective> cs = {
      {"a", CollectiveKind::kAllreduce, 6, 3000000, StepPhase::kForward},
      {"b", CollectiveKind::kAllgather, 2, 1000000, StepPhase::kBackward},
      {"c", CollectiveKind::kAllreduce, 1, 8, StepPhase::kStep}};
  const PassSeconds t = TpCommSeconds(cs, 4, nvlink, 3);
  // Ring all-reduce 2 (4 - 1) / 4 x 3e6 B, plus 6 latencies; per micro-batch.
  EXPECT_DOUBLE_EQ(t.fwd, (2.0 * 3 / 4 * 3e6 / 50e9 + 6 * 10e-6) / 3);
  // All-gather (4 - 1) / 4 x 1e6 B, plus 2 latencies.
  EXPECT_DOUBLE_EQ(t.bwd, (3.0 / 4 * 1e6 / 50e9 + 2 * 10e-6) / 3);
  EXPECT_EQ(TpSecondsPerMicroBatch(cs, StepPhase::kForward, 4, nvlink, 3), t.fwd);
}

// ---- context parallelism ----

TEST(PlanTerms, ContextParallelAttentionIsCpTimesItsChunks) {
  const GpuSpec gpu = RoundCluster().gpu;
  LayerShape chunk;
  chunk.micro_batch = 2, chunk.seq = 768, chunk.hidden = 128, chunk.tp = 2;
  LayerShape cp = chunk;
  cp.cp = 4;  // the rank's 768 positions of a 3072-token sequence
  // The whole sequence's causal FLOPs over 4 ranks, 0.5 x 4 b (4 s)^2 h / t / 4,
  // at the rate of a 768-query kernel (as FlashAttentionAtItsSequenceRate).
  const double flops = 0.5 * 4 * 2 * (4 * 768.0) * (4 * 768.0) * 128 / 2 / 4;
  const double rate = 100e12 * 0.5 * 0.8 * 768 / (768 + 256);
  const PassSeconds t = FlashAttentionSeconds(cp, gpu, Stack("modern"));
  EXPECT_DOUBLE_EQ(t.fwd, flops / rate);
  EXPECT_DOUBLE_EQ(t.bwd, 2.5 * flops / rate);
  EXPECT_DOUBLE_EQ(t.fwd, 4 * FlashAttentionSeconds(chunk, gpu, Stack("modern")).fwd);
  // One attention kernel per chunk of keys: 3 more forward, 9 more backward.
  const PassSeconds k1 = LayerKernels(chunk, Stack("modern")), k4 = LayerKernels(cp, Stack("modern"));
  EXPECT_EQ(k4.fwd - k1.fwd, 3);
  EXPECT_EQ(k4.bwd - k1.bwd, 9);
}

TEST(PlanTerms, ContextParallelRingHidesUnderTheAttentionKernels) {
  LayerShape s;
  s.micro_batch = 2, s.seq = 1024, s.tokens = 2048, s.kv_dim = 64, s.tp = 2, s.elem_bytes = 2, s.cp = 4;
  // A chunk's keys and values: 2 x 2048 tokens x 32 (the rank's KV width) x 2 B.
  const double kv = 2 * 2048 * 32 * 2.0;
  EXPECT_DOUBLE_EQ(CpKvBytes(s), kv);
  const PassSeconds attention{4e-4, 1e-3};  // 1e-4 and 2.5e-4 a kernel
  // A slow link: each of the 3 steps exposes its message less its kernel;
  // the backward sends keys with their gradients (2 kv) and the gradients
  // home at the end (kv).
  const Link slow{1e9, 1e-5};
  const double msg = 1e-5 + kv / 1e9, msg2 = 1e-5 + 2 * kv / 1e9;
  PassSeconds t = CpRingSeconds(s, attention, slow, 0.0);
  EXPECT_DOUBLE_EQ(t.fwd, 3 * (msg - 1e-4));
  EXPECT_DOUBLE_EQ(t.bwd, 3 * (msg2 - 2.5e-4) + msg);
  // A fast link hides every step; what hides costs the SMs it takes.
  const Link fast{1e12, 0};
  t = CpRingSeconds(s, attention, fast, 0.0);
  EXPECT_DOUBLE_EQ(t.fwd, 0.0);
  EXPECT_DOUBLE_EQ(t.bwd, kv / 1e12);
  t = CpRingSeconds(s, attention, fast, 0.1);
  EXPECT_DOUBLE_EQ(t.fwd, OverlapCostSeconds(3 * kv / 1e12, 0.1));
  // No ring without context parallelism.
  s.cp = 1;
  t = CpRingSeconds(s, attention, slow, 0.1);
  EXPECT_EQ(t.fwd, 0.0);
  EXPECT_EQ(t.bwd, 0.0);
}

TEST(PlanTerms, ContextParallelLinkInsideOrAcrossNodes) {
  ClusterSpec c = RoundCluster();
  // tp 2 x cp 2 = the 4 GPUs of a node: NVLink.
  Link l = CpLink(c, 2, 2);
  EXPECT_DOUBLE_EQ(l.bytes_per_s, kNvlinkBps);
  EXPECT_DOUBLE_EQ(l.latency_s, 10e-6);
  // tp 2 x cp 4 spans two nodes: a step waits for the GPU's own NIC.
  l = CpLink(c, 2, 4);
  EXPECT_DOUBLE_EQ(l.bytes_per_s, kNicBps);
  EXPECT_DOUBLE_EQ(l.latency_s, 20e-6);
  c.fabric.p2p_gbit = 8;
  EXPECT_DOUBLE_EQ(CpLink(c, 2, 4).bytes_per_s, 1e9);
  // The stage time carries the ring's exposed time in each pass.
  const StageSeconds st = StageMicroBatchSeconds({1, 2}, 2, 0.25, {0.1, 0.2}, {0.01, 0.03});
  EXPECT_DOUBLE_EQ(st.fwd, 1 + 0.1 + 0.01);
  EXPECT_DOUBLE_EQ(st.bwd, 2 + 2 * 0.25 + 0.2 + 0.03);
  EXPECT_DOUBLE_EQ(st.cp_comm, 0.04);
}

// ---- pipeline parallelism ----

TEST(PlanTerms, PipelineMessageBytesAndTime) {
  const ModelSpec m = SmallGpt();
  Layout l;
  l.micro_batch = 2, l.tp = 2, l.pp = 2;
  // 2 sequences x 32 tokens x 64 = 4096 elements; Megatron's scatter-gather
  // sends 1/tp of them, 2 B each.
  EXPECT_EQ(PpMessageBytes(m, l, Stack("modern")), 4096 / 2 * 2.0);
  // DeepSpeed's pipeline engine sends the whole activation from every TP rank.
  EXPECT_EQ(PpMessageBytes(m, l, Stack("megatron-deepspeed")), 4096 * 2.0);
  // The CPU trainer sends whole rows of fp32.
  l.precision = Precision::kFP32;
  EXPECT_EQ(PpMessageBytes(m, l, Stack("cpu")), 4096 * 4.0);
  // SP: each rank holds 1/tp of the rows.
  l.sp = true;
  EXPECT_EQ(PpMessageBytes(m, l, Stack("cpu")), 4096 / 2 * 4.0);

  const ClusterSpec c = RoundCluster();
  // tp x dp = 2 ranks of a 4-GPU node: the next stage is in the node.
  l.dp = 1;
  EXPECT_DOUBLE_EQ(PpMessageSeconds(c, l, 1e6), 10e-6 + 1e6 / kNvlinkBps);
  // tp x dp = 4 fill the node: the next stage is across the NICs.
  l.dp = 2;
  EXPECT_DOUBLE_EQ(PpMessageSeconds(c, l, 1e6), 20e-6 + 1e6 / kNicBps);
  // A measured fabric's point-to-point rate, where it has one.
  ClusterSpec measured = c;
  measured.fabric.p2p_gbit = 8;  // 1 GB/s
  EXPECT_DOUBLE_EQ(PpMessageSeconds(measured, l, 1e6), 20e-6 + 1e-3);
  // 8 micro-batches x 2 chunks x (forward + backward) messages.
  EXPECT_DOUBLE_EQ(PpCommSeconds(1e-3, 8, 2), 8 * 2 * 2 * 1e-3);
}

// ---- data parallelism ----

TEST(PlanTerms, GradientReductionsPerStep) {
  Layout l;
  l.zero = 2, l.pp = 2;
  EXPECT_EQ(DpGradReductions(l, 8), 8);  // every micro-batch, at any pp
  l.pp = 1;
  EXPECT_EQ(DpGradReductions(l, 8), 8);
  l.zero = 1;
  EXPECT_EQ(DpGradReductions(l, 8), 1);
}

TEST(PlanTerms, DpStepCollectivesOfAStage) {
  Layout l;
  l.dp = 4, l.micro_batch = 1, l.global_batch = 16;  // 4 micro-batches
  l.bucket_bytes = 1000;  // 1000 / 4 B = 250, to a multiple of dp: 248 elements
  int64_t buckets = 0;
  // 1001 parameters padded to 1004: buckets of 248, 248, 248, 248 and 12.
  std::vector<StepCollective> cs =
      DpStepCollectivesFor(RankParams{1001}, ModelSpec{}, l, 4, &buckets);
  EXPECT_EQ(buckets, 5);
  ASSERT_EQ(cs.size(), 2u);  // ZeRO-0: the gradient all-reduce and the loss average
  EXPECT_EQ(cs[0].kind, CollectiveKind::kAllreduce);
  EXPECT_EQ(cs[0].calls, 5);
  EXPECT_EQ(cs[0].payload_bytes, 1004 * 4);
  EXPECT_EQ(cs[1].payload_bytes, 8);
  // ZeRO-3 in bf16 as the trainer runs it (PlanZero3), on a stage holding
  // the embedding (301 elements) and two blocks (350 each): buckets cut at
  // the layer boundaries [0,300) [300,304) [304,648) [648,652) [652,1004);
  // a forward gathers the windows [0,304), [300,652), [648,1004): 7 calls,
  // 1012 elements, in 2 B, per micro-batch; a backward the last two (the
  // embedding's backward reads no weights): 5 calls, 708; the fp32 gradients
  // reduce-scattered per bucket and micro-batch; the norm and loss doubles.
  l.zero = 3;
  RankParams runs{1001};
  runs.run_numels = {301, 350, 350};
  runs.run_outer = {true, false, false};
  cs = DpStepCollectivesFor(runs, ModelSpec{}, l, 4, &buckets);
  EXPECT_EQ(buckets, 5);
  ASSERT_EQ(cs.size(), 5u);
  EXPECT_EQ(cs[0].kind, CollectiveKind::kReduceScatter);
  EXPECT_EQ(cs[0].calls, 5 * 4);
  EXPECT_EQ(cs[0].payload_bytes, 1004 * 4 * 4);
  EXPECT_EQ(cs[2].phase, StepPhase::kForward);
  EXPECT_EQ(cs[2].calls, 7 * 4);
  EXPECT_EQ(cs[2].payload_bytes, 1012 * 2 * 4);
  EXPECT_EQ(cs[3].phase, StepPhase::kBackward);
  EXPECT_EQ(cs[3].calls, 5 * 4);
  EXPECT_EQ(cs[3].payload_bytes, 708 * 2 * 4);
  // ZeRO-2 with pipeline parallelism on a stage holding 100 elements of a
  // tied embedding at its front: buckets [0, 12) and [12, 260) wait for the
  // tied sum and are reduced once; [260, 508), [508, 756), [756, 1004) after
  // each of the 4 micro-batches: 3 x 248 x 4 + 260 = 3236 elements in 14 calls.
  l.zero = 2, l.pp = 2;
  RankParams first_stage{1001};
  first_stage.embedding_front_numel = 100;
  cs = DpStepCollectivesFor(first_stage, ModelSpec{}, l, 4, &buckets);
  ASSERT_EQ(cs[0].kind, CollectiveKind::kReduceScatter);
  EXPECT_EQ(cs[0].calls, 14);
  EXPECT_EQ(cs[0].payload_bytes, 3236 * 4);
  // Without the tied head (Llama's untied output layer) nothing waits.
  ModelSpec untied;
  untied.arch = Arch::kLlama;
  cs = DpStepCollectivesFor(first_stage, untied, l, 4, &buckets);
  EXPECT_EQ(cs[0].calls, 5 * 4);
  EXPECT_EQ(cs[0].payload_bytes, 1004 * 4 * 4);
  l.zero = 0, l.pp = 1;
  // dp = 1: nothing to reduce, but the buffer is still cut (250 per bucket).
  l.dp = 1;
  EXPECT_TRUE(DpStepCollectivesFor(RankParams{1001}, ModelSpec{}, l, 4, &buckets).empty());
  EXPECT_EQ(buckets, 5);
}

TEST(PlanTerms, DpRingBytesByKindLeaveScalarsToLatency) {
  const std::vector<StepCollective> cs = {{"g", CollectiveKind::kAllreduce, 5, 4000},
                                          {"norm", CollectiveKind::kAllreduce, 1, 8},
                                          {"rs", CollectiveKind::kReduceScatter, 2, 2000},
                                          {"ag", CollectiveKind::kAllgather, 2, 1000}};
  const DpRingBytes b = DpRingBytesByKind(cs, 4);
  EXPECT_DOUBLE_EQ(b.allreduce, 2.0 * 3 / 4 * 4000);
  EXPECT_DOUBLE_EQ(b.reduce_scatter, 3.0 / 4 * 2000);
  EXPECT_DOUBLE_EQ(b.allgather, 3.0 / 4 * 1000);
  EXPECT_DOUBLE_EQ(b.sent, 2.0 * 3 / 4 * 4000 + 2.0 * 3 / 4 * 8 + 3.0 / 4 * 2000 + 3.0 / 4 * 1000);
  EXPECT_DOUBLE_EQ(RingBytesSum(cs, 4), b.sent);
  EXPECT_EQ(RingBytesSum(cs, 1), 0);
}

TEST(PlanTerms, DpLinkInsideOrAcrossNodes) {
  const ClusterSpec c = RoundCluster();
  // dp 4 of tp 1 fill one node: NVLink; under NCCL a latency of 2 log2(4)
  // hops of 10 us for what is not a bucket.
  Link link = DpLink(c, 1, 4, true);
  EXPECT_EQ(link.bytes_per_s, kNvlinkBps);
  EXPECT_DOUBLE_EQ(link.latency_s, 2 * 2 * 10e-6);
  // dp 16: 4 members a node share its NICs, 4 x 2.5e9 B/s; 2 log2(16) x 20 us.
  link = DpLink(c, 1, 16, true);
  EXPECT_DOUBLE_EQ(link.bytes_per_s, 4 * kNicBps);
  EXPECT_DOUBLE_EQ(link.latency_s, 2 * 4 * 20e-6);
  // tp 4 fills the node: one DP member a node.
  link = DpLink(c, 4, 8, true);
  EXPECT_DOUBLE_EQ(link.bytes_per_s, kNicBps);
  EXPECT_DOUBLE_EQ(link.latency_s, 2 * 3 * 20e-6);
  // MPI (the CPU trainer): a hop's latency at every step of a call's ring,
  // every bucket a call: 2 (n - 1) steps an all-reduce, n - 1 a
  // reduce-scatter or all-gather.
  link = DpLink(c, 1, 16);
  EXPECT_DOUBLE_EQ(link.bytes_per_s, 4 * kNicBps);
  EXPECT_DOUBLE_EQ(link.latency_s, 20e-6);
  EXPECT_TRUE(link.per_ring_step);
  EXPECT_DOUBLE_EQ(link.allreduce_call_s, 2 * 15 * 20e-6);
  EXPECT_DOUBLE_EQ(link.ring_call_s, 15 * 20e-6);
  EXPECT_DOUBLE_EQ(DpLink(c, 1, 4).allreduce_call_s, 2 * 3 * 10e-6);
  EXPECT_DOUBLE_EQ(DpLink(c, 1, 1).allreduce_call_s, 0);
}

TEST(PlanTerms, MpiCollectivesPayALatencyPerRingStep) {
  const ClusterSpec c = RoundCluster();
  const Link nccl = TpLink(c, 4), mpi = TpLink(c, 4, true);
  EXPECT_DOUBLE_EQ(CollectiveCallSeconds(CollectiveKind::kAllreduce, 4, nccl), 10e-6);
  EXPECT_DOUBLE_EQ(CollectiveCallSeconds(CollectiveKind::kAllreduce, 4, mpi), 6 * 10e-6);
  EXPECT_DOUBLE_EQ(CollectiveCallSeconds(CollectiveKind::kAllgather, 4, mpi), 3 * 10e-6);
  EXPECT_DOUBLE_EQ(CollectiveCallSeconds(CollectiveKind::kReduceScatter, 4, mpi), 3 * 10e-6);
  // A TP step's calls: an all-reduce of 8 bytes pays its ring's steps.
  const std::vector<StepCollective> cs = {{"x", CollectiveKind::kAllreduce, 3, 8, StepPhase::kForward}};
  EXPECT_NEAR(TpSecondsPerMicroBatch(cs, StepPhase::kForward, 4, mpi, 1),
              2.0 * 3 / 4 * 8 / kNvlinkBps + 3 * 6 * 10e-6, 1e-15);
}

TEST(PlanTerms, DpAllReduceTime) {
  // A 1e9-byte gradient all-reduce over dp = 4 in one node.
  const int64_t n = 4;
  const double bytes = 1e9;
  const std::vector<StepCollective> cs = {{"g", CollectiveKind::kAllreduce, 40, 1000000000}};
  const Link link = DpLink(RoundCluster(), 1, n, true);
  // 2 (n - 1) / n x bytes / bandwidth, plus a reduce-scatter's and an
  // all-gather's latency, each 2 log2(n) x 10 us (NCCL's call latency
  // apart: none set here).
  Link nccl_free = link;
  nccl_free.allreduce_call_s = 0;
  const double lat = 2 * std::log2(4.0) * 10e-6;
  const double expected = 2.0 * (n - 1) / n * bytes / 50e9 + 2 * lat;
  DpSeconds t = DpAllReduceSeconds(DpRingBytesByKind(cs, n).allreduce, nccl_free, 0.05, 2, true);
  EXPECT_DOUBLE_EQ(t.total, expected);
  // Overlapped with the last micro-batch's backward of one of 2 chunks.
  EXPECT_DOUBLE_EQ(t.exposed, expected - 0.05 / 2);
  // A long backward hides all but a latency.
  EXPECT_DOUBLE_EQ(DpAllReduceSeconds(1.5e9, nccl_free, 1.0, 2, true).exposed, lat);
  EXPECT_DOUBLE_EQ(DpAllReduceSeconds(1.5e9, nccl_free, 1.0, 2, false).exposed, expected);
  // MPI: 3 buckets, each an all-reduce call of 2 (n - 1) steps of 10 us.
  const Link mpi = DpLink(RoundCluster(), 1, n);
  EXPECT_DOUBLE_EQ(DpAllReduceSeconds(1e9, mpi, 0.05, 2, false, 3).total, 1e9 / 50e9 + 3 * 6 * 10e-6);
}

TEST(PlanTerms, ZeroOneAndTwoReduceScatterAndGather) {
  const Link link{1e10, 1e-4};
  StageSeconds stage;
  stage.fwd = 0.1, stage.bwd = 0.2;
  // ZeRO-1: one reduce-scatter of 1.2e9 B (0.12 s + latency) under the last
  // backward chunk (0.2 / 2), the all-gather of 6e8 B (0.06 s + latency)
  // under the first forward chunk (0.1 / 2).
  DpSeconds t = DpShardedSeconds(1.2e9, 6e8, 1, link, stage, 2, true);
  EXPECT_DOUBLE_EQ(t.total, (0.12 + 1e-4) + (0.06 + 1e-4));
  EXPECT_DOUBLE_EQ(t.exposed, (0.12 + 1e-4 - 0.1) + (0.06 + 1e-4 - 0.05));
  // ZeRO-2 with 4 reductions over 2 chunks: 8 reduce-scatters of 1.2e9 / 8 B,
  // each hidden under a chunk's backward but for its latency.
  t = DpShardedSeconds(1.2e9, 6e8, 4, link, stage, 2, true);
  EXPECT_DOUBLE_EQ(t.total, 8 * (1.2e9 / 8 / 1e10 + 1e-4) + (0.06 + 1e-4));
  EXPECT_DOUBLE_EQ(t.exposed, 8 * 1e-4 + (0.06 + 1e-4 - 0.05));
  EXPECT_DOUBLE_EQ(DpShardedSeconds(1.2e9, 6e8, 4, link, stage, 2, false).exposed, t.total);
}

// NCCL's ring latency model for a reduce-scatter or all-gather call: 8.4 us,
// then 3.4 us a step on NVLink (5.7 on PCIe) and 14 us a step from node to
// node (or the fabric's latency_us where that is more).
TEST(PlanTerms, NcclRingCallLatencyGrowsWithTheGroup) {
  ClusterSpec c = RoundCluster();  // 4 GPUs a node
  c.node.intra_kind = "nvswitch";
  c.fabric.latency_us = 6;
  EXPECT_DOUBLE_EQ(NcclRingCallSeconds(c, 1, 1), 0);
  EXPECT_NEAR(NcclRingCallSeconds(c, 1, 4), (8.4 + 3 * 3.4) * 1e-6, 1e-12);  // one node
  EXPECT_NEAR(NcclRingCallSeconds(c, 1, 16), (8.4 + 12 * 3.4 + 3 * 14) * 1e-6, 1e-12);
  EXPECT_NEAR(NcclRingCallSeconds(c, 4, 8), (8.4 + 7 * 14) * 1e-6, 1e-12);  // a member a node
  // 1,024 ranks, one a node: over 14 ms a call, where 2 log2(n) hops are 0.1 ms.
  EXPECT_GT(NcclRingCallSeconds(c, 4, 1024), 100 * DpLink(c, 4, 1024).latency_s);
  // PCIe inside the node, a fabric slower than NCCL's figure.
  const ClusterSpec slow = RoundCluster();
  EXPECT_NEAR(NcclRingCallSeconds(slow, 1, 16), (8.4 + 12 * 5.7 + 3 * 20) * 1e-6, 1e-12);
  EXPECT_DOUBLE_EQ(DpLink(c, 1, 16, true).ring_call_s, NcclRingCallSeconds(c, 1, 16));
  EXPECT_DOUBLE_EQ(DpLink(c, 1, 16).ring_call_s, 15 * 6e-6);  // MPI: a hop a ring step
  // An all-reduce: the ring's steps twice, or the tree's chain in the node
  // and log2(nodes) hops, up and down, where that is less.
  EXPECT_NEAR(NcclAllReduceCallSeconds(c, 1, 4), (8.4 + 2 * 3 * 3.4) * 1e-6, 1e-12);
  EXPECT_NEAR(NcclAllReduceCallSeconds(c, 1, 16), (8.4 + 2 * (3 * 3.4 + 2 * 14)) * 1e-6, 1e-12);
  EXPECT_NEAR(NcclAllReduceCallSeconds(c, 4, 2), (8.4 + 2 * 14) * 1e-6, 1e-12);
  EXPECT_DOUBLE_EQ(DpLink(c, 1, 16, true).allreduce_call_s, NcclAllReduceCallSeconds(c, 1, 16));
}

// With NCCL every bucket is a call; the last bucket's reduce-scatter runs
// after its backward and the first bucket's gather before its forward.
TEST(PlanTerms, ShardedBucketsAreCallsOfTheirOwn) {
  const Link link{1e10, 1e-4, 5e-5};
  StageSeconds stage;
  stage.fwd = 0.1, stage.bwd = 0.2;
  // ZeRO-1, 4 buckets: reduce-scatter 0.12 s + 4 calls under 3/4 of the last
  // backward chunk (0.2 / 2), gather 0.06 s + 4 calls under 3/4 of the first
  // forward chunk (0.1 / 2).
  DpSeconds t = DpShardedSeconds(1.2e9, 6e8, 1, link, stage, 2, true, 4);
  EXPECT_DOUBLE_EQ(t.total, (0.12 + 4 * 5e-5) + (0.06 + 4 * 5e-5));
  EXPECT_NEAR(t.exposed, (0.1202 - 0.1 * 3 / 4) + (0.0602 - 0.05 * 3 / 4), 1e-12);
  // One bucket hides nothing.
  t = DpShardedSeconds(1.2e9, 6e8, 1, link, stage, 2, true, 1);
  EXPECT_DOUBLE_EQ(t.exposed, t.total);
  // ZeRO-2, 4 reductions over 2 chunks, 8 buckets: 8 reduce-scatters of
  // 0.015 s + 4 calls, each hidden but for its last bucket's quarter; the
  // gather of 0.06 s + 8 calls under 7/8 of the first forward chunk.
  t = DpShardedSeconds(1.2e9, 6e8, 4, link, stage, 2, true, 8);
  EXPECT_NEAR(t.total, 8 * 0.0152 + 0.0604, 1e-12);
  EXPECT_NEAR(t.exposed, 8 * (0.0152 / 4) + (0.0604 - 0.05 * 7 / 8), 1e-12);
  // FSDP: three calls a layer per micro-batch.
  stage.fwd = 0.01, stage.bwd = 0.01;
  const double per_mb = 1.2e9 / 4 / 1e10 + 3 * 10 * 5e-5;
  t = FsdpSeconds(4e8, 8e8, link, 4, 10, stage, true);
  EXPECT_NEAR(t.total, 4 * per_mb, 1e-12);
  EXPECT_NEAR(t.exposed, 4 * (per_mb - 0.02) + (8e8 / 8 / 10 / 1e10 + 5e-5), 1e-12);
}

// A layout's buckets: its own size, else its stack's rule, in the 4-byte
// elements CutGradBuckets counts.
TEST(PlanTerms, StacksCutTheirOwnBuckets) {
  Layout l;
  l.dp = 8;
  const Software modern = *ShippedStack("modern");
  // Megatron-Core: max(40 M, 1 M x dp) parameters.
  EXPECT_EQ(BucketBytesFor(l, modern, 0), 160'000'000);
  l.dp = 64;
  EXPECT_EQ(BucketBytesFor(l, modern, 0), 256'000'000);
  EXPECT_EQ(BucketBytesFor(l, *ShippedStack("cpu"), 0), 25 << 20);
  EXPECT_EQ(BucketBytesFor(l, *ShippedStack("pytorch"), 0), 25 << 20);
  EXPECT_EQ(BucketBytesFor(l, *ShippedStack("deepspeed"), 0), 2'000'000'000);
  // Megatron-LM 2021-22: the whole buffer at once.
  EXPECT_EQ(BucketBytesFor(l, *ShippedStack("legacy"), 1'500'000'000), 6'000'000'000);
  EXPECT_EQ(CutGradBuckets(1'500'000'000, 64,
                           BucketBytesFor(l, *ShippedStack("legacy"), 1'500'000'000))
                .size(),
            1u);
  l.bucket_bytes = 1 << 20;
  EXPECT_EQ(BucketBytesFor(l, modern, 0), 1 << 20);
  EXPECT_FALSE(ShippedStack("cpu")->nccl_collectives);
  EXPECT_TRUE(modern.nccl_collectives);
}

TEST(PlanTerms, FsdpGathersAndReducesEveryMicroBatch) {
  const Link link{1e10, 1e-4};
  StageSeconds stage;
  stage.fwd = 0.01, stage.bwd = 0.01;
  // 4 micro-batches, each (4e8 + 8e8) / 4 B plus three latencies.
  const double per_mb = 1.2e9 / 4 / 1e10 + 3 * 1e-4;
  DpSeconds t = FsdpSeconds(4e8, 8e8, link, 4, 10, stage, true);
  EXPECT_DOUBLE_EQ(t.total, 4 * per_mb);
  // What a micro-batch's compute (0.02 s) does not hide, and the first of
  // the 10 layers' forward gather: 8e8 / (2 x 4) / 10 B plus a latency.
  EXPECT_DOUBLE_EQ(t.exposed, 4 * (per_mb - 0.02) + (8e8 / 8 / 10 / 1e10 + 1e-4));
  EXPECT_DOUBLE_EQ(FsdpSeconds(4e8, 8e8, link, 4, 10, stage, false).exposed, t.total);
}

// Hybrid sharding: each reduce-scatter of a sharding group of 4 is followed
// by an all-reduce of the quarter the rank received, across the replicas.
TEST(PlanTerms, ReplicasAllReduceEachReduceScatteredShard) {
  const std::vector<StepCollective> group = {
      {"gradient reduce-scatter", CollectiveKind::kReduceScatter, 10, 4000, StepPhase::kBackward},
      {"parameter all-gather", CollectiveKind::kAllgather, 20, 2000, StepPhase::kForward},
      {"loss average", CollectiveKind::kAllreduce, 1, 8, StepPhase::kStep}};
  const std::vector<StepCollective> ar = ReplicaAllReduces(group, 4);
  ASSERT_EQ(ar.size(), 1u);
  EXPECT_EQ(ar[0].kind, CollectiveKind::kAllreduce);
  EXPECT_EQ(ar[0].calls, 10);
  EXPECT_EQ(ar[0].payload_bytes, 1000);
  EXPECT_EQ(ar[0].phase, StepPhase::kBackward);
  EXPECT_DOUBLE_EQ(ar[0].RingBytes(2), 2.0 * 1 / 2 * 1000);  // 2 (r - 1) / r of the payload
}

// The replicas' all-reduces: rounds of calls, each round under the backward
// it follows but its last call; the step's last call always exposed.
TEST(PlanTerms, ReplicaAllReducesHideUnderTheBackwardButTheLastCall) {
  Link link{1e9, 0};
  link.allreduce_call_s = 1e-3;
  StageSeconds stage;
  stage.fwd = 0.1, stage.bwd = 0.2;
  // 2 rounds of 4 calls: 0.6e9 B of ring traffic a round, 0.6 s + 4 ms.
  const double round = 0.6 + 4e-3;
  DpSeconds t = ReplicaAllReduceSeconds(1.2e9, 2, 4, link, stage, 1, true);
  EXPECT_DOUBLE_EQ(t.total, 2 * round);
  // The first round hides under its backward and the next forward (0.3 s);
  // the last under 3/4 of its backward.
  EXPECT_DOUBLE_EQ(t.exposed, (round - 0.3) + (round - 0.2 * 3 / 4));
  // Short rounds: only the last call of the last round shows.
  t = ReplicaAllReduceSeconds(4e7, 2, 4, link, stage, 1, true);
  EXPECT_DOUBLE_EQ(t.exposed, (0.02 + 4e-3) / 4);
  EXPECT_DOUBLE_EQ(ReplicaAllReduceSeconds(1.2e9, 2, 4, link, stage, 1, false).exposed, 2 * round);
  EXPECT_DOUBLE_EQ(ReplicaAllReduceSeconds(0, 2, 4, link, stage, 1, true).total, 0.0);
}

// Buckets: the first is ready after 1/nb of the backward, the last at its end.
TEST(PlanTerms, DpAllReduceHidesOnlyWhatTheBucketsLetIt) {
  const Link link{1e9, 0};
  // 0.3 s of reductions under a 0.2 s backward (one chunk).
  const double total = DpAllReduceSeconds(3e8, link, 0.2, 1, true, 1).total;
  EXPECT_DOUBLE_EQ(total, 0.3);
  EXPECT_DOUBLE_EQ(DpAllReduceSeconds(3e8, link, 0.2, 1, true, 1).exposed, 0.3);  // one bucket: none hidden
  EXPECT_DOUBLE_EQ(DpAllReduceSeconds(3e8, link, 0.2, 1, true, 4).exposed, 0.3 - 0.15);
  // Reductions shorter than the backward: the last bucket's stays exposed.
  EXPECT_DOUBLE_EQ(DpAllReduceSeconds(4e7, link, 0.2, 1, true, 4).exposed, 0.01);
  EXPECT_DOUBLE_EQ(DpAllReduceSeconds(4e7, link, 0.2, 1, true).exposed, 0.0);  // buckets unknown: the old bound
}

// The hierarchical reduce: in-node reduce-scatter under backward, then the
// cross-node all-reduce of a block and the in-node all-gather, exposed.
TEST(PlanTerms, HierarchicalReduceExposesTheCrossNodePart) {
  const Link node{1e10, 0}, cross{1e8, 0};
  // 4 members per node: 3/4 of 4e8 B in the node, 3e8 / 1e10 = 0.03 s each way;
  // a 0.2 s backward (one chunk, 4 buckets) hides the reduce-scatter but its
  // last bucket (0.03 / 4); across: 1e8 B of ring traffic, 1 s.
  const DpSeconds t = DpHierarchicalSeconds(4e8, 1e8, 4, node, cross, 0.2, 1, true, 4);
  EXPECT_DOUBLE_EQ(t.total, 0.03 + 1.0 + 0.03);
  EXPECT_DOUBLE_EQ(t.exposed, 0.03 / 4 + 1.0 + 0.03);
  // Where it applies: ZeRO-0, >= 2 DP members on each of several nodes.
  ClusterSpec c = RoundCluster();  // 4 GPUs a node
  Layout l;
  l.dp = 8, l.dp_hierarchical = true;
  EXPECT_TRUE(DpHierarchicalApplies(c, l));
  l.tp = 4;  // one DP member a node
  EXPECT_FALSE(DpHierarchicalApplies(c, l));
  l.tp = 1, l.dp = 4;  // one node
  EXPECT_FALSE(DpHierarchicalApplies(c, l));
  l.dp = 8, l.zero = 1;
  EXPECT_FALSE(DpHierarchicalApplies(c, l));
}

TEST(PlanTerms, DpCommPicksTheZeroStage) {
  const Link link{1e10, 1e-4};
  StageSeconds stage;
  stage.fwd = 0.1, stage.bwd = 0.2;
  DpRingBytes b;
  b.allreduce = 2e9, b.reduce_scatter = 1.2e9, b.allgather = 6e8;
  Layout l;
  l.dp = 4, l.vpp = 2, l.micro_batch = 1, l.global_batch = 16;
  // ZeRO-0 times the all-reduce and any all-gather (the sign messages of
  // DpCompression::kSign) as one reduction.
  EXPECT_EQ(DpCommSeconds(b, l, link, 1, stage, 10, true).total,
            DpAllReduceSeconds(2e9 + 6e8, link, 0.2, 2, true).total);
  l.zero = 2;
  EXPECT_EQ(DpCommSeconds(b, l, link, 4, stage, 10, true).total,
            DpShardedSeconds(1.2e9, 6e8, 4, link, stage, 2, true).total);
  l.zero = 3;
  EXPECT_EQ(DpCommSeconds(b, l, link, 1, stage, 10, true).total,
            FsdpSeconds(1.2e9, 6e8, link, 4, 10, stage, true).total);
  l.dp = 1;
  EXPECT_EQ(DpCommSeconds(b, l, link, 1, stage, 10, true).total, 0);
}

// ---- memory ----

TEST(PlanTerms, RankBytesPerZeroStage) {
  Layout l;
  l.dp = 4;
  // 1001 parameters padded to 1004, a quarter of that is 251.
  RankBytes rb = StageRankBytes(1001, l, 4);
  EXPECT_EQ(rb.numel, 1001);
  EXPECT_EQ(rb.padded_numel, 1004);
  EXPECT_EQ(rb.params, 1004 * 2);
  EXPECT_EQ(rb.grads, 1004 * 4);
  EXPECT_EQ(rb.optimizer, 1004 * 12);
  l.zero = 1;
  EXPECT_EQ(StageRankBytes(1001, l, 4).optimizer, 251 * 12);
  l.zero = 2;
  EXPECT_EQ(StageRankBytes(1001, l, 4).grads, 251 * 4);
  l.zero = 3;
  EXPECT_EQ(StageRankBytes(1001, l, 4).params, 251 * 2);
  // fp32: the parameters are the master copy (8 B of moments).
  l.zero = 0, l.precision = Precision::kFP32;
  rb = StageRankBytes(1001, l, 4);
  EXPECT_EQ(rb.params, 1004 * 4);
  EXPECT_EQ(rb.optimizer, 1004 * 8);
}

TEST(PlanTerms, StageActivationsFromLayerSetsInFlight) {
  const ModelSpec m = SmallGpt();  // h 64, KV 64, F 256, 4 heads, s 32
  Layout l;
  l.micro_batch = 2;
  // Modern (FlashAttention, no dropout), per token: 8h = 512 whole, and Q, K,
  // V, the attention output 2h + 2kvd + 2kvd + 2h = 512, GeLU 4F = 1024 and
  // the log-sum-exp 4a = 16: 2064 B; x 2 x 32 tokens per layer.
  const double layer = 2 * 32 * (512 + 512 + 1024 + 16.0);
  RankParams middle;
  middle.numel = 1000, middle.layers = 2;
  const Software modern = Stack("modern");
  // 3 micro-batches in flight, each with its 2 layers' sets.
  EXPECT_DOUBLE_EQ(StageActivationBytes(m, l, modern, middle, 3, 0), 3 * 2 * layer);
  // The last stage adds 64 tokens x 100 logits x (2 + 4 fp32 softmax) B.
  RankParams last = middle;
  last.head = true;
  EXPECT_DOUBLE_EQ(StageActivationBytes(m, l, modern, last, 3, 0), 3 * 2 * layer + 64 * 100 * 6.0);
  // Embedding dropout: 1 B per element of each of the 2 micro-batches in
  // flight in chunk 0; dropout also adds 2h of masks to each layer's set.
  Software dropout = modern;
  dropout.dropout = true;
  RankParams first = middle;
  first.embedding = true;
  const double layer_dropout = 2 * 32 * (512 + 128 + 512 + 1024 + 16.0);
  EXPECT_DOUBLE_EQ(StageActivationBytes(m, l, dropout, first, 3, 2),
                   3 * 2 * layer_dropout + 2 * 64 * 64.0);
  // Full recomputation in fp32: each layer keeps its input (2 s b h, doubled
  // for 4-byte elements), and backward rebuilds one layer's full set.
  l.recompute = Recompute::kFull, l.precision = Precision::kFP32;
  EXPECT_DOUBLE_EQ(StageActivationBytes(m, l, modern, middle, 3, 0),
                   3 * 2 * (2 * 2 * 32 * 64 * 2.0) + 2 * layer);
  // Interleaved: 4 layers in 2 chunks, a chunk's sets per micro-batch in flight.
  l.recompute = Recompute::kNone, l.precision = Precision::kBF16, l.vpp = 2;
  middle.layers = 4;
  EXPECT_DOUBLE_EQ(StageActivationBytes(m, l, modern, middle, 3, 0), 3 * 2 * layer);
  // FP8 (Transformer Engine): the two norm outputs and the GeLU output are
  // kept as 1-byte FP8 (-h - h - F), the attention output keeps its bf16 copy
  // and gains the output projection's FP8 one (+h): -(64 + 256) B per token.
  l.vpp = 1, middle.layers = 2, l.precision = Precision::kFP8;
  EXPECT_DOUBLE_EQ(StageActivationBytes(m, l, modern, middle, 3, 0),
                   3 * 2 * (layer - 2 * 32 * (64 + 256.0)));
}

TEST(PlanTerms, OtherMemoryIsTheFrameworkAndFsdpPrefetch) {
  RankParams stage;
  stage.numel = 1000, stage.layers = 4;
  Layout l;
  const double gib = 1024.0 * 1024 * 1024;
  EXPECT_EQ(OtherMemoryBytes(ModelSpec{}, l, Stack("modern"), stage), 1.5 * gib);
  EXPECT_EQ(OtherMemoryBytes(ModelSpec{}, l, Stack("cpu"), stage), 0);
  // ZeRO-3: 2 x 2 x a layer's 1000 / 4 weights of 2 B.
  l.zero = 3;
  EXPECT_EQ(OtherMemoryBytes(ModelSpec{}, l, Stack("modern"), stage),
            1.5 * gib + 2 * 2 * (1000 / 4) * 2.0);
  // FP8 without ZeRO-3: the FP8 copy and transpose of the 4 layers' Linear
  // weights (QKV 3h x h, out h x h, MLP 2 x h x F), 1 B each, on one of 2 TP ranks.
  l.zero = 1, l.tp = 2, l.precision = Precision::kFP8;
  const double linear = 64 * 192 + 64 * 64 + 2 * 64 * 256.0;
  EXPECT_EQ(OtherMemoryBytes(SmallGpt(), l, Stack("modern"), stage),
            1.5 * gib + 2 * linear / 2 * 4);
}

TEST(PlanTerms, StageMemoryCollectsItsParts) {
  const ModelSpec m = SmallGpt();
  Layout l;
  l.dp = 4, l.micro_batch = 2;
  RankParams stage;
  stage.numel = 1001, stage.layers = 2;
  const RankBytes rb = StageRankBytes(stage.numel, l, 4);
  const MemoryBreakdown mem = StageMemory(m, l, Stack("cpu"), stage, rb, 3, 0);
  EXPECT_EQ(mem.params, 1004 * 2);
  EXPECT_EQ(mem.grads, 1004 * 4);
  EXPECT_EQ(mem.optimizer, 1004 * 12);
  // The cpu stack: no FlashAttention (the softmax output 2as = 256 B per
  // token stays), no framework memory.
  EXPECT_DOUBLE_EQ(mem.activations, 3 * 2 * (2 * 32 * (512 + 512 + 1024 + 2 * 4 * 32.0)));
  EXPECT_EQ(mem.other, 0);
  EXPECT_DOUBLE_EQ(mem.Total(), 1004 * (2 + 4 + 12) + mem.activations);
}

TEST(PlanTerms, ElementBytesOfActivationsAndGradients) {
  EXPECT_EQ(ActivationElemBytes(Precision::kBF16), 2);
  EXPECT_EQ(ActivationElemBytes(Precision::kFP32), 4);
  Layout l;  // bf16, gradients reduced as the stack does by default: fp32
  EXPECT_EQ(GradElemBytes(l, Stack("modern")), 4);
  l.grad_reduce = GradReduce::kCompute;  // --grad-reduce compute: bf16
  EXPECT_EQ(GradElemBytes(l, Stack("modern")), 2);
  l.precision = Precision::kFP32;  // fp32 training has no 16-bit gradients
  EXPECT_EQ(GradElemBytes(l, Stack("modern")), 4);
  // Megatron-LM's fp16 default keeps an fp16 gradient buffer.
  l.precision = Precision::kFP16, l.grad_reduce = GradReduce::kAuto;
  EXPECT_EQ(GradElemBytes(l, Stack("legacy")), 2);
}

TEST(PlanTerms, LayerShapeOfAModelAndLayout) {
  const ModelSpec m = SmallGpt();
  Layout l;
  l.micro_batch = 3, l.tp = 8, l.sp = true, l.precision = Precision::kFP32;
  const LayerShape s = LayerShapeOf(m, l);
  EXPECT_EQ(s.tokens, 3 * 32);
  EXPECT_EQ(s.vocab, 104);  // 100 padded to a multiple of tp
  EXPECT_EQ(s.kv_dim, 64);
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_EQ(s.elem_bytes, 4);
  EXPECT_TRUE(s.sp);
  EXPECT_FALSE(s.swiglu);
  EXPECT_EQ(TpPaddedSpec(m, 8).padded_vocab_size, 104);
}

}  // namespace
}  // namespace scaletrain::plan
