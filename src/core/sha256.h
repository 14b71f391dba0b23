// SHA-256 (OpenSSL's libcrypto, not a hand-written hash): the checksums that
// checkpoint manifests record for every file and that loading verifies.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace scaletrain {

// The digest of `bytes` as 64 lowercase hex digits.
std::string Sha256Hex(const void* bytes, size_t size);
// The digest of the file at `path`, read in blocks. IoError if it cannot be
// read (the message names the file).
Result<std::string> Sha256OfFile(const std::string& path);

}  // namespace scaletrain
