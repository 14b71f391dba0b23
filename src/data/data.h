// Token data: llm.c's .bin shard format, memory-mapped, and the sampler that
// decides which sequences make up each global batch.
//
// Shard format (llm.c): a header of 256 little-endian int32 — [0] magic
// 20240520, [1] version (1: tokens are uint16; 2: tokens are uint32),
// [2] number of tokens — followed by the tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace scaletrain {

constexpr int32_t kShardMagic = 20240520;

// Where a config's vocabulary is: data.vocab, else the vocab.json that
// `scaletrain data prepare` wrote beside data.train (which may not exist);
// empty when neither is named.
std::string VocabularyPath(const DataConfig& data);
constexpr int64_t kShardHeaderInts = 256;

// Writes tokens to `path` (under a temporary name, then renamed into place).
// Version 1 (uint16) when every token < 65536, else version 2 (uint32).
Status WriteTokenShard(const std::string& path, const std::vector<int32_t>& tokens);

// One memory-mapped shard. Open() validates the header (magic, version),
// that the file holds exactly the announced tokens, and that every token is
// a valid id (a version-2 token above 2^31-1 is corrupt: ids are int32); a
// violation is a DataLoss error naming the file, what is wrong, and the fix.
class TokenShard {
 public:
  static Result<std::unique_ptr<TokenShard>> Open(const std::string& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  int64_t num_tokens() const { return num_tokens_; }
  int32_t max_token() const { return max_token_; }  // largest id present (0 if none)
  int32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  int32_t token(int64_t i) const {
    return version_ == 1 ? static_cast<const uint16_t*>(tokens_)[i]
                         : static_cast<int32_t>(static_cast<const uint32_t*>(tokens_)[i]);
  }

 private:
  TokenShard() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
  int64_t num_tokens_ = 0;
  int32_t max_token_ = 0;
  int32_t version_ = 1;
};

// All shards matching a path or glob pattern (sorted by name), seen as one
// token stream.
class TokenDataset {
 public:
  // Errors: no file matches (NotFound, naming the pattern and suggesting
  // `scaletrain data prepare`), or any shard invalid.
  static Result<std::unique_ptr<TokenDataset>> Open(const std::string& pattern);

  int64_t num_tokens() const { return total_; }
  int32_t max_token() const { return max_token_; }  // largest id present (scanned once)
  // Copies tokens [start, start + count) of the concatenated stream.
  void Read(int64_t start, int64_t count, int32_t* out) const;

 private:
  std::vector<std::unique_ptr<TokenShard>> shards_;
  std::vector<int64_t> starts_;  // first global index of each shard
  int64_t total_ = 0;
  int32_t max_token_ = 0;
};

// Chooses the sequences of each batch. Sequence i (0 <= i < global_batch) of
// training batch k starts at HashU64(seed, k, i) mod (num_tokens - T), and
// takes T+1 tokens (T inputs, T targets shifted by one): a function of
// (seed, k, i) only, never of the layout or the number of ranks (DESIGN
// principle 4). A rank that owns sequences [first, first+count) of the
// batch asks for exactly those.
//
// Validation sequence j starts at (j * T) mod (num_tokens - T): consecutive
// windows, the same every evaluation.
class BatchSampler {
 public:
  BatchSampler(const TokenDataset* data, int64_t seq_len, uint64_t seed);
  // Error if the dataset holds fewer than seq_len + 1 tokens.
  Status Check() const;
  void TrainSequences(int64_t batch_index, int64_t first_seq, int64_t count, int32_t* inputs,
                      int32_t* targets) const;
  void EvalSequences(int64_t first_seq, int64_t count, int32_t* inputs, int32_t* targets) const;

 private:
  void Window(int64_t start, int32_t* inputs, int32_t* targets) const;
  const TokenDataset* data_;
  int64_t T_;
  uint64_t seed_;
};

}  // namespace scaletrain
