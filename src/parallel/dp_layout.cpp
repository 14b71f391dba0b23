#include "parallel/dp_layout.h"

#include <algorithm>
#include <climits>

namespace scaletrain {

std::vector<GradBucket> CutGradBuckets(int64_t padded_numel, int64_t dp, int64_t bucket_bytes) {
  const int64_t per_bucket =
      std::max<int64_t>(dp, bucket_bytes / static_cast<int64_t>(sizeof(float)) / dp * dp);
  std::vector<GradBucket> buckets;
  for (int64_t end = padded_numel; end > 0;) {
    GradBucket b;
    b.end = end;
    b.begin = std::max<int64_t>(0, end - per_bucket);
    buckets.push_back(b);
    end = b.begin;
  }
  return buckets;
}

std::vector<GradBucket> BuildGradBuckets(const ParamLayout& layout, int64_t dp, int64_t bucket_bytes) {
  std::vector<GradBucket> buckets = CutGradBuckets(DpPaddedNumel(layout.total_numel, dp), dp, bucket_bytes);
  SetBucketMinLayers(layout, buckets);
  return buckets;
}

void SetBucketMinLayers(const ParamLayout& layout, std::vector<GradBucket>& buckets) {
  int64_t top = kEmbeddingLayer;
  for (const auto& e : layout.entries) top = std::max(top, e.layer);
  for (GradBucket& b : buckets) {
    b.min_layer = INT64_MAX;
    for (const auto& e : layout.entries) {
      if (e.offset < b.end && e.offset + e.numel > b.begin) b.min_layer = std::min(b.min_layer, e.layer);
    }
    // Padding only (cannot happen while buckets hold at least dp elements,
    // more than the padding): it goes with the first layers backward reports.
    if (b.min_layer == INT64_MAX) b.min_layer = top;
  }
}

std::vector<FlatRange> DpBlockRanges(const std::vector<GradBucket>& buckets, int64_t dp,
                                     int64_t rank) {
  std::vector<FlatRange> out;
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {  // buckets are in launch order
    const int64_t blk = it->size() / dp;
    out.push_back({it->begin + rank * blk, it->begin + (rank + 1) * blk});
  }
  return out;
}

const char* CollectiveKindName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllreduce:
      return "allreduce";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllgather:
      return "allgather";
    case CollectiveKind::kSend:
      return "send";
    case CollectiveKind::kRecv:
      return "recv";
  }
  return "?";
}

double StepCollective::RingBytes(int64_t n) const {
  if (n <= 1) return 0.0;
  const double bytes = static_cast<double>(payload_bytes);
  const double share = static_cast<double>(n - 1) / static_cast<double>(n);
  switch (kind) {
    case CollectiveKind::kAllreduce:
      return 2.0 * share * bytes;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllgather:
      return share * bytes;
    case CollectiveKind::kSend:
      return bytes;
    case CollectiveKind::kRecv:
      return 0.0;  // the sender's bytes
  }
  return 0.0;
}

int64_t PayloadBytes(const std::vector<StepCollective>& cs) {
  int64_t n = 0;
  for (const StepCollective& c : cs) n += c.payload_bytes;
  return n;
}

int64_t Calls(const std::vector<StepCollective>& cs) {
  int64_t n = 0;
  for (const StepCollective& c : cs) n += c.calls;
  return n;
}

int64_t DpTiedFrontNumel(const ParamLayout& rank_layout) {
  int64_t n = 0;
  for (const ParamEntry& e : rank_layout.entries) {
    if (e.layer != kEmbeddingLayer) break;
    n += e.numel;
  }
  return n;
}

const char* DpCompressionName(DpCompression c) {
  switch (c) {
    case DpCompression::kNone:
      return "none";
    case DpCompression::kBf16:
      return "bf16";
    case DpCompression::kFp16:
      return "fp16";
    case DpCompression::kSign:
      return "sign";
  }
  return "?";
}

bool DpCompressionFromName(const std::string& name, DpCompression* out) {
  for (DpCompression c : {DpCompression::kNone, DpCompression::kBf16, DpCompression::kFp16,
                          DpCompression::kSign}) {
    if (name == DpCompressionName(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

std::vector<StepCollective> DataParallelStepCollectives(
    const std::vector<GradBucket>& buckets, int64_t dp, int64_t zero, int64_t micro_batches,
    int64_t tied_front_numel, int64_t grad_elem_bytes, int64_t param_elem_bytes,
    DpCompression compression, Zero3PassGathers forward, Zero3PassGathers backward) {
  if (dp <= 1) return {};
  int64_t padded = 0, reductions = 0, reduced = 0, sign_bytes = 0;
  for (const GradBucket& b : buckets) {
    const int64_t times = DpBucketReductionsPerStep(b, zero, micro_batches, tied_front_numel);
    padded += b.size();
    reductions += times;
    reduced += times * b.size();
    sign_bytes += SignMessageBytes(b.size());
  }
  const int64_t nb = static_cast<int64_t>(buckets.size());
  constexpr int64_t kScalar = static_cast<int64_t>(sizeof(double));
  std::vector<StepCollective> out;
  if (zero == 0 && compression == DpCompression::kSign) {
    out.push_back({"gradient sign all-gather", CollectiveKind::kAllgather, nb, dp * sign_bytes,
                   StepPhase::kBackward});
  } else if (zero == 0) {
    const int64_t elem = compression == DpCompression::kNone ? grad_elem_bytes : 2;
    out.push_back({"gradient all-reduce", CollectiveKind::kAllreduce, nb, padded * elem,
                   StepPhase::kBackward});
  } else {
    out.push_back({"gradient reduce-scatter", CollectiveKind::kReduceScatter, reductions,
                   reduced * grad_elem_bytes, StepPhase::kBackward});
    out.push_back({"gradient-norm sum", CollectiveKind::kAllreduce, 1, kScalar});
  }
  if (zero == 1 || zero == 2) {
    out.push_back(
        {"parameter all-gather", CollectiveKind::kAllgather, nb, padded * param_elem_bytes});
  } else if (zero >= 3) {
    const int64_t m = micro_batches, e = param_elem_bytes;
    out.push_back({"parameter all-gather (forward)", CollectiveKind::kAllgather, forward.calls * m,
                   forward.numel * e * m, StepPhase::kForward});
    out.push_back({"parameter all-gather (backward)", CollectiveKind::kAllgather,
                   backward.calls * m, backward.numel * e * m, StepPhase::kBackward});
  }
  out.push_back({"loss average", CollectiveKind::kAllreduce, 1, kScalar});
  return out;
}

LayerRuns DpLayerRuns(const ParamLayout& layout, int64_t n_layer) {
  LayerRuns r;
  for (size_t i = 0; i < layout.entries.size(); ++i) {
    const ParamEntry& e = layout.entries[i];
    if (i == 0 || e.layer != layout.entries[i - 1].layer) {
      r.numels.push_back(0);
      r.layers.push_back(e.layer);
      r.outer.push_back(e.layer == kEmbeddingLayer || e.layer == HeadLayer(n_layer));
      r.acquired.push_back(!e.tied_copy);
    }
    r.numels.back() += e.numel;
  }
  return r;
}

namespace {

int64_t RoundDown(int64_t x, int64_t dp) { return x / dp * dp; }

// The runs' begin offsets, and the end of the padded buffer last.
std::vector<int64_t> RunBegins(const std::vector<int64_t>& run_numels, int64_t dp) {
  std::vector<int64_t> at{0};
  for (int64_t n : run_numels) at.push_back(at.back() + n);
  at.back() = RoundUp(at.back(), dp);
  return at;
}

}  // namespace

Zero3Layout PlanZero3(const std::vector<int64_t>& run_numels, const std::vector<bool>& run_outer,
                      int64_t dp, const std::vector<bool>& run_acquired) {
  Zero3Layout z;
  z.run_outer = run_outer;
  z.run_acquired = run_acquired;
  z.run_acquired.resize(run_numels.size(), true);
  const std::vector<int64_t> at = RunBegins(run_numels, dp);
  std::vector<int64_t> cuts;
  for (int64_t a : at) {
    cuts.push_back(RoundDown(a, dp));
    cuts.push_back(RoundUp(a, dp));
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (size_t i = cuts.size() - 1; i > 0; --i) z.buckets.push_back({cuts[i - 1], cuts[i], 0});
  const size_t runs = run_numels.size();
  z.unit_of_run.assign(runs, -1);
  for (size_t r = 0; r < runs; ++r) {
    const FlatRange w{RoundDown(at[r], dp), RoundUp(at[r + 1], dp)};
    z.windows.push_back(w);
    z.window_buckets.emplace_back();
    for (size_t b = z.buckets.size(); b-- > 0;) {  // flat order
      if (z.buckets[b].begin >= w.begin && z.buckets[b].end <= w.end)
        z.window_buckets.back().push_back(b);
    }
    if (run_outer[r]) {
      if (z.units.empty() || !run_outer[z.units[0][0]])
        z.units.insert(z.units.begin(), std::vector<size_t>{});
      z.units[0].push_back(r);
    } else {
      z.units.push_back({r});
    }
  }
  for (size_t u = 0; u < z.units.size(); ++u) {
    for (size_t r : z.units[u]) z.unit_of_run[r] = static_cast<int64_t>(u);
  }
  return z;
}

std::vector<int64_t> Zero3PassUnits(const Zero3Layout& z, bool backward,
                                    const std::vector<int64_t>& run_chunk, int64_t chunk) {
  std::vector<int64_t> seq;
  for (size_t r = 0; r < z.unit_of_run.size(); ++r) {
    if (!run_chunk.empty() && run_chunk[r] != chunk) continue;
    // The embedding's backward reads no parameters (only its gradients):
    // the first run, outer and acquired, is it.
    const bool embedding = r == 0 && z.run_outer[0] && z.run_acquired[0];
    if (z.run_acquired[r] && !(backward && embedding)) seq.push_back(z.unit_of_run[r]);
  }
  if (backward) std::reverse(seq.begin(), seq.end());
  return seq;
}

std::vector<int64_t> Zero3GatheredUnits(const std::vector<int64_t>& sequence) {
  int64_t slots[2] = {-1, -1};
  int cur = 1;
  std::vector<int64_t> gathered;
  for (size_t i = 0; i < sequence.size(); ++i) {
    const int64_t u = sequence[i];
    if (slots[0] == u || slots[1] == u) {
      cur = slots[0] == u ? 0 : 1;
    } else {
      cur = 1 - cur;
      slots[cur] = u;
      gathered.push_back(u);
    }
    if (i + 1 < sequence.size()) {
      const int64_t next = sequence[i + 1];
      if (slots[0] != next && slots[1] != next) {
        slots[1 - cur] = next;
        gathered.push_back(next);
      }
    }
  }
  return gathered;
}

Zero3PassGathers Zero3GathersPerPass(const Zero3Layout& z, bool backward,
                                     const std::vector<int64_t>& run_chunk) {
  Zero3PassGathers g;
  const int64_t chunks =
      run_chunk.empty() ? 1 : *std::max_element(run_chunk.begin(), run_chunk.end()) + 1;
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t u : Zero3GatheredUnits(Zero3PassUnits(z, backward, run_chunk, c))) {
      for (size_t r : z.units[static_cast<size_t>(u)]) {
        for (size_t b : z.window_buckets[r]) {
          g.calls += 1;
          g.numel += z.buckets[b].size();
        }
      }
    }
  }
  return g;
}

std::vector<int64_t> Zero3RunChunks(const std::vector<int64_t>& run_layers,
                                    const std::vector<LayerRange>& chunks) {
  std::vector<int64_t> out(run_layers.size(), 0);
  for (size_t r = 0; r < run_layers.size(); ++r) {
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (chunks[c].Contains(run_layers[r])) out[r] = static_cast<int64_t>(c);
    }
  }
  return out;
}

}  // namespace scaletrain
