// The whole GPT-2 and Llama models against an independent reference: PyTorch (float64)
// loads the weights from our model.safetensors and recomputes the logits, the
// loss and every parameter's gradient; each must match ours within 1e-4
// relative (tests/reference/README.md says how the error is measured). A
// negative control checks the comparison can fail: one gradient element moved
// by 10x the tolerance must be caught.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/model_io.h"
#include "checkpoint/safetensors.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/spec.h"

namespace scaletrain {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, where python3-torch installs

std::string CheckerPath() { return std::string(ST_SOURCE_DIR) + "/tests/reference/torch_reference_check.py"; }

bool TorchAvailable() {
  const std::string cmd = std::string(kPython) + " -c 'import torch, numpy' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs `cmd` through the shell, stdout and stderr together.
CommandResult RunCommand(const std::string& cmd) {
  CommandResult r;
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    r.output = "popen failed for: " + cmd;
    return r;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

CommandResult RunChecker(const fs::path& dir) {
  return RunCommand(std::string(kPython) + " " + CheckerPath() + " " + dir.string());
}

// A fresh directory, removed afterwards unless the test failed (then it is
// kept, and named, for running the checker by hand).
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "st_model_ref_XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed for " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    if (::testing::Test::HasFailure()) {
      std::fprintf(stderr, "keeping %s for inspection\n", path_.c_str());
      return;
    }
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Small enough to run in a second, big enough that every op matters: two
// layers (the residual gradient crosses a block), four heads, and a
// vocabulary of 61 padded to 64 so the padding columns are exercised.
ModelSpec SmallSpec() {
  ModelSpec s;
  s.name = "reference-test";
  s.arch = Arch::kGPT2;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_kv_head = 4;
  s.n_embd = 32;
  s.ffn_hidden = 4 * 32;
  s.block_size = 16;
  s.vocab_size = 61;
  s.padded_vocab_size = 64;
  return s;
}

// The Llama variant: grouped-query attention (n_kv_head 2 of 4 heads, or 1:
// multi-query), a SwiGLU width that is no multiple of n_embd, a rotary base
// and norm epsilon away from the defaults (a wrong theta or eps shows), tied
// or untied head.
ModelSpec LlamaSpec(int64_t n_kv_head, bool tied) {
  ModelSpec s = SmallSpec();
  s.arch = Arch::kLlama;
  s.n_kv_head = n_kv_head;
  s.ffn_hidden = 40;
  s.rope_theta = 500.0;
  s.norm_eps = 1e-3;
  s.tied_given = tied;
  return s;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// GPT-2 init leaves biases at 0, norms at 1, padding rows at 0, attention
// nearly uniform and GELU inputs near 0, under which a wrong bias,
// norm-affine or padding path, a softmax that only works when flat, or the
// wrong GELU would go unseen. This moves every one of them away from there.
void PerturbWeights(GPT& model, uint64_t seed) {
  Rng rng(seed);
  const ModelSpec& s = model.spec();
  float* p = model.params();
  for (const ParamEntry& e : model.layout().entries) {
    float* w = p + e.offset;
    const bool is_norm = e.name.find(".ln_") != std::string::npos || EndsWith(e.name, "norm.weight");
    const bool vocab_rows = e.name == "transformer.wte.weight" || e.name == "tok_embeddings.weight" ||
                            e.name == "output.weight";
    if (EndsWith(e.name, ".bias")) {
      for (int64_t i = 0; i < e.numel; ++i) w[i] = 0.1f * rng.Normal();
    } else if (is_norm) {
      for (int64_t i = 0; i < e.numel; ++i) w[i] = 1.0f + 0.2f * rng.Normal();
    } else if (EndsWith(e.name, "attn.c_attn.weight") || EndsWith(e.name, "attention.wq.weight") ||
               EndsWith(e.name, "attention.wk.weight")) {
      for (int64_t i = 0; i < e.numel; ++i) w[i] *= 12.0f;  // sharper attention
    } else if (EndsWith(e.name, "mlp.c_fc.weight") || EndsWith(e.name, "feed_forward.w1.weight")) {
      // GELU / SiLU inputs of order 1-3, where their forms differ from others.
      for (int64_t i = 0; i < e.numel; ++i) w[i] *= 25.0f;
    } else if (vocab_rows) {
      // Rows past vocab_size give logits that the loss must ignore.
      for (int64_t i = s.vocab_size * s.n_embd; i < e.numel; ++i) w[i] = 0.5f * rng.Normal();
    }
  }
}

struct RunOutputs {
  std::vector<int32_t> tokens, targets;
  std::vector<float> logits, grads;
  float loss = 0.0f;
  int64_t B = 0, T = 0;
};

RunOutputs ForwardBackward(GPT& model, int64_t B, int64_t T, uint64_t seed) {
  const ModelSpec& s = model.spec();
  RunOutputs r;
  r.B = B;
  r.T = T;
  Rng rng(seed);
  r.tokens.resize(B * T);
  r.targets.resize(B * T);
  for (auto& t : r.tokens) t = static_cast<int32_t>(rng.Below(s.vocab_size));
  for (auto& t : r.targets) t = static_cast<int32_t>(rng.Below(s.vocab_size));
  model.ZeroGrad();
  r.loss = model.Forward(r.tokens.data(), r.targets.data(), B, T);
  model.Backward(1.0f);
  const int64_t Vp = s.padded_vocab_size;
  r.logits.resize(B * T * Vp);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(model.logits(b, t), Vp, r.logits.begin() + (b * T + t) * Vp);
    }
  }
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  return r;
}

// model.safetensors (the parameters) and outputs.safetensors (inputs, our
// logits/loss/gradients, the config as metadata) for the checker.
void WriteCase(const fs::path& dir, const GPT& model, const RunOutputs& r) {
  const ModelSpec& s = model.spec();
  Status st = WriteSafetensors((dir / "model.safetensors").string(),
                               LayoutTensors(model.layout(), model.params()));
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<NamedTensor> out = {
      {"tokens", DType::kI32, {r.B, r.T}, r.tokens.data()},
      {"targets", DType::kI32, {r.B, r.T}, r.targets.data()},
      {"logits", DType::kF32, {r.B, r.T, s.padded_vocab_size}, r.logits.data()},
      {"loss", DType::kF32, {1}, &r.loss},
  };
  for (NamedTensor& g : LayoutTensors(model.layout(), r.grads.data(), "grad.")) out.push_back(g);
  const std::map<std::string, std::string> meta = {
      {"n_layer", std::to_string(s.n_layer)},       {"n_head", std::to_string(s.n_head)},
      {"n_embd", std::to_string(s.n_embd)},         {"block_size", std::to_string(s.block_size)},
      {"vocab_size", std::to_string(s.vocab_size)}, {"padded_vocab_size", std::to_string(s.padded_vocab_size)},
      {"arch", ArchName(s.arch)},                   {"n_kv_head", std::to_string(s.n_kv_head)},
      {"ffn_hidden", std::to_string(s.ffn_hidden)}, {"rope_theta", std::to_string(s.rope_theta)},
      {"norm_eps", std::to_string(s.norm_eps)},
      {"tied_embeddings", s.tied_embeddings() ? "true" : "false"},
  };
  st = WriteSafetensors((dir / "outputs.safetensors").string(), out, meta);
  ASSERT_TRUE(st.ok()) << st.message();
}

class ModelReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!TorchAvailable()) GTEST_SKIP() << "PyTorch not installed (apt-get install python3-torch)";
    UseModel(SmallSpec());
  }

  void UseModel(const ModelSpec& spec) {
    auto m = GPT::Create(spec, /*max_batch=*/3);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(*m);
    model_->InitWeights(/*seed=*/20240611);
  }

  // Runs one case through the checker and expects it to pass.
  void ExpectMatchesReference(int64_t B, int64_t T, uint64_t data_seed) {
    RunOutputs r = ForwardBackward(*model_, B, T, data_seed);
    ASSERT_TRUE(std::isfinite(r.loss));
    TempDir dir;
    WriteCase(dir.path(), *model_, r);
    if (HasFatalFailure()) return;
    const CommandResult res = RunChecker(dir.path());
    EXPECT_EQ(res.exit_code, 0) << "scaletrain's model disagrees with the PyTorch reference "
                                << "(or the checker failed to run):\n"
                                << res.output;
    // The per-tensor table, for the log.
    std::printf("%s", res.output.c_str());
  }

  std::unique_ptr<GPT> model_;
};

TEST_F(ModelReferenceTest, InitialWeightsFullContext) { ExpectMatchesReference(3, 16, 1); }

TEST_F(ModelReferenceTest, PerturbedWeightsFullContext) {
  PerturbWeights(*model_, 7);
  ExpectMatchesReference(3, 16, 2);
}

// T < block_size: only the first T position embeddings take part (the rest
// must get zero gradient), and attention runs over a shorter causal window.
TEST_F(ModelReferenceTest, PerturbedWeightsShortSequence) {
  PerturbWeights(*model_, 8);
  ExpectMatchesReference(2, 7, 3);
}

// Llama blocks: RMSNorm, rotary q/k, grouped-query attention, SwiGLU, no
// biases or position table, untied or tied head.
TEST_F(ModelReferenceTest, LlamaGqaUntiedInitialWeights) {
  UseModel(LlamaSpec(2, false));
  ExpectMatchesReference(3, 16, 4);
}

TEST_F(ModelReferenceTest, LlamaGqaUntiedPerturbedWeights) {
  UseModel(LlamaSpec(2, false));
  PerturbWeights(*model_, 9);
  ExpectMatchesReference(3, 16, 5);
}

TEST_F(ModelReferenceTest, LlamaMultiQueryTiedShortSequence) {
  UseModel(LlamaSpec(1, true));
  PerturbWeights(*model_, 10);
  ExpectMatchesReference(2, 7, 6);
}

TEST_F(ModelReferenceTest, LlamaMultiHeadTied) {
  UseModel(LlamaSpec(4, true));
  PerturbWeights(*model_, 11);
  ExpectMatchesReference(2, 16, 7);
}

// The negative control: the same comparison, with one gradient element of
// ours moved by 1e-3 of that tensor's largest gradient (10x the tolerance),
// must fail and name the tensor.
TEST_F(ModelReferenceTest, CheckerCatchesAPerturbedGradient) {
  PerturbWeights(*model_, 7);
  RunOutputs r = ForwardBackward(*model_, 3, 16, 2);

  TempDir good;
  WriteCase(good.path(), *model_, r);
  if (HasFatalFailure()) return;
  const CommandResult ok = RunChecker(good.path());
  ASSERT_EQ(ok.exit_code, 0) << "the unperturbed case must pass first:\n" << ok.output;

  const std::string target = "transformer.h.1.mlp.c_fc.weight";
  const ParamEntry* e = model_->layout().Find(target);
  ASSERT_NE(e, nullptr);
  float max_abs = 0.0f;
  for (int64_t i = 0; i < e->numel; ++i) max_abs = std::max(max_abs, std::fabs(r.grads[e->offset + i]));
  ASSERT_GT(max_abs, 0.0f);
  r.grads[e->offset + e->numel / 3] += 1e-3f * max_abs;

  TempDir bad;
  WriteCase(bad.path(), *model_, r);
  if (HasFatalFailure()) return;
  const CommandResult res = RunChecker(bad.path());
  EXPECT_EQ(res.exit_code, 1) << "the checker passed a gradient off by 10x the tolerance:\n"
                              << res.output;
  // Only the perturbed tensor fails.
  EXPECT_NE(res.output.find(target), std::string::npos) << res.output;
  size_t fails = 0;
  std::string failed_line;
  for (size_t pos = 0; (pos = res.output.find("  FAIL", pos)) != std::string::npos; ++pos) {
    ++fails;
    const size_t begin = res.output.rfind('\n', pos) + 1;
    failed_line = res.output.substr(begin, pos - begin);
  }
  EXPECT_EQ(fails, 1u) << res.output;
  EXPECT_EQ(failed_line.rfind(target, 0), 0u) << "wrong tensor flagged: " << failed_line;
}

}  // namespace
}  // namespace scaletrain
