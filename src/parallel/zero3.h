// ZeRO-3's parameters (Rajbhandari et al. 2020, stage 3; PyTorch's FSDP):
// each DP rank keeps only its block of every bucket of the flat parameters
// (the buckets of PlanZero3, cut at the layer boundaries: 1/dp of the padded
// buffer, in OwnedRanges order, which AdamW updates in place) and gathers a
// unit (a block, or the embedding with the head) into one of two gather
// buffers just before the model uses it, forward and again backward (the
// embedding's backward reads only gradients and acquires nothing). When
// the model acquires a unit it also issues the all-gather of the next unit
// of the pass into the other buffer (the prefetch), so that one runs on the
// communicator's thread while this one computes. Both buffers are dropped
// after each chunk's forward and backward (Release), so every micro-batch
// gathers alike; Zero3GatheredUnits (dp_layout.h) is this policy for the
// planner. The gradients take ZeRO-2's path in DataParallel. With tensor
// parallelism the flat buffer is the rank's TP shard; with pipeline
// parallelism the stage's (one chunk: the interleaved schedule is refused by
// the config check, its chunks would each need their own pass order).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/status.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "parallel/dp_layout.h"

namespace scaletrain {

class Zero3Params : public ParamSource {
 public:
  // `comm` is the DP group; `n_layer` names the head layer. `chunks`: the
  // layers of each of the rank's model chunks (GPT::ChunkLayers; empty: one
  // chunk), each chunk's forward and backward a pass of its own.
  Zero3Params(const ParamLayout& layout, int64_t n_layer, Communicator* comm,
              const std::vector<LayerRange>& chunks = {});

  // Copies this rank's blocks out of a whole flat buffer (after
  // initialisation or a checkpoint's restore).
  void LoadShard(const float* full);
  // This rank's blocks, OwnedRanges order: the optimizer's `params` with
  // params_compact, and what a checkpoint writes.
  float* shard() { return shard_.f32(); }
  const float* shard() const { return shard_.f32(); }
  int64_t shard_bytes() const { return static_cast<int64_t>(shard_.size_bytes()); }
  // The two gather buffers.
  int64_t gather_bytes() const { return 2 * static_cast<int64_t>(slots_[0].buf.size_bytes()); }
  const Zero3Layout& plan() const { return plan_; }

  Status Acquire(int64_t layer, bool backward) override;
  Status Release() override;
  const float* At(int64_t offset) const override;

 private:
  struct Slot {
    int64_t unit = -1;
    Buffer buf;
    std::vector<std::pair<FlatRange, int64_t>> windows;  // flat range, its place in buf
    std::vector<CommHandle> pending;
  };
  // Issues the all-gathers of `unit` into slot s.
  void Gather(int64_t unit, int s);
  Status Wait(Slot& s);
  int64_t UnitOfLayer(int64_t layer) const;
  // The unit the pass (of `layer`'s chunk) acquires after `unit` (-1:
  // none); moves the pass on.
  int64_t NextUnit(int64_t unit, int64_t layer, bool backward);

  Communicator* comm_;
  int64_t dp_, rank_;
  Zero3Layout plan_;
  std::vector<int64_t> run_layers_;  // layer id of each run
  std::vector<int64_t> run_chunk_;   // model chunk of each run (Zero3RunChunks)
  Buffer shard_;
  Slot slots_[2];
  std::vector<std::vector<int64_t>> forward_, backward_;  // per chunk: Zero3PassUnits
  size_t pos_ = 0;                           // in the pass's order
  int cur_ = 1;
};

}  // namespace scaletrain
