#include "plan/toml_util.h"

namespace scaletrain::plan {

Status TableReader::Read(const toml::table& t) const {
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    bool known = false;
    for (const auto& f : fields_) known |= key == f.key;
    if (!known) {
      std::string valid;
      for (const auto& f : fields_) valid += (valid.empty() ? "" : ", ") + std::string(f.key);
      return InvalidArgument(where_ + ": unknown key '" + key + "'; valid keys: " + valid);
    }
  }
  for (const auto& f : fields_) {
    const toml::node* n = t.get(f.key);
    if (n == nullptr) {
      if (f.required) return InvalidArgument(where_ + ": missing required key '" + f.key + "'");
      continue;
    }
    bool ok = true;
    if (auto* d = std::get_if<double*>(&f.out)) {
      // Integers are accepted where a number is expected: "hbm_gib = 80".
      if (auto v = n->value<double>()) **d = *v; else ok = false;
    } else if (auto* i = std::get_if<int64_t*>(&f.out)) {
      if (n->is_integer()) {
        **i = *n->value<int64_t>();
      } else if (auto v = n->value<double>(); v && *v == static_cast<double>(static_cast<int64_t>(*v))) {
        **i = static_cast<int64_t>(*v);  // 175.0e9-style whole numbers
      } else {
        ok = false;
      }
    } else if (auto* s = std::get_if<std::string*>(&f.out)) {
      if (auto v = n->value<std::string>()) **s = *v; else ok = false;
    }
    if (!ok) {
      const char* want = std::holds_alternative<std::string*>(f.out) ? "a string"
                         : std::holds_alternative<int64_t*>(f.out) ? "an integer" : "a number";
      return InvalidArgument(where_ + ": key '" + f.key + "' must be " + want);
    }
  }
  return Status::Ok();
}

Result<toml::table> ParseTomlFile(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    return InvalidArgument(path + ":" + std::to_string(src.begin.line) + ": " + std::string(e.description()));
  } catch (const std::exception& e) {
    return IoError("cannot read " + path + ": " + e.what());
  }
}

}  // namespace scaletrain::plan
