// Memory per GPU against Korthikanti et al. (2022) and hand computation.
#include <gtest/gtest.h>

#include <string>

#include "plan/comm_terms.h"
#include "plan/cost_model.h"
#include "plan/hardware.h"
#include "plan/model_preset.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(PlanMemory, ActivationsMatchKorthikantiTable2) {
  // GPT-3 175B block, s=2048, b=1, a=96, h=12288, with dropout and an
  // unfused softmax (the paper's setting).
  auto spec = GptSpecFromDims("gpt3", 96, 12288, 96, 2048, 51200);
  ASSERT_TRUE(spec.ok());
  auto legacy = ShippedStack("legacy");
  ASSERT_TRUE(legacy.ok());
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  // No parallelism: s b h (34 + 5 a s / h).
  EXPECT_DOUBLE_EQ(LayerActivationBytes(*spec, 1, 1, false, Recompute::kNone, *legacy),
                   s * b * h * (34 + 5 * a * s / h));
  // Tensor parallel: s b h (10 + 24/t + 5 a s / (h t)).
  EXPECT_DOUBLE_EQ(LayerActivationBytes(*spec, 1, 8, false, Recompute::kNone, *legacy),
                   s * b * h * (10 + 24 / t + 5 * a * s / (h * t)));
  // Tensor + sequence parallel: s b h / t (34 + 5 a s / h).
  EXPECT_DOUBLE_EQ(LayerActivationBytes(*spec, 1, 8, true, Recompute::kNone, *legacy),
                   s * b * h / t * (34 + 5 * a * s / h));
  // + selective recomputation: 34 s b h / t.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(*spec, 1, 8, true, Recompute::kSelective, *legacy), 34 * s * b * h / t);
  // Full recomputation keeps the layer input only: 2 s b h (/t with SP).
  EXPECT_DOUBLE_EQ(LayerActivationBytes(*spec, 1, 8, false, Recompute::kFull, *legacy), 2 * s * b * h);
  EXPECT_DOUBLE_EQ(LayerActivationBytes(*spec, 1, 8, true, Recompute::kFull, *legacy), 2 * s * b * h / t);
}

TEST(PlanMemory, FlashAttentionDropsTheScores) {
  auto spec = GptSpecFromDims("gpt3", 96, 12288, 96, 2048, 51200);
  auto modern = ShippedStack("modern");
  // No dropout, FlashAttention: 8h whole + (Q,K,V,O = 8h, GeLU in/out = 16h)/t + 4a/t bytes per token.
  const double s = 2048, h = 12288, a = 96;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(*spec, 2, 4, false, Recompute::kNone, *modern),
                   s * 2 * (8 * h + (24 * h + 4 * a) / 4));
}

// PyTorch's op-level selective checkpointing keeps the layer input and the
// MLP output (whole on each TP rank without SP), the attention output with
// its log-sum-exp, q, v and the gate projection: Llama 3 8B (h 4096, kv 1024,
// F 14336, 32 heads) at tp 2, per token 4h + (4h + 4a + 2kvd + 2F) / 2.
TEST(PlanMemory, OpLevelSelectiveKeepsEveryOtherMatmul) {
  auto p = LoadModel("llama3-8b", kConfigs);
  ASSERT_TRUE(p.ok());
  auto modern = ShippedStack("modern");
  const double s = 8192, h = 4096, a = 32, kvd = 1024, F = 14336;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(p->spec, 1, 2, false, Recompute::kOp, *modern),
                   s * (4 * h + (4 * h + 4 * a + 2 * kvd + 2 * F) / 2));
  // Less than none, more than full.
  EXPECT_LT(LayerActivationBytes(p->spec, 1, 2, false, Recompute::kOp, *modern),
            LayerActivationBytes(p->spec, 1, 2, false, Recompute::kNone, *modern));
  EXPECT_GT(LayerActivationBytes(p->spec, 1, 2, false, Recompute::kOp, *modern),
            LayerActivationBytes(p->spec, 1, 2, false, Recompute::kFull, *modern));
  EXPECT_EQ(*RecomputeFromName("op"), Recompute::kOp);
  EXPECT_EQ(*RecomputeFromName("selective-op"), Recompute::kOp);
  EXPECT_EQ(*RecomputeFromName("Selective_Op"), Recompute::kOp);
  // A yes/no column, as runs write it: whole layers, or nothing.
  EXPECT_EQ(*RecomputeFromName("true"), Recompute::kFull);
  EXPECT_EQ(*RecomputeFromName("No"), Recompute::kNone);
  // Descriptions: the policy their words name.
  EXPECT_EQ(*RecomputeFromName("full AC"), Recompute::kFull);
  EXPECT_EQ(*RecomputeFromName("full activation checkpointing"), Recompute::kFull);
  EXPECT_EQ(*RecomputeFromName("selective AC"), Recompute::kSelective);
  EXPECT_EQ(*RecomputeFromName("selective (op)"), Recompute::kOp);
  EXPECT_EQ(*RecomputeFromName("no AC"), Recompute::kNone);
  EXPECT_FALSE(RecomputeFromName("sometimes").ok());
}

// A model preset and the DGX A100 cluster, from the repository's catalog.
struct PresetOnDgxA100 {
  ModelSpec spec;
  ClusterSpec cluster;
};
Result<PresetOnDgxA100> LoadPresetOnDgxA100(const std::string& preset) {
  HardwareCatalog cat;
  ST_RETURN_IF_ERROR(cat.LoadDir(kConfigs + "/hardware"));
  ST_ASSIGN_OR_RETURN(auto model, LoadModel(preset, kConfigs));
  ST_ASSIGN_OR_RETURN(auto cluster, cat.Cluster("dgx-a100"));
  return PresetOnDgxA100{model.spec, cluster};
}

TEST(PlanMemory, ParamsGradsOptimizerOfAKnownLayout) {
  auto setup = LoadPresetOnDgxA100("gpt2-124m");
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  CostModel model(setup->spec, setup->cluster, *ShippedStack("modern"));
  Layout l;
  l.dp = 8, l.micro_batch = 4, l.global_batch = 64, l.zero = 1;
  auto p = model.Predict(l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const double n = 124439808;
  EXPECT_DOUBLE_EQ(p->memory.params, 2 * n);       // bf16 weights
  EXPECT_DOUBLE_EQ(p->memory.grads, 4 * n);        // fp32 gradients, not sharded at ZeRO-1
  EXPECT_DOUBLE_EQ(p->memory.optimizer, 12 * n / 8);  // fp32 master + 2 moments over dp=8
  l.zero = 3;
  auto z3 = model.Predict(l);
  ASSERT_TRUE(z3.ok());
  EXPECT_DOUBLE_EQ(z3->memory.params, 2 * n / 8);
  EXPECT_DOUBLE_EQ(z3->memory.grads, 4 * n / 8);
  // Activations: 12 layers x 1 micro-batch in flight x per-layer bytes, plus
  // the logits (bf16 + fp32) of one micro-batch. The embedding's output is the
  // first layer's input, already in its set; no dropout, so no mask.
  const ModelSpec& m = setup->spec;
  const double per_layer = LayerActivationBytes(m, 4, 1, false, Recompute::kNone, *ShippedStack("modern"));
  const double T = 4.0 * 1024;
  EXPECT_DOUBLE_EQ(p->memory.activations, 12 * per_layer + T * 50257 * 6);
  EXPECT_NEAR(p->memory_gib, p->memory.Total() / kGiB, 1e-12);

  // Megatron-LM's fp16 runs keep the gradient buffer in fp16 (the legacy
  // stack's unfused accumulation); bf16 keeps it in fp32.
  CostModel legacy(setup->spec, setup->cluster, *ShippedStack("legacy"));
  l.zero = 1;
  auto legacy_bf16 = legacy.Predict(l);
  ASSERT_TRUE(legacy_bf16.ok());
  EXPECT_DOUBLE_EQ(legacy_bf16->memory.grads, 4 * n);
  l.precision = Precision::kFP16;
  auto legacy_fp16 = legacy.Predict(l);
  ASSERT_TRUE(legacy_fp16.ok());
  EXPECT_DOUBLE_EQ(legacy_fp16->memory.grads, 2 * n);
  EXPECT_DOUBLE_EQ(legacy_fp16->memory.optimizer, 12 * n / 8);
}

// Hybrid sharding: 16 data-parallel ranks in two groups of 8 (a node each)
// hold and move what 8 ranks of one group would, plus the all-reduce of each
// gradient shard with the other group.
TEST(PlanMemory, HybridShardingShardsOverOneGroup) {
  auto setup = LoadPresetOnDgxA100("gpt2-124m");
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  CostModel model(setup->spec, setup->cluster, *ShippedStack("pytorch"));
  const double n = 124439808;
  for (int zero : {1, 3}) {
    Layout hybrid;
    hybrid.dp = 16, hybrid.micro_batch = 2, hybrid.global_batch = 64, hybrid.zero = zero;
    hybrid.shard_group = 8;
    Layout group = hybrid;  // one group alone: dp 8, the same micro-batches per step
    group.dp = 8, group.global_batch = 32, group.shard_group = 0;
    auto h = model.Predict(hybrid);
    auto g = model.Predict(group);
    ASSERT_TRUE(h.ok()) << h.status().message();
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_DOUBLE_EQ(h->memory.optimizer, 12 * n / 8) << zero;  // over 8 ranks, not 16
    EXPECT_DOUBLE_EQ(h->memory.params, g->memory.params) << zero;
    EXPECT_DOUBLE_EQ(h->memory.grads, g->memory.grads) << zero;
    ASSERT_EQ(h->dp_collectives.size(), g->dp_collectives.size());
    for (size_t i = 0; i < h->dp_collectives.size(); ++i) {
      EXPECT_EQ(h->dp_collectives[i].payload_bytes, g->dp_collectives[i].payload_bytes);
      EXPECT_EQ(h->dp_collectives[i].calls, g->dp_collectives[i].calls);
    }
    EXPECT_EQ(h->shard_replicas, 2);
    EXPECT_EQ(g->shard_replicas, 1);
    EXPECT_TRUE(g->replica_collectives.empty());
    int64_t rs = 0, ar = 0;
    for (const StepCollective& c : h->dp_collectives) {
      if (c.kind == CollectiveKind::kReduceScatter) rs += c.calls * (c.payload_bytes / 8);
    }
    for (const StepCollective& c : h->replica_collectives) ar += c.calls * c.payload_bytes;
    EXPECT_GT(ar, 0);
    EXPECT_EQ(ar, rs);
    EXPECT_DOUBLE_EQ(h->comm_bytes.dp, g->comm_bytes.dp + RingBytesSum(h->replica_collectives, 2));
    EXPECT_GT(h->dp_comm_total_s, g->dp_comm_total_s);
  }
}

// Full recomputation of K of each chunk's layers: the activations, the
// recomputed time, the recomputed FLOPs and the repeated TP collectives are
// the share K / (layers of a chunk) of full recomputation's, the rest as
// without recomputation.
TEST(PlanMemory, PartialRecomputationIsItsShareOfFull) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto preset = LoadModel("llama3-8b", kConfigs);
  ASSERT_TRUE(preset.ok());
  const Software sw = *ShippedStack("modern");
  CostModel model(preset->spec, *cat.Cluster("dgx-h100"), sw);
  Layout l;  // 32 layers: 16 a stage, 8 a chunk
  l.tp = 2, l.pp = 2, l.vpp = 2, l.dp = 2, l.micro_batch = 1, l.global_batch = 32, l.zero = 1;
  l.recompute = Recompute::kNone;
  auto none = model.Predict(l);
  l.recompute = Recompute::kFull;
  auto full = model.Predict(l);
  l.recompute_layers = 2;
  auto part = model.Predict(l);
  ASSERT_TRUE(none.ok() && full.ok() && part.ok()) << part.status().message();
  const double s = 2.0 / 8.0;
  // The one layer rebuilt at a time stays with any recomputation.
  const double rebuilt = LayerActivationBytes(preset->spec, 1, 2, false, Recompute::kNone, sw);
  ASSERT_EQ(part->stage_bytes.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {  // each stage (the most loaded one may change)
    const double f = static_cast<double>(full->stage_bytes[i].activations),
                 n = static_cast<double>(none->stage_bytes[i].activations);
    EXPECT_NEAR(static_cast<double>(part->stage_bytes[i].activations),
                s * f + (1 - s) * (n + rebuilt), 2.0)
        << "stage " << i;
  }
  EXPECT_NEAR(part->time_s.recompute, s * full->time_s.recompute, 1e-12);
  EXPECT_NEAR(part->hw_flops_per_step - part->model_flops_per_step,
              s * (full->hw_flops_per_step - full->model_flops_per_step),
              1e-6 * full->hw_flops_per_step);
  // The recomputed forwards' all-reduces: 2 a block, for 2 x vpp blocks a stage, per micro-batch.
  auto recomputed_calls = [](const Prediction& p) {
    int64_t calls = 0;
    for (const StepCollective& c : p.stage_collectives[0].tp) {
      if (std::string(c.what).find("recomputed") != std::string::npos) calls += c.calls;
    }
    return calls;
  };
  const int64_t m = 32 / (2 * 1);
  EXPECT_EQ(recomputed_calls(*part), 2 * 2 * 2 * m);
  EXPECT_EQ(recomputed_calls(*full), 2 * 16 * m);
  EXPECT_EQ(recomputed_calls(*none), 0);
  EXPECT_LT(part->memory.activations, none->memory.activations);
  EXPECT_GT(part->memory.activations, full->memory.activations);
}

// FSDP under torch.distributed.pipelining (torchtitan's 3D layouts) keeps a
// stage's parameters gathered and its gradients whole for the step: the
// stated ZeRO-3 runs with ZeRO-1's memory and collectives; without pipeline
// parallelism it is ZeRO-3.
TEST(PlanMemory, FsdpUnderPipeliningGathersOnceAStep) {
  auto setup = LoadPresetOnDgxA100("gpt2-124m");
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  CostModel model(setup->spec, setup->cluster, *ShippedStack("pytorch"));
  Layout l;
  l.pp = 2, l.dp = 4, l.micro_batch = 2, l.global_batch = 64, l.zero = 3;
  Layout one = l;
  one.zero = 1;
  auto z3 = model.Predict(l);
  auto z1 = model.Predict(one);
  ASSERT_TRUE(z3.ok() && z1.ok()) << z3.status().message();
  EXPECT_EQ(z3->layout.zero, 3);  // reported as stated
  EXPECT_DOUBLE_EQ(z3->memory.params, z1->memory.params);
  EXPECT_DOUBLE_EQ(z3->memory.grads, z1->memory.grads);
  EXPECT_EQ(z3->DpPayloadBytes(), z1->DpPayloadBytes());
  EXPECT_DOUBLE_EQ(z3->step_time_s, z1->step_time_s);
  // Without pipeline parallelism FSDP gathers every micro-batch (ZeRO-3).
  l.pp = 1, l.dp = 8, one.pp = 1, one.dp = 8;
  auto flat3 = model.Predict(l);
  auto flat1 = model.Predict(one);
  ASSERT_TRUE(flat3.ok() && flat1.ok());
  EXPECT_LT(flat3->memory.params, flat1->memory.params);
  EXPECT_GT(flat3->DpPayloadBytes(), flat1->DpPayloadBytes());
  // Megatron-Core's ZeRO-3 (a stated stage) is not the PyTorch pipeline's.
  CostModel modern(setup->spec, setup->cluster, *ShippedStack("modern"));
  l.pp = 2, l.dp = 4;
  auto m3 = modern.Predict(l);
  ASSERT_TRUE(m3.ok());
  EXPECT_LT(m3->memory.params, z1->memory.params);
}

TEST(PlanMemory, InterleavedFirstStageMatchesKorthikantiFigure1) {
  // Korthikanti et al. (2022), Figure 1: activation memory of the first
  // stage of the 530B model (tp 8, pp 35, 3 chunks per stage, one sequence
  // per micro-batch, 280 per step) is the per-layer set times
  // L (1 + (p - 1) / (p v)) layers: 139 chunks of one layer in flight, the
  // interleaved schedule's warm-up plus one. The figure gives 114.0234375 GiB
  // without recomputation and 23.076171875 GiB with sequence parallelism and
  // selective recomputation; it leaves out the embedding's dropout mask,
  // which the planner adds (one byte per element for each micro-batch in
  // flight in chunk 0: 35 + 34 + 1 = 70 of them).
  auto setup = LoadPresetOnDgxA100("megatron-530b");
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  CostModel model(setup->spec, setup->cluster, *ShippedStack("legacy"));
  Layout l;
  l.tp = 8, l.pp = 35, l.vpp = 3, l.dp = 1, l.micro_batch = 1, l.global_batch = 280;
  l.precision = Precision::kFP16;  // vpp > 1: the interleaved schedule
  const double T = 2048, h = 20480;
  const double in_flight = 105.0 * (1.0 + 34.0 / 105.0);
  ASSERT_DOUBLE_EQ(in_flight, 139.0);
  l.recompute = Recompute::kNone;
  auto none = model.Predict(l);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_DOUBLE_EQ((none->memory.activations - 70 * T * h) / kGiB, 114.0234375);
  l.recompute = Recompute::kSelective, l.sp = true;
  auto seqsel = model.Predict(l);
  ASSERT_TRUE(seqsel.ok()) << seqsel.status().message();
  EXPECT_DOUBLE_EQ((seqsel->memory.activations - 70 * T * h / 8) / kGiB, 23.076171875);
}

TEST(PlanMemory, PipelineStagesSplitParamsAndTpSplitsMatrices) {
  HardwareCatalog cat;
  ASSERT_TRUE(cat.LoadDir(kConfigs + "/hardware").ok());
  auto preset = LoadModel("llama2-7b", kConfigs);
  ASSERT_TRUE(preset.ok());
  CostModel model(preset->spec, *cat.Cluster("dgx-h100"), *ShippedStack("modern"));
  Layout l;
  l.tp = 2, l.pp = 2, l.dp = 2, l.micro_batch = 1, l.global_batch = 8;
  auto p = model.Predict(l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  // The most loaded GPU is on stage 0 (two micro-batches in flight under
  // 1F1B): 16 blocks (matrices split by tp=2, the two RMSNorm weights whole)
  // and half the vocab-split embedding.
  const double C = 4096, F = 11008, V = 32000;
  const double block_split = 4 * C * C + 3 * C * F, block_whole = 2 * C;
  const double stage0 = 16 * (block_split / 2 + block_whole) + V * C / 2;
  EXPECT_DOUBLE_EQ(p->memory.params, 2 * stage0);
}

}  // namespace
}  // namespace scaletrain::plan
