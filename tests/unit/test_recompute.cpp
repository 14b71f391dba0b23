// Activation recomputation (model/gpt.h ActivationRecompute): selective and
// full recomputation give bitwise the losses and gradients of keeping every
// activation, with two micro-batches in flight in two slots (what a
// pipeline schedule does), and their activation buffers shrink as the mode
// says.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"

namespace scaletrain {
namespace {

ModelSpec Spec() {
  ModelSpec s;
  s.n_layer = 3; s.n_head = 2; s.n_kv_head = 2; s.n_embd = 16; s.ffn_hidden = 64;
  s.block_size = 24; s.vocab_size = 13; s.padded_vocab_size = 16;
  return s;
}

struct RunResult {
  std::vector<float> losses, grads;
  size_t activation_bytes = 0;
};

// Two micro-batches forward (slots 0 and 1), then their backwards in
// reverse order, accumulating into one gradient.
RunResult TrainOnce(ActivationRecompute mode) {
  const ModelSpec spec = Spec();
  const int64_t B = 2, T = spec.block_size, N = B * T;
  auto made = GPT::CreateShard(spec, ModelShard{}, nullptr, B, 1, {2}, mode);
  EXPECT_TRUE(made.ok()) << made.status().message();
  GPT& m = **made;
  m.InitWeights(3);
  Rng rng(11);
  std::vector<int32_t> tokens(2 * N), targets(2 * N);
  for (int64_t i = 0; i < 2 * N; ++i) {
    tokens[i] = static_cast<int32_t>(rng.NextU64() % spec.vocab_size);
    targets[i] = static_cast<int32_t>(rng.NextU64() % spec.vocab_size);
  }
  RunResult r;
  for (int64_t slot = 0; slot < 2; ++slot) {
    auto loss = m.ForwardChunk(0, slot, tokens.data() + slot * N, targets.data() + slot * N,
                               nullptr, B, T);
    EXPECT_TRUE(loss.ok());
    r.losses.push_back(*loss);
  }
  for (int64_t slot = 1; slot >= 0; --slot) {
    EXPECT_TRUE(m.BackwardChunk(0, slot, nullptr, 0.5f).ok());
  }
  r.grads.assign(m.grads(), m.grads() + m.flat_numel());
  r.activation_bytes = m.activation_bytes();
  return r;
}

TEST(Recompute, SelectiveAndFullGiveBitwiseTheSameLossesAndGradients) {
  const RunResult none = TrainOnce(ActivationRecompute::kNone);
  for (ActivationRecompute mode : {ActivationRecompute::kSelective, ActivationRecompute::kFull}) {
    const RunResult r = TrainOnce(mode);
    SCOPED_TRACE(ActivationRecomputeName(mode));
    ASSERT_EQ(r.losses.size(), none.losses.size());
    EXPECT_EQ(0, std::memcmp(r.losses.data(), none.losses.data(), none.losses.size() * sizeof(float)));
    ASSERT_EQ(r.grads.size(), none.grads.size());
    EXPECT_EQ(0, std::memcmp(r.grads.data(), none.grads.data(), none.grads.size() * sizeof(float)));
  }
  // Not vacuous: the gradients are there.
  double sum = 0;
  for (float g : none.grads) sum += static_cast<double>(g) * g;
  EXPECT_GT(sum, 0.0);
}

TEST(Recompute, ActivationBufferShrinksWithTheMode) {
  const ModelSpec spec = Spec();
  const int64_t B = 2, T = spec.block_size, L = spec.n_layer, slots = 2;
  auto bytes = [&](ActivationRecompute mode) {
    auto m = GPT::CreateShard(spec, ModelShard{}, nullptr, B, 1, {slots}, mode);
    EXPECT_TRUE(m.ok());
    return static_cast<int64_t>((*m)->activation_bytes());
  };
  const int64_t none = bytes(ActivationRecompute::kNone);
  const int64_t selective = bytes(ActivationRecompute::kSelective);
  const int64_t full = bytes(ActivationRecompute::kFull);
  // Selective keeps one B x heads x T x T probability buffer instead of one
  // per layer and slot (each a multiple of 16 floats here).
  const int64_t att = B * spec.n_head * T * T * 4;
  EXPECT_EQ(none - selective, (L * slots - 1) * att);
  EXPECT_LT(full, selective);
  // Full keeps one block's set (the working set) instead of one per layer
  // and slot, plus each block's output residual per slot.
  const int64_t residual = B * T * spec.n_embd * 4;
  auto one_layer = [&](ActivationRecompute mode) {
    ModelSpec one = spec;
    one.n_layer = 1;
    auto m = GPT::CreateShard(one, ModelShard{}, nullptr, B, 1, {slots}, mode);
    EXPECT_TRUE(m.ok());
    return static_cast<int64_t>((*m)->activation_bytes());
  };
  const int64_t layer_set = (none - one_layer(ActivationRecompute::kNone)) / (slots * (L - 1));
  EXPECT_EQ(none - full, (L * slots - 1) * layer_set - L * slots * residual);
}

}  // namespace
}  // namespace scaletrain
