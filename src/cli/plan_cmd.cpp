// `scaletrain plan`: predict, search, sweep and size a training run on a GPU
// cluster; `scaletrain plan validate`: compare with published runs.
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/help.h"
#include "cli/plan_command.h"
#include "cli/plan_training.h"
#include "cli/train_config_model.h"
#include "core/config.h"
#include "core/strings.h"
#include "plan/cost_model.h"
#include "plan/goodput.h"
#include "plan/hardware.h"
#include "plan/model_preset.h"
#include "plan/report.h"
#include "plan/search.h"
#include "plan/sizing.h"
#include "plan/stacks.h"
#include "plan/uncertainty.h"
#include "plan/validate.h"

namespace scaletrain::cli {

namespace {

using namespace scaletrain::plan;

// The flags every `plan` needs, listed first in its help.
constexpr const char* kRequiredGroup =
    "Required: a model (--model or --train-config), a cluster (--cluster), and --gpus or --sweep";

struct PlanOptions {
  std::string model, cluster, config_dir, stack;
  std::vector<std::string> hardware_files;
  std::vector<std::string> stack_files;  // a user's own stacks, beside configs/stacks
  std::string train_config;  // plan the run a training config describes
  std::vector<std::string> sets;
  std::optional<int64_t> vocab;
  std::optional<double> bucket_mb;
  int64_t gpus = 0;
  std::optional<int64_t> tp, pp, dp, vpp, micro_batch, global_batch, seq;
  int64_t cp = 1;
  std::string cp_impl;  // "ring" or "ulysses"; empty: the training config's, else ring
  bool search_cp = false;  // --search-cp
  int64_t shard_group = 0;  // hybrid sharding (Layout::shard_group); 0: none
  int64_t recompute_layers = 0;  // full recomputation's layers per chunk; 0: all
  std::optional<int> zero;
  std::string recompute, precision, schedule, grad_reduce, dp_compress, dp_reduce;
  bool sp = false, search = false, json = false;
  std::vector<int64_t> sweep;
  std::string plot;
  double tokens = 0, rack_kw = 40, usd_per_gpu_hour = 0, pue = 0, utilization = 0.85;
  GpuVariantSpec variant;  // the cluster's GPU variant; 0: as catalogued
  UncertaintyOverride uncertainty;  // the range's spans where the flags replace the sourced ones
  size_t top = 5;
  std::string validate_csv;
  GoodputOptions goodput;      // failures and checkpoints (goodput.h)
  bool goodput_flag = false;   // --goodput: with the preset's MTBF
  // Whether any goodput flag asks for the goodput.
  bool WantsGoodput() const {
    const GoodputOptions& g = goodput;
    return goodput_flag || g.mtbf_hours || !g.mtbf_per.empty() || g.storage_write_gbps ||
           g.storage_read_gbps || g.relaunch_s || g.interval_steps;
  }
};

// The hardware catalog and the software stacks: the config folder's, then the
// user's own files.
Status LoadCatalog(const PlanOptions& o, HardwareCatalog* cat, StackCatalog* stacks, std::string* config_dir) {
  if (!o.config_dir.empty()) {
    *config_dir = o.config_dir;
  } else {
    ST_ASSIGN_OR_RETURN(*config_dir, FindConfigDir());
  }
  ST_RETURN_IF_ERROR(cat->LoadDir(*config_dir + "/hardware"));
  for (const auto& f : o.hardware_files) ST_RETURN_IF_ERROR(cat->LoadFile(f));
  ST_RETURN_IF_ERROR(stacks->LoadDir(*config_dir + "/stacks"));
  for (const auto& f : o.stack_files) ST_RETURN_IF_ERROR(stacks->LoadFile(f).WithContext("--stack-file"));
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return IoError("cannot write " + path);
  f << text;
  if (!f) return IoError("error writing " + path);
  return Status::Ok();
}

// A profile from `scaletrain bench` measured one node of `gpus_per_node`
// ranks; its fabric is a placeholder (kind "unmeasured").
Status CheckProfileCovers(const ClusterSpec& c, int64_t devices) {
  if (c.fabric.kind != "unmeasured" || devices <= c.node.gpus_per_node) return Status::Ok();
  return InvalidArgument("cluster " + c.name + " is a profile measured on " +
                         std::to_string(c.node.gpus_per_node) +
                         " rank(s) of one node, and this layout needs " + std::to_string(devices) +
                         "; measure the launch you will train with: mpirun -np " +
                         std::to_string(devices) + " scaletrain bench --output FILE");
}

// What every form of `scaletrain plan` needs: the catalog, the model (a preset
// or the one a training config describes), the cluster, the stack and the
// precision.
struct PlanInputs {
  HardwareCatalog catalog;
  StackCatalog stacks;
  std::string config_dir;
  ModelPreset preset;
  std::optional<RunConfig> run_cfg;  // with --train-config
  ClusterSpec cluster;
  Software sw;
  Precision precision = Precision::kBF16;
  GradReduce grad_reduce = GradReduce::kAuto;
};

// The flags that name the model and the cluster, before either is loaded.
Status CheckModelAndClusterFlags(const PlanOptions& o, const HardwareCatalog& cat) {
  if (o.model.empty() && o.train_config.empty()) {
    return InvalidArgument(
        "--model is required (a preset name or a model TOML file), or --train-config FILE");
  }
  if (!o.model.empty() && !o.train_config.empty()) {
    return InvalidArgument("--model and --train-config both name a model; give one");
  }
  if (!o.sets.empty() && o.train_config.empty()) {
    return InvalidArgument("--set changes a training config; use it with --train-config FILE");
  }
  if (!o.train_config.empty() && o.shard_group != 0) {
    return InvalidArgument(
        "--shard-group " + std::to_string(o.shard_group) +
        ": scaletrain's trainer has no hybrid sharding (ZeRO shards over all its data-parallel "
        "ranks), so a training config cannot run it; plan with --model to compare such layouts");
  }
  if (o.cluster.empty()) {
    std::string known;
    for (const auto& n : cat.ClusterNames()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("--cluster is required; known clusters: " + known);
  }
  return Status::Ok();
}

// The model of a preset (--model) or of a training config with its --set
// overrides (--train-config, kept in in->run_cfg), at the --seq given.
Status LoadPlanModel(const PlanOptions& o, PlanInputs* in) {
  if (!o.train_config.empty()) {
    auto cfg = LoadRunConfig(o.train_config, o.sets);
    if (!cfg.ok()) return cfg.status().WithContext("--train-config");
    in->run_cfg = *cfg;
    ST_ASSIGN_OR_RETURN(in->preset.spec, TrainConfigModel(*in->run_cfg, o.train_config, o.vocab,
                                                          o.tp.value_or(in->run_cfg->parallel.tp)));
    in->preset.global_batch = in->run_cfg->training.global_batch_size;
  } else {
    ST_ASSIGN_OR_RETURN(in->preset, LoadModel(o.model, in->config_dir));
  }
  if (o.seq) in->preset.spec.block_size = *o.seq;
  return ValidateModelSpec(in->preset.spec);
}

Status LoadPlanInputs(const PlanOptions& o, PlanInputs* in) {
  ST_RETURN_IF_ERROR(LoadCatalog(o, &in->catalog, &in->stacks, &in->config_dir));
  ST_RETURN_IF_ERROR(CheckModelAndClusterFlags(o, in->catalog));
  ST_RETURN_IF_ERROR(LoadPlanModel(o, in));
  ST_ASSIGN_OR_RETURN(in->cluster, in->catalog.Cluster(o.cluster));
  ST_RETURN_IF_ERROR(in->catalog.CheckCalibrationApplies(in->cluster).WithContext("--hardware"));
  auto gpu = GpuVariant(in->cluster.gpu, o.variant);
  if (!gpu.ok()) return gpu.status().WithContext("--power-cap / --hbm-gib / --hbm-tbps");
  in->cluster.gpu = *gpu;
  // A training config describes scaletrain's CPU trainer: its stack, fp32.
  const std::string stack = !o.stack.empty() ? o.stack : in->run_cfg ? "cpu" : "modern";
  auto sw = in->stacks.Find(stack);
  if (!sw.ok()) return sw.status().WithContext("--stack");
  in->sw = *sw;
  const std::string precision = !o.precision.empty() ? o.precision
                                : in->run_cfg        ? in->run_cfg->training.precision
                                                     : "bf16";
  ST_ASSIGN_OR_RETURN(in->precision, PrecisionFromName(precision));
  if (!o.grad_reduce.empty()) {
    ST_ASSIGN_OR_RETURN(in->grad_reduce, GradReduceFromName(o.grad_reduce));
  }
  return Status::Ok();
}

SizingOptions SizingFor(const PlanOptions& o, int64_t params) {
  SizingOptions so;
  so.tokens =
      o.tokens > 0 ? o.tokens : 20.0 * static_cast<double>(params);  // Chinchilla: 20 tokens/param
  so.rack_kw = o.rack_kw;
  so.usd_per_gpu_hour = o.usd_per_gpu_hour;
  so.pue = o.pue;
  so.gpu_utilization = o.utilization;
  return so;
}

// The search's fixed knobs as the flags give them (a training config's
// layout joins them in ApplyLayoutFlags).
Result<SearchOptions> SearchOptionsFor(const PlanOptions& o, const PlanInputs& in,
                                       int64_t global_batch) {
  SearchOptions search;
  search.global_batch = global_batch;
  search.precision = in.precision;
  search.grad_reduce = in.grad_reduce;
  search.top_k = o.top;
  search.tp = o.tp, search.pp = o.pp, search.dp = o.dp, search.vpp = o.vpp,
  search.micro_batch = o.micro_batch;
  search.cp = o.cp;
  search.search_cp = o.search_cp;
  if (o.shard_group != 0) search.shard_group = o.shard_group;
  search.zero = o.zero;
  if (!o.recompute.empty()) {
    ST_ASSIGN_OR_RETURN(Recompute rc, RecomputeFromName(o.recompute));
    search.recompute = rc;
  } else if (in.run_cfg) {
    // The training config's training.recompute (the config check took only
    // none, selective and full).
    ST_ASSIGN_OR_RETURN(Recompute rc, RecomputeFromName(in.run_cfg->training.recompute));
    search.recompute = rc;
  }
  if (o.sp) search.sp = true;
  if (o.recompute_layers != 0) {
    if (search.recompute && *search.recompute != Recompute::kFull) {
      return InvalidArgument("--recompute-layers " + std::to_string(o.recompute_layers) +
                             " picks the layers full recomputation reruns; use --recompute full");
    }
    search.recompute = Recompute::kFull;
    search.recompute_layers = o.recompute_layers;
  }
  return search;
}

// The step time's range: the uncertain inputs at the ends of their sourced
// spans, or of the flags' (p->step_time_lo_s, step_time_hi_s).
Status WithRange(const UncertaintyOverride& o, const CostModel& model, Prediction* p) {
  ST_ASSIGN_OR_RETURN(const Uncertainty u, UncertaintyFor(model.cluster(), o));
  ST_ASSIGN_OR_RETURN(std::tie(p->step_time_lo_s, p->step_time_hi_s),
                      StepTimeRange(model.spec(), model.cluster(), model.software(), p->layout, u));
  return Status::Ok();
}

// `plan --sweep`: the best layout at each GPU count, and where more GPUs
// stop helping.
Status RunSweep(const PlanOptions& o, CostModel& model, const PlanContext& ctx,
                const SearchOptions& search, std::string* out) {
  for (int64_t n : o.sweep) {
    if (n < 1) return InvalidArgument("--sweep GPU counts must be >= 1");
  }
  ST_ASSIGN_OR_RETURN(auto pts, SweepGpuCounts(model, search, o.sweep));
  for (SweepPoint& pt : pts) {
    if (pt.found) ST_RETURN_IF_ERROR(WithRange(o.uncertainty, model, &pt.best));
  }
  if (!o.plot.empty()) ST_RETURN_IF_ERROR(WriteFile(o.plot, SweepToSvg(ctx, pts)));
  if (o.json) {
    *out += SweepToJson(ctx, pts).dump(2) + "\n";
  } else {
    *out += SweepToText(ctx, pts);
    if (!o.plot.empty()) *out += "plot written to " + o.plot + "\n";
  }
  return Status::Ok();
}

// The layout the flags name, or a training config's where a flag is not
// given.
struct LayoutFlags {
  std::optional<int64_t> tp, pp, dp, vpp, micro_batch;
  std::optional<int> zero;
  std::string schedule;
  bool sp = false;
  int64_t gpus = 0;
  int64_t cp = 1;
  int64_t shard_group = 0;
  double bucket_mb = 0;  // 0: the stack's buckets (Software::buckets)
  DpCompression dp_compress = DpCompression::kNone;
  bool dp_hierarchical = false;
  bool cp_ulysses = false;
};

Result<LayoutFlags> LayoutFlagsFor(const PlanOptions& o, const std::optional<RunConfig>& run_cfg) {
  LayoutFlags f{o.tp,       o.pp, o.dp,   o.vpp, o.micro_batch, o.zero,
                o.schedule, o.sp, o.gpus, o.cp,  o.shard_group, o.bucket_mb.value_or(0.0)};
  if (run_cfg) {
    const ParallelConfig& pc = run_cfg->parallel;
    f.tp = f.tp.value_or(pc.tp), f.pp = f.pp.value_or(pc.pp), f.dp = f.dp.value_or(pc.dp);
    if (o.cp == 1) f.cp = pc.cp;  // --cp left at its default: the config's
    f.cp_ulysses = pc.cp_impl == "ulysses";
    f.vpp = f.vpp.value_or(pc.vpp);
    f.micro_batch = f.micro_batch.value_or(run_cfg->training.micro_batch_size);
    f.zero = f.zero.value_or(static_cast<int>(pc.zero));
    if (f.schedule.empty() && pc.pp > 1) f.schedule = pc.schedule;
    f.sp = f.sp || pc.sp;
    if (!o.bucket_mb) f.bucket_mb = pc.bucket_mb;
    DpCompressionFromName(pc.dp_compress, &f.dp_compress);  // the config check took only known names
    f.dp_hierarchical = pc.dp_reduce != "flat";  // "auto" applies it where it can, as the trainer
    if (f.gpus < 1) f.gpus = *f.tp * *f.pp * *f.dp * f.cp;
  }
  if (o.bucket_mb && !(*o.bucket_mb > 0)) {
    return InvalidArgument("--bucket-mb must be positive (the trainer's parallel.bucket_mb)");
  }
  if (!o.dp_reduce.empty()) {
    if (o.dp_reduce != "flat" && o.dp_reduce != "hierarchical") {
      return InvalidArgument("--dp-reduce '" + o.dp_reduce + "' is unknown; use flat or hierarchical");
    }
    f.dp_hierarchical = o.dp_reduce == "hierarchical";
  }
  if (!o.dp_compress.empty() && !DpCompressionFromName(o.dp_compress, &f.dp_compress)) {
    return InvalidArgument("--dp-compress '" + o.dp_compress + "' is unknown; use none, bf16, fp16 or sign");
  }
  if (!o.cp_impl.empty()) {
    if (o.cp_impl != "ring" && o.cp_impl != "ulysses") {
      return InvalidArgument("--cp-impl '" + o.cp_impl + "' is unknown; use ring or ulysses");
    }
    f.cp_ulysses = o.cp_impl == "ulysses";
  }
  if (f.gpus < 1) return InvalidArgument("--gpus N is required (or --sweep 8,16,...)");
  return f;
}

void ApplyLayoutFlags(const LayoutFlags& f, SearchOptions* search) {
  search->num_gpus = f.gpus;
  search->bucket_bytes = static_cast<int64_t>(f.bucket_mb * 1048576.0);
  search->dp_compress = f.dp_compress;
  search->dp_hierarchical = f.dp_hierarchical;
  search->tp = f.tp, search->pp = f.pp, search->dp = f.dp, search->vpp = f.vpp,
  search->micro_batch = f.micro_batch;
  search->cp = f.cp;
  search->cp_ulysses = f.cp_ulysses;
  if (f.shard_group != 0) search->shard_group = f.shard_group;
  search->zero = f.zero;
  if (f.sp) search->sp = true;
}

// `plan --search`: every valid layout with the given knobs held, the
// fastest that fit first.
Status RunSearch(const PlanOptions& o, const ClusterSpec& cluster, CostModel& model,
                 const PlanContext& ctx, const SearchOptions& search, const SizingOptions& so,
                 std::string* out) {
  ST_RETURN_IF_ERROR(CheckProfileCovers(cluster, search.num_gpus));
  ST_ASSIGN_OR_RETURN(SearchResult r, SearchLayouts(model, search));
  for (Prediction& p : r.top) ST_RETURN_IF_ERROR(WithRange(o.uncertainty, model, &p));
  if (o.json) {
    *out += SearchToJson(ctx, r, so).dump(2) + "\n";
  } else {
    *out += SearchToText(ctx, r);
    if (!r.top.empty()) {
      Sizing s = SizeRun(r.top[0], cluster, so);
      *out += "\nbest layout in detail:\n" + PlanToText(ctx, r.top[0], &s);
    }
  }
  return Status::Ok();
}

// The one layout `plan` predicts: what the flags (or the training config)
// give, the rest defaulted (tp = pp = vpp = micro-batch = 1, dp = gpus / (tp
// x pp), ZeRO-0); the search options hold the recompute, precision and
// gradient reduction.
Result<Layout> SingleLayout(const LayoutFlags& f, const SearchOptions& search) {
  Layout l;
  l.tp = f.tp.value_or(1);
  l.pp = f.pp.value_or(1);
  l.cp = f.cp;
  l.cp_ulysses = f.cp_ulysses;
  l.shard_group = f.shard_group;
  const int64_t model_ranks = l.tp * l.cp * l.pp;
  if (f.dp) {
    l.dp = *f.dp;
  } else if (l.tp < 1 || l.pp < 1 || l.cp < 1) {
    l.dp = 1;  // ValidateLayout names the bad size
  } else if (f.gpus % model_ranks == 0) {
    l.dp = f.gpus / model_ranks;
  } else {
    l.dp = std::max<int64_t>(1, f.gpus / model_ranks);  // ValidateLayout names the fix
  }
  l.vpp = f.vpp.value_or(1);
  l.micro_batch = f.micro_batch.value_or(1);
  l.global_batch = search.global_batch;
  l.zero = f.zero.value_or(0);
  l.recompute = search.recompute.value_or(Recompute::kNone);
  l.recompute_layers = search.recompute_layers.value_or(0);
  l.sp = f.sp;
  l.precision = search.precision;
  l.grad_reduce = search.grad_reduce;
  // As the trainer converts parallel.bucket_mb.
  l.bucket_bytes = static_cast<int64_t>(f.bucket_mb * 1048576.0);
  l.dp_compress = f.dp_compress;
  l.dp_hierarchical = f.dp_hierarchical;
  if (!f.schedule.empty()) {
    ST_ASSIGN_OR_RETURN(ScheduleKind k, ScheduleKindFromName(f.schedule));
    if (k == ScheduleKind::kInterleaved && l.vpp == 1) {
      return InvalidArgument("--schedule interleaved needs --vpp > 1");
    }
    if (k == ScheduleKind::kZbV && l.vpp != 2) {
      return InvalidArgument("--schedule zb-v runs two chunks per stage in a V: give --vpp 2");
    }
    if (k != ScheduleKind::kInterleaved && k != ScheduleKind::kZbV && l.vpp > 1) {
      return InvalidArgument("--schedule " + f.schedule +
                             " runs one chunk per stage; drop --vpp or use interleaved");
    }
    l.gpipe = k == ScheduleKind::kGPipe;
    l.zero_bubble = SplitsBackward(k);
  }
  return l;
}

// What the stack does where the flags are silent: FSDP shards over any DP
// group; "selective" is the stack's own recomputation.
Layout OnStack(Layout l, const LayoutFlags& f, const Software& sw) {
  l.recompute = RecomputeOn(sw, l.recompute);
  if (!f.zero && sw.fully_sharded && l.dp > 1) l.zero = 3;
  return l;
}

// `plan` of one layout: its step, memory, and the run's time, energy and cost.
Status RunPredict(const PlanOptions& o, const PlanInputs& in, const LayoutFlags& f,
                  const SearchOptions& search, CostModel& model, const PlanContext& ctx,
                  const SizingOptions& so, std::string* out) {
  ST_ASSIGN_OR_RETURN(const Layout given, SingleLayout(f, search));
  const Layout l = OnStack(given, f, in.sw);
  if (l.num_gpus() != f.gpus) {
    ST_RETURN_IF_ERROR(ValidateLayout(in.preset.spec, f.gpus, l));
  }
  ST_RETURN_IF_ERROR(CheckProfileCovers(in.cluster, l.num_gpus()));
  ST_ASSIGN_OR_RETURN(Prediction p, model.Predict(l));
  ST_RETURN_IF_ERROR(WithRange(o.uncertainty, model, &p));
  Sizing s = SizeRun(p, in.cluster, so);
  std::optional<Goodput> g;
  if (o.WantsGoodput()) {
    const GoodputJob job = GoodputJobFor(p, s, in.cluster, ctx.params, so.gpu_utilization);
    ST_ASSIGN_OR_RETURN(g, EvaluateGoodput(job, in.cluster, o.goodput));
  }
  if (o.json) {
    nlohmann::json j = PlanToJson(ctx, p, &s);
    if (g) j["goodput"] = GoodputToJson(*g);
    *out += j.dump(2) + "\n";
  } else {
    *out += PlanToText(ctx, p, &s) + (g ? GoodputToText(*g) : "");
  }
  return Status::Ok();
}

// `scaletrain plan` without `validate`: a sweep, a search, or one layout.
Status RunPlan(const PlanOptions& o, std::string* out) {
  PlanInputs in;
  ST_RETURN_IF_ERROR(LoadPlanInputs(o, &in));
  CostModel model(in.preset.spec, in.cluster, in.sw);
  PlanContext ctx{&model, CountParams(in.preset.spec)};
  const int64_t gb =
      o.global_batch.value_or(in.preset.global_batch > 0 ? in.preset.global_batch : 512);
  const SizingOptions so = SizingFor(o, ctx.params);
  ST_ASSIGN_OR_RETURN(SearchOptions search, SearchOptionsFor(o, in, gb));
  if (o.WantsGoodput() && (!o.sweep.empty() || o.search)) {
    return InvalidArgument(
        "the goodput flags (--mtbf-hours, --goodput, ...) evaluate one layout; drop --search / "
        "--sweep and give that layout's flags");
  }
  if (!o.sweep.empty()) return RunSweep(o, model, ctx, search, out);
  ST_ASSIGN_OR_RETURN(const LayoutFlags f, LayoutFlagsFor(o, in.run_cfg));
  ApplyLayoutFlags(f, &search);
  if (o.search) return RunSearch(o, in.cluster, model, ctx, search, so, out);
  return RunPredict(o, in, f, search, model, ctx, so, out);
}

Status RunValidate(const PlanOptions& o, std::string* out) {
  HardwareCatalog cat;
  StackCatalog stacks;
  std::string config_dir;
  ST_RETURN_IF_ERROR(LoadCatalog(o, &cat, &stacks, &config_dir));
  // Rows without a stack: --stack where given, else modern.
  if (!o.stack.empty()) ST_RETURN_IF_ERROR(stacks.Find(o.stack).status().WithContext("--stack"));
  ST_ASSIGN_OR_RETURN(ValidationReport rep, ValidateFile(o.validate_csv, cat, stacks, config_dir,
                                                         o.stack, o.uncertainty));
  *out += o.json ? ValidationToJson(rep).dump(2) + "\n" : ValidationToText(rep);
  return Status::Ok();
}

}  // namespace

bool IsBenchProfile(const ClusterSpec& c) {
  return c.fabric.kind == "measured" || c.fabric.kind == "unmeasured";
}

Result<TrainingPrediction> PredictTrainingConfig(const std::string& config_path,
                                                 const std::string& cluster,
                                                 const std::vector<std::string>& hardware_files,
                                                 std::optional<int64_t> vocab) {
  PlanOptions o;
  o.train_config = config_path;
  o.cluster = cluster;
  o.hardware_files = hardware_files;
  o.vocab = vocab;
  PlanInputs in;
  ST_RETURN_IF_ERROR(LoadPlanInputs(o, &in));
  CostModel model(in.preset.spec, in.cluster, in.sw);
  ST_ASSIGN_OR_RETURN(SearchOptions search, SearchOptionsFor(o, in, in.preset.global_batch));
  ST_ASSIGN_OR_RETURN(const LayoutFlags f, LayoutFlagsFor(o, in.run_cfg));
  ApplyLayoutFlags(f, &search);
  ST_ASSIGN_OR_RETURN(const Layout l, SingleLayout(f, search));
  ST_RETURN_IF_ERROR(CheckProfileCovers(in.cluster, l.num_gpus()));
  ST_ASSIGN_OR_RETURN(Prediction p, model.Predict(l));
  return TrainingPrediction{std::move(p), in.cluster};
}

// The data-parallel reduction's form and the GPU variant (plan's flags).
void AddCommunicationAndVariantOptions(CLI::App* plan, PlanOptions* o) {
  plan->option_defaults()->group("Communication, uncertainty and GPU variant");
  plan->add_option("--power-cap", o->variant.power_cap_w,
                   "GPU power cap in W (a fleet's setting): the sustained clock follows it, about as the "
                   "cube root of the power above idle (docs/planner.md)");
  plan->add_option("--hbm-gib", o->variant.hbm_gib, "GPU memory in GiB, for a variant of the catalogued GPU (94 / 96 GB parts)");
  plan->add_option("--hbm-tbps", o->variant.hbm_tbps, "GPU memory bandwidth in TB/s, for a variant of the catalogued GPU (H100 96 GB HBM2e: 2.4)");
  plan->add_option("--dp-reduce", o->dp_reduce,
                   "ZeRO-0's all-reduce: flat (one ring) or hierarchical (reduce-scatter in each node, "
                   "all-reduce across, all-gather in the node; where the DP group has >= 2 members on "
                   "each node); default flat, or the training config's parallel.dp_reduce");
  plan->add_option("--dp-compress", o->dp_compress,
                   "what ZeRO-0's gradient all-reduce sends (the trainer's parallel.dp_compress): none, "
                   "bf16, fp16 or sign (1 bit + a scale per 256 elements, all-gathered)");
}

// The range's spans, where a flag replaces the sourced ones (uncertainty.h).
void AddUncertaintyOptions(CLI::App* cmd, PlanOptions* o) {
  cmd->add_option(
      "--kernel-uncertainty", o->uncertainty.kernel,
      "the range with every kernel efficiency (matmul, attention, HBM) +- this fraction, in place "
      "of the spans their sources give (docs/planner.md, \"The range\")");
  cmd->add_option(
      "--fabric-uncertainty", o->uncertainty.fabric,
      "the range with every link efficiency (in-node, fabric) +- this fraction, in place of the "
      "spans their sources give");
}

// The flags that state a layout (each held fixed under --search).
void AddLayoutOptions(CLI::App* plan, PlanOptions* o) {
  plan->add_option("--gpus", o->gpus, "number of GPUs")->group(kRequiredGroup);
  plan->option_defaults()->group("Layout (each flag given is held fixed under --search)");
  plan->add_option("--tp", o->tp, "tensor-parallel size");
  plan->add_option("--pp", o->pp, "pipeline-parallel stages");
  plan->add_option("--dp", o->dp, "data-parallel size (default: gpus / (tp x cp x pp))");
  plan->add_option("--cp", o->cp,
                   "context-parallel size: each sequence split over cp GPUs, ring attention "
                   "(default 1; held, not searched)");
  plan->add_flag("--search-cp", o->search_cp,
                 "with --search: also try every cp (from 1) that divides the GPUs and whose 2 cp "
                 "chunks divide the sequence");
  plan->add_option("--cp-impl", o->cp_impl,
                   "context parallelism as ring (default) or ulysses (all-to-all from sequence to "
                   "heads; heads per GPU must divide by cp); with --train-config its parallel.cp_impl");
  plan->add_option(
      "--shard-group", o->shard_group,
      "hybrid sharding: ZeRO shards over groups of N data-parallel ranks, and each rank "
      "all-reduces its gradient shard with the other groups' (FSDP's HYBRID_SHARD: N = GPUs "
      "per node / tp; Megatron-Core's distributed-optimizer instances); default 0: one group of "
      "all; held, not searched");
  plan->add_option("--vpp", o->vpp, "model chunks per stage (interleaved schedule when > 1)");
  plan->add_option("--micro-batch", o->micro_batch, "sequences per micro-batch");
  plan->add_option("--global-batch", o->global_batch,
                   "sequences per optimizer step (default: the preset's)");
  plan->add_option("--seq", o->seq, "sequence length (default: the preset's)");
  plan->add_option("--zero", o->zero, "ZeRO stage 0-3");
  plan->add_option("--recompute", o->recompute, "activation recomputation: none, selective (Megatron's), full, or op (PyTorch's op-level selective checkpointing)");
  plan->add_option(
      "--recompute-layers", o->recompute_layers,
      "with full recomputation, the layers of each model chunk that recompute (Megatron's "
      "--recompute-method block --recompute-num-layers; the rest keep their activations); "
      "default: all; implies --recompute full");
  plan->add_flag("--sp", o->sp, "sequence parallelism (with tp > 1)");
}

// Where the catalogs are and the user's own files beside them.
void AddFileOptions(CLI::App* cmd, PlanOptions* o) {
  cmd->option_defaults()->group("Files");
  cmd->add_option("--config-dir", o->config_dir,
                  "folder with hardware/, models/ and stacks/ (default: ./configs)");
  cmd->add_option(
      "--hardware", o->hardware_files,
      "an extra hardware TOML file added to the catalog, e.g. a profile from `scaletrain bench` "
      "(repeatable)");
  cmd->add_option("--stack-file", o->stack_files,
                  "a software stack file of your own, added to configs/stacks (its name: the file's; "
                  "format in docs/planner.md, \"Software stacks\"; repeatable)");
}

// The flags that name the model, the cluster and the software, and their files.
void AddInputOptions(CLI::App* plan, PlanOptions* o) {
  plan->add_option("--model", o->model, "model preset (configs/models) or a model TOML file")
      ->group(kRequiredGroup);
  plan->add_option("--train-config", o->train_config,
                   "instead of --model: plan the run a training config (scaletrain train --config) "
                   "describes: its model, "
                   "layout, batch, precision and bucket size; layout flags override it")
      ->group(kRequiredGroup);
  plan->add_option("--cluster", o->cluster,
                   "cluster preset (configs/hardware/clusters.toml), or the name in a "
                   "--hardware profile")
      ->group(kRequiredGroup);
  plan->option_defaults()->group("Model and software");
  plan->add_option("--set", o->sets,
                   "with --train-config: section.key=value, as scaletrain train --set");
  plan->add_option(
      "--vocab", o->vocab,
      "with --train-config: vocabulary size when model.vocab_size is 0 and no vocab.json is found");
  plan->add_option(
      "--stack", o->stack,
      "software stack: a stack of configs/stacks or of --stack-file, by its name or an alias: modern "
      "(Megatron-Core, NeMo), modern-triton, legacy, megatron-deepspeed, pytorch (PyTorch eager + FSDP2, "
      "torchtitan), pytorch-compile, pytorch-fsdp1 (eager + FSDP1, Hugging Face) or cpu (default modern; "
      "with --train-config cpu; see docs/planner.md)");
  AddFileOptions(plan, o);
}

// The sizing of the run (time, energy, cost).
void AddSizingOptions(CLI::App* plan, PlanOptions* o) {
  plan->option_defaults()->group("Time, energy and cost of the run");
  plan->add_option("--tokens", o->tokens, "tokens to train on (default: 20 per parameter)");
  plan->add_option("--rack-kw", o->rack_kw, "power limit per rack in kW")->capture_default_str();
  plan->add_option("--usd-per-gpu-hour", o->usd_per_gpu_hour,
                   "price (default: the cluster preset's)");
  plan->add_option("--pue", o->pue, "power usage effectiveness (default: the cluster preset's)");
  plan->add_option("--utilization", o->utilization, "average GPU power as a fraction of TDP")
      ->capture_default_str();
}

// Failures, checkpoints and goodput (goodput.h), for one layout.
void AddGoodputOptions(CLI::App* plan, PlanOptions* o) {
  plan->option_defaults()->group("Failures and goodput (one layout; docs/planner.md, \"Goodput\")");
  GoodputOptions& g = o->goodput;
  plan->add_option("--mtbf-hours", g.mtbf_hours,
                   "mean time between failures of one node (or one GPU, --mtbf-per gpu) in hours: "
                   "prints the expected interruptions, the optimal checkpoint interval (Young/Daly), "
                   "the goodput, the time to train with failures and the downtime's cost");
  plan->add_option("--mtbf-per", g.mtbf_per, "what --mtbf-hours counts: node (default) or gpu");
  plan->add_flag("--goodput", o->goodput_flag,
                 "the goodput with the cluster preset's MTBF (a published fleet figure, where it has one)");
  plan->add_option("--storage-gbps", g.storage_write_gbps,
                   "GB/s the whole job writes a checkpoint at (default: the cluster preset's "
                   "storage_write_gbps)");
  plan->add_option("--storage-read-gbps", g.storage_read_gbps,
                   "GB/s a restart reads the checkpoint at (default: the preset's, else the write rate)");
  plan->add_option("--restart-s", g.relaunch_s,
                   "seconds to relaunch the job after a failure, the checkpoint read aside (default: "
                   "the preset's relaunch_s, else 600, ASSUMED)");
  plan->add_option("--checkpoint-interval-steps", g.interval_steps,
                   "evaluate this checkpoint interval (steps) instead of Daly's optimum");
}

// What `plan` does with the inputs: one layout, a search or a sweep.
void AddModeOptions(CLI::App* plan, PlanOptions* o) {
  plan->add_option("--sweep", o->sweep,
                   "instead of --gpus: GPU counts to sweep, e.g. 8,16,32 (best layout at each)")
      ->delimiter(',')
      ->group(kRequiredGroup);
  plan->option_defaults()->group("What to do (without these: the one layout the flags give)");
  plan->add_flag("--search", o->search,
                 "search every valid layout; the given layout flags are held fixed");
  plan->add_option("--top", o->top, "layouts to list with --search")->capture_default_str();
  plan->add_option("--plot", o->plot, "with --sweep: write an SVG plot to this file");
  plan->add_flag("--json", o->json, "print JSON (schema in docs/planner.md)");
}

// `plan --help` opens with these, then the required flags.
constexpr const char* kPlanExamples =
    "  scaletrain plan --model llama2-7b --cluster dgx-h100 --gpus 64 --tp 2 --pp 2\n"
    "      one layout: step time, MFU, memory per GPU, time and cost to train\n"
    "  scaletrain plan --model gpt3-175b --cluster dgx-a100 --gpus 1024 --search\n"
    "      the fastest layouts that fit, and why each (tp, pp) family ranks where it does\n"
    "  scaletrain plan --model gpt2-1.5b --cluster pcie-h100-100gbe --sweep 8,16,32,64,128 "
    "--global-batch 128 "
    "--plot sweep.svg\n"
    "      the best layout at each GPU count, and where more GPUs stop helping\n"
    "Planning a `scaletrain train` config instead of a preset: --train-config FILE (and --hardware "
    "PROFILE from "
    "`scaletrain bench`).";

// `plan validate FILE.csv`.
CLI::App* AddValidateCommand(CLI::App* plan, PlanOptions* o) {
  auto* validate =
      plan->add_subcommand("validate", "predict published runs from a CSV and report the error");
  validate
      ->add_option("file", o->validate_csv, "CSV of published runs (tests/plan/published-runs.csv)")
      ->required();
  validate->add_flag("--json", o->json,
                     "print JSON: rows, mape, the ranges' coverage and half-width");
  AddUncertaintyOptions(validate, o);
  validate->add_option(
      "--stack", o->stack,
      "software stack of the rows without a `stack` column value (a stack of configs/stacks or "
      "--stack-file, by name or alias); default modern. A row's notes never choose its stack");
  AddFileOptions(validate, o);
  return validate;
}

// What `plan` or `plan validate` printed (all of it) and how it ended.
using PlanDone = std::function<void(const Status& status, const std::string& out)>;

// `plan` and `plan validate` on `app`, each calling `done` once it has run:
// the binary and RunPlanCommand register the same flags through here.
CLI::App* AddPlanCommand(CLI::App& app, const PlanDone& done) {
  auto o = std::make_shared<PlanOptions>();
  auto* plan = app.add_subcommand("plan",
                                  "predict step time, memory, MFU and cost of training a model on "
                                  "a GPU cluster; search layouts");
  AddInputOptions(plan, o.get());
  AddLayoutOptions(plan, o.get());
  plan->add_option("--bucket-mb", o->bucket_mb,
                   "gradient bucket size in MiB (the trainer's parallel.bucket_mb; default: the "
                   "stack's, e.g. Megatron-Core's max(40 M, 1 M x dp) parameters on modern, 25 MiB "
                   "on cpu)");
  plan->add_option(
      "--precision", o->precision,
      "bf16, fp16, fp8, tf32, fp32 (default bf16; with --train-config its training.precision)");
  plan->add_option(
      "--grad-reduce", o->grad_reduce,
      "dtype of the data-parallel gradient reduction and buffer: fp32, compute (the 16-bit compute "
      "precision) or auto (default: the stack's; fp32 except Megatron-LM's fp16)");
  plan->add_option("--schedule", o->schedule,
                   "pipeline schedule: gpipe, 1f1b, interleaved, zb-h1, zb-v (with --vpp 2; "
                   "zb-*: cpu stack)");
  AddModeOptions(plan, o.get());
  AddCommunicationAndVariantOptions(plan, o.get());
  AddUncertaintyOptions(plan, o.get());
  AddSizingOptions(plan, o.get());
  AddGoodputOptions(plan, o.get());
  CLI::App* validate = AddValidateCommand(plan, o.get());
  SetHelpExamples(plan, kPlanExamples);
  validate->callback([o, done] {
    std::string out;
    Status st = RunValidate(*o, &out);
    done(st, out);
  });
  plan->callback([o, done, validate] {
    if (validate->parsed()) return;
    std::string out;
    Status st = RunPlan(*o, &out);
    done(st, out);
  });
  return plan;
}

void RegisterPlanCommand(CLI::App& app, int* exit_code) {
  AddPlanCommand(app, [exit_code](const Status& st, const std::string& out) {
    std::fputs(out.c_str(), stdout);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      *exit_code = 1;
    }
  });
}

Result<std::string> RunPlanCommand(const std::vector<std::string>& args) {
  CLI::App app{"scaletrain"};
  app.require_subcommand(1);
  Status status = InvalidArgument("`plan` did not run");  // replaced by its callback
  std::string out;
  AddPlanCommand(app, [&status, &out](const Status& st, const std::string& text) {
    status = st;
    out = text;
  });
  // CLI11 takes a vector of arguments last first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  reversed.push_back("plan");
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(e.what());
  }
  ST_RETURN_IF_ERROR(status);
  return out;
}

std::vector<std::string> PlanFlagNames(bool validate) {
  CLI::App app{"scaletrain"};
  CLI::App* plan = AddPlanCommand(app, [](const Status&, const std::string&) {});
  std::vector<std::string> names;
  for (const CLI::Option* opt :
       (validate ? plan->get_subcommand("validate") : plan)->get_options()) {
    for (const std::string& n : opt->get_lnames()) {
      if (n != "help") names.push_back(n);
    }
  }
  return names;
}

Result<PlanCatalogNames> ListPlanCatalogs(const std::string& config_dir) {
  PlanOptions o;
  o.config_dir = config_dir;
  HardwareCatalog cat;
  StackCatalog stacks;
  std::string dir;
  ST_RETURN_IF_ERROR(LoadCatalog(o, &cat, &stacks, &dir));
  return PlanCatalogNames{ModelPresetNames(dir), cat.ClusterNames(), cat.GpuNames(),
                          stacks.Names()};
}

}  // namespace scaletrain::cli
