// Moving a model between memory and checkpoints: the model spec as JSON (in
// the manifest) and flat buffers as named tensors, by the names of the
// parameter-layout table.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/spec.h"

namespace scaletrain {

nlohmann::json SpecToJson(const ModelSpec& spec);
Result<ModelSpec> SpecFromJson(const nlohmann::json& j);

// One tensor per layout entry, viewing `base` (a flat buffer of the layout),
// named prefix + entry name.
std::vector<NamedTensor> LayoutTensors(const ParamLayout& layout, const float* base,
                                       const std::string& prefix = "");

// Copies a tensor between two shapes that differ at most in their first
// dimension (the embedding's padding rows, which depend on tp): the rows both
// have; the rest of dst is zero.
void CopyCommonRows(const float* src, const Shape& src_shape, float* dst, const Shape& dst_shape);

// Builds the model a checkpoint describes and loads its weights (for
// sampling). Returns the vocabulary stored in the manifest too.
struct LoadedModel {
  std::unique_ptr<GPT> model;
  Vocabulary vocab;
  nlohmann::json manifest;
};
Result<LoadedModel> LoadModelForInference(const std::string& checkpoint_path, int64_t max_batch);

}  // namespace scaletrain
