#include "checkpoint/hf_interop.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_io.h"
#include "checkpoint/safetensors.h"
#include "core/file_io.h"
#include "core/half.h"
#include "data/hf_tokenizer.h"

namespace fs = std::filesystem;

namespace scaletrain {

namespace {

constexpr double kGpt2LayerNormEps = 1e-5;

// ---- GPT-2's config.json ---------------------------------------------------

nlohmann::json Gpt2Config(const ModelSpec& s) {
  return {
      {"model_type", "gpt2"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"vocab_size", s.vocab_size},
      {"n_positions", s.block_size},
      {"n_embd", s.n_embd},
      {"n_layer", s.n_layer},
      {"n_head", s.n_head},
      // null: transformers' default, 4 x n_embd.
      {"n_inner", s.ffn_hidden == 4 * s.n_embd ? nlohmann::json() : nlohmann::json(s.ffn_hidden)},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", kGpt2LayerNormEps},
      {"tie_word_embeddings", true},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"torch_dtype", "float32"},
      {"use_cache", true}};
}

Result<int64_t> PositiveInt(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) {
    return InvalidArgument(where + " has no \"" + key + "\"; a config.json of this model type states it");
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return InvalidArgument(where + ": \"" + key + "\" is " + v.dump() +
                           ", not a positive integer; fix config.json");
  }
  return v.get<int64_t>();
}

// A field that changes the model's arithmetic must have the value
// scaletrain's `model` (GPT-2, Llama) computes with (or be absent:
// transformers' default).
Status RequireValue(const nlohmann::json& j, const char* key, const std::set<nlohmann::json>& ok,
                    const char* model, const std::string& what, const std::string& where) {
  if (!j.contains(key) || ok.count(j.at(key)) > 0) return Status::Ok();
  return FailedPrecondition(where + ": \"" + key + "\" is " + j.at(key).dump() +
                            ", but scaletrain's " + model + " has " + what +
                            "; this model cannot be imported");
}

Status CheckGpt2Arithmetic(const nlohmann::json& j, const std::string& where) {
  ST_RETURN_IF_ERROR(RequireValue(j, "activation_function", {"gelu_new", "gelu_pytorch_tanh"}, "GPT-2",
                                  "GELU in its tanh form (\"gelu_new\")", where));
  ST_RETURN_IF_ERROR(RequireValue(j, "tie_word_embeddings", {true}, "GPT-2",
                                  "its output head tied to the token embedding", where));
  ST_RETURN_IF_ERROR(RequireValue(j, "scale_attn_weights", {true}, "GPT-2",
                                  "attention scores scaled by 1/sqrt(head size)", where));
  ST_RETURN_IF_ERROR(RequireValue(j, "scale_attn_by_inverse_layer_idx", {false}, "GPT-2",
                                  "no per-layer attention scaling", where));
  ST_RETURN_IF_ERROR(RequireValue(j, "add_cross_attention", {false}, "GPT-2", "no cross-attention", where));
  if (j.contains("layer_norm_epsilon")) {
    const nlohmann::json& eps = j.at("layer_norm_epsilon");
    if (!eps.is_number() || std::fabs(eps.get<double>() - kGpt2LayerNormEps) > 1e-12) {
      return FailedPrecondition(where + ": \"layer_norm_epsilon\" is " + eps.dump() +
                                ", but scaletrain's GPT-2 has LayerNorm epsilon 1e-05; this "
                                "model cannot be imported");
    }
  }
  return Status::Ok();
}

Result<ModelSpec> Gpt2SpecFromConfig(const nlohmann::json& j, const std::string& where) {
  ModelSpec s;
  s.arch = Arch::kGPT2;
  ST_ASSIGN_OR_RETURN(s.n_embd, PositiveInt(j, "n_embd", where));
  ST_ASSIGN_OR_RETURN(s.n_layer, PositiveInt(j, "n_layer", where));
  ST_ASSIGN_OR_RETURN(s.n_head, PositiveInt(j, "n_head", where));
  ST_ASSIGN_OR_RETURN(s.block_size, PositiveInt(j, "n_positions", where));
  ST_ASSIGN_OR_RETURN(s.vocab_size, PositiveInt(j, "vocab_size", where));
  s.n_kv_head = s.n_head;
  s.padded_vocab_size = s.vocab_size;
  s.ffn_hidden = 4 * s.n_embd;
  if (j.contains("n_inner") && !j.at("n_inner").is_null() &&
      j.at("n_inner") != nlohmann::json(s.ffn_hidden)) {
    return FailedPrecondition(
        where + ": \"n_inner\" is " + j.at("n_inner").dump() +
        ", but scaletrain's GPT-2 has an MLP 4 x n_embd = " + std::to_string(s.ffn_hidden) +
        " wide; this model cannot be imported");
  }
  ST_RETURN_IF_ERROR(CheckGpt2Arithmetic(j, where));
  if (s.n_embd % s.n_head != 0) {
    return InvalidArgument(where + ": \"n_embd\" = " + std::to_string(s.n_embd) +
                           " is not a multiple of \"n_head\" = " + std::to_string(s.n_head) +
                           "; fix config.json");
  }
  return s;
}

HfArchMapping Gpt2Mapping() {
  HfArchMapping m;
  m.arch = Arch::kGPT2;
  m.model_type = "gpt2";
  using T = HfTransform;
  // Our GPT-2 names are Hugging Face's.
  const auto same = [](const char* name, HfTransform t) { return HfTensorRule{name, name, t}; };
  m.rules = {
      same("transformer.wte.weight", T::kVocabRows),
      same("transformer.wpe.weight", T::kCopy),
      same("transformer.h.{L}.ln_1.weight", T::kCopy),
      same("transformer.h.{L}.ln_1.bias", T::kCopy),
      same("transformer.h.{L}.attn.c_attn.weight", T::kTranspose),
      same("transformer.h.{L}.attn.c_attn.bias", T::kCopy),
      same("transformer.h.{L}.attn.c_proj.weight", T::kTranspose),
      same("transformer.h.{L}.attn.c_proj.bias", T::kCopy),
      same("transformer.h.{L}.ln_2.weight", T::kCopy),
      same("transformer.h.{L}.ln_2.bias", T::kCopy),
      same("transformer.h.{L}.mlp.c_fc.weight", T::kTranspose),
      same("transformer.h.{L}.mlp.c_fc.bias", T::kCopy),
      same("transformer.h.{L}.mlp.c_proj.weight", T::kTranspose),
      same("transformer.h.{L}.mlp.c_proj.bias", T::kCopy),
      same("transformer.ln_f.weight", T::kCopy),
      same("transformer.ln_f.bias", T::kCopy),
  };
  m.tied_head = "lm_head.weight";
  m.embedding = "transformer.wte.weight";
  m.ignored_suffixes = {".attn.bias", ".attn.masked_bias"};
  m.optional_prefix = "transformer.";
  m.to_config = Gpt2Config;
  m.from_config = Gpt2SpecFromConfig;
  return m;
}

// ---- Llama ------------------------------------------------------------------

// transformers' LlamaConfig for our Llama blocks (RMSNorm, rotary q/k in
// Hugging Face's rotate-half convention, SwiGLU, no biases).
nlohmann::json LlamaConfig(const ModelSpec& s) {
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", s.vocab_size},
          {"hidden_size", s.n_embd},
          {"intermediate_size", s.ffn_hidden},
          {"num_hidden_layers", s.n_layer},
          {"num_attention_heads", s.n_head},
          {"num_key_value_heads", s.n_kv_head},
          {"max_position_embeddings", s.block_size},
          {"rms_norm_eps", s.norm_eps},
          {"rope_theta", s.rope_theta},
          {"rope_scaling", nullptr},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"attention_dropout", 0.0},
          {"pretraining_tp", 1},
          {"tie_word_embeddings", s.tied_embeddings()},
          {"bos_token_id", nullptr},
          {"eos_token_id", nullptr},
          {"torch_dtype", "float32"},
          {"use_cache", true}};
}

Result<double> PositiveNumber(const nlohmann::json& j, const char* key, double fallback,
                              const std::string& where) {
  if (!j.contains(key)) return fallback;
  const nlohmann::json& v = j.at(key);
  if (!v.is_number() || !(v.get<double>() > 0)) {
    return InvalidArgument(where + ": \"" + key + "\" is " + v.dump() + ", not a positive number; fix config.json");
  }
  return v.get<double>();
}

Status CheckLlamaArithmetic(const nlohmann::json& j, const std::string& where) {
  ST_RETURN_IF_ERROR(RequireValue(j, "hidden_act", {"silu"}, "Llama", "a SwiGLU MLP (\"silu\")", where));
  ST_RETURN_IF_ERROR(RequireValue(j, "attention_bias", {false}, "Llama", "no attention biases", where));
  ST_RETURN_IF_ERROR(RequireValue(j, "mlp_bias", {false}, "Llama", "no MLP biases", where));
  ST_RETURN_IF_ERROR(
      RequireValue(j, "rope_scaling", {nullptr}, "Llama", "plain rotary embeddings (no rope_scaling)", where));
  return RequireValue(j, "pretraining_tp", {1}, "Llama", "unsplit projections (pretraining_tp 1)", where);
}

Result<ModelSpec> LlamaSpecFromConfig(const nlohmann::json& j, const std::string& where) {
  ModelSpec s;
  s.arch = Arch::kLlama;
  s.name = "llama-imported";
  ST_ASSIGN_OR_RETURN(s.n_embd, PositiveInt(j, "hidden_size", where));
  ST_ASSIGN_OR_RETURN(s.ffn_hidden, PositiveInt(j, "intermediate_size", where));
  ST_ASSIGN_OR_RETURN(s.n_layer, PositiveInt(j, "num_hidden_layers", where));
  ST_ASSIGN_OR_RETURN(s.n_head, PositiveInt(j, "num_attention_heads", where));
  ST_ASSIGN_OR_RETURN(s.block_size, PositiveInt(j, "max_position_embeddings", where));
  ST_ASSIGN_OR_RETURN(s.vocab_size, PositiveInt(j, "vocab_size", where));
  s.n_kv_head = s.n_head;
  if (j.contains("num_key_value_heads")) {
    ST_ASSIGN_OR_RETURN(s.n_kv_head, PositiveInt(j, "num_key_value_heads", where));
  }
  s.padded_vocab_size = s.vocab_size;
  ST_ASSIGN_OR_RETURN(s.norm_eps, PositiveNumber(j, "rms_norm_eps", 1e-6, where));
  ST_ASSIGN_OR_RETURN(s.rope_theta, PositiveNumber(j, "rope_theta", 10000.0, where));
  s.tied_given = j.contains("tie_word_embeddings") && j.at("tie_word_embeddings").is_boolean()
                     ? j.at("tie_word_embeddings").get<bool>()
                     : false;  // LlamaConfig's default
  ST_RETURN_IF_ERROR(CheckLlamaArithmetic(j, where));
  if (s.n_embd % s.n_head != 0 || s.n_head % s.n_kv_head != 0) {
    return InvalidArgument(where + ": \"hidden_size\" " + std::to_string(s.n_embd) + ", \"num_attention_heads\" " +
                           std::to_string(s.n_head) + " and \"num_key_value_heads\" " + std::to_string(s.n_kv_head) +
                           " do not divide each other; fix config.json");
  }
  if (j.contains("head_dim") && j.at("head_dim") != nlohmann::json(s.n_embd / s.n_head)) {
    return FailedPrecondition(where + ": \"head_dim\" is " + j.at("head_dim").dump() +
                              ", but scaletrain's Llama has hidden_size / num_attention_heads; this model "
                              "cannot be imported");
  }
  return s;
}

// Our Llama names are Meta's; Hugging Face's are LlamaForCausalLM's. Both
// store Linear weights [out, in], and our rotary embeddings rotate each
// head's two halves as Hugging Face's do: every tensor is a copy.
HfArchMapping LlamaMapping() {
  HfArchMapping m;
  m.arch = Arch::kLlama;
  m.model_type = "llama";
  using T = HfTransform;
  m.rules = {
      {"tok_embeddings.weight", "model.embed_tokens.weight", T::kVocabRows},
      {"layers.{L}.attention_norm.weight", "model.layers.{L}.input_layernorm.weight", T::kCopy},
      {"layers.{L}.attention.wq.weight", "model.layers.{L}.self_attn.q_proj.weight", T::kCopy},
      {"layers.{L}.attention.wk.weight", "model.layers.{L}.self_attn.k_proj.weight", T::kCopy},
      {"layers.{L}.attention.wv.weight", "model.layers.{L}.self_attn.v_proj.weight", T::kCopy},
      {"layers.{L}.attention.wo.weight", "model.layers.{L}.self_attn.o_proj.weight", T::kCopy},
      {"layers.{L}.ffn_norm.weight", "model.layers.{L}.post_attention_layernorm.weight", T::kCopy},
      {"layers.{L}.feed_forward.w1.weight", "model.layers.{L}.mlp.gate_proj.weight", T::kCopy},
      {"layers.{L}.feed_forward.w3.weight", "model.layers.{L}.mlp.up_proj.weight", T::kCopy},
      {"layers.{L}.feed_forward.w2.weight", "model.layers.{L}.mlp.down_proj.weight", T::kCopy},
      {"norm.weight", "model.norm.weight", T::kCopy},
      // Only where the head is untied (ExpandHfRules keeps the rules whose
      // tensor the model has).
      {"output.weight", "lm_head.weight", T::kVocabRows},
  };
  m.tied_head = "lm_head.weight";
  m.embedding = "tok_embeddings.weight";
  m.ignored_suffixes = {".rotary_emb.inv_freq"};
  m.to_config = LlamaConfig;
  m.from_config = LlamaSpecFromConfig;
  return m;
}

std::string ReplaceLayer(std::string s, int64_t layer) {
  const size_t at = s.find("{L}");
  if (at != std::string::npos) s.replace(at, 3, std::to_string(layer));
  return s;
}

// ---- Values between the two layouts -----------------------------------------

// Ours -> theirs. `src` has shape `ours`; returns HfShape's elements.
std::vector<float> ToHfValues(HfTransform t, const float* src, const Shape& ours,
                              const ModelSpec& spec) {
  const Shape hf = HfShape(t, ours, spec);
  std::vector<float> out(static_cast<size_t>(NumElements(hf)));
  if (t == HfTransform::kTranspose) {
    const int64_t rows = ours[0], cols = ours[1];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = src[r * cols + c];
    }
  } else {
    std::memcpy(out.data(), src, out.size() * sizeof(float));  // kVocabRows: the leading rows
  }
  return out;
}

// Theirs -> ours (dst has shape `ours`, whose vocabulary is unpadded).
void FromHfValues(HfTransform t, const float* src, const Shape& ours, float* dst) {
  if (t == HfTransform::kTranspose) {
    const int64_t rows = ours[0], cols = ours[1];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * rows + r];
    }
  } else {
    std::memcpy(dst, src, static_cast<size_t>(NumElements(ours)) * sizeof(float));
  }
}

// A stored tensor as float32 (F32, or F16/BF16 widened exactly).
Result<std::vector<float>> AsF32(const NamedTensor& t, const std::string& file) {
  const int64_t n = NumElements(t.shape);
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), t.data, out.size() * sizeof(float));
      return out;
    case DType::kF16:
      FromF16(static_cast<const f16*>(t.data), out.data(), n, 1.0f);
      return out;
    case DType::kBF16:
      FromBf16(static_cast<const bf16*>(t.data), out.data(), n);
      return out;
    default:
      return FailedPrecondition(file + ": tensor '" + t.name + "' is " +
                                std::string(DTypeName(t.dtype)) +
                                "; import reads F32, F16 and BF16 tensors");
  }
}

// ---- Output directories ----------------------------------------------------

Status CheckFreshOutDir(const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return Status::Ok();
  if (!fs::is_directory(out, ec)) {
    return FailedPrecondition("--out " + out + " is a file; name a new directory");
  }
  if (!fs::is_empty(out, ec)) {
    return FailedPrecondition("--out " + out +
                              " already holds files; nothing was written: name a new directory, "
                              "or remove that one first");
  }
  return Status::Ok();
}

// Fills a temporary sibling of `out` with `fill`, then renames it to `out`:
// `out` appears complete or not at all.
Status WriteDirAtomically(const std::string& out,
                          const std::function<Status(const std::string& tmp)>& fill) {
  ST_RETURN_IF_ERROR(CheckFreshOutDir(out));
  const fs::path target = fs::absolute(fs::path(out)).lexically_normal();
  const fs::path parent =
      target.has_filename() ? target.parent_path() : target.parent_path().parent_path();
  const std::string name = (target.has_filename() ? target : target.parent_path()).filename();
  const fs::path tmp = parent / (".tmp-" + name + "-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(parent, ec);
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec)) {
    return IoError("cannot create " + tmp.string() + ": " + ec.message() +
                   "; check that the --out directory's parent is writable");
  }
  Status st = fill(tmp.string());
  if (st.ok()) {
    if (fs::exists(target)) fs::remove(target, ec);  // empty (CheckFreshOutDir)
    fs::rename(tmp, target, ec);
    if (ec) st = IoError("cannot rename " + tmp.string() + " to " + out + ": " + ec.message());
  }
  if (!st.ok()) fs::remove_all(tmp, ec);
  return st;
}

const HfArchMapping* MappingForArch(Arch arch) {
  for (const HfArchMapping& m : HfArchMappings()) {
    if (m.arch == arch) return &m;
  }
  return nullptr;
}

// ---- Export ----------------------------------------------------------------

struct ExportTensors {
  std::vector<std::vector<float>> values;  // owned; NamedTensor data points here
  std::vector<NamedTensor> tensors;
};

Result<ExportTensors> ToHfTensors(const HfArchMapping& mapping, const GPT& model) {
  const ModelSpec& spec = model.spec();
  ExportTensors out;
  const std::vector<HfTensorName> names = ExpandHfRules(mapping, spec);
  out.values.reserve(names.size());
  for (const HfTensorName& n : names) {
    const ParamEntry* e = model.layout().Find(n.ours);
    if (e == nullptr) return Internal("the model has no parameter '" + n.ours + "' for " + n.hf);
    out.values.push_back(ToHfValues(n.transform, model.params() + e->offset, e->shape, spec));
    out.tensors.push_back(
        {n.hf, DType::kF32, HfShape(n.transform, e->shape, spec), out.values.back().data()});
  }
  if (out.tensors.size() != model.layout().entries.size()) {
    return Internal("the " + mapping.model_type + " table covers " +
                    std::to_string(out.tensors.size()) + " of the model's " +
                    std::to_string(model.layout().entries.size()) + " parameters");
  }
  return out;
}

Status WriteJsonFile(const std::string& path, const nlohmann::json& j) {
  return WriteFileAtomically(path, j.dump(2) + "\n");
}

// The checkpoint's vocabulary, if its manifest has one (LoadModelForInference
// falls back to bytes otherwise).
std::optional<Vocabulary> ManifestVocabulary(const LoadedModel& loaded) {
  const nlohmann::json& m = loaded.manifest;
  if (!m.contains("vocab") || m.at("vocab").is_null()) return std::nullopt;
  return loaded.vocab;
}

// ---- Import ----------------------------------------------------------------

Result<nlohmann::json> ReadConfigJson(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + " is not a directory");
  if (!fs::exists(path, ec)) {
    return NotFound(dir +
                    " has no config.json; a Hugging Face model directory holds config.json "
                    "and model.safetensors (save_pretrained(DIR, safe_serialization=True))");
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(path.string() + " is not a JSON object; fix or regenerate config.json");
  }
  return j;
}

Result<const HfArchMapping*> MappingForConfig(const nlohmann::json& config,
                                              const std::string& where) {
  const std::string type = config.value("model_type", nlohmann::json()).is_string()
                               ? config.at("model_type").get<std::string>()
                               : "";
  std::string known;
  for (const HfArchMapping& m : HfArchMappings()) {
    if (m.model_type == type) return &m;
    known += (known.empty() ? "" : ", ") + m.model_type;
  }
  return FailedPrecondition(where + ": \"model_type\" is " +
                            (type.empty() ? std::string("missing") : "\"" + type + "\"") +
                            "; scaletrain imports " + known + " models");
}

// The file's tensors by their names, with the mapping's optional prefix added
// where a file lacks it.
std::map<std::string, const NamedTensor*> TensorsByName(const SafetensorsFile& file,
                                                        const HfArchMapping& mapping) {
  std::map<std::string, const NamedTensor*> by_name;
  bool has_prefix = false;
  for (const NamedTensor& t : file.tensors())
    has_prefix |= t.name.rfind(mapping.optional_prefix, 0) == 0;
  for (const NamedTensor& t : file.tensors()) {
    const bool add = !has_prefix && t.name != mapping.tied_head;
    by_name[(add ? mapping.optional_prefix : "") + t.name] = &t;
  }
  return by_name;
}

struct ImportedWeights {
  ModelSpec spec;
  std::vector<float> params;  // laid out by BuildParamLayout(spec)
  int64_t converted = 0;
};

Status ReadOneTensor(const NamedTensor& t, const HfTensorName& n, const ParamEntry& e,
                     ImportedWeights& w, const std::string& file) {
  const Shape want = HfShape(n.transform, e.shape, w.spec);
  if (t.shape != want) {
    return FailedPrecondition(file + ": tensor '" + n.hf + "' is " + ShapeToString(t.shape) +
                              ", but config.json (n_embd " + std::to_string(w.spec.n_embd) +
                              ", n_positions " + std::to_string(w.spec.block_size) +
                              ", vocab_size " + std::to_string(w.spec.vocab_size) + ") makes it " +
                              ShapeToString(want) +
                              "; config.json and model.safetensors disagree: fix config.json");
  }
  ST_ASSIGN_OR_RETURN(std::vector<float> values, AsF32(t, file));
  if (t.dtype != DType::kF32) ++w.converted;
  FromHfValues(n.transform, values.data(), e.shape, w.params.data() + e.offset);
  return Status::Ok();
}

// A tensor no rule took: a non-parameter buffer (skipped), the tied head
// (must equal the embedding), or an error.
Status CheckLeftover(const std::string& name, const NamedTensor& t, const HfArchMapping& mapping,
                     const ImportedWeights& w, const std::string& file) {
  for (const std::string& suffix : mapping.ignored_suffixes) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return Status::Ok();
  }
  if (name == mapping.tied_head) {
    const ParamLayout layout = BuildParamLayout(w.spec);
    const ParamEntry* emb = layout.Find(mapping.embedding);
    ST_ASSIGN_OR_RETURN(std::vector<float> head, AsF32(t, file));
    if (emb != nullptr && t.shape == emb->shape &&
        std::memcmp(head.data(), w.params.data() + emb->offset, head.size() * sizeof(float)) == 0)
      return Status::Ok();
    return FailedPrecondition(file + ": '" + name + "' differs from '" + mapping.embedding +
                              "': the output head is not tied to the embedding, but the model "
                              "ties them (GPT-2 always; Llama with tie_word_embeddings true); this "
                              "model cannot be imported as it is");
  }
  return FailedPrecondition(file + " has tensor '" + name + "' that config.json (n_layer " +
                            std::to_string(w.spec.n_layer) +
                            ") does not describe; config.json and model.safetensors disagree: "
                            "fix config.json");
}

Result<ImportedWeights> ReadHfWeights(const std::string& dir, const HfArchMapping& mapping,
                                      const ModelSpec& spec) {
  const std::string file = (fs::path(dir) / "model.safetensors").string();
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    return NotFound(dir +
                    " has no model.safetensors (import reads safetensors only; save with "
                    "save_pretrained(DIR, safe_serialization=True))");
  }
  ST_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> st, SafetensorsFile::Open(file));
  std::map<std::string, const NamedTensor*> by_name = TensorsByName(*st, mapping);
  const ParamLayout layout = BuildParamLayout(spec);
  ImportedWeights w{spec, std::vector<float>(static_cast<size_t>(layout.total_numel)), 0};
  for (const HfTensorName& n : ExpandHfRules(mapping, spec)) {
    const auto it = by_name.find(n.hf);
    if (it == by_name.end()) {
      return FailedPrecondition(file + " has no tensor '" + n.hf +
                                "', which config.json (n_layer " + std::to_string(spec.n_layer) +
                                ") implies; config.json and model.safetensors disagree: fix "
                                "config.json, or export the model again");
    }
    ST_RETURN_IF_ERROR(ReadOneTensor(*it->second, n, *layout.Find(n.ours), w, file));
    by_name.erase(it);
  }
  for (const auto& [name, t] : by_name)
    ST_RETURN_IF_ERROR(CheckLeftover(name, *t, mapping, w, file));
  return w;
}

}  // namespace

const std::vector<HfArchMapping>& HfArchMappings() {
  static const std::vector<HfArchMapping> mappings = {Gpt2Mapping(), LlamaMapping()};
  return mappings;
}

std::vector<HfTensorName> ExpandHfRules(const HfArchMapping& mapping, const ModelSpec& spec) {
  // The rules in order, a run of per-block rules repeated block by block:
  // our layout's order (embeddings, blocks, final norm).
  std::vector<HfTensorName> out;
  const ParamLayout layout = BuildParamLayout(spec);
  const auto per_block = [](const HfTensorRule& r) {
    return r.ours.find("{L}") != std::string::npos;
  };
  const std::vector<HfTensorRule>& rules = mapping.rules;
  for (size_t i = 0; i < rules.size();) {
    size_t end = i + 1;
    if (per_block(rules[i])) {
      while (end < rules.size() && per_block(rules[end])) ++end;
    }
    const int64_t blocks = per_block(rules[i]) ? spec.n_layer : 1;
    for (int64_t l = 0; l < blocks; ++l) {
      for (size_t k = i; k < end; ++k) {
        const std::string ours = ReplaceLayer(rules[k].ours, l);
        if (layout.Find(ours) == nullptr) continue;  // e.g. an untied head's rule, tied
        out.push_back({ours, ReplaceLayer(rules[k].hf, l), rules[k].transform});
      }
    }
    i = end;
  }
  return out;
}

Shape HfShape(HfTransform t, const Shape& ours, const ModelSpec& spec) {
  switch (t) {
    case HfTransform::kTranspose:
      return {ours[1], ours[0]};
    case HfTransform::kVocabRows:
      return {spec.vocab_size, ours[1]};
    case HfTransform::kCopy:
      break;
  }
  return ours;
}

Result<HfExportSummary> ExportHf(const std::string& checkpoint, const std::string& out_dir) {
  ST_RETURN_IF_ERROR(CheckFreshOutDir(out_dir));
  ST_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelForInference(checkpoint, 1));
  const ModelSpec& spec = loaded.model->spec();
  const HfArchMapping* mapping = MappingForArch(spec.arch);
  if (mapping == nullptr) {
    return FailedPrecondition(std::string("export to Hugging Face has no table for arch '") +
                              ArchName(spec.arch) + "'; it exports gpt2 checkpoints");
  }
  ST_ASSIGN_OR_RETURN(ExportTensors tensors, ToHfTensors(*mapping, *loaded.model));
  const std::optional<Vocabulary> vocab = ManifestVocabulary(loaded);
  ST_RETURN_IF_ERROR(WriteDirAtomically(out_dir, [&](const std::string& tmp) -> Status {
    ST_RETURN_IF_ERROR(WriteSafetensors((fs::path(tmp) / "model.safetensors").string(),
                                        tensors.tensors, {{"format", "pt"}}));
    ST_RETURN_IF_ERROR(
        WriteJsonFile((fs::path(tmp) / "config.json").string(), mapping->to_config(spec)));
    if (vocab) ST_RETURN_IF_ERROR(WriteHfTokenizer(*vocab, spec.block_size, tmp));
    return Status::Ok();
  }));
  return HfExportSummary{spec, static_cast<int64_t>(tensors.tensors.size()),
                         vocab ? vocab->kind() : ""};
}

Result<HfImportSummary> ImportHf(const std::string& hf_dir, const std::string& out_dir) {
  ST_RETURN_IF_ERROR(CheckFreshOutDir(out_dir));
  ST_ASSIGN_OR_RETURN(nlohmann::json config, ReadConfigJson(hf_dir));
  const std::string where = (fs::path(hf_dir) / "config.json").string();
  ST_ASSIGN_OR_RETURN(const HfArchMapping* mapping, MappingForConfig(config, where));
  ST_ASSIGN_OR_RETURN(ModelSpec spec, mapping->from_config(config, where));
  ST_ASSIGN_OR_RETURN(ImportedWeights w, ReadHfWeights(hf_dir, *mapping, spec));
  ST_ASSIGN_OR_RETURN(std::optional<Vocabulary> vocab, ReadHfVocabulary(hf_dir));
  if (vocab && vocab->size() != spec.vocab_size) {
    return FailedPrecondition(
        hf_dir + "'s tokenizer files (" + kHfScaletrainVocabFile + " or vocab.json) have " + std::to_string(vocab->size()) +
        " tokens but config.json's "
        "vocab_size is " +
        std::to_string(spec.vocab_size) + "; remove the file or fix config.json");
  }
  const ParamLayout layout = BuildParamLayout(spec);
  CheckpointContents contents;
  contents.model = LayoutTensors(layout, w.params.data());
  contents.manifest = {{"format", "scaletrain-checkpoint"},
                       {"version", 1},
                       {"step", 0},
                       {"model", SpecToJson(spec)},
                       {"vocab", vocab ? vocab->ToJson() : nlohmann::json()},
                       {"imported_from", {{"format", "hf"}, {"model_type", mapping->model_type}}}};
  ST_RETURN_IF_ERROR(WriteDirAtomically(out_dir, [&](const std::string& tmp) {
    return WriteCheckpoint((fs::path(tmp) / "checkpoints").string(), 0, contents);
  }));
  return HfImportSummary{spec, (fs::path(out_dir) / "checkpoints" / CheckpointDirName(0)).string(),
                         vocab ? std::optional<std::string>(vocab->kind()) : std::nullopt,
                         w.converted};
}

}  // namespace scaletrain
