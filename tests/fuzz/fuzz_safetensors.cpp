// The safetensors header (SafetensorsFile::Open): the 8-byte length, the
// JSON header, each tensor's dtype, shape and data_offsets.
//
// Checked besides not crashing: a refusal has a message; in an accepted
// file every tensor is found by its name, its bytes (dtype x shape) are all
// readable, aligned for its dtype, and together fit in the file after the
// header.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/safetensors.h"
#include "core/tensor.h"
#include "fuzz_scratch.h"

using scaletrain::SafetensorsFile;
namespace fuzz = scaletrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::WriteScratchFile("fuzz.safetensors", data, size);
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) {
    fuzz::CheckRefusal(file.status(), "SafetensorsFile::Open");
    return 0;
  }
  uint64_t total_bytes = 0;
  uint8_t checksum = 0;
  for (const scaletrain::NamedTensor& t : (*file)->tensors()) {
    if ((*file)->Find(t.name) != &t) fuzz::Fail("tensor '" + t.name + "' is not found by its name");
    const size_t element_bytes = scaletrain::DTypeSizeBytes(t.dtype);
    const uint64_t bytes = static_cast<uint64_t>(scaletrain::NumElements(t.shape)) * element_bytes;
    if (bytes > size) fuzz::Fail("tensor '" + t.name + "' is larger than the file");
    total_bytes += bytes;
    if (bytes > 0 && reinterpret_cast<uintptr_t>(t.data) % element_bytes != 0) {
      fuzz::Fail("tensor '" + t.name + "' is not aligned for its dtype");
    }
    // Touches every byte: a span outside the mapping faults here.
    const auto* p = static_cast<const uint8_t*>(t.data);
    for (uint64_t i = 0; i < bytes; ++i) checksum = static_cast<uint8_t>(checksum + p[i]);
  }
  if (total_bytes > size) fuzz::Fail("the tensors hold more bytes than the file");
  // Keeps the reads above from being optimised away.
  volatile uint8_t sink = checksum;
  (void)sink;
  return 0;
}
