#include "plan/stacks.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/strings.h"
#include "plan/hardware.h"
#include "plan/toml_util.h"

namespace scaletrain::plan {

namespace fs = std::filesystem;

struct StackCatalog::Pending {
  std::string path;
  toml::table table;
};

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr std::pair<Software::Buckets, const char*> kBucketNames[] = {
    {Software::Buckets::kFixed25MiB, "fixed-25mib"},
    {Software::Buckets::kMegatronCore, "megatron-core"},
    {Software::Buckets::kWholeBuffer, "whole-buffer"},
    {Software::Buckets::kDeepSpeed, "deepspeed"}};

std::string BucketsName(Software::Buckets b) {
  for (const auto& [kind, name] : kBucketNames) {
    if (kind == b) return name;
  }
  return "";
}

std::vector<std::string> BucketChoices() {
  std::vector<std::string> names;
  for (const auto& [kind, name] : kBucketNames) names.push_back(name);
  return names;
}

// `name` is one of the choices (TableReader::AddChoice checked it).
Software::Buckets BucketsFromName(const std::string& name) {
  for (const auto& [kind, n] : kBucketNames) {
    if (name == n) return kind;
  }
  return Software::Buckets::kMegatronCore;
}

// Every choice a stack file states, each key the Software field of its name
// (layout.h says what each models). All are required in a file without a
// base: a stack is all of its choices, with no default hidden in C++.
void AddSoftwareKeys(TableReader& r, Software* sw, std::string* buckets, int64_t* max_zero,
                     bool required) {
  const Bounds slowdown{0, kInf, true, false, "the kernel's time relative to FlashAttention-2's"};
  for (const auto& [key, out] : std::initializer_list<std::pair<const char*, bool*>>{
           {"flash_attention", &sw->flash_attention},
           {"dropout", &sw->dropout},
           {"overlap_dp", &sw->overlap_dp},
           {"fused_log_softmax", &sw->fused_log_softmax},
           {"fused_grad_accumulation", &sw->fused_grad_accumulation},
           {"separate_optimizer_passes", &sw->separate_optimizer_passes},
           {"pp_scatter_gather", &sw->pp_scatter_gather},
           {"interleaved_schedule", &sw->interleaved_schedule},
           {"zero_bubble_schedule", &sw->zero_bubble_schedule},
           {"legacy_conventions", &sw->legacy_conventions},
           {"pp_async_sends", &sw->pp_async_sends},
           {"unfused_elementwise", &sw->unfused_elementwise},
           {"separate_projections", &sw->separate_projections},
           {"attention_layout_copies", &sw->attention_layout_copies},
           {"tp_comm_overlap", &sw->tp_comm_overlap},
           {"nccl_collectives", &sw->nccl_collectives},
           {"fully_sharded", &sw->fully_sharded},
           {"partial_recompute", &sw->partial_recompute},
           {"fsdp_gathers_once_under_pp", &sw->fsdp_gathers_once_under_pp},
           {"gather_copy_out", &sw->gather_copy_out},
           {"fp8_dynamic_scaling", &sw->fp8_dynamic_scaling},
           {"selective_is_op", &sw->selective_is_op},
           {"trainer_activation_buffer", &sw->trainer_activation_buffer}}) {
    r.Add(key, out, required);
  }
  r.Add("attention_fwd_slowdown", &sw->attention_fwd_slowdown, slowdown, required);
  r.Add("attention_bwd_slowdown", &sw->attention_bwd_slowdown, slowdown, required);
  r.Add("causal_block_rows", &sw->causal_block_rows,
        {0, kInf, false, false, "query rows per block; 0: the full s x s scores"}, required);
  r.AddChoice("buckets", buckets, BucketChoices(), required);
  r.Add("overlap_slowdown", &sw->overlap_slowdown,
        {0, 1, false, false, "the compute's slowdown beside overlapped communication, e.g. 0.189"},
        required);
  r.Add("max_searched_zero", max_zero, {0, 3, false, false, "a ZeRO stage"}, required);
  r.Add("launch_us", &sw->launch_us, {0, 1000, false, false, "microseconds to issue one kernel"},
        required);
  r.Add("framework_gib", &sw->framework_gib, {0, 1024, false, false, "GiB outside the model"},
        required);
}

// A word that only versions a name: "2.0", "0.8", "2023", "v2".
bool IsVersionWord(const std::string& w) {
  if (w.empty()) return false;
  const size_t digit = w[0] == 'v' ? 1 : 0;
  return digit < w.size() && w[digit] >= '0' && w[digit] <= '9';
}

std::string Joined(const std::vector<std::string>& words) {
  std::string key;
  for (const std::string& w : words) key += (key.empty() ? "" : "-") + w;
  return key;
}

// A stack's name or alias as a key: what NameKey makes of it, and only
// letters, digits, '-' and '.'.
bool IsStackKey(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
  });
}

// Adds a mention of `stack` (by `word`) unless it is "" or already named.
void AddMention(const std::string& stack, const std::string& word,
                std::vector<StackCatalog::Mention>* named) {
  const bool seen = std::any_of(named->begin(), named->end(),
                                [&](const StackCatalog::Mention& m) { return m.stack == stack; });
  if (!stack.empty() && !seen) named->push_back({stack, word});
}

}  // namespace

Status StackCatalog::LoadDir(const std::string& dir) {
  ST_ASSIGN_OR_RETURN(const std::vector<std::string> files, TomlFilesIn(dir, "software stack"));
  return LoadFiles(files);
}

Status StackCatalog::LoadFile(const std::string& path) { return LoadFiles({path}); }

Status StackCatalog::LoadFiles(const std::vector<std::string>& paths) {
  std::map<std::string, Pending> pending;
  for (const std::string& path : paths) {
    const std::string name = fs::path(path).stem().string();
    if (!IsStackKey(name)) {
      return InvalidArgument(
          path + ": a stack is named by its file, and '" + name +
          "' is no stack name; name the file in lower case letters, digits, '-' and '.'");
    }
    const auto earlier = stacks_.find(name);
    const std::string other = earlier != stacks_.end() ? earlier->second.path
                              : pending.count(name)    ? pending.at(name).path
                                                       : "";
    if (!other.empty()) {
      return InvalidArgument(path + ": stack '" + name + "' is already defined by " + other +
                             "; give the file another name (base = \"" + name +
                             "\" takes that stack's keys)");
    }
    ST_ASSIGN_OR_RETURN(toml::table t, ParseTomlFile(path));
    pending.emplace(name, Pending{path, std::move(t)});
  }
  for (const auto& [name, p] : pending) {
    std::vector<std::string> chain;
    ST_RETURN_IF_ERROR(Resolve(name, pending, chain));
  }
  return Status::Ok();
}

Status StackCatalog::Resolve(const std::string& name, std::map<std::string, Pending>& pending,
                             std::vector<std::string>& chain) {
  if (stacks_.count(name)) return Status::Ok();
  const Pending& p = pending.at(name);
  TableReader r(p.path);
  Entry e;
  e.path = p.path;
  const std::string base = p.table["base"].value_or(std::string());
  if (!base.empty()) {
    const std::string where = r.Where(p.table.get("base"));
    if (std::find(chain.begin(), chain.end(), base) != chain.end() || base == name) {
      std::string loop;
      for (const std::string& s : chain) loop += s + " -> ";
      return InvalidArgument(where + "base = \"" + base + "\" makes a loop (" + loop + name +
                             " -> " + base + "); a stack's base must not be built on it");
    }
    if (!stacks_.count(base) && !pending.count(base)) {
      return NotFound(where + UnknownNameMessage("base stack", base, Names()));
    }
    chain.push_back(name);
    ST_RETURN_IF_ERROR(Resolve(base, pending, chain));
    chain.pop_back();
    e.sw = stacks_.at(base).sw;
  }
  r.Add("description", &e.description);
  r.Add("aliases", &e.aliases);
  r.Add("base", &e.base);
  std::string buckets = BucketsName(e.sw.buckets);
  int64_t max_zero = e.sw.max_searched_zero;
  AddSoftwareKeys(r, &e.sw, &buckets, &max_zero, base.empty());
  r.SetMissingHint(
      "a stack file without `base` states every key; or add base = \"NAME\" to take the keys "
      "it does not state from stack NAME");
  ST_RETURN_IF_ERROR(r.Read(p.table));
  e.sw.name = name;
  e.sw.buckets = BucketsFromName(buckets);
  e.sw.max_searched_zero = static_cast<int>(max_zero);
  if (const std::string owner = StackOf(name); !owner.empty()) {
    return InvalidArgument(p.path + ": stack '" + name + "' is already an alias of stack '" +
                           owner + "' (" + stacks_.at(owner).path +
                           "); give the file another name");
  }
  ST_RETURN_IF_ERROR(AddAliases(name, e, r.Where(p.table.get("aliases"))));
  stacks_.emplace(name, std::move(e));
  return Status::Ok();
}

Status StackCatalog::AddAliases(const std::string& name, const Entry& e, const std::string& where) {
  for (const std::string& alias : e.aliases) {
    const std::string key = NameKey(Trim(alias));
    if (!IsStackKey(key)) {
      return InvalidArgument(where + "alias '" + alias +
                             "' is no name; use letters, digits, '-', '.', spaces or '_'");
    }
    const std::string owner = key == name ? name : StackOf(key);
    if (!owner.empty()) {
      return InvalidArgument(where + "alias '" + alias + "' already names stack '" + owner + "' (" +
                             (owner == name ? e.path : stacks_.at(owner).path) +
                             "); an alias names one stack: remove one of them");
    }
    aliases_[key] = name;
  }
  return Status::Ok();
}

std::string StackCatalog::StackOf(const std::string& key) const {
  if (stacks_.count(key)) return key;
  const auto it = aliases_.find(key);
  return it == aliases_.end() ? "" : it->second;
}

bool StackCatalog::DerivesFrom(const std::string& derived, const std::string& base) const {
  for (std::string s = derived; !s.empty(); s = stacks_.at(s).base) {
    if (s == base) return true;
  }
  return false;
}

Result<std::string> StackCatalog::StackOfWords(const std::string& given,
                                               const std::vector<std::string>& words) const {
  std::vector<Mention> named;
  for (const std::string& w : words) AddMention(StackOf(w), w, &named);
  if (named.empty()) return std::string();
  for (const Mention& candidate : named) {
    const bool refines_all = std::all_of(named.begin(), named.end(), [&](const Mention& other) {
      return DerivesFrom(candidate.stack, other.stack);
    });
    if (refines_all) return candidate.stack;
  }
  std::string which;
  for (const Mention& m : named)
    which += (which.empty() ? "" : ", ") + m.stack + " ('" + m.word + "')";
  return InvalidArgument("software stack '" + given + "' names several stacks: " + which +
                         "; give one of them, or a stack file of your own (--stack-file)");
}

Result<Software> StackCatalog::Find(const std::string& given) const {
  std::string stack = StackOf(NameKey(Trim(given)));
  const std::vector<std::string> words = LowerWords(given, "-.");
  if (stack.empty()) stack = StackOf(Joined(words));
  std::vector<std::string> unversioned;
  std::copy_if(words.begin(), words.end(), std::back_inserter(unversioned),
               [](const std::string& w) { return !IsVersionWord(w); });
  if (stack.empty()) stack = StackOf(Joined(unversioned));
  if (stack.empty()) {
    ST_ASSIGN_OR_RETURN(stack, StackOfWords(given, unversioned));
  }
  if (stack.empty()) return NotFound(UnknownStackMessage(given));
  return stacks_.at(stack).sw;
}

std::string StackCatalog::UnknownStackMessage(const std::string& given) const {
  std::vector<std::string> keys = Names();
  for (const auto& [alias, stack] : aliases_) keys.push_back(alias);
  std::string msg = "unknown software stack '" + given + "'" +
                    DidYouMean(NameKey(Trim(given)), keys) + " stacks:";
  for (const auto& [name, e] : stacks_) {
    msg += " " + name;
    std::string also;
    for (size_t i = 0; i < e.aliases.size() && i < 3; ++i)
      also += (i ? ", " : "") + NameKey(e.aliases[i]);
    if (!also.empty()) msg += " (also " + also + (e.aliases.size() > 3 ? ", ...)" : ")");
    msg += ",";
  }
  msg.pop_back();
  return msg +
         "; or describe yours in a stack file (--stack-file FILE; docs/planner.md, \"Software "
         "stacks\")";
}

std::vector<std::string> StackCatalog::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, e] : stacks_) names.push_back(name);
  return names;
}

std::vector<StackCatalog::Mention> StackCatalog::Mentions(const std::string& text) const {
  std::vector<Mention> mentions;
  for (const std::string& w : LowerWords(text, "-.")) {
    AddMention(StackOf(w), w, &mentions);
    for (const std::string& part : LowerWords(w)) AddMention(StackOf(part), part, &mentions);
  }
  return mentions;
}

}  // namespace scaletrain::plan
