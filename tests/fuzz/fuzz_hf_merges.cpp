// merges.txt of a Hugging Face byte-level BPE (LoadHfBpe, src/data/bpe.h),
// beside a fixed vocab.json: the 256 bytes and a few joined tokens. The input
// is the merges file; after a NUL byte, if any, comes a text to encode.
//
// Checked besides not crashing: a refusal has a message; an accepted pair
// writes back (HfVocabJson, HfMergesText) to files that load to the same
// model, and the text (or a fixed one) decodes back from its encoding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/bpe.h"
#include "data/tokenizer.h"
#include "fuzz_scratch.h"

namespace fuzz = scaletrain::fuzz;
using scaletrain::BpeModel;

namespace {

const std::string& VocabPath() {
  static const std::string path = [] {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"th", "he", "the", " t", " th", " the", "in", "ing", "er", "e\n"}) {
      pieces.emplace_back(t);
    }
    auto m = BpeModel::Create(pieces, {}, "fuzz vocabulary");
    if (!m.ok()) fuzz::Fail("the fixed vocabulary does not build: " + m.status().message());
    const std::string json = scaletrain::HfVocabJson(*m);
    return fuzz::WriteScratchFile("vocab.json", reinterpret_cast<const uint8_t*>(json.data()),
                                  json.size());
  }();
  return path;
}

void CheckSame(const BpeModel& a, const BpeModel& b) {
  if (a.pieces() != b.pieces() || a.merges().size() != b.merges().size()) {
    fuzz::Fail("an accepted BPE pair writes back to files that load to another model");
  }
  for (size_t i = 0; i < a.merges().size(); ++i) {
    if (a.merges()[i].left != b.merges()[i].left || a.merges()[i].right != b.merges()[i].right) {
      fuzz::Fail("an accepted BPE pair writes back with merge " + std::to_string(i) + " changed");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string merges = input.substr(0, nul);
  const std::string text =
      nul == std::string::npos ? "the thing in there\n" : input.substr(nul + 1);
  const std::string merges_path = fuzz::WriteScratchFile(
      "merges.txt", reinterpret_cast<const uint8_t*>(merges.data()), merges.size());
  auto model = scaletrain::LoadHfBpe(VocabPath(), merges_path);
  if (!model.ok()) {
    fuzz::CheckRefusal(model.status(), "LoadHfBpe");
    return 0;
  }
  const std::string again = scaletrain::HfMergesText(*model);
  const std::string again_path = fuzz::WriteScratchFile(
      "merges_again.txt", reinterpret_cast<const uint8_t*>(again.data()), again.size());
  auto reloaded = scaletrain::LoadHfBpe(VocabPath(), again_path);
  if (!reloaded.ok()) fuzz::Fail("written merges do not load back: " + reloaded.status().message());
  CheckSame(*model, *reloaded);

  const scaletrain::Vocabulary vocab = scaletrain::Vocabulary::Bpe(*model);
  auto ids = vocab.Encode(text);
  if (!ids.ok())
    fuzz::Fail("a vocabulary of all 256 bytes cannot encode: " + ids.status().message());
  if (vocab.Decode(*ids) != text) fuzz::Fail("decode(encode(text)) != text");
  return 0;
}
