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
  return buckets;
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
    DpCompression compression) {
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
    out.push_back(
        {"parameter all-gather", CollectiveKind::kAllgather, nb, padded * param_elem_bytes});
  }
  out.push_back({"loss average", CollectiveKind::kAllreduce, 1, kScalar});
  return out;
}

}  // namespace scaletrain
