#include "data/hf_tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "data/bpe.h"

namespace fs = std::filesystem;

namespace scaletrain {

namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else {  // GPT-2's stand-ins are all below U+0800
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// A BPE model without merges over `vocab` (token -> id): every character of
// the input that is a token becomes that token.
nlohmann::json MergelessBpe(nlohmann::json vocab) {
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", std::move(vocab)},
          {"merges", nlohmann::json::array()}};
}

nlohmann::json TokenizerJson(nlohmann::json model, nlohmann::json pre_tokenizer,
                             nlohmann::json decoder) {
  return {{"version", "1.0"},          {"truncation", nullptr},
          {"padding", nullptr},        {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},     {"pre_tokenizer", std::move(pre_tokenizer)},
          {"post_processor", nullptr}, {"decoder", std::move(decoder)},
          {"model", std::move(model)}};
}

// tokenizer.json, tokenizer_config.json and scaletrain_vocab.json.
Status WriteTokenizerFiles(const nlohmann::json& tokenizer, const Vocabulary& vocab,
                           int64_t max_length, const std::string& dir) {
  const fs::path d(dir);
  ST_RETURN_IF_ERROR(
      WriteFileAtomically((d / "tokenizer.json").string(), tokenizer.dump(1) + "\n"));
  const nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                 {"model_max_length", max_length},
                                 {"clean_up_tokenization_spaces", false}};
  ST_RETURN_IF_ERROR(
      WriteFileAtomically((d / "tokenizer_config.json").string(), config.dump(1) + "\n"));
  return vocab.Save((d / kHfScaletrainVocabFile).string());
}

Status WriteCharTokenizer(const Vocabulary& vocab, int64_t max_length, const std::string& dir) {
  nlohmann::json ids = nlohmann::json::object();
  const nlohmann::json pieces = vocab.ToJson().at("pieces");
  for (size_t i = 0; i < pieces.size(); ++i) ids[pieces[i].get<std::string>()] = i;
  const nlohmann::json fuse = {{"type", "Fuse"}};
  return WriteTokenizerFiles(TokenizerJson(MergelessBpe(std::move(ids)), nullptr, fuse), vocab,
                             max_length, dir);
}

Status WriteByteTokenizer(const Vocabulary& vocab, int64_t max_length, const std::string& dir) {
  nlohmann::json ids = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) ids[ByteLevelChar(b)] = b;
  // No regex split and no prefix space: the text's bytes, nothing added.
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", false},
                                     {"use_regex", false}};
  return WriteTokenizerFiles(TokenizerJson(MergelessBpe(std::move(ids)), byte_level, byte_level),
                             vocab, max_length, dir);
}

// A byte-level BPE (data/bpe.h): Hugging Face's own pair, vocab.json and
// merges.txt (GPT2TokenizerFast reads these), and tokenizer.json with the
// same model behind GPT-2's byte-level pre-tokenizer (its regex, no prefix
// space) and decoder, which PreTrainedTokenizerFast reads.
Status WriteBpeTokenizer(const Vocabulary& vocab, int64_t max_length, const std::string& dir) {
  const BpeModel& bpe = *vocab.bpe();
  const std::string vocab_json = HfVocabJson(bpe), merges_txt = HfMergesText(bpe);
  const fs::path d(dir);
  ST_RETURN_IF_ERROR(WriteFileAtomically((d / "vocab.json").string(), vocab_json));
  ST_RETURN_IF_ERROR(WriteFileAtomically((d / "merges.txt").string(), merges_txt));
  nlohmann::json model = MergelessBpe(nlohmann::json::parse(vocab_json));
  std::pair<std::string, std::string> merge;
  for (size_t start = 0; start < merges_txt.size();) {
    size_t end = merges_txt.find('\n', start);
    if (end == std::string::npos) end = merges_txt.size();
    const std::string_view line(merges_txt.data() + start, end - start);
    if (ParseMergeLine(line, &merge)) model["merges"].push_back(merge.first + " " + merge.second);
    start = end + 1;
  }
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", false},
                                     {"use_regex", true}};
  return WriteTokenizerFiles(TokenizerJson(std::move(model), byte_level, byte_level), vocab,
                             max_length, dir);
}

}  // namespace

std::string ByteLevelChar(int b) {
  // Bytes that print (and are not space) stand for themselves; the others,
  // in byte order, take the code points from U+0100 on.
  const auto prints = [](int v) {
    return (v >= '!' && v <= '~') || (v >= 0xA1 && v <= 0xAC) || (v >= 0xAE && v <= 0xFF);
  };
  uint32_t cp = static_cast<uint32_t>(b);
  if (!prints(b)) {
    uint32_t n = 0;
    for (int v = 0; v < b; ++v) n += prints(v) ? 0 : 1;
    cp = 256 + n;
  }
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

const std::map<std::string, HfTokenizerWriter>& HfTokenizerWriters() {
  static const std::map<std::string, HfTokenizerWriter> writers = {
      {"char", WriteCharTokenizer},
      {"byte", WriteByteTokenizer},
      {"bpe", WriteBpeTokenizer},
  };
  return writers;
}

Status WriteHfTokenizer(const Vocabulary& vocab, int64_t max_length, const std::string& dir) {
  const auto& writers = HfTokenizerWriters();
  const auto it = writers.find(vocab.kind());
  if (it == writers.end()) {
    return FailedPrecondition("no Hugging Face tokenizer export for vocabulary kind '" +
                              vocab.kind() + "'; export supports char, byte and bpe vocabularies");
  }
  return it->second(vocab, max_length, dir);
}

Result<std::optional<Vocabulary>> ReadHfVocabulary(const std::string& dir) {
  const fs::path path = fs::path(dir) / kHfScaletrainVocabFile;
  const fs::path vocab_json = fs::path(dir) / "vocab.json", merges = fs::path(dir) / "merges.txt";
  std::error_code ec;
  if (fs::exists(path, ec)) {
    ST_ASSIGN_OR_RETURN(Vocabulary v, Vocabulary::Load(path.string()));
    return std::optional<Vocabulary>(std::move(v));
  }
  // A byte-level BPE in Hugging Face's own pair (GPT-2's files).
  if (fs::exists(vocab_json, ec) && fs::exists(merges, ec)) {
    ST_ASSIGN_OR_RETURN(BpeModel bpe, LoadHfBpe(vocab_json.string(), merges.string()));
    return std::optional<Vocabulary>(Vocabulary::Bpe(std::move(bpe)));
  }
  return std::optional<Vocabulary>();
}

}  // namespace scaletrain
