// Byte-level BPE as GPT-2 does it: the text is split into pre-tokens by
// GPT-2's pattern, each pre-token's bytes are merged pairwise by rank.
//  - Gpt2PreTokenizer: the pattern, run by PCRE2 (UTF, UCP, JIT).
//  - BpeModel: pieces (the bytes of each id) and merges (pairs of ids, in
//    rank order); encoding applies the merges as the Hugging Face
//    `tokenizers` library does, so both give the same ids.
//  - TrainBpe: learns merges from a text (Sennrich et al. 2016).
//  - The Hugging Face file pair: vocab.json (token -> id) and merges.txt,
//    tokens spelled with GPT-2's bytes-to-unicode alphabet (SpellBytes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace scaletrain {

// GPT-2's printable spelling of bytes: each byte becomes one code point (the
// printable Latin-1 bytes stand for themselves, the 68 others for U+0100..
// U+0143), written as UTF-8. SpellBytes is a bijection onto strings of
// those 256 characters; UnspellBytes inverts it and returns false on any
// other character.
std::string SpellBytes(std::string_view bytes);
bool UnspellBytes(std::string_view spelled, std::string* bytes);

// GPT-2's pre-tokenizer pattern:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
extern const char* const kGpt2Pattern;

class Gpt2PreTokenizer {
 public:
  // The compiled pattern (compiled once, shared by all threads).
  static Result<const Gpt2PreTokenizer*> Get();
  // Calls `piece` for each pre-token of `text`, in order; the pieces cover
  // the text exactly. Bytes that are not valid UTF-8 match no part of the
  // pattern: each run of them is a piece of its own.
  Status Split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

  ~Gpt2PreTokenizer();
  Gpt2PreTokenizer(const Gpt2PreTokenizer&) = delete;
  Gpt2PreTokenizer& operator=(const Gpt2PreTokenizer&) = delete;

 private:
  Gpt2PreTokenizer() = default;
  void* code_ = nullptr;  // pcre2_code_8
};

struct BpeMerge {
  int32_t left = 0;
  int32_t right = 0;
};

class BpeModel {
 public:
  // Checks that the pieces are distinct and non-empty, that both ids of
  // every merge exist, that each pair is merged once, and that the
  // concatenation of each merge's pieces is itself a piece. `source` names
  // where they came from in errors.
  static Result<BpeModel> Create(std::vector<std::string> pieces, std::vector<BpeMerge> merges,
                                 const std::string& source);

  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  const std::vector<std::string>& pieces() const { return pieces_; }
  const std::vector<BpeMerge>& merges() const { return merges_; }
  // The id whose piece is `bytes`, or -1.
  int32_t IdOf(std::string_view bytes) const;

  // Pre-tokenizes and encodes `text`. Error: a byte with no piece of its
  // own (the vocabulary does not cover all 256 bytes).
  Result<std::vector<int32_t>> Encode(std::string_view text) const;
  // One pre-token's ids, appended to *out; `offset` (of the word in the
  // text) is for the error message.
  Status EncodeWord(std::string_view word, size_t offset, std::vector<int32_t>* out) const;

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t id;
  };
  const MergeTarget* FindMerge(int32_t left, int32_t right) const;

  std::vector<std::string> pieces_;
  std::vector<BpeMerge> merges_;
  std::unordered_map<std::string, int32_t> id_of_;
  std::unordered_map<uint64_t, MergeTarget> merge_of_;  // (left << 32 | right)
  int32_t byte_id_[256];
};

// Learns merges from `text` until the vocabulary holds `vocab_size` pieces
// (ids 0..255 are the bytes; each new piece takes the next id) or no pair of
// adjacent symbols is left. Each step merges the most frequent pair of
// adjacent symbols over the pre-tokens, ties going to the smallest
// (left id, right id). Error: vocab_size < 256.
Result<BpeModel> TrainBpe(std::string_view text, int64_t vocab_size);

// The Hugging Face pair. Errors name the file, the line (merges) or token
// (vocab), the cause and the fix.
Result<BpeModel> LoadHfBpe(const std::string& vocab_path, const std::string& merges_path);
// vocab.json's text: {"spelled token": id, ...}.
std::string HfVocabJson(const BpeModel& model);
// merges.txt's text: "#version: 0.2" then one "left right" per line.
std::string HfMergesText(const BpeModel& model);

// Builds a model from spelled tokens (index = id) and merges given as pairs
// of spelled tokens; `where(i)` names merge i's origin in errors (a file and
// line). Shared by LoadHfBpe and the project's vocab.json.
Result<BpeModel> BpeFromSpelled(const std::vector<std::string>& spelled,
                                const std::vector<std::pair<std::string, std::string>>& merges,
                                const std::string& source,
                                const std::function<std::string(size_t)>& where);
// Splits one merges line "left right"; false unless exactly two non-empty
// parts separated by one space.
bool ParseMergeLine(std::string_view line, std::pair<std::string, std::string>* merge);

}  // namespace scaletrain
