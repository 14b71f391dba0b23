// Times TrainBpe (src/data/bpe.h) on a text file: the pre-tokenizer, the
// word counts and the merges, not the file read. For each vocab size: the
// best and median of R runs, the merges learnt, and how many tokens the
// trained vocabulary encodes the file to. Run by bench/bpe_train.py, which
// times the `tokenizers` library's trainer beside it.
//   build/bench/bpe_train_bench FILE REPEATS VOCAB_SIZE...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/bpe.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s FILE REPEATS VOCAB_SIZE...\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (!in || text.empty()) {
    std::fprintf(stderr, "error: cannot read %s\n", argv[1]);
    return 1;
  }
  const int repeats = std::max(1, std::atoi(argv[2]));
  for (int a = 3; a < argc; ++a) {
    const long vocab = std::atol(argv[a]);
    std::vector<double> secs;
    size_t merges = 0, tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto m = scaletrain::TrainBpe(text, vocab);
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (!m.ok()) {
        std::fprintf(stderr, "error: %s\n", m.status().message().c_str());
        return 1;
      }
      merges = m->merges().size();
      if (r == 0) tokens = m->Encode(text)->size();
    }
    std::sort(secs.begin(), secs.end());
    std::printf("%ld %zu %.4f %.4f %zu\n", vocab, merges, secs.front(), secs[secs.size() / 2],
                tokens);
  }
  return 0;
}
