#include "data/tokenizer.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/file_io.h"
#include "core/strings.h"
#include "data/data.h"

namespace scaletrain {

namespace {

namespace fs = std::filesystem;

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr const char* kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

std::string Hex(uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%0*X", width, v);
  return buf;
}

std::string CodePointName(char32_t cp) { return "U+" + Hex(cp, 4); }

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes the code point at text[*pos] and advances *pos past it. Rejects
// what RFC 3629 forbids (overlong forms, surrogates, > U+10FFFF, truncated
// or stray continuation bytes) so that every accepted text re-encodes to
// the same bytes and Decode(Encode(t)) == t holds.
Result<char32_t> NextCodePoint(const std::string& text, size_t* pos) {
  const size_t start = *pos;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(start);
  auto bad = [&](size_t at, const std::string& why) {
    return InvalidArgument("text is not valid UTF-8 at byte offset " + std::to_string(at) +
                           " (byte 0x" + Hex(byte(at), 2) + "): " + why +
                           "; convert the file to UTF-8, or use the \"byte\" vocabulary");
  };
  if (b0 < 0x80) {
    *pos = start + 1;
    return static_cast<char32_t>(b0);
  }
  int len;
  char32_t cp;
  char32_t min_cp;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min_cp = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min_cp = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min_cp = 0x10000;
  } else if ((b0 & 0xC0) == 0x80) {
    return bad(start, "unexpected continuation byte");
  } else {
    return bad(start, "byte that never occurs in UTF-8");
  }
  for (int k = 1; k < len; ++k) {
    const size_t i = start + static_cast<size_t>(k);
    if (i >= text.size()) return bad(start, "sequence cut off by the end of the text");
    if ((byte(i) & 0xC0) != 0x80) {
      return bad(start, "a " + std::to_string(len) + "-byte sequence is broken off by byte 0x" +
                            Hex(byte(i), 2) + " at byte offset " + std::to_string(i));
    }
    cp = (cp << 6) | (byte(i) & 0x3F);
  }
  if (cp < min_cp) return bad(start, "overlong encoding");
  if (cp >= 0xD800 && cp <= 0xDFFF) return bad(start, "encoded surrogate " + CodePointName(cp));
  if (cp > kMaxCodePoint) return bad(start, "code point above U+10FFFF");
  *pos = start + static_cast<size_t>(len);
  return cp;
}

// The piece for byte b in vocab.json: JSON strings must be valid UTF-8, so a
// raw byte >= 0x80 cannot be stored as itself; it is written as the code
// point of the same value (reading the byte as Latin-1).
std::string BytePieceForJson(int b) {
  std::string s;
  AppendUtf8(static_cast<char32_t>(b), &s);
  return s;
}

// Printable form of a character for error messages.
std::string Describe(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return CodePointName(cp);
  std::string s = "'";
  AppendUtf8(cp, &s);
  return s + "' (" + CodePointName(cp) + ")";
}

std::string ErrnoText(int err) { return std::strerror(err); }

Result<std::string> ReadWholeFile(const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return NotFound(what + " " + path + " not found");
  if (!fs::is_regular_file(st))
    return InvalidArgument(what + " " + path + " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot open " + what + " " + path + ": " + ErrnoText(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError("cannot read " + what + " " + path);
  return ss.str();
}

constexpr const char* kRegenerate = "; re-run `scaletrain data prepare` to regenerate it";

Status CorruptVocabulary(const std::string& source, const std::string& why) {
  return DataLoss(source + " is invalid: " + why + kRegenerate);
}

}  // namespace

Vocabulary Vocabulary::Bytes() {
  Vocabulary v;
  v.kind_ = "byte";
  v.pieces_.reserve(256);
  for (int b = 0; b < 256; ++b) v.pieces_.emplace_back(1, static_cast<char>(b));
  return v;
}

Vocabulary Vocabulary::Bpe(BpeModel model) {
  Vocabulary v;
  v.kind_ = "bpe";
  v.pieces_ = model.pieces();
  v.bpe_ = std::make_shared<const BpeModel>(std::move(model));
  return v;
}

Result<Vocabulary> Vocabulary::CharsOf(const std::string& text) {
  if (text.empty()) return InvalidArgument("cannot build a char vocabulary from empty text");
  std::vector<bool> seen(kMaxCodePoint + 1, false);
  for (size_t pos = 0; pos < text.size();) {
    ST_ASSIGN_OR_RETURN(char32_t cp, NextCodePoint(text, &pos));
    seen[cp] = true;
  }
  Vocabulary v;
  v.kind_ = "char";
  for (char32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (seen[cp]) {
      std::string piece;
      AppendUtf8(cp, &piece);
      v.pieces_.push_back(std::move(piece));
    }
  }
  return v;
}

Result<std::vector<int32_t>> Vocabulary::Encode(const std::string& text) const {
  std::vector<int32_t> ids;
  if (kind_ == "byte") {
    ids.reserve(text.size());
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  if (kind_ == "bpe") return bpe_->Encode(text);
  if (kind_ != "char") {
    return FailedPrecondition("cannot encode with an empty or unknown vocabulary (kind '" + kind_ +
                              "'); build or load one first");
  }
  // Most text is ASCII: a direct table for it, a map for the rest.
  int32_t ascii[128];
  std::fill(std::begin(ascii), std::end(ascii), -1);
  std::unordered_map<char32_t, int32_t> other;
  for (size_t id = 0; id < pieces_.size(); ++id) {
    size_t pos = 0;
    Result<char32_t> cp = NextCodePoint(pieces_[id], &pos);
    if (!cp.ok()) continue;  // Load() and CharsOf() never produce such pieces
    if (*cp < 128) {
      ascii[*cp] = static_cast<int32_t>(id);
    } else {
      other.emplace(*cp, static_cast<int32_t>(id));
    }
  }
  ids.reserve(text.size());
  int64_t char_index = 0;
  for (size_t pos = 0; pos < text.size(); ++char_index) {
    const size_t at = pos;
    ST_ASSIGN_OR_RETURN(char32_t cp, NextCodePoint(text, &pos));
    int32_t id = -1;
    if (cp < 128) {
      id = ascii[cp];
    } else if (auto it = other.find(cp); it != other.end()) {
      id = it->second;
    }
    if (id < 0) {
      return InvalidArgument("character " + Describe(cp) + " at byte offset " + std::to_string(at) +
                             " (character " + std::to_string(char_index) +
                             ") is not in the vocabulary of " + std::to_string(size()) +
                             " characters; rebuild the vocabulary from text that contains it, "
                             "or use the \"byte\" vocabulary");
    }
    ids.push_back(id);
  }
  return ids;
}

std::string Vocabulary::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < size()) {
      out += pieces_[static_cast<size_t>(id)];
    } else {
      out += kReplacementChar;
    }
  }
  return out;
}

nlohmann::json Vocabulary::ToJson() const {
  if (kind_ == "bpe") {
    nlohmann::json pieces = nlohmann::json::array(), merges = nlohmann::json::array();
    for (const std::string& p : pieces_) pieces.push_back(SpellBytes(p));
    for (const BpeMerge& m : bpe_->merges()) {
      merges.push_back(SpellBytes(pieces_[m.left]) + " " + SpellBytes(pieces_[m.right]));
    }
    return {{"kind", kind_},
            {"vocab_size", size()},
            {"pre_tokenizer", "gpt2"},
            {"pieces", std::move(pieces)},
            {"merges", std::move(merges)}};
  }
  nlohmann::json pieces = nlohmann::json::array();
  for (size_t i = 0; i < pieces_.size(); ++i) {
    pieces.push_back(kind_ == "byte" ? BytePieceForJson(static_cast<int>(i)) : pieces_[i]);
  }
  return {{"kind", kind_}, {"vocab_size", size()}, {"pieces", std::move(pieces)}};
}

Status Vocabulary::Save(const std::string& path) const {
  if (kind_ != "char" && kind_ != "byte" && kind_ != "bpe") {
    return FailedPrecondition("cannot save a vocabulary of unknown kind '" + kind_ + "'");
  }
  std::string text;
  try {
    text = ToJson().dump(1) + "\n";
  } catch (const nlohmann::json::exception& e) {
    return Internal("cannot serialise vocabulary for " + path + ": " + e.what());
  }
  return WriteFileAtomically(path, text);
}

Result<Vocabulary> Vocabulary::Load(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path, "vocabulary file");
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound(text.status().message() +
                      "; it is written beside train.bin by `scaletrain data prepare`");
    }
    return text.status();
  }
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return CorruptVocabulary("vocabulary file " + path, "not valid JSON");
  }
  return FromJson(j, "vocabulary file " + path);
}

namespace {

// What every kind of vocabulary file holds: a kind, its pieces as strings,
// and, if it states one, a vocab_size that counts them.
Status CheckVocabularyFields(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return CorruptVocabulary(source, "expected a JSON object");
  if (!j.contains("kind") || !j["kind"].is_string()) {
    return CorruptVocabulary(source, "missing string \"kind\"");
  }
  if (!j.contains("pieces") || !j["pieces"].is_array()) {
    return CorruptVocabulary(source, "missing array \"pieces\"");
  }
  const nlohmann::json& pieces = j["pieces"];
  if (j.contains("vocab_size")) {
    if (!j["vocab_size"].is_number_integer()) {
      return CorruptVocabulary(source, "\"vocab_size\" is not an integer");
    }
    const int64_t declared = j["vocab_size"].get<int64_t>();
    if (declared != static_cast<int64_t>(pieces.size())) {
      return CorruptVocabulary(source, "\"vocab_size\" is " + std::to_string(declared) +
                                           " but there are " + std::to_string(pieces.size()) +
                                           " pieces");
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].is_string()) {
      return CorruptVocabulary(source, "piece " + std::to_string(i) + " is not a string");
    }
  }
  return Status::Ok();
}

// A byte vocabulary's file must spell the 256 bytes in order, as Save does.
Status CheckBytePieces(const nlohmann::json& pieces, const std::string& source) {
  if (pieces.size() != 256) {
    return CorruptVocabulary(
        source, "a byte vocabulary has 256 pieces, found " + std::to_string(pieces.size()));
  }
  for (int b = 0; b < 256; ++b) {
    if (pieces[static_cast<size_t>(b)].get<std::string>() != BytePieceForJson(b)) {
      return CorruptVocabulary(source, "byte piece " + std::to_string(b) +
                                           " does not stand for byte " + std::to_string(b));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Vocabulary> Vocabulary::FromJson(const nlohmann::json& j, const std::string& source) {
  ST_RETURN_IF_ERROR(CheckVocabularyFields(j, source));
  const std::string kind = j["kind"].get<std::string>();
  if (kind == "byte") {
    ST_RETURN_IF_ERROR(CheckBytePieces(j["pieces"], source));
    return Bytes();
  }
  if (kind == "bpe") return BpeFromJson(j, source);
  if (kind != "char") {
    return CorruptVocabulary(
        source, "unknown kind '" + kind + "' (expected \"char\", \"byte\" or \"bpe\")");
  }
  return CharsFromJson(j["pieces"], source);
}

Result<Vocabulary> Vocabulary::CharsFromJson(const nlohmann::json& pieces,
                                             const std::string& source) {
  Vocabulary v;
  v.kind_ = "char";
  int64_t prev = -1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string piece = pieces[i].get<std::string>();
    size_t pos = 0;
    Result<char32_t> cp =
        piece.empty() ? Result<char32_t>(InvalidArgument("empty")) : NextCodePoint(piece, &pos);
    if (!cp.ok() || pos != piece.size()) {
      return CorruptVocabulary(source,
                               "piece " + std::to_string(i) + " is not exactly one character");
    }
    // Ids follow code point order; a file out of order or with duplicates
    // would map text to different ids than the data was prepared with.
    if (static_cast<int64_t>(*cp) <= prev) {
      return CorruptVocabulary(
          source,
          "pieces are not in strictly increasing code point order at piece " + std::to_string(i));
    }
    prev = static_cast<int64_t>(*cp);
    v.pieces_.push_back(std::move(piece));
  }
  if (v.pieces_.empty()) return CorruptVocabulary(source, "no pieces");
  return v;
}

Result<Vocabulary> Vocabulary::BpeFromJson(const nlohmann::json& j, const std::string& source) {
  auto corrupt = [&](const std::string& why) { return CorruptVocabulary(source, why); };
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"] != "gpt2") {
    return corrupt("a bpe vocabulary needs \"pre_tokenizer\": \"gpt2\" (the only one there is)");
  }
  if (!j.contains("merges") || !j["merges"].is_array()) return corrupt("missing array \"merges\"");
  std::vector<std::string> spelled;
  for (const nlohmann::json& p : j["pieces"]) spelled.push_back(p.get<std::string>());
  std::vector<std::pair<std::string, std::string>> merges(j["merges"].size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const nlohmann::json& m = j["merges"][i];
    if (!m.is_string() || !ParseMergeLine(m.get<std::string>(), &merges[i])) {
      return corrupt("merge " + std::to_string(i) + " is not a string \"left right\"");
    }
  }
  Result<BpeModel> model = BpeFromSpelled(spelled, merges, source, [&](size_t i) {
    return source + " merge " + std::to_string(i);
  });
  if (!model.ok()) return DataLoss(model.status().message() + kRegenerate);
  return Bpe(std::move(*model));
}

namespace {

const char* const kTokenizers = "char, byte, bpe or hf";

// --vocab-size: required by BPE (the bytes, then its merges), meaningless
// for the other kinds.
Status CheckVocabSizeOption(const PrepareOptions& opts) {
  const std::string& t = opts.tokenizer;
  if (t == "bpe" && opts.vocab_size == 0) {
    return InvalidArgument("data prepare: --tokenizer bpe needs --vocab-size N (N >= 256: the "
                           "256 bytes, then one token per merge learnt)");
  }
  if (t == "bpe" && opts.vocab_size < 256) {
    return InvalidArgument("data prepare: --vocab-size must be at least 256 (the 256 bytes are "
                           "the first tokens), got " + std::to_string(opts.vocab_size));
  }
  if (t != "bpe" && opts.vocab_size != 0) {
    return InvalidArgument("data prepare: --vocab-size applies to --tokenizer bpe only (the " + t +
                           " vocabulary's size follows from its kind or files)");
  }
  return Status::Ok();
}

// --vocab and --merges: the Hugging Face pair, both or neither.
Status CheckHfFileOptions(const PrepareOptions& opts) {
  const std::string& t = opts.tokenizer;
  if (t == "hf" && (opts.hf_vocab.empty() || opts.hf_merges.empty())) {
    return InvalidArgument(std::string("data prepare: --tokenizer hf needs both --vocab FILE ") +
                           "(vocab.json) and --merges FILE (merges.txt); missing " +
                           (opts.hf_vocab.empty() ? "--vocab" : "--merges"));
  }
  if (t != "hf" && !opts.hf_merges.empty()) {
    return InvalidArgument("data prepare: --merges applies to --tokenizer hf only");
  }
  return Status::Ok();
}

Status CheckTokenizerOptions(const PrepareOptions& opts) {
  if (!IsOneOf(opts.tokenizer, {"char", "byte", "bpe", "hf"})) {
    return InvalidArgument("data prepare: unknown tokenizer '" + opts.tokenizer + "'; use " +
                           kTokenizers);
  }
  ST_RETURN_IF_ERROR(CheckVocabSizeOption(opts));
  return CheckHfFileOptions(opts);
}

Status CheckPrepareOptions(const PrepareOptions& opts) {
  if (opts.input.empty()) return InvalidArgument("data prepare: no input file given");
  if (opts.output_dir.empty()) return InvalidArgument("data prepare: no output directory given");
  if (!(opts.val_fraction > 0.0 && opts.val_fraction < 1.0)) {
    return InvalidArgument("data prepare: val_fraction must be strictly between 0 and 1, got " +
                           std::to_string(opts.val_fraction));
  }
  return CheckTokenizerOptions(opts);
}

// The input's text; a missing or empty file is an error.
Result<std::string> ReadInputText(const std::string& input) {
  Result<std::string> text = ReadWholeFile(input, "input file");
  if (!text.ok()) {
    const Status& st = text.status();
    if (st.code() == StatusCode::kNotFound) {
      return NotFound("data prepare: " + st.message() + "; check the input path");
    }
    return st.WithContext("data prepare");
  }
  if (text->empty()) {
    return InvalidArgument("data prepare: input file " + input +
                           " is empty; there is nothing to train on");
  }
  return text;
}

// The vocabulary of kind opts.tokenizer ("char": the characters of `text`,
// "bpe": merges learnt from it).
Result<Vocabulary> VocabularyFor(const PrepareOptions& opts, const std::string& text) {
  if (opts.tokenizer == "byte") return Vocabulary::Bytes();
  if (opts.tokenizer == "hf") {
    Result<BpeModel> m = LoadHfBpe(opts.hf_vocab, opts.hf_merges);
    if (!m.ok()) return m.status().WithContext("data prepare");
    return Vocabulary::Bpe(std::move(*m));
  }
  if (opts.tokenizer == "bpe") {
    Result<BpeModel> m = TrainBpe(text, opts.vocab_size);
    if (!m.ok()) return m.status().WithContext("data prepare: input file " + opts.input);
    return Vocabulary::Bpe(std::move(*m));
  }
  Result<Vocabulary> v = Vocabulary::CharsOf(text);
  if (!v.ok()) return v.status().WithContext("data prepare: input file " + opts.input);
  return v;
}

// How many of the `n` tokens go to the training split; both splits must
// hold at least one.
Result<int64_t> TrainTokenCount(const PrepareOptions& opts, int64_t n) {
  // Truncation, as nanoGPT's prepare.py does (int(n * 0.9)), so the counts
  // match that reference.
  const int64_t n_train = static_cast<int64_t>(static_cast<double>(n) * (1.0 - opts.val_fraction));
  const int64_t n_val = n - n_train;
  if (n_train <= 0 || n_val <= 0) {
    return InvalidArgument("data prepare: input file " + opts.input + " holds only " +
                           std::to_string(n) + " tokens; val_fraction " +
                           std::to_string(opts.val_fraction) + " leaves the " +
                           (n_train <= 0 ? "training" : "validation") +
                           " split empty; use a larger input or another val_fraction");
  }
  return n_train;
}

Status CreateOutputDirectory(const std::string& output_dir) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec || !fs::is_directory(output_dir)) {
    return IoError("data prepare: cannot create output directory " + output_dir + ": " +
                   (ec ? ec.message() : std::string("a non-directory is in the way")));
  }
  return Status::Ok();
}

// One output file and the name it is written under before it takes its own.
struct StagedOutput {
  std::string final_path;
  std::string staged_path;
};

void DiscardStaged(const std::vector<StagedOutput>& outputs) {
  std::error_code ignored;
  for (const StagedOutput& o : outputs) fs::remove(o.staged_path, ignored);
}

// The files of a prepared directory, each with what writes it to a path.
struct PreparedFile {
  std::string name;
  std::function<Status(const std::string&)> write;
};

// The Hugging Face pair, beside vocab.json for "bpe" vocabularies.
constexpr const char* kHfVocabName = "hf_vocab.json";
constexpr const char* kHfMergesName = "hf_merges.txt";

std::vector<PreparedFile> PreparedFiles(const std::vector<int32_t>& ids, int64_t n_train,
                                        const Vocabulary& vocab) {
  std::vector<PreparedFile> files = {
      {"train.bin",
       [&ids, n_train](const std::string& p) {
         return WriteTokenShard(p, std::vector<int32_t>(ids.begin(), ids.begin() + n_train));
       }},
      {"val.bin",
       [&ids, n_train](const std::string& p) {
         return WriteTokenShard(p, std::vector<int32_t>(ids.begin() + n_train, ids.end()));
       }},
      {"vocab.json", [&vocab](const std::string& p) { return vocab.Save(p); }}};
  if (vocab.bpe() != nullptr) {
    files.push_back({kHfVocabName, [&vocab](const std::string& p) {
                       return WriteFileAtomically(p, HfVocabJson(*vocab.bpe()));
                     }});
    files.push_back({kHfMergesName, [&vocab](const std::string& p) {
                       return WriteFileAtomically(p, HfMergesText(*vocab.bpe()));
                     }});
  }
  return files;
}

// Writes train.bin (the first n_train ids), val.bin (the rest), vocab.json
// (and the Hugging Face pair for BPE) into `dir`. All files are staged first
// and only then renamed, so a failure while writing (disk full, say) cannot
// leave a new train.bin beside an old val.bin or vocab.json. A Hugging Face
// pair left by an earlier BPE run is removed when the new vocabulary is not
// BPE: it would describe other data.
Status WritePreparedFiles(const std::string& dir, const std::vector<int32_t>& ids, int64_t n_train,
                          const Vocabulary& vocab) {
  const std::string suffix = ".staging-" + std::to_string(::getpid());
  std::vector<StagedOutput> outputs;
  Status st;
  for (const PreparedFile& f : PreparedFiles(ids, n_train, vocab)) {
    outputs.push_back({(fs::path(dir) / f.name).string(), (fs::path(dir) / (f.name + suffix)).string()});
    if (st.ok()) st = f.write(outputs.back().staged_path);
  }
  if (!st.ok()) {
    DiscardStaged(outputs);
    return st.WithContext("data prepare");
  }
  for (const StagedOutput& o : outputs) {
    if (::rename(o.staged_path.c_str(), o.final_path.c_str()) != 0) {
      const int err = errno;
      DiscardStaged(outputs);
      return IoError("data prepare: cannot move " + o.staged_path + " to " + o.final_path + ": " +
                     ErrnoText(err));
    }
  }
  if (vocab.bpe() == nullptr) {
    std::error_code ignored;
    fs::remove(fs::path(dir) / kHfVocabName, ignored);
    fs::remove(fs::path(dir) / kHfMergesName, ignored);
  }
  return Status::Ok();
}

}  // namespace

Result<PrepareSummary> PrepareTextData(const PrepareOptions& opts) {
  // Everything that can fail on the input is checked before any file is
  // written, so a bad run leaves an existing prepared directory untouched.
  ST_RETURN_IF_ERROR(CheckPrepareOptions(opts));
  ST_ASSIGN_OR_RETURN(const std::string text, ReadInputText(opts.input));
  ST_ASSIGN_OR_RETURN(const Vocabulary vocab, VocabularyFor(opts, text));
  Result<std::vector<int32_t>> ids = vocab.Encode(text);
  if (!ids.ok()) return ids.status().WithContext("data prepare: input file " + opts.input);
  const int64_t n = static_cast<int64_t>(ids->size());
  ST_ASSIGN_OR_RETURN(const int64_t n_train, TrainTokenCount(opts, n));

  ST_RETURN_IF_ERROR(CreateOutputDirectory(opts.output_dir));
  ST_RETURN_IF_ERROR(WritePreparedFiles(opts.output_dir, *ids, n_train, vocab));
  PrepareSummary summary;
  summary.vocab_size = vocab.size();
  summary.train_tokens = n_train;
  summary.val_tokens = n - n_train;
  return summary;
}

}  // namespace scaletrain
