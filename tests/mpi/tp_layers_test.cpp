// The tensor-parallel layers (src/model/parallel_layers.h) one at a time,
// under mpirun with the world as the TP group (tp = 2 or 4), with and
// without sequence parallelism: each layer's forward and backward on the
// ranks' shards, put together, equal the unsharded layer (the same code at
// tp = 1 on whole tensors) within 1e-6 of the largest value. And whole
// Llama models (grouped-query, key/value heads split or replicated) against
// their shards: loss and every gradient.
//
//   mpirun -np 2|4 tp_layers_test
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/parallel_layers.h"
#include "parallel/process_groups.h"

namespace scaletrain {
namespace {

using Vec = std::vector<float>;

ProcessGroups* g_groups = nullptr;

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ParallelConfig p;
    p.tp = LaunchedWorldSize();
    auto groups = CreateCommunicators(p, "mpi", 60.0);
    ASSERT_TRUE(groups.ok()) << groups.status().message();
    groups_ = std::move(groups).value();
    g_groups = groups_.get();
  }
  void TearDown() override {
    g_groups = nullptr;
    groups_.reset();
  }

 private:
  static int64_t LaunchedWorldSize() {
    const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
    return n ? std::atoi(n) : 1;
  }
  std::unique_ptr<ProcessGroups> groups_;
};

Vec Random(int64_t n, uint64_t stream, float scale = 1.0f) {
  Rng rng(HashU64(42, stream, 0x74706c79));
  Vec v(static_cast<size_t>(n));
  for (float& x : v) x = scale * rng.Normal();
  return v;
}

// Rows [r0, r0 + rows) of a [*, width] matrix.
Vec Rows(const Vec& m, int64_t width, int64_t r0, int64_t rows) {
  return Vec(m.begin() + r0 * width, m.begin() + (r0 + rows) * width);
}
// Columns [c0, c0 + cols) of a [rows, width] matrix.
Vec Cols(const Vec& m, int64_t width, int64_t c0, int64_t cols) {
  Vec out;
  for (size_t r = 0; r < m.size() / static_cast<size_t>(width); ++r) {
    out.insert(out.end(), m.begin() + static_cast<int64_t>(r) * width + c0,
               m.begin() + static_cast<int64_t>(r) * width + c0 + cols);
  }
  return out;
}

// max |got - want| relative to the largest |want|.
double RelDiff(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return diff / scale;
}

constexpr double kTol = 1e-6;

class TpLayers : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_NE(g_groups, nullptr);
    tp_ = g_groups->tp->size();
    rank_ = g_groups->tp->rank();
    ASSERT_GE(tp_, 2) << "run under mpirun -np 2 or 4";
    sp_ = GetParam();
    par_ = std::make_unique<TensorParallel>(g_groups->tp.get(), tp_, rank_, sp_);
  }
  // This rank's rows of an N-row sequence-parallel region.
  int64_t r0() const { return par_->FirstResidualRow(N); }
  int64_t nr() const { return par_->ResidualRows(N); }

  const int64_t B = 2, T = 8, N = B * T;
  int64_t tp_ = 1, rank_ = 0;
  bool sp_ = false;
  TensorParallel one_{nullptr, 1, 0, false};  // the unsharded layer
  std::unique_ptr<TensorParallel> par_;
};

TEST_P(TpLayers, ColumnParallelLinear) {
  const int64_t in = 12, out = 8 * tp_, ol = out / tp_;
  const Vec x = Random(N * in, 1), w = Random(out * in, 2, 0.3f), b = Random(out, 3),
            dy = Random(N * out, 4);
  // Unsharded.
  Vec y(N * out), dx(N * in), dw(out * in, 0.0f), db(out, 0.0f), scratch(N * in);
  Vec x_copy = x;
  ASSERT_TRUE(
      one_.ColumnLinearForward(y.data(), x_copy.data(), x.data(), w.data(), b.data(), N, in, out)
          .ok());
  ASSERT_TRUE(one_.ColumnLinearBackward(dx.data(), dx.data(), dw.data(), db.data(), dy.data(),
                                        x.data(), w.data(), N, in, out)
                  .ok());
  // Sharded: this rank's output columns (rows of w), its residual rows of x.
  const Vec ws = Rows(w, in, rank_ * ol, ol), bs = Rows(b, 1, rank_ * ol, ol);
  Vec xs = Rows(x, in, r0(), nr()), x_full(N * in);
  float* xf = sp_ ? x_full.data() : xs.data();
  Vec ys(N * ol);
  ASSERT_TRUE(
      par_->ColumnLinearForward(ys.data(), xf, xs.data(), ws.data(), bs.data(), N, in, ol).ok());
  EXPECT_LT(RelDiff(ys, Cols(y, out, rank_ * ol, ol)), kTol);
  const Vec dys = Cols(dy, out, rank_ * ol, ol);
  Vec dxs(nr() * in), dx_full(N * in), dws(ol * in, 0.0f), dbs(ol, 0.0f);
  ASSERT_TRUE(par_->ColumnLinearBackward(dxs.data(), sp_ ? dx_full.data() : dxs.data(), dws.data(),
                                         dbs.data(), dys.data(), xf, ws.data(), N, in, ol)
                  .ok());
  EXPECT_LT(RelDiff(dxs, Rows(dx, in, r0(), nr())), kTol);
  EXPECT_LT(RelDiff(dws, Rows(dw, in, rank_ * ol, ol)), kTol);
  EXPECT_LT(RelDiff(dbs, Rows(db, 1, rank_ * ol, ol)), kTol);
}

TEST_P(TpLayers, RowParallelLinearIntoTheResidual) {
  const int64_t in = 8 * tp_, il = in / tp_, C = 12;
  const Vec x = Random(N * in, 5), w = Random(C * in, 6, 0.3f), b = Random(C, 7),
            res = Random(N * C, 8);
  const Vec dres = Random(N * C, 9);
  Vec out(N * C), partial(N * C), dx(N * in), dw(C * in, 0.0f), db(C, 0.0f), dres_copy = dres;
  ASSERT_TRUE(one_.RowLinearResidualForward(out.data(), res.data(), x.data(), w.data(), b.data(),
                                            partial.data(), N, in, C)
                  .ok());
  ASSERT_TRUE(one_.RowLinearBackward(dx.data(), dw.data(), db.data(), dres.data(), dres_copy.data(),
                                     x.data(), w.data(), N, in, C)
                  .ok());
  // Sharded: this rank's input columns (columns of w); the residual, the
  // output and its gradient on this rank's residual rows.
  const Vec xs = Cols(x, in, rank_ * il, il), ws = Cols(w, in, rank_ * il, il);
  const Vec ress = Rows(res, C, r0(), nr()), dress = Rows(dres, C, r0(), nr());
  Vec outs(nr() * C), partials(N * C);
  ASSERT_TRUE(par_->RowLinearResidualForward(outs.data(), ress.data(), xs.data(), ws.data(),
                                             b.data(), partials.data(), N, il, C)
                  .ok());
  EXPECT_LT(RelDiff(outs, Rows(out, C, r0(), nr())), kTol);
  // The bias is replicated: under sp each rank's gradient is a partial sum
  // that ReplicatedGrads completes.
  Vec dxs(N * il), dws(C * il, 0.0f), dbs(C, 0.0f), dres_full(N * C), slots(C);
  ReplicatedGrads rg(par_.get(), slots.data(), 1, C);
  ASSERT_TRUE(par_->RowLinearBackward(dxs.data(), dws.data(), rg.Target(dbs.data()), dress.data(),
                                      dres_full.data(), xs.data(), ws.data(), N, il, C)
                  .ok());
  ASSERT_TRUE(rg.Reduce().ok());
  EXPECT_LT(RelDiff(dxs, Cols(dx, in, rank_ * il, il)), kTol);
  EXPECT_LT(RelDiff(dws, Cols(dw, in, rank_ * il, il)), kTol);
  EXPECT_LT(RelDiff(dbs, db), kTol);
}

TEST_P(TpLayers, VocabParallelEmbedding) {
  const int64_t C = 12, vocab = 10 * tp_ - 3, padded = 10 * tp_;
  Rng rng(HashU64(42, 10, 0));
  std::vector<int32_t> tokens(N);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab)));
  Vec wte = Random(padded * C, 11), wpe = Random(T * C, 12);
  std::fill(wte.begin() + vocab * C, wte.end(), 0.0f);  // padding rows, as the model keeps them
  const Vec dres = Random(N * C, 13);
  Vec out(N * C), partial(N * C), dwte(padded * C, 0.0f), dwpe(T * C, 0.0f), scratch(N * C);
  const VocabShard all = one_.VocabShardOf(vocab, padded);
  ASSERT_TRUE(one_.VocabEmbeddingForward(out.data(), partial.data(), tokens.data(), wte.data(),
                                         wpe.data(), all, B, T, C)
                  .ok());
  ASSERT_TRUE(one_.VocabEmbeddingBackward(dwte.data(), dwpe.data(), dres.data(), scratch.data(),
                                          tokens.data(), all, B, T, C)
                  .ok());
  const VocabShard mine = par_->VocabShardOf(vocab, padded);
  EXPECT_EQ(mine.rows, padded / tp_);
  EXPECT_EQ(mine.valid, rank_ == tp_ - 1 ? mine.rows - 3 : mine.rows);
  const Vec wtes = Rows(wte, C, mine.begin, mine.rows);
  Vec outs(nr() * C), dwtes(mine.rows * C, 0.0f), dwpes(T * C, 0.0f), dres_full(N * C);
  ASSERT_TRUE(par_->VocabEmbeddingForward(outs.data(), partial.data(), tokens.data(), wtes.data(),
                                          wpe.data(), mine, B, T, C)
                  .ok());
  EXPECT_LT(RelDiff(outs, Rows(out, C, r0(), nr())), kTol);
  const Vec dress = Rows(dres, C, r0(), nr());
  ASSERT_TRUE(par_->VocabEmbeddingBackward(dwtes.data(), dwpes.data(), dress.data(),
                                           dres_full.data(), tokens.data(), mine, B, T, C)
                  .ok());
  EXPECT_LT(RelDiff(dwtes, Rows(dwte, C, mine.begin, mine.rows)), kTol);
  EXPECT_LT(RelDiff(dwpes, dwpe), kTol);
}

TEST_P(TpLayers, VocabParallelCrossEntropy) {
  const int64_t vocab = 10 * tp_ - 3, padded = 10 * tp_;
  Rng rng(HashU64(42, 20, 0));
  std::vector<int32_t> targets(N);
  for (int32_t& t : targets) t = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab)));
  const Vec logits = Random(N * padded, 21, 3.0f);
  Vec losses(N), probs(N * padded), stats(3 * N);
  const VocabShard all = one_.VocabShardOf(vocab, padded);
  ASSERT_TRUE(one_.VocabCrossEntropyForward(losses.data(), probs.data(), stats.data(),
                                            logits.data(), targets.data(), N, vocab, all)
                  .ok());
  one_.VocabCrossEntropyBackward(probs.data(), probs.data(), targets.data(), 0.5f, N, vocab, all);
  const VocabShard mine = par_->VocabShardOf(vocab, padded);
  Vec ls = Cols(logits, padded, mine.begin, mine.rows), lossess(N), probss(N * mine.rows);
  ASSERT_TRUE(par_->VocabCrossEntropyForward(lossess.data(), probss.data(), stats.data(), ls.data(),
                                             targets.data(), N, vocab, mine)
                  .ok());
  EXPECT_LT(RelDiff(lossess, losses), kTol);
  par_->VocabCrossEntropyBackward(probss.data(), probss.data(), targets.data(), 0.5f, N, vocab,
                                  mine);
  EXPECT_LT(RelDiff(probss, Cols(probs, padded, mine.begin, mine.rows)), kTol);
}

// The layers must differ from the reference when the inputs do: the
// comparison above can fail.
TEST_P(TpLayers, ComparisonDetectsAWrongShard) {
  const int64_t in = 12, out = 8 * tp_, ol = out / tp_;
  const Vec x = Random(N * in, 1), w = Random(out * in, 2, 0.3f);
  Vec y(N * out), xc = x;
  ASSERT_TRUE(
      one_.ColumnLinearForward(y.data(), xc.data(), x.data(), w.data(), nullptr, N, in, out).ok());
  const int64_t wrong = (rank_ + 1) % tp_;  // another rank's rows of w
  const Vec ws = Rows(w, in, wrong * ol, ol);
  Vec xs = Rows(x, in, r0(), nr()), x_full(N * in), ys(N * ol);
  ASSERT_TRUE(par_->ColumnLinearForward(ys.data(), sp_ ? x_full.data() : xs.data(), xs.data(),
                                        ws.data(), nullptr, N, in, ol)
                  .ok());
  EXPECT_GT(RelDiff(ys, Cols(y, out, rank_ * ol, ol)), 1e-3);
}

// A whole Llama model (GPT at tp = 1) against its TP shards: the loss and
// every parameter's gradient, the key/value heads split (n_kv_head = tp) or
// replicated on every rank (n_kv_head 1 or 2 < tp; their gradients summed
// over TP), with and without sp.
TEST_P(TpLayers, LlamaShardsEqualTheWholeModel) {
  for (int64_t kv : {int64_t{1}, int64_t{2}, tp_}) {
    ModelSpec spec;
    spec.arch = Arch::kLlama;
    spec.n_layer = 2; spec.n_head = 4; spec.n_kv_head = kv; spec.n_embd = 32;
    spec.ffn_hidden = 8 * tp_; spec.block_size = T; spec.vocab_size = 29;
    spec.padded_vocab_size = 32;
    spec.tied_given = kv != 2;  // untied head too
    std::vector<int32_t> tokens(N), targets(N);
    for (int64_t i = 0; i < N; ++i) {
      tokens[i] = static_cast<int32_t>((i * 7 + 3) % spec.vocab_size);
      targets[i] = static_cast<int32_t>((i * 5 + 1) % spec.vocab_size);
    }
    auto whole = GPT::Create(spec, B);
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    (*whole)->InitWeights(5);
    const float want_loss = (*whole)->Forward(tokens.data(), targets.data(), B, T);
    (*whole)->Backward(1.0f);
    auto shard = GPT::CreateShard(spec, ModelShard{tp_, rank_, 1, 0, 1, sp_}, g_groups->tp.get(), B, 1);
    ASSERT_TRUE(shard.ok()) << shard.status().message();
    GPT& m = **shard;
    m.InitWeights(5);
    auto loss = m.ForwardChunk(0, 0, tokens.data(), targets.data(), nullptr, B, T);
    ASSERT_TRUE(loss.ok()) << loss.status().message();
    ASSERT_TRUE(m.BackwardChunk(0, 0, nullptr, 1.0f).ok());
    EXPECT_NEAR(*loss, want_loss, 1e-5 * std::fabs(want_loss)) << "n_kv_head " << kv;
    const ParamLayout full = BuildParamLayout(spec, 1);
    for (const ParamEntry& e : m.layout().entries) {
      Vec want(static_cast<size_t>(e.numel));
      ExtractShard(e, (*whole)->grads() + full.Find(e.name)->offset, want.data());
      const Vec got(m.grads() + e.offset, m.grads() + e.offset + e.numel);
      EXPECT_LT(RelDiff(got, want), 1e-5) << e.name << " n_kv_head " << kv;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, TpLayers, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "sp" : "no_sp"; });

}  // namespace
}  // namespace scaletrain

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new scaletrain::MpiEnvironment);
  return RUN_ALL_TESTS();
}
