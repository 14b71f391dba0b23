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

// Splits CSV text into records of fields (quotes may hold commas, newlines, "").
Result<std::vector<std::vector<std::string>>> ParseCsv(const std::string& text,
                                                       const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"', ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = true, any = true;
    } else if (c == ',') {
      row.push_back(std::move(field)), field.clear(), any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) row.push_back(std::move(field));
      if (!row.empty()) rows.push_back(std::move(row));
      row.clear(), field.clear(), any = false;
    } else {
      field += c, any = true;
    }
  }
  if (quoted) return DataLoss(path + ": unterminated quoted field");
  if (any || !field.empty()) row.push_back(std::move(field));
  if (!row.empty()) rows.push_back(std::move(row));
  return rows;
}

}  // namespace

namespace {

// One record of the CSV, its fields looked up by column name.
struct CsvRecord {
  const std::map<std::string, size_t>& col;
  const std::vector<std::string>& fields;
  std::string where;

  bool Has(const char* name) const { return col.count(name) != 0; }
  // The field without spaces at either end ("" where the row is short).
  std::string Get(const char* name) const {
    const size_t i = col.at(name);
    return i < fields.size() ? Trim(fields[i]) : std::string();
  }
  // An empty field, or one that says the value is not known ("n/a", "-",
  // "?", "unknown"), leaves *out as it is.
  // A number as tables write it: surrounding spaces, a leading "~" (an
  // approximate value), thousands separators ("3,760") and a trailing "%"
  // (a percentage: / 100) are read, and a range ("38-43%", "150 to 160")
  // is its middle; anything else is not a number.
  Status Number(const char* name, double* out) const {
    const std::string given = Get(name);
    if (NotStated(given)) return Status::Ok();
    if (const std::optional<std::pair<std::string, std::string>> range = RangeEnds(given)) {
      double lo = 0, hi = 0;
      if (ParseNumber(name, range->first, &lo).ok() && ParseNumber(name, range->second, &hi).ok()) {
        *out = 0.5 * (lo + hi);
        return Status::Ok();
      }
    }
    return ParseNumber(name, given, out);
  }
  static bool NotStated(const std::string& given) {
    return IsOneOf(Lower(given), {"n/a", "na", "-", "--", "\xe2\x80\x94", "\xe2\x80\x93", "?",
                                  "none", "unknown", "tbd", "nan"});
  }
  // "38-43%" -> ("38%", "43%"), "150 to 160" -> ("150", "160"): a "-", an en
  // dash or "to" between two parts (a unit at the end applies to both).
  static std::optional<std::pair<std::string, std::string>> RangeEnds(const std::string& given) {
    for (const char* sep : {" to ", "\xe2\x80\x93", "-"}) {
      const size_t at = given.find(sep, 1);
      if (at == std::string::npos) continue;
      std::string lo = Trim(given.substr(0, at)),
                  hi = Trim(given.substr(at + std::string(sep).size()));
      if (lo.empty() || hi.empty()) continue;
      if (hi.back() == '%' && lo.back() != '%') lo += '%';
      return std::pair{lo, hi};
    }
    return std::nullopt;
  }
  Status ParseNumber(const char* name, const std::string& given, double* out) const {
    std::string v = given;
    if (!v.empty() && v[0] == '~') v = Trim(v.substr(1));
    const bool percent = !v.empty() && v.back() == '%';
    if (percent) v.pop_back();
    if (ThousandsSeparated(v)) v.erase(std::remove(v.begin(), v.end(), ','), v.end());
    if (v.empty()) {
      if (given.empty()) return Status::Ok();
      return InvalidArgument(where + ": column " + name + " = '" + given + "' is not a number");
    }
    try {
      size_t used = 0;
      *out = std::stod(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
    } catch (const std::exception&) {
      return InvalidArgument(where + ": column " + name + " = '" + given + "' is not a number");
    }
    if (percent) *out /= 100.0;
    return Status::Ok();
  }
  // "3,760" or "1,234,567.5": digits in groups of three after the first.
  static bool ThousandsSeparated(const std::string& v) {
    const size_t dot = v.find('.');
    const std::string whole = v.substr(0, dot);
    if (whole.find(',') == std::string::npos) return false;
    size_t group = 0;
    bool first = true;
    for (size_t i = 0; i < whole.size(); ++i) {
      const char c = whole[i];
      if (c == ',') {
        if ((first && (group == 0 || group > 3)) || (!first && group != 3)) return false;
        first = false, group = 0;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        ++group;
      } else {
        return false;
      }
    }
    return group == 3;
  }
  Status Integer(const char* name, int64_t* out) const {
    double d = 0;
    ST_RETURN_IF_ERROR(Number(name, &d));
    if (d != std::floor(d)) return InvalidArgument(where + ": column " + name + " must be a whole number");
    // Beyond int64 the cast below is undefined behaviour, not a large count.
    if (!(std::fabs(d) < 9223372036854775808.0)) {
      return InvalidArgument(where + ": column " + name + " = '" + Get(name) +
                             "' is too large for a count; give a whole number below 2^63");
    }
    *out = static_cast<int64_t>(d);
    return Status::Ok();
  }
};

// An optional integer column: empty leaves `out` as it is; a value outside
// [lo, hi] is one error naming the column, what it should be and the fix.
Status OptionalInteger(const CsvRecord& r, const char* column, int64_t lo, int64_t hi, const char* should_be,
                       const char* fix, int64_t* out) {
  if (!r.Has(column) || r.Get(column).empty()) return Status::Ok();
  ST_RETURN_IF_ERROR(r.Integer(column, out));
  if (*out < lo || *out > hi) {
    return InvalidArgument(r.where + ": column " + column + " = " + std::to_string(*out) + " is not " +
                           should_be + "; " + fix);
  }
  return Status::Ok();
}

// A precision as tables write it ("BF16", "bfloat16", "amp_bf16", "FP8
// (Transformer Engine)", "mixed fp16"): the precision its words name, FP8
// before the 16-bit formats (FP8 runs keep bf16 around the FP8 GEMMs); "" for
// none.
std::string PrecisionNamedIn(const std::string& given) {
  const std::vector<std::string> words = LowerWords(given);
  if (AnyWordIn(words, {"fp8", "float8", "e4m3"})) return "fp8";
  if (AnyWordIn(words, {"bf16", "bfloat16"})) return "bf16";
  if (AnyWordIn(words, {"fp16", "float16", "half"})) return "fp16";
  if (AnyWordIn(words, {"tf32"})) return "tf32";
  if (AnyWordIn(words, {"fp32", "float32"})) return "fp32";
  return "";
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

// The optional columns (ReadOptionalColumns).
constexpr const char* kOptionalColumns[] = {"stack",
                                            "cluster",
                                            "activation",
                                            "tied_embeddings",
                                            "kv_heads",
                                            "ffn_hidden",
                                            "power_cap_w",
                                            "hbm_gib",
                                            "hbm_tbps",
                                            "precision",
                                            "cp",
                                            "shard_group",
                                            "recompute_layers",
                                            "zero"};

bool IsOptionalColumn(const std::string& name) {
  return std::ranges::find(kOptionalColumns, name) != std::end(kOptionalColumns);
}

// Other names tables give the optional columns (Hugging Face config names,
// Megatron flags), read where the column itself is absent.
const std::map<std::string, std::string>& ColumnSynonyms() {
  static const std::map<std::string, std::string> synonyms = {
      {"framework", "stack"},
      {"software", "stack"},
      {"software_stack", "stack"},
      {"num_kv_heads", "kv_heads"},
      {"num_key_value_heads", "kv_heads"},
      {"n_kv_heads", "kv_heads"},
      {"num_query_groups", "kv_heads"},
      {"kv_head", "kv_heads"},
      {"intermediate_size", "ffn_hidden"},
      {"ffn_hidden_size", "ffn_hidden"},
      {"ffn_dim", "ffn_hidden"},
      {"zero_stage", "zero"},
      {"context_parallel", "cp"},
      {"tie_word_embeddings", "tied_embeddings"}};
  return synonyms;
}

bool IsColumnSynonym(const std::string& name) { return ColumnSynonyms().count(name) > 0; }

// Points each absent optional column at a synonym the header has.
void ReadColumnSynonyms(std::map<std::string, size_t>* col) {
  for (const auto& [synonym, column] : ColumnSynonyms()) {
    const auto it = col->find(synonym);
    if (it != col->end() && !col->count(column)) (*col)[column] = it->second;
  }
}

// The optional columns: the stack, the cluster, the architecture, the GPU
// variant, the precision, cp, hybrid sharding, partial recomputation and the
// ZeRO stage.
Status ReadOptionalColumns(const CsvRecord& r, PublishedRun* run) {
  if (r.Has("stack")) run->stack = Lower(r.Get("stack"));
  if (r.Has("cluster")) run->cluster = Lower(r.Get("cluster"));
  if (r.Has("activation")) run->activation = Lower(r.Get("activation"));
  if (r.Has("tied_embeddings")) run->tied_embeddings = Lower(r.Get("tied_embeddings"));
  if (r.Has("kv_heads")) ST_RETURN_IF_ERROR(r.Integer("kv_heads", &run->kv_heads));
  if (r.Has("ffn_hidden")) ST_RETURN_IF_ERROR(r.Integer("ffn_hidden", &run->ffn_hidden));
  if (r.Has("power_cap_w")) ST_RETURN_IF_ERROR(r.Number("power_cap_w", &run->power_cap_w));
  if (r.Has("hbm_gib")) ST_RETURN_IF_ERROR(r.Number("hbm_gib", &run->hbm_gib));
  if (r.Has("hbm_tbps")) ST_RETURN_IF_ERROR(r.Number("hbm_tbps", &run->hbm_tbps));
  if (r.Has("precision") && !r.Get("precision").empty()) {
    run->precision = PrecisionNamedIn(r.Get("precision"));
    if (run->precision.empty()) {
      return InvalidArgument(r.where + ": column precision = '" + r.Get("precision") +
                             "'; give bf16, fp16, fp8, fp32 or tf32 (or leave it empty for bf16)");
    }
  }
  constexpr int64_t kAny = std::numeric_limits<int64_t>::max();
  ST_RETURN_IF_ERROR(OptionalInteger(r, "cp", 1, run->num_gpus > 0 ? run->num_gpus : kAny, "a rank count",
                                     "give 1 to num_gpus (or leave it empty)", &run->cp));
  ST_RETURN_IF_ERROR(OptionalInteger(r, "shard_group", 2, kAny, "a sharding group",
                                     "give the data-parallel ranks each group shards over, >= 2 (or "
                                     "leave it empty: one group of all)",
                                     &run->shard_group));
  ST_RETURN_IF_ERROR(OptionalInteger(r, "recompute_layers", 1, kAny, "a layer count",
                                     "give the layers of each chunk that recompute, >= 1 (or leave it empty)",
                                     &run->recompute_layers));
  // The stage as a number or as the notes would name it ("ZeRO-1", "stage 2", "FULL_SHARD").
  const std::string zero = r.Has("zero") ? Lower(r.Get("zero")) : "";
  const std::optional<int> named =
      zero.empty()
          ? std::nullopt
          : ZeroStageNamedIn(zero.find("zero") == std::string::npos ? "zero " + zero : zero);
  if (named) {
    run->zero = *named;
  } else {
    ST_RETURN_IF_ERROR(OptionalInteger(r, "zero", 0, 3, "a ZeRO stage",
                                       "give 0, 1, 2 or 3 (or leave it empty to search)",
                                       &run->zero));
  }
  return Status::Ok();
}

Result<PublishedRun> ReadRun(const CsvRecord& r) {
  PublishedRun run;
  run.id = r.Get("id"), run.source = r.Get("source"), run.model = r.Get("model"), run.gpu = r.Get("gpu");
  run.notes = r.Get("notes"), run.sp = Lower(r.Get("sp")), run.recompute = Lower(r.Get("recompute"));
  ST_RETURN_IF_ERROR(r.Number("params_b", &run.params_b));
  for (auto [name, out] : {std::pair{"layers", &run.layers},
                           {"hidden", &run.hidden},
                           {"heads", &run.heads},
                           {"seq", &run.seq},
                           {"vocab", &run.vocab},
                           {"num_gpus", &run.num_gpus},
                           {"tp", &run.tp},
                           {"pp", &run.pp},
                           {"dp", &run.dp},
                           {"vpp", &run.vpp},
                           {"micro_batch", &run.micro_batch},
                           {"global_batch", &run.global_batch}}) {
    ST_RETURN_IF_ERROR(r.Integer(name, out));
  }
  ST_RETURN_IF_ERROR(r.Number("measured_tflops_per_gpu", &run.tflops_per_gpu));
  ST_RETURN_IF_ERROR(r.Number("measured_mfu", &run.mfu));
  ST_RETURN_IF_ERROR(r.Number("measured_step_s", &run.step_s));
  ST_RETURN_IF_ERROR(r.Number("measured_tokens_per_s", &run.tokens_per_s));
  ST_RETURN_IF_ERROR(ReadOptionalColumns(r, &run));
  if (run.num_gpus <= 0 || run.gpu.empty()) {
    return InvalidArgument(r.where + " (" + run.id + "): gpu and num_gpus are required");
  }
  // A batch left out but measured: tokens per second x seconds per step.
  if (run.global_batch <= 0 && run.step_s > 0 && run.tokens_per_s > 0 && run.seq > 0) {
    run.global_batch = std::max<int64_t>(
        1, std::llround(run.tokens_per_s * run.step_s / static_cast<double>(run.seq)));
  }
  if (run.global_batch < 0)
    return InvalidArgument(r.where + " (" + run.id + "): global_batch must be positive");
  return run;
}

}  // namespace

Result<std::vector<PublishedRun>> ReadPublishedRuns(const std::string& path,
                                                    std::vector<std::string>* ignored) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  // A spreadsheet's UTF-8 byte-order mark is not part of the first column's name.
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  ST_ASSIGN_OR_RETURN(auto recs, ParseCsv(text, path));
  if (recs.empty()) return DataLoss(path + " is empty; expected a header line");
  static const char* kColumns[] = {"id", "source", "model", "params_b", "layers", "hidden", "heads", "seq",
                                   "vocab", "gpu", "num_gpus", "tp", "pp", "dp", "vpp", "sp", "recompute",
                                   "micro_batch", "global_batch", "measured_tflops_per_gpu", "measured_mfu",
                                   "measured_step_s", "measured_tokens_per_s", "notes"};
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < recs[0].size(); ++i)
    col[Trim(recs[0][i])] = i;  // "id, source": names without spaces
  ReadColumnSynonyms(&col);
  for (const char* c : kColumns) {
    if (!col.count(c)) return InvalidArgument(path + ": header lacks column '" + c + "'");
  }
  if (ignored != nullptr) {
    ignored->clear();
    for (const auto& [name, i] : col) {
      const bool known = std::ranges::find(kColumns, name) != std::end(kColumns);
      if (!known && !IsOptionalColumn(name) && !IsColumnSynonym(name)) ignored->push_back(name);
    }
  }
  std::vector<PublishedRun> runs;
  for (size_t r = 1; r < recs.size(); ++r) {
    const CsvRecord record{col, recs[r], path + " line " + std::to_string(r + 1)};
    auto run = ReadRun(record);
    if (run.ok()) {
      runs.push_back(std::move(*run));
    } else {
      // That row's error; the others are read on.
      PublishedRun bad;
      bad.id = record.Get("id");
      bad.error = run.status().message();
      runs.push_back(std::move(bad));
    }
  }
  return runs;
}

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
  if (!run.activation.empty()) {
    auto a = ActivationFromName(run.activation);
    if (!a.ok()) return a.status().WithContext(run.id + ": activation");
    spec->activation_given = *a;
    if (*a != Activation::kGelu) spec->arch = Arch::kLlama;
  }
  const std::string& t = run.tied_embeddings;
  if (t == "true" || t == "1" || t == "yes") {
    spec->tied_given = true;
  } else if (t == "false" || t == "0" || t == "no") {
    spec->tied_given = false;
  } else if (!t.empty()) {
    return InvalidArgument(run.id + ": tied_embeddings = '" + t + "'; use true or false");
  }
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
  if (!run.sp.empty()) o->sp = YesNo(run.sp).value_or(false);
  if (!run.recompute.empty()) {
    ST_ASSIGN_OR_RETURN(Recompute rc, RecomputeFromName(run.recompute));
    o->recompute = rc;
  }
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
  if (!run.precision.empty()) {
    o->precision = *PrecisionFromName(run.precision);  // checked when the row was read
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
  if (run.zero >= 0) {
    o->zero = static_cast<int>(run.zero);
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
