#include "plan/model_preset.h"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "model/param_layout.h"
#include "plan/hardware.h"
#include "plan/toml_util.h"

namespace scaletrain::plan {

namespace fs = std::filesystem;

Result<ModelPreset> LoadModelFile(const std::string& path) {
  ST_ASSIGN_OR_RETURN(toml::table root, ParseTomlFile(path));
  const toml::table* m = root["model"].as_table();
  if (m == nullptr || root.size() != 1) {
    return InvalidArgument(path + ": a model file holds exactly one [model] table");
  }
  ModelPreset p;
  ModelSpec& s = p.spec;
  std::string arch = "gpt2";
  double published = 0;
  TableReader r(path, "[model]");
  r.Add("name", &s.name);
  r.Add("arch", &arch);
  r.Add("n_layer", &s.n_layer, true);
  r.Add("n_embd", &s.n_embd, true);
  r.Add("n_head", &s.n_head, true);
  r.Add("n_kv_head", &s.n_kv_head);
  r.Add("ffn_hidden", &s.ffn_hidden);
  r.Add("seq_len", &s.block_size, true);
  r.Add("vocab_size", &s.vocab_size, true);
  r.Add("padded_vocab_size", &s.padded_vocab_size);
  r.Add("published_params", &published);
  r.Add("global_batch", &p.global_batch);
  std::string activation;
  r.Add("activation", &activation);
  r.Add("tied_embeddings", &s.tied_given);
  ST_RETURN_IF_ERROR(r.Read(*m));
  ST_ASSIGN_OR_RETURN(s.arch, ArchFromName(arch));
  if (!activation.empty()) {
    auto a = ActivationFromName(activation);
    if (!a.ok()) return a.status().WithContext(path);
    s.activation_given = *a;
  }
  if (s.name.empty() || s.name == "gpt") s.name = fs::path(path).stem().string();
  if (s.n_kv_head == 0) s.n_kv_head = s.n_head;
  if (s.ffn_hidden == 0) s.ffn_hidden = 4 * s.n_embd;
  if (s.padded_vocab_size == 0) s.padded_vocab_size = s.vocab_size;
  p.published_params = published;
  Status v = ValidateModelSpec(s);
  if (v.ok()) v = WithinPlannerBounds(s);
  if (!v.ok()) return v.WithContext(path);
  return p;
}

Result<ModelPreset> LoadModel(const std::string& name_or_path, const std::string& config_dir) {
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".toml")) {
    if (!fs::exists(name_or_path, ec)) return NotFound("model file " + name_or_path + " does not exist");
    return LoadModelFile(name_or_path);
  }
  const fs::path p = fs::path(config_dir) / "models" / (name_or_path + ".toml");
  if (!fs::exists(p, ec)) {
    return NotFound(UnknownNameMessage("model preset", name_or_path, ModelPresetNames(config_dir)) +
                    " (or pass a path to your own model TOML)");
  }
  return LoadModelFile(p.string());
}

std::vector<std::string> ModelPresetNames(const std::string& config_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(config_dir) / "models", ec)) {
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<ModelSpec> GptSpecFromDims(const std::string& name, int64_t layers, int64_t hidden, int64_t heads,
                                  int64_t seq, int64_t vocab) {
  ModelSpec s;
  s.name = name;
  s.arch = Arch::kGPT2;
  s.n_layer = layers;
  s.n_embd = hidden;
  s.n_head = heads;
  s.n_kv_head = heads;
  s.ffn_hidden = 4 * hidden;
  s.block_size = seq;
  s.vocab_size = vocab;
  s.padded_vocab_size = vocab;
  ST_RETURN_IF_ERROR(WithinPlannerBounds(s));
  ST_RETURN_IF_ERROR(ValidateModelSpec(s));
  return s;
}

Status WithinPlannerBounds(const ModelSpec& s) {
  // Far beyond any model trained, and more than the planner's per-layer
  // tables could hold: a typo, not a model.
  for (const auto& [what, value, most] : {std::tuple{"layers", s.n_layer, int64_t{10000}},
                                          {"hidden", s.n_embd, int64_t{1} << 20},
                                          {"heads", s.n_head, int64_t{1} << 16},
                                          {"ffn_hidden", s.ffn_hidden, int64_t{1} << 24},
                                          {"seq", s.block_size, int64_t{100000000}},
                                          {"vocab", s.vocab_size, int64_t{100000000}}}) {
    if (value > most) {
      return InvalidArgument(std::string("model ") + what + " = " + std::to_string(value) +
                             " is beyond any model the planner sizes (at most " +
                             std::to_string(most) + "); check the value");
    }
  }
  return Status::Ok();
}

int64_t CountParams(const ModelSpec& spec) { return BuildParamLayout(spec, 1).total_numel; }

}  // namespace scaletrain::plan
