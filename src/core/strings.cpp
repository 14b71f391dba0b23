#include "core/strings.h"

#include <cstdarg>
#include <cstdio>

namespace scaletrain {

std::string Fmt(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, ap);
  va_end(ap);
  return out;
}

}  // namespace scaletrain
