#include "plan/validate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "core/strings.h"
#include "plan/model_preset.h"
#include "plan/search.h"

namespace scaletrain::plan {

namespace {

}  // namespace

namespace {

// The row's architecture columns over the model: KV heads, MLP width. Fewer
// KV heads than query heads, or an activation other than GeLU, makes the
// blocks Llama-style (RoPE, RMSNorm, no biases; untied unless the row says
// tied), as the modern models that use them are built.
Status ApplyArchitectureColumns(const PublishedRun& run, ModelSpec* spec) {
  if (run.kv_heads > 0) spec->n_kv_head = run.kv_heads;
  if (spec->n_kv_head != spec->n_head && spec->arch != Arch::kLlama) {
    spec->activation_given = spec->activation_given.value_or(spec->activation());  // GeLU stays
    spec->arch = Arch::kLlama;
  }
  if (run.ffn_hidden > 0) spec->ffn_hidden = run.ffn_hidden;
  if (run.activation) {
    spec->activation_given = *run.activation;
    if (*run.activation != Activation::kGelu) spec->arch = Arch::kLlama;
  }
  if (run.tied_embeddings) spec->tied_given = *run.tied_embeddings;
  return ValidateModelSpec(*spec).WithContext(run.id);
}

// The preset a row's model names, as runs write it ("Llama 3.1 8B",
// "meta-llama-3-70b", "GPT-3 175B" -> llama3-8b, llama3-70b, gpt3-175b): a
// Llama 3.x model has Llama 3's architecture at these sizes.
std::string PresetKey(const std::string& model) {
  std::string key = NameKey(model);
  auto replace = [&key](const std::string& from, const std::string& to) {
    if (key.starts_with(from)) key = to + key.substr(from.size());
  };
  replace("meta-", "");
  replace("llama-", "llama"), replace("gpt-", "gpt"), replace("qwen-", "qwen");
  for (const char* minor : {"llama3.1", "llama3.2", "llama3.3"}) replace(minor, "llama3");
  // Hugging Face repository names ("Llama-2-13b-hf", "Mistral-7B-v0.1",
  // "Nemotron-4-340B-Base"): the suffixes name a release, not another shape.
  for (bool cut = true; cut;) {
    cut = false;
    for (const char* suffix : {"-hf", "-base"}) {
      if (key.ends_with(suffix)) key.resize(key.size() - std::string(suffix).size()), cut = true;
    }
    const size_t v = key.rfind("-v");
    if (v != std::string::npos && v + 2 < key.size() &&
        key.find_first_not_of("0123456789.", v + 2) == std::string::npos) {
      key.resize(v), cut = true;
    }
  }
  return key;
}

// The model: a preset when the row names one, else GPT-style blocks from the
// dimension columns (the CSV README's rule), with the row's architecture
// columns and sequence length.
Result<ModelSpec> RunModel(const PublishedRun& run, const std::string& config_dir,
                           int64_t* preset_global_batch) {
  ModelSpec spec;
  std::error_code ec;
  const auto preset = [&](const std::string& name) {
    return std::filesystem::exists(std::filesystem::path(config_dir) / "models" / (name + ".toml"), ec);
  };
  const std::string name = preset(run.model) ? run.model : PresetKey(run.model);
  if (preset(name)) {
    ST_ASSIGN_OR_RETURN(ModelPreset p, LoadModel(name, config_dir));
    spec = p.spec;
    *preset_global_batch = p.global_batch;
  } else if (run.layers > 0 && run.hidden > 0 && run.heads > 0 && run.vocab > 0) {
    ST_ASSIGN_OR_RETURN(
        spec, GptSpecFromDims(run.model, run.layers, run.hidden, run.heads, run.seq, run.vocab));
  } else {
    return NotFound(UnknownNameMessage("model preset", run.model, ModelPresetNames(config_dir)) +
                    "; or define the model by the row's layers, hidden, heads and vocab columns");
  }
  if (run.seq > 0) spec.block_size = run.seq;
  ST_RETURN_IF_ERROR(ApplyArchitectureColumns(run, &spec));
  ST_RETURN_IF_ERROR(WithinPlannerBounds(spec).WithContext(run.id));
  return spec;
}

// What a row's source and notes mention of software other than `stack`, for
// a person to act on ("'fsdp' (pytorch)"); "" for nothing.
std::string StackHint(const PublishedRun& run, const StackCatalog& stacks, const std::string& stack) {
  std::string hint;
  for (const StackCatalog::Mention& m : stacks.Mentions(run.source + " ; " + run.notes)) {
    if (m.stack != stack) hint += (hint.empty() ? "" : ", ") + ("'" + m.word + "' (" + m.stack + ")");
  }
  return hint;
}

// The software the run used: its `stack` column, else the default given,
// else modern; and where it came from (ValidationRow::stack_from). The rows
// of tests/plan each say which (docs/planner.md). A row's notes never choose
// it: what they mention is only a hint.
Result<Software> RunSoftware(const PublishedRun& run, const StackCatalog& stacks,
                             const std::string& default_stack, ValidationRow* row) {
  std::string name = run.stack;
  row->stack_from = "column";
  if (name.empty() && !default_stack.empty()) name = default_stack, row->stack_from = "--stack";
  if (name.empty()) name = "modern", row->stack_from = "default";
  auto sw = stacks.Find(name);
  if (!sw.ok()) return sw.status().WithContext(run.id + ": stack");
  if (row->stack_from != "column") row->stack_hint = StackHint(run, stacks, sw->name);
  return sw;
}

// A stated tp x cp x pp x dp that is not the row's GPUs: the error naming the product.
Status CheckStatedGpus(const PublishedRun& run) {
  const int64_t cp = std::max<int64_t>(1, run.cp);
  if (run.tp <= 0 || run.pp <= 0 || run.dp <= 0 || run.tp * cp * run.pp * run.dp == run.num_gpus) {
    return Status::Ok();
  }
  return InvalidArgument(run.id + ": tp x cp x pp x dp = " + std::to_string(run.tp) + " x " + std::to_string(cp) +
                         " x " + std::to_string(run.pp) + " x " + std::to_string(run.dp) + " = " +
                         std::to_string(run.tp * cp * run.pp * run.dp) + ", not the row's num_gpus " +
                         std::to_string(run.num_gpus) + "; correct one, or leave dp empty to take the rest");
}

// Full recomputation of some layers (recompute_layers), which a recompute
// column of another policy contradicts.
Status SetRecomputeLayers(const PublishedRun& run, SearchOptions* o) {
  if (run.recompute_layers <= 0) return Status::Ok();
  if (o->recompute && *o->recompute != Recompute::kFull) {
    return InvalidArgument(run.id + ": recompute_layers = " + std::to_string(run.recompute_layers) +
                           " picks the layers full recomputation reruns, but recompute is " +
                           RecomputeName(*o->recompute) + "; give recompute full or leave it empty");
  }
  o->recompute = Recompute::kFull;
  o->recompute_layers = run.recompute_layers;
  return Status::Ok();
}

// The knobs the row states, held fixed in the search; the rest is searched.
// Only typed columns are read: a row's notes never set a knob.
Status SetStatedLayout(const PublishedRun& run, SearchOptions* o) {
  ST_RETURN_IF_ERROR(CheckStatedGpus(run));
  for (auto [stated, held] : {std::pair{run.tp, &o->tp}, {run.pp, &o->pp}, {run.dp, &o->dp},
                              {run.vpp, &o->vpp}, {run.micro_batch, &o->micro_batch},
                              {run.shard_group, &o->shard_group}}) {
    if (stated > 0) *held = stated;
  }
  o->cp = run.cp;
  o->sp = run.sp;
  o->recompute = run.recompute;
  o->zero = run.zero;
  o->precision = run.precision.value_or(Precision::kBF16);
  o->grad_reduce = run.grad_reduce.value_or(GradReduce::kAuto);
  return SetRecomputeLayers(run, o);
}

// What a legacy stack's runs leave unsaid, as their papers count: Narayanan
// et al.'s FLOP count assumes full recomputation (their appendix), and
// neither stack had sequence parallelism unless the row says so.
void SetLegacyConventions(SearchOptions* o) {
  if (!o->recompute) o->recompute = Recompute::kFull;
  if (!o->sp) o->sp = false;
}

// The knobs of the predicted layout `l` the row leaves unstated, where they
// have a choice on the stack: into row->assumed those a legacy stack's
// conventions set, into row->searched the rest.
void NoteUnstatedKnobs(const PublishedRun& run, const Layout& l, const Software& sw, ValidationRow* row) {
  const bool legacy = sw.legacy_conventions;
  const struct {
    const char* name;
    bool stated, open, convention;
  } knobs[] = {{"tp", run.tp > 0, true, false},
               {"pp", run.pp > 0, true, false},
               {"vpp", run.vpp > 0, l.pp > 1 && sw.interleaved_schedule, false},
               {"mb", run.micro_batch > 0, true, false},
               {"zero", run.zero.has_value(), l.dp * l.cp > 1, false},
               {"rc", run.recompute.has_value() || run.recompute_layers > 0, true, legacy},
               {"sp", run.sp.has_value(), l.tp > 1, legacy}};
  for (const auto& k : knobs) {
    if (!k.stated && k.open) (k.convention ? row->assumed : row->searched).push_back(k.name);
  }
}

// Compares the prediction on the figure the source measured: step time,
// tokens/s, TFLOP/s per GPU (with recomputation for the legacy stacks, as
// they counted) or MFU, the first the row has.
Status CompareMeasured(const PublishedRun& run, bool legacy, ValidationRow* row) {
  const Prediction& p = row->prediction;
  if (run.step_s > 0) {
    // At the stated batch where the layout ran a nearby one (RunnableGlobalBatch).
    const int64_t stated = run.global_batch > 0 ? run.global_batch : p.layout.global_batch;
    const double batches = static_cast<double>(stated) / static_cast<double>(p.layout.global_batch);
    row->metric = "step_s", row->measured = run.step_s, row->predicted = p.step_time_s * batches;
  } else if (run.tokens_per_s > 0) {
    row->metric = "tokens_per_s", row->measured = run.tokens_per_s, row->predicted = p.tokens_per_s;
  } else if (run.tflops_per_gpu > 0) {
    row->metric = "tflops_per_gpu", row->measured = run.tflops_per_gpu;
    row->predicted = legacy ? p.hw_tflops_per_gpu : p.tflops_per_gpu;
  } else if (run.mfu > 0) {
    row->metric = "mfu", row->measured = run.mfu, row->predicted = p.mfu;
  } else {
    return InvalidArgument(run.id +
                           ": the row has no measured step time, tokens/s, TFLOP/s or MFU");
  }
  row->error_pct = 100.0 * (row->predicted - row->measured) / row->measured;
  return Status::Ok();
}

// The row's range in its metric's units: the step time's range as the
// metric reads it (a step time scales with it, a throughput inversely).
Status SetRange(const ModelSpec& spec, const ClusterSpec& cluster, const Software& sw,
                const UncertaintyOverride& spans, ValidationRow* row) {
  ST_ASSIGN_OR_RETURN(const Uncertainty u, UncertaintyFor(cluster, spans));
  const Prediction& p = row->prediction;
  ST_ASSIGN_OR_RETURN(const auto range, StepTimeRange(spec, cluster, sw, p.layout, u));
  const auto [fast, slow] = range;
  const double t = p.step_time_s;
  if (row->metric == "step_s") {
    row->predicted_lo = row->predicted * fast / t, row->predicted_hi = row->predicted * slow / t;
  } else {
    row->predicted_lo = row->predicted * t / slow, row->predicted_hi = row->predicted * t / fast;
  }
  row->in_range = row->predicted_lo <= row->measured && row->measured <= row->predicted_hi;
  return Status::Ok();
}

}  // namespace

namespace {

// The row's cluster: the one it names, whose GPU must be the row's, else the
// GPU's reference cluster.
Result<ClusterSpec> RunCluster(const PublishedRun& run, const HardwareCatalog& catalog) {
  if (run.cluster.empty()) return catalog.ClusterForGpu(run.gpu);
  ST_ASSIGN_OR_RETURN(ClusterSpec cluster, catalog.Cluster(run.cluster));
  ST_ASSIGN_OR_RETURN(GpuSpec gpu, catalog.Gpu(run.gpu));
  if (cluster.gpu.name != gpu.name) {
    return InvalidArgument(run.id + ": cluster '" + run.cluster + "' has GPU '" + cluster.gpu.name +
                           "', not the row's '" + run.gpu + "'; name a cluster of " + gpu.name +
                           " GPUs or leave the cluster column empty for its reference cluster");
  }
  return cluster;
}

// The global batch nearest the stated one that the stated layout splits
// evenly: a multiple of dp x micro-batch where the row fixes dp (stated, or
// the GPUs over stated tp x cp x pp) and of dp alone without a micro-batch,
// if within 10% of it; else, or where the row fixes no dp, the stated batch.
int64_t RunnableGlobalBatch(const SearchOptions& o) {
  int64_t dp = o.dp.value_or(0);
  if (dp == 0 && o.tp && o.pp) {
    const int64_t model_ranks = *o.tp * *o.pp * o.cp;
    if (model_ranks > 0 && o.num_gpus % model_ranks == 0) dp = o.num_gpus / model_ranks;
  }
  if (dp <= 0) return o.global_batch;
  const int64_t unit = dp * o.micro_batch.value_or(1);
  const int64_t below = o.global_batch / unit * unit;
  const int64_t nearest =
      below > 0 && o.global_batch - below <= below + unit - o.global_batch ? below : below + unit;
  // A batch more than 10% away is another run, not a rounding.
  return std::llabs(nearest - o.global_batch) * 10 <= o.global_batch ? nearest : o.global_batch;
}

// Why no layout holds a row's stated knobs: the error `plan` gives for them
// (the stated sizes, the rest at plan's defaults), else a generic one.
Status NoLayoutError(const PublishedRun& run, CostModel& model, const SearchOptions& o) {
  Layout l;
  l.tp = o.tp.value_or(1), l.pp = o.pp.value_or(1), l.cp = o.cp, l.vpp = o.vpp.value_or(1);
  l.dp = o.dp.value_or(std::max<int64_t>(1, o.num_gpus / std::max<int64_t>(1, l.tp * l.cp * l.pp)));
  l.micro_batch = o.micro_batch.value_or(1), l.global_batch = o.global_batch;
  l.zero = o.zero.value_or(0), l.recompute = o.recompute.value_or(Recompute::kNone);
  l.sp = o.sp.value_or(false), l.precision = o.precision, l.grad_reduce = o.grad_reduce;
  l.shard_group = o.shard_group.value_or(0), l.recompute_layers = o.recompute_layers.value_or(0);
  auto p = model.Predict(l);
  if (!p.ok()) return InvalidArgument(run.id + ": " + p.status().message());
  return InvalidArgument(run.id + ": no valid layout for the stated knobs (tp, pp, dp, cp, batch)");
}

}  // namespace

Result<ValidationRow> ValidateRun(const PublishedRun& run, const HardwareCatalog& catalog,
                                  const StackCatalog& stacks, const std::string& config_dir,
                                  const std::string& default_stack,
                                  const UncertaintyOverride& spans) {
  ValidationRow row;
  row.run = run;
  int64_t preset_batch = 0;
  ST_ASSIGN_OR_RETURN(const ModelSpec spec, RunModel(run, config_dir, &preset_batch));
  // No batch stated or measured: the one the model's preset was trained with.
  const int64_t global_batch = run.global_batch > 0 ? run.global_batch : preset_batch;
  if (global_batch <= 0) {
    return InvalidArgument(run.id + ": global_batch is empty; give it, or measured_step_s with " +
                           "measured_tokens_per_s, or a model preset that states one");
  }
  ST_ASSIGN_OR_RETURN(ClusterSpec cluster, RunCluster(run, catalog));
  const double hbm_gib = run.hbm_gib != 0 ? run.hbm_gib : StatedMemoryGib(run.gpu, cluster.gpu);
  auto gpu = GpuVariant(cluster.gpu, {run.power_cap_w, hbm_gib, run.hbm_tbps});
  if (!gpu.ok()) return gpu.status().WithContext(run.id + ": power_cap_w / hbm_gib / hbm_tbps");
  cluster.gpu = *gpu;
  ST_ASSIGN_OR_RETURN(Software sw, RunSoftware(run, stacks, default_stack, &row));
  // Legacy stacks counted TFLOP/s with the recomputed forward included.
  const bool legacy = sw.legacy_conventions;
  row.stack = sw.name;

  SearchOptions o;
  o.num_gpus = run.num_gpus;
  o.global_batch = global_batch;
  o.top_k = 1;
  ST_RETURN_IF_ERROR(SetStatedLayout(run, &o));
  if (legacy) SetLegacyConventions(&o);
  CostModel model(spec, cluster, sw);
  ST_ASSIGN_OR_RETURN(SearchResult sr, SearchLayouts(model, o));
  if (sr.top.empty() && !sr.fastest_unfit) {
    // A batch the stated layout cannot split (published batches are often
    // rounded): the nearest it can, step times scaled back to the stated one.
    const int64_t runnable = RunnableGlobalBatch(o);
    if (runnable == o.global_batch) return NoLayoutError(run, model, o);
    SearchOptions at = o;
    at.global_batch = runnable;
    ST_ASSIGN_OR_RETURN(sr, SearchLayouts(model, at));
    if (sr.top.empty() && !sr.fastest_unfit) return NoLayoutError(run, model, o);
  }
  row.fits = !sr.top.empty();
  row.prediction = row.fits ? sr.top[0] : *sr.fastest_unfit;
  NoteUnstatedKnobs(run, row.prediction.layout, sw, &row);
  ST_RETURN_IF_ERROR(CompareMeasured(run, legacy, &row));
  ST_RETURN_IF_ERROR(SetRange(spec, cluster, sw, spans, &row));
  return row;
}

Result<ValidationReport> ValidateFile(const std::string& csv_path, const HardwareCatalog& catalog,
                                      const StackCatalog& stacks, const std::string& config_dir,
                                      const std::string& default_stack,
                                      const UncertaintyOverride& spans) {
  ValidationReport rep;
  ST_ASSIGN_OR_RETURN(std::vector<PublishedRun> runs,
                      ReadPublishedRuns(csv_path, &rep.ignored_columns));
  double sum = 0;
  int64_t n = 0;
  for (const auto& run : runs) {
    auto r = run.error.empty() ? ValidateRun(run, catalog, stacks, config_dir, default_stack, spans)
                               : Result<ValidationRow>(InvalidArgument(run.error));
    if (!r.ok()) {
      ValidationRow bad;
      bad.run = run;
      bad.error = r.status().message();
      rep.rows.push_back(bad);
      continue;
    }
    sum += std::fabs(r->error_pct);
    rep.max_abs_error = std::max(rep.max_abs_error, std::fabs(r->error_pct));
    ++n;
    rep.rows.push_back(*r);
  }
  if (n == 0) {
    const std::string first = rep.rows.empty() ? "the file has no rows"
                                               : "the first: " + rep.rows[0].error;
    return InvalidArgument(csv_path + ": no row could be predicted (" + first + ")");
  }
  rep.mape = sum / static_cast<double>(n);
  SetRangeSummary(&rep);
  return rep;
}

void SetRangeSummary(ValidationReport* rep) {
  double inside = 0, half_widths = 0, n = 0;
  for (const ValidationRow& row : rep->rows) {
    if (!row.error.empty()) continue;
    inside += row.in_range ? 1 : 0;
    half_widths += 100.0 * (row.predicted_hi - row.predicted_lo) / 2.0 / row.predicted;
    n += 1;
  }
  rep->coverage = n > 0 ? inside / n : 0;
  rep->mean_half_width_pct = n > 0 ? half_widths / n : 0;
}

}  // namespace scaletrain::plan
