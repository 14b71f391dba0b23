// The data-parallel arithmetic the trainer and the planner share
// (src/parallel/dp_layout.h), and the planner's fp32 figures, against hand
// computation. The same figures are checked against a running trainer by
// tests/cli/test_plan_vs_trainer.sh.
#include <gtest/gtest.h>

#include <memory>

#include "model/gpt.h"
#include "model/param_layout.h"
#include "parallel/dp_layout.h"
#include "parallel/pipeline.h"
#include "parallel/tp_pp_layout.h"
#include "plan/cost_model.h"
#include "plan/hardware.h"
#include "plan/memory_terms.h"
#include "plan/model_preset.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kConfigs = std::string(ST_SOURCE_DIR) + "/configs";

// GPT-2 124M on a DGX A100 with the default (modern) stack.
Result<std::unique_ptr<CostModel>> Gpt2OnDgxA100() {
  HardwareCatalog cat;
  ST_RETURN_IF_ERROR(cat.LoadDir(kConfigs + "/hardware"));
  ST_ASSIGN_OR_RETURN(ModelPreset preset, LoadModel("gpt2-124m", kConfigs));
  ST_ASSIGN_OR_RETURN(ClusterSpec cluster, cat.Cluster("dgx-a100"));
  return std::make_unique<CostModel>(preset.spec, cluster, Software{});
}

TEST(DpLayout, BucketsTileThePaddedBufferFromTheEnd) {
  // 1003 elements at dp 4 pad to 1004; 1 KiB buckets hold 256 floats.
  const int64_t padded = DpPaddedNumel(1003, 4);
  ASSERT_EQ(padded, 1004);
  const auto b = CutGradBuckets(padded, 4, 1024);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].end, 1004);
  EXPECT_EQ(b[0].begin, 748);
  EXPECT_EQ(b[3].begin, 0);
  EXPECT_EQ(b[3].size(), 1004 - 3 * 256);
  for (size_t i = 0; i + 1 < b.size(); ++i) EXPECT_EQ(b[i].begin, b[i + 1].end);
  for (const auto& x : b) EXPECT_EQ(x.size() % 4, 0);
  // A bucket smaller than dp elements is raised to dp.
  EXPECT_EQ(CutGradBuckets(12, 4, 4).size(), 3u);
}

TEST(DpLayout, StepCollectivesPerZeroStage) {
  const auto b = CutGradBuckets(1004, 4, 1024);  // 4 buckets, 4016 bytes in all
  auto total = [](const std::vector<StepCollective>& cs) {
    int64_t n = 0, calls = 0;
    for (const auto& c : cs) n += c.payload_bytes, calls += c.calls;
    return std::pair{n, calls};
  };
  EXPECT_TRUE(DataParallelStepCollectives(b, 1, 2, 3, 0, 4, 4).empty());
  // ZeRO-0: 4 bucket all-reduces + the loss average.
  EXPECT_EQ(total(DataParallelStepCollectives(b, 4, 0, 3, 0, 4, 4)),
            (std::pair<int64_t, int64_t>{4016 + 8, 5}));
  // ZeRO-1: reduce-scatter and all-gather of every bucket, norm and loss.
  EXPECT_EQ(total(DataParallelStepCollectives(b, 4, 1, 3, 0, 4, 4)),
            (std::pair<int64_t, int64_t>{2 * 4016 + 16, 10}));
  // ZeRO-2: the reduce-scatter after each of 3 micro-batches.
  EXPECT_EQ(total(DataParallelStepCollectives(b, 4, 2, 3, 0, 4, 4)),
            (std::pair<int64_t, int64_t>{4 * 4016 + 16, 18}));
  // With a tied embedding of 100 elements at the front of the buffer (a
  // pipeline's first or last stage): the bucket holding them, [0, 236),
  // waits for the tied sum and is reduced once; the other three after each
  // of the 3 micro-batches: 3 x 3 x 256 + 236 = 2540 elements in 10 calls,
  // plus the all-gather (1004 elements, 4 calls), norm and loss.
  EXPECT_EQ(total(DataParallelStepCollectives(b, 4, 2, 3, 100, 4, 4)),
            (std::pair<int64_t, int64_t>{2540 * 4 + 4016 + 16, 10 + 4 + 2}));
  // ZeRO-0/1 reduce every bucket once anyway.
  EXPECT_EQ(total(DataParallelStepCollectives(b, 4, 1, 3, 100, 4, 4)),
            (std::pair<int64_t, int64_t>{2 * 4016 + 16, 10}));
  EXPECT_TRUE(DpBucketWaitsForTiedSum(b[3], 100));
  EXPECT_FALSE(DpBucketWaitsForTiedSum(b[2], 100));
  EXPECT_FALSE(DpBucketWaitsForTiedSum(b[3], 0));
  // Ring bytes: all-reduce 2(n-1)/n, the others (n-1)/n of the payload.
  StepCollective ar{"x", CollectiveKind::kAllreduce, 1, 4000};
  StepCollective ag{"x", CollectiveKind::kAllgather, 1, 4000};
  EXPECT_DOUBLE_EQ(ar.RingBytes(4), 6000.0);
  EXPECT_DOUBLE_EQ(ag.RingBytes(4), 3000.0);
}

TEST(PlanTrainerBytes, Fp32HasNoMasterCopy) {
  auto made = Gpt2OnDgxA100();
  ASSERT_TRUE(made.ok()) << made.status().message();
  CostModel& model = **made;
  const int64_t n = 124439808;  // GPT-2 124M, a multiple of 8: no padding
  Layout l;
  l.dp = 8, l.global_batch = 64, l.micro_batch = 2, l.zero = 1;
  l.precision = Precision::kFP32;
  auto p = model.Predict(l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->rank_bytes.params, 4 * n);
  EXPECT_EQ(p->rank_bytes.grads, 4 * n);
  EXPECT_EQ(p->rank_bytes.optimizer, 8 * n / 8);  // two fp32 moments, 1/dp
  l.precision = Precision::kBF16;
  l.zero = 2;
  p = model.Predict(l);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rank_bytes.params, 2 * n);
  EXPECT_EQ(p->rank_bytes.grads, 4 * n / 8);
  EXPECT_EQ(p->rank_bytes.optimizer, 12 * n / 8);  // fp32 master + two moments, 1/dp
  // ZeRO-2 reduces every micro-batch (4 here): 4 reduce-scatters of the
  // gradients in fp32 (bf16's default: the buffer's dtype), one all-gather
  // of the bf16 parameters, two scalars.
  EXPECT_EQ(p->layout.grad_reduce, GradReduce::kFp32);
  EXPECT_EQ(p->DpPayloadBytes(), 4 * 4 * n + 2 * n + 16);
  // Reducing in the compute precision halves the gradient buffer and the
  // reduce-scatters, not the parameter all-gather.
  l.grad_reduce = GradReduce::kCompute;
  p = model.Predict(l);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rank_bytes.grads, 2 * n / 8);
  EXPECT_EQ(p->DpPayloadBytes(), 4 * 2 * n + 2 * n + 16);
}

// The stack's default reduction dtype: fp32 for bf16 everywhere (Megatron-LM
// forces it, FSDP's mixed precision asks for it), the fp16 buffer of
// Megatron-LM's unfused fp16 accumulation, and fp32 for fp32 training.
TEST(PlanTrainerBytes, GradientReductionDtypePerStack) {
  auto modern = ShippedStack("modern");
  auto legacy = ShippedStack("legacy");
  ASSERT_TRUE(modern.ok() && legacy.ok());
  Layout l;
  for (Precision prec : {Precision::kBF16, Precision::kFP32}) {
    l.precision = prec;
    EXPECT_EQ(GradReduceFor(l, *modern), GradReduce::kFp32);
    EXPECT_EQ(GradReduceFor(l, *legacy), GradReduce::kFp32);
  }
  l.precision = Precision::kFP16;
  EXPECT_EQ(GradReduceFor(l, *modern), GradReduce::kFp32);
  EXPECT_EQ(GradReduceFor(l, *legacy), GradReduce::kCompute);
  l.grad_reduce = GradReduce::kFp32;  // --accumulate-allreduce-grads-in-fp32
  EXPECT_EQ(GradReduceFor(l, *legacy), GradReduce::kFp32);
  EXPECT_EQ(std::string(GradReduceName(GradReduce::kCompute)), "compute");
  EXPECT_EQ(std::string(GradReduceDtypeName(l)), "fp32");
  l.grad_reduce = GradReduce::kCompute;
  EXPECT_EQ(std::string(GradReduceDtypeName(l)), "fp16");
  l.precision = Precision::kFP8;  // 16-bit gradients of an fp8 run
  EXPECT_EQ(std::string(GradReduceDtypeName(l)), "bf16");
  auto bad = GradReduceFromName("bf32");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("use fp32, compute"), std::string::npos) << bad.status().message();
}

// FSDP (ZeRO-3) gathers the weights in the compute precision and
// reduce-scatters the gradients in the reduction dtype, every micro-batch.
TEST(PlanTrainerBytes, FsdpGathersInComputePrecisionReducesInFp32) {
  auto made = Gpt2OnDgxA100();
  ASSERT_TRUE(made.ok()) << made.status().message();
  CostModel& model = **made;
  const int64_t n = 124439808;
  Layout l;
  l.dp = 8, l.global_batch = 32, l.micro_batch = 2, l.zero = 3;  // 2 micro-batches
  auto p = model.Predict(l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  int64_t gathered = 0, reduced = 0;
  for (const auto& c : p->dp_collectives) {
    (c.kind == CollectiveKind::kAllgather ? gathered : reduced) += c.payload_bytes;
  }
  // Forward and backward, 2 micro-batches, bf16; as the trainer gathers:
  // every block once a pass, the embedding with the head (which reads the
  // tied word embedding) twice in a forward, once in a backward (the
  // embedding's backward reads no weights; PlanZero3: at dp 8 no layer
  // boundary needs a seam bucket).
  const int64_t outer = 50257 * 768 + 1024 * 768 + 2 * 768;
  EXPECT_EQ(gathered, 2 * 2 * ((n + outer) + n));
  EXPECT_EQ(reduced, 2 * 4 * n + 8 + 8);  // 2 micro-batches, fp32; the norm's and loss's doubles
  const double fp32_comm = p->dp_comm_total_s;
  l.grad_reduce = GradReduce::kCompute;
  p = model.Predict(l);
  ASSERT_TRUE(p.ok());
  EXPECT_LT(p->dp_comm_total_s, fp32_comm);
  EXPECT_GT(p->dp_comm_total_s, 0.7 * fp32_comm);  // 6 of 8 bytes per element and micro-batch
}

TEST(PlanTrainerBytes, TensorParallelPayloadOfAStep) {
  auto made = Gpt2OnDgxA100();
  ASSERT_TRUE(made.ok()) << made.status().message();
  CostModel& model = **made;
  Layout l;
  l.tp = 2, l.dp = 4, l.global_batch = 16, l.micro_batch = 2;  // 2 micro-batches of 2 x 1024 tokens
  auto p = model.Predict(l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const int64_t tokens = 2 * 1024, msg = tokens * 768 * 2;  // bf16 activations
  // Per micro-batch: 4 all-reduces per layer x 12, the embedding output, the
  // head's input gradient, three fp32 values per token for the loss; once:
  // the gradient-norm sum.
  EXPECT_EQ(p->tp_payload_bytes, 2 * (4 * 12 * msg + 2 * msg + 3 * tokens * 4) + 8);
}

// The tiny GPT-2 of tests/cli/test_plan_vs_trainer.sh: 2 layers, 30 wide,
// 16 tokens, vocabulary 65 (padded to a multiple of 8 x tp).
ModelSpec TinyGpt(int64_t tp) {
  ModelSpec s;
  s.name = "tiny";
  s.arch = Arch::kGPT2;
  s.n_layer = 2, s.n_head = 2, s.n_kv_head = 2, s.n_embd = 30, s.ffn_hidden = 120;
  s.block_size = 16, s.vocab_size = 65;
  s.padded_vocab_size = RoundUp(65, 8 * tp);
  return s;
}

TEST(TpPpLayout, SequenceParallelCollectivesOfAStep) {
  // tp 2 with SP, 2 micro-batches of 2 x 16 tokens: X = 32 x 30 fp32 = 3840
  // bytes per full activation.
  const ModelSpec spec = TinyGpt(2);
  const ModelShard shard{2, 0, 1, 0, 1, true};
  const RankParams rank = SummarizeRankLayout(spec, BuildRankLayout(spec, shard));
  EXPECT_EQ(rank.layers, 2);
  EXPECT_TRUE(rank.embedding && rank.head);
  EXPECT_EQ(rank.block_replicated_numel, 2 * 6 * 30);  // ln_1, ln_2 (w, b), two projection biases
  EXPECT_EQ(rank.head_replicated_numel, 2 * 30);      // ln_f
  TpPpStepOptions o;
  o.micro_batch = 2, o.micro_batches = 2;
  const auto cs = TensorParallelStepCollectives(spec, shard, rank, o);
  const int64_t X = 32 * 30 * 4, C = 30;
  // Per micro-batch: 8 per block (gathers and reduce-scatters), a norm/bias
  // gradient all-reduce per block (6C), the embedding's reduce-scatter and
  // its gradient's all-gather, the final norm's all-gather, the
  // cross-entropy's max and sums (3 x 32 fp32), the head's reduce-scatter,
  // the final norm's gradient (2C); once: the gradient-norm sum.
  EXPECT_EQ(PayloadBytes(cs), 2 * (16 * X + 2 * 6 * C * 4 + 2 * X + X + 3 * 32 * 4 + X + 2 * C * 4) + 8);
  EXPECT_EQ(PayloadBytes(cs), 157736);  // what the trainer counted (docs/planner.md)
  EXPECT_EQ(Calls(cs), 2 * (16 + 2 + 2 + 1 + 2 + 1 + 1) + 1);
  // Without SP: 4 all-reduces per block, the embedding's and the head's.
  const ModelShard no_sp{2, 0, 1, 0, 1, false};
  const auto ar = TensorParallelStepCollectives(spec, no_sp, rank, o);
  EXPECT_EQ(PayloadBytes(ar), 2 * (8 * X + 2 * X + 3 * 32 * 4) + 8);
  EXPECT_EQ(PayloadBytes(ar), 77576);
}

TEST(TpPpLayout, PipelineMessagesOfAStage) {
  const ModelSpec spec = TinyGpt(1);
  TpPpStepOptions o;
  o.micro_batch = 2, o.micro_batches = 4;
  auto sched = BuildPipelineSchedule(ScheduleKind::k1F1B, 2, 1, 4);
  ASSERT_TRUE(sched.ok());
  const int64_t msg = 32 * 30 * 4;
  for (int64_t stage : {0, 1}) {
    const ModelShard shard{1, 0, 2, stage, 1, false};
    const RankParams rank = SummarizeRankLayout(spec, BuildRankLayout(spec, shard));
    EXPECT_EQ(rank.vocab_numel, 72 * 30);  // the embedding, or the last stage's tied copy
    const auto cs = PipelineStepCollectives(spec, shard, rank, *sched, o);
    // 4 sends and 4 receives (both ends counted), the tied embedding's
    // gradient both ways, the loss and the gradient-norm sums.
    EXPECT_EQ(PayloadBytes(cs), 8 * msg + 2 * 72 * 30 * 4 + 16) << stage;
    EXPECT_EQ(Calls(cs), 8 + 2 + 2) << stage;
  }
  // A middle stage of 4 sends and receives both ways, and exchanges no
  // embedding; with SP at tp 2 a message is half the rows.
  auto s4 = BuildPipelineSchedule(ScheduleKind::kGPipe, 4, 1, 4);
  ASSERT_TRUE(s4.ok());
  const ModelSpec spec2 = TinyGpt(2);
  const ModelShard mid{2, 0, 4, 1, 1, true};
  const RankParams rank = SummarizeRankLayout(spec2, BuildRankLayout(spec2, mid));
  EXPECT_EQ(PayloadBytes(PipelineStepCollectives(spec2, mid, rank, *s4, o)), 16 * msg / 2 + 16);
  // Megatron's scatter-gather splits a message over the TP ranks.
  o.pp_scatter_gather = true;
  EXPECT_EQ(PipelineMessageNumel(spec2, ModelShard{2, 0, 4, 1, 1, false}, 2, true), 32 * 30 / 2);
  EXPECT_EQ(PipelineMessageNumel(spec2, ModelShard{2, 0, 4, 1, 1, false}, 2, false), 32 * 30);
}

TEST(TpPpLayout, UntiedModelsKeepNoEmbeddingCopy) {
  // BuildRankLayout gives every last stage a copy of the first entry; a
  // Llama head is its own entry, so the copy is not counted or exchanged.
  ModelSpec s = TinyGpt(1);
  s.arch = Arch::kLlama;
  const ModelShard last{1, 0, 2, 1, 1, false};
  const ParamLayout lay = BuildRankLayout(s, last);
  const RankParams r = SummarizeRankLayout(s, lay);
  int64_t copy = 0;
  for (const auto& e : lay.entries) copy += e.tied_copy ? e.numel : 0;
  EXPECT_EQ(r.numel, lay.total_numel - copy);
  auto sched = BuildPipelineSchedule(ScheduleKind::k1F1B, 2, 1, 2);
  ASSERT_TRUE(sched.ok());
  TpPpStepOptions o;
  o.micro_batch = 2, o.micro_batches = 2;
  EXPECT_EQ(Calls(PipelineStepCollectives(s, last, r, *sched, o)), 4 + 2);
}

// The cpu stack's activation count against the trainer's own buffer
// (GPT::activation_bytes), float for float: every recompute mode the trainer
// runs, pp 1, 2 and 3 under 1f1b, gpipe, interleaved, zb-h1 and zb-v (their W's
// output-gradient copies too; each stage with
// its schedule's slots per chunk), sizes that are not multiples of the
// buffer's 16-float alignment. (TP ranks need a communicator: covered by
// tests/cli/test_plan_vs_trainer.sh.)
// Every mode and case for one model; returns the (stage, mode, case) count.
int CheckActivationCounts(const ModelSpec& spec) {
  const std::pair<Recompute, ActivationRecompute> modes[] = {
      {Recompute::kNone, ActivationRecompute::kNone},
      {Recompute::kSelective, ActivationRecompute::kSelective},
      {Recompute::kFull, ActivationRecompute::kFull}};
  struct Case { ScheduleKind kind; int32_t pp, vpp, m; };
  const Case cases[] = {{ScheduleKind::k1F1B, 1, 1, 3}, {ScheduleKind::k1F1B, 2, 1, 4},
                        {ScheduleKind::kGPipe, 2, 1, 3}, {ScheduleKind::kInterleaved, 2, 3, 4},
                        {ScheduleKind::k1F1B, 3, 1, 6}, {ScheduleKind::kZbH1, 3, 1, 4},
                        {ScheduleKind::kZbV, 3, 2, 4}};
  int checked = 0;
  for (const Case& c : cases) {
    auto sched = BuildPipelineSchedule(c.kind, c.pp, c.vpp, c.m);
    EXPECT_TRUE(sched.ok()) << sched.status().message();
    if (!sched.ok()) return checked;
    for (const auto& [rc, mode] : modes) {
      const bool split = SplitsBackward(c.kind);
      if (split && rc == Recompute::kFull) continue;  // the trainer refuses it
      Layout l;
      l.zero_bubble = split;
      l.pp = c.pp, l.vpp = c.vpp, l.micro_batch = 3, l.global_batch = 3 * c.m, l.recompute = rc;
      for (int64_t stage = 0; stage < c.pp; ++stage) {
        const auto chunks = TrainerChunksOf(spec, l, *sched, stage);
        const ModelShard shard{1, 0, c.pp, stage, c.vpp, false, PlacesChunksInV(c.kind)};
        auto gpt = GPT::CreateShard(spec, shard, nullptr, l.micro_batch, 1,
                                    PipelineExecutor::SlotsPerChunk(*sched, stage), mode, nullptr, split);
        EXPECT_TRUE(gpt.ok()) << gpt.status().message();
        if (!gpt.ok()) continue;
        EXPECT_EQ(TrainerActivationBytes(spec, l, chunks),
                  static_cast<int64_t>((*gpt)->activation_bytes()))
            << ArchName(spec.arch) << " " << RecomputeName(rc) << " pp " << c.pp << " vpp "
            << c.vpp << " stage " << stage;
        ++checked;
      }
    }
  }
  return checked;
}

// GPT-2 blocks, and Llama blocks (grouped-query, SwiGLU, untied head).
TEST(TrainerActivations, CountEqualsTheTrainersBuffer) {
  ModelSpec gpt2;
  gpt2.n_layer = 6; gpt2.n_head = 3; gpt2.n_kv_head = 3; gpt2.n_embd = 30; gpt2.ffn_hidden = 120;
  gpt2.block_size = 13; gpt2.vocab_size = 37; gpt2.padded_vocab_size = 40;
  EXPECT_EQ(CheckActivationCounts(gpt2), 3 * (1 + 2 + 2 + 2 + 3) + 2 * 3 + 2 * 3);
  ModelSpec llama = gpt2;
  llama.arch = Arch::kLlama;
  llama.n_head = 6; llama.n_kv_head = 2; llama.n_embd = 36; llama.ffn_hidden = 50;
  llama.tied_given = false;
  EXPECT_EQ(CheckActivationCounts(llama), 3 * (1 + 2 + 2 + 2 + 3) + 2 * 3 + 2 * 3);
  Layout op;
  op.recompute = Recompute::kOp;  // not the trainer's
  EXPECT_EQ(TrainerActivationBytes(gpt2, op, {TrainerChunk{}}), 0);
}

}  // namespace
}  // namespace scaletrain::plan
