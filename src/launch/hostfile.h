// The hosts a job may run on, in mpirun's hostfile format ("NAME slots=K"
// per line, '#' comments), the order the launcher fills them in.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace scaletrain {

struct HostSlots {
  std::string name;
  int slots = 1;  // ranks on this host
};

// Errors name the source, the line and what to write instead.
Result<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& source);
Result<std::vector<HostSlots>> LoadHostfile(const std::string& path);

// "st-h0:2,st-h1:2": mpirun's --host form.
std::string HostListArg(const std::vector<HostSlots>& hosts);
int TotalSlots(const std::vector<HostSlots>& hosts);

}  // namespace scaletrain
