// Byte-level BPE: the GPT-2 pre-tokenizer, the trainer (merges worked out by
// hand), the encoder (against a plain reference loop), the Hugging Face file
// pair and its errors, and `data prepare --tokenizer bpe|hf`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "data/bpe.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "test_files.h"

namespace scaletrain {
namespace {

namespace fs = std::filesystem;
using test_files::ReadBytes;
using test_files::WriteBytes;

class BpeTest : public test_files::ScratchDirTest {};

const std::string kShakespeare = std::string(ST_SOURCE_DIR) + "/data/tinyshakespeare.txt";

std::vector<std::string> Split(const std::string& text) {
  auto pre = Gpt2PreTokenizer::Get();
  EXPECT_TRUE(pre.ok()) << pre.status().message();
  std::vector<std::string> pieces;
  Status st = (*pre)->Split(text, [&](std::string_view p) { pieces.emplace_back(p); });
  EXPECT_TRUE(st.ok()) << st.message();
  return pieces;
}

using Pieces = std::vector<std::string>;

// ----------------------------------------------------------- pre-tokenizer

TEST(Gpt2PreTokenizer, ContractionsWordsDigitsPunctuation) {
  EXPECT_EQ(Split("I'm sure they'll say: \"we'd won 42-7!\""),
            (Pieces{"I", "'m", " sure", " they", "'ll", " say", ":", " \"", "we", "'d", " won",
                    " 42", "-", "7", "!\""}));
  // Contractions are case-sensitive in GPT-2's pattern.
  EXPECT_EQ(Split("DON'T"), (Pieces{"DON", "'", "T"}));
}

TEST(Gpt2PreTokenizer, WhitespaceRuns) {
  // A run of spaces before a word leaves its last space to the word.
  EXPECT_EQ(Split("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(Split("end,\n\n  next"), (Pieces{"end", ",", "\n\n ", " next"}));
  EXPECT_EQ(Split("tail \t\n"), (Pieces{"tail", " \t\n"}));
  EXPECT_EQ(Split("   "), (Pieces{"   "}));
  EXPECT_EQ(Split(""), Pieces{});
}

TEST(Gpt2PreTokenizer, UnicodeClasses) {
  // Letters and digits of any script (\p{L}, \p{N}); an emoji is neither.
  EXPECT_EQ(Split("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xD9\xA3\xD9\xA4 \xF0\x9F\x99\x82!"),
            (Pieces{"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC", " \xD9\xA3\xD9\xA4",
                    " \xF0\x9F\x99\x82!"}));
  // U+00A0 (no-break space) is whitespace, but only U+0020 joins the word
  // after it.
  EXPECT_EQ(Split("a\xC2\xA0\xC2\xA0"
                  "b c"),
            (Pieces{"a", "\xC2\xA0", "\xC2\xA0", "b", " c"}));
}

TEST(Gpt2PreTokenizer, BytesThatAreNotUtf8AreTheirOwnPieces) {
  EXPECT_EQ(Split("ab\xFF\xFEx y\x80"), (Pieces{"ab", "\xFF\xFE", "x", " y", "\x80"}));
  EXPECT_EQ(Split(std::string("\0\0", 2)), (Pieces{std::string("\0\0", 2)}));
}

// ----------------------------------------------------------------- trainer

// Worked by hand. Pre-tokens: "hug" x1, " hug" x2, " pug" x1, " pun" x1.
// Pair counts: (u,g) 4, (h,u) 3, (' ',h) 2, (' ',p) 2, (p,u) 2, (u,n) 1.
//  1. (u,g) 4 -> "ug" 256.  Then (h,ug) 3, (' ',h) 2, (' ',p) 2, ...
//  2. (h,ug) 3 -> "hug" 257. Then (' ',hug) 2 and (' ',p) 2 tie:
//  3. the smaller pair of ids wins: (32,112) < (32,257): " p" 258.
//  4. (' ',hug) 2 -> " hug" 259. Left: (" p",ug) 1, (" p",u) 1, (u,n) 1:
//  5. (117,110) is the smallest: "un" 260.  6. (" p",ug) -> " pug" 261.
//  7. (" p",un) -> " pun" 262. No pair is left.
TEST(TrainBpe, MergesOfATinyCorpus) {
  auto m = TrainBpe("hug hug hug pug pun", 1000);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->size(), 263);  // fewer than asked: the corpus ran out of pairs
  for (int b = 0; b < 256; ++b) EXPECT_EQ(m->pieces()[b], std::string(1, static_cast<char>(b)));
  EXPECT_EQ(Pieces(m->pieces().begin() + 256, m->pieces().end()),
            (Pieces{"ug", "hug", " p", " hug", "un", " pug", " pun"}));
  const std::vector<std::pair<int32_t, int32_t>> expected = {
      {'u', 'g'}, {'h', 256}, {' ', 'p'}, {' ', 257}, {'u', 'n'}, {258, 256}, {258, 260}};
  ASSERT_EQ(m->merges().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(m->merges()[i].left, expected[i].first) << i;
    EXPECT_EQ(m->merges()[i].right, expected[i].second) << i;
  }
  // The vocab size stops it early.
  auto two = TrainBpe("hug hug hug pug pun", 258);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 258);
  EXPECT_EQ(two->pieces().back(), "hug");
}

TEST(TrainBpe, AJoinMadeTwiceKeepsOneId) {
  // "ab" then "abc" via (ab,c) in one word; "bc" then (a,bc) in another
  // would make "abc" again: it keeps the first id, and a merge still points
  // to it. Pre-tokens: "abab" x3 gives (a,b) first; "bcbc" x2 gives (b,c).
  auto m = TrainBpe("abab abab abab bcbc bcbc", 1000);
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::vector<std::string> sorted = m->pieces();
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  EXPECT_GE(m->merges().size(), static_cast<size_t>(m->size() - 256));
}

TEST(TrainBpe, VocabSizeBelowTheBytesIsAnError) {
  auto m = TrainBpe("some text", 255);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--vocab-size"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("256"), std::string::npos);
}

// ----------------------------------------------------------------- encoder

// The textbook loop: merge the adjacent pair of lowest rank (leftmost on a
// tie) until none has a rank. Another way of computing EncodeWord.
std::vector<int32_t> ReferenceEncodeWord(const BpeModel& m, const std::string& word) {
  std::vector<int32_t> s;
  for (char c : word) s.push_back(m.IdOf(std::string(1, c)));
  while (true) {
    size_t best = s.size();
    size_t best_rank = std::numeric_limits<size_t>::max();
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      for (size_t r = 0; r < m.merges().size() && r < best_rank; ++r) {
        if (m.merges()[r].left == s[i] && m.merges()[r].right == s[i + 1]) best = i, best_rank = r;
      }
    }
    if (best == s.size()) return s;
    const BpeMerge& mg = m.merges()[best_rank];
    s[best] = m.IdOf(m.pieces()[mg.left] + m.pieces()[mg.right]);
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

TEST(BpeEncode, ByHandOnTheTinyModel) {
  auto m = TrainBpe("hug hug hug pug pun", 1000);
  ASSERT_TRUE(m.ok());
  auto ids = m->Encode("hug pug");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{257, 261}));
  // " hugs": (u,g) rank 0, (h,ug) 1, (' ',hug) 3; 's' was never merged.
  ids = m->Encode(" pun hugs");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{262, 259, 's'}));
  // Byte fallback: what no merge covers stays bytes, UTF-8 or not.
  ids = m->Encode("\xC3\xA9\xFF");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0xC3, 0xA9, 0xFF}));
  ids = m->Encode("");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->empty());
}

TEST(BpeEncode, MatchesTheReferenceAndRoundTripsArbitraryBytes) {
  const std::string corpus = ReadBytes(kShakespeare).substr(0, 200000);
  auto m = TrainBpe(corpus, 1200);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->size(), 1200);
  const Vocabulary v = Vocabulary::Bpe(*m);
  std::mt19937 rng(7);
  auto pre = Gpt2PreTokenizer::Get();
  ASSERT_TRUE(pre.ok());
  for (int trial = 0; trial < 300; ++trial) {
    // Half English-like text from the corpus, half arbitrary bytes.
    std::string text;
    const size_t len = rng() % 64;
    if (trial % 2 == 0) {
      text = corpus.substr(rng() % (corpus.size() - 64), len);
    } else {
      for (size_t i = 0; i < len; ++i) text.push_back(static_cast<char>(rng() & 0xFF));
    }
    auto ids = v.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(v.Decode(*ids), text) << trial;
    std::vector<int32_t> expected;
    ASSERT_TRUE((*pre)
                    ->Split(text,
                            [&](std::string_view w) {
                              for (int32_t id : ReferenceEncodeWord(*m, std::string(w)))
                                expected.push_back(id);
                            })
                    .ok());
    EXPECT_EQ(*ids, expected) << trial;
  }
  // It compresses: Shakespeare takes far fewer tokens than bytes.
  auto all = v.Encode(corpus);
  ASSERT_TRUE(all.ok());
  EXPECT_LT(all->size(), corpus.size() / 2);
  EXPECT_EQ(v.Decode(*all), corpus);
}

TEST(BpeEncode, AByteWithoutATokenIsAnError) {
  // A vocabulary with only 'a', 'b' and "ab".
  auto m = BpeModel::Create({"a", "b", "ab"}, {{0, 1}}, "test");
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto ok = m->Encode("abba");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<int32_t>{2, 1, 0}));
  auto bad = m->Encode("ab c");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("byte 0x20 at byte offset 2"), std::string::npos)
      << bad.status().message();
}

// ------------------------------------------------- spelling and HF files

TEST(BpeSpelling, GptTwoAlphabet) {
  EXPECT_EQ(SpellBytes(" the\n"), "\xC4\xA0the\xC4\x8A");  // Ġthe Ċ
  EXPECT_EQ(SpellBytes("!~"), "!~");
  EXPECT_EQ(SpellBytes("\xA1\xAD"), "\xC2\xA1\xC5\x83");  // ¡ stays, 0xAD is U+0143
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(UnspellBytes(SpellBytes(all), &back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(UnspellBytes("a b", &back));           // a space is spelled U+0120
  EXPECT_FALSE(UnspellBytes("\xE6\x97\xA5", &back));  // not in the alphabet
  EXPECT_FALSE(UnspellBytes("\xC0\xA1", &back));      // overlong '!'
}

TEST_F(BpeTest, HfFilesRoundTripAndVocabJsonToo) {
  auto m =
      TrainBpe("the cat sat on the mat; the cat's hat. \xC3\xA9t\xC3\xA9 \xC3\xA9t\xC3\xA9", 300);
  ASSERT_TRUE(m.ok());
  WriteBytes(Path("vocab.json"), HfVocabJson(*m));
  WriteBytes(Path("merges.txt"), HfMergesText(*m));
  auto back = LoadHfBpe(Path("vocab.json"), Path("merges.txt"));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->pieces(), m->pieces());
  ASSERT_EQ(back->merges().size(), m->merges().size());
  for (size_t i = 0; i < m->merges().size(); ++i) {
    EXPECT_EQ(back->merges()[i].left, m->merges()[i].left);
    EXPECT_EQ(back->merges()[i].right, m->merges()[i].right);
  }
  const Vocabulary v = Vocabulary::Bpe(*m);
  auto again = Vocabulary::FromJson(v.ToJson(), "round trip");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->kind(), "bpe");
  const std::string text = "the hat sat on \xC3\xA9t\xC3\xA9's mat";
  EXPECT_EQ(*again->Encode(text), *v.Encode(text));
}

TEST_F(BpeTest, HfFileErrorsNameTheFileAndLine) {
  WriteBytes(Path("vocab.json"), R"({"a": 0, "b": 1, "ab": 2, "c": 3})");
  auto load = [&](const std::string& merges) {
    WriteBytes(Path("merges.txt"), merges);
    return LoadHfBpe(Path("vocab.json"), Path("merges.txt")).status();
  };
  EXPECT_TRUE(load("#version: 0.2\na b\n").ok());
  EXPECT_TRUE(load("a b").ok());
  Status st = load("#version: 0.2\na b\nab c d\n");
  EXPECT_NE(st.message().find(Path("merges.txt") + " line 3: expected two tokens"),
            std::string::npos)
      << st.message();
  st = load("a b\n\n");
  EXPECT_NE(st.message().find("line 2"), std::string::npos) << st.message();
  st = load("a b\na x\n");
  EXPECT_NE(st.message().find("line 2: \"x\" is not a token"), std::string::npos) << st.message();
  st = load("a c\n");  // "ac" is not in the vocabulary
  EXPECT_NE(st.message().find("line 1: the merged token \"ac\" is not a token"), std::string::npos)
      << st.message();
  st = load("a b\na b\n");
  EXPECT_NE(st.message().find("repeats merge 0"), std::string::npos) << st.message();

  WriteBytes(Path("merges.txt"), "a b\n");
  auto vocab_error = [&](const std::string& vocab) {
    WriteBytes(Path("v.json"), vocab);
    return LoadHfBpe(Path("v.json"), Path("merges.txt")).status().message();
  };
  EXPECT_NE(vocab_error("[1, 2]").find("is not a JSON object"), std::string::npos);
  EXPECT_NE(vocab_error("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(vocab_error(R"({"a": 0, "b": 0, "ab": 2})").find("another token has too"),
            std::string::npos);
  EXPECT_NE(vocab_error(R"({"a": 0, "b": 1, "ab": 5})").find("outside 0..2"), std::string::npos);
  EXPECT_NE(vocab_error(R"({"a": 0, "b": 1, "a b": 2})").find("byte alphabet"), std::string::npos);
  EXPECT_NE(vocab_error(R"({"a": "0"})").find("not an integer"), std::string::npos);
  EXPECT_NE(LoadHfBpe(Path("none.json"), Path("merges.txt")).status().message().find("none.json"),
            std::string::npos);
}

// --------------------------------------------------------- data prepare

std::vector<int32_t> AllTokens(const std::string& path) {
  auto shard = TokenShard::Open(path);
  EXPECT_TRUE(shard.ok()) << shard.status().message();
  std::vector<int32_t> out;
  for (int64_t i = 0; i < (*shard)->num_tokens(); ++i) out.push_back((*shard)->token(i));
  return out;
}

TEST_F(BpeTest, PrepareTrainsAndWritesBothVocabularyForms) {
  const std::string text = ReadBytes(kShakespeare).substr(0, 50000);
  WriteBytes(Path("in.txt"), text);
  PrepareOptions o{Path("in.txt"), Path("out"), 0.1, "bpe", 512, "", ""};
  auto s = PrepareTextData(o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->vocab_size, 512);
  EXPECT_EQ(test_files::SortedListing(Path("out")),
            (Pieces{"hf_merges.txt", "hf_vocab.json", "train.bin", "val.bin", "vocab.json"}));
  auto v = Vocabulary::Load(Path("out/vocab.json"));
  ASSERT_TRUE(v.ok()) << v.status().message();
  std::vector<int32_t> ids = AllTokens(Path("out/train.bin"));
  const std::vector<int32_t> val = AllTokens(Path("out/val.bin"));
  ids.insert(ids.end(), val.begin(), val.end());
  EXPECT_EQ(v->Decode(ids), text);
  EXPECT_EQ(*v->Encode(text), ids);
  // The HF pair beside it encodes the same.
  PrepareOptions hf{
      Path("in.txt"),           Path("out_hf"), 0.1, "hf", 0, Path("out/hf_vocab.json"),
      Path("out/hf_merges.txt")};
  ASSERT_TRUE(PrepareTextData(hf).ok());
  EXPECT_EQ(ReadBytes(Path("out_hf/train.bin")), ReadBytes(Path("out/train.bin")));
  EXPECT_EQ(ReadBytes(Path("out_hf/vocab.json")), ReadBytes(Path("out/vocab.json")));
  // A char run over it removes the BPE pair, which would describe other data.
  PrepareOptions chars{Path("in.txt"), Path("out"), 0.1, "char", 0, "", ""};
  ASSERT_TRUE(PrepareTextData(chars).ok());
  EXPECT_EQ(test_files::SortedListing(Path("out")), (Pieces{"train.bin", "val.bin", "vocab.json"}));
}

TEST_F(BpeTest, LargeIdsGoToUint32Shards) {
  // 256 bytes + all 65536 two-byte pieces: "\xFF\xFF" is id 65791.
  std::vector<std::string> pieces;
  std::vector<BpeMerge> merges;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      pieces.push_back(pieces[a] + pieces[b]);
      merges.push_back({a, b});
    }
  }
  auto m = BpeModel::Create(pieces, merges, "test");
  ASSERT_TRUE(m.ok()) << m.status().message();
  WriteBytes(Path("v.json"), HfVocabJson(*m));
  WriteBytes(Path("m.txt"), HfMergesText(*m));
  const std::string text(40, '\xFF');
  WriteBytes(Path("in.txt"), text);
  PrepareOptions o{Path("in.txt"), Path("out"), 0.5, "hf", 0, Path("v.json"), Path("m.txt")};
  auto s = PrepareTextData(o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto shard = TokenShard::Open(Path("out/train.bin"));
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ((*shard)->version(), 2);
  EXPECT_EQ(AllTokens(Path("out/train.bin")), std::vector<int32_t>(10, 65791));
}

TEST_F(BpeTest, PrepareOptionErrorsWriteNothing) {
  WriteBytes(Path("in.txt"), "some text to prepare, long enough\n");
  WriteBytes(Path("v.json"), "[]");
  WriteBytes(Path("m.txt"), "a b\n");
  auto run = [&](PrepareOptions o) { return PrepareTextData(o).status().message(); };
  const std::string in = Path("in.txt"), out = Path("out");
  EXPECT_NE(run({in, out, 0.1, "bpe", 0, "", ""}).find("needs --vocab-size"), std::string::npos);
  EXPECT_NE(run({in, out, 0.1, "bpe", 100, "", ""}).find("at least 256"), std::string::npos);
  EXPECT_NE(run({in, out, 0.1, "char", 300, "", ""}).find("--vocab-size applies"),
            std::string::npos);
  EXPECT_NE(run({in, out, 0.1, "hf", 0, Path("v.json"), ""}).find("missing --merges"),
            std::string::npos);
  EXPECT_NE(run({in, out, 0.1, "hf", 0, "", Path("m.txt")}).find("missing --vocab"),
            std::string::npos);
  EXPECT_NE(run({in, out, 0.1, "hf", 0, Path("v.json"), Path("m.txt")}).find("not a JSON object"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace scaletrain
