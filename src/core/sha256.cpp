#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace scaletrain {

namespace {

struct DigestContextFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using DigestContext = std::unique_ptr<EVP_MD_CTX, DigestContextFree>;

std::string Hex(const unsigned char* digest, unsigned int size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (unsigned int i = 0; i < size; ++i) {
    out.push_back(kDigits[digest[i] >> 4]);
    out.push_back(kDigits[digest[i] & 15]);
  }
  return out;
}

}  // namespace

struct Sha256::Context {
  DigestContext md{EVP_MD_CTX_new()};
};

Sha256::Sha256() : ctx_(new Context) { EVP_DigestInit_ex(ctx_->md.get(), EVP_sha256(), nullptr); }
Sha256::~Sha256() { delete ctx_; }
void Sha256::Update(const void* bytes, size_t size) {
  EVP_DigestUpdate(ctx_->md.get(), bytes, size);
}
std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_->md.get(), digest, &n);
  return Hex(digest, n);
}

std::string Sha256Hex(const void* bytes, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes, size, digest, &n, EVP_sha256(), nullptr);
  return Hex(digest, n);
}

Result<std::string> Sha256OfFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return IoError("cannot read " + path + " to check its checksum: " + std::strerror(errno));
  DigestContext ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return Internal("OpenSSL could not start a SHA-256 digest");
  }
  std::vector<unsigned char> block(1 << 20);
  size_t got = 0;
  while ((got = std::fread(block.data(), 1, block.size(), f.get())) > 0) {
    EVP_DigestUpdate(ctx.get(), block.data(), got);
  }
  if (std::ferror(f.get()))
    return IoError("cannot read " + path + " to check its checksum: read error");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &n);
  return Hex(digest, n);
}

}  // namespace scaletrain
