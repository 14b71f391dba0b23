#include "data/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

namespace scaletrain {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t KeyLeft(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t KeyRight(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

// GPT-2's table: byte b -> code point. The bytes that print as themselves in
// Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) keep their value; the
// others, in byte order, take U+0100, U+0101, ...
struct ByteAlphabet {
  std::array<char32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  std::unordered_map<char32_t, uint8_t> byte_of;
  ByteAlphabet() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      code_point[b] = printable ? static_cast<char32_t>(b) : next++;
      const char32_t cp = code_point[b];
      std::string& s = utf8[b];
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {  // all of them are below U+0800: two bytes
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      byte_of[cp] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

std::string Quote(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

// The printable form of raw bytes for messages: spelled, then JSON-quoted.
std::string QuoteBytes(std::string_view bytes) { return Quote(SpellBytes(bytes)); }

std::string HexByte(uint8_t b) {
  const char* digits = "0123456789ABCDEF";
  return std::string("0x") + digits[b >> 4] + digits[b & 0xF];
}

}  // namespace

std::string SpellBytes(std::string_view bytes) {
  const ByteAlphabet& a = Alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += a.utf8[static_cast<uint8_t>(c)];
  return out;
}

bool UnspellBytes(std::string_view spelled, std::string* bytes) {
  const ByteAlphabet& a = Alphabet();
  bytes->clear();
  for (size_t i = 0; i < spelled.size();) {
    const auto b0 = static_cast<uint8_t>(spelled[i]);
    char32_t cp;
    if (b0 < 0x80) {
      cp = b0, i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < spelled.size() &&
               (static_cast<uint8_t>(spelled[i + 1]) & 0xC0) == 0x80) {
      cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | (static_cast<uint8_t>(spelled[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // longer sequences are never in the alphabet
    }
    auto it = a.byte_of.find(cp);
    // An overlong form decodes to an alphabet code point but is not its
    // spelling: compare the bytes too.
    if (it == a.byte_of.end()) return false;
    bytes->push_back(static_cast<char>(it->second));
  }
  return SpellBytes(*bytes) == spelled;
}

// ----------------------------------------------------------- pre-tokenizer

Result<const Gpt2PreTokenizer*> Gpt2PreTokenizer::Get() {
  struct Compiled {
    Gpt2PreTokenizer tokenizer;
    std::string error;
    Compiled() {
      int code = 0;
      PCRE2_SIZE at = 0;
      pcre2_code* re =
          pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, nullptr);
      if (re == nullptr) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        error = "cannot compile GPT-2's pre-tokenizer pattern with PCRE2 (at offset " +
                std::to_string(at) + "): " + reinterpret_cast<const char*>(msg) +
                "; install a libpcre2-8 built with Unicode support";
        return;
      }
      // Without JIT (a platform PCRE2 has none for) matching is slower,
      // never different.
      pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
      tokenizer.code_ = re;
    }
  };
  static const Compiled compiled;
  if (compiled.tokenizer.code_ == nullptr) return Internal(compiled.error);
  return &compiled.tokenizer;
}

Gpt2PreTokenizer::~Gpt2PreTokenizer() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Status Gpt2PreTokenizer::Split(std::string_view text,
                               const std::function<void(std::string_view)>& piece) const {
  auto* re = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(re, nullptr), pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(re, subject, text.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      return Internal("GPT-2 pre-tokenizer failed at byte offset " + std::to_string(pos) + ": " +
                      reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[0] > pos) piece(text.substr(pos, ov[0] - pos));  // bytes that are not UTF-8
    if (ov[1] <= ov[0]) {
      return Internal("GPT-2 pre-tokenizer matched an empty piece at byte offset " +
                      std::to_string(ov[0]));
    }
    piece(text.substr(ov[0], ov[1] - ov[0]));
    pos = ov[1];
  }
  if (pos < text.size()) piece(text.substr(pos));
  return Status::Ok();
}

// ------------------------------------------------------------------- model

Result<BpeModel> BpeModel::Create(std::vector<std::string> pieces, std::vector<BpeMerge> merges,
                                  const std::string& source) {
  BpeModel m;
  const auto bad = [&](const std::string& why) { return InvalidArgument(source + ": " + why); };
  if (pieces.empty()) return bad("no tokens");
  if (pieces.size() > static_cast<size_t>(INT32_MAX)) return bad("more than 2^31-1 tokens");
  m.id_of_.reserve(pieces.size());
  std::fill(std::begin(m.byte_id_), std::end(m.byte_id_), -1);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].empty()) return bad("token " + std::to_string(i) + " is empty");
    auto [it, fresh] = m.id_of_.emplace(pieces[i], static_cast<int32_t>(i));
    if (!fresh) {
      return bad("tokens " + std::to_string(it->second) + " and " + std::to_string(i) +
                 " are the same, " + QuoteBytes(pieces[i]));
    }
    if (pieces[i].size() == 1)
      m.byte_id_[static_cast<uint8_t>(pieces[i][0])] = static_cast<int32_t>(i);
  }
  m.pieces_ = std::move(pieces);
  m.merge_of_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const BpeMerge& mg = merges[r];
    const std::string rank = "merge " + std::to_string(r);
    if (mg.left < 0 || mg.left >= m.size() || mg.right < 0 || mg.right >= m.size()) {
      return bad(rank + " names a token id outside 0.." + std::to_string(m.size() - 1));
    }
    const int32_t id = m.IdOf(m.pieces_[mg.left] + m.pieces_[mg.right]);
    if (id < 0) {
      return bad(rank + " makes " + QuoteBytes(m.pieces_[mg.left] + m.pieces_[mg.right]) +
                 ", which is not a token");
    }
    auto [it, fresh] =
        m.merge_of_.emplace(PairKey(mg.left, mg.right), MergeTarget{static_cast<int32_t>(r), id});
    if (!fresh) return bad(rank + " repeats merge " + std::to_string(it->second.rank));
  }
  m.merges_ = std::move(merges);
  return m;
}

int32_t BpeModel::IdOf(std::string_view bytes) const {
  auto it = id_of_.find(std::string(bytes));
  return it == id_of_.end() ? -1 : it->second;
}

const BpeModel::MergeTarget* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merge_of_.find(PairKey(left, right));
  return it == merge_of_.end() ? nullptr : &it->second;
}

namespace {

// A symbol of a word being merged: a doubly linked list over an array, as
// the merges shorten the word. A removed symbol has id -1.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
};

// A candidate merge: the pair starting at `pos`, which should make `id`.
// Lowest rank first, then leftmost, as in `tokenizers` (word.rs).
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// The word as one symbol per byte, linked in order; an error names a byte
// the vocabulary has no token for.
Result<std::vector<Symbol>> ByteSymbols(std::string_view word, size_t offset,
                                        const int32_t* byte_id) {
  std::vector<Symbol> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const int32_t id = byte_id[static_cast<uint8_t>(word[i])];
    if (id < 0) {
      return InvalidArgument("byte " + HexByte(static_cast<uint8_t>(word[i])) + " at byte offset " +
                             std::to_string(offset + i) +
                             " has no token of its own in this BPE vocabulary; use a vocabulary "
                             "that holds all 256 bytes (as GPT-2's and ours do)");
    }
    sym[i] = {id, static_cast<int32_t>(i) - 1,
              i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  return sym;
}

// Merges the word's symbols, lowest merge rank first, until no pair left
// has a merge. find_merge(left, right) is the merge of a pair (null: none).
template <typename FindMerge>
void MergeSymbols(std::vector<Symbol>& sym, FindMerge find_merge) {
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    if (const auto* t = find_merge(sym[pos].id, sym[sym[pos].next].id)) {
      queue.push({t->rank, pos, t->id});
    }
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) consider(static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& s = sym[c.pos];
    if (s.id < 0 || s.next < 0) continue;
    // A stale entry: the pair at pos no longer makes this id.
    const auto* now = find_merge(s.id, sym[s.next].id);
    if (now == nullptr || now->id != c.id) continue;
    Symbol& right = sym[s.next];
    s.id = c.id;
    right.id = -1;
    s.next = right.next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    consider(s.prev);
    consider(c.pos);
  }
}

}  // namespace

Status BpeModel::EncodeWord(std::string_view word, size_t offset, std::vector<int32_t>* out) const {
  ST_ASSIGN_OR_RETURN(std::vector<Symbol> sym, ByteSymbols(word, offset, byte_id_));
  MergeSymbols(sym, [this](int32_t left, int32_t right) { return FindMerge(left, right); });
  for (int32_t i = word.empty() ? -1 : 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
  return Status::Ok();
}

Result<std::vector<int32_t>> BpeModel::Encode(std::string_view text) const {
  ST_ASSIGN_OR_RETURN(const Gpt2PreTokenizer* pre, Gpt2PreTokenizer::Get());
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  // Text repeats its words: encode each distinct pre-token once.
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  Status failed;
  ST_RETURN_IF_ERROR(pre->Split(text, [&](std::string_view word) {
    if (!failed.ok()) return;
    auto [it, fresh] = cache.try_emplace(word);
    if (fresh) {
      const size_t offset = static_cast<size_t>(word.data() - text.data());
      failed = EncodeWord(word, offset, &it->second);
      if (!failed.ok()) return;
    }
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }));
  if (!failed.ok()) return failed;
  return ids;
}

// ----------------------------------------------------------------- trainer

namespace {

struct TrainWord {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

// A queue entry: a pair's count when it was pushed. Entries go stale as
// counts change; the loop re-checks each against the current count.
struct PairEntry {
  int64_t count;
  uint64_t key;
  // Max-heap order: higher count first, then the smaller (left, right).
  bool operator<(const PairEntry& o) const {
    return count != o.count ? count < o.count : key > o.key;
  }
};

class BpeTrainer {
 public:
  BpeTrainer(std::vector<TrainWord> words, int64_t vocab_size)
      : words_(std::move(words)), vocab_size_(vocab_size) {
    for (int b = 0; b < 256; ++b) {
      pieces_.emplace_back(1, static_cast<char>(b));
      id_of_.emplace(pieces_.back(), b);
    }
  }

  void Run() {
    CountPairs();
    while (static_cast<int64_t>(pieces_.size()) < vocab_size_ && !queue_.empty()) {
      const PairEntry top = queue_.top();
      queue_.pop();
      auto it = count_.find(top.key);
      const int64_t now = it == count_.end() ? 0 : it->second;
      if (now != top.count) {
        if (now > 0) queue_.push({now, top.key});
        continue;
      }
      Merge(top.key);
    }
  }

  std::vector<std::string>& pieces() { return pieces_; }
  std::vector<BpeMerge>& merges() { return merges_; }

 private:
  void CountPairs() {
    for (size_t w = 0; w < words_.size(); ++w) {
      const std::vector<int32_t>& s = words_[w].symbols;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t key = PairKey(s[i], s[i + 1]);
        count_[key] += words_[w].count;
        where_[key].push_back(static_cast<int32_t>(w));
      }
    }
    for (const auto& [key, n] : count_) queue_.push({n, key});
  }

  // The id of left's and right's pieces joined: an existing piece (another
  // pair may have made the same bytes), else a new one.
  int32_t JoinedId(int32_t left, int32_t right) {
    std::string joined = pieces_[left] + pieces_[right];
    auto [it, fresh] = id_of_.try_emplace(joined, static_cast<int32_t>(pieces_.size()));
    if (fresh) pieces_.push_back(std::move(joined));
    return it->second;
  }

  // Replaces every (left, right) in every word holding it by the joined
  // piece, and updates the pair counts by the difference.
  void Merge(uint64_t key) {
    const int32_t left = KeyLeft(key), right = KeyRight(key);
    const int32_t id = JoinedId(left, right);
    merges_.push_back({left, right});
    std::vector<int32_t> holders = std::move(where_[key]);
    where_.erase(key);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    std::unordered_map<uint64_t, int64_t> delta;
    for (int32_t w : holders) MergeInWord(w, left, right, id, &delta);
    for (const auto& [pair, d] : delta) {
      if (d == 0) continue;
      int64_t& n = count_[pair];
      n += d;
      if (n <= 0) {
        count_.erase(pair);
      } else if (d > 0) {
        queue_.push({n, pair});
      }
    }
  }

  void MergeInWord(int32_t w, int32_t left, int32_t right, int32_t id,
                   std::unordered_map<uint64_t, int64_t>* delta) {
    std::vector<int32_t>& s = words_[w].symbols;
    const int64_t n = words_[w].count;
    std::vector<int32_t> merged;
    merged.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
        merged.push_back(id);
        ++i;
      } else {
        merged.push_back(s[i]);
      }
    }
    if (merged.size() == s.size()) return;  // a stale holder
    for (size_t i = 0; i + 1 < s.size(); ++i) (*delta)[PairKey(s[i], s[i + 1])] -= n;
    for (size_t i = 0; i + 1 < merged.size(); ++i) {
      const uint64_t pair = PairKey(merged[i], merged[i + 1]);
      (*delta)[pair] += n;
      if (merged[i] == id || merged[i + 1] == id) where_[pair].push_back(w);
    }
    s = std::move(merged);
  }

  std::vector<TrainWord> words_;
  int64_t vocab_size_;
  std::vector<std::string> pieces_;
  std::unordered_map<std::string, int32_t> id_of_;
  std::vector<BpeMerge> merges_;
  std::unordered_map<uint64_t, int64_t> count_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;
  std::priority_queue<PairEntry> queue_;
};

Result<std::vector<TrainWord>> CountWords(std::string_view text) {
  ST_ASSIGN_OR_RETURN(const Gpt2PreTokenizer* pre, Gpt2PreTokenizer::Get());
  std::unordered_map<std::string_view, int64_t> counts;
  ST_RETURN_IF_ERROR(pre->Split(text, [&](std::string_view w) { ++counts[w]; }));
  std::vector<TrainWord> words;
  words.reserve(counts.size());
  for (const auto& [w, n] : counts) {
    TrainWord tw;
    tw.symbols.assign(w.begin(), w.end());
    for (int32_t& b : tw.symbols) b = static_cast<uint8_t>(b);
    tw.count = n;
    words.push_back(std::move(tw));
  }
  return words;
}

}  // namespace

Result<BpeModel> TrainBpe(std::string_view text, int64_t vocab_size) {
  if (vocab_size < 256 || vocab_size > INT32_MAX) {
    return InvalidArgument("BPE vocab size must be between 256 (the bytes) and 2^31-1, got " +
                           std::to_string(vocab_size) + "; pass --vocab-size N with N >= 256");
  }
  ST_ASSIGN_OR_RETURN(std::vector<TrainWord> words, CountWords(text));
  BpeTrainer trainer(std::move(words), vocab_size);
  trainer.Run();
  return BpeModel::Create(std::move(trainer.pieces()), std::move(trainer.merges()), "trained BPE");
}

// ------------------------------------------------------ Hugging Face files

bool ParseMergeLine(std::string_view line, std::pair<std::string, std::string>* merge) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 >= line.size()) return false;
  if (line.find(' ', space + 1) != std::string_view::npos) return false;
  merge->first = std::string(line.substr(0, space));
  merge->second = std::string(line.substr(space + 1));
  return true;
}

Result<BpeModel> BpeFromSpelled(const std::vector<std::string>& spelled,
                                const std::vector<std::pair<std::string, std::string>>& merges,
                                const std::string& source,
                                const std::function<std::string(size_t)>& where) {
  std::vector<std::string> pieces(spelled.size());
  std::unordered_map<std::string_view, int32_t> id_of;
  for (size_t i = 0; i < spelled.size(); ++i) {
    if (!UnspellBytes(spelled[i], &pieces[i])) {
      return InvalidArgument(source + ": token " + Quote(spelled[i]) + " (id " + std::to_string(i) +
                             ") is not spelled in GPT-2's byte alphabet (bytes-to-unicode); a "
                             "byte-level BPE vocabulary holds only such tokens");
    }
    id_of.emplace(spelled[i], static_cast<int32_t>(i));
  }
  std::vector<BpeMerge> ids(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    for (const std::string* part : {&merges[r].first, &merges[r].second}) {
      if (!id_of.count(*part)) {
        return InvalidArgument(where(r) + ": " + Quote(*part) + " is not a token of " + source +
                               "; the merges must belong to this vocabulary");
      }
    }
    ids[r] = {id_of[merges[r].first], id_of[merges[r].second]};
    if (!id_of.count(merges[r].first + merges[r].second)) {
      return InvalidArgument(where(r) + ": the merged token " +
                             Quote(merges[r].first + merges[r].second) + " is not a token of " +
                             source + "; the merges must belong to this vocabulary");
    }
  }
  Result<BpeModel> model = BpeModel::Create(std::move(pieces), std::move(ids), source);
  if (!model.ok()) return model.status();
  return model;
}

namespace {

Result<std::string> ReadTextFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(what + " " + path + " cannot be opened; check the path");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError("cannot read " + what + " " + path);
  return ss.str();
}

// vocab.json: {"token": id, ...} with ids 0..N-1, each once.
Result<std::vector<std::string>> ReadHfVocab(const std::string& path) {
  ST_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path, "vocabulary file"));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string fix = "; give the vocab.json of a Hugging Face byte-level BPE (token -> id)";
  if (j.is_discarded())
    return InvalidArgument("vocabulary file " + path + " is not valid JSON" + fix);
  if (!j.is_object()) {
    return InvalidArgument("vocabulary file " + path + " is not a JSON object" + fix);
  }
  std::vector<std::string> spelled(j.size());
  std::vector<bool> seen(j.size(), false);
  for (const auto& [token, id] : j.items()) {
    const std::string at = "vocabulary file " + path + ": token " + Quote(token);
    if (!id.is_number_integer())
      return InvalidArgument(at + " has an id that is not an integer" + fix);
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v >= static_cast<int64_t>(j.size())) {
      return InvalidArgument(at + " has id " + std::to_string(v) + ", outside 0.." +
                             std::to_string(j.size() - 1) + " (ids must be 0..N-1, each once)");
    }
    if (seen[static_cast<size_t>(v)]) {
      return InvalidArgument(at + " has id " + std::to_string(v) + ", which another token has too" +
                             fix);
    }
    seen[static_cast<size_t>(v)] = true;
    spelled[static_cast<size_t>(v)] = token;
  }
  return spelled;
}

// merges.txt: an optional "#version" first line, then "left right" lines.
// Returns each merge with its 1-based line number.
Status ReadHfMerges(const std::string& path,
                    std::vector<std::pair<std::string, std::string>>* merges,
                    std::vector<size_t>* lines) {
  ST_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path, "merges file"));
  std::istringstream in(text);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (n == 1 && line.rfind("#version", 0) == 0) continue;
    std::pair<std::string, std::string> m;
    if (!ParseMergeLine(line, &m)) {
      return InvalidArgument("merges file " + path + " line " + std::to_string(n) + ": expected " +
                             "two tokens separated by one space, got " + Quote(line) +
                             "; give the merges.txt of a Hugging Face byte-level BPE");
    }
    merges->push_back(std::move(m));
    lines->push_back(n);
  }
  return Status::Ok();
}

}  // namespace

Result<BpeModel> LoadHfBpe(const std::string& vocab_path, const std::string& merges_path) {
  ST_ASSIGN_OR_RETURN(const std::vector<std::string> spelled, ReadHfVocab(vocab_path));
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> lines;
  ST_RETURN_IF_ERROR(ReadHfMerges(merges_path, &merges, &lines));
  return BpeFromSpelled(spelled, merges, "vocabulary file " + vocab_path, [&](size_t r) {
    return "merges file " + merges_path + " line " + std::to_string(lines[r]);
  });
}

std::string HfVocabJson(const BpeModel& model) {
  // Written by hand in id order (ordered_json's inserts are linear each).
  std::string out = "{";
  for (size_t i = 0; i < model.pieces().size(); ++i) {
    if (i > 0) out += ",";
    out += Quote(SpellBytes(model.pieces()[i])) + ":" + std::to_string(i);
  }
  return out + "}\n";
}

std::string HfMergesText(const BpeModel& model) {
  std::string out = "#version: 0.2\n";
  for (const BpeMerge& m : model.merges()) {
    out += SpellBytes(model.pieces()[m.left]) + " " + SpellBytes(model.pieces()[m.right]) + "\n";
  }
  return out;
}

}  // namespace scaletrain
