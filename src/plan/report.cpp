#include "plan/report.h"

#include "core/strings.h"
#include "core/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace scaletrain::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

nlohmann::json TimeBreakdownJson(const TimeBreakdown& t) {
  return {{"compute", t.compute},     {"recompute", t.recompute}, {"tp_comm", t.tp_comm},
          {"cp_comm", t.cp_comm},     {"pp_comm", t.pp_comm},     {"dp_comm", t.dp_comm},
          {"bubble", t.bubble},       {"optimizer", t.optimizer}};
}

nlohmann::json LayoutJson(const Layout& l) {
  return {{"tp", l.tp},
          {"pp", l.pp},
          {"dp", l.dp},
          {"cp", l.cp},
          {"cp_impl", l.cp_ulysses ? "ulysses" : "ring"},
          {"vpp", l.vpp},
          {"micro_batch", l.micro_batch},
          {"global_batch", l.global_batch},
          {"zero", l.zero},
          {"recompute", RecomputeName(l.recompute)},
          {"sp", l.sp},
          {"schedule", ScheduleKindName(l.schedule())},
          {"precision", PrecisionName(l.precision)},
          {"grad_reduce", GradReduceDtypeName(l)},
          {"bucket_bytes", l.bucket_bytes},
          {"recompute_layers", l.recompute == Recompute::kFull ? l.recompute_layers : 0},
          {"shard_group", ShardGroupLayout(l).dp}};
}

// Seconds, shown with a unit that keeps 3 significant digits readable.
std::string Secs(double s) {
  if (s >= 1.0) return Fmt("%.2f s", s);
  if (s >= 1e-3) return Fmt("%.1f ms", s * 1e3);
  return Fmt("%.0f us", s * 1e6);
}

std::string Bytes(double b) {
  if (b >= kGiB) return Fmt("%.2f GiB", b / kGiB);
  return Fmt("%.1f MiB", b / (1024.0 * 1024.0));
}

// The collectives of a step, each with its ring bytes in a group of
// `group_size` ranks.
nlohmann::json CollectivesJson(const std::vector<StepCollective>& cs, int64_t group_size) {
  nlohmann::json coll = nlohmann::json::array();
  for (const StepCollective& c : cs) {
    coll.push_back({{"what", c.what},
                    {"op", CollectiveKindName(c.kind)},
                    {"calls", c.calls},
                    {"payload_bytes", c.payload_bytes},
                    {"ring_bytes", c.RingBytes(group_size)}});
  }
  return coll;
}

// The DP, TP and PP operations of a step (dp_step, tp_step, step_per_stage).
void AddStepCollectivesJson(const Prediction& p, nlohmann::json* j) {
  auto group_json = [](const std::vector<StepCollective>& cs, int64_t group_size) {
    return nlohmann::json{{"payload_bytes", PayloadBytes(cs)},
                          {"calls", Calls(cs)},
                          {"collectives", CollectivesJson(cs, group_size)}};
  };
  const Layout& lay = p.layout;
  // The DP collectives run on the dp x cp ranks, or on one sharding group of
  // them (hybrid sharding), whose shards the replicas all-reduce.
  const int64_t dp_group = ShardGroupLayout(lay).dp;
  (*j)["dp_step"] = {{"buckets", p.dp_buckets},
                     {"payload_bytes", p.DpPayloadBytes()},
                     {"collectives", CollectivesJson(p.dp_collectives, dp_group)}};
  if (p.shard_replicas > 1) {
    (*j)["dp_step"]["replicas"] = {
        {"groups", p.shard_replicas},
        {"payload_bytes", PayloadBytes(p.replica_collectives)},
        {"collectives", CollectivesJson(p.replica_collectives, p.shard_replicas)}};
  }
  (*j)["tp_step"] = {{"payload_bytes", p.tp_payload_bytes}};
  // Per stage: what a rank of each stage issues on its DP, TP and PP groups
  // in a step (the trainer's comm_bytes / comm_calls of such a rank).
  (*j)["step_per_stage"] = nlohmann::json::array();
  for (const auto& sc : p.stage_collectives) {
    (*j)["step_per_stage"].push_back({{"dp", group_json(sc.dp, dp_group)},
                                      {"tp", group_json(sc.tp, lay.tp)},
                                      {"pp", group_json(sc.pp, lay.pp)},
                                      {"cp", group_json(sc.cp, lay.cp)}});
  }
}

// The tokens/s the step time's range gives: {slowest, fastest}; 0, 0 where
// no range was computed.
std::pair<double, double> TokensPerSRange(const Prediction& p) {
  if (!(p.step_time_lo_s > 0)) return {0, 0};
  return {p.tokens_per_s * p.step_time_s / p.step_time_hi_s,
          p.tokens_per_s * p.step_time_s / p.step_time_lo_s};
}

}  // namespace

nlohmann::json PlanToJson(const PlanContext& ctx, const Prediction& p, const Sizing* sizing) {
  const ModelSpec& m = ctx.model->spec();
  const ClusterSpec& c = ctx.model->cluster();
  const auto& t = p.time_s;
  const auto& mem = p.memory;
  nlohmann::json j = {
      {"schema", "scaletrain.plan/1"},
      {"model",
       {{"name", m.name},
        {"arch", ArchName(m.arch)},
        {"params", ctx.params},
        {"layers", m.n_layer},
        {"hidden", m.n_embd},
        {"heads", m.n_head},
        {"kv_heads", m.n_kv_head},
        {"ffn_hidden", m.ffn_hidden},
        {"seq", m.block_size},
        {"vocab", m.padded_vocab_size}}},
      {"cluster", {{"name", c.name}, {"gpu", c.gpu.name}, {"gpus", p.layout.num_gpus()}}},
      {"software", ctx.model->software().name},
      {"layout", LayoutJson(p.layout)},
      {"step_time_s", p.step_time_s},
      {"step_time_range_s", {p.step_time_lo_s, p.step_time_hi_s}},
      // The prediction is the step time; its range in its units, and the
      // throughput that range gives.
      {"predicted_range", {p.step_time_lo_s, p.step_time_hi_s}},
      {"tokens_per_s_range", {TokensPerSRange(p).first, TokensPerSRange(p).second}},
      {"slowest_gpu_pace", p.slowest_gpu_pace},
      {"time_breakdown_s", TimeBreakdownJson(t)},
      {"tokens_per_s", p.tokens_per_s},
      {"tflops_per_gpu", p.tflops_per_gpu},
      {"hw_tflops_per_gpu", p.hw_tflops_per_gpu},
      {"mfu", p.mfu},
      {"hfu", p.hfu},
      {"memory_per_gpu_gib", p.memory_gib},
      {"memory_capacity_gib", p.capacity_gib},
      {"memory_breakdown_gib",
       {{"params", mem.params / kGiB},
        {"grads", mem.grads / kGiB},
        {"optimizer", mem.optimizer / kGiB},
        {"activations", mem.activations / kGiB},
        {"other", mem.other / kGiB}}},
      {"fits", p.fits},
      {"comm_bytes_per_gpu",
       {{"tp", p.comm_bytes.tp}, {"pp", p.comm_bytes.pp}, {"dp", p.comm_bytes.dp}}},
      {"comm_to_compute", p.comm_to_compute},
      {"limiter", p.limiter}};
  // Exact integers, checked against the trainer's memory.json and
  // metrics.jsonl (tests/cli/test_plan_vs_trainer.sh).
  auto rank_json = [](const RankBytes& rb) {
    return nlohmann::json{{"params", rb.params},
                          {"grads", rb.grads},
                          {"optimizer", rb.optimizer},
                          {"activations", rb.activations},
                          {"numel", rb.numel},
                          {"padded_numel", rb.padded_numel}};
  };
  j["bytes_per_rank"] = rank_json(p.rank_bytes);
  j["stage_layers"] = p.stage_layers;
  j["bytes_per_stage"] = nlohmann::json::array();
  for (const RankBytes& rb : p.stage_bytes) j["bytes_per_stage"].push_back(rank_json(rb));
  AddStepCollectivesJson(p, &j);
  if (sizing != nullptr) {
    j["tokens"] = sizing->tokens;
    j["time_to_train_days"] = sizing->time_to_train_days;
    j["gpu_hours"] = sizing->gpu_hours;
    j["energy_mwh"] = sizing->energy_mwh;
    j["peak_power_mw"] = sizing->peak_power_mw;
    j["nodes"] = sizing->nodes;
    j["racks"] = sizing->racks;
    j["kw_per_rack"] = sizing->kw_per_rack;
    j["cooling"] = sizing->cooling;
    j["cost_usd"] = sizing->cost_usd;
  }
  return j;
}

nlohmann::json SearchToJson(const PlanContext& ctx, const SearchResult& r, const SizingOptions& so) {
  nlohmann::json j;
  j["schema"] = "scaletrain.plan.search/1";
  j["layouts_evaluated"] = r.evaluated;
  j["layouts_fitting"] = r.fitting;
  j["top"] = nlohmann::json::array();
  for (size_t i = 0; i < r.top.size(); ++i) {
    Sizing s = SizeRun(r.top[i], ctx.model->cluster(), so);
    j["top"].push_back(PlanToJson(ctx, r.top[i], &s));
  }
  j["best"] = r.top.empty() ? nlohmann::json(nullptr) : j["top"][0];
  j["families"] = nlohmann::json::array();
  for (const auto& f : r.families) {
    j["families"].push_back({{"tp", f.tp},
                             {"pp", f.pp},
                             {"dp", f.dp},
                             {"cp", f.cp},
                             {"layouts", f.evaluated},
                             {"fits", f.fits},
                             {"best_tokens_per_s", f.best_tokens_per_s},
                             {"min_memory_gib", f.min_memory_gib},
                             {"reason", f.reason}});
  }
  return j;
}

nlohmann::json SweepToJson(const PlanContext& ctx, const std::vector<SweepPoint>& pts) {
  nlohmann::json j;
  j["schema"] = "scaletrain.plan.sweep/1";
  j["verdict"] = SweepVerdict(pts);
  j["points"] = nlohmann::json::array();
  for (const auto& pt : pts) {
    nlohmann::json e = {{"gpus", pt.gpus},       {"found", pt.found},
                        {"speedup", pt.speedup}, {"efficiency", pt.efficiency},
                        {"gain", pt.gain},       {"note", pt.note},
                        {"cause", pt.cause}};
    e["plan"] = pt.found ? PlanToJson(ctx, pt.best, nullptr) : nlohmann::json(nullptr);
    j["points"].push_back(e);
  }
  return j;
}

nlohmann::json ValidationToJson(const ValidationReport& r) {
  nlohmann::json j;
  j["schema"] = "scaletrain.plan.validate/1";
  j["rows"] = nlohmann::json::array();
  for (const auto& row : r.rows) {
    nlohmann::json e = {{"id", row.run.id}, {"source", row.run.source}};
    if (!row.error.empty()) {
      e["error"] = row.error;
    } else {
      e["metric"] = row.metric;
      e["measured"] = row.measured;
      e["predicted"] = row.predicted;
      e["error_pct"] = row.error_pct;
      e["predicted_range"] = {row.predicted_lo, row.predicted_hi};
      e["in_range"] = row.in_range;
      e["stack"] = row.stack;
      e["stack_from"] = row.stack_from;
      if (!row.stack_hint.empty()) e["stack_hint"] = row.stack_hint;
      e["searched"] = row.searched;
      e["assumed"] = row.assumed;
      e["fits"] = row.fits;
      e["layout"] = LayoutJson(row.prediction.layout);
      e["step_time_s"] = row.prediction.step_time_s;
      e["time_breakdown_s"] = TimeBreakdownJson(row.prediction.time_s);
      e["memory_per_gpu_gib"] = row.prediction.memory_gib;
    }
    j["rows"].push_back(e);
  }
  j["mape"] = r.mape;
  j["coverage"] = r.coverage;
  j["mean_half_width_pct"] = r.mean_half_width_pct;
  j["ignored_columns"] = r.ignored_columns;
  j["max_abs_error_pct"] = r.max_abs_error;
  return j;
}

namespace {

// The stages' layers where they differ ("stages 0-14: 8 layers, stage 15: 6
// layers"), so an uneven split is never silent; "" where every stage runs as
// many.
std::string UnevenStagesText(const Prediction& p, int64_t n_layer) {
  const std::vector<int64_t>& n = p.stage_layers;
  if (n.empty() || std::all_of(n.begin(), n.end(), [&](int64_t k) { return k == n[0]; })) return "";
  std::string o = Fmt("stages   %lld layers over pp=%lld, split by cost as the trainer splits them (the last stage "
                      "also runs the head): ",
                      static_cast<long long>(n_layer), static_cast<long long>(n.size()));
  for (size_t a = 0; a < n.size();) {
    size_t b = a;
    while (b + 1 < n.size() && n[b + 1] == n[a]) ++b;
    o += (a == 0 ? "" : ", ") + (a == b ? Fmt("stage %zu", a) : Fmt("stages %zu-%zu", a, b)) +
         Fmt(": %lld layers", static_cast<long long>(n[a]));
    a = b + 1;
  }
  return o + "\n";
}

// The widest layout of a table, so its columns line up whatever the
// layouts hold (a vpp, a ZeRO stage, a compression).
int LayoutWidth(const std::vector<const Prediction*>& ps, int at_least) {
  int w = at_least;
  for (const Prediction* p : ps)
    w = std::max(w, static_cast<int>(LayoutToString(p->layout).size()));
  return w;
}

}  // namespace

std::string PlanToText(const PlanContext& ctx, const Prediction& p, const Sizing* sizing) {
  const ModelSpec& m = ctx.model->spec();
  const ClusterSpec& c = ctx.model->cluster();
  const auto& t = p.time_s;
  std::string o;
  o += Fmt("model    %s: %.2fB parameters, %lld layers, hidden %lld, seq %lld\n", m.name.c_str(), ctx.params / 1e9,
           static_cast<long long>(m.n_layer), static_cast<long long>(m.n_embd), static_cast<long long>(m.block_size));
  o += Fmt("cluster  %s: %lld x %s, %lld per node (%s stack)\n", c.name.c_str(),
           static_cast<long long>(p.layout.num_gpus()), c.gpu.name.c_str(),
           static_cast<long long>(c.node.gpus_per_node), ctx.model->software().name.c_str());
  if (!c.gpu.calibration.empty()) o += "         " + c.gpu.name + " calibrated on its own GPU: " + c.gpu.calibration + "\n";
  o += "layout   " + LayoutToString(p.layout) + Fmt(" (%s, %lld micro-batches)\n", ScheduleKindName(p.layout.schedule()),
                                                    static_cast<long long>(p.layout.micro_batches()));
  o += UnevenStagesText(p, m.n_layer);
  o += Fmt("step     %s   tokens/s %.4g   TFLOP/s/GPU %.1f (with recompute %.1f)   MFU %.1f%%\n",
           Secs(p.step_time_s).c_str(), p.tokens_per_s, p.tflops_per_gpu, p.hw_tflops_per_gpu, 100 * p.mfu);
  if (p.step_time_hi_s > 0) {
    const auto [tps_lo, tps_hi] = TokensPerSRange(p);
    o += Fmt(
        "         range %s to %s (%+.1f%% / %+.1f%%), tokens/s %.4g to %.4g: the uncertain inputs "
        "(software version, kernels, memory, clock, links) at the ends of their sourced spans\n",
        Secs(p.step_time_lo_s).c_str(), Secs(p.step_time_hi_s).c_str(),
        100 * (p.step_time_lo_s / p.step_time_s - 1), 100 * (p.step_time_hi_s / p.step_time_s - 1),
        tps_lo, tps_hi);
  }
  if (p.slowest_gpu_pace < 1) {
    o += Fmt("         compute at the pace of the slowest of %lld GPUs: %.1f%% below a typical one\n",
             static_cast<long long>(p.layout.num_gpus()), 100 * (1 - p.slowest_gpu_pace));
  }
  const std::pair<const char*, double> parts[] = {{"compute", t.compute},   {"recompute", t.recompute},
                                                  {"tp_comm", t.tp_comm},   {"cp_comm", t.cp_comm},
                                                  {"pp_comm", t.pp_comm},   {"dp_comm", t.dp_comm},
                                                  {"bubble", t.bubble},     {"optimizer", t.optimizer}};
  o += "time     ";
  for (const auto& [n, v] : parts) {
    if (std::string(n) == "cp_comm" && p.layout.cp == 1) continue;  // no context parallelism
    o += Fmt("%s %s (%.0f%%)  ", n, Secs(v).c_str(), 100 * v / p.step_time_s);
  }
  o += "\n         limited by: " + p.limiter + "\n";
  const auto& mem = p.memory;
  o += Fmt("memory   %.1f GiB of %.1f GiB per GPU: %s   params %.1f, grads %.1f, optimizer %.1f, activations %.1f, "
           "other %.1f GiB\n",
           p.memory_gib, p.capacity_gib, p.fits ? "fits" : "DOES NOT FIT", mem.params / kGiB, mem.grads / kGiB,
           mem.optimizer / kGiB, mem.activations / kGiB, mem.other / kGiB);
  std::string dp_calls =
      p.dp_buckets > 0 ? Fmt(" in %lld gradient buckets", static_cast<long long>(p.dp_buckets))
                       : "";
  if (p.shard_replicas > 1) {
    dp_calls += Fmt(" (%s of it all-reducing the gradient shards across %lld replicas)",
                    Bytes(RingBytesSum(p.replica_collectives, p.shard_replicas)).c_str(),
                    static_cast<long long>(p.shard_replicas));
  }
  o += Fmt("comm     per GPU per step: TP %s, PP %s, DP %s%s; communication / computation = %.2f\n",
           Bytes(p.comm_bytes.tp).c_str(), Bytes(p.comm_bytes.pp).c_str(),
           Bytes(p.comm_bytes.dp).c_str(), dp_calls.c_str(), p.comm_to_compute);
  if (sizing != nullptr) {
    const Sizing& s = *sizing;
    o += Fmt("train    %.3g tokens: %.1f days, %.3g GPU-hours, %.3g MWh (PUE %.2f), peak %.2f MW, $%.3g at $%.2f/GPU-h\n",
             s.tokens, s.time_to_train_days, s.gpu_hours, s.energy_mwh, s.pue, s.peak_power_mw, s.cost_usd,
             s.usd_per_gpu_hour);
    o += Fmt("facility %lld nodes in %lld racks (%lld per rack, %.1f kW each): %s cooling\n",
             static_cast<long long>(s.nodes), static_cast<long long>(s.racks),
             static_cast<long long>(s.nodes_per_rack), s.kw_per_rack, s.cooling.c_str());
  }
  if (!p.fits) o += "hint     the layout does not fit; try --search, more recompute, a higher ZeRO stage, or more tp/pp\n";
  return o;
}

std::string SearchToText(const PlanContext& ctx, const SearchResult& r) {
  std::string o = Fmt("searched %lld layouts, %lld fit in memory\n", static_cast<long long>(r.evaluated),
                      static_cast<long long>(r.fitting));
  if (r.top.empty()) {
    o += "no layout fits";
    if (r.fastest_unfit) o += Fmt(" (the fastest needs %.1f GiB)", r.fastest_unfit->memory_gib);
    o += "; use more GPUs, a GPU with more memory, or a smaller global batch\n";
  } else {
    std::vector<const Prediction*> shown;
    for (const Prediction& p : r.top) shown.push_back(&p);
    const int lw = LayoutWidth(shown, 6);
    o += Fmt("%-4s %-*s %12s %8s %19s %6s %8s  %s\n", "rank", lw, "layout", "tokens/s", "step",
             "step range", "MFU", "mem GiB", "limited by");
    for (size_t i = 0; i < r.top.size(); ++i) {
      const auto& p = r.top[i];
      const std::string range = Secs(p.step_time_lo_s) + " - " + Secs(p.step_time_hi_s);
      o += Fmt("%-4zu %-*s %12.4g %8s %19s %5.1f%% %8.1f  %s\n", i + 1, lw,
               LayoutToString(p.layout).c_str(), p.tokens_per_s, Secs(p.step_time_s).c_str(),
               range.c_str(), 100 * p.mfu, p.memory_gib, p.limiter.c_str());
    }
  }
  o += "\nby (tp, pp) family:\n";
  for (const auto& f : r.families) {
    const std::string cp = f.cp > 1 ? Fmt("cp=%-3lld ", static_cast<long long>(f.cp)) : "";
    o += Fmt("  tp=%-3lld pp=%-3lld dp=%-6lld %s%s\n", static_cast<long long>(f.tp), static_cast<long long>(f.pp),
             static_cast<long long>(f.dp), cp.c_str(), f.reason.c_str());
  }
  (void)ctx;
  return o;
}

std::string SweepToText(const PlanContext& ctx, const std::vector<SweepPoint>& pts) {
  std::vector<const Prediction*> found;
  for (const auto& pt : pts) {
    if (pt.found) found.push_back(&pt.best);
  }
  const int lw = LayoutWidth(found, 11);
  std::string o = Fmt("%6s %-*s %11s %21s %8s %7s %6s  %s\n", "GPUs", lw, "best layout", "tokens/s",
                      "tokens/s range", "speedup", "effic.", "MFU",
                      "where the step goes (compute+rc / tp+cp / pp / dp / bubble / opt)");
  for (const auto& pt : pts) {
    if (!pt.found) {
      o += Fmt("%6lld %s\n", static_cast<long long>(pt.gpus), pt.note.c_str());
      continue;
    }
    const auto& p = pt.best;
    const auto& t = p.time_s;
    const double s = p.step_time_s;
    const auto [tps_lo, tps_hi] = TokensPerSRange(p);
    const std::string range = Fmt("%.4g - %.4g", tps_lo, tps_hi);
    o +=
        Fmt("%6lld %-*s %11.4g %21s %7.2fx %6.0f%% %5.1f%%  %2.0f / %2.0f / %2.0f / %2.0f / %2.0f "
            "/ %2.0f %%\n",
            static_cast<long long>(pt.gpus), lw, LayoutToString(p.layout).c_str(), p.tokens_per_s,
            range.c_str(), pt.speedup, 100 * pt.efficiency, 100 * p.mfu,
            100 * (t.compute + t.recompute) / s, 100 * (t.tp_comm + t.cp_comm) / s,
            100 * t.pp_comm / s, 100 * t.dp_comm / s, 100 * t.bubble / s, 100 * t.optimizer / s);
  }
  bool any = false;
  for (const auto& pt : pts) {
    if (pt.found && !pt.cause.empty()) {
      if (!any) o += "\nwhere more GPUs stop helping:\n";
      any = true;
      o += Fmt("  at %lld GPUs: %s\n    why: %s\n", static_cast<long long>(pt.gpus),
               pt.note.c_str(), pt.cause.c_str());
    }
  }
  o += "\nverdict: " + SweepVerdict(pts) + "\n";
  (void)ctx;
  return o;
}

namespace {

// What the table's stack marks mean, for the rows without a stack of their
// own, and each such row's hint (the software its notes mention).
std::string StackLegend(const ValidationReport& r) {
  const auto from = [&](const char* where) {
    return std::count_if(r.rows.begin(), r.rows.end(),
                         [&](const ValidationRow& row) { return row.stack_from == where; });
  };
  if (from("--stack") + from("default") == 0) return "";
  std::string o = Fmt(
      "stack: * from --stack (%lld rows), ? not stated, so modern (%lld rows); a row's stack column "
      "chooses, its notes never do\n",
      static_cast<long long>(from("--stack")), static_cast<long long>(from("default")));
  for (const ValidationRow& row : r.rows) {
    if (row.stack_hint.empty()) continue;
    o += "hint: " + row.run.id + ": its source or notes mention " + row.stack_hint +
         "; fill its stack column (or pass --stack) with the stack it ran on\n";
  }
  return o;
}

// "  [searched: mb zero rc]  [legacy's convention: rc sp]": which knobs of
// the layout shown the row did not state, so a recomputation (or a ZeRO
// stage, a micro-batch) the search chose is never read as the run's own.
std::string UnstatedText(const ValidationRow& row) {
  auto list = [](const char* what, const std::vector<std::string>& knobs) {
    if (knobs.empty()) return std::string();
    std::string o = std::string("  [") + what + ":";
    for (const std::string& k : knobs) o += " " + k;
    return o + "]";
  };
  return list("searched", row.searched) + list((row.stack + "'s convention").c_str(), row.assumed);
}

}  // namespace

std::string ValidationToText(const ValidationReport& r) {
  // A stack taken from --stack is marked '*', modern taken for want of any
  // '?' (ValidationRow::stack_from).
  auto shown_stack = [](const ValidationRow& row) {
    return row.stack + (row.stack_from == "--stack" ? "*" : row.stack_from == "default" ? "?" : "");
  };
  int stack_width = 7;
  for (const auto& row : r.rows)
    stack_width = std::max(stack_width, static_cast<int>(shown_stack(row).size()));
  std::string o = Fmt("%-28s %-15s %11s %11s %8s %25s  %-*s %s\n", "id", "metric", "measured",
                      "predicted", "error", "range (measured in it?)", stack_width, "stack",
                      "layout [the knobs the row does not state]");
  for (const auto& row : r.rows) {
    if (!row.error.empty()) {
      o += Fmt("%-28s error: %s\n", row.run.id.c_str(), row.error.c_str());
      continue;
    }
    const std::string range =
        Fmt("%.4g - %.4g %s", row.predicted_lo, row.predicted_hi, row.in_range ? "in " : "out");
    o += Fmt("%-28s %-15s %11.4g %11.4g %+7.1f%% %25s  %-*s %s%s%s\n", row.run.id.c_str(),
             row.metric.c_str(), row.measured, row.predicted, row.error_pct, range.c_str(),
             stack_width, shown_stack(row).c_str(), LayoutToString(row.prediction.layout).c_str(),
             UnstatedText(row).c_str(), row.fits ? "" : " (no layout fits; fastest shown)");
  }
  const auto predicted = std::count_if(r.rows.begin(), r.rows.end(),
                                       [](const ValidationRow& row) { return row.error.empty(); });
  o +=
      Fmt("MAPE %.1f%% over %lld rows, worst %.1f%%; range: coverage %.0f%% (%lld of %lld measured "
          "figures in "
          "their range), mean half-width %.1f%%",
          r.mape, static_cast<long long>(predicted), r.max_abs_error, 100 * r.coverage,
          static_cast<long long>(std::llround(r.coverage * static_cast<double>(predicted))),
          static_cast<long long>(predicted), r.mean_half_width_pct);
  const size_t unpredicted = r.rows.size() - static_cast<size_t>(predicted);
  o += unpredicted == 0
           ? std::string("\n")
           : Fmt("; %zu of %zu rows not predicted (errors above)\n", unpredicted, r.rows.size());
  if (!r.ignored_columns.empty()) {
    std::string names;
    for (const std::string& c : r.ignored_columns) names += (names.empty() ? "" : ", ") + c;
    o += "columns not read: " + names + " (docs/planner.md lists the columns)\n";
  }
  return o + StackLegend(r);
}

namespace {

// Tick values for a log axis over [lo, hi]: 1, 2 and 5 times powers of
// ten, or round values inside a range too narrow to hold two of those.
std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> ticks;
  for (double d = std::pow(10.0, std::floor(std::log10(lo))); d <= hi; d *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * d >= lo && m * d <= hi) ticks.push_back(m * d);
    }
  }
  if (ticks.size() >= 2) return ticks;
  ticks.clear();
  for (double t : NiceTicks(lo, hi, 4)) {
    if (t > 0) ticks.push_back(t);
  }
  return ticks;
}

// The geometry both panels of the sweep plot share.
struct SweepFrame {
  static constexpr double kW = 1000, kPad = 70, kTop = 72, kPanelH = 280;
  double panel_w = (kW - 3 * kPad) / 2;
  double y0 = kTop + kPanelH;  // the panels' bottom
  double x0(int panel) const { return kPad + panel * (panel_w + kPad); }
};

void SweepAxes(Svg& svg, const SweepFrame& f, int panel, const std::string& title,
               const std::string& x_label, const std::string& y_label) {
  const double x0 = f.x0(panel);
  svg.Rect(x0, f.y0 - SweepFrame::kPanelH, f.panel_w, SweepFrame::kPanelH, "none", "#888");
  svg.Text(x0, f.y0 - SweepFrame::kPanelH - 10, title, 12);
  svg.Text(x0 + f.panel_w / 2, f.y0 + 34, x_label, 12, "middle", "#222", "axis-x");
  svg.Text(x0 - 58, f.y0 - SweepFrame::kPanelH - 26, y_label, 11, "start", "#555", "axis-y");
}

void LegendEntry(Svg& svg, double x, double y, const std::string& color, const std::string& name,
                 bool line = false) {
  if (line) {
    svg.Line(x, y - 4, x + 14, y - 4, color, 1.5, "5,4");
  } else {
    svg.Rect(x, y - 9, 10, 10, color);
  }
  svg.Text(x + 18, y, name, 11);
}

// Left: tokens/s against GPUs, log2 both ways, the ideal line from the
// first point dashed, points that scale badly in red.
void ScalingPanel(Svg& svg, const SweepFrame& f, const std::vector<const SweepPoint*>& ok) {
  const double x0 = f.x0(0), ph = SweepFrame::kPanelH;
  const double gmin = std::log2(static_cast<double>(ok.front()->gpus));
  const double gmax = std::max(gmin + 1, std::log2(static_cast<double>(ok.back()->gpus)));
  const double t0 = ok.front()->best.tokens_per_s, ideal_end = t0 * std::pow(2.0, gmax - gmin);
  double tmin = t0, tmax = ideal_end;
  for (auto* p : ok) tmin = std::min(tmin, p->best.tokens_per_s), tmax = std::max(tmax, p->best.tokens_per_s);
  const double lmin = std::log2(tmin) - 0.15, lmax = std::max(lmin + 1, std::log2(tmax) + 0.15);
  auto X = [&](double g) {
    return x0 + 12 + (std::log2(g) - gmin) / (gmax - gmin) * (f.panel_w - 24);
  };
  auto Y = [&](double tps) { return f.y0 - (std::log2(tps) - lmin) / (lmax - lmin) * ph; };
  SweepAxes(svg, f, 0, "Throughput of the best layout at each GPU count", "GPUs (log scale)",
            "tokens per second (log scale)");
  for (double t : LogTicks(std::pow(2.0, lmin), std::pow(2.0, lmax))) {
    svg.Line(x0, Y(t), x0 + f.panel_w, Y(t), "#eee");
    svg.Text(x0 - 6, Y(t) + 4, TickLabel(t), 11, "end", "#222", "tick-y");
  }
  svg.Line(X(static_cast<double>(ok.front()->gpus)), Y(t0), X(std::pow(2.0, gmax)), Y(ideal_end),
           palette::kIdeal, 1.5, "5,4");
  std::vector<std::pair<double, double>> line;
  for (auto* p : ok) line.emplace_back(X(static_cast<double>(p->gpus)), Y(p->best.tokens_per_s));
  svg.Polyline(line, palette::kThroughput);
  for (auto* p : ok) {
    const double x = X(static_cast<double>(p->gpus)), y = Y(p->best.tokens_per_s);
    const bool bad = !p->cause.empty();
    svg.Circle(x, y, bad ? 6 : 4, bad ? palette::kBad : palette::kThroughput);
    svg.Text(x, f.y0 + 16, std::to_string(p->gpus), 11, "middle", "#222", "tick-x");
    svg.Text(x + 7, y + 14, Fmt("%.2fx", p->speedup), 10, "start", "#555");
  }
  const double ly = f.y0 + 56;
  LegendEntry(svg, x0, ly, palette::kThroughput, "best layout (label: speed-up over the first)");
  LegendEntry(
      svg, x0, ly + 16, palette::kBad,
      Fmt("adds < %.0f%% of the ideal gain over the previous count", 100 * kSweepGainShare));
  LegendEntry(svg, x0, ly + 32, palette::kIdeal, "perfect scaling from the first count", true);
}

// Right: each count's step split into its parts, as shares, in the
// colours the report uses for the same parts.
void SharePanel(Svg& svg, const SweepFrame& f, const std::vector<const SweepPoint*>& ok) {
  const double x1 = f.x0(1), ph = SweepFrame::kPanelH;
  SweepAxes(svg, f, 1, "Where the step goes", "GPUs", "share of step time (%)");
  for (double t : {0.0, 25.0, 50.0, 75.0, 100.0}) {
    svg.Line(x1, f.y0 - t / 100 * ph, x1 + f.panel_w, f.y0 - t / 100 * ph, "#eee");
    svg.Text(x1 - 6, f.y0 - t / 100 * ph + 4, TickLabel(t), 11, "end", "#222", "tick-y");
  }
  static const char* kColors[] = {palette::kCompute, palette::kTpComm, palette::kPpComm,
                                  palette::kDpComm,  palette::kBubble, palette::kOptimizer};
  static const char* kNames[] = {"compute (+ recompute)", "TP + CP comm",    "PP comm",
                                 "DP comm (exposed)",     "pipeline bubble", "optimizer"};
  const double bw = f.panel_w / static_cast<double>(ok.size());
  for (size_t i = 0; i < ok.size(); ++i) {
    const auto& t = ok[i]->best.time_s;
    const double parts[] = {t.compute + t.recompute,
                            t.tp_comm + t.cp_comm,
                            t.pp_comm,
                            t.dp_comm,
                            t.bubble,
                            t.optimizer};
    double y = f.y0;
    for (int k = 0; k < 6; ++k) {
      const double hgt = parts[k] / ok[i]->best.step_time_s * ph;
      svg.Rect(x1 + static_cast<double>(i) * bw + 4, y - hgt, bw - 8, hgt, kColors[k], "none",
               Fmt("%lld GPUs: %s %.0f%%", static_cast<long long>(ok[i]->gpus), kNames[k],
                   100 * parts[k] / ok[i]->best.step_time_s));
      y -= hgt;
    }
    svg.Text(x1 + (static_cast<double>(i) + 0.5) * bw, f.y0 + 16, std::to_string(ok[i]->gpus), 11,
             "middle", "#222", "tick-x");
  }
  for (int k = 0; k < 6; ++k) {
    LegendEntry(svg, x1 + (k % 2) * 200, f.y0 + 56 + (k / 2) * 16, kColors[k], kNames[k]);
  }
}

}  // namespace

std::string SweepToSvg(const PlanContext& ctx, const std::vector<SweepPoint>& pts) {
  std::vector<const SweepPoint*> ok;
  for (const auto& p : pts) {
    if (p.found) ok.push_back(&p);
  }
  const SweepFrame f;
  const std::vector<std::string> verdict = WrapWords("Verdict: " + SweepVerdict(pts), 130);
  Svg svg(SweepFrame::kW, f.y0 + 130 + 16 * static_cast<double>(verdict.size()));
  svg.Text(SweepFrame::kPad, 24,
           Fmt("%s on %s: the best layout at each GPU count (global batch %lld)",
               ctx.model->spec().name.c_str(), ctx.model->cluster().name.c_str(),
               static_cast<long long>(ok.empty() ? 0 : ok[0]->best.layout.global_batch)),
           15);
  if (ok.empty()) {
    svg.Text(SweepFrame::kPad, 80, "no GPU count had a layout that fits");
    return svg.Finish();
  }
  ScalingPanel(svg, f, ok);
  SharePanel(svg, f, ok);
  for (size_t i = 0; i < verdict.size(); ++i) {
    svg.Text(SweepFrame::kPad, f.y0 + 124 + 16 * static_cast<double>(i), verdict[i], 12, "start",
             i == 0 ? "#b00" : "#222");
  }
  return svg.Finish();
}

}  // namespace scaletrain::plan
