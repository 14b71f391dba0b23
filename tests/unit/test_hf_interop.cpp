// Hugging Face interop (checkpoint/hf_interop.h): our export loads in the
// `transformers` library with the same logits as our model (within 1e-4,
// max abs); a model transformers itself saved imports with the same logits;
// export then import gives back the same weights bit for bit; F16/BF16
// files import; bad inputs leave nothing behind. The transformers checks
// skip where `import transformers` fails (scripts/install-deps.sh installs it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/hf_interop.h"
#include "checkpoint/model_io.h"
#include "checkpoint/safetensors.h"
#include "core/file_io.h"
#include "core/half.h"
#include "core/rng.h"
#include "data/bpe.h"
#include "data/hf_tokenizer.h"
#include "model/gpt.h"
#include "test_files.h"

namespace scaletrain {
namespace {

namespace fs = std::filesystem;
using test_files::ScratchDirTest;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, where python3-torch installs

std::string Checker() { return std::string(ST_SOURCE_DIR) + "/tests/reference/hf_check.py"; }

bool TransformersAvailable() {
  const std::string cmd =
      std::string(kPython) + " -c 'import transformers, torch, safetensors' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

int RunChecker(const std::string& args) {
  const int rc = std::system((std::string(kPython) + " " + Checker() + " " + args).c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// 2 layers, 4 heads, 32 wide, context 16, a char vocabulary of 61 padded to
// 64 (or `vocab` entries, padded to a multiple of 64).
ModelSpec SmallSpec(int64_t vocab = 61) {
  ModelSpec s;
  s.n_layer = 2;
  s.n_head = s.n_kv_head = 4;
  s.n_embd = 32;
  s.ffn_hidden = 128;
  s.block_size = 16;
  s.vocab_size = vocab;
  s.padded_vocab_size = RoundUp(vocab, 64);
  return s;
}

// SmallSpec's Llama: 4 query heads sharing 2 KV heads, SwiGLU 64 wide, a
// rotary base and RMSNorm epsilon away from the defaults, tied or not.
ModelSpec SmallLlamaSpec(bool tied, int64_t vocab = 61) {
  ModelSpec s = SmallSpec(vocab);
  s.arch = Arch::kLlama;
  s.name = "llama-test";
  s.n_kv_head = 2;
  s.ffn_hidden = 64;
  s.rope_theta = 500.0;
  s.norm_eps = 1e-4;
  s.tied_given = tied;
  return s;
}

// Characters '!' .. '!' + 60: the vocabulary's text, ids in order.
std::string VocabText() {
  std::string text;
  for (int i = 0; i < 61; ++i) text.push_back(static_cast<char>('!' + i));
  return text;
}

// Weights away from GPT-2's initial values (biases 0, norms 1, flat
// attention, logits near 0), so a wrong transpose, bias or norm mapping
// shows in the logits.
void Perturb(GPT& model) {
  Rng rng(7);
  float* p = model.params();
  for (const ParamEntry& e : model.layout().entries) {
    const bool bias = e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
    const bool norm = e.name.find("ln_") != std::string::npos || e.name.find("norm") != std::string::npos;
    for (int64_t i = 0; i < e.numel; ++i) {
      float& w = p[e.offset + i];
      if (bias)
        w = 0.1f * rng.Normal();
      else if (norm)
        w = 1.0f + 0.2f * rng.Normal();
      else if (e.name.find("c_fc.weight") != std::string::npos)
        w *= 25.0f;
      else if (e.name.find("c_attn.weight") != std::string::npos)
        w *= 8.0f;
      else if (e.name.find("attention.w") != std::string::npos)
        w *= 8.0f;
      else if (e.name.find("feed_forward.w") != std::string::npos)
        w *= 6.0f;
      else if (e.name == "transformer.wte.weight" || e.name == "tok_embeddings.weight" ||
               e.name == "output.weight")
        w = i >= model.spec().vocab_size * 32 ? 0.5f * rng.Normal() : 10.0f * w;
    }
  }
}

std::vector<float> Logits(GPT& model, const std::vector<int32_t>& tokens, int64_t B, int64_t T);

class HfInteropTest : public ScratchDirTest {
 protected:
  // Imports Path("case/hf") (hf_check.py make / make-llama wrote it, with
  // expected.safetensors: tokens and transformers' logits) and returns the
  // largest difference of our logits from transformers'; a failed step is a
  // test failure and infinity.
  double ImportedLogitsDifference(Arch arch) {
    const double kFail = std::numeric_limits<double>::infinity();
    auto s = ImportHf(Path("case/hf"), Path("imported"));
    EXPECT_TRUE(s.ok()) << s.status().message();
    EXPECT_FALSE(s.ok() && s->vocab_kind.has_value());
    auto expected = SafetensorsFile::Open(Path("case/expected.safetensors"));
    if (!s.ok() || !expected.ok()) return kFail;
    const NamedTensor* tok = (*expected)->Find("tokens");
    const NamedTensor* want = (*expected)->Find("logits");
    if (tok == nullptr || want == nullptr) return kFail;
    const int64_t B = tok->shape[0], T = tok->shape[1];
    const auto* t0 = static_cast<const int32_t*>(tok->data);
    auto loaded = LoadModelForInference(Path("imported"), B);
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    if (!loaded.ok()) return kFail;
    EXPECT_EQ(loaded->model->spec().arch, arch);
    EXPECT_EQ(loaded->model->spec().vocab_size, 50);
    const std::vector<float> ours = Logits(*loaded->model, std::vector<int32_t>(t0, t0 + B * T), B, T);
    if (static_cast<int64_t>(ours.size()) != NumElements(want->shape)) return kFail;
    double worst = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      worst = std::max(worst, std::fabs(double(ours[i]) - static_cast<const float*>(want->data)[i]));
    }
    return worst;
  }

  // A perturbed model saved as a whole-tensor checkpoint in run directory
  // Path("ckpt"), with the char vocabulary of VocabText() or the bytes.
  std::unique_ptr<GPT> SaveCheckpoint(bool bytes = false) {
    return SaveCheckpoint(bytes ? Vocabulary::Bytes() : *Vocabulary::CharsOf(VocabText()));
  }
  std::unique_ptr<GPT> SaveCheckpoint(const Vocabulary& vocab) {
    return SaveCheckpoint(vocab, SmallSpec(vocab.size()));
  }
  std::unique_ptr<GPT> SaveCheckpoint(const Vocabulary& vocab, const ModelSpec& spec) {
    auto m = GPT::Create(spec, 3);
    EXPECT_TRUE(m.ok()) << m.status().message();
    (*m)->InitWeights(1);
    Perturb(**m);
    CheckpointContents c;
    c.model = LayoutTensors((*m)->layout(), (*m)->params());
    c.manifest = {{"format", "scaletrain-checkpoint"},
                  {"version", 1},
                  {"step", 5},
                  {"model", SpecToJson(spec)},
                  {"vocab", vocab.ToJson()}};
    const Status st = WriteCheckpoint(Path("ckpt/checkpoints"), 5, c);
    EXPECT_TRUE(st.ok()) << st.message();
    return std::move(*m);
  }
};

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab) {
  Rng rng(11);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab)));
  return t;
}

// Logits [B, T, vocab_size] (the padding columns left out).
std::vector<float> Logits(GPT& model, const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  model.Forward(tokens.data(), nullptr, B, T);
  const int64_t V = model.spec().vocab_size;
  std::vector<float> out(static_cast<size_t>(B * T * V));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) std::memcpy(&out[(b * T + t) * V], model.logits(b, t), V * 4);
  }
  return out;
}

// Exports the checkpoint, runs our model on random tokens and has
// hf_check.py compare transformers' logits and tokenizer with ours (and,
// with `negative_control`, fail on logits moved by 10x the tolerance).
void CheckExport(GPT& model, const std::string& dir, const std::string& text,
                 const std::string& vocab_kind, bool negative_control) {
  auto s = ExportHf(dir + "/ckpt", dir + "/case/hf");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->vocab_kind, vocab_kind);
  const int64_t B = 3, T = 16, V = model.spec().vocab_size;
  const std::vector<int32_t> tokens = RandomTokens(B * T, V);
  const std::vector<float> logits = Logits(model, tokens, B, T);
  auto vocab = LoadModelForInference(dir + "/ckpt", 1);
  ASSERT_TRUE(vocab.ok());
  auto ids = vocab->vocab.Encode(text);
  ASSERT_TRUE(ids.ok());
  const std::map<std::string, std::string> meta = {{"text", text},
                                                   {"text_ids", nlohmann::json(*ids).dump()}};
  auto write = [&](const std::vector<float>& l) {
    return WriteSafetensors(dir + "/case/outputs.safetensors",
                            {{"tokens", DType::kI32, {B, T}, tokens.data()},
                             {"logits", DType::kF32, {B, T, V}, l.data()}},
                            meta);
  };
  ASSERT_TRUE(write(logits).ok());
  EXPECT_EQ(RunChecker("check " + dir + "/case"), 0);
  if (!negative_control) return;
  std::vector<float> moved = logits;
  moved[100] += 1e-3f;
  ASSERT_TRUE(write(moved).ok());
  EXPECT_EQ(RunChecker("check " + dir + "/case"), 1);
}

TEST_F(HfInteropTest, ExportLoadsInTransformersWithTheSameLogits) {
  if (!TransformersAvailable())
    GTEST_SKIP() << "transformers not installed (scripts/install-deps.sh)";
  std::unique_ptr<GPT> model = SaveCheckpoint();
  CheckExport(*model, dir_.string(), VocabText(), "char", true);
}

TEST_F(HfInteropTest, ByteVocabularyExportLoadsInTransformers) {
  if (!TransformersAvailable())
    GTEST_SKIP() << "transformers not installed (scripts/install-deps.sh)";
  std::unique_ptr<GPT> model = SaveCheckpoint(/*bytes=*/true);
  CheckExport(*model, dir_.string(), "h\xC3\xA9llo \n\x01\x7F!", "byte", false);
}

// A byte-level BPE trained here: transformers' tokenizer (from tokenizer.json)
// gives our ids for a text with words, digits, contractions, runs of spaces,
// newlines and non-ASCII letters, and decodes them back.
TEST_F(HfInteropTest, BpeVocabularyExportLoadsInTransformers) {
  if (!TransformersAvailable())
    GTEST_SKIP() << "transformers not installed (scripts/install-deps.sh)";
  const std::string corpus =
      "First Citizen: We are accounted poor citizens, the patricians good. What authority "
      "surfeits on would relieve us. I'll say it's 2024 and they've 17 caf\xC3\xA9s.\n\n";
  std::string text;
  for (int i = 0; i < 20; ++i) text += corpus;
  auto bpe = TrainBpe(text, 300);
  ASSERT_TRUE(bpe.ok()) << bpe.status().message();
  std::unique_ptr<GPT> model = SaveCheckpoint(Vocabulary::Bpe(std::move(*bpe)));
  CheckExport(*model, dir_.string(), "We'll   say  caf\xC3\xA9s 2024,\n\nthey've\tpoor!", "bpe",
              false);
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer.json"}) {
    EXPECT_TRUE(fs::exists(dir_ / "case/hf" / f)) << f;
  }
  // Without our own vocabulary file, import reads the BPE from Hugging
  // Face's pair (as it would GPT-2's): the same vocabulary.
  fs::remove(dir_ / "case/hf" / kHfScaletrainVocabFile);
  auto s = ImportHf(Path("case/hf"), Path("imported"));
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto back = LoadModelForInference(Path("imported"), 1);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->vocab.kind(), "bpe");
  auto want = LoadModelForInference(Path("ckpt"), 1);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(back->vocab.ToJson(), want->vocab.ToJson());
}

// Llama blocks: grouped-query attention, rotary embeddings (theta 500),
// RMSNorm, SwiGLU, untied and tied heads, as LlamaForCausalLM computes them.
TEST_F(HfInteropTest, LlamaExportLoadsInTransformersWithTheSameLogits) {
  if (!TransformersAvailable())
    GTEST_SKIP() << "transformers not installed (scripts/install-deps.sh)";
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    fs::remove_all(dir_ / "ckpt");
    fs::remove_all(dir_ / "case");
    const Vocabulary vocab = *Vocabulary::CharsOf(VocabText());
    std::unique_ptr<GPT> model = SaveCheckpoint(vocab, SmallLlamaSpec(tied));
    CheckExport(*model, dir_.string(), VocabText(), "char", !tied);
    const nlohmann::json config =
        nlohmann::json::parse(test_files::ReadBytes(dir_ / "case/hf/config.json"));
    EXPECT_EQ(config.at("model_type"), "llama");
    EXPECT_EQ(config.at("num_key_value_heads"), 2);
    EXPECT_EQ(config.at("tie_word_embeddings"), tied);
  }
}

// Export then import of a Llama gives back every weight bit for bit.
TEST_F(HfInteropTest, LlamaExportThenImportGivesTheSameWeights) {
  const Vocabulary vocab = *Vocabulary::CharsOf(VocabText());
  std::unique_ptr<GPT> model = SaveCheckpoint(vocab, SmallLlamaSpec(false));
  ASSERT_TRUE(ExportHf(Path("ckpt"), Path("hf")).ok());
  auto s = ImportHf(Path("hf"), Path("back"));
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto back = LoadModelForInference(Path("back"), 1);
  ASSERT_TRUE(back.ok()) << back.status().message();
  const ModelSpec& b = back->model->spec();
  EXPECT_EQ(b.arch, Arch::kLlama);
  EXPECT_EQ(b.n_kv_head, 2);
  EXPECT_EQ(b.rope_theta, 500.0);
  EXPECT_EQ(b.norm_eps, 1e-4);
  EXPECT_FALSE(b.tied_embeddings());
  for (const ParamEntry& e : model->layout().entries) {
    const ParamEntry* t = back->model->layout().Find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    const int64_t n = std::min(e.numel, t->numel);  // the vocabulary's padding rows are not exported
    EXPECT_EQ(std::memcmp(model->params() + e.offset, back->model->params() + t->offset, n * 4), 0)
        << e.name;
  }
  // A config that does not match the tensors (4 KV heads where the file has
  // 2) or that changes the arithmetic (GELU) is one error naming the field.
  nlohmann::json config = nlohmann::json::parse(test_files::ReadBytes(dir_ / "hf/config.json"));
  for (const auto& [key, value, expect] :
       {std::tuple{"num_key_value_heads", nlohmann::json(4), std::string("k_proj.weight' is")},
        std::tuple{"hidden_act", nlohmann::json("gelu"), std::string("\"hidden_act\" is \"gelu\"")}}) {
    nlohmann::json bad = config;
    bad[key] = value;
    ASSERT_TRUE(WriteFileAtomically(Path("hf/config.json"), bad.dump()).ok());
    auto r = ImportHf(Path("hf"), Path(std::string("bad_") + key));
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
    EXPECT_FALSE(fs::exists(Path(std::string("bad_") + key)));
  }
}

// A Llama transformers made and saved imports with its logits.
TEST_F(HfInteropTest, LlamaSavedByTransformersImportsWithTheSameLogits) {
  if (!TransformersAvailable())
    GTEST_SKIP() << "transformers not installed (scripts/install-deps.sh)";
  ASSERT_EQ(RunChecker("make-llama " + Path("case")), 0);
  const double worst = ImportedLogitsDifference(Arch::kLlama);
  EXPECT_LE(worst, 1e-4);
  std::printf("imported Llama's logits vs transformers': max abs difference %.3g\n", worst);
}

TEST_F(HfInteropTest, ModelSavedByTransformersImportsWithTheSameLogits) {
  if (!TransformersAvailable())
    GTEST_SKIP() << "transformers not installed (scripts/install-deps.sh)";
  ASSERT_EQ(RunChecker("make " + Path("case")), 0);
  const double worst = ImportedLogitsDifference(Arch::kGPT2);
  EXPECT_LE(worst, 1e-4);
  std::printf("imported model's logits vs transformers': max abs difference %.3g\n", worst);
}

TEST_F(HfInteropTest, ExportThenImportGivesTheSameWeightsBitForBit) {
  std::unique_ptr<GPT> model = SaveCheckpoint();
  ASSERT_TRUE(ExportHf(Path("ckpt"), Path("hf")).ok());
  auto s = ImportHf(Path("hf"), Path("back"));
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->vocab_kind, "char");
  auto back = LoadModelForInference(Path("back"), 1);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->vocab.ToJson(), Vocabulary::CharsOf(VocabText())->ToJson());
  const ParamLayout& theirs = back->model->layout();
  ASSERT_EQ(theirs.entries.size(), model->layout().entries.size());
  for (const ParamEntry& e : model->layout().entries) {
    const ParamEntry* b = theirs.Find(e.name);
    ASSERT_NE(b, nullptr) << e.name;
    // The embedding's padding rows are not exported.
    EXPECT_EQ(std::memcmp(model->params() + e.offset, back->model->params() + b->offset,
                          static_cast<size_t>(b->numel) * sizeof(float)),
              0)
        << e.name;
  }
}

// The exported model rewritten with 16-bit tensors imports as their exact
// float32 values.
TEST_F(HfInteropTest, ImportsF16AndBf16Tensors) {
  SaveCheckpoint();
  ASSERT_TRUE(ExportHf(Path("ckpt"), Path("hf")).ok());
  auto f32 = SafetensorsFile::Open(Path("hf/model.safetensors"));
  ASSERT_TRUE(f32.ok());
  for (DType dt : {DType::kF16, DType::kBF16}) {
    std::vector<std::vector<uint16_t>> bits;
    std::vector<NamedTensor> half;
    for (const NamedTensor& t : (*f32)->tensors()) {
      const int64_t n = NumElements(t.shape);
      bits.emplace_back(static_cast<size_t>(n));
      const auto* src = static_cast<const float*>(t.data);
      if (dt == DType::kF16)
        ToF16(src, reinterpret_cast<f16*>(bits.back().data()), n, 1.0f);
      else
        ToBf16(src, reinterpret_cast<bf16*>(bits.back().data()), n);
      half.push_back({t.name, dt, t.shape, bits.back().data()});
    }
    fs::create_directories(Path("half"));
    fs::copy_file(Path("hf/config.json"), Path("half/config.json"),
                  fs::copy_options::overwrite_existing);
    ASSERT_TRUE(WriteSafetensors(Path("half/model.safetensors"), half, {{"format", "pt"}}).ok());
    fs::remove_all(Path("back"));
    auto s = ImportHf(Path("half"), Path("back"));
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->converted_tensors, static_cast<int64_t>(half.size()));
    auto back = SafetensorsFile::Open(Path("back/checkpoints/step_00000000/model.safetensors"));
    ASSERT_TRUE(back.ok());
    const NamedTensor* w = (*back)->Find("transformer.h.1.mlp.c_fc.weight");  // [128, 32]
    const NamedTensor* h = nullptr;
    for (const NamedTensor& t : half) h = t.name == w->name ? &t : h;
    ASSERT_TRUE(w && h);
    const auto* hb = static_cast<const uint16_t*>(h->data);
    const float want =
        dt == DType::kF16 ? FromF16(f16{hb[3 * 128 + 5]}) : FromBf16(bf16{hb[3 * 128 + 5]});
    EXPECT_EQ(static_cast<const float*>(w->data)[5 * 32 + 3], want);  // ours [out 5, in 3]
  }
}

TEST_F(HfInteropTest, OutputDirectoryThatHoldsFilesIsRefusedAndKept) {
  SaveCheckpoint();
  fs::create_directories(Path("busy"));
  test_files::WriteBytes(Path("busy/keep.txt"), "mine");
  auto e = ExportHf(Path("ckpt"), Path("busy"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("already holds files"), std::string::npos)
      << e.status().message();
  EXPECT_EQ(test_files::SortedListing(Path("busy")), std::vector<std::string>{"keep.txt"});
  ASSERT_TRUE(ExportHf(Path("ckpt"), Path("hf")).ok());
  auto i = ImportHf(Path("hf"), Path("busy"));
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(test_files::SortedListing(Path("busy")), std::vector<std::string>{"keep.txt"});
}

TEST_F(HfInteropTest, ImportErrorLeavesNoOutput) {
  SaveCheckpoint();
  ASSERT_TRUE(ExportHf(Path("ckpt"), Path("hf")).ok());
  test_files::WriteBytes(
      Path("hf/config.json"),
      test_files::ReadBytes(Path("hf/config.json"))
          .replace(test_files::ReadBytes(Path("hf/config.json")).find("\"n_layer\": 2"), 12,
                   "\"n_layer\": 3"));
  auto i = ImportHf(Path("hf"), Path("out"));
  ASSERT_FALSE(i.ok());
  EXPECT_NE(i.status().message().find("no tensor 'transformer.h.2.ln_1.weight'"), std::string::npos)
      << i.status().message();
  EXPECT_FALSE(fs::exists(Path("out")));
  for (const auto& name : Listing()) EXPECT_EQ(name.rfind(".tmp", 0), std::string::npos) << name;
}

TEST(HfTokenizerTest, ByteLevelStandInsAreGpt2s) {
  EXPECT_EQ(ByteLevelChar('A'), "A");
  EXPECT_EQ(ByteLevelChar(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(ByteLevelChar('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(ByteLevelChar(0), "\xC4\x80");     // U+0100
  EXPECT_EQ(ByteLevelChar(0xAD), "\xC5\x83");  // U+0143: the 68th byte that does not print
  EXPECT_EQ(ByteLevelChar(0xE9), "\xC3\xA9");  // prints: itself, as a code point
}

}  // namespace
}  // namespace scaletrain
