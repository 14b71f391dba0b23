// The shipped software stacks (configs/stacks/*.toml), for tests that run
// the cost model on one of them by name.
#pragma once

#include <cstdio>
#include <string>

#include "plan/stacks.h"

namespace scaletrain::plan {

// The repository's stack catalog, loaded once.
inline const StackCatalog& ShippedStacks() {
  static const StackCatalog catalog = [] {
    StackCatalog c;
    const Status st = c.LoadDir(std::string(ST_SOURCE_DIR) + "/configs/stacks");
    if (!st.ok()) std::fprintf(stderr, "configs/stacks: %s\n", st.message().c_str());
    return c;
  }();
  return catalog;
}

// The stack `name` gives (StackCatalog::Find).
inline Result<Software> ShippedStack(const std::string& name) { return ShippedStacks().Find(name); }

}  // namespace scaletrain::plan
