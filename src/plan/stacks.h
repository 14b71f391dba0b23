// The software stacks: what the training software does beyond the layout
// (`Software`, layout.h), read from stack files (configs/stacks/*.toml) as
// the hardware catalog is read from its files, so that a user describes their
// own fork of Megatron or FSDP in a file (`plan --stack-file`) rather than in
// C++. The format: docs/planner.md, "Software stacks".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/layout.h"

namespace scaletrain::plan {

class StackCatalog {
 public:
  // Adds every *.toml file of `dir` (configs/stacks); a file's `base` may be
  // any stack of the folder or one loaded before.
  Status LoadDir(const std::string& dir);
  // Adds one stack file (a user's own); its `base` must be loaded already.
  Status LoadFile(const std::string& path);

  // The stack `given` names, as runs and users write it: a stack's name or
  // one of its aliases (case, spaces and underscores do not matter); else the
  // name with its words joined ("NeMo Megatron (2022)"), then without version
  // words ("NeMo 2.0", "Megatron-Core 0.8"); else the one stack its words
  // name, a stack derived from another (its `base`) winning over it ("FSDP2 +
  // torch.compile", "HF Accelerate FSDP"). Words that name two unrelated
  // stacks, or none, are an error that lists the stacks.
  Result<Software> Find(const std::string& given) const;

  std::vector<std::string> Names() const;

  // A word of a text that names a stack (the stack, and the word as the text
  // has it): what a hint may say, never what a prediction uses.
  struct Mention {
    std::string stack, word;
  };
  // The stacks the words of `text` name, one mention each, in the order the
  // text names them; hyphenated words also by their parts ("fms-fsdp").
  std::vector<Mention> Mentions(const std::string& text) const;

 private:
  struct Entry {
    Software sw;
    std::string path, description, base;
    std::vector<std::string> aliases;
  };
  struct Pending;  // a parsed file whose base is not resolved yet
  // Parses every file, then reads each over its base, bases first.
  Status LoadFiles(const std::vector<std::string>& paths);
  Status Resolve(const std::string& name, std::map<std::string, Pending>& pending,
                 std::vector<std::string>& chain);
  // Adds the entry's aliases; `where` locates its `aliases` key for an error.
  Status AddAliases(const std::string& name, const Entry& e, const std::string& where);
  // The stack a key (a NameKey) is the name or an alias of; "" for none.
  std::string StackOf(const std::string& key) const;
  // Whether `derived` is `base` or built on it through `base` keys.
  bool DerivesFrom(const std::string& derived, const std::string& base) const;
  // The one stack the words name ("" for none), or an error naming the
  // unrelated stacks they name.
  Result<std::string> StackOfWords(const std::string& given,
                                   const std::vector<std::string>& words) const;
  std::string UnknownStackMessage(const std::string& given) const;

  std::map<std::string, Entry> stacks_;
  std::map<std::string, std::string> aliases_;  // alias key -> stack
};

}  // namespace scaletrain::plan
