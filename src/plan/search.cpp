#include "plan/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "core/strings.h"

namespace scaletrain::plan {

namespace {

std::string Pct(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * part / whole);
  return buf;
}

// The biggest non-compute share of a prediction's step, in words.
std::string LimiterText(const Prediction& p) {
  const auto& t = p.time_s;
  if (p.limiter == "bubble") {
    return "pipeline bubble " + Pct(t.bubble, p.step_time_s) + " of the step";
  }
  if (p.limiter == "tp_comm") {
    return "exposed TP communication " + Pct(t.tp_comm, p.step_time_s) + " of the step";
  }
  if (p.limiter == "cp_comm") {
    return "exposed context-parallel transfers " + Pct(t.cp_comm, p.step_time_s) + " of the step";
  }
  if (p.limiter == "dp_comm") {
    return "exposed DP communication " + Pct(t.dp_comm, p.step_time_s) + " of the step";
  }
  if (p.limiter == "pp_comm") {
    return "pipeline transfers " + Pct(t.pp_comm, p.step_time_s) + " of the step";
  }
  if (p.limiter == "recompute") {
    return "recomputation " + Pct(t.recompute, p.step_time_s) + " of the step";
  }
  if (p.limiter == "optimizer") {
    return "optimizer step " + Pct(t.optimizer, p.step_time_s) + " of the step";
  }
  return "compute-bound (MFU " + Pct(p.mfu, 1.0) + ")";
}

// The tensor-parallel sizes searched: divisors of the GPU count that split
// the heads, KV heads and MLP width.
std::vector<int64_t> TpSizes(const CostModel& model, const SearchOptions& opt) {
  const ModelSpec& M = model.spec();
  std::vector<int64_t> sizes;
  if (opt.num_gpus % opt.cp != 0) return sizes;
  for (int64_t tp : Divisors(opt.num_gpus / opt.cp)) {
    if (opt.tp && tp != *opt.tp) continue;
    // Fewer KV heads than tp are replicated when they divide it (the trainer's KvHeadsReplicated).
    if (M.n_head % tp || (M.n_kv_head % tp && tp % M.n_kv_head) || M.ffn_hidden % tp) continue;
    // Beyond one NVLink domain TP traffic would cross the NICs on every
    // layer; no published training run does that, so it is not searched.
    if (!opt.tp && tp > model.cluster().node.gpus_per_node) continue;
    sizes.push_back(tp);
  }
  return sizes;
}

// The model chunks per stage searched for pp stages and m micro-batches:
// 1, and with the interleaved schedule (m a multiple of pp, a stack that has
// it) every v up to max_vpp that cuts the layers into pp x v equal chunks
// (ValidateLayout's rule). A stated v beyond max_vpp is searched too (NeMo
// runs Llama 2 70B with 20 one-layer chunks per stage).
std::vector<int64_t> VppSizes(const ModelSpec& M, const SearchOptions& opt, const Software& sw, int64_t pp,
                              int64_t m) {
  std::vector<int64_t> vpps{1};
  if (pp > 1 && m % pp == 0 && sw.interleaved_schedule) {
    const int64_t max_vpp = std::max(opt.max_vpp, opt.vpp.value_or(1));
    for (int64_t v : EvenInterleavings(M.n_layer, pp)) {
      if (v <= max_vpp) vpps.push_back(v);
    }
  }
  std::vector<int64_t> sizes;
  for (int64_t vpp : vpps) {
    if (!opt.vpp || vpp == *opt.vpp) sizes.push_back(vpp);
  }
  return sizes;
}

// The sharding group of a layout of `dp` ranks (Layout::shard_group): 0 for
// one group of all the dp x cp ranks; -1 where the held size does not divide them.
int64_t ShardGroupFor(const SearchOptions& opt, int64_t dp) {
  const int64_t ranks = dp * opt.cp;
  const int64_t s = opt.shard_group.value_or(0);
  if (s <= 0 || s >= ranks) return 0;
  return ranks % s == 0 ? s : -1;
}

// The ZeRO stages searched for `base`: the stated one, else those that shard
// something (a sharding group needs one) up to what the stack has; FSDP
// stacks shard whatever the DP group holds.
std::vector<int> ZeroStages(const Layout& base, const SearchOptions& opt, const Software& sw) {
  // A stated stage is held even where there is nothing to shard over (dp 1):
  // Megatron's distributed optimizer on one data-parallel rank runs as
  // ZeRO-0, and `plan` accepts it (issue 20 (g): a pp 8 row with dp 1 and
  // ~1,000 micro-batches that stated ZeRO-1 found no layout).
  if (opt.zero) return {*opt.zero};
  if (base.dp == 1) return {0};  // nothing to shard over
  if (sw.fully_sharded) return {3};
  std::vector<int> stages;
  for (int zero = base.shard_group > 0 ? 1 : 0; zero <= sw.max_searched_zero; ++zero)
    stages.push_back(zero);
  return stages;
}

// The recomputations searched: the stated one (as the stack names it);
// else none, Megatron's selective where there are scores to drop (no
// FlashAttention: with it selective keeps what "none" keeps and runs the
// attention forward again, never the better one) and full. PyTorch's
// op-level policy only where asked for.
std::vector<Recompute> RecomputeChoices(const SearchOptions& opt, const Software& sw) {
  if (opt.recompute) return {RecomputeOn(sw, *opt.recompute)};
  if (sw.flash_attention) return {Recompute::kNone, Recompute::kFull};
  return {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
}

// Sequence parallelism searched: the stated setting (none where it is on
// and tp = 1: SP needs TP), else both where tp > 1.
std::vector<bool> SpChoices(const Layout& base, const SearchOptions& opt) {
  if (opt.sp && *opt.sp && base.tp == 1) return {};
  if (opt.sp) return {*opt.sp};
  if (base.tp == 1) return {false};
  return {false, true};
}

// Every ZeRO stage, recomputation and SP setting searched for `base`.
void AddKnobVariants(const Layout& base, const SearchOptions& opt, const Software& sw,
                     std::vector<Layout>* out) {
  for (int zero : ZeroStages(base, opt, sw)) {
    if (base.shard_group > 0 && zero == 0) continue;  // a sharding group shards
    for (Recompute rc : RecomputeChoices(opt, sw)) {
      for (bool sp : SpChoices(base, opt)) {
        Layout l = base;
        l.zero = zero, l.recompute = rc, l.sp = sp;
        if (rc == Recompute::kFull && opt.recompute_layers) l.recompute_layers = *opt.recompute_layers;
        out->push_back(l);
      }
    }
  }
}

// The zero-bubble schedules beside each 1F1B layout out[first..] where the
// stack has them: zb-h1, and zb-v where 2 pp chunks divide the layers. The
// trainer's keep block inputs that full recomputation drops.
void AddZeroBubbleVariants(const ModelSpec& m, const Software& sw, size_t first,
                           std::vector<Layout>* out) {
  if (!sw.zero_bubble_schedule) return;
  const size_t end = out->size();
  for (size_t i = first; i < end; ++i) {
    Layout z = (*out)[i];
    if (z.pp == 1 || z.vpp != 1 || z.gpipe) continue;
    if (sw.trainer_activation_buffer && z.recompute == Recompute::kFull) continue;
    z.zero_bubble = true;
    out->push_back(z);
    if (m.n_layer % (2 * z.pp) != 0) continue;
    z.vpp = 2;
    out->push_back(z);
  }
}

// The layouts of the (tp, pp) family: dp = N / (tp cp pp) if it divides the
// global batch, with every micro-batch size and interleaving searched.
void AddFamilyLayouts(const CostModel& model, const SearchOptions& opt, int64_t tp, int64_t pp,
                      std::vector<Layout>* out) {
  const int64_t B = opt.global_batch, dp = opt.num_gpus / (tp * opt.cp * pp);
  if (opt.dp && dp != *opt.dp) return;
  if (B % dp != 0) return;
  for (int64_t mb : Divisors(B / dp)) {
    if (opt.micro_batch ? mb != *opt.micro_batch : mb > opt.max_micro_batch) continue;
    for (int64_t vpp : VppSizes(model.spec(), opt, model.software(), pp, B / (dp * mb))) {
      Layout l;
      l.tp = tp, l.pp = pp, l.dp = dp, l.cp = opt.cp, l.vpp = vpp, l.micro_batch = mb, l.global_batch = B;
      l.cp_ulysses = opt.cp_ulysses;
      l.precision = opt.precision;
      l.grad_reduce = opt.grad_reduce;
      l.bucket_bytes = opt.bucket_bytes;
      l.dp_compress = opt.dp_compress;
      l.dp_hierarchical = opt.dp_hierarchical;
      l.shard_group = ShardGroupFor(opt, dp);
      if (l.shard_group < 0) continue;
      const size_t first = out->size();
      AddKnobVariants(l, opt, model.software(), out);
      if (vpp == 1) AddZeroBubbleVariants(model.spec(), model.software(), first, out);
    }
  }
}

// A layout with full recomputation that fits, recomputing only the fewest
// layers of each chunk that still fit (memory falls and time grows with
// their number); nothing when all of them are needed.
Result<std::optional<Prediction>> FewestRecomputedLayers(CostModel& model, Layout l) {
  int64_t lo = 1, hi = LargestChunkLayers(model.spec(), l);  // hi: fits (all of them)
  std::optional<Prediction> best;
  while (lo < hi) {
    l.recompute_layers = (lo + hi) / 2;
    ST_ASSIGN_OR_RETURN(Prediction p, model.Evaluate(l));
    if (p.fits) {
      hi = l.recompute_layers;
      best = std::move(p);
    } else {
      lo = l.recompute_layers + 1;
    }
  }
  return best;
}

// The context-parallel sizes the search tries: the held one, or (search_cp)
// every cp dividing the GPUs whose 2 cp chunks divide the sequence.
std::vector<int64_t> CpSizes(const CostModel& model, const SearchOptions& opt) {
  if (!opt.search_cp) return {opt.cp};
  std::vector<int64_t> sizes;
  for (int64_t cp : Divisors(opt.num_gpus)) {
    if (model.spec().block_size % (2 * cp) == 0) sizes.push_back(cp);
  }
  return sizes;
}

// Every layout the search evaluates, in the order it evaluates them.
std::vector<Layout> CandidateLayouts(const CostModel& model, const SearchOptions& held) {
  std::vector<Layout> layouts;
  for (int64_t cp : CpSizes(model, held)) {
    SearchOptions opt = held;
    opt.cp = cp;
    for (int64_t tp : TpSizes(model, opt)) {
      for (int64_t pp : Divisors(opt.num_gpus / (tp * opt.cp))) {
        if (opt.pp && pp != *opt.pp) continue;
        if (pp > model.spec().n_layer) continue;
        std::vector<Layout> family;
        AddFamilyLayouts(model, opt, tp, pp, &family);
        // Ulysses' heads per GPU must divide by cp (at this tp).
        for (const Layout& l : family) {
          if (!held.search_cp || ValidateLayout(model.spec(), l.num_gpus(), l).ok()) layouts.push_back(l);
        }
      }
    }
  }
  return layouts;
}

// Counts an evaluated layout in its family and in the result; the first of
// equals stays the best.
void Record(const Prediction& p, FamilyVerdict* fam, SearchResult* res,
            std::vector<Prediction>* fitting) {
  fam->tp = p.layout.tp, fam->pp = p.layout.pp, fam->dp = p.layout.dp, fam->cp = p.layout.cp;
  ++res->evaluated;
  ++fam->evaluated;
  if (fam->evaluated == 1 || p.memory_gib < fam->min_memory_gib) fam->min_memory_gib = p.memory_gib;
  if (p.fits) {
    ++res->fitting;
    if (!fam->fits || p.tokens_per_s > fam->best_tokens_per_s) {
      fam->fits = true;
      fam->best_tokens_per_s = p.tokens_per_s;
      fam->best = p;
    }
    fitting->push_back(p);
  } else if (!res->fastest_unfit || p.tokens_per_s > res->fastest_unfit->tokens_per_s) {
    res->fastest_unfit = p;
  }
}

// The top_k fastest of the fitting layouts, fastest first (less memory
// breaks a tie).
std::vector<Prediction> FastestFitting(std::vector<Prediction> fitting, size_t top_k) {
  auto faster = [](const Prediction& a, const Prediction& b) {
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    return a.memory_gib < b.memory_gib;
  };
  const size_t k = std::min(top_k, fitting.size());
  std::partial_sort(fitting.begin(), fitting.begin() + k, fitting.end(), faster);
  fitting.resize(k);
  return fitting;
}

// Why a family is not the winner (or that it is), against the best tokens/s.
std::string FamilyReason(const FamilyVerdict& fam, double best_tokens_per_s, double hbm_gib) {
  char buf[160];
  if (!fam.fits) {
    std::snprintf(buf, sizeof buf, "does not fit: its leanest layout needs %.1f GiB of %.1f GiB",
                  fam.min_memory_gib, hbm_gib);
    return buf;
  }
  if (fam.best_tokens_per_s < best_tokens_per_s) {
    std::snprintf(buf, sizeof buf,
                  "%.0f%% of the best: ", 100.0 * fam.best_tokens_per_s / best_tokens_per_s);
    return buf + LimiterText(*fam.best);
  }
  return "best: " + LimiterText(*fam.best);
}

// The families with their reasons: those that fit first, fastest first;
// then the rest, leanest first.
std::vector<FamilyVerdict> RankFamilies(
    const std::map<std::tuple<int64_t, int64_t, int64_t>, FamilyVerdict>& fams, double best_tokens_per_s,
    double hbm_gib) {
  std::vector<FamilyVerdict> ranked;
  for (const auto& [key, fam] : fams) {
    ranked.push_back(fam);
    ranked.back().reason = FamilyReason(fam, best_tokens_per_s, hbm_gib);
  }
  std::sort(ranked.begin(), ranked.end(), [](const FamilyVerdict& a, const FamilyVerdict& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.best_tokens_per_s > b.best_tokens_per_s;
    return a.min_memory_gib < b.min_memory_gib;
  });
  return ranked;
}

}  // namespace

namespace {

// The options a search cannot start from, each an error naming the fix.
Status CheckSearchOptions(const CostModel& model, const SearchOptions& opt) {
  if (opt.num_gpus < 1) return InvalidArgument("the search needs --gpus >= 1");
  if (opt.cp < 1 || opt.cp > opt.num_gpus) {
    return InvalidArgument("cp must be between 1 and the " + std::to_string(opt.num_gpus) + " GPUs, got " +
                           std::to_string(opt.cp));
  }
  if (opt.cp > 1 && !opt.search_cp) {
    // Checked once here; the search builds its layouts from these sizes.
    Layout probe;
    probe.cp = opt.cp;
    probe.cp_ulysses = opt.cp_ulysses;
    ST_RETURN_IF_ERROR(ValidateLayout(model.spec(), probe.num_gpus(), probe));
  }
  if (opt.global_batch < 1) {
    return InvalidArgument("the search needs a global batch >= 1 (--global-batch)");
  }
  if (opt.shard_group && (*opt.shard_group < 0 || *opt.shard_group == 1)) {
    return InvalidArgument(
        "--shard-group " + std::to_string(*opt.shard_group) +
        ": a sharding group must be >= 2 data-parallel ranks (or 0: one group of all)");
  }
  return Status::Ok();
}

// Whether a fitting layout of full recomputation is also tried on the fewest
// layers that fit: only a searched recomputation (a stated "full" means every
// layer), on a stack that recomputes some layers.
bool TriesPartialRecompute(const Prediction& p, const SearchOptions& opt, const Software& sw) {
  const Layout& l = p.layout;
  return p.fits && l.recompute == Recompute::kFull && l.recompute_layers == 0 && !opt.recompute &&
         !opt.recompute_layers && sw.partial_recompute;
}

}  // namespace

Result<SearchResult> SearchLayouts(CostModel& model, const SearchOptions& opt) {
  ST_RETURN_IF_ERROR(CheckSearchOptions(model, opt));
  SearchResult res;
  std::map<std::tuple<int64_t, int64_t, int64_t>, FamilyVerdict> fams;  // by (tp, pp, cp)
  std::vector<Prediction> fitting;
  for (const Layout& l : CandidateLayouts(model, opt)) {
    ST_ASSIGN_OR_RETURN(Prediction p, model.Evaluate(l));
    const bool try_partial = TriesPartialRecompute(p, opt, model.software());
    Record(p, &fams[{l.tp, l.pp, l.cp}], &res, &fitting);
    if (try_partial) {
      ST_ASSIGN_OR_RETURN(std::optional<Prediction> partial, FewestRecomputedLayers(model, l));
      if (partial) Record(*partial, &fams[{l.tp, l.pp, l.cp}], &res, &fitting);
    }
  }
  res.top = FastestFitting(std::move(fitting), opt.top_k);
  const double best = res.top.empty() ? 0 : res.top[0].tokens_per_s;
  res.families = RankFamilies(fams, best, model.cluster().gpu.hbm_gib);
  return res;
}

namespace {

// The parts of a predicted step as the sweep's notes name them.
constexpr int kSweepParts = 7;
const char* const kPartWords[kSweepParts] = {
    "compute",         "TP communication", "pipeline transfers",        "exposed DP communication",
    "pipeline bubble", "optimizer",        "context-parallel transfers"};

double PartShare(const Prediction& p, int i) {
  const TimeBreakdown& t = p.time_s;
  const double v[kSweepParts] = {
      t.compute + t.recompute, t.tp_comm, t.pp_comm, t.dp_comm, t.bubble, t.optimizer, t.cp_comm};
  return v[i] / p.step_time_s;
}

// The part other than compute whose share of the step grew most from `a` to
// `b` (b alone: the largest part other than compute).
int PartThatGrew(const Prediction* a, const Prediction& b) {
  int grew = 1;
  double most = -1;
  for (int i = 1; i < kSweepParts; ++i) {
    const double delta = PartShare(b, i) - (a ? PartShare(*a, i) : 0.0);
    if (delta > most) most = delta, grew = i;
  }
  return grew;
}

std::string Secs(double s) { return s >= 1 ? Fmt("%.2f s", s) : Fmt("%.1f ms", s * 1e3); }

// "across nodes, over the 100 Gbit/s fabric (pcie-100gbe)" or "inside a node".
std::string WhereDpRuns(const ClusterSpec& c, const Layout& l) {
  if (l.tp * l.cp * l.dp <= c.node.gpus_per_node) return "inside a node";
  return Fmt("across nodes, over the %s fabric at %lld x %g Gbit/s per node", c.fabric.name.c_str(),
             static_cast<long long>(c.fabric.nics_per_node), c.fabric.nic_gbit);
}

// "44% of it pipeline bubble (16 micro-batches through 16 stages: the global
// batch of 128 sequences over dp=8)": the largest part of a step other than
// compute, and where it comes from.
std::string LargestPartWords(const ClusterSpec& c, const Prediction& p) {
  const int part = PartThatGrew(nullptr, p);
  const Layout& l = p.layout;
  std::string s = Fmt("%.0f%% of it %s", 100 * PartShare(p, part), kPartWords[part]);
  if (part == 3) s += " (the gradient all-reduce " + WhereDpRuns(c, l) + ")";
  if (part == 4) {
    s +=
        Fmt(" (%lld micro-batches through %lld stages: the global batch of %lld sequences over "
            "dp=%lld)",
            static_cast<long long>(l.micro_batches()), static_cast<long long>(l.pp),
            static_cast<long long>(l.global_batch), static_cast<long long>(l.dp));
  }
  return s;
}

// Where the search moved to another (tp, pp): what the best layout that
// keeps the previous point's model split (the new GPUs as data
// parallelism) would cost at this count.
std::string WhyTheSearchMoved(CostModel& model, const SearchOptions& base, const Prediction& prev,
                              const Prediction& cur) {
  const std::string moved =
      Fmt("so the search moved to tp=%lld pp=%lld: %s a step, ",
          static_cast<long long>(cur.layout.tp), static_cast<long long>(cur.layout.pp),
          Secs(cur.step_time_s).c_str()) +
      LargestPartWords(model.cluster(), cur);
  SearchOptions o = base;
  o.num_gpus = cur.layout.num_gpus();
  o.tp = prev.layout.tp, o.pp = prev.layout.pp, o.top_k = 1;
  auto kept = SearchLayouts(model, o);
  if (!kept.ok() || kept->top.empty()) {
    return Fmt("no layout with tp=%lld pp=%lld fits at %lld GPUs, ",
               static_cast<long long>(prev.layout.tp), static_cast<long long>(prev.layout.pp),
               static_cast<long long>(o.num_gpus)) +
           moved;
  }
  const Prediction& k = kept->top[0];
  return Fmt("keeping tp=%lld pp=%lld and growing data parallelism to dp=%lld would take %s a "
             "step, ",
             static_cast<long long>(k.layout.tp), static_cast<long long>(k.layout.pp),
             static_cast<long long>(k.layout.dp), Secs(k.step_time_s).c_str()) +
         LargestPartWords(model.cluster(), k) + "; " + moved;
}

// Why the part that grew did: the search's move, or data parallelism alone.
std::string CauseOf(CostModel& model, const SearchOptions& base, const Prediction& prev,
                    const Prediction& cur, int grew) {
  const Layout &a = prev.layout, &b = cur.layout;
  if (a.tp != b.tp || a.pp != b.pp) return WhyTheSearchMoved(model, base, prev, cur);
  std::string why = Fmt("data parallelism grew from dp=%lld to dp=%lld",
                        static_cast<long long>(a.dp), static_cast<long long>(b.dp));
  if (grew == 3) {
    why +=
        ": each GPU's compute shrinks with dp but its share of the gradient all-reduce does not, " +
        WhereDpRuns(model.cluster(), b);
  }
  return why;
}

// The note and cause of a point that adds less than kSweepGainShare of the
// ideal gain over `prev`.
void ExplainPoor(CostModel& model, const SearchOptions& base, const SweepPoint& prev,
                 SweepPoint* pt) {
  const double ratio = static_cast<double>(pt->gpus) / static_cast<double>(prev.gpus);
  const int grew = PartThatGrew(&prev.best, pt->best);
  pt->note =
      Fmt("%.2gx the GPUs gives only %.2fx the tokens/s: %s grew from %.0f%% to %.0f%% of the step "
          "(%s -> %s)",
          ratio, pt->gain, kPartWords[grew], 100 * PartShare(prev.best, grew),
          100 * PartShare(pt->best, grew), LayoutToString(prev.best.layout).c_str(),
          LayoutToString(pt->best.layout).c_str());
  pt->cause = CauseOf(model, base, prev.best, pt->best, grew);
}

}  // namespace

Result<std::vector<SweepPoint>> SweepGpuCounts(CostModel& model, const SearchOptions& base,
                                               const std::vector<int64_t>& gpu_counts) {
  std::vector<SweepPoint> pts;
  for (int64_t n : gpu_counts) {
    SearchOptions o = base;
    o.num_gpus = n;
    o.top_k = 1;
    SweepPoint pt;
    pt.gpus = n;
    ST_ASSIGN_OR_RETURN(SearchResult r, SearchLayouts(model, o));
    if (!r.top.empty()) {
      pt.found = true;
      pt.best = r.top[0];
    } else {
      pt.note = r.evaluated == 0
                    ? "no layout divides the global batch and the model at this GPU count"
                    : "no layout fits in GPU memory";
    }
    pts.push_back(pt);
  }
  const SweepPoint* first = nullptr;
  const SweepPoint* prev = nullptr;
  for (auto& pt : pts) {
    if (!pt.found) continue;
    if (first == nullptr) first = &pt;
    pt.speedup = pt.best.tokens_per_s / first->best.tokens_per_s;
    pt.efficiency = pt.speedup / (static_cast<double>(pt.gpus) / static_cast<double>(first->gpus));
    if (prev != nullptr) {
      const double ratio = static_cast<double>(pt.gpus) / static_cast<double>(prev->gpus);
      pt.gain = pt.best.tokens_per_s / prev->best.tokens_per_s;
      if (ratio > 1 && pt.gain < 1.0 + kSweepGainShare * (ratio - 1.0))
        ExplainPoor(model, base, *prev, &pt);
    }
    prev = &pt;
  }
  return pts;
}

std::string SweepVerdict(const std::vector<SweepPoint>& pts) {
  const SweepPoint* prev = nullptr;
  const SweepPoint* first_poor = nullptr;
  const SweepPoint* before_poor = nullptr;
  for (const SweepPoint& pt : pts) {
    if (!pt.found) continue;
    if (prev != nullptr && pt.gain < 1.0) {
      return Fmt("stop at %lld GPUs: from %lld to %lld GPUs the step gets %.0f%% slower because %s",
                 static_cast<long long>(prev->gpus), static_cast<long long>(prev->gpus),
                 static_cast<long long>(pt.gpus), 100 * (1 / pt.gain - 1), pt.cause.c_str());
    }
    if (first_poor == nullptr && !pt.cause.empty()) first_poor = &pt, before_poor = prev;
    prev = &pt;
  }
  if (first_poor != nullptr) {
    return Fmt(
        "scaling flattens after %lld GPUs: from %lld to %lld GPUs the tokens/s grow only %.2fx, "
        "less than "
        "%.0f%% of the ideal gain, because %s",
        static_cast<long long>(before_poor->gpus), static_cast<long long>(before_poor->gpus),
        static_cast<long long>(first_poor->gpus), first_poor->gain, 100 * kSweepGainShare,
        first_poor->cause.c_str());
  }
  if (prev == nullptr) return "no GPU count of the sweep has a layout that fits";
  return Fmt(
      "more GPUs still help: every step of the sweep, up to %lld GPUs, adds at least %.0f%% of the "
      "ideal "
      "gain (%.2gx the tokens/s for 2x the GPUs)",
      static_cast<long long>(prev->gpus), 100 * kSweepGainShare, 1 + kSweepGainShare);
}

}  // namespace scaletrain::plan
