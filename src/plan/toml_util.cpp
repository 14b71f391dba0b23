#include "plan/toml_util.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <type_traits>

#include "core/strings.h"

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

bool ReadValue(const toml::node& n, bool* out) {
  auto v = n.value<bool>();
  if (v) *out = *v;
  return v.has_value();
}

bool ReadValue(const toml::node& n, std::optional<bool>* out) {
  auto v = n.value<bool>();
  if (v) *out = *v;
  return v.has_value();
}

bool ReadValue(const toml::node& n, std::vector<std::string>* out) {
  const toml::array* arr = n.as_array();
  if (arr == nullptr) return false;
  std::vector<std::string> words;
  for (const toml::node& e : *arr) {
    auto v = e.value<std::string>();
    if (!v) return false;
    words.push_back(*v);
  }
  *out = std::move(words);
  return true;
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

bool Bounds::Holds(double v) const {
  const bool above = lo_open ? v > lo : v >= lo;
  const bool below = hi_open ? v < hi : v <= hi;
  return above && below;  // false for NaN
}

std::string Bounds::Text() const {
  auto end = [](double v) { return std::isinf(v) ? std::string("inf") : Fmt("%g", v); };
  std::string text(lo_open ? "(" : "[");
  text += end(lo);
  text += ", ";
  text += end(hi);
  text += hi_open ? ")" : "]";
  return text;
}

std::string TableReader::Where(const toml::node* n) const {
  std::string w = file_;
  if (n != nullptr && n->source().begin.line > 0) {
    w += ':';
    w += std::to_string(n->source().begin.line);
  }
  w += ": ";
  if (!context_.empty()) w += context_ + ": ";
  return w;
}

Status TableReader::CheckKeys(const toml::table& t) const {
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    bool known = false;
    for (const auto& f : fields_) known |= key == f.key;
    if (!known) {
      std::string valid;
      for (const auto& f : fields_) valid += (valid.empty() ? "" : ", ") + std::string(f.key);
      return InvalidArgument(Where(&v) + "unknown key '" + key + "'; valid keys: " + valid);
    }
  }
  return Status::Ok();
}

bool TableReader::ReadField(const toml::node& n, const Field& f) {
  return std::visit(
      [&](auto* out) {
        if constexpr (std::is_same_v<decltype(out), std::vector<std::vector<double>>*>) {
          return ReadRows(n, f.row_len, out);
        } else {
          return ReadValue(n, out);
        }
      },
      f.out);
}

std::string TableReader::Expected(const Field& f) {
  if (std::holds_alternative<std::string*>(f.out)) return "a string";
  if (std::holds_alternative<bool*>(f.out) || std::holds_alternative<std::optional<bool>*>(f.out)) {
    return "true or false";
  }
  if (std::holds_alternative<int64_t*>(f.out)) return "an integer";
  if (std::holds_alternative<double*>(f.out)) return "a number";
  if (std::holds_alternative<std::vector<std::string>*>(f.out)) return "an array of strings";
  return "an array of arrays of " + std::to_string(f.row_len) + " numbers";
}

Status TableReader::ReadOne(const toml::node& n, const Field& f) const {
  if (!ReadField(n, f)) return InvalidArgument(Where(&n) + "key '" + f.key + "' must be " + Expected(f));
  if (f.bounds) {
    const double v = std::holds_alternative<double*>(f.out) ? *std::get<double*>(f.out)
                                                             : static_cast<double>(*std::get<int64_t*>(f.out));
    if (!f.bounds->Holds(v)) {
      return InvalidArgument(Where(&n) + f.key + Fmt(" = %g must be in ", v) + f.bounds->Text() + " (" +
                             f.bounds->what + ")");
    }
  }
  if (!f.choices.empty()) {
    const std::string& v = *std::get<std::string*>(f.out);
    std::string valid;
    for (const std::string& c : f.choices) {
      if (c == v) return Status::Ok();
      valid += (valid.empty() ? "" : ", ") + c;
    }
    return InvalidArgument(Where(&n) + f.key + " = '" + v + "' is not one of its choices: " + valid);
  }
  return Status::Ok();
}

Status TableReader::Read(const toml::table& t) const {
  ST_RETURN_IF_ERROR(CheckKeys(t));
  for (const auto& f : fields_) {
    const toml::node* n = t.get(f.key);
    if (n != nullptr) {
      ST_RETURN_IF_ERROR(ReadOne(*n, f));
    } else if (f.required) {
      return InvalidArgument(Where(&t) + "missing required key '" + f.key + "'" +
                             (missing_hint_.empty() ? "" : "; " + missing_hint_));
    }
  }
  return Status::Ok();
}

Result<std::vector<std::string>> TomlFilesIn(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".toml") files.push_back(e.path().string());
  }
  if (ec) return NotFound("cannot list " + what + " directory " + dir + ": " + ec.message());
  if (files.empty()) return NotFound("no *.toml files in " + what + " directory " + dir);
  std::sort(files.begin(), files.end());
  return files;
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
