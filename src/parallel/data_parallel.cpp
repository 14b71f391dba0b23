#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"

namespace scaletrain {

std::vector<GradBucket> BuildDpBuckets(const ParamLayout& layout, int64_t dp, int64_t bucket_bytes,
                                       int64_t zero, int64_t n_layer) {
  if (zero < 3) return BuildGradBuckets(layout, dp, bucket_bytes);
  const LayerRuns runs = DpLayerRuns(layout, n_layer);
  std::vector<GradBucket> buckets = PlanZero3(runs.numels, runs.outer, dp, runs.acquired).buckets;
  SetBucketMinLayers(layout, buckets);
  return buckets;
}

DataParallel::DataParallel(const ParamLayout& layout, Communicator* comm,
                           const DataParallelOptions& opt)
    : layout_(layout),
      comm_(comm),
      host_(opt.host_group),
      cross_(opt.cross_group),
      dp_(comm->size()),
      rank_(comm->rank()),
      zero_(opt.zero),
      padded_(PaddedNumel(layout.total_numel, comm->size())),
      tied_front_numel_(opt.embedding_waits_for_tied_sum ? DpTiedFrontNumel(layout) : 0),
      compressor_(opt.zero == 0 ? opt.compression : DpCompression::kNone, padded_) {
  buckets_ = BuildDpBuckets(layout_, dp_, opt.bucket_bytes, zero_, opt.n_layer);
  launched_.assign(buckets_.size(), false);
  if (zero_ >= 2) shard_grads_ = Buffer(static_cast<size_t>(owned_numel()) * sizeof(float));
}

bool DataParallel::WaitsForTiedSum(size_t i) const {
  return DpBucketWaitsForTiedSum(buckets_[i], tied_front_numel_);
}

std::vector<FlatRange> DataParallel::OwnedRanges() const {
  if (zero_ == 0) return {{0, padded_}};
  return BlockRanges();
}

std::vector<FlatRange> DataParallel::BlockRanges() const {
  return DpBlockRanges(buckets_, dp_, rank_);
}

int64_t DataParallel::owned_numel() const { return DpOwnedNumel(padded_, dp_, zero_); }

void DataParallel::BeginStep(float* grads) {
  grads_ = grads;
  std::memset(grads, 0, static_cast<size_t>(padded_) * sizeof(float));
  shard_grads_.Zero();
  step_.clear();
}

void DataParallel::BeginBackward(int64_t micro_batch, int64_t micro_batches,
                                 const LayerRange& layers) {
  communicating_ = micro_batch == micro_batches - 1 || zero_ >= 2;
  chunk_ = layers;
  std::fill(launched_.begin(), launched_.end(), false);
}

void DataParallel::Launch(size_t i) {
  const GradBucket& b = buckets_[i];
  launched_[i] = true;
  if (dp_ == 1) {
    // Nothing to reduce (tensor or pipeline parallelism alone); ZeRO-2 still
    // moves the bucket into its accumulator.
    if (zero_ >= 2) in_flight_.push_back({i, CommHandle()});
    return;
  }
  if (zero_ == 0 && host_ != nullptr) {
    in_flight_.push_back(
        {i, host_->IReduceScatterInPlace(grads_ + b.begin, b.size() / host_->size(), ReduceOp::kSum)});
  } else if (zero_ == 0) {
    in_flight_.push_back({i, compressor_.Start(comm_, grads_ + b.begin, b.size(), b.begin)});
  } else {
    in_flight_.push_back(
        {i, comm_->IReduceScatterInPlace(grads_ + b.begin, b.size() / dp_, ReduceOp::kSum)});
  }
}

void DataParallel::OnGradsReady(int64_t layer) {
  if (!communicating_) return;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const int64_t lowest = buckets_[i].min_layer;
    if (!launched_[i] && !WaitsForTiedSum(i) && chunk_.Contains(lowest) && layer <= lowest)
      Launch(i);
  }
}

Status DataParallel::EndBackward() {
  if (!communicating_) return Status::Ok();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!launched_[i] && !WaitsForTiedSum(i) && chunk_.Contains(buckets_[i].min_layer)) Launch(i);
  }
  communicating_ = false;
  // ZeRO-2's next backward writes into the same buckets: finish them now.
  // Otherwise a bucket's gradients are final and its reduction may run on
  // while later backwards (other chunks' layers) compute.
  return zero_ >= 2 ? Complete() : Status::Ok();
}

Status DataParallel::FinishGradReduction() {
  std::fill(launched_.begin(), launched_.end(), false);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (WaitsForTiedSum(i)) Launch(i);
  }
  return Complete();
}

Status DataParallel::FinishHierarchical() {
  const int64_t local = host_->size(), me = host_->rank();
  std::vector<CommHandle> across, gathers;
  for (const BucketCollective& c : in_flight_) {
    const GradBucket& b = buckets_[c.bucket];
    const int64_t blk = b.size() / local, at = b.begin + me * blk;
    across.push_back(compressor_.Start(cross_, grads_ + at, blk, at));
  }
  for (size_t k = 0; k < across.size(); ++k) {
    ST_RETURN_IF_ERROR(across[k].Wait());
    const GradBucket& b = buckets_[in_flight_[k].bucket];
    const int64_t blk = b.size() / local, at = b.begin + me * blk;
    ST_RETURN_IF_ERROR(compressor_.Finish(cross_, grads_ + at, blk, at));
  }
  for (const BucketCollective& c : in_flight_) {
    const GradBucket& b = buckets_[c.bucket];
    gathers.push_back(host_->IAllgatherInPlace(grads_ + b.begin, b.size() / local));
  }
  for (CommHandle& h : gathers) ST_RETURN_IF_ERROR(h.Wait());
  return Status::Ok();
}

Status DataParallel::Complete() {
  for (BucketCollective& c : in_flight_) ST_RETURN_IF_ERROR(c.handle.Wait());
  if (host_ != nullptr && zero_ == 0) {
    ST_RETURN_IF_ERROR(FinishHierarchical());
  } else if (zero_ == 0 && dp_ > 1) {
    for (const BucketCollective& c : in_flight_) {
      const GradBucket& b = buckets_[c.bucket];
      ST_RETURN_IF_ERROR(compressor_.Finish(comm_, grads_ + b.begin, b.size(), b.begin));
    }
  }
  if (zero_ >= 2) {
    // This rank's block of each bucket, into its place in the accumulator
    // (OwnedRanges order: the buckets in flat order).
    for (const BucketCollective& c : in_flight_) {
      const GradBucket& b = buckets_[c.bucket];
      const int64_t blk = b.size() / dp_;
      float* acc = shard_grads_.f32() + ShardOffset(c.bucket);
      const float* src = grads_ + b.begin + rank_ * blk;
      for (int64_t i = 0; i < blk; ++i) acc[i] += src[i];
      std::memset(grads_ + b.begin, 0, static_cast<size_t>(b.size()) * sizeof(float));
    }
  }
  if (dp_ > 1) step_.insert(step_.end(), in_flight_.begin(), in_flight_.end());
  in_flight_.clear();
  return Status::Ok();
}

const float* DataParallel::optimizer_grads(const float* flat_grads) const {
  return zero_ >= 2 ? shard_grads_.f32() : flat_grads;
}

Result<double> DataParallel::GradNorm(const float* flat_grads,
                                      const std::vector<Communicator*>& other_groups) {
  // Sum squares over this rank's owned ranges, entry by entry, skipping
  // entries that another rank also holds (counted there).
  const bool compact = zero_ >= 2;
  const float* base = compact ? shard_grads_.f32() : flat_grads;
  double sq = 0.0;
  int64_t k = 0;  // position of the range in the compact shard
  for (const FlatRange& r : OwnedRanges()) {
    for (const ParamEntry& e : layout_.entries) {
      if (!e.unique) continue;
      const int64_t lo = std::max(r.begin, e.offset), hi = std::min(r.end, e.offset + e.numel);
      if (lo < hi) sq += cpu::SumSquares(base + (compact ? k + (lo - r.begin) : lo), hi - lo);
    }
    k += r.size();
  }
  if (zero_ != 0) ST_RETURN_IF_ERROR(comm_->Allreduce(&sq, 1, ReduceOp::kSum));
  for (Communicator* g : other_groups) {
    if (g != nullptr && g->size() > 1) ST_RETURN_IF_ERROR(g->Allreduce(&sq, 1, ReduceOp::kSum));
  }
  return std::sqrt(sq);
}

Status DataParallel::GatherParams(float* params) {
  if (zero_ == 0 || zero_ >= 3) return Status::Ok();  // ZeRO-3 gathers layer by layer (zero3.h)
  std::vector<CommHandle> hs;
  for (const GradBucket& b : buckets_) hs.push_back(comm_->IAllgatherInPlace(params + b.begin, b.size() / dp_));
  for (CommHandle& h : hs) ST_RETURN_IF_ERROR(h.Wait());
  return Status::Ok();
}

Result<double> DataParallel::Average(double value) {
  ST_RETURN_IF_ERROR(comm_->Allreduce(&value, 1, ReduceOp::kAverage));
  return value;
}

Status DataParallel::GatherState(const float* compact, float* full) {
  int64_t k = 0;
  for (const FlatRange& r : OwnedRanges()) {
    std::memcpy(full + r.begin, compact + k, static_cast<size_t>(r.size()) * sizeof(float));
    k += r.size();
  }
  if (zero_ == 0) return Status::Ok();
  for (const GradBucket& b : buckets_) ST_RETURN_IF_ERROR(comm_->AllgatherInPlace(full + b.begin, b.size() / dp_));
  return Status::Ok();
}

void DataParallel::ScatterState(const float* full, float* compact) const {
  int64_t k = 0;
  for (const FlatRange& r : OwnedRanges()) {
    std::memcpy(compact + k, full + r.begin, static_cast<size_t>(r.size()) * sizeof(float));
    k += r.size();
  }
}

int64_t DataParallel::persistent_grad_bytes() const {
  return DpPersistentGradNumel(padded_, dp_, zero_) * static_cast<int64_t>(sizeof(float));
}

}  // namespace scaletrain
