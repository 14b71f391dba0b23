// SHA-256 (OpenSSL's libcrypto, not a hand-written hash): the checksums that
// checkpoint manifests record for every file and that loading verifies.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace scaletrain {

// An incremental digest: Update with the bytes in order, then HexDigest.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* bytes, size_t size);
  std::string HexDigest();  // 64 lowercase hex digits; the object is spent

 private:
  struct Context;
  Context* ctx_;
};

// The digest of `bytes` as 64 lowercase hex digits.
std::string Sha256Hex(const void* bytes, size_t size);
// The digest of the file at `path`, read in blocks. IoError if it cannot be
// read (the message names the file).
Result<std::string> Sha256OfFile(const std::string& path);

}  // namespace scaletrain
