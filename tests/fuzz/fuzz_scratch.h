// What the harnesses share: a scratch directory of their own (the parsers
// under test read files, so each input is written to one first), and the
// check every harness makes of a refusal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/status.h"

namespace scaletrain::fuzz {

// Stops the run the way a sanitizer would, so libFuzzer keeps the input and
// the replay test fails; used for broken invariants, never for a refusal.
[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz harness: %s\n", what.c_str());
  std::abort();
}

// A directory under $TMPDIR (or /tmp) made once per process and removed at
// exit, so parallel fuzzers and the replay tests never share files.
const std::string& ScratchDir();

// Writes `size` bytes to ScratchDir()/name and returns its path. A failure
// here is the machine's (disk full), not the parser's: it ends the run.
std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size);

// A parser's answer to bad input: one message, never an empty one.
inline void CheckRefusal(const Status& st, const char* parser) {
  if (st.ok()) Fail(std::string(parser) + ": CheckRefusal called on an OK status");
  if (st.message().empty()) Fail(std::string(parser) + " refused an input without a message");
}

}  // namespace scaletrain::fuzz
