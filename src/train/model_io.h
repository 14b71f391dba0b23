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

// Checkpoints hold whole tensors whatever layout wrote them, in the layout
// of the checkpoint's model spec (BuildParamLayout(spec)); a rank of a
// tp x pp layout holds shards (model.layout()). The embedding may have more
// padding rows at run time (padded to a multiple of tp): the real rows carry
// over, padding rows are zero.
//
// Whole tensors -> this rank's shards, into `local` (model.layout()).
Status ScatterToRank(const ParamLayout& ckpt_layout, const float* whole, const GPT& model,
                     float* local);
// This rank's shards -> `whole` (ckpt_layout), which is zeroed first; only
// entries this rank holds uniquely are written, and nothing at all unless
// `contribute`, so summing `whole` over all ranks (one contributing replica
// per data-parallel group) assembles every tensor exactly once.
void GatherFromRank(const GPT& model, const float* local, bool contribute,
                    const ParamLayout& ckpt_layout, float* whole);

// Builds the model a checkpoint describes and loads its weights (for
// sampling). Returns the vocabulary stored in the manifest too.
struct LoadedModel {
  std::unique_ptr<GPT> model;
  Vocabulary vocab;
  nlohmann::json manifest;
};
Result<LoadedModel> LoadModelForInference(const std::string& checkpoint_path, int64_t max_batch);

}  // namespace scaletrain
