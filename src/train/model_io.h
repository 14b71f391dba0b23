// Moving a model between memory and checkpoints: the model spec as JSON (in
// the manifest) and flat buffers as named tensors, by the names of the
// parameter-layout table.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/spec.h"
#include "train/checkpoint_dir.h"
#include "train/tokenizer.h"

namespace scaletrain {

nlohmann::json SpecToJson(const ModelSpec& spec);
Result<ModelSpec> SpecFromJson(const nlohmann::json& j);

// One tensor per layout entry, viewing `base` (a flat buffer of the layout),
// named prefix + entry name.
std::vector<NamedTensor> LayoutTensors(const ParamLayout& layout, const float* base,
                                       const std::string& prefix = "");

// Copies every layout entry prefix + name from `file` into `dst`. An absent
// tensor, a shape or dtype that differs, is a FailedPrecondition naming the
// tensor, both shapes, and the fix.
Status LoadLayoutTensors(const SafetensorsFile& file, const ParamLayout& layout, float* dst,
                         const std::string& prefix = "");

// Builds the model a checkpoint describes and loads its weights (for
// sampling). Returns the vocabulary stored in the manifest too.
struct LoadedModel {
  std::unique_ptr<GPT> model;
  Vocabulary vocab;
  nlohmann::json manifest;
};
Result<LoadedModel> LoadModelForInference(const std::string& checkpoint_path, int64_t max_batch);

}  // namespace scaletrain
