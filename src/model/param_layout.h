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

// Layer ids order the parts of a model as forward runs them: the embeddings
// (kEmbeddingLayer), blocks 0 .. n_layer - 1, then the final norm, head and
// loss (HeadLayer). ParamEntry::layer, the model's per-layer hooks and the
// data-parallel buckets use them.
inline constexpr int64_t kEmbeddingLayer = -1;
inline int64_t HeadLayer(int64_t n_layer) { return n_layer; }
// "embedding", "layer 3", "head+loss": for traces and messages.
std::string LayerName(int64_t layer, int64_t n_layer);

// The layers a model chunk runs, first to last in layer ids (the embedding
// chunk starts at kEmbeddingLayer, the head chunk ends at HeadLayer).
struct LayerRange {
  int64_t first = 0, last = -1;
  bool Contains(int64_t layer) const { return first <= layer && layer <= last; }
};

struct ParamEntry {
  std::string name;      // nanoGPT/HF names for GPT-2, Meta names for Llama
  Shape shape;           // weights are [out, in] like torch.nn.Linear; a shard's shape in a rank layout
  int64_t offset = 0;    // in elements, into the flat buffer
  int64_t numel = 0;
  TpSplit tp_split = TpSplit::kReplicated;
  int64_t layer = kEmbeddingLayer;  // block index, kEmbeddingLayer or HeadLayer(n_layer)
  int64_t pp_stage = 0;  // owning pipeline stage
  bool weight_decay = false;  // AdamW decay applies to matmul weights and embeddings only
  // In a rank layout (BuildRankLayout): the whole tensor's shape, and how
  // this rank's shard sits in it. The shard is, for each of `shard_parts`
  // equal parts of the whole along `shard_dim`, the `tp_rank`-th of `tp`
  // equal pieces of that part (shard_parts is 3 for the fused q,k,v weight:
  // each rank takes its heads' rows of q, of k and of v). shard_dim -1: the
  // rank holds the whole tensor.
  Shape full_shape;
  int64_t shard_dim = -1;
  int64_t shard_parts = 1;
  int64_t tp = 1, tp_rank = 0;
  // Counted once in model-wide sums (gradient norm, checkpoint assembly):
  // false on the copies other ranks also hold (replicated tensors on tp
  // ranks > 0, the last stage's copy of the tied embedding).
  bool unique = true;
  bool tied_copy = false;  // the last pipeline stage's copy of the tied embedding
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

// Where one rank sits in a tensor x pipeline layout (data parallelism
// replicates a rank layout; it does not change it).
struct ModelShard {
  int64_t tp = 1, tp_rank = 0;
  int64_t pp = 1, stage = 0;
  int64_t vpp = 1;  // model chunks per stage (interleaved schedule)
  bool sp = false;  // sequence parallelism in the norm/residual regions
  // The zb-v schedule's V placement of the two chunks (chunk 0 of stage s
  // is virtual stage s, chunk 1 is 2 pp - 1 - s): the first stage runs the
  // embedding and the head, and no stage holds a tied embedding's copy.
  bool v_shape = false;
  // Context parallelism: the rank holds 1/cp of each sequence's positions
  // (model/context_parallel.h); the parameters are those of cp = 1.
  int64_t cp = 1, cp_rank = 0;
  bool ulysses = false;  // parallel.cp_impl = "ulysses" (else the ring)
};

// The virtual stage of `stage`'s chunk: Megatron's interleaving, chunk x pp
// + stage, or the V above; and the stage and chunk of a virtual stage. The
// pipeline schedules (parallel/schedule.h) place chunks by the same rule.
int64_t ChunkVirtualStage(int64_t pp, bool v_shape, int64_t stage, int64_t chunk);
int64_t StageOfVirtualStage(int64_t pp, bool v_shape, int64_t virtual_stage);
int64_t ChunkOfVirtualStage(int64_t pp, bool v_shape, int64_t virtual_stage);
// The stage that runs the head (the last virtual stage).
int64_t HeadStage(const ModelShard& shard);

// The first block of each of `stages` pipeline stages (contiguous runs of at
// least one block), balanced by cost: blocks cost alike, and the last stage
// also runs the head (logits and loss: 2 x n_embd x padded vocab FLOPs per
// token, against a block's matmuls and attention; the first stage's
// embedding lookup is ~free). The last stage gets the number of blocks that
// minimises the costliest stage, the others share the rest as StageOfLayer
// does (earlier ones take the extra block): with a light head that is the
// even split (Megatron-LM's), and a heavy head (small models, large
// vocabularies) leaves the last stage fewer blocks. One more entry at the
// end: n_layer.
std::vector<int64_t> PipelineStageStarts(const ModelSpec& spec, int64_t stages);

// Which virtual stage (0 .. pp*vpp-1) runs each block: PipelineStageStarts
// for pp stages; with interleaving (vpp > 1) an even split over pp*vpp
// virtual stages (vpp x pp must divide the blocks). Chunk c of stage s is
// virtual stage c*pp + s.
std::vector<int64_t> VirtualStageOfLayers(const ModelSpec& spec, int64_t pp, int64_t vpp);

// Checks that a layout can split the model: tp divides the heads and the
// padded vocabulary, pp*vpp <= n_layer, and with vpp > 1 that pp*vpp divides
// n_layer (zb-v: 2 pp). Errors name the setting and valid values.
Status CheckModelShard(const ModelSpec& spec, const ModelShard& shard);

// Llama's key/value heads under tensor parallelism: split over the TP ranks
// when tp divides n_kv_head; otherwise (n_kv_head < tp, dividing it) every
// TP rank holds all of them whole (wk, wv replicated; their gradients are
// summed over the TP group). LocalKvHeads: the key/value heads a rank holds.
bool KvHeadsReplicated(const ModelSpec& spec, int64_t tp);
int64_t LocalKvHeads(const ModelSpec& spec, int64_t tp);
// The key/value width a TP rank computes, times tp: n_kv_head x head_dim when
// split, tp x that when replicated (what per-rank cost formulas divide by tp).
inline int64_t KvWidthTimesTp(const ModelSpec& spec, int64_t tp) {
  const int64_t width = spec.n_kv_head * spec.head_dim();
  return KvHeadsReplicated(spec, tp) ? width * tp : width;
}

// The parameters one rank holds, in its own flat buffer: the entries of the
// layers its chunks run (chunk by chunk), the embedding on virtual stage 0,
// the final norm on the last; each shaped as its TP shard (column: rows of
// the [out, in] weight, row: columns, vocab: rows of the embedding; q,k,v
// split per head). With pp > 1 the last stage also holds a copy of the tied
// embedding (tied_copy, first in its buffer, layer -1: it is reduced with
// the first stage's before data parallelism may send it).
ParamLayout BuildRankLayout(const ModelSpec& spec, const ModelShard& shard);

// Copies between an entry's whole tensor and a rank's shard of it (the
// entry is from BuildRankLayout). Insert writes only the shard's elements.
void ExtractShard(const ParamEntry& entry, const float* full, float* shard);
void InsertShard(const ParamEntry& entry, const float* shard, float* full);

}  // namespace scaletrain
