// vocab.json (Vocabulary::Load, which parses the JSON and calls FromJson).
//
// Checked besides not crashing: a refusal has a message; an accepted
// vocabulary has pieces, survives ToJson -> FromJson unchanged, and encodes
// its own decoded pieces back to the same ids (the ids the data was
// prepared with); a bpe vocabulary decodes its encoding of that text back to
// the text (an encoding error is allowed: a bpe vocabulary may lack bytes).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz_scratch.h"

using scaletrain::Vocabulary;
namespace fuzz = scaletrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::WriteScratchFile("vocab.json", data, size);
  auto vocab = Vocabulary::Load(path);
  if (!vocab.ok()) {
    fuzz::CheckRefusal(vocab.status(), "Vocabulary::Load");
    return 0;
  }
  if (vocab->size() <= 0) fuzz::Fail("Vocabulary::Load accepted a vocabulary with no pieces");

  auto again = Vocabulary::FromJson(vocab->ToJson(), "round trip");
  if (!again.ok()) {
    fuzz::Fail("an accepted vocabulary does not load back from its own JSON: " +
               again.status().message());
  }
  if (again->kind() != vocab->kind() || again->size() != vocab->size()) {
    fuzz::Fail("an accepted vocabulary loads back with another kind or size");
  }

  std::vector<int32_t> ids(static_cast<size_t>(vocab->size()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  if (vocab->kind() == "bpe") {
    // Merges re-split joined pieces their own way: the text must survive.
    const std::string text = vocab->Decode(ids);
    auto encoded = vocab->Encode(text);
    if (encoded.ok() && vocab->Decode(*encoded) != text) {
      fuzz::Fail("a bpe vocabulary does not decode its own encoding back to the text");
    }
    if (!encoded.ok()) fuzz::CheckRefusal(encoded.status(), "Vocabulary::Encode (bpe)");
    return 0;
  }
  auto encoded = vocab->Encode(vocab->Decode(ids));
  if (!encoded.ok()) {
    fuzz::Fail("a vocabulary cannot encode its own pieces: " + encoded.status().message());
  }
  if (*encoded != ids) fuzz::Fail("a vocabulary encodes its own pieces to other ids");
  return 0;
}
