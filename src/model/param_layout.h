// The parameter-layout table: every parameter's name, shape, offset in the
// flat buffer, how tensor parallelism splits it and which pipeline stage owns
// it. It is the single source that the trainer's allocator, the checkpoint
// writer/reader and the planner's memory model read (DESIGN principle 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/spec.h"

namespace scaletrain {

enum class TpSplit {
  kReplicated,  // every TP rank holds it whole (norms, row-parallel biases)
  kColumn,      // split along the output dimension (rows of an [out, in] weight)
  kRow,         // split along the input dimension (columns of an [out, in] weight)
  kVocab,       // embedding rows split across ranks (vocab-parallel)
};
const char* TpSplitName(TpSplit s);

struct ParamEntry {
  std::string name;      // nanoGPT/HF names for GPT-2, Meta names for Llama
  Shape shape;           // weights are [out, in] like torch.nn.Linear
  int64_t offset = 0;    // in elements, into the flat buffer
  int64_t numel = 0;
  TpSplit tp_split = TpSplit::kReplicated;
  int64_t layer = -1;    // transformer block index; -1 embeddings; n_layer: final norm/head
  int64_t pp_stage = 0;  // owning pipeline stage
  bool weight_decay = false;  // AdamW decay applies to matmul weights and embeddings only
};

// [begin, end) in elements of a flat buffer laid out by a ParamLayout.
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

struct ParamLayout {
  std::vector<ParamEntry> entries;  // in forward order: embeddings, blocks, final
  int64_t total_numel = 0;

  const ParamEntry* Find(const std::string& name) const;
  // Elements owned by one pipeline stage (all stages if stage < 0).
  int64_t NumelOnStage(int64_t stage) const;
};

// Which pipeline stage runs block `layer` when n_layer blocks are split over
// pp stages: contiguous runs, as even as possible, earlier stages get the
// extra layer (they also hold the embedding, the last stage holds the head).
int64_t StageOfLayer(int64_t layer, int64_t n_layer, int64_t pp);

ParamLayout BuildParamLayout(const ModelSpec& spec, int64_t pp = 1);

}  // namespace scaletrain
