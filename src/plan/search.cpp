#include "plan/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

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
  if (p.limiter == "bubble") return "pipeline bubble " + Pct(t.bubble, p.step_time_s) + " of the step";
  if (p.limiter == "tp_comm") return "exposed TP communication " + Pct(t.tp_comm, p.step_time_s) + " of the step";
  if (p.limiter == "dp_comm") return "exposed DP communication " + Pct(t.dp_comm, p.step_time_s) + " of the step";
  if (p.limiter == "pp_comm") return "pipeline transfers " + Pct(t.pp_comm, p.step_time_s) + " of the step";
  if (p.limiter == "recompute") return "recomputation " + Pct(t.recompute, p.step_time_s) + " of the step";
  if (p.limiter == "optimizer") return "optimizer step " + Pct(t.optimizer, p.step_time_s) + " of the step";
  return "compute-bound (MFU " + Pct(p.mfu, 1.0) + ")";
}

}  // namespace

Result<SearchResult> SearchLayouts(CostModel& model, const SearchOptions& opt) {
  const ModelSpec& M = model.spec();
  const int64_t N = opt.num_gpus, B = opt.global_batch;
  if (N < 1) return InvalidArgument("the search needs --gpus >= 1");
  if (B < 1) return InvalidArgument("the search needs a global batch >= 1 (--global-batch)");
  SearchResult res;
  std::map<std::pair<int64_t, int64_t>, FamilyVerdict> fams;
  std::vector<Prediction> fitting;
  for (int64_t tp : Divisors(N)) {
    if (opt.tp && tp != *opt.tp) continue;
    if (M.n_head % tp || M.n_kv_head % tp || M.ffn_hidden % tp) continue;
    // Beyond one NVLink domain TP traffic would cross the NICs on every
    // layer; no published training run does that, so it is not searched.
    if (!opt.tp && tp > model.cluster().node.gpus_per_node) continue;
    for (int64_t pp : Divisors(N / tp)) {
      if (opt.pp && pp != *opt.pp) continue;
      if (pp > M.n_layer) continue;
      const int64_t dp = N / (tp * pp);
      if (opt.dp && dp != *opt.dp) continue;
      if (B % dp != 0) continue;
      FamilyVerdict& fam = fams[{tp, pp}];
      fam.tp = tp, fam.pp = pp, fam.dp = dp;
      for (int64_t mb : Divisors(B / dp)) {
        if (opt.micro_batch ? mb != *opt.micro_batch : mb > opt.max_micro_batch) continue;
        const int64_t m = B / (dp * mb);
        std::vector<int64_t> vpps{1};
        if (pp > 1 && m % pp == 0) {
          const int64_t fullest = (M.n_layer + pp - 1) / pp;
          for (int64_t v = 2; v <= std::min(opt.max_vpp, fullest); ++v) {
            if (fullest % v == 0) vpps.push_back(v);
          }
        }
        for (int64_t vpp : vpps) {
          if (opt.vpp && vpp != *opt.vpp) continue;
          for (int zero = 0; zero <= 3; ++zero) {
            if (opt.zero && zero != *opt.zero) continue;
            if (dp == 1 && zero > 0) continue;  // nothing to shard over
            for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
              if (opt.recompute && rc != *opt.recompute) continue;
              // With FlashAttention there are no stored scores for selective
              // recomputation to drop: it equals "none" and is not listed twice.
              if (!opt.recompute && rc == Recompute::kSelective && model.software().flash_attention) continue;
              for (bool sp : {false, true}) {
                if (sp && tp == 1) continue;
                if (opt.sp && sp != *opt.sp) continue;
                Layout l;
                l.tp = tp, l.pp = pp, l.dp = dp, l.vpp = vpp, l.micro_batch = mb, l.global_batch = B;
                l.zero = zero, l.recompute = rc, l.sp = sp, l.precision = opt.precision;
                l.grad_reduce = opt.grad_reduce;
                l.bucket_bytes = opt.bucket_bytes;
                ST_ASSIGN_OR_RETURN(Prediction p, model.Evaluate(l));
                ++res.evaluated;
                ++fam.evaluated;
                if (fam.evaluated == 1 || p.memory_gib < fam.min_memory_gib) fam.min_memory_gib = p.memory_gib;
                if (p.fits) {
                  ++res.fitting;
                  if (!fam.fits || p.tokens_per_s > fam.best_tokens_per_s) {
                    fam.fits = true;
                    fam.best_tokens_per_s = p.tokens_per_s;
                    fam.best = p;
                  }
                  fitting.push_back(p);
                } else if (!res.fastest_unfit || p.tokens_per_s > res.fastest_unfit->tokens_per_s) {
                  res.fastest_unfit = p;
                }
              }
            }
          }
        }
      }
    }
  }
  auto faster = [](const Prediction& a, const Prediction& b) {
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    return a.memory_gib < b.memory_gib;
  };
  const size_t k = std::min(opt.top_k, fitting.size());
  std::partial_sort(fitting.begin(), fitting.begin() + k, fitting.end(), faster);
  fitting.resize(k);
  res.top = std::move(fitting);
  const double best = res.top.empty() ? 0 : res.top[0].tokens_per_s;
  for (auto& [key, fam] : fams) {
    if (fam.evaluated == 0) continue;
    char buf[160];
    if (!fam.fits) {
      std::snprintf(buf, sizeof buf, "does not fit: its leanest layout needs %.1f GiB of %.1f GiB", fam.min_memory_gib,
                    model.cluster().gpu.hbm_gib);
      fam.reason = buf;
    } else if (fam.best_tokens_per_s < best) {
      std::snprintf(buf, sizeof buf, "%.0f%% of the best: ", 100.0 * fam.best_tokens_per_s / best);
      fam.reason = buf + LimiterText(*fam.best);
    } else {
      fam.reason = "best: " + LimiterText(*fam.best);
    }
    res.families.push_back(fam);
  }
  std::sort(res.families.begin(), res.families.end(), [](const FamilyVerdict& a, const FamilyVerdict& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.best_tokens_per_s > b.best_tokens_per_s;
    return a.min_memory_gib < b.min_memory_gib;
  });
  return res;
}

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
      pt.note = r.evaluated == 0 ? "no layout divides the global batch and the model at this GPU count"
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
      const double gain = pt.best.tokens_per_s / prev->best.tokens_per_s;
      if (ratio > 1 && gain < 1.0 + 0.7 * (ratio - 1.0)) {
        // Which part of the step grew the most, in seconds per token?
        const auto share = [](const Prediction& p, int i) {
          const auto& t = p.time_s;
          const double v[] = {t.compute + t.recompute, t.tp_comm, t.pp_comm, t.dp_comm, t.bubble, t.optimizer};
          return v[i] / p.step_time_s;
        };
        static const char* kNames[] = {"compute", "TP communication", "pipeline transfers",
                                       "exposed DP communication", "pipeline bubble", "optimizer"};
        int grew = 1;
        double most = -1;
        for (int i = 1; i < 6; ++i) {
          const double delta = share(pt.best, i) - share(prev->best, i);
          if (delta > most) most = delta, grew = i;
        }
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "%.2gx the GPUs gives only %.2fx the tokens/s: %s grew from %.0f%% to %.0f%% of the step "
                      "(%s -> %s)",
                      ratio, gain, kNames[grew], 100 * share(prev->best, grew), 100 * share(pt.best, grew),
                      LayoutToString(prev->best.layout).c_str(), LayoutToString(pt.best.layout).c_str());
        pt.note = buf;
      }
    }
    prev = &pt;
  }
  return pts;
}

}  // namespace scaletrain::plan
