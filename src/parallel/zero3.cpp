#include "parallel/zero3.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace scaletrain {

Zero3Params::Zero3Params(const ParamLayout& layout, int64_t n_layer, Communicator* comm,
                         const std::vector<LayerRange>& chunks)
    : comm_(comm), dp_(comm->size()), rank_(comm->rank()) {
  const LayerRuns runs = DpLayerRuns(layout, n_layer);
  plan_ = PlanZero3(runs.numels, runs.outer, dp_, runs.acquired);
  run_layers_ = runs.layers;
  run_chunk_ = Zero3RunChunks(run_layers_, chunks);
  for (size_t c = 0; c < std::max<size_t>(1, chunks.size()); ++c) {
    forward_.push_back(Zero3PassUnits(plan_, false, run_chunk_, static_cast<int64_t>(c)));
    backward_.push_back(Zero3PassUnits(plan_, true, run_chunk_, static_cast<int64_t>(c)));
  }
  shard_ =
      Buffer(static_cast<size_t>(DpPaddedNumel(layout.total_numel, dp_) / dp_) * sizeof(float));
  int64_t most = 0;
  for (const std::vector<size_t>& unit : plan_.units) {
    int64_t n = 0;
    for (size_t r : unit) n += plan_.windows[r].size();
    most = std::max(most, n);
  }
  for (Slot& s : slots_) s.buf = Buffer(static_cast<size_t>(most) * sizeof(float));
}

void Zero3Params::LoadShard(const float* full) {
  for (const GradBucket& b : plan_.buckets) {
    const int64_t blk = b.size() / dp_;
    std::memcpy(shard_.f32() + b.begin / dp_, full + b.begin + rank_ * blk,
                static_cast<size_t>(blk) * sizeof(float));
  }
}

int64_t Zero3Params::UnitOfLayer(int64_t layer) const {
  for (size_t r = 0; r < run_layers_.size(); ++r) {
    if (run_layers_[r] == layer) return plan_.unit_of_run[r];
  }
  return -1;
}

int64_t Zero3Params::NextUnit(int64_t unit, int64_t layer, bool backward) {
  size_t chunk = 0;
  for (size_t r = 0; r < run_layers_.size(); ++r) {
    if (run_layers_[r] == layer) chunk = static_cast<size_t>(run_chunk_[r]);
  }
  const std::vector<int64_t>& seq = (backward ? backward_ : forward_)[chunk];
  size_t i = pos_;
  while (i < seq.size() && seq[i] != unit) ++i;
  if (i == seq.size()) return -1;  // not in this pass's order (cannot happen)
  pos_ = i + 1;
  return pos_ < seq.size() ? seq[pos_] : -1;
}

void Zero3Params::Gather(int64_t unit, int s) {
  Slot& slot = slots_[s];
  slot.unit = unit;
  slot.windows.clear();
  int64_t at = 0;
  for (size_t r : plan_.units[static_cast<size_t>(unit)]) {
    const FlatRange w = plan_.windows[r];
    slot.windows.push_back({w, at});
    for (size_t bi : plan_.window_buckets[r]) {
      const GradBucket& b = plan_.buckets[bi];
      const int64_t blk = b.size() / dp_;
      float* dst = slot.buf.f32() + at + (b.begin - w.begin);
      std::memcpy(dst + rank_ * blk, shard_.f32() + b.begin / dp_,
                  static_cast<size_t>(blk) * sizeof(float));
      if (dp_ > 1) slot.pending.push_back(comm_->IAllgatherInPlace(dst, blk));
    }
    at += w.size();
  }
}

Status Zero3Params::Wait(Slot& s) {
  Status st;
  for (CommHandle& h : s.pending) {
    const Status one = h.Wait();
    if (st.ok() && !one.ok()) st = one;
  }
  s.pending.clear();
  return st;
}

Status Zero3Params::Acquire(int64_t layer, bool backward) {
  const int64_t unit = UnitOfLayer(layer);
  if (slots_[0].unit == unit || slots_[1].unit == unit) {
    cur_ = slots_[0].unit == unit ? 0 : 1;
  } else {
    cur_ = 1 - cur_;
    ST_RETURN_IF_ERROR(Wait(slots_[cur_]));
    Gather(unit, cur_);
  }
  const int64_t next = NextUnit(unit, layer, backward);
  if (next >= 0 && slots_[0].unit != next && slots_[1].unit != next) {
    ST_RETURN_IF_ERROR(Wait(slots_[1 - cur_]));
    Gather(next, 1 - cur_);  // the prefetch: runs while this unit computes
  }
  return Wait(slots_[cur_]);
}

Status Zero3Params::Release() {
  Status st;
  for (Slot& s : slots_) {
    const Status one = Wait(s);
    if (st.ok() && !one.ok()) st = one;
    s.unit = -1;
  }
  cur_ = 1;
  pos_ = 0;
  return st;
}

const float* Zero3Params::At(int64_t offset) const {
  for (int s : {cur_, 1 - cur_}) {
    for (const auto& [w, at] : slots_[s].windows) {
      if (slots_[s].unit >= 0 && w.begin <= offset && offset < w.end)
        return slots_[s].buf.f32() + at + (offset - w.begin);
    }
  }
  std::fprintf(stderr, "internal error: ZeRO-3 parameter at flat offset %lld is not gathered\n",
               static_cast<long long>(offset));
  std::abort();
}

}  // namespace scaletrain
