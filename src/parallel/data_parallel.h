// Data parallelism: the same model on every rank of the DP group, each on its
// own part of the global batch, gradients averaged.
//
// The flat gradient buffer is cut into buckets (contiguous slices, in reverse
// layer order: the last layers' gradients are complete first). The pipeline
// executor (pipeline.h) runs every micro-batch of every layout, and tells
// data parallelism about each backward it runs: one micro-batch on one model
// chunk. A bucket belongs to the chunk that runs its lowest layer; its
// reduction starts as soon as that chunk's backward has finished the layer
// (the model reports each layer) and runs on the communicator's thread
// while backward goes on. With gradient accumulation only the step's last
// micro-batch communicates (ZeRO-2 excepted, below). With pipeline
// parallelism, buckets that hold the tied embedding wait until the first and
// last stage have summed its two copies (FinishGradReduction).
//
// Reductions sum: each rank's backward already scales its gradients by 1/dp
// (with the accumulation's 1/micro-batches), so the sum is the average and
// no separate division pass over the bucket is needed (measured: it cost
// 15% of a 4 MiB all-reduce here).
//
// ZeRO (Rajbhandari et al. 2020), on the DP group:
//   0  all-reduce of every bucket; every rank updates everything.
//   1  reduce-scatter of every bucket: rank r receives block r of each
//      bucket (a bucket is a multiple of dp elements), updates only those
//      blocks with optimizer state for them alone (1/dp), then all-gathers
//      the parameters bucket by bucket.
//   2  as 1, and gradients persist only as this rank's blocks: every
//      micro-batch's gradients are reduce-scattered into a 1/dp shard
//      accumulator and the full buffer is scratch for one backward. (The
//      buckets that wait for the tied embedding's sum are reduced once, at
//      the end of the step: the sum needs the full gradients.)
//   3  as 2, and the parameters persist only as this rank's blocks too
//      (Zero3Params, zero3.h, gathers them layer by layer for forward and
//      backward); the buckets are cut at the layer boundaries (PlanZero3),
//      not by bucket_bytes, and no all-gather follows the optimizer step.
//
// The flat buffers are padded to a multiple of dp elements (PaddedNumel) so
// every bucket divides evenly; the padding is never read by the model.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/status.h"
#include "model/param_layout.h"
#include "parallel/dp_layout.h"  // GradBucket and the arithmetic (shared with the planner)
#include "parallel/grad_compression.h"

namespace scaletrain {

struct DataParallelOptions {
  int64_t zero = 0;
  int64_t bucket_bytes = 25 << 20;
  // Pipeline parallelism: the embedding's gradients (kEmbeddingLayer) are
  // final only after the tied copies' sum between the first and last stage.
  bool embedding_waits_for_tied_sum = false;
  // Hierarchical reduction (ZeRO-0; ProcessGroups::dp_host / dp_cross): each
  // bucket is reduce-scattered inside the host while backward runs, its
  // block all-reduced across hosts and all-gathered inside the host when the
  // step's gradients are finished. Both null: one flat all-reduce.
  Communicator* host_group = nullptr;
  Communicator* cross_group = nullptr;
  // ZeRO-0: the wire format of the all-reduce (grad_compression.h); with the
  // hierarchical reduction, of its across-host part only.
  DpCompression compression = DpCompression::kNone;
  // ZeRO-3's buckets follow the layers: the model's n_layer names its head.
  int64_t n_layer = 0;
};

// The gradient buckets of a ZeRO stage: BuildGradBuckets (bucket_bytes) for
// 0-2, PlanZero3's layer-aligned ones for 3. Checkpoints cut the same.
std::vector<GradBucket> BuildDpBuckets(const ParamLayout& layout, int64_t dp, int64_t bucket_bytes,
                                       int64_t zero, int64_t n_layer);

class DataParallel {
 public:
  static int64_t PaddedNumel(int64_t numel, int64_t dp) { return DpPaddedNumel(numel, dp); }

  // `comm` is the DP group. The flat buffers the calls below take hold
  // PaddedNumel(layout.total_numel, comm->size()) floats.
  DataParallel(const ParamLayout& layout, Communicator* comm, const DataParallelOptions& opt);

  int64_t dp() const { return dp_; }
  const GradCompressor& compressor() const { return compressor_; }
  int64_t zero() const { return zero_; }
  int64_t padded_numel() const { return padded_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // The flat ranges this rank's optimizer updates: everything under ZeRO-0,
  // block dp_rank of every bucket (in flat order) under ZeRO-1/2.
  std::vector<FlatRange> OwnedRanges() const;
  // Block dp_rank of every bucket, at any ZeRO stage (DpBlockRanges): the
  // part of the flat buffers this rank writes of a sharded checkpoint.
  std::vector<FlatRange> BlockRanges() const;
  int64_t owned_numel() const;

  // ---- One step's gradient reduction, as the pipeline executor runs it ----
  // Zeroes the gradients (and ZeRO-2's shard accumulator) for a new step.
  void BeginStep(float* grads);
  // Before the backward of micro-batch `micro_batch` (of `micro_batches`) on
  // the model chunk that runs `layers`. It reduces on the step's last
  // micro-batch, or on every one under ZeRO-2.
  void BeginBackward(int64_t micro_batch, int64_t micro_batches, const LayerRange& layers);
  // The model's on_grads_ready hook: starts the reduction of every bucket of
  // this chunk whose lowest layer is `layer` or above.
  void OnGradsReady(int64_t layer);
  // After that backward: starts what is left of the chunk's buckets. Under
  // ZeRO-2 it waits for them, adds this rank's reduced blocks to the shard
  // accumulator and zeroes the buckets (the next backward reuses them).
  Status EndBackward();
  // After the step's last backward (and the tied embedding's sum): reduces
  // the buckets that waited for it, then waits for every reduction of the
  // step (the wait is the exposed communication time).
  Status FinishGradReduction();

  // The gradients the optimizer reads: the flat buffer (ZeRO-0/1), or the
  // compact shard accumulator (ZeRO-2: grads_compact for AdamW::Step).
  const float* optimizer_grads(const float* flat_grads) const;
  bool grads_compact() const { return zero_ >= 2; }

  // Global L2 norm of the averaged gradients (collective under ZeRO: each
  // rank sums squares over its blocks). Entries the layout marks as not
  // unique (copies other ranks hold too) are left out; with tensor or
  // pipeline parallelism the sums of `other_groups` (TP, PP) are added, so
  // every rank gets the norm of the whole model.
  Result<double> GradNorm(const float* flat_grads, const std::vector<Communicator*>& other_groups = {});
  // ZeRO-1/2: after the optimizer step, every rank gets every block
  // (nothing under ZeRO-3: it gathers before each use).
  Status GatherParams(float* params);
  // Averages a scalar over the DP group (the logged loss).
  Result<double> Average(double value);

  // Optimizer state, compact (OwnedRanges order) <-> full flat layout, for
  // checkpoints that load at any dp: Gather is collective.
  Status GatherState(const float* compact, float* full);
  void ScatterState(const float* full, float* compact) const;

  // The gradient reductions of the step so far, bucket by bucket (for
  // traces: each handle knows when it started and finished).
  struct BucketCollective {
    size_t bucket;
    CommHandle handle;
  };
  const std::vector<BucketCollective>& step_collectives() const { return step_; }

  // Bytes this rank holds for gradients that persist across micro-batches.
  int64_t persistent_grad_bytes() const;

 private:
  // Whether bucket i is reduced after the tied embedding's sum, not during
  // backward.
  bool WaitsForTiedSum(size_t i) const;
  void Launch(size_t bucket);
  // Where bucket i's block sits in the compact shard (OwnedRanges order:
  // the buckets tile the buffer, so the blocks before it hold begin / dp).
  int64_t ShardOffset(size_t i) const { return buckets_[i].begin / dp_; }
  // Waits for the reductions in flight; under ZeRO-2 moves their blocks into
  // the shard accumulator and zeroes the buckets.
  Status Complete();
  // Hierarchical: after the in-host reduce-scatters, the across-host
  // all-reduce of this rank's block of each bucket, then the in-host all-gather.
  Status FinishHierarchical();

  const ParamLayout& layout_;
  Communicator* comm_;
  Communicator* host_ = nullptr;   // hierarchical only
  Communicator* cross_ = nullptr;  // hierarchical only
  int64_t dp_, rank_, zero_, padded_;
  int64_t tied_front_numel_;  // DpTiedFrontNumel, or 0: nothing waits for a tied sum
  std::vector<GradBucket> buckets_;
  std::vector<BucketCollective> in_flight_, step_;
  std::vector<bool> launched_;  // during the current backward
  LayerRange chunk_;            // the layers of the current backward's chunk
  bool communicating_ = false;
  float* grads_ = nullptr;
  Buffer shard_grads_;  // ZeRO-2 accumulator, owned_numel() floats
  GradCompressor compressor_;  // ZeRO-0's all-reduce (kNone: plain fp32)
};

}  // namespace scaletrain
