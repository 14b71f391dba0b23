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
    } else if (auto* rows = std::get_if<std::vector<std::vector<double>>*>(&f.out)) {
      (*rows)->clear();
      const toml::array* arr = n->as_array();
      ok = arr != nullptr;
      for (size_t i = 0; ok && i < arr->size(); ++i) {
        const toml::array* row = (*arr)[i].as_array();
        ok = row != nullptr && row->size() == f.row_len;
        std::vector<double> vals;
        for (size_t j = 0; ok && j < f.row_len; ++j) {
          auto v = (*row)[j].value<double>();
          ok = v.has_value();
          if (ok) vals.push_back(*v);
        }
        if (ok) (*rows)->push_back(std::move(vals));
      }
    }
    if (!ok) {
      const std::string rows_want = "an array of arrays of " + std::to_string(f.row_len) + " numbers";
      const char* want = std::holds_alternative<std::string*>(f.out)   ? "a string"
                         : std::holds_alternative<int64_t*>(f.out)     ? "an integer"
                         : std::holds_alternative<double*>(f.out)      ? "a number"
                                                                       : rows_want.c_str();
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
