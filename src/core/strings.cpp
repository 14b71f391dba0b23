#include "core/strings.h"

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

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

std::string Trim(const std::string& s) {
  const char* space = " \t\r\n";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

std::vector<std::string> LowerWords(const std::string& s, const char* also) {
  std::vector<std::string> words;
  std::string w;
  for (char c : Lower(s) + " ") {
    if (std::isalnum(static_cast<unsigned char>(c)) ||
        (c != '\0' && std::strchr(also, c) != nullptr)) {
      w += c;
    } else if (!w.empty()) {
      words.push_back(std::move(w));
      w.clear();
    }
  }
  return words;
}

bool IsOneOf(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

bool AnyWordIn(const std::vector<std::string>& words, std::initializer_list<const char*> names) {
  for (const std::string& w : words) {
    if (IsOneOf(w, names)) return true;
  }
  return false;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string NameKey(std::string s) {
  for (char& c : s) c = c == ' ' || c == '_' ? '-' : c;
  return Lower(std::move(s));
}

std::optional<bool> YesNo(const std::string& s) {
  const std::string key = Lower(s);
  if (IsOneOf(key, {"true", "yes", "on", "1"})) return true;
  if (IsOneOf(key, {"false", "no", "off", "0"})) return false;
  return std::nullopt;
}

std::vector<std::string> WrapWords(const std::string& text, size_t width) {
  std::vector<std::string> lines(1);
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (!lines.back().empty() && lines.back().size() + 1 + word.size() > width)
      lines.emplace_back();
    lines.back() += (lines.back().empty() ? "" : " ") + word;
    at = end + 1;
  }
  return lines;
}

namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string DidYouMean(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& k : candidates) {
    const size_t d = EditDistance(name, k);
    if (d < best_d) best_d = d, best = k;
  }
  if (best.empty() || best_d > std::max<size_t>(2, name.size() / 3)) return "";
  return "; did you mean '" + best + "'?";
}

}  // namespace scaletrain
