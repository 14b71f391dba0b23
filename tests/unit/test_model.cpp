#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "core/rng.h"

#include "model/gpt.h"
#include "model/param_layout.h"

namespace scaletrain {
namespace {

ModelSpec Gpt2(int64_t L, int64_t H, int64_t C, int64_t T, int64_t V, int64_t Vp) {
  ModelSpec s;
  s.n_layer = L; s.n_head = H; s.n_kv_head = H; s.n_embd = C; s.ffn_hidden = 4 * C;
  s.block_size = T; s.vocab_size = V; s.padded_vocab_size = Vp;
  return s;
}

TEST(ParamLayout, Gpt2SmallMatchesPublishedCount) {
  // GPT-2 124M as published by OpenAI / counted by nanoGPT with tied head.
  EXPECT_EQ(BuildParamLayout(Gpt2(12, 12, 768, 1024, 50257, 50257)).total_numel, 124439808);
  // llm.c pads the vocabulary to 50304.
  EXPECT_EQ(BuildParamLayout(Gpt2(12, 12, 768, 1024, 50257, 50304)).total_numel,
            124439808 + (50304 - 50257) * 768);
}

TEST(ParamLayout, OffsetsAreContiguousAndNamed) {
  ParamLayout l = BuildParamLayout(Gpt2(2, 2, 8, 4, 5, 8));
  int64_t off = 0;
  for (const auto& e : l.entries) {
    EXPECT_EQ(e.offset, off) << e.name;
    EXPECT_EQ(e.numel, NumElements(e.shape)) << e.name;
    off += e.numel;
  }
  EXPECT_EQ(off, l.total_numel);
  ASSERT_NE(l.Find("transformer.h.1.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(l.Find("transformer.h.1.attn.c_attn.weight")->shape, (Shape{24, 8}));
  EXPECT_EQ(l.Find("transformer.h.1.attn.c_attn.weight")->tp_split, TpSplit::kColumn);
  EXPECT_EQ(l.Find("transformer.h.1.mlp.c_proj.weight")->tp_split, TpSplit::kRow);
  EXPECT_FALSE(l.Find("transformer.h.0.ln_1.weight")->weight_decay);
  EXPECT_FALSE(l.Find("transformer.h.0.attn.c_attn.bias")->weight_decay);
  EXPECT_TRUE(l.Find("transformer.wte.weight")->weight_decay);
}

TEST(ParamLayout, StagesAreContiguousAndBalanced) {
  for (int64_t L : {1, 4, 7, 12}) {
    for (int64_t pp : {1, 2, 3, 4}) {
      if (pp > L) continue;
      std::vector<int64_t> count(pp, 0);
      int64_t prev = 0;
      for (int64_t l = 0; l < L; ++l) {
        int64_t s = StageOfLayer(l, L, pp);
        ASSERT_GE(s, prev);
        ASSERT_LT(s, pp);
        prev = s;
        count[s]++;
      }
      auto [mn, mx] = std::minmax_element(count.begin(), count.end());
      EXPECT_LE(*mx - *mn, 1) << "L=" << L << " pp=" << pp;
      EXPECT_GE(*mn, 1);
    }
  }
}

TEST(ParamLayout, LlamaCountsWithGqa) {
  ModelSpec s;
  s.arch = Arch::kLlama;
  s.n_layer = 32; s.n_head = 32; s.n_kv_head = 8; s.n_embd = 4096; s.ffn_hidden = 14336;
  s.block_size = 8192; s.vocab_size = 128256; s.padded_vocab_size = 128256;
  // Llama 3 8B: 8.03B parameters (Meta's model card).
  EXPECT_EQ(BuildParamLayout(s).total_numel, 8030261248);
}

// The [model] keys: GPT-2's defaults unchanged; Llama's defaults and keys.
TEST(SpecFromConfig, Gpt2DefaultsAndLlamaKeys) {
  ModelConfig c;  // n_embd 128, n_head 4
  auto g = ModelSpecFromConfig(c, 65);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->arch, Arch::kGPT2);
  EXPECT_EQ(g->n_kv_head, 4);
  EXPECT_EQ(g->ffn_hidden, 512);
  EXPECT_TRUE(g->tied_embeddings());
  c.arch = "llama";
  auto l = ModelSpecFromConfig(c, 65);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->arch, Arch::kLlama);
  EXPECT_EQ(l->n_kv_head, 4);
  EXPECT_EQ(l->ffn_hidden, 344);  // 8/3 x 128 = 341.3, rounded up to a multiple of 8
  EXPECT_EQ(l->activation(), Activation::kSwiGLU);
  EXPECT_TRUE(l->tied_embeddings());
  c.n_kv_head = 2;
  c.ffn_hidden = 200;
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-6;
  c.tied_embeddings = false;
  l = ModelSpecFromConfig(c, 65);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->n_kv_head, 2);
  EXPECT_EQ(l->ffn_hidden, 200);
  EXPECT_EQ(l->rope_theta, 500000.0);
  EXPECT_EQ(l->norm_eps, 1e-6);
  EXPECT_FALSE(l->tied_embeddings());
  EXPECT_NE(BuildParamLayout(*l).Find("output.weight"), nullptr);
  c.arch = "gpt2";  // GPT-2's fused QKV has no grouped-query form: refused, not ignored
  const auto g2 = ModelSpecFromConfig(c, 65);
  ASSERT_FALSE(g2.ok());
  EXPECT_NE(g2.status().message().find("use arch = \"llama\""), std::string::npos) << g2.status().message();
}

TEST(Gpt, InitIsDeterministicAndFollowsGpt2Scheme) {
  auto a = GPT::Create(Gpt2(2, 2, 16, 8, 11, 16), 2);
  auto b = GPT::Create(Gpt2(2, 2, 16, 8, 11, 16), 2);
  ASSERT_TRUE(a.ok() && b.ok());
  (*a)->InitWeights(7);
  (*b)->InitWeights(7);
  const int64_t n = (*a)->num_params();
  EXPECT_EQ(0, std::memcmp((*a)->params(), (*b)->params(), n * sizeof(float)));
  const ParamLayout& l = (*a)->layout();
  const float* p = (*a)->params();
  EXPECT_EQ(p[l.Find("transformer.h.0.ln_1.weight")->offset], 1.0f);
  EXPECT_EQ(p[l.Find("transformer.h.0.ln_1.bias")->offset], 0.0f);
  // Padding rows of the embedding are zero.
  const auto* wte = l.Find("transformer.wte.weight");
  for (int64_t i = 11 * 16; i < 16 * 16; ++i) EXPECT_EQ(p[wte->offset + i], 0.0f);
  // Standard deviation of the big weights is near 0.02, residual projections smaller.
  auto stdev = [&](const std::string& name) {
    const auto* e = l.Find(name);
    double s2 = 0;
    for (int64_t i = 0; i < e->numel; ++i) s2 += double(p[e->offset + i]) * p[e->offset + i];
    return std::sqrt(s2 / e->numel);
  };
  EXPECT_NEAR(stdev("transformer.h.0.mlp.c_fc.weight"), 0.02, 0.003);
  EXPECT_NEAR(stdev("transformer.h.0.mlp.c_proj.weight"), 0.01, 0.002);
}

TEST(Gpt, RejectsPlannerOnlyBlocksForTraining) {
  // Llama blocks train with SwiGLU (their default), not with another MLP.
  ModelSpec s = Gpt2(2, 2, 16, 8, 11, 16);
  s.arch = Arch::kLlama;
  EXPECT_TRUE(GPT::Create(s, 1).ok());
  s.activation_given = Activation::kGelu;
  auto m = GPT::Create(s, 1);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("llama with activation 'gelu' is for the planner"), std::string::npos)
      << m.status().message();
  // GPT-2 blocks with another activation, or an untied head: planner only too.
  ModelSpec relu2 = Gpt2(2, 2, 16, 8, 11, 16);
  relu2.activation_given = Activation::kSquaredReLU;
  auto r = GPT::Create(relu2, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("activation 'squared_relu' is for the planner"), std::string::npos)
      << r.status().message();
  ModelSpec untied = Gpt2(2, 2, 16, 8, 11, 16);
  untied.tied_given = false;
  EXPECT_FALSE(GPT::Create(untied, 2).ok());
}

// A chunk call outside the rank's chunks and slots, or beyond the batch the
// activations were allocated for, is an error naming it, not a write past
// a buffer; so is a TP shard without its group.
TEST(Gpt, ChunkCallsOutsideTheAllocationAreErrors) {
  const ModelSpec s = Gpt2(2, 2, 16, 8, 11, 16);
  auto m = GPT::Create(s, 2);
  ASSERT_TRUE(m.ok());
  std::vector<int32_t> tok(3 * 8, 1);
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, const char*>> bad = {
      {1, 0, 2, 8, "no chunk 1 slot 0 on this rank"},
      {0, 1, 2, 8, "no chunk 0 slot 1 on this rank"},
      {0, 0, 3, 8, "batch 3 x 8 exceeds the model's 2 x 8"},
      {0, 0, 2, 9, "batch 2 x 9 exceeds the model's 2 x 8"},
      {0, 0, 0, 8, "batch 0 x 8 exceeds"},
  };
  for (const auto& [chunk, slot, B, T, message] : bad) {
    auto r = (*m)->ForwardChunk(chunk, slot, tok.data(), tok.data(), nullptr, B, T);
    ASSERT_FALSE(r.ok()) << message;
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE((*m)->ForwardChunk(0, 0, tok.data(), tok.data(), nullptr, 2, 8).ok());
  ModelShard tp2;
  tp2.tp = 2;
  auto no_group = GPT::CreateShard(s, tp2, nullptr, 2, 1);
  ASSERT_FALSE(no_group.ok());
  EXPECT_NE(no_group.status().message().find("needs the TP group's communicator"),
            std::string::npos)
      << no_group.status().message();
}

// Two micro-batches of 4 with loss scale 1/2 give the gradient of one batch
// of 8: the accumulation the trainer relies on.
void ExpectMicroBatchAccumulationEqualsFullBatch(const ModelSpec& s) {
  auto full = GPT::Create(s, 8);
  auto half = GPT::Create(s, 4);
  ASSERT_TRUE(full.ok() && half.ok());
  (*full)->InitWeights(3);
  (*half)->InitWeights(3);
  Rng rng(5);
  std::vector<int32_t> tok(8 * 8), tgt(8 * 8);
  for (auto& t : tok) t = static_cast<int32_t>(rng.Below(11));
  for (auto& t : tgt) t = static_cast<int32_t>(rng.Below(11));
  const float loss_full = (*full)->Forward(tok.data(), tgt.data(), 8, 8);
  (*full)->Backward(1.0f);
  float loss_half = 0;
  for (int m = 0; m < 2; ++m) {
    loss_half += 0.5f * (*half)->Forward(tok.data() + m * 32, tgt.data() + m * 32, 4, 8);
    (*half)->Backward(0.5f);
  }
  EXPECT_NEAR(loss_full, loss_half, 1e-5);
  double max_abs = 0, max_diff = 0;
  for (int64_t i = 0; i < (*full)->num_params(); ++i) {
    max_abs = std::max(max_abs, std::fabs(double((*full)->grads()[i])));
    max_diff = std::max(max_diff, std::fabs(double((*full)->grads()[i]) - (*half)->grads()[i]));
  }
  ASSERT_GT(max_abs, 0);
  EXPECT_LT(max_diff / max_abs, 1e-5);
}

TEST(Gpt, MicroBatchAccumulationEqualsFullBatch) {
  ExpectMicroBatchAccumulationEqualsFullBatch(Gpt2(2, 2, 16, 8, 11, 16));
  // Llama blocks: multi-query attention, SwiGLU, untied head, rotary q/k.
  ModelSpec llama = Gpt2(2, 2, 16, 8, 11, 16);
  llama.arch = Arch::kLlama;
  llama.n_kv_head = 1;
  llama.ffn_hidden = 24;
  llama.tied_given = false;
  ExpectMicroBatchAccumulationEqualsFullBatch(llama);
}

// The hook fires once per layer, last layer first, and a layer's gradients
// no longer change after its call (data parallelism reduces them from there).
TEST(Gpt, GradsReadyHookOrderAndFinality) {
  const ModelSpec s = Gpt2(3, 2, 16, 8, 11, 16);
  auto m = GPT::Create(s, 2);
  ASSERT_TRUE(m.ok());
  (*m)->InitWeights(4);
  std::vector<int32_t> tok(16, 1), tgt(16, 2);
  for (int i = 0; i < 16; ++i) tok[i] = i % 11, tgt[i] = (i * 7) % 11;
  (*m)->Forward(tok.data(), tgt.data(), 2, 8);
  const ParamLayout& l = (*m)->layout();
  std::vector<int64_t> order;
  std::vector<std::vector<float>> snap;  // grads of each layer at its call
  auto layer_grads = [&](int64_t layer) {
    std::vector<float> g;
    for (const auto& e : l.entries)
      if (e.layer == layer) g.insert(g.end(), (*m)->grads() + e.offset, (*m)->grads() + e.offset + e.numel);
    return g;
  };
  (*m)->Backward(1.0f, [&](int64_t layer) {
    order.push_back(layer);
    snap.push_back(layer_grads(layer));
  });
  EXPECT_EQ(order, (std::vector<int64_t>{3, 2, 1, 0, -1}));
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(snap[i], layer_grads(order[i])) << order[i];
}

// Loss of an untrained model is near ln(vocab): logits start small.
TEST(Gpt, InitialLossIsNearUniform) {
  auto m = GPT::Create(Gpt2(2, 2, 32, 16, 50, 64), 4);
  ASSERT_TRUE(m.ok());
  (*m)->InitWeights(1);
  Rng rng(2);
  std::vector<int32_t> tok(4 * 16), tgt(4 * 16);
  for (auto& t : tok) t = static_cast<int32_t>(rng.Below(50));
  for (auto& t : tgt) t = static_cast<int32_t>(rng.Below(50));
  EXPECT_NEAR((*m)->Forward(tok.data(), tgt.data(), 4, 16), std::log(50.0), 0.1);
}

}  // namespace
}  // namespace scaletrain

namespace scaletrain {
namespace {

ModelSpec ShardSpec() {
  ModelSpec s;
  s.name = "shard-test";
  s.n_layer = 4;
  s.n_head = 4;
  s.n_kv_head = 4;
  s.n_embd = 16;
  s.ffn_hidden = 64;
  s.block_size = 8;
  s.vocab_size = 30;
  s.padded_vocab_size = 32;
  return s;
}

// Across every (tp rank, stage) of a layout, the uniquely held elements of
// each tensor add up to the whole model once; the shards of a tensor put
// back together give the tensor (q,k,v split per head included).
TEST(RankLayout, ShardsCoverTheModelExactlyOnce) {
  const ModelSpec spec = ShardSpec();
  const ParamLayout full = BuildParamLayout(spec, 1);
  for (int64_t tp : {1, 2, 4}) {
    for (auto [pp, vpp] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {2, 2}, {4, 1}}) {
      int64_t unique = 0;
      std::vector<float> whole(static_cast<size_t>(full.total_numel));
      for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i);
      std::vector<float> rebuilt(whole.size(), -1.0f);
      for (int64_t stage = 0; stage < pp; ++stage) {
        for (int64_t r = 0; r < tp; ++r) {
          const ModelShard sh{tp, r, pp, stage, vpp, false};
          ASSERT_TRUE(CheckModelShard(spec, sh).ok());
          const ParamLayout lay = BuildRankLayout(spec, sh);
          std::vector<float> local(static_cast<size_t>(lay.total_numel));
          for (const ParamEntry& e : lay.entries) {
            const ParamEntry* f = full.Find(e.name);
            ASSERT_NE(f, nullptr) << e.name;
            if (e.unique) unique += e.numel;
            EXPECT_EQ(e.numel * (e.shard_dim >= 0 ? tp : 1), f->numel) << e.name;
            ExtractShard(e, whole.data() + f->offset, local.data() + e.offset);
            InsertShard(e, local.data() + e.offset, rebuilt.data() + f->offset);
          }
        }
      }
      EXPECT_EQ(unique, full.total_numel) << "tp " << tp << " pp " << pp << " vpp " << vpp;
      EXPECT_EQ(rebuilt, whole) << "tp " << tp << " pp " << pp << " vpp " << vpp;
    }
  }
}

TEST(RankLayout, AttentionShardTakesItsHeadsOfQKAndV) {
  const ModelSpec spec = ShardSpec();
  const ModelShard sh{2, 1, 1, 0, 1, false};
  const ParamLayout lay = BuildRankLayout(spec, sh);
  const ParamEntry* e = lay.Find("transformer.h.0.attn.c_attn.bias");
  ASSERT_NE(e, nullptr);
  std::vector<float> whole(48), shard(24);
  for (int i = 0; i < 48; ++i) whole[i] = static_cast<float>(i);
  ExtractShard(*e, whole.data(), shard.data());
  // C = 16: rank 1 of 2 holds rows 8..15 of q, k (16..31) and v (32..47).
  for (int p = 0; p < 3; ++p) {
    for (int i = 0; i < 8; ++i) EXPECT_EQ(shard[p * 8 + i], static_cast<float>(p * 16 + 8 + i));
  }
}

// Llama: 4 query heads, key/value heads split over tp when tp divides them,
// whole on every TP rank otherwise (tp 4 with 2 of them; multi-query at tp 2).
TEST(RankLayout, LlamaKeyValueHeadsSplitOrReplicated) {
  ModelSpec spec = ShardSpec();
  spec.arch = Arch::kLlama;
  spec.n_kv_head = 2;
  spec.ffn_hidden = 24;
  const ParamLayout full = BuildParamLayout(spec, 1);
  for (auto [tp, kv, replicated] : {std::tuple<int64_t, int64_t, bool>{2, 2, false}, {4, 2, true},
                                    {2, 1, true}, {4, 1, true}, {1, 1, false}}) {
    spec.n_kv_head = kv;
    const ParamLayout whole_layout = BuildParamLayout(spec, 1);
    EXPECT_EQ(KvHeadsReplicated(spec, tp), replicated) << tp << " " << kv;
    EXPECT_EQ(LocalKvHeads(spec, tp), replicated ? kv : kv / tp);
    int64_t unique = 0;
    for (int64_t r = 0; r < tp; ++r) {
      const ModelShard sh{tp, r, 1, 0, 1, false};
      ASSERT_TRUE(CheckModelShard(spec, sh).ok()) << CheckModelShard(spec, sh).message();
      const ParamLayout lay = BuildRankLayout(spec, sh);
      for (const ParamEntry& e : lay.entries) unique += e.unique ? e.numel : 0;
      const ParamEntry* wk = lay.Find("layers.0.attention.wk.weight");
      const ParamEntry* wq = lay.Find("layers.0.attention.wq.weight");
      ASSERT_NE(wk, nullptr);
      EXPECT_EQ(wk->shape[0], replicated ? kv * spec.head_dim() : kv * spec.head_dim() / tp);
      EXPECT_EQ(wk->tp_split, replicated ? TpSplit::kReplicated : TpSplit::kColumn);
      EXPECT_EQ(wk->unique, !replicated || r == 0);
      // wq, wk, wv adjacent: the model's fused q,k,v matmul relies on it.
      EXPECT_EQ(wk->offset, wq->offset + wq->numel);
      EXPECT_EQ(lay.Find("layers.0.attention.wv.weight")->offset, wk->offset + wk->numel);
      EXPECT_EQ(lay.Find("layers.0.feed_forward.w3.weight")->offset,
                lay.Find("layers.0.feed_forward.w1.weight")->offset +
                    lay.Find("layers.0.feed_forward.w1.weight")->numel);
    }
    EXPECT_EQ(unique, whole_layout.total_numel) << "tp " << tp << " kv " << kv;
  }
  EXPECT_GT(full.total_numel, 0);
  // 3 key/value heads at tp 2: tp neither divides them nor is divided by
  // them; refused, naming n_kv_head.
  ModelSpec odd = spec;
  odd.n_head = 6;
  odd.n_kv_head = 3;
  odd.n_embd = 24;
  const Status st = CheckModelShard(odd, {2, 0, 1, 0, 1, false});
  EXPECT_NE(st.message().find("model.n_kv_head = 3"), std::string::npos) << st.message();
}

TEST(RankLayout, BadLayoutsNameTheFix) {
  const ModelSpec spec = ShardSpec();
  Status st = CheckModelShard(spec, {3, 0, 1, 0, 1, false});
  EXPECT_NE(st.message().find("use tp in {1, 2, 4}"), std::string::npos) << st.message();
  st = CheckModelShard(spec, {1, 0, 8, 0, 1, false});
  EXPECT_NE(st.message().find("pp x vpp <= 4"), std::string::npos) << st.message();
  st = CheckModelShard(spec, {1, 0, 3, 0, 2, false});
  EXPECT_FALSE(st.ok());
  st = CheckModelShard(spec, {1, 0, 2, 0, 3, false});  // 6 virtual stages > 4 layers
  EXPECT_FALSE(st.ok());
}

}  // namespace
}  // namespace scaletrain

namespace scaletrain {
namespace {

ModelSpec Gpt2Like(int64_t L, int64_t C, int64_t V, int64_t T) {
  ModelSpec s;
  s.n_layer = L;
  s.n_head = 12;
  s.n_kv_head = 12;
  s.n_embd = C;
  s.ffn_hidden = 4 * C;
  s.block_size = T;
  s.vocab_size = V;
  s.padded_vocab_size = V;
  return s;
}

// A light head: the even split (earlier stages take the extra block).
TEST(PipelineSplit, LightHeadGivesTheEvenSplit) {
  const ModelSpec gpt3 = Gpt2Like(96, 12288, 51200, 2048);  // head ~0.34 of a block
  for (int64_t pp : {2, 4, 8, 16, 32}) {
    const auto starts = PipelineStageStarts(gpt3, pp);
    ASSERT_EQ(static_cast<int64_t>(starts.size()), pp + 1);
    for (int64_t s = 0; s < pp; ++s) {
      for (int64_t l = starts[s]; l < starts[s + 1]; ++l) EXPECT_EQ(StageOfLayer(l, 96, pp), s);
    }
  }
}

// GPT-2 124M: the head (2 x 768 x 50304 FLOPs a token) weighs ~4.5 blocks, so
// the last of 4 stages runs one block and the others share the rest.
TEST(PipelineSplit, HeavyHeadLeavesTheLastStageFewerBlocks) {
  const ModelSpec gpt2 = Gpt2Like(12, 768, 50304, 1024);
  const auto starts = PipelineStageStarts(gpt2, 4);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 4, 8, 11, 12}));
  // Every stage holds a block, and the split is what the rank layouts use.
  const auto stage_of = VirtualStageOfLayers(gpt2, 4, 1);
  EXPECT_EQ(stage_of.back(), 3);
  EXPECT_EQ(stage_of[10], 2);
  const ParamLayout last = BuildRankLayout(gpt2, ModelShard{1, 0, 4, 3, 1, false});
  EXPECT_NE(last.Find("transformer.h.11.ln_1.weight"), nullptr);
  EXPECT_EQ(last.Find("transformer.h.10.ln_1.weight"), nullptr);
}

}  // namespace
}  // namespace scaletrain
