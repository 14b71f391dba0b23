// Token shards in llm.c's .bin format (TokenShard::Open, TokenDataset::Open).
// The input is written to a file, which both open.
//
// Checked besides not crashing: a refusal has a message; an accepted shard
// is exactly its header plus the tokens it announces, every token can be
// read and is a valid id (>= 0: the trainer indexes the embedding with it),
// and the dataset over the same file agrees on the count and the largest
// token.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/data.h"
#include "fuzz_scratch.h"

using scaletrain::TokenDataset;
using scaletrain::TokenShard;
namespace fuzz = scaletrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::WriteScratchFile("shard.bin", data, size);
  auto shard = TokenShard::Open(path);
  auto dataset = TokenDataset::Open(path);
  if (shard.ok() != dataset.ok()) {
    fuzz::Fail("TokenShard::Open and TokenDataset::Open disagree about one file");
  }
  if (!shard.ok()) {
    fuzz::CheckRefusal(shard.status(), "TokenShard::Open");
    fuzz::CheckRefusal(dataset.status(), "TokenDataset::Open");
    return 0;
  }

  const TokenShard& s = **shard;
  const int64_t bytes_per_token = s.version() == 1 ? 2 : 4;
  if (s.num_tokens() < 0 ||
      static_cast<int64_t>(size) !=
          scaletrain::kShardHeaderInts * 4 + s.num_tokens() * bytes_per_token) {
    fuzz::Fail("an accepted shard's size is not its header plus its tokens");
  }
  int32_t max_token = 0;
  for (int64_t i = 0; i < s.num_tokens(); ++i) {
    if (s.token(i) < 0) fuzz::Fail("an accepted shard holds a negative token id");
    max_token = std::max(max_token, s.token(i));
  }

  if (s.max_token() != max_token) fuzz::Fail("TokenShard::max_token is not the largest token");

  const TokenDataset& d = **dataset;
  if (d.num_tokens() != s.num_tokens() || d.max_token() != max_token) {
    fuzz::Fail("the dataset over one shard disagrees with the shard");
  }
  if (d.num_tokens() > 0) {
    const int64_t count = std::min<int64_t>(d.num_tokens(), 64);
    std::vector<int32_t> tokens(static_cast<size_t>(count));
    d.Read(d.num_tokens() - count, count, tokens.data());
    for (int64_t i = 0; i < count; ++i) {
      if (tokens[static_cast<size_t>(i)] != s.token(d.num_tokens() - count + i)) {
        fuzz::Fail("TokenDataset::Read returns other tokens than the shard holds");
      }
    }
  }
  return 0;
}
