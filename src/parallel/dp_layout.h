// Data parallelism as arithmetic: how the flat buffers are padded, how the
// gradient buffer is cut into buckets, what a ZeRO stage leaves on each rank
// and which collectives one optimizer step issues on the DP group, with their
// payload bytes. No communicator and no kernels: DataParallel
// (data_parallel.h) allocates and communicates from these figures, and the
// planner (src/plan) predicts from the same functions, so the planner's
// per-rank bytes and per-step DP traffic can be checked exactly against what
// the trainer allocated and counted (DESIGN principle 1;
// tests/cli/test_plan_vs_trainer.sh).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/param_layout.h"

namespace scaletrain {

struct GradBucket {
  int64_t begin = 0, end = 0;  // flat elements; size a multiple of dp
  int64_t min_layer = 0;       // ready once backward has reported this layer
  int64_t size() const { return end - begin; }
};

// Elements of the flat parameter / gradient buffers at data-parallel size
// dp: the layout's elements padded to a multiple of dp, so every bucket
// splits into dp equal blocks. The padding is never read by the model.
inline int64_t DpPaddedNumel(int64_t numel, int64_t dp) { return (numel + dp - 1) / dp * dp; }

// Cuts [0, padded_numel) into buckets of at most bucket_bytes of fp32
// gradients (rounded down to a multiple of dp elements, at least dp), from
// the end of the buffer: the last layers' gradients are complete first and
// go out first. The result is in launch order (last bucket of the buffer
// first). min_layer is left 0; BuildGradBuckets fills it.
std::vector<GradBucket> CutGradBuckets(int64_t padded_numel, int64_t dp, int64_t bucket_bytes);

// CutGradBuckets over the layout's padded buffer, each bucket with the
// lowest layer whose parameters it holds (a bucket of padding only: ready at
// once).
std::vector<GradBucket> BuildGradBuckets(const ParamLayout& layout, int64_t dp, int64_t bucket_bytes);

// Block `rank` of every bucket (each bucket splits into dp equal blocks), in
// flat order: what a ZeRO rank owns, and what each DP rank writes of a
// sharded checkpoint at any ZeRO stage.
std::vector<FlatRange> DpBlockRanges(const std::vector<GradBucket>& buckets, int64_t dp, int64_t rank);

// Fills each bucket's min_layer from the layout (BuildGradBuckets).
void SetBucketMinLayers(const ParamLayout& layout, std::vector<GradBucket>& buckets);

// Elements this rank's optimizer updates (and keeps AdamW state for): all of
// the padded buffer under ZeRO-0, one block of every bucket (padded / dp in
// all) under ZeRO >= 1.
inline int64_t DpOwnedNumel(int64_t padded_numel, int64_t dp, int64_t zero) {
  return zero == 0 ? padded_numel : padded_numel / dp;
}
// Gradient elements a rank keeps across micro-batches: the whole buffer,
// or under ZeRO >= 2 only its reduced blocks (the full buffer is then
// scratch for one backward).
inline int64_t DpPersistentGradNumel(int64_t padded_numel, int64_t dp, int64_t zero) {
  return zero >= 2 ? padded_numel / dp : padded_numel;
}

// The operations a step issues on a group (the communicator's CommOp, less
// broadcast and barrier, which no step issues).
enum class CollectiveKind { kAllreduce, kReduceScatter, kAllgather, kSend, kRecv };
const char* CollectiveKindName(CollectiveKind k);  // "allreduce", ..., "send", "recv"

// Where in a step a collective runs (the planner places its time there).
enum class StepPhase { kForward, kBackward, kStep };

// One kind of collective a step issues, `calls` times, with the payload
// bytes of all calls together in the communicator's convention
// (comm/communicator.h: the one buffer that holds the whole logical data,
// e.g. the full bucket for a reduce-scatter or an all-gather; a send or a
// receive counts its message on its own side). Used for the DP group here
// and for the TP and PP groups in tp_pp_layout.h.
struct StepCollective {
  const char* what = "";  // "gradient reduction", "parameter all-gather", ...
  CollectiveKind kind = CollectiveKind::kAllreduce;
  int64_t calls = 0;
  int64_t payload_bytes = 0;
  StepPhase phase = StepPhase::kStep;
  // Bytes a bandwidth-optimal ring sends out of each of the n ranks of the
  // group for these calls: 2(n-1)/n x payload for all-reduce, (n-1)/n for
  // reduce-scatter and all-gather, the payload for a send, 0 for a receive.
  double RingBytes(int64_t n) const;
};

// Sum of payload_bytes / calls over a list.
int64_t PayloadBytes(const std::vector<StepCollective>& cs);
int64_t Calls(const std::vector<StepCollective>& cs);

// The collectives one optimizer step issues on the DP group (none when
// dp = 1), as DataParallel and the trainer issue them:
//   ZeRO-0:   all-reduce of every bucket, once per step (the last
//             micro-batch's backward)
//   ZeRO-1:   reduce-scatter of every bucket once per step, the gradient-norm
//             sum (one double all-reduce) and the parameter all-gather of
//             every bucket after the optimizer step
//   ZeRO-2:   as ZeRO-1, but the reduce-scatter runs after every
//             micro-batch's backward (gradients persist only as shards),
//             bar the buckets that wait for the tied embedding's sum
// plus, at any stage, the average of the logged loss (one double).
// `micro_batches`: micro-batches per step (ZeRO-2 reduces after each).
// `tied_front_numel`: DpTiedFrontNumel (0 without pipeline parallelism).
// `grad_elem_bytes`, `param_elem_bytes`: bytes of one gradient and of one
// parameter element as communicated (4 and 4: the trainer's fp32).
//
// With pipeline parallelism the first and last stage sum the tied
// embedding's two copies after backward, and data parallelism may reduce
// the embedding's gradients only after that: the buckets that hold them are
// reduced once a step (after the sum) at every ZeRO stage, the others under
// ZeRO-2 after every micro-batch. The embedding's entries (kEmbeddingLayer)
// come first in a rank's flat buffer; DpTiedFrontNumel counts them.
int64_t DpTiedFrontNumel(const ParamLayout& rank_layout);
inline bool DpBucketWaitsForTiedSum(const GradBucket& b, int64_t tied_front_numel) {
  return b.begin < tied_front_numel;
}
// How many times a step reduces bucket b.
inline int64_t DpBucketReductionsPerStep(const GradBucket& b, int64_t zero, int64_t micro_batches,
                                         int64_t tied_front_numel) {
  return zero >= 2 && !DpBucketWaitsForTiedSum(b, tied_front_numel) ? micro_batches : 1;
}

// What goes on the wire in ZeRO-0's gradient all-reduce (parallel.dp_compress;
// parallel/grad_compression.h does it):
//   kNone  the fp32 gradients
//   kBf16  bf16: an all-reduce whose partial sums round to bf16
//   kFp16  fp16 times a power-of-two scale that every rank derives from the
//          previous step's reduced bucket (an overflow redoes the bucket in fp32)
//   kSign  one bit per element and one fp32 scale (the mean |value|) per
//          kSignBlock elements, all-gathered, with error feedback: what a
//          rank's message leaves out is added to its next step's gradients
//          (EF-SignSGD, Karimireddy et al. 2019, in the blockwise form of
//          Zheng, Huang and Kwok 2019)
enum class DpCompression { kNone, kBf16, kFp16, kSign };
const char* DpCompressionName(DpCompression c);  // "none", "bf16", "fp16", "sign"
// false for an unknown name.
bool DpCompressionFromName(const std::string& name, DpCompression* out);
inline constexpr int64_t kSignBlock = 256;
// Bytes of one rank's kSign message for `count` elements: the sign bits in
// whole 32-bit words, then one float per kSignBlock elements.
inline int64_t SignMessageBytes(int64_t count) {
  return (count + 31) / 32 * 4 + (count + kSignBlock - 1) / kSignBlock * 4;
}

// ---- ZeRO-3: parameters sharded, gathered layer by layer ----------------
// A rank's flat buffer is a run of layers: the embedding (kEmbeddingLayer),
// the blocks, the final norm (HeadLayer). ZeRO-3 gathers a *unit* at a time:
// each block is one, the embedding and the head (which reads the tied word
// embedding) together are the "outer" unit. Its buckets are cut at the layer
// boundaries rounded down and up to multiples of dp: one bucket per layer
// (its elements from the first multiple of dp at or after its start to the
// last before its end) and a "seam" bucket of dp elements wherever a layer
// boundary is not a multiple of dp (it holds the end of one layer and the
// start of the next, and is gathered with both). A layer's *window* is
// [its begin rounded down, its end rounded up): the buckets it gathers.
struct Zero3Layout {
  std::vector<GradBucket> buckets;  // launch order (last in the buffer first); min_layer 0
  std::vector<FlatRange> windows;   // by run: the runs' windows, in flat order
  std::vector<std::vector<size_t>> window_buckets;  // by run: indices into `buckets`
  // By unit: the runs it gathers. Unit 0 is the outer unit when there is
  // one (runs marked outer), then each other run is a unit of its own.
  std::vector<std::vector<size_t>> units;
  std::vector<int64_t> unit_of_run;
  // By run: whether a pass acquires it as a layer of its own (false for a
  // pipeline's last stage's copy of the tied embedding: the head acquires it).
  std::vector<bool> run_acquired;
  std::vector<bool> run_outer;  // PlanZero3's input
};
// `run_numels`: elements of each run of equal layer in the flat buffer, in
// order; `run_outer`: whether the run is the embedding's or the head's.
// `run_acquired` (empty: all) as in Zero3Layout.
Zero3Layout PlanZero3(const std::vector<int64_t>& run_numels, const std::vector<bool>& run_outer,
                      int64_t dp, const std::vector<bool>& run_acquired = {});
// The runs of a layout (consecutive entries of one layer): numels, outer
// flags (kEmbeddingLayer, HeadLayer) and layer ids.
struct LayerRuns {
  std::vector<int64_t> numels, layers;
  std::vector<bool> outer, acquired;  // acquired: false for a tied copy
};
LayerRuns DpLayerRuns(const ParamLayout& layout, int64_t n_layer);
// The units one pass (a forward or a backward of a micro-batch) acquires,
// in order: the units of the layers as the model runs them. A backward
// skips the embedding (its backward reads only gradients). With several
// model chunks on the rank (zb-v) each chunk's forward and backward is a
// pass of its own: `run_chunk` gives each run's chunk (empty: one chunk)
// and the pass is chunk `chunk`'s.
std::vector<int64_t> Zero3PassUnits(const Zero3Layout& z, bool backward,
                                    const std::vector<int64_t>& run_chunk = {},
                                    int64_t chunk = 0);
// Each run's chunk: the chunk whose layers (LayerRange, embedding and head
// ids included) hold the run's layer.
std::vector<int64_t> Zero3RunChunks(const std::vector<int64_t>& run_layers,
                                    const std::vector<LayerRange>& chunks);
// Which of `sequence`'s units are gathered, in order, by the trainer's
// policy: two gather buffers; a unit not held is gathered into the buffer
// the current unit is not in, then the next unit of the sequence (if not
// held) into the other (the prefetch). Both buffers start empty each pass.
std::vector<int64_t> Zero3GatheredUnits(const std::vector<int64_t>& sequence);
// All-gather calls and elements of one pass (a forward or a backward).
struct Zero3PassGathers {
  int64_t calls = 0, numel = 0;
};
// With `run_chunk` (chunks 0 .. its largest): the passes of all chunks, one
// micro-batch's forwards (backwards).
Zero3PassGathers Zero3GathersPerPass(const Zero3Layout& z, bool backward,
                                     const std::vector<int64_t>& run_chunk = {});

// `compression` changes ZeRO-0's all-reduce: 2-byte elements for kBf16 and
// kFp16, for kSign an all-gather of every rank's SignMessageBytes per bucket.
// ZeRO-3 (`forward`, `backward`: one pass's, Zero3GathersPerPass)
// reduce-scatters as ZeRO-2, has no all-gather after the optimizer step,
// and all-gathers the parameters unit by unit in every micro-batch's
// forward and backward.
std::vector<StepCollective> DataParallelStepCollectives(
    const std::vector<GradBucket>& buckets, int64_t dp, int64_t zero, int64_t micro_batches,
    int64_t tied_front_numel, int64_t grad_elem_bytes, int64_t param_elem_bytes,
    DpCompression compression = DpCompression::kNone, Zero3PassGathers forward = {},
    Zero3PassGathers backward = {});

}  // namespace scaletrain
