// The backward split into its input-gradient pass (B) and weight-gradient
// pass (W) for zero-bubble pipeline schedules (GPT::BackwardChunkInput /
// BackwardChunkWeights): B writes no parameter gradient, and B then W adds
// bitwise what the fused BackwardChunk adds, with two micro-batches in
// flight whose B's both run before either W (as ZB-H1 defers them), for
// GPT-2 and Llama blocks, with and without the head and the embedding.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"

namespace scaletrain {
namespace {

ModelSpec Gpt2Spec() {
  ModelSpec s;
  s.n_layer = 4; s.n_head = 2; s.n_kv_head = 2; s.n_embd = 16; s.ffn_hidden = 64;
  s.block_size = 12; s.vocab_size = 13; s.padded_vocab_size = 16;
  return s;
}

ModelSpec LlamaSpec() {
  ModelSpec s = Gpt2Spec();
  s.arch = Arch::kLlama;
  s.n_head = 4; s.n_kv_head = 2; s.ffn_hidden = 40;
  s.tied_given = false;
  return s;
}

struct Run {
  std::vector<float> losses, grads, input_grads;
  std::vector<int64_t> layers_done;  // the on_grads_ready calls, in order
  bool grads_zero_after_b = true;
};

// Two micro-batches through one chunk of `shard`, backwards in reverse
// order; split: B1, B0, then W1, W0.
Run TrainTwo(const ModelSpec& spec, const ModelShard& shard, bool split,
             ActivationRecompute mode = ActivationRecompute::kNone) {
  const int64_t B = 2, T = spec.block_size, N = B * T;
  auto made = GPT::CreateShard(spec, shard, nullptr, B, 1, {2}, mode, nullptr, split);
  EXPECT_TRUE(made.ok()) << made.status().message();
  GPT& m = **made;
  m.InitWeights(5);
  Rng rng(17);
  std::vector<int32_t> tokens(2 * N), targets(2 * N);
  for (int64_t i = 0; i < 2 * N; ++i) {
    tokens[i] = static_cast<int32_t>(rng.NextU64() % spec.vocab_size);
    targets[i] = static_cast<int32_t>(rng.NextU64() % spec.vocab_size);
  }
  const int64_t C = spec.n_embd;
  std::vector<float> input(2 * N * C), dout(2 * N * C);
  for (float& x : input) x = rng.Normal();
  for (float& x : dout) x = 0.01f * rng.Normal();
  const bool first = m.chunk_has_embedding(0), last = m.chunk_has_head(0);
  Run r;
  for (int64_t slot = 0; slot < 2; ++slot) {
    auto loss = m.ForwardChunk(0, slot, tokens.data() + slot * N,
                               last ? targets.data() + slot * N : nullptr,
                               first ? nullptr : input.data() + slot * N * C, B, T);
    EXPECT_TRUE(loss.ok()) << loss.status().message();
    r.losses.push_back(*loss);
  }
  auto hook = [&](int64_t layer) { r.layers_done.push_back(layer); };
  auto keep_input_grad = [&] {
    if (!first) r.input_grads.insert(r.input_grads.end(), m.InputGrad(), m.InputGrad() + N * C);
  };
  for (int64_t slot = 1; slot >= 0; --slot) {
    const float* d = last ? nullptr : dout.data() + slot * N * C;
    if (split) {
      EXPECT_TRUE(m.BackwardChunkInput(0, slot, d, 0.5f).ok());
    } else {
      EXPECT_TRUE(m.BackwardChunk(0, slot, d, 0.5f, hook).ok());
    }
    keep_input_grad();
  }
  if (split) {
    for (int64_t i = 0; i < m.flat_numel(); ++i) r.grads_zero_after_b &= m.grads()[i] == 0.0f;
    for (int64_t slot = 1; slot >= 0; --slot) {
      EXPECT_TRUE(m.BackwardChunkWeights(0, slot, hook).ok());
    }
  }
  r.grads.assign(m.grads(), m.grads() + m.flat_numel());
  return r;
}

// Same size and the same bits (memcmp, which may not see a null pointer:
// an empty vector has none to compare).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void ExpectBitwiseEqual(const Run& split, const Run& fused) {
  EXPECT_TRUE(split.grads_zero_after_b) << "B wrote a parameter gradient";
  EXPECT_TRUE(SameBits(split.losses, fused.losses));
  EXPECT_TRUE(SameBits(split.input_grads, fused.input_grads));
  EXPECT_TRUE(SameBits(split.grads, fused.grads));
  EXPECT_EQ(split.layers_done, fused.layers_done);
  double sum = 0;  // not vacuous: the gradients are there
  for (float g : fused.grads) sum += static_cast<double>(g) * g;
  EXPECT_GT(sum, 0.0);
}

TEST(SplitBackward, BThenWEqualsTheFusedBackwardBitwise) {
  for (const ModelSpec& spec : {Gpt2Spec(), LlamaSpec()}) {
    SCOPED_TRACE(spec.arch == Arch::kLlama ? "llama" : "gpt2");
    // The whole model, the first of two stages (embedding, no head) and the
    // last (head, no embedding).
    for (ModelShard shard : {ModelShard{}, ModelShard{1, 0, 2, 0, 1, false},
                             ModelShard{1, 0, 2, 1, 1, false}}) {
      SCOPED_TRACE("pp " + std::to_string(shard.pp) + " stage " + std::to_string(shard.stage));
      ExpectBitwiseEqual(TrainTwo(spec, shard, true), TrainTwo(spec, shard, false));
    }
  }
}

TEST(SplitBackward, SelectiveRecomputeToo) {
  ExpectBitwiseEqual(TrainTwo(Gpt2Spec(), ModelShard{}, true, ActivationRecompute::kSelective),
                     TrainTwo(Gpt2Spec(), ModelShard{}, false, ActivationRecompute::kSelective));
}

TEST(SplitBackward, RefusesFullRecomputeAndOutOfOrderPasses) {
  const ModelSpec spec = Gpt2Spec();
  auto full = GPT::CreateShard(spec, ModelShard{}, nullptr, 2, 1, {1},
                               ActivationRecompute::kFull, nullptr, true);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("full recompute"), std::string::npos);
  auto plain = GPT::CreateShard(spec, ModelShard{}, nullptr, 2, 1, {1});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->BackwardChunkInput(0, 0, nullptr, 1.0f).ok());
  auto split = GPT::CreateShard(spec, ModelShard{}, nullptr, 2, 1, {1},
                                ActivationRecompute::kNone, nullptr, true);
  ASSERT_TRUE(split.ok());
  // W before any B.
  EXPECT_FALSE((*split)->BackwardChunkWeights(0, 0).ok());
  // The stash makes the split model's activations larger.
  EXPECT_GT((*split)->activation_bytes(), (*plain)->activation_bytes());
}

}  // namespace
}  // namespace scaletrain
