#include "plan/table_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "core/strings.h"

namespace scaletrain::plan {

namespace {

// RFC 4180 split into records of fields: quotes may hold commas, line ends
// and doubled quotes; a record ends at LF, CR or CRLF; empty lines are none.
struct CsvSplit {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, any = false;

  void EndField() {
    record.push_back(std::move(field));
    field.clear();
    any = true;
  }
  void EndRecord() {
    if (any || !field.empty()) record.push_back(std::move(field));
    if (!record.empty()) records.push_back(std::move(record));
    record.clear(), field.clear(), any = false;
  }
  // Takes text[i] (and a quote doubled after it) inside quotes; the index of
  // the last character taken.
  size_t InQuotes(const std::string& text, size_t i) {
    if (text[i] != '"') {
      field += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == '"') {
      field += '"';
      return i + 1;
    } else {
      quoted = false;
    }
    return i;
  }
  // Takes text[i] (and the LF of a CRLF) outside quotes.
  size_t Outside(const std::string& text, size_t i) {
    const char c = text[i];
    if (c == '"') {
      quoted = true, any = true;
    } else if (c == ',') {
      EndField();
    } else if (c == '\n' || c == '\r') {
      EndRecord();
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') return i + 1;
    } else {
      field += c, any = true;
    }
    return i;
  }
};

Result<std::vector<std::vector<std::string>>> ParseCsv(const std::string& text,
                                                       const std::string& path) {
  CsvSplit s;
  for (size_t i = 0; i < text.size(); ++i) i = s.quoted ? s.InQuotes(text, i) : s.Outside(text, i);
  if (s.quoted) return DataLoss(path + ": unterminated quoted field");
  s.EndRecord();
  return std::move(s.records);
}

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
    if (d != std::floor(d))
      return InvalidArgument(where + ": column " + name + " must be a whole number");
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
Status OptionalInteger(const CsvRecord& r, const char* column, int64_t lo, int64_t hi,
                       const char* should_be, const char* fix, int64_t* out) {
  if (!r.Has(column) || r.Get(column).empty()) return Status::Ok();
  ST_RETURN_IF_ERROR(r.Integer(column, out));
  if (*out < lo || *out > hi) {
    return InvalidArgument(r.where + ": column " + column + " = " + std::to_string(*out) +
                           " is not " + should_be + "; " + fix);
  }
  return Status::Ok();
}

// A precision as tables write it ("BF16", "bfloat16", "amp_bf16", "FP8
// (Transformer Engine)", "mixed fp16"): the precision its words name, FP8
// before the 16-bit formats (FP8 runs keep bf16 around the FP8 GEMMs).
std::optional<Precision> PrecisionNamedIn(const std::string& given) {
  const std::vector<std::string> words = LowerWords(given);
  if (AnyWordIn(words, {"fp8", "float8", "e4m3"})) return Precision::kFP8;
  if (AnyWordIn(words, {"bf16", "bfloat16"})) return Precision::kBF16;
  if (AnyWordIn(words, {"fp16", "float16", "half"})) return Precision::kFP16;
  if (AnyWordIn(words, {"tf32"})) return Precision::kTF32;
  if (AnyWordIn(words, {"fp32", "float32"})) return Precision::kFP32;
  return std::nullopt;
}

// The ZeRO stage a zero cell names, as a stage number or as the tables that
// state one write it: "3", "ZeRO-1", "zero2", "ZeRO stage 2", "stage 1",
// FSDP's sharding strategies (FULL_SHARD and HYBRID_SHARD: 3, SHARD_GRAD_OP:
// 2, NO_SHARD: 0), Megatron's distributed optimizer (1).
std::optional<int> ZeroStageNamed(const std::string& cell) {
  static const std::map<std::string, int> kForms = {
      {"full-shard", 3},    {"hybrid-shard", 3}, {"hsdp", 3},
      {"shard-grad-op", 2}, {"no-shard", 0},     {"distributed-optimizer", 1}};
  std::string key;
  for (const std::string& w : LowerWords(cell)) {
    if (w != "zero" && w != "stage") key += (key.empty() ? "" : "-") + w;
  }
  if (key.starts_with("zero")) key.erase(0, 4);  // "zero1"
  if (key.size() == 1 && key[0] >= '0' && key[0] <= '3') return key[0] - '0';
  const auto it = kForms.find(key);
  if (it == kForms.end()) return std::nullopt;
  return it->second;
}

// The columns every table has (ReadRun reads them), and the optional ones
// (ReadOptionalColumns).
constexpr const char* kColumns[] = {"id",
                                    "source",
                                    "model",
                                    "params_b",
                                    "layers",
                                    "hidden",
                                    "heads",
                                    "seq",
                                    "vocab",
                                    "gpu",
                                    "num_gpus",
                                    "tp",
                                    "pp",
                                    "dp",
                                    "vpp",
                                    "sp",
                                    "recompute",
                                    "micro_batch",
                                    "global_batch",
                                    "measured_tflops_per_gpu",
                                    "measured_mfu",
                                    "measured_step_s",
                                    "measured_tokens_per_s",
                                    "notes"};
constexpr const char* kOptionalColumns[] = {
    "stack",       "cluster",     "activation",  "tied_embeddings",  "kv_heads",
    "ffn_hidden",  "power_cap_w", "hbm_gib",     "hbm_tbps",         "precision",
    "grad_reduce", "cp",          "shard_group", "recompute_layers", "zero"};

bool IsOneOfColumns(const std::string& name) {
  return std::ranges::find(kColumns, name) != std::end(kColumns) ||
         std::ranges::find(kOptionalColumns, name) != std::end(kOptionalColumns);
}

// Other names tables give the optional columns (Hugging Face config names,
// Megatron and FSDP options), read where the column itself is absent.
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
      {"tie_word_embeddings", "tied_embeddings"},
      {"reduce_dtype", "grad_reduce"},
      {"grad_reduce_dtype", "grad_reduce"},
      {"grad_sync_dtype", "grad_reduce"}};
  return synonyms;
}

// Points each absent optional column at a synonym the header has.
void ReadColumnSynonyms(std::map<std::string, size_t>* col) {
  for (const auto& [synonym, column] : ColumnSynonyms()) {
    const auto it = col->find(synonym);
    if (it != col->end() && !col->count(column)) (*col)[column] = it->second;
  }
}

// A column of words read as a value of its type by `parse` (nothing for a
// cell it cannot read): empty, or a cell that says "not known" ("n/a", "-")
// and is no value, leaves `out` unset; any other cell it cannot read is one
// error, "column NAME = 'CELL'" and then `fix`.
template <typename T, typename Parse>
Status WordColumn(const CsvRecord& r, const char* column, Parse parse, const char* fix,
                  std::optional<T>* out) {
  if (!r.Has(column)) return Status::Ok();
  const std::string cell = r.Get(column);
  if (cell.empty()) return Status::Ok();
  if (const std::optional<T> v = parse(cell)) {
    *out = *v;
    return Status::Ok();
  }
  if (CsvRecord::NotStated(cell)) return Status::Ok();
  return InvalidArgument(r.where + ": column " + column + " = '" + cell + "'" + fix);
}

std::optional<Recompute> RecomputeNamed(const std::string& cell) {
  auto rc = RecomputeFromName(cell);
  return rc.ok() ? std::optional<Recompute>(*rc) : std::nullopt;
}

std::optional<Activation> ActivationNamed(const std::string& cell) {
  auto a = ActivationFromName(Lower(cell));
  return a.ok() ? std::optional<Activation>(*a) : std::nullopt;
}

// The gradient reduction a grad_reduce cell names: fp32 ("fp32", "float32",
// "torch.float32"), or the compute precision's 16 bits ("compute", "bf16",
// "bfloat16"; "fp16" where the run computes in fp16); "auto" leaves it to
// the stack. Read after the precision.
Status ReadGradReduce(const CsvRecord& r, PublishedRun* run) {
  const Precision compute = run->precision.value_or(Precision::kBF16);
  const Precision sixteen = compute == Precision::kFP16 ? Precision::kFP16 : Precision::kBF16;
  auto parse = [&](const std::string& cell) -> std::optional<std::optional<GradReduce>> {
    if (NameKey(cell) == "auto") return std::optional<GradReduce>();
    if (NameKey(cell) == "compute") return GradReduce::kCompute;
    const std::optional<Precision> named = PrecisionNamedIn(cell);
    if (named == Precision::kFP32) return GradReduce::kFp32;
    if (named == sixteen) return GradReduce::kCompute;
    return std::nullopt;
  };
  std::optional<std::optional<GradReduce>> read;
  const std::string fix = std::string("; give fp32, or the compute precision's 16 bits (") +
                          PrecisionName(sixteen) + " or compute), or auto for the stack's default";
  ST_RETURN_IF_ERROR(WordColumn(r, "grad_reduce", parse, fix.c_str(), &read));
  if (read) run->grad_reduce = *read;
  return Status::Ok();
}

// The optional columns of words: the stack and cluster (names a catalog
// reads), the architecture's, the precision, the gradient reduction and the
// ZeRO stage.
Status ReadOptionalWords(const CsvRecord& r, PublishedRun* run) {
  if (r.Has("stack")) run->stack = r.Get("stack");
  if (r.Has("cluster")) run->cluster = Lower(r.Get("cluster"));
  ST_RETURN_IF_ERROR(WordColumn(r, "activation", ActivationNamed,
                                "; give gelu, swiglu or squared_relu", &run->activation));
  ST_RETURN_IF_ERROR(
      WordColumn(r, "tied_embeddings", YesNo, "; give true or false", &run->tied_embeddings));
  ST_RETURN_IF_ERROR(WordColumn(r, "precision", PrecisionNamedIn,
                                "; give bf16, fp16, fp8, fp32 or tf32 (or leave it empty for bf16)",
                                &run->precision));
  ST_RETURN_IF_ERROR(ReadGradReduce(r, run));
  return WordColumn(
      r, "zero", ZeroStageNamed,
      " is not a ZeRO stage; give 0, 1, 2 or 3 (or ZeRO-1, FULL_SHARD, SHARD_GRAD_OP, ...; "
      "leave it empty to search)",
      &run->zero);
}

// The optional columns of numbers: the architecture's, the GPU variant, cp,
// hybrid sharding and partial recomputation.
Status ReadOptionalNumbers(const CsvRecord& r, PublishedRun* run) {
  if (r.Has("kv_heads")) ST_RETURN_IF_ERROR(r.Integer("kv_heads", &run->kv_heads));
  if (r.Has("ffn_hidden")) ST_RETURN_IF_ERROR(r.Integer("ffn_hidden", &run->ffn_hidden));
  if (r.Has("power_cap_w")) ST_RETURN_IF_ERROR(r.Number("power_cap_w", &run->power_cap_w));
  if (r.Has("hbm_gib")) ST_RETURN_IF_ERROR(r.Number("hbm_gib", &run->hbm_gib));
  if (r.Has("hbm_tbps")) ST_RETURN_IF_ERROR(r.Number("hbm_tbps", &run->hbm_tbps));
  constexpr int64_t kAny = std::numeric_limits<int64_t>::max();
  ST_RETURN_IF_ERROR(OptionalInteger(r, "cp", 1, run->num_gpus > 0 ? run->num_gpus : kAny,
                                     "a rank count", "give 1 to num_gpus (or leave it empty)",
                                     &run->cp));
  ST_RETURN_IF_ERROR(
      OptionalInteger(r, "shard_group", 2, kAny, "a sharding group",
                      "give the data-parallel ranks each group shards over, >= 2 (or "
                      "leave it empty: one group of all)",
                      &run->shard_group));
  return OptionalInteger(r, "recompute_layers", 1, kAny, "a layer count",
                         "give the layers of each chunk that recompute, >= 1 (or leave it empty)",
                         &run->recompute_layers);
}

// The columns every table has: names, dimensions, the layout, the measured figures.
Status ReadRequiredColumns(const CsvRecord& r, PublishedRun* run) {
  run->id = r.Get("id"), run->source = r.Get("source"), run->model = r.Get("model"),
  run->gpu = r.Get("gpu");
  run->notes = r.Get("notes");
  ST_RETURN_IF_ERROR(r.Number("params_b", &run->params_b));
  for (auto [name, out] : {std::pair{"layers", &run->layers},
                           {"hidden", &run->hidden},
                           {"heads", &run->heads},
                           {"seq", &run->seq},
                           {"vocab", &run->vocab},
                           {"num_gpus", &run->num_gpus},
                           {"tp", &run->tp},
                           {"pp", &run->pp},
                           {"dp", &run->dp},
                           {"vpp", &run->vpp},
                           {"micro_batch", &run->micro_batch},
                           {"global_batch", &run->global_batch}}) {
    ST_RETURN_IF_ERROR(r.Integer(name, out));
  }
  ST_RETURN_IF_ERROR(
      WordColumn(r, "sp", YesNo, "; give true or false (or leave it empty to search)", &run->sp));
  ST_RETURN_IF_ERROR(WordColumn(r, "recompute", RecomputeNamed,
                                "; give none, selective (Megatron's), full, op (PyTorch's op-level "
                                "selective) or leave it empty to search",
                                &run->recompute));
  ST_RETURN_IF_ERROR(r.Number("measured_tflops_per_gpu", &run->tflops_per_gpu));
  ST_RETURN_IF_ERROR(r.Number("measured_mfu", &run->mfu));
  ST_RETURN_IF_ERROR(r.Number("measured_step_s", &run->step_s));
  return r.Number("measured_tokens_per_s", &run->tokens_per_s);
}

Result<PublishedRun> ReadRun(const CsvRecord& r) {
  PublishedRun run;
  ST_RETURN_IF_ERROR(ReadRequiredColumns(r, &run));
  ST_RETURN_IF_ERROR(ReadOptionalWords(r, &run));
  ST_RETURN_IF_ERROR(ReadOptionalNumbers(r, &run));
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

// The header's columns by name (a spreadsheet's spaces after the commas
// dropped), synonyms pointing at the columns they stand for; the names not
// read go to `ignored`.
Result<std::map<std::string, size_t>> ReadHeader(const std::vector<std::string>& header,
                                                 const std::string& path,
                                                 std::vector<std::string>* ignored) {
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[Trim(header[i])] = i;
  ReadColumnSynonyms(&col);
  for (const char* c : kColumns) {
    if (!col.count(c)) return InvalidArgument(path + ": header lacks column '" + c + "'");
  }
  if (ignored != nullptr) {
    ignored->clear();
    for (const auto& [name, i] : col) {
      if (!IsOneOfColumns(name) && !ColumnSynonyms().count(name)) ignored->push_back(name);
    }
  }
  return col;
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
  ST_ASSIGN_OR_RETURN(const auto col, ReadHeader(recs[0], path, ignored));
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

}  // namespace scaletrain::plan
