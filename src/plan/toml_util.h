// Strict reading of one TOML table into plain fields: a key the table does
// not know, a value of the wrong type, or one outside its range or its
// choices is one error naming the file, the key's line, the key and what is
// valid. Shared by the hardware catalog, the model preset loader and the
// stack files.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"

namespace scaletrain::plan {

// The values a number may take, and what it is, for the error:
// "must be in (0, 1] (a fraction: an achieved share of the peak)".
struct Bounds {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  const char* what = "";

  bool Holds(double v) const;
  std::string Text() const;  // "(0, 1]", "[0, inf)"
};

class TableReader {
 public:
  // Errors read "FILE:LINE: CONTEXT: ..." (CONTEXT the table, e.g.
  // "[gpu.h100-sxm]"; none for a file that is one table).
  explicit TableReader(std::string file, std::string context = "")
      : file_(std::move(file)), context_(std::move(context)) {}
  void Add(const char* key, double* out, bool required = false) { Push(key, out, required); }
  void Add(const char* key, double* out, Bounds b, bool required = false) { Push(key, out, required, b); }
  void Add(const char* key, int64_t* out, bool required = false) { Push(key, out, required); }
  void Add(const char* key, int64_t* out, Bounds b, bool required = false) { Push(key, out, required, b); }
  void Add(const char* key, std::string* out, bool required = false) { Push(key, out, required); }
  void Add(const char* key, bool* out, bool required = false) { Push(key, out, required); }
  // A boolean, left unset when the key is absent.
  void Add(const char* key, std::optional<bool>* out) { Push(key, out, false); }
  // An array of strings.
  void Add(const char* key, std::vector<std::string>* out) { Push(key, out, false); }
  // An array of rows, each an array of exactly `row_len` numbers.
  void Add(const char* key, std::vector<std::vector<double>>* out, size_t row_len) {
    Push(key, out, false);
    fields_.back().row_len = row_len;
  }
  // A string that must be one of `choices`.
  void AddChoice(const char* key, std::string* out, std::vector<std::string> choices, bool required = false) {
    Push(key, out, required);
    fields_.back().choices = std::move(choices);
  }
  // Appended to the error for a missing required key: how else to satisfy it.
  void SetMissingHint(std::string hint) { missing_hint_ = std::move(hint); }
  Status Read(const toml::table& t) const;

  // "FILE:LINE: CONTEXT: " for an error about `n` (no line where toml++
  // has none).
  std::string Where(const toml::node* n) const;

 private:
  using Out = std::variant<double*, int64_t*, std::string*, bool*, std::optional<bool>*,
                           std::vector<std::string>*, std::vector<std::vector<double>>*>;
  struct Field {
    const char* key;
    Out out;
    bool required;
    std::optional<Bounds> bounds;
    size_t row_len = 0;
    std::vector<std::string> choices;
  };
  void Push(const char* key, Out out, bool required, std::optional<Bounds> b = std::nullopt) {
    fields_.push_back({key, out, required, b, 0, {}});
  }
  // A key of `t` no field has: an error listing the valid keys.
  Status CheckKeys(const toml::table& t) const;
  // Reads the field's node: its type, then its range or choices.
  Status ReadOne(const toml::node& n, const Field& f) const;
  // Reads `n` into the field; false if it holds another type.
  static bool ReadField(const toml::node& n, const Field& f);
  // What the field's value must be, for the error: "an integer", ...
  static std::string Expected(const Field& f);
  std::string file_, context_, missing_hint_;
  std::vector<Field> fields_;
};

// Parses a TOML file, turning toml++'s exception into a Status.
Result<toml::table> ParseTomlFile(const std::string& path);

// The *.toml files of a catalog folder, in name order (a later file may
// build on an earlier one); an error naming `what` (e.g. "hardware catalog")
// where the folder cannot be listed or holds none.
Result<std::vector<std::string>> TomlFilesIn(const std::string& dir, const std::string& what);

}  // namespace scaletrain::plan
