// Data parallelism: the same model on every rank of the DP group, each on its
// own part of the global batch, gradients averaged.
//
// The flat gradient buffer is cut into buckets (contiguous slices, in reverse
// layer order: the last layers' gradients are complete first). A bucket's
// reduction starts as soon as backward has finished every gradient in it
// (GPT::Backward reports each layer) and runs on the communicator's thread
// while backward goes on. With gradient accumulation only the micro-batch
// that ends the step communicates (ZeRO-2 excepted, below).
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
//      accumulator and the full buffer is scratch for one backward.
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

namespace scaletrain {

struct DataParallelOptions {
  int64_t zero = 0;
  int64_t bucket_bytes = 25 << 20;
};

class DataParallel {
 public:
  static int64_t PaddedNumel(int64_t numel, int64_t dp) { return DpPaddedNumel(numel, dp); }

  // `comm` is the DP group. The flat buffers the calls below take hold
  // PaddedNumel(layout.total_numel, comm->size()) floats.
  DataParallel(const ParamLayout& layout, Communicator* comm, const DataParallelOptions& opt);

  int64_t dp() const { return dp_; }
  int64_t zero() const { return zero_; }
  int64_t padded_numel() const { return padded_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // The flat ranges this rank's optimizer updates: everything under ZeRO-0,
  // block dp_rank of every bucket (in flat order) under ZeRO-1/2.
  std::vector<FlatRange> OwnedRanges() const;
  int64_t owned_numel() const;

  // Call before the backward of every micro-batch; `communicates` says
  // whether this micro-batch's backward starts reductions (the last one of
  // the step, or every one under ZeRO-2).
  void BeginBackward(bool communicates, float* grads);
  // GPT::Backward's on_grads_ready hook.
  void OnGradsReady(int64_t layer);
  // After that backward: launches what is left, waits for everything (the
  // wait is the exposed communication time), and under ZeRO-2 adds this
  // rank's reduced blocks to the shard accumulator and zeroes the scratch.
  Status EndBackward();

  // The gradients the optimizer reads: the flat buffer (ZeRO-0/1), or the
  // compact shard accumulator (ZeRO-2: grads_compact for AdamW::Step).
  const float* optimizer_grads(const float* flat_grads) const;
  bool grads_compact() const { return zero_ == 2; }
  // Zeroes whatever gradient state persists across micro-batches.
  void ZeroGradState(float* flat_grads);

  // Global L2 norm of the averaged gradients (collective under ZeRO: each
  // rank sums squares over its blocks). Entries the layout marks as not
  // unique (copies other ranks hold too) are left out; with tensor or
  // pipeline parallelism the sums of `other_groups` (TP, PP) are added, so
  // every rank gets the norm of the whole model.
  Result<double> GradNorm(const float* flat_grads, const std::vector<Communicator*>& other_groups = {});
  // ZeRO-1/2: after the optimizer step, every rank gets every block.
  Status GatherParams(float* params);
  // Averages a scalar over the DP group (the logged loss).
  Result<double> Average(double value);

  // Optimizer state, compact (OwnedRanges order) <-> full flat layout, for
  // checkpoints that load at any dp: Gather is collective.
  Status GatherState(const float* compact, float* full);
  void ScatterState(const float* full, float* compact) const;

  // The collectives of the last communicating backward, bucket by bucket
  // (for traces: each handle knows when it started and finished).
  struct BucketCollective {
    size_t bucket;
    CommHandle handle;
  };
  const std::vector<BucketCollective>& last_collectives() const { return last_; }

  // Bytes this rank holds for gradients that persist across micro-batches.
  int64_t persistent_grad_bytes() const;

 private:
  void Launch(size_t bucket);

  const ParamLayout& layout_;
  Communicator* comm_;
  int64_t dp_, rank_, zero_, padded_;
  std::vector<GradBucket> buckets_;
  std::vector<BucketCollective> pending_, last_;
  std::vector<bool> launched_;
  bool communicating_ = false;
  float* grads_ = nullptr;
  Buffer shard_grads_;  // ZeRO-2 accumulator, owned_numel() floats
};

}  // namespace scaletrain
