// printf-style formatting into a std::string, for reports and profiles
// that line up numbers in columns; names as lookup keys.
#pragma once

#include <optional>
#include <string>

namespace scaletrain {

std::string Fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

// `s` without the spaces, tabs and line ends at either end.
std::string Trim(const std::string& s);
// `s` in lower case (ASCII).
std::string Lower(std::string s);
// A name as a key: lower case, with spaces and underscores as hyphens
// ("Megatron_DeepSpeed", "A100 80GB" -> "megatron-deepspeed", "a100-80gb").
std::string NameKey(std::string s);
// A yes/no word as tables write it: true for true, yes, on, 1 and false for
// false, no, off, 0 (any case); nothing for any other word.
std::optional<bool> YesNo(const std::string& s);

}  // namespace scaletrain
