#include "core/config.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "core/strings.h"

namespace scaletrain {
namespace {

// One list of every field serves parsing, key checking and serialising.
template <typename Cfg, typename F>
void VisitFields(Cfg& c, F&& f) {
  f("model", "n_layer", c.model.n_layer);
  f("model", "n_head", c.model.n_head);
  f("model", "n_embd", c.model.n_embd);
  f("model", "block_size", c.model.block_size);
  f("model", "vocab_size", c.model.vocab_size);
  f("model", "vocab_multiple", c.model.vocab_multiple);
  f("model", "arch", c.model.arch);
  f("model", "n_kv_head", c.model.n_kv_head);
  f("model", "ffn_hidden", c.model.ffn_hidden);
  f("model", "rope_theta", c.model.rope_theta);
  f("model", "norm_eps", c.model.norm_eps);
  f("model", "tied_embeddings", c.model.tied_embeddings);
  f("data", "train", c.data.train);
  f("data", "val", c.data.val);
  f("data", "vocab", c.data.vocab);
  f("training", "steps", c.training.steps);
  f("training", "global_batch_size", c.training.global_batch_size);
  f("training", "micro_batch_size", c.training.micro_batch_size);
  f("training", "lr", c.training.lr);
  f("training", "min_lr", c.training.min_lr);
  f("training", "warmup_steps", c.training.warmup_steps);
  f("training", "weight_decay", c.training.weight_decay);
  f("training", "grad_clip", c.training.grad_clip);
  f("training", "beta1", c.training.beta1);
  f("training", "beta2", c.training.beta2);
  f("training", "eps", c.training.eps);
  f("training", "seed", c.training.seed);
  f("training", "eval_interval", c.training.eval_interval);
  f("training", "eval_steps", c.training.eval_steps);
  f("training", "threads", c.training.threads);
  f("training", "sample_tokens", c.training.sample_tokens);
  f("training", "device", c.training.device);
  f("training", "precision", c.training.precision);
  f("training", "recompute", c.training.recompute);
  f("training", "init_from", c.training.init_from);
  f("parallel", "dp", c.parallel.dp);
  f("parallel", "tp", c.parallel.tp);
  f("parallel", "pp", c.parallel.pp);
  f("parallel", "cp", c.parallel.cp);
  f("parallel", "cp_impl", c.parallel.cp_impl);
  f("parallel", "vpp", c.parallel.vpp);
  f("parallel", "zero", c.parallel.zero);
  f("parallel", "sp", c.parallel.sp);
  f("parallel", "schedule", c.parallel.schedule);
  f("parallel", "bucket_mb", c.parallel.bucket_mb);
  f("parallel", "comm_timeout_s", c.parallel.comm_timeout_s);
  f("parallel", "rebalance", c.parallel.rebalance);
  f("parallel", "dp_reduce", c.parallel.dp_reduce);
  f("parallel", "dp_compress", c.parallel.dp_compress);
  f("checkpoint", "interval", c.checkpoint.interval);
  f("checkpoint", "keep_last", c.checkpoint.keep_last);
  f("telemetry", "rank_interval", c.telemetry.rank_interval);
  f("telemetry", "straggler_threshold", c.telemetry.straggler_threshold);
  f("telemetry", "straggler_windows", c.telemetry.straggler_windows);
  f("telemetry", "straggler_min_ms", c.telemetry.straggler_min_ms);
  f("telemetry", "peak_tflops", c.telemetry.peak_tflops);
  f("telemetry", "metrics_port", c.telemetry.metrics_port);
  f("telemetry", "metrics_address", c.telemetry.metrics_address);
  f("telemetry", "flight_records", c.telemetry.flight_records);
  f("telemetry", "tensorboard", c.telemetry.tensorboard);
  f("faults", "slow_rank", c.faults.slow_rank);
  f("faults", "slow_ms", c.faults.slow_ms);
}

template <typename T>
const char* TypeName() {
  if constexpr (std::is_same_v<T, int64_t>) return "an integer";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  return "a string in quotes";
}

std::string TomlTypeName(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date/time";
  }
}

template <typename T>
Status ReadField(const toml::node& n, const std::string& key, T& out) {
  bool good = false;
  if constexpr (std::is_same_v<T, int64_t>) {
    if (auto v = n.value_exact<int64_t>()) { out = *v; good = true; }
  } else if constexpr (std::is_same_v<T, double>) {
    if (auto v = n.value_exact<double>()) { out = *v; good = true; }
    else if (auto i = n.value_exact<int64_t>()) { out = static_cast<double>(*i); good = true; }
  } else if constexpr (std::is_same_v<T, bool>) {
    if (auto v = n.value_exact<bool>()) { out = *v; good = true; }
  } else {
    if (auto v = n.value_exact<std::string>()) { out = *v; good = true; }
  }
  if (!good) {
    return InvalidArgument("config key '" + key + "' must be " + TypeName<T>() + ", got " +
                           TomlTypeName(n) + "; fix the value in the config or the --set flag");
  }
  return Status::Ok();
}

std::map<std::string, std::vector<std::string>> KnownKeys() {
  std::map<std::string, std::vector<std::string>> keys;
  RunConfig dummy;
  VisitFields(dummy, [&](const char* s, const char* k, auto&) { keys[s].push_back(k); });
  return keys;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Offset of the first byte of `s` that does not belong to valid UTF-8 (RFC
// 3629: no overlong forms, surrogates or code points above U+10FFFF), or npos.
size_t FirstInvalidUtf8(const std::string& s) {
  static constexpr uint32_t kMinCodePoint[] = {0, 0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80           ? 1
                       : (b >> 5) == 0x6  ? 2
                       : (b >> 4) == 0xE  ? 3
                       : (b >> 3) == 0x1E ? 4
                                          : 0;
    if (len == 0 || i + len > s.size()) return i;
    uint32_t cp = len == 1 ? b : b & (0x7Fu >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < kMinCodePoint[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return i;
    i += len;
  }
  return std::string::npos;
}

Status ApplyOverride(toml::table& root, const std::string& ov) {
  auto eq = ov.find('=');
  auto dot = ov.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    return InvalidArgument("--set '" + ov + "' is not of the form section.key=value (e.g. --set training.steps=100)");
  }
  std::string section = ov.substr(0, dot);
  std::string key = ov.substr(dot + 1, eq - dot - 1);
  std::string value = ov.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    // A bare word (e.g. --set parallel.schedule=gpipe) is taken as a string.
    // TOML strings are UTF-8: other bytes would be written to
    // config.resolved.toml as a different string than the one used.
    if (const size_t bad = FirstInvalidUtf8(value); bad != std::string::npos) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(value[bad]));
      return InvalidArgument("--set " + section + "." + key +
                             ": the value is not valid UTF-8 (byte " + byte + " at offset " +
                             std::to_string(bad) +
                             "); config values are UTF-8 text, give the value in UTF-8");
    }
    parsed = toml::table{{"v", value}};
  }
  if (!root.contains(section)) root.insert(section, toml::table{});
  toml::table* sec = root[section].as_table();
  if (!sec) return InvalidArgument("config '" + section + "' is not a section");
  sec->insert_or_assign(key, *parsed.get("v"));
  return Status::Ok();
}

// The section and key an override names ("training.steps=5": training, steps).
std::pair<std::string, std::string> OverrideKey(const std::string& ov) {
  const size_t dot = ov.find('.'), eq = ov.find('=');
  if (dot == std::string::npos || eq == std::string::npos || dot > eq) return {"", ""};
  return {ov.substr(0, dot), ov.substr(dot + 1, eq - dot - 1)};
}

// "; did you mean 'parallel.dp'?" for an unknown `section.key`: the same key
// in another section first (a key put in the wrong section), else the
// nearest name.
std::string NearestKey(const std::string& sec, const std::string& key,
                       const std::map<std::string, std::vector<std::string>>& known) {
  std::vector<std::string> all;
  for (const auto& [s, keys] : known) {
    for (const std::string& k : keys) {
      if (k == key && s != sec) return "; did you mean '" + s + "." + k + "'?";
      all.push_back(s + "." + k);
    }
  }
  return DidYouMean(sec + "." + key, all);
}

// Every section and key of `root` is one RunConfig has. An error blames
// where the name came from: the --set flag that gave it, else the file.
Status CheckKnownKeys(const toml::table& root, const std::vector<std::string>& overrides,
                      const std::string& source_name) {
  const auto known = KnownKeys();
  std::vector<std::string> sections;
  for (const auto& [s, _] : known) sections.push_back(s);
  auto where = [&](const std::string& sec, const std::string& key) {
    for (const std::string& ov : overrides) {
      const auto [s, k] = OverrideKey(ov);
      if (s == sec && (key.empty() || k == key)) return "--set " + s + "." + k;
    }
    return source_name;
  };
  for (const auto& [sec_key, sec_node] : root) {
    const std::string sec(sec_key.str());
    auto it = known.find(sec);
    if (it == known.end()) {
      const std::string hint = DidYouMean(sec, sections);
      return InvalidArgument(where(sec, "") + ": unknown config section '" + sec + "'" +
                             (hint.empty() ? ";" : hint) + " valid sections are " + Join(sections));
    }
    const toml::table* t = sec_node.as_table();
    if (!t) return InvalidArgument(source_name + ": '" + sec + "' must be a [section] table");
    for (const auto& [k, _] : *t) {
      const std::string key(k.str());
      if (std::find(it->second.begin(), it->second.end(), key) != it->second.end()) continue;
      if (sec == "checkpoint" && key == "keep") {
        return InvalidArgument(where(sec, key) +
                               ": checkpoint.keep is now checkpoint.keep_last (old checkpoints are "
                               "removed only after a newer one is verified); rename the key");
      }
      const std::string hint = NearestKey(sec, key, known);
      return InvalidArgument(where(sec, key) + ": unknown config key '" + sec + "." + key + "'" +
                             (hint.empty() ? ";" : hint) + " valid keys in [" + sec + "] are " +
                             Join(it->second));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<RunConfig> ParseRunConfig(const std::string& toml_text,
                                 const std::vector<std::string>& overrides,
                                 const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source_name << ":" << e.source().begin.line << ":" << e.source().begin.column
       << ": TOML syntax error: " << e.description() << "; fix the file's syntax";
    return InvalidArgument(os.str());
  }
  for (const auto& ov : overrides) ST_RETURN_IF_ERROR(ApplyOverride(root, ov));

  ST_RETURN_IF_ERROR(CheckKnownKeys(root, overrides, source_name));

  RunConfig cfg;
  Status st;
  VisitFields(cfg, [&](const char* s, const char* k, auto& field) {
    if (!st.ok()) return;
    const toml::node* n = root[s][k].node();
    if (n) st = ReadField(*n, std::string(s) + "." + k, field).WithContext(source_name);
  });
  ST_RETURN_IF_ERROR(st);
  ST_RETURN_IF_ERROR(ValidateRunConfig(cfg).WithContext(source_name));
  return cfg;
}

Result<RunConfig> LoadRunConfig(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) {
    return NotFound("cannot open config file '" + path +
                    "'; check the path (example configs are in configs/)");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseRunConfig(ss.str(), overrides, path);
}

namespace {

Status RequirePositive(const char* key, int64_t v) {
  if (v <= 0) {
    return InvalidArgument(std::string(key) + " must be positive, got " + std::to_string(v));
  }
  return Status::Ok();
}

// The block-style keys: arch, n_kv_head, ffn_hidden, rope_theta, norm_eps,
// tied_embeddings.
Status ValidateModelArch(const ModelConfig& m) {
  const bool llama = m.arch == "llama";
  if (!llama && m.arch != "gpt2") {
    return InvalidArgument("model.arch = '" + m.arch + "' is unknown; use \"gpt2\" or \"llama\"");
  }
  if (m.n_kv_head < 0 || m.ffn_hidden < 0) {
    return InvalidArgument("model.n_kv_head and model.ffn_hidden must be >= 0 (0: the arch's default)");
  }
  if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0) {
    return InvalidArgument("model.n_kv_head (" + std::to_string(m.n_kv_head) +
                           ") does not divide model.n_head (" + std::to_string(m.n_head) +
                           "); each key/value head serves n_head / n_kv_head query heads");
  }
  if (!llama && ((m.n_kv_head != 0 && m.n_kv_head != m.n_head) || !m.tied_embeddings)) {
    return InvalidArgument("model.arch = \"gpt2\" has n_kv_head = n_head and tied_embeddings = true; "
                           "set model.arch = \"llama\" for grouped-query attention or an untied head");
  }
  if (!(m.rope_theta > 0.0)) return InvalidArgument("model.rope_theta must be > 0 (Llama uses 10000)");
  if (!(m.norm_eps > 0.0)) return InvalidArgument("model.norm_eps must be > 0 (e.g. 1e-5)");
  if (llama && (m.n_embd / m.n_head) % 2 != 0) {
    return InvalidArgument("model.arch = \"llama\" needs an even head dimension (n_embd / n_head = " +
                           std::to_string(m.n_embd / m.n_head) +
                           "): rotary embeddings rotate pairs of channels; change n_embd or n_head");
  }
  return Status::Ok();
}

Status ValidateModelSection(const ModelConfig& m) {
  ST_RETURN_IF_ERROR(RequirePositive("model.n_layer", m.n_layer));
  ST_RETURN_IF_ERROR(RequirePositive("model.n_head", m.n_head));
  ST_RETURN_IF_ERROR(RequirePositive("model.n_embd", m.n_embd));
  ST_RETURN_IF_ERROR(RequirePositive("model.block_size", m.block_size));
  ST_RETURN_IF_ERROR(RequirePositive("model.vocab_multiple", m.vocab_multiple));
  if (m.vocab_size < 0) {
    return InvalidArgument("model.vocab_size must be >= 0 (0 takes it from the data)");
  }
  if (m.n_embd % m.n_head != 0) {
    return InvalidArgument("model.n_embd (" + std::to_string(m.n_embd) +
                           ") is not divisible by model.n_head (" + std::to_string(m.n_head) +
                           "); choose n_head dividing n_embd, e.g. n_head = " +
                           std::to_string(m.n_embd % 4 == 0 ? 4 : 1));
  }
  return ValidateModelArch(m);
}

// Step, batch and evaluation counts, and the run's threads and sample length.
Status ValidateTrainingCounts(const TrainingConfig& t) {
  ST_RETURN_IF_ERROR(RequirePositive("training.steps", t.steps));
  ST_RETURN_IF_ERROR(RequirePositive("training.global_batch_size", t.global_batch_size));
  ST_RETURN_IF_ERROR(RequirePositive("training.micro_batch_size", t.micro_batch_size));
  ST_RETURN_IF_ERROR(RequirePositive("training.eval_steps", t.eval_steps));
  if (t.eval_interval < 0) {
    return InvalidArgument("training.eval_interval must be >= 0 (0: evaluate only at the end)");
  }
  if (t.warmup_steps < 0) return InvalidArgument("training.warmup_steps must be >= 0");
  if (t.threads < 0) return InvalidArgument("training.threads must be >= 0 (0: all cores)");
  if (t.sample_tokens < 0) return InvalidArgument("training.sample_tokens must be >= 0");
  return Status::Ok();
}

// The learning-rate schedule and AdamW's settings. Written as !(x > 0) so
// that a NaN fails too.
Status ValidateOptimizerSettings(const TrainingConfig& t) {
  if (!(t.lr > 0)) return InvalidArgument("training.lr must be positive");
  if (t.min_lr < 0 || t.min_lr > t.lr) {
    return InvalidArgument("training.min_lr must be in [0, training.lr]");
  }
  if (t.weight_decay < 0) return InvalidArgument("training.weight_decay must be >= 0");
  if (t.grad_clip < 0) {
    return InvalidArgument("training.grad_clip must be >= 0 (0 disables clipping)");
  }
  if (!(t.beta1 >= 0 && t.beta1 < 1) || !(t.beta2 >= 0 && t.beta2 < 1)) {
    return InvalidArgument("training.beta1 and training.beta2 must be in [0, 1)");
  }
  if (!(t.eps > 0)) return InvalidArgument("training.eps must be positive");
  return Status::Ok();
}

// What this build computes on: the CPU, in fp32.
Status ValidateDeviceAndPrecision(const TrainingConfig& t) {
  if (t.device != "cpu") {
    return InvalidArgument("training.device = '" + t.device +
                           "' is not available in this build; use \"cpu\"");
  }
  if (t.precision != "fp32") {
    return InvalidArgument("training.precision = '" + t.precision +
                           "' is not supported on the CPU backend; use \"fp32\"");
  }
  if (t.recompute == "op" || t.recompute == "selective-op" || t.recompute == "selective_op") {
    return InvalidArgument("training.recompute = '" + t.recompute +
                           "' (op-level checkpointing) is modelled by the planner only; the "
                           "trainer runs \"none\", \"selective\" or \"full\"");
  }
  if (t.recompute != "none" && t.recompute != "selective" && t.recompute != "full") {
    return InvalidArgument("training.recompute = '" + t.recompute +
                           "' is unknown; use \"none\", \"selective\" or \"full\"");
  }
  return Status::Ok();
}

// The layout's sizes, its ZeRO stage and its pipeline schedule.
Status ValidateParallelLayout(const ParallelConfig& p) {
  ST_RETURN_IF_ERROR(RequirePositive("parallel.dp", p.dp));
  ST_RETURN_IF_ERROR(RequirePositive("parallel.tp", p.tp));
  ST_RETURN_IF_ERROR(RequirePositive("parallel.pp", p.pp));
  ST_RETURN_IF_ERROR(RequirePositive("parallel.cp", p.cp));
  ST_RETURN_IF_ERROR(RequirePositive("parallel.vpp", p.vpp));
  if (p.zero < 0 || p.zero > 3) return InvalidArgument("parallel.zero must be 0, 1, 2 or 3");
  // zb-v's two chunks each run whole passes over their layers (forward, B),
  // so ZeRO-3's gathers stay in pass order; interleaved's are Megatron's.
  if (p.zero == 3 && p.vpp > 1 && !p.chunks_in_v()) {
    return InvalidArgument(
        "parallel.zero = 3 (parameters sharded) does not run with several chunks per stage "
        "(parallel.vpp = " +
        std::to_string(p.vpp) + ", schedule \"" + p.schedule +
        "\"); use parallel.zero = 2 with it, parallel.vpp = 1, or schedule \"zb-v\"");
  }
  if (!IsOneOf(p.cp_impl, {"ring", "ulysses"})) {
    return InvalidArgument("parallel.cp_impl = '" + p.cp_impl + "' is unknown; use \"ring\" or \"ulysses\"");
  }
  if (!IsOneOf(p.schedule, {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"})) {
    return InvalidArgument("parallel.schedule = '" + p.schedule +
                           "' is unknown; use \"gpipe\", \"1f1b\", \"interleaved\", \"zb-h1\" or \"zb-v\"");
  }
  return Status::Ok();
}

// The zero-bubble schedules' split backward keeps each block's inputs until
// its weight-gradient pass; full recompute keeps only the block's input.
Status ValidateScheduleWithRecompute(const TrainingConfig& t, const ParallelConfig& p) {
  if (p.schedule.rfind("zb-", 0) == 0 && t.recompute == "full") {
    return InvalidArgument("parallel.schedule = \"" + p.schedule +
                           "\" with training.recompute = \"full\": the zero-bubble schedules "
                           "keep each block's inputs for the deferred weight gradients; use "
                           "training.recompute = \"selective\" or \"none\", or schedule \"1f1b\"");
  }
  return Status::Ok();
}

// How the data-parallel gradients travel: the reduction's shape and wire
// format, each of which applies to ZeRO-0's all-reduce only.
Status ValidateDpReduction(const ParallelConfig& p) {
  if (!IsOneOf(p.dp_reduce, {"auto", "flat", "hierarchical"})) {
    return InvalidArgument("parallel.dp_reduce = '" + p.dp_reduce +
                           "' is unknown; use \"auto\", \"flat\" or \"hierarchical\"");
  }
  if (p.dp_reduce == "hierarchical" && p.zero > 0) {
    return InvalidArgument("parallel.dp_reduce = \"hierarchical\" reduces ZeRO-0's all-reduce; with parallel.zero = " +
                           std::to_string(p.zero) + " use \"flat\" or \"auto\"");
  }
  if (!IsOneOf(p.dp_compress, {"none", "bf16", "fp16", "sign"})) {
    return InvalidArgument("parallel.dp_compress = '" + p.dp_compress +
                           "' is unknown; use \"none\", \"bf16\", \"fp16\" or \"sign\"");
  }
  if (p.dp_compress != "none" && p.zero > 0) {
    return InvalidArgument("parallel.dp_compress compresses ZeRO-0's all-reduce; with parallel.zero = " +
                           std::to_string(p.zero) + " set parallel.zero = 0 or parallel.dp_compress = \"none\"");
  }
  return Status::Ok();
}

Status ValidateParallelSection(const ParallelConfig& p) {
  ST_RETURN_IF_ERROR(ValidateParallelLayout(p));
  if (!(p.bucket_mb > 0)) {
    return InvalidArgument("parallel.bucket_mb must be positive (25 is PyTorch DDP's default)");
  }
  if (!(p.comm_timeout_s > 0)) {
    return InvalidArgument("parallel.comm_timeout_s must be positive (seconds)");
  }
  ST_RETURN_IF_ERROR(ValidateDpReduction(p));
  if (p.cp > 1 && (p.schedule == "zb-h1" || p.schedule == "zb-v") && p.pp > 1) {
    // Each was checked against one rank on its own; together they are not yet.
    return InvalidArgument("parallel.schedule = \"" + p.schedule +
                           "\" with parallel.cp > 1 is not supported yet; use \"1f1b\" or "
                           "\"interleaved\" with context parallelism, or parallel.cp = 1");
  }
  if (p.rebalance && (p.pp > 1 || p.zero > 1 || p.cp > 1)) {
    return InvalidArgument("parallel.rebalance needs parallel.pp = 1, parallel.cp = 1 and parallel.zero <= 1 (a "
                           "pipeline's activation slots, a context-parallel group's ring and ZeRO-2's "
                           "per-micro-batch reductions assume every DP rank runs the same micro-batches); "
                           "turn it off or change the layout");
  }
  return Status::Ok();
}

// A step's global batch is whole micro-batches on every data-parallel rank.
Status ValidateBatchDivision(const TrainingConfig& t, const ParallelConfig& p) {
  // Both are positive (checked before), but their product or the second
  // suggestion below may pass 2^63: signed overflow is undefined behaviour.
  int64_t per_step = 0;
  if (__builtin_mul_overflow(t.micro_batch_size, p.dp, &per_step)) {
    return InvalidArgument("training.micro_batch_size x parallel.dp = " +
                           std::to_string(t.micro_batch_size) + " x " + std::to_string(p.dp) +
                           " is more than 2^63 sequences per step; use smaller values");
  }
  if (t.global_batch_size % per_step != 0) {
    int64_t lo = std::max<int64_t>(per_step, t.global_batch_size / per_step * per_step);
    int64_t hi = 0;
    const std::string suggestions =
        __builtin_add_overflow(lo, per_step, &hi)
            ? std::to_string(lo)
            : std::to_string(lo) + " or " + std::to_string(hi);
    return InvalidArgument(
        "training.global_batch_size (" + std::to_string(t.global_batch_size) +
        ") does not divide into micro-batches: it must be a multiple of micro_batch_size x dp = " +
        std::to_string(t.micro_batch_size) + " x " + std::to_string(p.dp) + " = " +
        std::to_string(per_step) + "; use e.g. " + suggestions);
  }
  return Status::Ok();
}

Status ValidateCheckpointSection(const CheckpointConfig& k) {
  if (k.interval < 0) {
    return InvalidArgument("checkpoint.interval must be >= 0 (0: only at the end)");
  }
  if (k.keep_last < 1) return InvalidArgument("checkpoint.keep_last must be >= 1");
  return Status::Ok();
}

Status ValidateTelemetrySection(const TelemetryConfig& t) {
  if (t.rank_interval < 0) {
    return InvalidArgument("telemetry.rank_interval must be >= 0 (0: no per-rank records)");
  }
  if (!(t.straggler_threshold > 0)) {
    return InvalidArgument("telemetry.straggler_threshold must be > 0 (0.2: 20% over the median)");
  }
  if (t.straggler_windows < 1) return InvalidArgument("telemetry.straggler_windows must be >= 1");
  if (!(t.straggler_min_ms >= 0)) return InvalidArgument("telemetry.straggler_min_ms must be >= 0 (milliseconds)");
  if (!(t.peak_tflops >= 0))
    return InvalidArgument("telemetry.peak_tflops must be >= 0 (0: unknown)");
  if (t.flight_records < 0 || t.flight_records > 1000000) {
    return InvalidArgument("telemetry.flight_records must be 0 (off) to 1000000; got " +
                           std::to_string(t.flight_records));
  }
  if (t.metrics_port < 0 || t.metrics_port > 65535) {
    return InvalidArgument("telemetry.metrics_port must be a TCP port, 1 to 65535, or 0 (off); got " +
                           std::to_string(t.metrics_port));
  }
  return Status::Ok();
}

Status ValidateFaultsSection(const FaultsConfig& f, const ParallelConfig& p) {
  const int64_t world = p.dp * p.tp * p.pp * p.cp;
  if (f.slow_rank < -1 || f.slow_rank >= world) {
    return InvalidArgument("faults.slow_rank must be -1 (none) or a rank below dp x tp x pp x cp = " +
                           std::to_string(world) + ", got " + std::to_string(f.slow_rank));
  }
  if (!(f.slow_ms >= 0)) return InvalidArgument("faults.slow_ms must be >= 0");
  return Status::Ok();
}

}  // namespace

Status ValidateRunConfig(const RunConfig& c) {
  ST_RETURN_IF_ERROR(ValidateModelSection(c.model));
  ST_RETURN_IF_ERROR(ValidateTrainingCounts(c.training));
  ST_RETURN_IF_ERROR(ValidateOptimizerSettings(c.training));
  ST_RETURN_IF_ERROR(ValidateDeviceAndPrecision(c.training));
  ST_RETURN_IF_ERROR(ValidateParallelSection(c.parallel));
  ST_RETURN_IF_ERROR(ValidateBatchDivision(c.training, c.parallel));
  ST_RETURN_IF_ERROR(ValidateScheduleWithRecompute(c.training, c.parallel));
  ST_RETURN_IF_ERROR(ValidateCheckpointSection(c.checkpoint));
  ST_RETURN_IF_ERROR(ValidateTelemetrySection(c.telemetry));
  return ValidateFaultsSection(c.faults, c.parallel);
}

std::string RunConfigToToml(const RunConfig& c) {
  std::map<std::string, toml::table> sections;
  VisitFields(c, [&](const char* s, const char* k, const auto& field) {
    sections[s].insert(k, field);
  });
  std::ostringstream os;
  for (const char* s :
       {"model", "data", "training", "parallel", "checkpoint", "telemetry", "faults"}) {
    // Basic strings only, with escapes: TOML drops a newline right after a
    // multi-line string's opening """, and a literal '...' string cannot
    // hold a control character at all (the formatter would write one), so
    // either would load back differently, or not at all.
    constexpr auto kFlags = toml::toml_formatter::default_flags &
                            ~toml::format_flags::allow_multi_line_strings &
                            ~toml::format_flags::allow_literal_strings;
    os << "[" << s << "]\n" << toml::toml_formatter{sections[s], kFlags} << "\n\n";
  }
  return os.str();
}

}  // namespace scaletrain
