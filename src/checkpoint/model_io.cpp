#include "checkpoint/model_io.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_format.h"

namespace scaletrain {

nlohmann::json SpecToJson(const ModelSpec& s) {
  nlohmann::json j = {{"arch", ArchName(s.arch)},        {"n_layer", s.n_layer},
                      {"n_head", s.n_head},              {"n_kv_head", s.n_kv_head},
                      {"n_embd", s.n_embd},              {"ffn_hidden", s.ffn_hidden},
                      {"block_size", s.block_size},      {"vocab_size", s.vocab_size},
                      {"padded_vocab_size", s.padded_vocab_size}};
  if (s.arch == Arch::kLlama) {
    // GPT-2 manifests stay as they were; Llama's also need these to rebuild the model.
    j["tied_embeddings"] = s.tied_embeddings();
    j["rope_theta"] = s.rope_theta;
    j["norm_eps"] = s.norm_eps;
  }
  return j;
}

namespace {

// Llama's keys (absent from GPT-2 manifests).
Status ReadLlamaKeys(const nlohmann::json& j, ModelSpec& s) {
  if (s.arch != Arch::kLlama) return Status::Ok();
  const nlohmann::json& tied = j.at("tied_embeddings");
  const nlohmann::json& theta = j.at("rope_theta");
  const nlohmann::json& eps = j.at("norm_eps");
  if (!tied.is_boolean() || !theta.is_number() || !eps.is_number()) {
    return DataLoss("the manifest's Llama model description has a tied_embeddings, rope_theta or "
                    "norm_eps of the wrong type; the checkpoint is corrupt, use another one");
  }
  s.tied_given = tied.get<bool>();
  s.rope_theta = theta.get<double>();
  s.norm_eps = eps.get<double>();
  return Status::Ok();
}

}  // namespace

Result<ModelSpec> SpecFromJson(const nlohmann::json& j) {
  ModelSpec s;
  try {
    ST_ASSIGN_OR_RETURN(s.arch, ArchFromName(j.at("arch").get<std::string>()));
    for (auto [key, field] : {std::pair{"n_layer", &s.n_layer}, {"n_head", &s.n_head},
                              {"n_kv_head", &s.n_kv_head}, {"n_embd", &s.n_embd},
                              {"ffn_hidden", &s.ffn_hidden}, {"block_size", &s.block_size},
                              {"vocab_size", &s.vocab_size},
                              {"padded_vocab_size", &s.padded_vocab_size}}) {
      const nlohmann::json& v = j.at(key);
      // get<int64_t>() casts a float, undefined behaviour beyond int64 (1e300).
      if (!v.is_number_integer()) {
        return DataLoss(std::string("the manifest's model description has ") + key + " = " +
                        v.dump() + ", not an integer; the checkpoint is corrupt, use another one");
      }
      *field = v.get<int64_t>();
    }
    ST_RETURN_IF_ERROR(ReadLlamaKeys(j, s));
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("the manifest's model description is incomplete: ") + e.what());
  }
  ST_RETURN_IF_ERROR(ValidateModelSpec(s));
  return s;
}

std::vector<NamedTensor> LayoutTensors(const ParamLayout& layout, const float* base,
                                       const std::string& prefix) {
  std::vector<NamedTensor> out;
  out.reserve(layout.entries.size());
  for (const auto& e : layout.entries) {
    out.push_back({prefix + e.name, DType::kF32, e.shape, base + e.offset});
  }
  return out;
}

void CopyCommonRows(const float* src, const Shape& src_shape, float* dst, const Shape& dst_shape) {
  const int64_t row = src_shape.size() > 1 ? NumElements(src_shape) / src_shape[0] : 1;
  const int64_t rows = std::min(src_shape[0], dst_shape[0]);
  std::memcpy(dst, src, static_cast<size_t>(rows * row) * sizeof(float));
  std::fill(dst + rows * row, dst + NumElements(dst_shape), 0.0f);
}

Result<LoadedModel> LoadModelForInference(const std::string& checkpoint_path, int64_t max_batch) {
  ST_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpoint(checkpoint_path));
  ST_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir));
  LoadedModel out;
  ST_ASSIGN_OR_RETURN(out.model, GPT::Create(reader->spec(), max_batch));
  for (const ParamEntry& e : out.model->layout().entries) {
    ST_RETURN_IF_ERROR(reader->ReadWhole("", e, out.model->params() + e.offset));
  }
  const nlohmann::json& manifest = reader->manifest();
  if (manifest.contains("vocab") && !manifest.at("vocab").is_null()) {
    ST_ASSIGN_OR_RETURN(out.vocab,
                        Vocabulary::FromJson(manifest.at("vocab"), dir + "/manifest.json"));
  } else {
    out.vocab = Vocabulary::Bytes();
  }
  out.manifest = manifest;
  return out;
}

}  // namespace scaletrain
