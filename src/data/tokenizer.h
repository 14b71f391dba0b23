// Vocabularies for `data prepare` and for turning ids back into text.
//  - "char": one id per distinct UTF-8 character of the input, sorted by code
//    point (nanoGPT's shakespeare_char order: 65 ids for Tiny Shakespeare).
//  - "byte": ids 0..255 are the bytes themselves.
//  - "bpe": a GPT-2-style byte-level BPE (data/bpe.h), trained by `data
//    prepare --tokenizer bpe` or loaded from a Hugging Face vocab.json +
//    merges.txt (`--tokenizer hf`).
// Stored beside the data as vocab.json:
//   {"kind": "char", "vocab_size": 65, "pieces": ["\n", " ", "!", ...]}
//   {"kind": "bpe", "vocab_size": 4096, "pre_tokenizer": "gpt2",
//    "pieces": ["Ā", ..., "Ġthe", ...], "merges": ["Ġ t", "h e", ...]}
// A bpe file's pieces (index = id) and merges (in rank order, as merges.txt
// lines) are spelled with GPT-2's bytes-to-unicode alphabet, as in the
// Hugging Face files, so the JSON holds any bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "data/bpe.h"

namespace scaletrain {

class Vocabulary {
 public:
  static Vocabulary Bytes();
  // The char vocabulary of `text`; error if text is empty or not UTF-8.
  static Result<Vocabulary> CharsOf(const std::string& text);
  static Vocabulary Bpe(BpeModel model);
  static Result<Vocabulary> Load(const std::string& path);
  Status Save(const std::string& path) const;
  // The vocab.json object, and back (checkpoint manifests embed it so a
  // checkpoint samples text without the data directory).
  nlohmann::json ToJson() const;
  static Result<Vocabulary> FromJson(const nlohmann::json& j, const std::string& source);

  const std::string& kind() const { return kind_; }
  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  // The merges of a "bpe" vocabulary, else null.
  const BpeModel* bpe() const { return bpe_.get(); }
  // Error naming the first character not in the vocabulary.
  Result<std::vector<int32_t>> Encode(const std::string& text) const;
  // Ids outside the vocabulary decode as U+FFFD.
  std::string Decode(const std::vector<int32_t>& ids) const;

 private:
  static Result<Vocabulary> CharsFromJson(const nlohmann::json& pieces, const std::string& source);
  static Result<Vocabulary> BpeFromJson(const nlohmann::json& j, const std::string& source);

  std::string kind_;
  std::vector<std::string> pieces_;  // the bytes of each id
  std::shared_ptr<const BpeModel> bpe_;
};

struct PrepareOptions {
  std::string input;              // a text file
  std::string output_dir;         // created if missing
  double val_fraction = 0.1;      // the last fraction of the text is validation
  std::string tokenizer = "char"; // "char", "byte", "bpe" (trained here) or "hf"
  int64_t vocab_size = 0;         // bpe: the number of tokens to learn (>= 256)
  std::string hf_vocab;           // hf: vocab.json (token -> id)
  std::string hf_merges;          // hf: merges.txt
};

struct PrepareSummary {
  int64_t vocab_size = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};

// Writes <output_dir>/train.bin, val.bin and vocab.json; for "bpe" and "hf"
// also the Hugging Face pair hf_vocab.json + hf_merges.txt (what the
// `tokenizers` library loads). Errors: missing input, empty input,
// val_fraction outside (0, 1), unknown tokenizer, bpe without a vocab size
// >= 256, hf without both files or with files that do not parse; nothing is
// written then.
Result<PrepareSummary> PrepareTextData(const PrepareOptions& opts);

}  // namespace scaletrain
