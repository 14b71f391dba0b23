// Help that teaches: a command's examples printed right under its one-line
// description, before the usage line and the flags (CLI11 would only put
// them in the footer, after forty flags).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace scaletrain::cli {

// `examples`: lines such as "  scaletrain plan --model ... --search   the fastest layouts".
void SetHelpExamples(CLI::App* cmd, const std::string& examples);

}  // namespace scaletrain::cli
