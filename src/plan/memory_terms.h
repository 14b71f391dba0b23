// The cost model's memory terms: the bytes a rank of a pipeline stage holds,
// each part a function that can be read and tested on its own. The
// parameter, gradient and optimizer bytes are exact (the trainer's flat
// buffers); activations and the rest are estimates. CostModel::Evaluate
// (cost_model.h) keeps the most loaded stage. Method: docs/planner.md.
#pragma once

#include <cstdint>
#include <vector>

#include "model/spec.h"
#include "parallel/schedule.h"
#include "parallel/tp_pp_layout.h"
#include "plan/layout.h"

namespace scaletrain::plan {

struct MemoryBreakdown {  // bytes on one GPU
  double params = 0, grads = 0, optimizer = 0, activations = 0, other = 0;
  double Total() const { return params + grads + optimizer + activations + other; }
};

// Exact bytes of the flat buffers on a rank, as the trainer allocates them
// (padded to a multiple of dp; src/parallel/dp_layout.h): parameters (2 B
// each, 4 in fp32; ZeRO-3 keeps only this rank's 1/dp), gradients (the
// gradient buffer's element, GradElemBytes; ZeRO >= 2 keeps only this rank's
// 1/dp), optimizer state (fp32 master + two moments = 12 B; in fp32 training
// the parameters are the master copy, so 8 B; ZeRO >= 1: 1/dp).
struct RankBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
  // The stage's activation bytes (MemoryBreakdown::activations, rounded):
  // exact for the cpu stack (TrainerActivationBytes), an estimate otherwise.
  int64_t activations = 0;
  int64_t numel = 0;         // parameters of the rank (stage, TP share)
  int64_t padded_numel = 0;  // flat buffer elements
};
RankBytes StageRankBytes(int64_t numel, const Layout& l, int64_t grad_elem_bytes);

// Activation bytes one transformer layer keeps for the backward pass, per
// micro-batch, on one tensor-parallel rank (Korthikanti et al. 2022,
// generalised to GQA, SwiGLU, FlashAttention and no-dropout training).
double LayerActivationBytes(const ModelSpec& m, int64_t micro_batch, int64_t tp, bool sp,
                            Recompute rc, const Software& sw);

// Activations a rank of `stage` holds at its peak: each of the `in_flight`
// micro-batches the schedule has started and not finished backward
// (PeakActivations) keeps its layer sets for one chunk (with full
// recomputation of recompute_layers of a chunk, those keep their input and
// the rest their whole set); full recomputation adds the one layer being
// rebuilt; virtual stage 0 adds the embedding's
// dropout mask per micro-batch in flight in chunk 0
// (`first_chunk_in_flight`), the last adds the logits and their fp32
// softmax.
double StageActivationBytes(const ModelSpec& m, const Layout& l, const Software& sw,
                            const RankParams& stage, int32_t in_flight,
                            int32_t first_chunk_in_flight);

// One model chunk of a stage as the CPU trainer holds it (src/model/gpt.cpp).
struct TrainerChunk {
  int64_t layers = 0;  // transformer blocks
  int64_t slots = 1;   // micro-batches whose activations it keeps at once
  bool embedding = false, head = false;
};
// The chunks of `stage`: their blocks (VirtualStageOfLayers) and slots (the
// most micro-batches the schedule has in flight in each, at least 1: what
// PipelineExecutor::SlotsPerChunk gives the trainer).
std::vector<TrainerChunk> TrainerChunksOf(const ModelSpec& m, const Layout& l,
                                          const PipelineSchedule& schedule, int64_t stage);
// The CPU trainer's activation buffer on a rank with these chunks, exactly
// (GPT::LayOutActivations): every slot's kept activations for the recompute
// mode (none: a block's full set; selective: without the B x heads/tp x s x s
// probabilities, one shared copy instead; full: only each block's input),
// the head's logits and softmax, full recompute's one working block and the
// backward's scratch, each slice rounded up to 16 floats. fp32. Recompute op
// is not the trainer's: 0.
int64_t TrainerActivationBytes(const ModelSpec& m, const Layout& l,
                               const std::vector<TrainerChunk>& chunks);

// FP8 training's change to a layer's activation bytes (negative: saved),
// for the whole-set policies (none, selective): Linears keep their inputs as
// 1-byte FP8 transposes (docs/planner.md, "FP8").
double Fp8ActivationDeltaBytes(const ModelSpec& m, int64_t micro_batch, int64_t tp, bool sp);
// The FP8 copies Transformer Engine keeps of `layers` layers' Linear weights
// between micro-batches (the cast weight and its transpose, 1 byte each), on
// one of tp ranks.
double Fp8WeightCopyBytes(const ModelSpec& m, const Layout& l, int64_t layers);
// Memory outside the model's flat buffers: the framework's
// (Software::framework_gib); under ZeRO-3, the buffers its layer-by-layer
// parameter gathers prefetch into (2 x 2 x a layer's weights in the compute
// precision); otherwise in FP8 the weights' FP8 copies (Fp8WeightCopyBytes;
// not with dynamic scaling, which casts them anew).
double OtherMemoryBytes(const ModelSpec& m, const Layout& l, const Software& sw,
                        const RankParams& stage);

// All of it for a rank of `stage` whose flat buffers are `rb`.
MemoryBreakdown StageMemory(const ModelSpec& m, const Layout& l, const Software& sw,
                            const RankParams& stage, const RankBytes& rb, int32_t in_flight,
                            int32_t first_chunk_in_flight);

}  // namespace scaletrain::plan
