#include "fuzz_scratch.h"

#include <unistd.h>

#include <filesystem>
#include <vector>

namespace scaletrain::fuzz {

namespace {

std::string MakeScratchDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                        "/scaletrain-fuzz-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) Fail("cannot create a scratch directory " + pattern);
  return std::string(buf.data());
}

// Never destroyed: the atexit handler that removes the directory may run
// after static destructors would have.
const std::string* scratch_dir = nullptr;

void RemoveScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(*scratch_dir, ec);
}

}  // namespace

const std::string& ScratchDir() {
  if (scratch_dir == nullptr) {
    scratch_dir = new std::string(MakeScratchDir());
    std::atexit(RemoveScratchDir);
  }
  return *scratch_dir;
}

std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Fail("cannot create " + path);
  const bool written = size == 0 || std::fwrite(data, 1, size, f) == size;
  if (std::fclose(f) != 0 || !written) Fail("cannot write " + path);
  return path;
}

}  // namespace scaletrain::fuzz
