// printf-style formatting into a std::string, for reports and profiles
// that line up numbers in columns; names as lookup keys.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace scaletrain {

std::string Fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

// `s` without the spaces, tabs and line ends at either end.
std::string Trim(const std::string& s);
// The words of `s` in lower case: its runs of letters, digits and the
// characters of `also` ("FSDP2 + torch.compile" with also ".-": fsdp2,
// torch.compile).
std::vector<std::string> LowerWords(const std::string& s, const char* also = "");
// Whether `s` is one of `names`.
bool IsOneOf(const std::string& s, std::initializer_list<const char*> names);
// Whether any of `words` is one of `names`.
bool AnyWordIn(const std::vector<std::string>& words, std::initializer_list<const char*> names);
// `s` in lower case (ASCII).
std::string Lower(std::string s);
// A name as a key: lower case, with spaces and underscores as hyphens
// ("Megatron_DeepSpeed", "A100 80GB" -> "megatron-deepspeed", "a100-80gb").
std::string NameKey(std::string s);
// A yes/no word as tables write it: true for true, yes, on, 1 and false for
// false, no, off, 0 (any case); nothing for any other word.
std::optional<bool> YesNo(const std::string& s);

// `text` cut at spaces into lines of at most `width` characters (a longer
// word gets a line of its own), for text drawn in a plot.
std::vector<std::string> WrapWords(const std::string& text, size_t width);

// "; did you mean 'y'?" for the candidate nearest `name` where one is near
// enough (an edit distance of at most 2, or a third of the name); "" otherwise.
// Every unknown-name error uses it: config keys, subcommands, the planner's
// catalog names.
std::string DidYouMean(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace scaletrain
