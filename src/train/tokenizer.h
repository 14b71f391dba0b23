// Vocabularies for `data prepare` and for turning ids back into text.
//  - "char": one id per distinct UTF-8 character of the input, sorted by code
//    point (nanoGPT's shakespeare_char order: 65 ids for Tiny Shakespeare).
//  - "byte": ids 0..255 are the bytes themselves.
// Stored beside the data as vocab.json:
//   {"kind": "char", "vocab_size": 65, "pieces": ["\n", " ", "!", ...]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace scaletrain {

class Vocabulary {
 public:
  static Vocabulary Bytes();
  // The char vocabulary of `text`; error if text is empty or not UTF-8.
  static Result<Vocabulary> CharsOf(const std::string& text);
  static Result<Vocabulary> Load(const std::string& path);
  Status Save(const std::string& path) const;
  // The vocab.json object, and back (checkpoint manifests embed it so a
  // checkpoint samples text without the data directory).
  nlohmann::json ToJson() const;
  static Result<Vocabulary> FromJson(const nlohmann::json& j, const std::string& source);

  const std::string& kind() const { return kind_; }
  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  // Error naming the first character not in the vocabulary.
  Result<std::vector<int32_t>> Encode(const std::string& text) const;
  // Ids outside the vocabulary decode as U+FFFD.
  std::string Decode(const std::vector<int32_t>& ids) const;

 private:
  std::string kind_;
  std::vector<std::string> pieces_;
};

struct PrepareOptions {
  std::string input;          // a text file
  std::string output_dir;     // created if missing
  double val_fraction = 0.1;  // the last fraction of the text is validation
  std::string vocab = "char"; // "char" or "byte"
};

struct PrepareSummary {
  int64_t vocab_size = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};

// Writes <output_dir>/train.bin, val.bin and vocab.json. Errors: missing
// input, empty input, val_fraction outside (0, 1), unknown vocab kind.
Result<PrepareSummary> PrepareTextData(const PrepareOptions& opts);

}  // namespace scaletrain
