// The replay driver of the g++ build: runs a harness's LLVMFuzzerTestOneInput
// over every file of the directories it is given (its seed corpus and its
// regression inputs), the way the libFuzzer binary does with -runs=0, so the
// ordinary test suite checks every input on every run without clang.
//
//   fuzz_replay_<name> CORPUS_DIR [REGRESSION_DIR...]
//
// The first directory must exist and hold at least one input (an empty
// corpus would make the test pass without testing anything); a later one
// may be absent (a harness that has found no bug has no regressions yet).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

namespace {

// Regular files under `dir`, sorted so that the order (and a failure's
// position in the log) is the same on every machine.
std::vector<fs::path> InputsOf(const fs::path& dir, std::error_code& ec) {
  std::vector<fs::path> files;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [REGRESSION_DIR...]\n", argv[0]);
    return 2;
  }
  for (int a = 1; a < argc; ++a) {
    const fs::path dir = argv[a];
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      if (a == 1) {
        std::fprintf(stderr, "error: corpus directory %s not found\n", dir.c_str());
        return 1;
      }
      std::printf("%s: absent, no inputs\n", dir.c_str());
      continue;
    }
    const std::vector<fs::path> inputs = InputsOf(dir, ec);
    if (ec) {
      std::fprintf(stderr, "error: cannot list %s: %s\n", dir.c_str(), ec.message().c_str());
      return 1;
    }
    if (a == 1 && inputs.empty()) {
      std::fprintf(stderr, "error: corpus directory %s holds no inputs\n", dir.c_str());
      return 1;
    }
    for (const fs::path& input : inputs) {
      std::ifstream in(input, std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
      if (in.bad()) {
        std::fprintf(stderr, "error: cannot read %s\n", input.c_str());
        return 1;
      }
      // Named before it runs: a crash's log ends with the input that caused it.
      std::printf("%s\n", input.c_str());
      std::fflush(stdout);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("%s: %zu inputs replayed\n", dir.c_str(), inputs.size());
  }
  return 0;
}
