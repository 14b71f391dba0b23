// Strict reading of one TOML table into plain fields: a key the table does
// not know, or a value of the wrong type, is an error naming the key, the
// file and the keys that are valid. Shared by the hardware catalog and the
// model preset loader.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <optional>
#include <variant>
#include <vector>

#include "core/status.h"

namespace scaletrain::plan {

class TableReader {
 public:
  TableReader(std::string where) : where_(std::move(where)) {}
  void Add(const char* key, double* out, bool required = false) {
    fields_.push_back({key, out, required});
  }
  void Add(const char* key, int64_t* out, bool required = false) {
    fields_.push_back({key, out, required});
  }
  void Add(const char* key, std::string* out, bool required = false) {
    fields_.push_back({key, out, required});
  }
  // A boolean, left unset when the key is absent.
  void Add(const char* key, std::optional<bool>* out) { fields_.push_back({key, out, false}); }
  // An array of rows, each an array of exactly `row_len` numbers.
  void Add(const char* key, std::vector<std::vector<double>>* out, size_t row_len) {
    fields_.push_back({key, out, false, row_len});
  }
  Status Read(const toml::table& t) const;

 private:
  struct Field {
    const char* key;
    std::variant<double*, int64_t*, std::string*, std::optional<bool>*, std::vector<std::vector<double>>*> out;
    bool required;
    size_t row_len = 0;
  };
  // A key of `t` no field has: an error listing the valid keys.
  Status CheckKeys(const toml::table& t) const;
  // Reads `n` into the field; false if it holds another type.
  static bool ReadField(const toml::node& n, const Field& f);
  // What the field's value must be, for the error: "an integer", ...
  static std::string Expected(const Field& f);
  std::string where_;
  std::vector<Field> fields_;
};

// Parses a TOML file, turning toml++'s exception into a Status.
Result<toml::table> ParseTomlFile(const std::string& path);

}  // namespace scaletrain::plan
