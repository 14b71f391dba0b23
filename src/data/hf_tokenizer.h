// The tokenizer files of a Hugging Face model directory, written for a
// checkpoint's vocabulary (`scaletrain export --format hf`) and read back
// (`scaletrain import`). One writer per vocabulary kind (HfTokenizerWriters):
//  - "char": tokenizer.json for the `tokenizers` library: a BPE model with no
//    merges whose vocabulary is the characters (each character is one
//    token, id as ours), no normalizer or pre-tokenizer, the Fuse decoder
//    (tokens are concatenated without spaces).
//  - "byte": tokenizer.json with GPT-2's byte-level pre-tokenizer and decoder
//    (each byte shown as GPT-2's printable stand-in character) and a BPE
//    model with no merges over the 256 stand-ins: id = byte value, as ours.
// Both also write tokenizer_config.json (PreTrainedTokenizerFast, so
// transformers.AutoTokenizer loads it) and scaletrain_vocab.json, our own
// vocab.json (data/tokenizer.h), which import reads to restore the exact
// vocabulary.
//  - "bpe": a byte-level BPE (data/bpe.h): Hugging Face's vocab.json and
//    merges.txt, and tokenizer.json with the same merges behind GPT-2's
//    byte-level pre-tokenizer (its regex, no prefix space) and decoder.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "core/status.h"
#include "data/tokenizer.h"

namespace scaletrain {

inline constexpr const char* kHfScaletrainVocabFile = "scaletrain_vocab.json";

// Writes the tokenizer files of `vocab` into `dir` (which exists).
// `max_length`: the model's context (tokenizer_config.json's model_max_length).
using HfTokenizerWriter =
    std::function<Status(const Vocabulary& vocab, int64_t max_length, const std::string& dir)>;
// Vocabulary kind -> its writer.
const std::map<std::string, HfTokenizerWriter>& HfTokenizerWriters();

// Writes the tokenizer files for `vocab`; an error names a kind without a writer.
Status WriteHfTokenizer(const Vocabulary& vocab, int64_t max_length, const std::string& dir);

// The vocabulary scaletrain_vocab.json in `dir` describes (a model exported
// by scaletrain), else the byte-level BPE of its vocab.json + merges.txt (a
// GPT-2-style model from elsewhere), else nullopt.
Result<std::optional<Vocabulary>> ReadHfVocabulary(const std::string& dir);

// GPT-2's byte-level stand-ins: byte b as the printable character (UTF-8)
// that GPT-2's vocab.json and tokenizer.json use for it.
std::string ByteLevelChar(int b);

}  // namespace scaletrain
