// The CSV of measured runs for `scaletrain plan validate`
// (plan::ReadPublishedRuns in plan/table_reader.h: RFC 4180 fields, the header's columns, each
// row's numbers).
//
// Checked besides not crashing: a refusal has a message; every row read
// whole has what ReadPublishedRuns promises to require (gpu and num_gpus;
// global_batch 0 only where left empty); a row that could not be read has
// its error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_scratch.h"
#include "plan/table_reader.h"

namespace fuzz = scaletrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::WriteScratchFile("runs.csv", data, size);
  auto runs = scaletrain::plan::ReadPublishedRuns(path);
  if (!runs.ok()) {
    fuzz::CheckRefusal(runs.status(), "ReadPublishedRuns");
    return 0;
  }
  for (const scaletrain::plan::PublishedRun& run : *runs) {
    if (!run.error.empty()) continue;  // a row that could not be read says why
    if (run.gpu.empty() || run.num_gpus <= 0 || run.global_batch < 0) {
      fuzz::Fail("ReadPublishedRuns accepted row '" + run.id +
                 "' without gpu or num_gpus, or with a negative global_batch");
    }
  }
  return 0;
}
