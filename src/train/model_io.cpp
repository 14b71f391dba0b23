#include "train/model_io.h"

#include <algorithm>

#include <cstring>

namespace scaletrain {

nlohmann::json SpecToJson(const ModelSpec& s) {
  return {{"arch", ArchName(s.arch)},        {"n_layer", s.n_layer},
          {"n_head", s.n_head},              {"n_kv_head", s.n_kv_head},
          {"n_embd", s.n_embd},              {"ffn_hidden", s.ffn_hidden},
          {"block_size", s.block_size},      {"vocab_size", s.vocab_size},
          {"padded_vocab_size", s.padded_vocab_size}};
}

Result<ModelSpec> SpecFromJson(const nlohmann::json& j) {
  ModelSpec s;
  try {
    ST_ASSIGN_OR_RETURN(s.arch, ArchFromName(j.at("arch").get<std::string>()));
    s.n_layer = j.at("n_layer").get<int64_t>();
    s.n_head = j.at("n_head").get<int64_t>();
    s.n_kv_head = j.at("n_kv_head").get<int64_t>();
    s.n_embd = j.at("n_embd").get<int64_t>();
    s.ffn_hidden = j.at("ffn_hidden").get<int64_t>();
    s.block_size = j.at("block_size").get<int64_t>();
    s.vocab_size = j.at("vocab_size").get<int64_t>();
    s.padded_vocab_size = j.at("padded_vocab_size").get<int64_t>();
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

Status LoadLayoutTensors(const SafetensorsFile& file, const ParamLayout& layout, float* dst,
                         const std::string& prefix) {
  for (const auto& e : layout.entries) {
    const std::string name = prefix + e.name;
    const NamedTensor* t = file.Find(name);
    if (!t) {
      return FailedPrecondition("'" + file.path() + "' has no tensor '" + name +
                                "': it was written for a different model; use the config it was "
                                "trained with");
    }
    if (t->dtype != DType::kF32 || t->shape != e.shape) {
      return FailedPrecondition("'" + file.path() + "': tensor '" + name + "' is " +
                                std::string(DTypeName(t->dtype)) + " " + ShapeToString(t->shape) +
                                ", this model expects F32 " + ShapeToString(e.shape) +
                                "; use the config the checkpoint was trained with");
    }
    std::memcpy(dst + e.offset, t->data, static_cast<size_t>(e.numel) * sizeof(float));
  }
  return Status::Ok();
}

namespace {

// Copies the leading rows both shapes share (they differ at most in the
// first dimension: the embedding's padding); the rest of dst is zero.
void CopyCommonRows(const float* src, const Shape& src_shape, float* dst, const Shape& dst_shape) {
  const int64_t row = src_shape.size() > 1 ? NumElements(src_shape) / src_shape[0] : 1;
  const int64_t rows = std::min(src_shape[0], dst_shape[0]);
  std::memcpy(dst, src, static_cast<size_t>(rows * row) * sizeof(float));
  std::fill(dst + rows * row, dst + NumElements(dst_shape), 0.0f);
}

}  // namespace

Status ScatterToRank(const ParamLayout& ckpt_layout, const float* whole, const GPT& model,
                     float* local) {
  std::vector<float> tmp;
  for (const ParamEntry& e : model.layout().entries) {
    const ParamEntry* c = ckpt_layout.Find(e.name);
    if (c == nullptr) return Internal("checkpoint layout has no '" + e.name + "'");
    tmp.resize(static_cast<size_t>(NumElements(e.full_shape)));
    CopyCommonRows(whole + c->offset, c->shape, tmp.data(), e.full_shape);
    ExtractShard(e, tmp.data(), local + e.offset);
  }
  return Status::Ok();
}

void GatherFromRank(const GPT& model, const float* local, bool contribute,
                    const ParamLayout& ckpt_layout, float* whole) {
  std::fill(whole, whole + ckpt_layout.total_numel, 0.0f);
  if (!contribute) return;
  std::vector<float> tmp;
  for (const ParamEntry& e : model.layout().entries) {
    if (!e.unique) continue;
    const ParamEntry* c = ckpt_layout.Find(e.name);
    if (c == nullptr) continue;
    tmp.assign(static_cast<size_t>(NumElements(e.full_shape)), 0.0f);
    InsertShard(e, local + e.offset, tmp.data());
    CopyCommonRows(tmp.data(), e.full_shape, whole + c->offset, c->shape);
  }
}

Result<LoadedModel> LoadModelForInference(const std::string& checkpoint_path, int64_t max_batch) {
  ST_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpoint(checkpoint_path));
  ST_ASSIGN_OR_RETURN(LoadedCheckpoint ck, ReadCheckpoint(dir));
  if (!ck.manifest.contains("model")) {
    return DataLoss("'" + dir + "/manifest.json' has no model description; it is not a scaletrain checkpoint");
  }
  ST_ASSIGN_OR_RETURN(ModelSpec spec, SpecFromJson(ck.manifest.at("model")));
  LoadedModel out;
  ST_ASSIGN_OR_RETURN(out.model, GPT::Create(spec, max_batch));
  ST_RETURN_IF_ERROR(LoadLayoutTensors(*ck.model, out.model->layout(), out.model->params()));
  if (ck.manifest.contains("vocab") && !ck.manifest.at("vocab").is_null()) {
    ST_ASSIGN_OR_RETURN(out.vocab, Vocabulary::FromJson(ck.manifest.at("vocab"), dir + "/manifest.json"));
  } else {
    out.vocab = Vocabulary::Bytes();
  }
  out.manifest = std::move(ck.manifest);
  return out;
}

}  // namespace scaletrain
