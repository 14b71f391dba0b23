// Token shards, datasets, the batch sampler, vocabularies and `data prepare`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "test_files.h"

namespace scaletrain {
namespace {

namespace fs = std::filesystem;

const std::string kShakespeare = std::string(ST_SOURCE_DIR) + "/data/tinyshakespeare.txt";

// A fresh directory per test, removed afterwards, so tests never see each
// other's files and can run in parallel (ctest -j).
class DataTest : public test_files::ScratchDirTest {};

using test_files::ReadBytes;
using test_files::WriteBytes;

// Little-endian bytes built by shifting, independent of the writer under
// test and of the host's byte order: what llm.c's Python writer produces
// with np.int32 header + np.uint16 tokens .tobytes().
void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string LlmcShardBytes(int32_t magic, int32_t version, int32_t count,
                           const std::vector<uint32_t>& tokens, int bytes_per_token) {
  std::string out;
  PutLe(&out, static_cast<uint32_t>(magic), 4);
  PutLe(&out, static_cast<uint32_t>(version), 4);
  PutLe(&out, static_cast<uint32_t>(count), 4);
  for (int i = 3; i < 256; ++i) PutLe(&out, 0, 4);
  for (uint32_t t : tokens) PutLe(&out, t, bytes_per_token);
  return out;
}

std::vector<int32_t> AllTokens(const TokenShard& shard) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < shard.num_tokens(); ++i) out.push_back(shard.token(i));
  return out;
}

// ---------------------------------------------------------------- shards

TEST_F(DataTest, ShardRoundTripVersion1IsByteExact) {
  const std::vector<int32_t> tokens = {0, 1, 50256, 65535, 7, 300};
  const std::string path = Path("v1.bin");
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());

  std::vector<uint32_t> as_u32(tokens.begin(), tokens.end());
  EXPECT_EQ(ReadBytes(path), LlmcShardBytes(kShardMagic, 1, 6, as_u32, 2));
  EXPECT_EQ(fs::file_size(path), 1024u + 2u * tokens.size());

  auto shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status().message();
  EXPECT_EQ((*shard)->version(), 1);
  EXPECT_EQ((*shard)->num_tokens(), 6);
  EXPECT_EQ((*shard)->path(), path);
  EXPECT_EQ(AllTokens(**shard), tokens);
  // Only the shard remains: the temporary was renamed, not left behind.
  EXPECT_EQ(Listing(), std::vector<std::string>{"v1.bin"});
}

TEST_F(DataTest, ShardRoundTripVersion2WhenATokenExceedsUint16) {
  const std::vector<int32_t> tokens = {65536, 0, 128255, std::numeric_limits<int32_t>::max(), 3};
  const std::string path = Path("v2.bin");
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());

  std::vector<uint32_t> as_u32(tokens.begin(), tokens.end());
  EXPECT_EQ(ReadBytes(path), LlmcShardBytes(kShardMagic, 2, 5, as_u32, 4));

  auto shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status().message();
  EXPECT_EQ((*shard)->version(), 2);
  EXPECT_EQ(AllTokens(**shard), tokens);
}

TEST_F(DataTest, EmptyShardRoundTrips) {
  const std::string path = Path("empty.bin");
  ASSERT_TRUE(WriteTokenShard(path, {}).ok());
  EXPECT_EQ(fs::file_size(path), 1024u);
  auto shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status().message();
  EXPECT_EQ((*shard)->num_tokens(), 0);
}

TEST_F(DataTest, WriteReplacesExistingShard) {
  const std::string path = Path("s.bin");
  ASSERT_TRUE(WriteTokenShard(path, {1, 2, 3, 4, 5}).ok());
  ASSERT_TRUE(WriteTokenShard(path, {9, 8}).ok());
  auto shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(AllTokens(**shard), (std::vector<int32_t>{9, 8}));
}

TEST_F(DataTest, WriteRejectsNegativeTokens) {
  const std::string path = Path("neg.bin");
  Status st = WriteTokenShard(path, {1, -2, 3});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("-2"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(Listing().empty());
}

TEST_F(DataTest, WriteIntoMissingDirectoryIsIoError) {
  Status st = WriteTokenShard(Path("no/such/dir/s.bin"), {1, 2});
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("no/such/dir/s.bin"), std::string::npos) << st.message();
}

TEST_F(DataTest, HandWrittenLlmcShardLoads) {
  // 256 int32 header then uint16 tokens, as llm.c's dev/data/data_common.py
  // writes GPT-2 shards.
  const std::vector<uint32_t> tokens = {50256, 15496, 11, 995, 0, 65535};
  const std::string path = Path("fineweb_train_000001.bin");
  WriteBytes(path, LlmcShardBytes(20240520, 1, 6, tokens, 2));

  auto shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status().message();
  EXPECT_EQ((*shard)->version(), 1);
  ASSERT_EQ((*shard)->num_tokens(), 6);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ((*shard)->token(static_cast<int64_t>(i)), static_cast<int32_t>(tokens[i]));
  }
}

TEST_F(DataTest, TruncatedShardIsDataLossNamingFileSizesAndFix) {
  const std::string path = Path("truncated_shard.bin");
  std::vector<int32_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[static_cast<size_t>(i)] = i;
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  fs::resize_file(path, 1024 + 150);  // 200 bytes of tokens expected

  auto shard = TokenShard::Open(path);
  ASSERT_FALSE(shard.ok());
  const std::string& msg = shard.status().message();
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(msg.find("truncated_shard.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1224"), std::string::npos) << msg;  // expected bytes
  EXPECT_NE(msg.find("1174"), std::string::npos) << msg;  // actual bytes
  EXPECT_NE(msg.find("scaletrain data prepare"), std::string::npos) << msg;
}

TEST_F(DataTest, ShardWithExtraBytesIsDataLoss) {
  const std::string path = Path("long.bin");
  WriteBytes(path, LlmcShardBytes(kShardMagic, 1, 2, {1, 2, 3}, 2));
  auto shard = TokenShard::Open(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
}

TEST_F(DataTest, FileShorterThanHeaderIsDataLoss) {
  const std::string path = Path("tiny.bin");
  WriteBytes(path, "abc");
  auto shard = TokenShard::Open(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(shard.status().message().find("tiny.bin"), std::string::npos);
}

TEST_F(DataTest, BadMagicIsDataLoss) {
  const std::string path = Path("badmagic.bin");
  WriteBytes(path, LlmcShardBytes(20240521, 1, 2, {1, 2}, 2));
  auto shard = TokenShard::Open(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(shard.status().message().find("badmagic.bin"), std::string::npos);
  EXPECT_NE(shard.status().message().find("magic"), std::string::npos);
}

TEST_F(DataTest, UnknownVersionIsDataLoss) {
  const std::string path = Path("v3.bin");
  WriteBytes(path, LlmcShardBytes(kShardMagic, 3, 2, {1, 2}, 4));
  auto shard = TokenShard::Open(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(shard.status().message().find("version"), std::string::npos);
}

// The checks after the magic and version: a negative count, a uint32 token
// no int32 id can hold (the scan over the tokens), and a path that is not a
// file at all.
TEST_F(DataTest, NegativeCountTooLargeIdAndDirectoryAreErrors) {
  const std::string negative = Path("negative.bin");
  WriteBytes(negative, LlmcShardBytes(kShardMagic, 1, -2, {}, 2));
  auto n = TokenShard::Open(negative);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(n.status().message().find("negative token count -2"), std::string::npos)
      << n.status().message();

  const std::string large = Path("large.bin");
  WriteBytes(large, LlmcShardBytes(kShardMagic, 2, 3, {7, 8, 0x80000000u}, 4));
  auto l = TokenShard::Open(large);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(l.status().message().find("token id 2147483648 at index 2"), std::string::npos)
      << l.status().message();

  fs::create_directories(Path("dir.bin"));
  auto d = TokenShard::Open(Path("dir.bin"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("is not a regular file"), std::string::npos)
      << d.status().message();
}

TEST_F(DataTest, MissingShardIsNotFound) {
  auto shard = TokenShard::Open(Path("absent.bin"));
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kNotFound);
  EXPECT_NE(shard.status().message().find("absent.bin"), std::string::npos);
}

// ---------------------------------------------------------------- datasets

TEST_F(DataTest, GlobConcatenatesShardsInNameOrder) {
  // Written in reverse name order so directory or creation order would
  // give a different stream than name order.
  ASSERT_TRUE(WriteTokenShard(Path("shard_001.bin"), {10, 11, 12}).ok());
  ASSERT_TRUE(WriteTokenShard(Path("shard_000.bin"), {1, 2, 3, 4}).ok());
  ASSERT_TRUE(WriteTokenShard(Path("other.bin"), {999}).ok());

  auto ds = TokenDataset::Open(Path("shard_*.bin"));
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ((*ds)->num_tokens(), 7);
  EXPECT_EQ((*ds)->max_token(), 12);
  std::vector<int32_t> all(7);
  (*ds)->Read(0, 7, all.data());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 4, 10, 11, 12}));
  // A read that straddles the boundary between shards.
  std::vector<int32_t> mid(3);
  (*ds)->Read(3, 3, mid.data());
  EXPECT_EQ(mid, (std::vector<int32_t>{4, 10, 11}));
}

TEST_F(DataTest, DatasetSkipsEmptyShardsWhenReading) {
  ASSERT_TRUE(WriteTokenShard(Path("s0.bin"), {1, 2}).ok());
  ASSERT_TRUE(WriteTokenShard(Path("s1.bin"), {}).ok());
  ASSERT_TRUE(WriteTokenShard(Path("s2.bin"), {70000, 4}).ok());
  auto ds = TokenDataset::Open(Path("s?.bin"));
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ((*ds)->max_token(), 70000);
  std::vector<int32_t> got(3);
  (*ds)->Read(1, 3, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{2, 70000, 4}));
}

TEST_F(DataTest, DatasetFromPlainPath) {
  ASSERT_TRUE(WriteTokenShard(Path("train.bin"), {5, 6, 7}).ok());
  auto ds = TokenDataset::Open(Path("train.bin"));
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ((*ds)->num_tokens(), 3);
  EXPECT_EQ((*ds)->max_token(), 7);
}

TEST_F(DataTest, DatasetWithNoMatchIsNotFoundNamingPattern) {
  auto ds = TokenDataset::Open(Path("nothing_*.bin"));
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("nothing_*.bin"), std::string::npos);
  EXPECT_NE(ds.status().message().find("scaletrain data prepare"), std::string::npos);
}

TEST_F(DataTest, DatasetWithOneCorruptShardFails) {
  ASSERT_TRUE(WriteTokenShard(Path("d_0.bin"), {1, 2, 3}).ok());
  ASSERT_TRUE(WriteTokenShard(Path("d_1.bin"), {1, 2, 3}).ok());
  fs::resize_file(Path("d_1.bin"), 1025);
  auto ds = TokenDataset::Open(Path("d_*.bin"));
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.status().message().find("d_1.bin"), std::string::npos);
}

// ---------------------------------------------------------------- sampler

// A dataset whose token at index j is j, so a window reveals its start.
class SamplerTest : public DataTest {
 protected:
  static constexpr int64_t kTokens = 5000;
  static constexpr int64_t kT = 16;
  void SetUp() override {
    DataTest::SetUp();
    std::vector<int32_t> tokens(kTokens);
    for (int64_t j = 0; j < kTokens; ++j) tokens[static_cast<size_t>(j)] = static_cast<int32_t>(j);
    ASSERT_TRUE(WriteTokenShard(Path("seq.bin"), tokens).ok());
    auto ds = TokenDataset::Open(Path("seq.bin"));
    ASSERT_TRUE(ds.ok());
    data_ = std::move(ds).value();
  }
  struct Batch {
    std::vector<int32_t> inputs, targets;
  };
  Batch Train(const BatchSampler& s, int64_t k, int64_t first, int64_t count) const {
    Batch b{std::vector<int32_t>(static_cast<size_t>(count * kT)),
            std::vector<int32_t>(static_cast<size_t>(count * kT))};
    s.TrainSequences(k, first, count, b.inputs.data(), b.targets.data());
    return b;
  }
  std::unique_ptr<TokenDataset> data_;
};

TEST_F(SamplerTest, StartsFollowTheDocumentedHash) {
  const uint64_t seed = 1337;
  BatchSampler sampler(data_.get(), kT, seed);
  ASSERT_TRUE(sampler.Check().ok());
  const int64_t k = 42, B = 8;
  Batch b = Train(sampler, k, 0, B);
  for (int64_t i = 0; i < B; ++i) {
    const int64_t start =
        static_cast<int64_t>(HashU64(seed, static_cast<uint64_t>(k), static_cast<uint64_t>(i)) %
                             static_cast<uint64_t>(kTokens - kT));
    for (int64_t t = 0; t < kT; ++t) {
      ASSERT_EQ(b.inputs[static_cast<size_t>(i * kT + t)], start + t) << "seq " << i;
      // Targets are the inputs shifted by one token.
      ASSERT_EQ(b.targets[static_cast<size_t>(i * kT + t)], start + t + 1) << "seq " << i;
    }
  }
}

TEST_F(SamplerTest, BatchIsTheSameWhetherFetchedWholeOrInPieces) {
  BatchSampler sampler(data_.get(), kT, 7);
  const int64_t B = 12;
  for (int64_t k : {0, 1, 99}) {
    Batch whole = Train(sampler, k, 0, B);
    // Uneven pieces, fetched out of order, as ranks of different layouts would.
    std::vector<int32_t> in(static_cast<size_t>(B * kT)), tg(static_cast<size_t>(B * kT));
    for (auto [first, count] : {std::pair<int64_t, int64_t>{7, 5}, {0, 3}, {3, 1}, {4, 3}}) {
      sampler.TrainSequences(k, first, count, in.data() + first * kT, tg.data() + first * kT);
    }
    EXPECT_EQ(in, whole.inputs) << "batch " << k;
    EXPECT_EQ(tg, whole.targets) << "batch " << k;
  }
}

TEST_F(SamplerTest, DeterministicPerSeedAndBatch) {
  BatchSampler a(data_.get(), kT, 2024);
  BatchSampler a_again(data_.get(), kT, 2024);
  BatchSampler other_seed(data_.get(), kT, 2025);
  const Batch b0 = Train(a, 0, 0, 8);
  EXPECT_EQ(Train(a_again, 0, 0, 8).inputs, b0.inputs);
  EXPECT_NE(Train(a, 1, 0, 8).inputs, b0.inputs);
  EXPECT_NE(Train(other_seed, 0, 0, 8).inputs, b0.inputs);
  // Within a batch the sequences are not all the same window.
  std::set<int32_t> starts;
  for (int64_t i = 0; i < 8; ++i) starts.insert(b0.inputs[static_cast<size_t>(i * kT)]);
  EXPECT_GT(starts.size(), 1u);
}

TEST_F(SamplerTest, SameBatchAcrossShardBoundaries) {
  // The same stream split over three shards gives the same batches.
  std::vector<int32_t> tokens(kTokens);
  for (int64_t j = 0; j < kTokens; ++j) tokens[static_cast<size_t>(j)] = static_cast<int32_t>(j);
  ASSERT_TRUE(WriteTokenShard(Path("part_0.bin"), {tokens.begin(), tokens.begin() + 1234}).ok());
  ASSERT_TRUE(
      WriteTokenShard(Path("part_1.bin"), {tokens.begin() + 1234, tokens.begin() + 1240}).ok());
  ASSERT_TRUE(WriteTokenShard(Path("part_2.bin"), {tokens.begin() + 1240, tokens.end()}).ok());
  auto split = TokenDataset::Open(Path("part_*.bin"));
  ASSERT_TRUE(split.ok());
  BatchSampler one(data_.get(), kT, 5), many(split->get(), kT, 5);
  for (int64_t k = 0; k < 20; ++k) {
    Batch a = Train(one, k, 0, 16), b = Train(many, k, 0, 16);
    ASSERT_EQ(a.inputs, b.inputs);
    ASSERT_EQ(a.targets, b.targets);
  }
}

TEST_F(SamplerTest, EvalWindowsAreConsecutiveAndWrap) {
  BatchSampler sampler(data_.get(), kT, 1);
  const int64_t span = kTokens - kT;
  const int64_t first = span / kT - 2;  // runs past the end: wraps
  const int64_t count = 6;
  std::vector<int32_t> in(static_cast<size_t>(count * kT)), tg(static_cast<size_t>(count * kT));
  sampler.EvalSequences(first, count, in.data(), tg.data());
  for (int64_t s = 0; s < count; ++s) {
    const int64_t start = ((first + s) * kT) % span;
    for (int64_t t = 0; t < kT; ++t) {
      ASSERT_EQ(in[static_cast<size_t>(s * kT + t)], start + t);
      ASSERT_EQ(tg[static_cast<size_t>(s * kT + t)], start + t + 1);
    }
  }
  // Evaluation does not depend on the seed.
  BatchSampler other(data_.get(), kT, 999);
  std::vector<int32_t> in2(in.size()), tg2(tg.size());
  other.EvalSequences(first, count, in2.data(), tg2.data());
  EXPECT_EQ(in2, in);
}

TEST_F(DataTest, SamplerCheckNeedsSeqLenPlusOneTokens) {
  ASSERT_TRUE(WriteTokenShard(Path("small.bin"), {1, 2, 3, 4, 5}).ok());
  auto ds = TokenDataset::Open(Path("small.bin"));
  ASSERT_TRUE(ds.ok());
  EXPECT_TRUE(BatchSampler(ds->get(), 4, 0).Check().ok());
  Status st = BatchSampler(ds->get(), 5, 0).Check();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("5 tokens"), std::string::npos) << st.message();
  EXPECT_FALSE(BatchSampler(ds->get(), 0, 0).Check().ok());

  // With exactly T+1 tokens the only window is the whole stream.
  BatchSampler exact(ds->get(), 4, 3);
  std::vector<int32_t> in(4), tg(4);
  exact.TrainSequences(17, 5, 1, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(tg, (std::vector<int32_t>{2, 3, 4, 5}));
}

// ---------------------------------------------------------------- vocabulary

TEST(VocabularyTest, TinyShakespeareHas65Chars) {
  std::ifstream in(kShakespeare, std::ios::binary);
  ASSERT_TRUE(in) << kShakespeare;
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto vocab = Vocabulary::CharsOf(text);
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  EXPECT_EQ(vocab->kind(), "char");
  EXPECT_EQ(vocab->size(), 65);
  // nanoGPT shakespeare_char order: sorted by code point.
  EXPECT_EQ(vocab->Decode({0, 1, 2}), "\n !");
  EXPECT_EQ(vocab->Decode({13, 64}), "Az");

  auto ids = vocab->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), text.size());  // all ASCII
  EXPECT_EQ(vocab->Decode(*ids), text);
}

TEST(VocabularyTest, MultiByteCharsSortedByCodePointAndRoundTrip) {
  // U+00E9, U+4E2D, U+1F600 and ASCII: 1-, 2-, 3- and 4-byte forms.
  const std::string text = "z\xC3\xA9 a\xE4\xB8\xAD\xF0\x9F\x98\x80\xC3\xA9z";
  auto vocab = Vocabulary::CharsOf(text);
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  ASSERT_EQ(vocab->size(), 6);
  EXPECT_EQ(vocab->Decode({0, 1, 2, 3, 4, 5}),
            std::string(" az\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"));
  auto ids = vocab->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{2, 3, 0, 1, 4, 5, 3, 2}));
  EXPECT_EQ(vocab->Decode(*ids), text);
}

TEST(VocabularyTest, UnknownCharNamesCharAndPosition) {
  auto vocab = Vocabulary::CharsOf("abc");
  ASSERT_TRUE(vocab.ok());
  auto ids = vocab->Encode("abxcq");
  ASSERT_FALSE(ids.ok());
  const std::string& msg = ids.status().message();
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("U+0078"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'q'"), std::string::npos) << "names the first unknown only: " << msg;

  // Position of a character after a multi-byte one: byte offset and index differ.
  auto ids2 = vocab->Encode("a\xC3\xA9");
  ASSERT_FALSE(ids2.ok());
  EXPECT_NE(ids2.status().message().find("U+00E9"), std::string::npos);
  EXPECT_NE(ids2.status().message().find("byte offset 1"), std::string::npos);
}

TEST(VocabularyTest, InvalidUtf8NamesByteOffset) {
  struct Case {
    std::string text;
    size_t offset;
  };
  const std::vector<Case> cases = {
      {std::string("ab\xFF"
                   "c"),
       2},                                     // never valid
      {std::string("abc\xC3"), 3},             // cut off at end
      {std::string("a\xC0\xAF"), 1},           // overlong '/'
      {std::string("xy\xED\xA0\x80"), 2},      // surrogate U+D800
      {std::string("\x80"), 0},                // stray continuation
      {std::string("ok\xF4\x90\x80\x80"), 2},  // above U+10FFFF
  };
  for (const Case& c : cases) {
    auto vocab = Vocabulary::CharsOf(c.text);
    ASSERT_FALSE(vocab.ok()) << "accepted invalid text at offset " << c.offset;
    EXPECT_EQ(vocab.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(vocab.status().message().find("byte offset " + std::to_string(c.offset)),
              std::string::npos)
        << vocab.status().message();
  }
  // A sequence broken off by an ASCII byte: the message names where the
  // sequence starts and the byte that broke it.
  auto v =
      Vocabulary::CharsOf(std::string("ab\xC3"
                                      "A"));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("byte offset 2"), std::string::npos);
  EXPECT_NE(v.status().message().find("0x41 at byte offset 3"), std::string::npos)
      << v.status().message();
}

TEST(VocabularyTest, EmptyTextIsAnError) { EXPECT_FALSE(Vocabulary::CharsOf("").ok()); }

TEST(VocabularyTest, ByteVocabularyCoversAllBytes) {
  Vocabulary v = Vocabulary::Bytes();
  EXPECT_EQ(v.kind(), "byte");
  EXPECT_EQ(v.size(), 256);
  std::string all;
  for (int b = 255; b >= 0; --b) all.push_back(static_cast<char>(b));
  auto ids = v.Encode(all);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 256u);
  EXPECT_EQ((*ids)[0], 255);
  EXPECT_EQ((*ids)[255], 0);
  EXPECT_EQ(v.Decode(*ids), all);
}

TEST(VocabularyTest, OutOfRangeIdsDecodeAsReplacementChar) {
  auto v = Vocabulary::CharsOf("ab");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Decode({0, 2, -1, 1}),
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
}

TEST_F(DataTest, VocabularySaveLoadRoundTrip) {
  const std::string text = "He said \"hi\\there\"\n\t\xC3\xA9\xF0\x9F\x98\x80\x01";
  auto v = Vocabulary::CharsOf(text);
  ASSERT_TRUE(v.ok());
  const std::string path = Path("vocab.json");
  ASSERT_TRUE(v->Save(path).ok());

  // The documented format, readable by any JSON parser.
  nlohmann::json j = nlohmann::json::parse(ReadBytes(path));
  EXPECT_EQ(j["kind"], "char");
  EXPECT_EQ(j["vocab_size"], v->size());
  ASSERT_EQ(j["pieces"].size(), static_cast<size_t>(v->size()));
  EXPECT_EQ(j["pieces"][0], "\x01");

  auto loaded = Vocabulary::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->kind(), "char");
  EXPECT_EQ(loaded->size(), v->size());
  auto a = v->Encode(text);
  auto b = loaded->Encode(text);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(loaded->Decode(*b), text);

  ASSERT_TRUE(Vocabulary::Bytes().Save(path).ok());
  auto bytes = Vocabulary::Load(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(bytes->kind(), "byte");
  EXPECT_EQ(bytes->size(), 256);
  const std::string raw("\xFF\x00\x80z", 4);
  auto raw_ids = bytes->Encode(raw);
  ASSERT_TRUE(raw_ids.ok());
  EXPECT_EQ(*raw_ids, (std::vector<int32_t>{255, 0, 128, 'z'}));
  EXPECT_EQ(bytes->Decode(*raw_ids), raw);
}

TEST_F(DataTest, VocabularyLoadErrors) {
  auto missing = Vocabulary::Load(Path("none.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("none.json"), std::string::npos);

  const std::string path = Path("vocab.json");
  const std::vector<std::string> bad = {
      "{not json",
      R"({"kind": "char", "vocab_size": 3, "pieces": ["a", "b"]})",
      R"({"kind": "char", "vocab_size": 2, "pieces": ["b", "a"]})",
      R"({"kind": "char", "vocab_size": 2, "pieces": ["a", "bc"]})",
      R"({"kind": "bpe", "vocab_size": 1, "pieces": ["a"]})",
      R"({"kind": "byte", "vocab_size": 1, "pieces": ["a"]})",
      R"([1, 2])",
  };
  for (const std::string& content : bad) {
    WriteBytes(path, content);
    auto v = Vocabulary::Load(path);
    ASSERT_FALSE(v.ok()) << content;
    EXPECT_EQ(v.status().code(), StatusCode::kDataLoss) << content;
    EXPECT_NE(v.status().message().find("vocab.json"), std::string::npos);
  }
}

// Each kind's own check, and the fields every kind shares, name what is
// wrong: a byte vocabulary must spell the 256 bytes in order, a char one
// must hold pieces, a kind must be known.
TEST(VocabularyTest, FromJsonNamesWhatIsWrong) {
  nlohmann::json byte = Vocabulary::Bytes().ToJson();
  ASSERT_TRUE(Vocabulary::FromJson(byte, "v").ok());
  byte["pieces"][65] = byte["pieces"][66];
  nlohmann::json char_vocab = Vocabulary::CharsOf("ab")->ToJson();
  ASSERT_TRUE(Vocabulary::FromJson(char_vocab, "v").ok());
  nlohmann::json no_pieces = char_vocab, unknown = char_vocab, not_string = char_vocab,
                 size_not_int = char_vocab;
  no_pieces["pieces"] = nlohmann::json::array();
  no_pieces.erase("vocab_size");
  unknown["kind"] = "word";
  not_string["pieces"][1] = 98;
  size_not_int["vocab_size"] = "2";
  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {byte, "byte piece 65 does not stand for byte 65"},
      {no_pieces, "no pieces"},
      {unknown, "unknown kind 'word' (expected \"char\", \"byte\" or \"bpe\")"},
      {not_string, "piece 1 is not a string"},
      {size_not_int, "\"vocab_size\" is not an integer"},
  };
  for (const auto& [j, message] : bad) {
    auto v = Vocabulary::FromJson(j, "vocab.json");
    ASSERT_FALSE(v.ok()) << message;
    EXPECT_EQ(v.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(v.status().message(), "vocab.json is invalid: " + message +
                                        "; re-run `scaletrain data prepare` to regenerate it");
  }
}

// ---------------------------------------------------------------- prepare

TEST_F(DataTest, PrepareWritesShardsAndVocab) {
  const std::string text = "hello world, hello data!\nthe quick brown fox.\n";
  const std::string input = Path("input.txt");
  WriteBytes(input, text);
  PrepareOptions opts;
  opts.input = input;
  opts.output_dir = Path("out/nested");
  opts.val_fraction = 0.25;

  auto summary = PrepareTextData(opts);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  const int64_t n = static_cast<int64_t>(text.size());
  EXPECT_EQ(summary->train_tokens + summary->val_tokens, n);
  EXPECT_EQ(summary->train_tokens, static_cast<int64_t>(n * 0.75));

  auto train = TokenShard::Open(opts.output_dir + "/train.bin");
  auto val = TokenShard::Open(opts.output_dir + "/val.bin");
  auto vocab = Vocabulary::Load(opts.output_dir + "/vocab.json");
  ASSERT_TRUE(train.ok() && val.ok() && vocab.ok());
  EXPECT_EQ((*train)->num_tokens(), summary->train_tokens);
  EXPECT_EQ((*val)->num_tokens(), summary->val_tokens);
  EXPECT_EQ(vocab->size(), summary->vocab_size);
  EXPECT_EQ(vocab->size(), static_cast<int64_t>(std::set<char>(text.begin(), text.end()).size()));
  // The train split is the beginning of the text, val the end.
  const size_t cut = static_cast<size_t>(summary->train_tokens);
  EXPECT_EQ(vocab->Decode(AllTokens(**train)), text.substr(0, cut));
  EXPECT_EQ(vocab->Decode(AllTokens(**val)), text.substr(cut));
  // Nothing but the three outputs in the output directory.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(opts.output_dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"train.bin", "val.bin", "vocab.json"}));
}

TEST_F(DataTest, PrepareTinyShakespeareMatchesNanoGpt) {
  PrepareOptions opts;
  opts.input = kShakespeare;
  opts.output_dir = Path("shakespeare_char");
  auto summary = PrepareTextData(opts);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  // nanoGPT data/shakespeare_char/prepare.py: vocab 65, train 1,003,854
  // tokens, val 111,540 tokens.
  EXPECT_EQ(summary->vocab_size, 65);
  EXPECT_EQ(summary->train_tokens, 1003854);
  EXPECT_EQ(summary->val_tokens, 111540);
  auto ds = TokenDataset::Open(opts.output_dir + "/train.bin");
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->max_token(), 64);
  EXPECT_EQ(fs::file_size(opts.output_dir + "/val.bin"), 1024u + 2u * 111540u);
}

TEST_F(DataTest, PrepareByteVocabulary) {
  const char raw[] = "caf\xC3\xA9 \xFF\x00 bytes";
  const std::string text(raw, sizeof(raw) - 1);  // keeps the NUL byte
  ASSERT_EQ(text.size(), 14u);
  WriteBytes(Path("in.bin"), text);
  PrepareOptions opts{Path("in.bin"), Path("out"), 0.5, "byte", 0, "", ""};
  auto summary = PrepareTextData(opts);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->vocab_size, 256);
  EXPECT_EQ(summary->train_tokens, 7);
  EXPECT_EQ(summary->val_tokens, 7);
  auto val = TokenShard::Open(Path("out/val.bin"));
  ASSERT_TRUE(val.ok());
  EXPECT_EQ(Vocabulary::Bytes().Decode(AllTokens(**val)), text.substr(7));
}

TEST_F(DataTest, PrepareOptionErrors) {
  WriteBytes(Path("good.txt"), "some text to train on\n");
  WriteBytes(Path("empty.txt"), "");
  WriteBytes(Path("latin1.txt"), "caf\xE9\n");
  auto run = [&](PrepareOptions o) { return PrepareTextData(o).status(); };

  Status missing = run({Path("nope.txt"), Path("out"), 0.1, "char", 0, "", ""});
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("nope.txt"), std::string::npos) << missing.message();

  Status empty = run({Path("empty.txt"), Path("out"), 0.1, "char", 0, "", ""});
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("empty"), std::string::npos) << empty.message();

  for (double f : {0.0, 1.0, -0.1, 1.5, std::nan("")}) {
    Status st = run({Path("good.txt"), Path("out"), f, "char", 0, "", ""});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << f;
    EXPECT_NE(st.message().find("val_fraction"), std::string::npos) << st.message();
  }

  Status kind = run({Path("good.txt"), Path("out"), 0.1, "wordpiece", 0, "", ""});
  EXPECT_EQ(kind.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(kind.message().find("wordpiece"), std::string::npos);

  Status utf8 = run({Path("latin1.txt"), Path("out"), 0.1, "char", 0, "", ""});
  EXPECT_EQ(utf8.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(utf8.message().find("latin1.txt"), std::string::npos) << utf8.message();
  EXPECT_NE(utf8.message().find("byte offset 3"), std::string::npos) << utf8.message();

  // 22 characters: 1% of them is not even one token of training data.
  Status too_small = run({Path("good.txt"), Path("out"), 0.99, "char", 0, "", ""});
  EXPECT_EQ(too_small.code(), StatusCode::kInvalidArgument) << too_small.message();

  WriteBytes(Path("a_file"), "x");
  Status not_dir = run({Path("good.txt"), Path("a_file"), 0.5, "char", 0, "", ""});
  EXPECT_EQ(not_dir.code(), StatusCode::kIoError);

  // None of the failures created the output directory's files.
  EXPECT_FALSE(fs::exists(Path("out/train.bin")));
}

TEST_F(DataTest, FailedPrepareLeavesExistingOutputsUntouched) {
  WriteBytes(Path("good.txt"), "a good corpus, long enough to split.\n");
  PrepareOptions opts{Path("good.txt"), Path("out"), 0.2, "char", 0, "", ""};
  ASSERT_TRUE(PrepareTextData(opts).ok());
  const std::string train_before = ReadBytes(Path("out/train.bin"));
  const std::string val_before = ReadBytes(Path("out/val.bin"));
  const std::string vocab_before = ReadBytes(Path("out/vocab.json"));
  ASSERT_GT(train_before.size(), 1024u);

  WriteBytes(Path("bad.txt"), "fine start then \xFF garbage");
  WriteBytes(Path("empty.txt"), "");
  for (const std::string& input : {Path("bad.txt"), Path("empty.txt"), Path("missing.txt")}) {
    PrepareOptions bad{input, Path("out"), 0.2, "char", 0, "", ""};
    ASSERT_FALSE(PrepareTextData(bad).ok()) << input;
  }
  EXPECT_EQ(ReadBytes(Path("out/train.bin")), train_before);
  EXPECT_EQ(ReadBytes(Path("out/val.bin")), val_before);
  EXPECT_EQ(ReadBytes(Path("out/vocab.json")), vocab_before);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(Path("out"))) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"train.bin", "val.bin", "vocab.json"}));
}

TEST_F(DataTest, PrepareReplacesOutputsWhenItSucceeds) {
  WriteBytes(Path("one.txt"), "aaaa bbbb cccc dddd\n");
  WriteBytes(Path("two.txt"), "xyz xyz xyz xyz xyz xyz\n");
  ASSERT_TRUE(PrepareTextData({Path("one.txt"), Path("out"), 0.1, "char", 0, "", ""}).ok());
  auto second = PrepareTextData({Path("two.txt"), Path("out"), 0.1, "char", 0, "", ""});
  ASSERT_TRUE(second.ok());
  auto vocab = Vocabulary::Load(Path("out/vocab.json"));
  ASSERT_TRUE(vocab.ok());
  EXPECT_EQ(vocab->size(), 5);  // ' ', '\n', x, y, z
  auto train = TokenShard::Open(Path("out/train.bin"));
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(vocab->Decode(AllTokens(**train)),
            std::string("xyz xyz xyz xyz xyz xyz\n").substr(0, 21));
}

}  // namespace
}  // namespace scaletrain
