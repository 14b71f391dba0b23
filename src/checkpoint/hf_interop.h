// Hugging Face model directories <-> scaletrain checkpoints.
//
// A model directory (what transformers' save_pretrained writes) holds
// config.json, model.safetensors and tokenizer files. The correspondence of
// our parameters with its tensors is a table per architecture
// (HfArchMappings): one rule per tensor kind, naming our tensor and
// Hugging Face's ("{L}" stands for the block index) and how the values move
// between them (HfTransform), plus the arch's config.json writer and reader.
// GPT-2 is the one table so far: our names are already Hugging Face's, its
// Conv1D layers store weights [in, out] (ours are [out, in], nn.Linear's), and
// the embedding there has the real vocabulary's rows (ours is padded).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "data/tokenizer.h"
#include "model/spec.h"

namespace scaletrain {

enum class HfTransform {
  kCopy,       // same shape, same order
  kTranspose,  // ours [out, in], theirs [in, out]
  kVocabRows,  // ours [padded vocab, C], theirs [vocab, C]: the padding rows dropped
};

struct HfTensorRule {
  std::string ours;  // our parameter-layout name; "{L}": block index
  std::string hf;    // the tensor's name in model.safetensors
  HfTransform transform = HfTransform::kCopy;
};

struct HfArchMapping {
  Arch arch = Arch::kGPT2;
  std::string model_type;  // config.json's "model_type"
  std::vector<HfTensorRule> rules;
  // Hugging Face's names of the tied output head (absent from files that
  // save_pretrained writes: a reader ties it) and of the embedding it is tied to.
  std::string tied_head, embedding;
  // Tensors some files hold that are not parameters (older transformers
  // saved GPT-2's causal-mask buffers): ignored on import. Name suffixes.
  std::vector<std::string> ignored_suffixes;
  // A prefix files may lack (GPT2Model, without the head, saves "h.0...").
  std::string optional_prefix;
  std::function<nlohmann::json(const ModelSpec&)> to_config;
  // The spec config.json describes (padded vocabulary = vocabulary). Errors
  // name config.json's field; `where` is the file's path.
  std::function<Result<ModelSpec>(const nlohmann::json&, const std::string& where)> from_config;
};

// One table per architecture: GPT-2 and Llama.
const std::vector<HfArchMapping>& HfArchMappings();

// A rule for one tensor of one model: "{L}" expanded.
struct HfTensorName {
  std::string ours, hf;
  HfTransform transform = HfTransform::kCopy;
};
// The mapping's rules for `spec`'s blocks, per-block rules once per block.
std::vector<HfTensorName> ExpandHfRules(const HfArchMapping& mapping, const ModelSpec& spec);
// The Hugging Face shape of a tensor of ours (`ours`: its shape in our layout).
Shape HfShape(HfTransform t, const Shape& ours, const ModelSpec& spec);

struct HfExportSummary {
  ModelSpec spec;
  int64_t tensors = 0;
  std::string vocab_kind;  // "" where the checkpoint has no vocabulary (no tokenizer files)
};
// `scaletrain export CHECKPOINT --format hf --out DIR`. `checkpoint`: a
// checkpoint directory or a run directory (its newest intact checkpoint),
// written by any layout. out_dir must not exist or be empty; it appears
// complete or not at all (written under a temporary name, then renamed).
Result<HfExportSummary> ExportHf(const std::string& checkpoint, const std::string& out_dir);

struct HfImportSummary {
  ModelSpec spec;
  std::string checkpoint_dir;  // out_dir/checkpoints/step_00000000
  std::optional<std::string> vocab_kind;
  int64_t converted_tensors = 0;  // stored F16 or BF16, converted to F32
};
// `scaletrain import DIR --out OUT`: the model in `hf_dir` (config.json,
// model.safetensors, F32/F16/BF16) as a step-0 whole-tensor checkpoint
// OUT/checkpoints/step_00000000 without optimizer state (a start for
// training.init_from, or for sampling). The vocabulary is
// scaletrain_vocab.json's if the directory has one. Same rules for out_dir
// as ExportHf.
Result<HfImportSummary> ImportHf(const std::string& hf_dir, const std::string& out_dir);

}  // namespace scaletrain
