// A software stack file (plan::StackCatalog::LoadFile): the keys of
// configs/stacks/*.toml, as a user writes their own for `plan --stack-file`.
// Loaded alone, so a file with a `base` is refused (no stack to build on).
//
// Checked besides not crashing: a refusal has a message; an accepted stack is
// found by its name, and every number the cost model divides by or scales
// with is within the range the loader states.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_scratch.h"
#include "plan/stacks.h"

namespace fuzz = scaletrain::fuzz;
using scaletrain::plan::Software;
using scaletrain::plan::StackCatalog;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::WriteScratchFile("mine.toml", data, size);
  StackCatalog catalog;
  const scaletrain::Status st = catalog.LoadFile(path);
  if (!st.ok()) {
    fuzz::CheckRefusal(st, "StackCatalog::LoadFile");
    return 0;
  }
  auto sw = catalog.Find("mine");
  if (!sw.ok()) fuzz::Fail("an accepted stack file is not found by its name");
  const Software& s = *sw;
  if (!(s.attention_fwd_slowdown > 0 && s.attention_bwd_slowdown > 0)) {
    fuzz::Fail("a stack was accepted with an attention slowdown that is not positive");
  }
  if (!(s.overlap_slowdown >= 0 && s.overlap_slowdown <= 1) || s.max_searched_zero < 0 ||
      s.max_searched_zero > 3 || s.causal_block_rows < 0 || !(s.launch_us >= 0) ||
      !(s.framework_gib >= 0)) {
    fuzz::Fail("a stack was accepted with a value outside the range the loader states");
  }
  return 0;
}
