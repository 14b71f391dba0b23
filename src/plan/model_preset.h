// Model presets for the planner: configs/models/NAME.toml, or a user's own
// TOML file with the same keys. A preset yields the shared ModelSpec (so the
// parameter count comes from BuildParamLayout, as the trainer's does) plus
// the published parameter count and a default global batch.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"

namespace scaletrain::plan {

struct ModelPreset {
  ModelSpec spec;
  double published_params = 0;   // as the source states it; 0 if unknown
  int64_t global_batch = 0;      // sequences per step the source trained with; 0 if unknown
};

// Reads a [model] table: name, arch (gpt2|llama), n_layer, n_embd, n_head,
// n_kv_head, ffn_hidden, seq_len, vocab_size, padded_vocab_size,
// published_params, global_batch.
Result<ModelPreset> LoadModelFile(const std::string& path);
// `name_or_path` is a preset name (configs/models/NAME.toml) or a file path.
Result<ModelPreset> LoadModel(const std::string& name_or_path, const std::string& config_dir);
std::vector<std::string> ModelPresetNames(const std::string& config_dir);

// A GPT-3-style spec (4h MLP, learned positions, tied embedding) from the
// dimensions a published run lists.
Result<ModelSpec> GptSpecFromDims(const std::string& name, int64_t layers, int64_t hidden, int64_t heads,
                                  int64_t seq, int64_t vocab);
// Layers, widths, heads, sequence and vocabulary far beyond any model
// trained (10,000 layers, 2^20 wide, ...) are one error naming the value.
Status WithinPlannerBounds(const ModelSpec& spec);

// Parameters of the whole model, from the shared parameter layout.
int64_t CountParams(const ModelSpec& spec);

}  // namespace scaletrain::plan
