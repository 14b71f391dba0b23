#include "plan/layout.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/strings.h"
#include "model/param_layout.h"

namespace scaletrain::plan {

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
    case Recompute::kOp:
      return "op";
  }
  return "?";
}

Result<Recompute> RecomputeFromName(const std::string& given) {
  const std::string name = NameKey(given);
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull, Recompute::kOp}) {
    if (name == RecomputeName(r)) return r;
  }
  if (name == "selective-op") return Recompute::kOp;
  // As runs write it: a yes/no column means whole layers (activation checkpointing).
  if (name == "block") return Recompute::kFull;
  if (const std::optional<bool> yes = YesNo(name)) return *yes ? Recompute::kFull : Recompute::kNone;
  // As descriptions write it ("full AC", "selective (op)", "full activation
  // checkpointing"): the policy its words name.
  const std::vector<std::string> words = LowerWords(given);
  auto has = [&](const char* word) {
    return std::find(words.begin(), words.end(), word) != words.end();
  };
  if (has("op")) return Recompute::kOp;
  if (has("selective")) return Recompute::kSelective;
  if (has("full") || has("block")) return Recompute::kFull;
  if (has("none") || has("no") || has("off")) return Recompute::kNone;
  return InvalidArgument("unknown recompute '" + given +
                         "'; use none, selective (Megatron's), full or op (PyTorch's op-level selective)");
}

const char* GradReduceName(GradReduce g) {
  switch (g) {
    case GradReduce::kAuto:
      return "auto";
    case GradReduce::kFp32:
      return "fp32";
    case GradReduce::kCompute:
      return "compute";
  }
  return "?";
}

Result<GradReduce> GradReduceFromName(const std::string& name) {
  for (GradReduce g : {GradReduce::kAuto, GradReduce::kFp32, GradReduce::kCompute}) {
    if (name == GradReduceName(g)) return g;
  }
  return InvalidArgument(
      "unknown gradient reduction dtype '" + name +
      "'; use fp32, compute (the 16-bit compute precision) or auto (the stack's default)");
}

const char* GradReduceDtypeName(const Layout& l) {
  if (l.grad_reduce == GradReduce::kAuto) return "auto";
  if (l.grad_reduce == GradReduce::kFp32 || l.precision == Precision::kFP32) return "fp32";
  return l.precision == Precision::kFP16 ? "fp16" : "bf16";
}

std::string LayoutToString(const Layout& l) {
  std::string s =
      "tp=" + std::to_string(l.tp) + " pp=" + std::to_string(l.pp) + " dp=" + std::to_string(l.dp);
  if (l.cp > 1) s += " cp=" + std::to_string(l.cp) + (l.cp_ulysses ? " (ulysses)" : "");
  if (l.vpp > 1) s += " vpp=" + std::to_string(l.vpp);
  s += " mb=" + std::to_string(l.micro_batch) + " gb=" + std::to_string(l.global_batch) +
       " zero=" + std::to_string(l.zero) + " rc=" + RecomputeName(l.recompute) +
       (l.sp ? " sp" : "");
  if (l.gpipe) s += " gpipe";
  if (l.zero_bubble) s += l.vpp == 2 ? " zb-v" : " zb-h1";
  if (l.dp_compress != DpCompression::kNone) s += std::string(" dp_compress=") + DpCompressionName(l.dp_compress);
  if (l.dp_hierarchical) s += " dp_reduce=hierarchical";
  if (l.shard_group > 0 && l.shard_group < l.dp * l.cp) {
    s += " shard=" + std::to_string(l.shard_group);
  }
  if (l.recompute == Recompute::kFull && l.recompute_layers > 0) {
    s += " rc_layers=" + std::to_string(l.recompute_layers);
  }
  if (l.grad_reduce == GradReduce::kCompute && l.precision != Precision::kFP32) {
    s += std::string(" grads=") + GradReduceDtypeName(l);
  }
  return s;
}

ModelSpec CpRankSpec(const ModelSpec& m, int64_t cp) {
  ModelSpec r = m;
  r.block_size = m.block_size / std::max<int64_t>(1, cp);
  return r;
}

Layout GradientGroupLayout(const Layout& l) {
  Layout g = l;
  g.dp = l.dp * l.cp;
  g.global_batch = l.global_batch * l.cp;  // micro_batches() unchanged
  g.cp = 1;
  return g;
}

Layout ShardGroupLayout(const Layout& l) {
  const Layout g = GradientGroupLayout(l);
  const int64_t r = ShardReplicas(g);
  if (r == 1) return g;
  Layout s = g;
  s.dp = g.dp / r;
  s.global_batch = g.global_batch / r;  // micro_batches() unchanged
  s.shard_group = 0;
  return s;
}

int64_t LargestChunkLayers(const ModelSpec& m, const Layout& l) {
  const int64_t chunks = l.pp * l.vpp;
  return (m.n_layer + chunks - 1) / chunks;
}

double RecomputedShare(const Layout& l, int64_t stage_layers) {
  if (l.recompute != Recompute::kFull || stage_layers <= 0) return 0.0;
  if (l.recompute_layers <= 0) return 1.0;
  const double chunk =
      static_cast<double>(stage_layers) / static_cast<double>(std::max<int64_t>(1, l.vpp));
  return std::min(1.0, static_cast<double>(l.recompute_layers) / chunk);
}

Layout AsRun(const Layout& l, const Software& sw) {
  Layout r = l;
  if (sw.fsdp_gathers_once_under_pp && l.pp > 1 && l.zero >= 3) r.zero = 1;
  return r;
}

int64_t ShardReplicas(const Layout& l) {
  const int64_t ranks = l.dp * l.cp;
  if (l.shard_group <= 0 || l.shard_group >= ranks || ranks % l.shard_group != 0) return 1;
  return ranks / l.shard_group;
}

int64_t BucketBytesFor(const Layout& l, const Software& sw, int64_t buffer_numel) {
  if (l.bucket_bytes > 0) return l.bucket_bytes;
  constexpr int64_t kElem = 4;  // CutGradBuckets's bytes per element
  switch (sw.buckets) {
    case Software::Buckets::kFixed25MiB:
      return int64_t{25} << 20;
    case Software::Buckets::kMegatronCore:
      // DistributedDataParallel's default bucket_size, in parameters.
      return std::max<int64_t>(40'000'000, 1'000'000 * l.dp) * kElem;
    case Software::Buckets::kWholeBuffer:
      return std::max<int64_t>(1, buffer_numel) * kElem;
    case Software::Buckets::kDeepSpeed:
      // DeepSpeed's zero_optimization.reduce_bucket_size default, elements.
      return int64_t{500'000'000} * kElem;
  }
  return int64_t{25} << 20;
}

Recompute RecomputeOn(const Software& sw, Recompute rc) {
  return rc == Recompute::kSelective && sw.selective_is_op ? Recompute::kOp : rc;
}

GradReduce GradReduceFor(const Layout& l, const Software& sw) {
  if (l.grad_reduce != GradReduce::kAuto) return l.grad_reduce;
  return l.precision == Precision::kFP16 && !sw.fused_grad_accumulation ? GradReduce::kCompute
                                                                        : GradReduce::kFp32;
}

std::vector<int64_t> EvenInterleavings(int64_t n_layer, int64_t pp) {
  std::vector<int64_t> ok;
  for (int64_t v = 2; pp * v <= n_layer; ++v) {
    if (n_layer % (pp * v) == 0) ok.push_back(v);
  }
  return ok;
}

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  }
  std::sort(d.begin(), d.end());
  return d;
}

namespace {

// The values of `candidates` nearest to `v` (one below, one above), as text.
std::string Nearest(int64_t v, const std::vector<int64_t>& candidates) {
  int64_t below = -1, above = -1;
  for (int64_t c : candidates) {
    if (c <= v) below = c;
    if (c >= v && above < 0) above = c;
  }
  std::string s;
  if (below > 0) s = std::to_string(below);
  if (above > 0 && above != below) s += (s.empty() ? "" : " or ") + std::to_string(above);
  return s.empty() ? "none" : s;
}

std::string Str(int64_t v) { return std::to_string(v); }

// Every size at least 1, ZeRO 0-3.
Status CheckRanges(const Layout& l) {
  for (auto [what, v] : {std::pair{"tp", l.tp},
                         {"pp", l.pp},
                         {"dp", l.dp},
                         {"cp", l.cp},
                         {"vpp", l.vpp},
                         {"micro-batch", l.micro_batch},
                         {"global-batch", l.global_batch}}) {
    if (v < 1) return InvalidArgument(std::string(what) + " must be >= 1, got " + Str(v));
  }
  if (l.zero < 0 || l.zero > 3) {
    return InvalidArgument("zero must be 0, 1, 2 or 3, got " + Str(l.zero));
  }
  if (l.dp_compress != DpCompression::kNone && l.zero != 0) {
    return InvalidArgument(std::string("--dp-compress ") + DpCompressionName(l.dp_compress) +
                           " compresses ZeRO-0's all-reduce; use --zero 0 or --dp-compress none");
  }
  return Status::Ok();
}

// tp x pp x dp (x cp) uses the n GPUs; the fix is the dp that does, or the
// tp x pp or GPU counts that divide.
Status CheckGpuCount(int64_t n, const Layout& l) {
  if (l.num_gpus() == n) return Status::Ok();
  const bool cp = l.cp > 1;
  const std::string model_axes = cp ? "tp x cp x pp" : "tp x pp";
  const int64_t tpp = l.tp * l.cp * l.pp;
  std::string fix;
  if (n % tpp == 0) {
    fix = "use dp=" + Str(n / tpp);
  } else {
    fix = model_axes + " must divide " + Str(n) + " (nearest valid " + model_axes + ": " +
          Nearest(tpp, Divisors(n)) + "), or use a GPU count that " + model_axes + " divides: " +
          Str(n / tpp * tpp > 0 ? n / tpp * tpp : tpp) + " or " + Str((n / tpp + 1) * tpp);
  }
  const std::string sizes = Str(l.tp) + (cp ? " x " + Str(l.cp) : "") + " x " + Str(l.pp) + " x " + Str(l.dp);
  return InvalidArgument(model_axes + " x dp = " + sizes + " = " + Str(l.num_gpus()) + " but there are " +
                         Str(n) + " GPUs; " + fix);
}

// Context parallelism cuts each sequence into 2 cp equal chunks, rank i
// taking chunks i and 2 cp - 1 - i, so that causal attention loads every
// rank alike (Megatron-Core's load balancing).
// Ulysses splits each GPU's query and key/value heads (after tp) over cp.
Status CheckUlyssesHeads(const ModelSpec& m, const Layout& l) {
  const int64_t q = m.n_head / l.tp, kv = LocalKvHeads(m, l.tp);
  if (q % l.cp == 0 && kv % l.cp == 0 && !KvHeadsReplicated(m, l.tp)) return Status::Ok();
  return InvalidArgument("cp=" + Str(l.cp) + " with --cp-impl ulysses splits each GPU's " + Str(q) +
                         " query heads and " + Str(kv) + " key/value heads (tp=" + Str(l.tp) +
                         ") over cp; use a cp dividing both, or --cp-impl ring");
}

Status CheckContextParallel(const ModelSpec& m, const Layout& l) {
  if (l.cp > 1 && l.cp_ulysses) ST_RETURN_IF_ERROR(CheckUlyssesHeads(m, l));
  if (l.cp == 1 || m.block_size % (2 * l.cp) == 0) return Status::Ok();
  std::vector<int64_t> ok;
  for (int64_t c : Divisors(m.block_size)) {
    if (m.block_size % (2 * c) == 0) ok.push_back(c);
  }
  return InvalidArgument("cp=" + Str(l.cp) + " cuts each sequence into 2 x cp = " + Str(2 * l.cp) +
                         " chunks, which do not divide the sequence length " + Str(m.block_size) +
                         "; nearest valid cp: " + Nearest(l.cp, ok));
}

// Tensor parallelism splits heads, KV heads, the MLP width and the
// vocabulary. The vocabulary is padded to a multiple of tp (as Megatron-LM
// does), so it never rules a tp out. KV heads fewer than tp are replicated
// on every TP rank when they divide tp (as the trainer does: KvHeadsReplicated).
Status CheckTpDividesModel(const ModelSpec& m, const Layout& l) {
  auto kv_ok = [&](int64_t t) { return m.n_kv_head % t == 0 || t % m.n_kv_head == 0; };
  if (m.n_head % l.tp == 0 && kv_ok(l.tp) && m.ffn_hidden % l.tp == 0) {
    return Status::Ok();
  }
  std::vector<int64_t> tp_ok;
  for (int64_t t : Divisors(m.n_head)) {
    if (kv_ok(t) && m.ffn_hidden % t == 0) tp_ok.push_back(t);
  }
  std::string why = m.n_head % l.tp      ? "heads (" + Str(m.n_head) + ")"
                    : !kv_ok(l.tp)       ? "KV heads (" + Str(m.n_kv_head) + ", nor do they divide it)"
                                         : "the MLP width (" + Str(m.ffn_hidden) + ")";
  return InvalidArgument("tp=" + Str(l.tp) + " does not divide " + why + " of " + m.name +
                         "; nearest valid tp: " + Nearest(l.tp, tp_ok));
}

// "; or at vpp=V: pp P" for the pp nearest l.pp that cuts the layers into
// pp x vpp equal chunks, where one does.
std::string EvenStagesAt(const ModelSpec& m, const Layout& l) {
  std::vector<int64_t> pps;
  for (int64_t p = 2; p * l.vpp <= m.n_layer; ++p) {
    if (m.n_layer % (p * l.vpp) == 0) pps.push_back(p);
  }
  if (pps.empty()) return "";
  return "; or at vpp=" + Str(l.vpp) + " a pp of " + Nearest(l.pp, pps);
}

// vpp > 1 needs pipeline stages, the interleaved schedule, and the layers cut
// into pp x vpp equal chunks, as the trainer (CheckModelShard) and Megatron
// without its uneven-pipeline options require: an uneven interleaving is a
// split neither runs, so it is an error naming the split, not a prediction.
// (pp alone may leave stages a layer apart: the trainer splits them by cost,
// PipelineStageStarts, and `plan` prints the split.)
Status CheckInterleaving(const ModelSpec& m, const Layout& l) {
  if (l.vpp == 1) return Status::Ok();
  if (l.pp == 1) return InvalidArgument("vpp=" + Str(l.vpp) + " needs pp > 1; use vpp=1");
  if (l.gpipe) return InvalidArgument("gpipe runs one chunk per stage; use vpp=1 or drop gpipe");
  if (l.zero_bubble && l.vpp != 2) {
    return InvalidArgument("the zero-bubble schedules run one chunk per stage (zb-h1) or two in a V "
                           "(zb-v, vpp=2); got vpp=" + Str(l.vpp));
  }
  const int64_t chunks = l.pp * l.vpp;
  if (m.n_layer % chunks == 0) return Status::Ok();
  const std::vector<int64_t> ok = EvenInterleavings(m.n_layer, l.pp);
  return InvalidArgument(Fmt("interleaving cuts the %lld layers of %s into pp x vpp = %lld x %lld = %lld equal "
                             "chunks, and %lld layers do not split so (%.2f a chunk); ",
                             static_cast<long long>(m.n_layer), m.name.c_str(), static_cast<long long>(l.pp),
                             static_cast<long long>(l.vpp), static_cast<long long>(chunks),
                             static_cast<long long>(m.n_layer), static_cast<double>(m.n_layer) / chunks) +
                         (ok.empty() ? "no vpp above 1 does at pp=" + Str(l.pp) + ": use vpp=1"
                                     : "nearest valid vpp at pp=" + Str(l.pp) + ": " + Nearest(l.vpp, ok) +
                                           ", or vpp=1") +
                         " (stages then split by cost, as the trainer splits them)" + EvenStagesAt(m, l));
}

// The global batch splits into dp x micro-batch; the fix names the nearest
// global batches, and the micro-batches that keep this one.
Status CheckBatchDivides(const Layout& l) {
  const int64_t per_dp = l.dp * l.micro_batch;
  if (l.global_batch % per_dp == 0) return Status::Ok();
  const int64_t lo = l.global_batch / per_dp * per_dp, hi = lo + per_dp;
  std::vector<int64_t> mb_ok;
  if (l.global_batch % l.dp == 0) mb_ok = Divisors(l.global_batch / l.dp);
  return InvalidArgument(
      "global batch " + Str(l.global_batch) +
      " is not divisible by dp x micro-batch = " + Str(l.dp) + " x " + Str(l.micro_batch) + " = " +
      Str(per_dp) + "; nearest valid global batch: " + (lo > 0 ? Str(lo) + " or " : "") + Str(hi) +
      (mb_ok.empty() ? "" : "; or keep it and use micro-batch " + Nearest(l.micro_batch, mb_ok)));
}

// A sharding group shards something (ZeRO >= 1) and cuts the dp x cp ranks
// into equal groups.
Status CheckShardGroup(const Layout& l) {
  const int64_t ranks = l.dp * l.cp;
  if (l.shard_group == 0 || l.shard_group == ranks) return Status::Ok();
  const std::string what = "--shard-group " + Str(l.shard_group);
  if (l.shard_group < 0) return InvalidArgument(what + ": a sharding group must be >= 2 ranks");
  if (l.shard_group == 1) {
    return InvalidArgument(what +
                           ": a group of one rank shards nothing (every rank holds everything); "
                           "use --zero 0, or a group of >= 2 ranks");
  }
  if (l.zero == 0) {
    return InvalidArgument(
        what + ": ZeRO-0 shards nothing; use --zero 1, 2 or 3 (3: FSDP's HYBRID_SHARD)");
  }
  if (l.shard_group > ranks || ranks % l.shard_group != 0) {
    return InvalidArgument(what + " must divide the " + Str(ranks) + " data-parallel ranks" +
                           (l.cp > 1 ? " (dp x cp)" : "") +
                           "; nearest: " + Nearest(l.shard_group, Divisors(ranks)));
  }
  return Status::Ok();
}

// Recomputing K layers of each chunk: full recomputation, K within a chunk.
Status CheckRecomputeLayers(const ModelSpec& m, const Layout& l) {
  if (l.recompute_layers == 0) return Status::Ok();
  const std::string what = "--recompute-layers " + Str(l.recompute_layers);
  if (l.recompute_layers < 0) {
    return InvalidArgument(what + ": give the layers of each chunk to recompute, >= 1");
  }
  if (l.recompute != Recompute::kFull) {
    return InvalidArgument(what +
                           " picks the layers full recomputation reruns; use --recompute full");
  }
  const int64_t chunk = LargestChunkLayers(m, l);
  if (l.recompute_layers > chunk) {
    return InvalidArgument(what + " exceeds the " + Str(chunk) + " layers of a model chunk (" +
                           Str(m.n_layer) + " layers over pp x vpp = " + Str(l.pp * l.vpp) +
                           "); use 1 to " + Str(chunk));
  }
  return Status::Ok();
}

}  // namespace

// The checks run in this order, so that a layout with several faults is
// told about the same one first.
Status ValidateLayout(const ModelSpec& m, int64_t n, const Layout& l) {
  ST_RETURN_IF_ERROR(CheckRanges(l));
  ST_RETURN_IF_ERROR(CheckGpuCount(n, l));
  ST_RETURN_IF_ERROR(CheckTpDividesModel(m, l));
  ST_RETURN_IF_ERROR(CheckContextParallel(m, l));
  if (l.pp > m.n_layer) {
    return InvalidArgument("pp=" + Str(l.pp) + " exceeds the " + Str(m.n_layer) + " layers of " +
                           m.name + "; use pp <= " + Str(m.n_layer));
  }
  if (l.sp && l.tp == 1) {
    return InvalidArgument("sequence parallelism needs tp > 1; drop --sp or raise tp");
  }
  ST_RETURN_IF_ERROR(CheckInterleaving(m, l));
  ST_RETURN_IF_ERROR(CheckShardGroup(l));
  ST_RETURN_IF_ERROR(CheckRecomputeLayers(m, l));
  ST_RETURN_IF_ERROR(CheckBatchDivides(l));
  if (l.vpp > 1 && !l.zero_bubble && l.micro_batches() % l.pp != 0) {
    return InvalidArgument(
        "the interleaved schedule needs micro-batches per step (" + Str(l.micro_batches()) +
        " = global batch / (dp x micro-batch)) to be a multiple of pp=" + Str(l.pp) +
        "; change the micro-batch or global batch, or use vpp=1");
  }
  return Status::Ok();
}

}  // namespace scaletrain::plan
