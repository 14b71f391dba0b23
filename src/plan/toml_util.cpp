#include "plan/toml_util.h"

#include <cmath>

namespace scaletrain::plan {

namespace {

// Each reads `n` into `out` if it holds that type; false if it does not.
bool ReadValue(const toml::node& n, double* out) {
  // Integers are accepted where a number is expected: "hbm_gib = 80".
  auto v = n.value<double>();
  if (v) *out = *v;
  return v.has_value();
}

bool ReadValue(const toml::node& n, int64_t* out) {
  if (n.is_integer()) {
    *out = *n.value<int64_t>();
    return true;
  }
  // 175.0e9-style whole numbers, within int64: casting a value outside it
  // (or NaN) is undefined behaviour, not a number to read.
  if (auto v = n.value<double>();
      v && *v >= -9223372036854775808.0 && *v < 9223372036854775808.0 && *v == std::trunc(*v)) {
    *out = static_cast<int64_t>(*v);
    return true;
  }
  return false;
}

bool ReadValue(const toml::node& n, std::string* out) {
  auto v = n.value<std::string>();
  if (v) *out = *v;
  return v.has_value();
}

bool ReadValue(const toml::node& n, std::optional<bool>* out) {
  auto v = n.value<bool>();
  if (v) *out = *v;
  return v.has_value();
}

// An array of rows of exactly `row_len` numbers each.
bool ReadRows(const toml::node& n, size_t row_len, std::vector<std::vector<double>>* out) {
  out->clear();
  const toml::array* arr = n.as_array();
  bool ok = arr != nullptr;
  for (size_t i = 0; ok && i < arr->size(); ++i) {
    const toml::array* row = (*arr)[i].as_array();
    ok = row != nullptr && row->size() == row_len;
    std::vector<double> vals;
    for (size_t j = 0; ok && j < row_len; ++j) {
      auto v = (*row)[j].value<double>();
      ok = v.has_value();
      if (ok) vals.push_back(*v);
    }
    if (ok) out->push_back(std::move(vals));
  }
  return ok;
}

}  // namespace

Status TableReader::CheckKeys(const toml::table& t) const {
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
  return Status::Ok();
}

bool TableReader::ReadField(const toml::node& n, const Field& f) {
  if (auto* d = std::get_if<double*>(&f.out)) return ReadValue(n, *d);
  if (auto* i = std::get_if<int64_t*>(&f.out)) return ReadValue(n, *i);
  if (auto* s = std::get_if<std::string*>(&f.out)) return ReadValue(n, *s);
  if (auto* b = std::get_if<std::optional<bool>*>(&f.out)) return ReadValue(n, *b);
  return ReadRows(n, f.row_len, *std::get_if<std::vector<std::vector<double>>*>(&f.out));
}

std::string TableReader::Expected(const Field& f) {
  if (std::holds_alternative<std::string*>(f.out)) return "a string";
  if (std::holds_alternative<std::optional<bool>*>(f.out)) return "true or false";
  if (std::holds_alternative<int64_t*>(f.out)) return "an integer";
  if (std::holds_alternative<double*>(f.out)) return "a number";
  return "an array of arrays of " + std::to_string(f.row_len) + " numbers";
}

Status TableReader::Read(const toml::table& t) const {
  ST_RETURN_IF_ERROR(CheckKeys(t));
  for (const auto& f : fields_) {
    const toml::node* n = t.get(f.key);
    if (n == nullptr) {
      if (f.required) return InvalidArgument(where_ + ": missing required key '" + f.key + "'");
      continue;
    }
    if (!ReadField(*n, f)) {
      return InvalidArgument(where_ + ": key '" + f.key + "' must be " + Expected(f));
    }
  }
  return Status::Ok();
}

Result<toml::table> ParseTomlFile(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    return InvalidArgument(path + ":" + std::to_string(src.begin.line) + ": " +
                           std::string(e.description()));
  } catch (const std::exception& e) {
    return IoError("cannot read " + path + ": " + e.what());
  }
}

}  // namespace scaletrain::plan
