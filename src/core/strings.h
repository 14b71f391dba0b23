// printf-style formatting into a std::string, for reports and profiles
// that line up numbers in columns.
#pragma once

#include <string>

namespace scaletrain {

std::string Fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace scaletrain
