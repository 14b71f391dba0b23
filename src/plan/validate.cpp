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

bool Contains(const std::string& hay, const std::string& needle) {
  return Lower(hay).find(Lower(needle)) != std::string::npos;
}

// The ZeRO stage a row's notes name: "ZeRO-3", "ZeRO stage 2", "zero1",
// FSDP's FULL_SHARD / HYBRID_SHARD (HSDP) -> 3 and SHARD_GRAD_OP -> 2,
// Megatron's distributed optimizer -> 1; the first named wins.
std::optional<int> ZeroStageNamedIn(const std::string& notes) {
  const std::string n = Lower(notes);
  size_t first = std::string::npos;
  int stage = -1;
  auto named = [&](size_t at, int s) {
    if (at != std::string::npos && at < first) first = at, stage = s;
  };
  for (size_t at = n.find("zero"); at != std::string::npos; at = n.find("zero", at + 4)) {
    size_t i = at + 4;
    if (i < n.size() && (n[i] == '-' || n[i] == '_' || n[i] == ' ')) ++i;
    if (n.compare(i, 5, "stage") == 0) i += 5;
    if (i < n.size() && n[i] == ' ') ++i;
    const bool word_start = at == 0 || !std::isalnum(static_cast<unsigned char>(n[at - 1]));
    const bool one_digit =
        i < n.size() && n[i] >= '0' && n[i] <= '3' &&
        (i + 1 == n.size() || !std::isdigit(static_cast<unsigned char>(n[i + 1])));
    if (word_start && one_digit) named(at, n[i] - '0');
  }
  for (const char* three : {"full_shard", "hybrid_shard", "hsdp"}) named(n.find(three), 3);
  named(n.find("shard_grad_op"), 2);
  named(n.find("distributed optimizer"), 1);
  named(n.find("distributed-optimizer"), 1);
  if (stage < 0) return std::nullopt;
  return stage;
}

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

// The knobs the row states, held fixed in the search; the rest is searched.
Status SetStatedLayout(const PublishedRun& run, SearchOptions* o) {
  if (run.tp > 0) o->tp = run.tp;
  if (run.pp > 0) o->pp = run.pp;
  if (run.dp > 0) o->dp = run.dp;
  if (run.vpp > 0) o->vpp = run.vpp;
  o->cp = run.cp;
  const int64_t cp = std::max<int64_t>(1, run.cp);
  if (run.tp > 0 && run.pp > 0 && run.dp > 0 && run.tp * cp * run.pp * run.dp != run.num_gpus) {
    return InvalidArgument(
        run.id + ": tp x cp x pp x dp = " + std::to_string(run.tp) + " x " + std::to_string(cp) +
        " x " + std::to_string(run.pp) + " x " + std::to_string(run.dp) + " = " +
        std::to_string(run.tp * cp * run.pp * run.dp) + ", not the row's num_gpus " +
        std::to_string(run.num_gpus) + "; correct one, or leave dp empty to take the rest");
  }
  // Hybrid sharding: the shard_group column, else FSDP's HYBRID_SHARD named
  // in the notes (HSDP), which shards within a node.
  if (run.shard_group > 0) {
    o->shard_group = run.shard_group;
  } else if (Contains(run.notes, "HSDP") || Contains(run.notes, "HYBRID_SHARD")) {
    o->shard_in_node = true;
  }
  if (run.micro_batch > 0) o->micro_batch = run.micro_batch;
  if (run.sp) o->sp = *run.sp;
  if (run.recompute) o->recompute = *run.recompute;
  if (run.recompute_layers > 0) {
    if (o->recompute && *o->recompute != Recompute::kFull) {
      return InvalidArgument(
          run.id + ": recompute_layers = " + std::to_string(run.recompute_layers) +
          " picks the layers full recomputation reruns, but recompute is " +
          RecomputeName(*o->recompute) + "; give recompute full or leave it empty");
    }
    o->recompute = Recompute::kFull;
    o->recompute_layers = run.recompute_layers;
  }
  return Status::Ok();
}

// Precision, gradient reduction and ZeRO stage, from the notes and the
// source.
void SetStatedStack(const PublishedRun& run, bool legacy, SearchOptions* o) {
  // The compute precision where the notes state it (Narayanan et al. 2021's
  // rows say fp16: their released scripts, Megatron-LM examples/sc21/CONFIG.sh,
  // pass --fp16), bf16 otherwise. The A100 and H100 rates are the same for
  // both; the gradient buffer and its reduction are not (GradReduceFor).
  if (run.precision) {
    o->precision = *run.precision;
  } else if (Contains(run.notes, "fp16")) {
    o->precision = Precision::kFP16;
  }
  // Composer's FSDP mixed precision (the MosaicML rows' `prec=.../DEFAULT`
  // or `/PURE`): DEFAULT reduces gradients in fp32, PURE in the compute
  // precision.
  if (Contains(run.notes, "/PURE")) o->grad_reduce = GradReduce::kCompute;
  if (Contains(run.notes, "/DEFAULT")) o->grad_reduce = GradReduce::kFp32;
  // PyTorch FSDP's MixedPrecision(reduce_dtype=...), as runs state it.
  for (const char* bf16 :
       {"reduce_dtype=bf16", "reduce_dtype=bfloat16", "reduce_dtype=torch.bfloat16"}) {
    if (Contains(run.notes, bf16)) o->grad_reduce = GradReduce::kCompute;
  }
  for (const char* fp32 :
       {"reduce_dtype=fp32", "reduce_dtype=float32", "reduce_dtype=torch.float32"}) {
    if (Contains(run.notes, fp32)) o->grad_reduce = GradReduce::kFp32;
  }
  if (run.grad_reduce) o->grad_reduce = *run.grad_reduce;
  if (run.zero) {
    o->zero = *run.zero;
  } else if (const std::optional<int> stage = ZeroStageNamedIn(run.notes)) {
    o->zero = stage;
  }
  if (legacy) {
    // Narayanan et al.'s FLOP count assumes full recomputation (their
    // appendix); neither stack had sequence parallelism or ZeRO beyond what
    // the notes say.
    if (!o->recompute) o->recompute = Recompute::kFull;
    if (!o->sp) o->sp = false;
    if (!o->zero) o->zero = 0;
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
                                  const std::string& default_stack) {
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
  SetStatedStack(run, legacy, &o);
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
  ST_RETURN_IF_ERROR(CompareMeasured(run, legacy, &row));
  return row;
}

Result<ValidationReport> ValidateFile(const std::string& csv_path, const HardwareCatalog& catalog,
                                      const StackCatalog& stacks, const std::string& config_dir,
                                      const std::string& default_stack) {
  ValidationReport rep;
  ST_ASSIGN_OR_RETURN(std::vector<PublishedRun> runs,
                      ReadPublishedRuns(csv_path, &rep.ignored_columns));
  double sum = 0;
  int64_t n = 0;
  for (const auto& run : runs) {
    auto r = run.error.empty() ? ValidateRun(run, catalog, stacks, config_dir, default_stack)
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
  return rep;
}

}  // namespace scaletrain::plan
