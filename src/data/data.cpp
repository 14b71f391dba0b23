#include "data/data.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/file_io.h"
#include "core/rng.h"

namespace scaletrain {

// The shard is read through mmap and TokenShard::token() reinterprets the
// mapped bytes directly, so the host must share the file's byte order.
static_assert(std::endian::native == std::endian::little,
              "llm.c token shards are little-endian; this reader maps them in place");

namespace {

constexpr int64_t kHeaderBytes = kShardHeaderInts * static_cast<int64_t>(sizeof(int32_t));
constexpr const char* kPrepareHint = "re-run `scaletrain data prepare` to regenerate it";

std::string ErrnoText(int err) { return std::strerror(err); }

template <typename T>
Status WriteTokensAs(FileSink& sink, const std::vector<int32_t>& tokens) {
  // Converting in chunks keeps memory flat for shards of any size.
  constexpr size_t kChunk = 1 << 16;
  std::vector<T> buf;
  buf.reserve(std::min(kChunk, tokens.size()));
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    const size_t end = std::min(tokens.size(), begin + kChunk);
    buf.clear();
    for (size_t i = begin; i < end; ++i) buf.push_back(static_cast<T>(tokens[i]));
    ST_RETURN_IF_ERROR(sink.Write(buf.data(), buf.size() * sizeof(T)));
  }
  return Status::Ok();
}

}  // namespace

Status WriteTokenShard(const std::string& path, const std::vector<int32_t>& tokens) {
  if (path.empty()) return InvalidArgument("WriteTokenShard: empty output path");
  // The llm.c header stores the count as an int32.
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return InvalidArgument("cannot write " + std::to_string(tokens.size()) + " tokens to " + path +
                           ": an llm.c shard holds at most 2^31-1 tokens; split the data into "
                           "several shards");
  }
  int32_t max_token = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0) {
      return InvalidArgument("cannot write token " + std::to_string(tokens[i]) + " at index " +
                             std::to_string(i) + " to " + path +
                             ": token ids must be non-negative");
    }
    max_token = std::max(max_token, tokens[i]);
  }
  const int32_t version = max_token < 65536 ? 1 : 2;

  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());

  // A reader never sees a half-written shard under the real name.
  return WriteFileAtomically(path, [&](FileSink& sink) -> Status {
    ST_RETURN_IF_ERROR(sink.Write(header, sizeof(header)));
    return version == 1 ? WriteTokensAs<uint16_t>(sink, tokens)
                        : WriteTokensAs<uint32_t>(sink, tokens);
  });
}

TokenShard::~TokenShard() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

namespace {

// Closes the descriptor on every return path; a mapping stays valid without it.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

Result<int> OpenShardFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) return fd;
  const int err = errno;
  if (err == ENOENT) {
    return NotFound("token shard " + path +
                    " not found; run `scaletrain data prepare` to create it, or check the "
                    "data path");
  }
  return IoError("cannot open token shard " + path + ": " + ErrnoText(err));
}

// The file's size, once it is known to be a regular file with room for a
// header.
Result<int64_t> ShardFileBytes(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return IoError("cannot stat token shard " + path + ": " + ErrnoText(errno));
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(path + " is not a regular file, so it cannot be a token shard");
  }
  const int64_t actual_bytes = static_cast<int64_t>(st.st_size);
  if (actual_bytes < kHeaderBytes) {
    return DataLoss("token shard " + path + " is truncated: " + std::to_string(actual_bytes) +
                    " bytes, shorter than the " + std::to_string(kHeaderBytes) + "-byte header; " +
                    kPrepareHint);
  }
  return actual_bytes;
}

struct ShardHeader {
  int32_t version = 1;
  int64_t count = 0;  // tokens
};

// The header's magic, version and token count, and the file's size against
// that count.
Result<ShardHeader> ReadShardHeader(int fd, const std::string& path, int64_t actual_bytes) {
  int32_t header[kShardHeaderInts];
  ssize_t got = ::pread(fd, header, sizeof(header), 0);
  if (got != static_cast<ssize_t>(sizeof(header))) {
    return IoError("cannot read the header of token shard " + path + ": " +
                   (got < 0 ? ErrnoText(errno) : std::string("short read")));
  }
  if (header[0] != kShardMagic) {
    return DataLoss("token shard " + path + " has bad magic " + std::to_string(header[0]) +
                    " (expected " + std::to_string(kShardMagic) +
                    "): not an llm.c .bin shard, or corrupt; " + kPrepareHint);
  }
  const ShardHeader h{header[1], header[2]};
  if (h.version != 1 && h.version != 2) {
    return DataLoss("token shard " + path + " has unsupported version " +
                    std::to_string(h.version) +
                    " (expected 1 for uint16 tokens or 2 for uint32 tokens); " + kPrepareHint);
  }
  if (h.count < 0) {
    return DataLoss("token shard " + path + " announces a negative token count " +
                    std::to_string(h.count) + "; " + kPrepareHint);
  }
  const int64_t bytes_per_token = h.version == 1 ? 2 : 4;
  const int64_t expected_bytes = kHeaderBytes + h.count * bytes_per_token;
  if (actual_bytes != expected_bytes) {
    return DataLoss("token shard " + path + " is " +
                    (actual_bytes < expected_bytes ? "truncated" : "longer than its header says") +
                    ": its header announces " + std::to_string(h.count) + " tokens, so " +
                    std::to_string(expected_bytes) + " bytes are expected, but the file has " +
                    std::to_string(actual_bytes) + " bytes; " + kPrepareHint);
  }
  return h;
}

// One pass over the tokens: their largest id (the trainer checks it against
// the vocabulary) and, in a uint32 shard, none read as negative.
Result<int32_t> LargestTokenId(const TokenShard& shard) {
  int32_t max_token = 0;
  for (int64_t i = 0; i < shard.num_tokens(); ++i) {
    const int32_t t = shard.token(i);
    if (t < 0) {
      return DataLoss(
          "token shard " + shard.path() + " holds token id " +
          std::to_string(static_cast<uint32_t>(t)) + " at index " + std::to_string(i) +
          ", above the largest id a shard may hold (2147483647): the file is corrupt; " +
          kPrepareHint);
    }
    max_token = std::max(max_token, t);
  }
  return max_token;
}

}  // namespace

Result<std::unique_ptr<TokenShard>> TokenShard::Open(const std::string& path) {
  ST_ASSIGN_OR_RETURN(const int fd, OpenShardFile(path));
  const FdCloser closer{fd};
  ST_ASSIGN_OR_RETURN(const int64_t actual_bytes, ShardFileBytes(fd, path));
  ST_ASSIGN_OR_RETURN(const ShardHeader header, ReadShardHeader(fd, path, actual_bytes));
  void* map = ::mmap(nullptr, static_cast<size_t>(actual_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED)
    return IoError("cannot mmap token shard " + path + ": " + ErrnoText(errno));

  std::unique_ptr<TokenShard> shard(new TokenShard());
  shard->path_ = path;
  shard->map_ = map;
  shard->map_bytes_ = static_cast<size_t>(actual_bytes);
  shard->tokens_ = static_cast<const char*>(map) + kHeaderBytes;
  shard->num_tokens_ = header.count;
  shard->version_ = header.version;
  ST_ASSIGN_OR_RETURN(shard->max_token_, LargestTokenId(*shard));
  return shard;
}

Result<std::unique_ptr<TokenDataset>> TokenDataset::Open(const std::string& pattern) {
  std::vector<std::string> paths;
  struct stat st {};
  if (::stat(pattern.c_str(), &st) == 0) {
    // An existing path is taken literally, so a name containing glob
    // characters such as '[' still opens.
    paths.push_back(pattern);
  } else {
    glob_t g{};
    // GLOB_NOSORT: glob sorts by the locale's collation; we sort bytewise
    // below so the shard order (and therefore the token stream) is the same
    // on every machine.
    const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) {
      return NotFound("no token shard matches '" + pattern +
                      "'; run `scaletrain data prepare` to create train.bin/val.bin, or fix the "
                      "data path");
    }
    if (rc != 0) return IoError("cannot expand the data pattern '" + pattern + "'");
    std::sort(paths.begin(), paths.end());
  }

  std::unique_ptr<TokenDataset> ds(new TokenDataset());
  for (const std::string& p : paths) {
    ST_ASSIGN_OR_RETURN(std::unique_ptr<TokenShard> shard, TokenShard::Open(p));
    ds->starts_.push_back(ds->total_);
    ds->total_ += shard->num_tokens();
    ds->max_token_ = std::max(ds->max_token_, shard->max_token());
    ds->shards_.push_back(std::move(shard));
  }
  return ds;
}

void TokenDataset::Read(int64_t start, int64_t count, int32_t* out) const {
  assert(start >= 0 && count >= 0 && start + count <= total_);
  if (count <= 0) return;
  // The last shard whose first index is <= start; empty shards share a
  // start with their successor, and upper_bound skips past them.
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), start) -
                                 starts_.begin()) -
             1;
  int64_t local = start - starts_[s];
  while (count > 0) {
    const TokenShard& shard = *shards_[s];
    const int64_t take = std::min(count, shard.num_tokens() - local);
    for (int64_t i = 0; i < take; ++i) out[i] = shard.token(local + i);
    out += take;
    count -= take;
    local = 0;
    ++s;
  }
}

BatchSampler::BatchSampler(const TokenDataset* data, int64_t seq_len, uint64_t seed)
    : data_(data), T_(seq_len), seed_(seed) {}

Status BatchSampler::Check() const {
  if (data_ == nullptr) return InvalidArgument("BatchSampler has no dataset");
  if (T_ <= 0) {
    return InvalidArgument("seq_len must be positive, got " + std::to_string(T_));
  }
  if (data_->num_tokens() < T_ + 1) {
    return InvalidArgument("the dataset holds " + std::to_string(data_->num_tokens()) +
                           " tokens, fewer than seq_len + 1 = " + std::to_string(T_ + 1) +
                           " needed for one sequence; use a shorter seq_len or more data");
  }
  return Status::Ok();
}

void BatchSampler::Window(int64_t start, int32_t* inputs, int32_t* targets) const {
  data_->Read(start, T_, inputs);
  data_->Read(start + 1, T_, targets);
}

void BatchSampler::TrainSequences(int64_t batch_index, int64_t first_seq, int64_t count,
                                  int32_t* inputs, int32_t* targets) const {
  const uint64_t span = static_cast<uint64_t>(data_->num_tokens() - T_);
  for (int64_t s = 0; s < count; ++s) {
    const uint64_t h =
        HashU64(seed_, static_cast<uint64_t>(batch_index), static_cast<uint64_t>(first_seq + s));
    Window(static_cast<int64_t>(h % span), inputs + s * T_, targets + s * T_);
  }
}

void BatchSampler::EvalSequences(int64_t first_seq, int64_t count, int32_t* inputs,
                                 int32_t* targets) const {
  const int64_t span = data_->num_tokens() - T_;
  for (int64_t s = 0; s < count; ++s) {
    Window(((first_seq + s) * T_) % span, inputs + s * T_, targets + s * T_);
  }
}

std::string VocabularyPath(const DataConfig& data) {
  if (!data.vocab.empty()) return data.vocab;
  if (data.train.empty()) return "";
  return (std::filesystem::path(data.train).parent_path() / "vocab.json").string();
}

}  // namespace scaletrain
