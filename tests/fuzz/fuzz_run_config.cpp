// The run config: TOML text and --set overrides (ParseRunConfig).
//
// Input: the TOML text, then each override after a NUL byte
// ("[training]\nsteps = 3\0training.lr=0.1\0parallel.dp=2"). A real file
// holds no NUL, so the split takes nothing away from the TOML side.
//
// Checked besides not crashing: a refusal has a message; an accepted config
// passes ValidateRunConfig, and the config.resolved.toml written for it
// (RunConfigToToml) loads back to the same config, as `--resume` needs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "fuzz_scratch.h"

using scaletrain::ParseRunConfig;
using scaletrain::RunConfig;
using scaletrain::RunConfigToToml;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  size_t end = input.find('\0');
  const std::string toml = input.substr(0, end);
  std::vector<std::string> overrides;
  while (end != std::string::npos) {
    const size_t begin = end + 1;
    end = input.find('\0', begin);
    overrides.push_back(input.substr(begin, end == std::string::npos ? end : end - begin));
  }

  auto cfg = ParseRunConfig(toml, overrides, "fuzz.toml");
  if (!cfg.ok()) {
    scaletrain::fuzz::CheckRefusal(cfg.status(), "ParseRunConfig");
    return 0;
  }
  if (!scaletrain::ValidateRunConfig(*cfg).ok()) {
    scaletrain::fuzz::Fail("ParseRunConfig accepted a config ValidateRunConfig refuses");
  }
  const std::string resolved = RunConfigToToml(*cfg);
  auto again = ParseRunConfig(resolved, {}, "config.resolved.toml");
  if (!again.ok()) {
    scaletrain::fuzz::Fail("the resolved config does not load back: " + again.status().message() +
                           "\n" + resolved);
  }
  if (RunConfigToToml(*again) != resolved) {
    scaletrain::fuzz::Fail("the resolved config loads back to a different config:\n" + resolved +
                           "\nthen\n" + RunConfigToToml(*again));
  }
  return 0;
}
