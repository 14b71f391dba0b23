#include "launch/hostfile.h"

#include <fstream>
#include <set>
#include <sstream>

#include "core/strings.h"

namespace scaletrain {

Result<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = Trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::istringstream words(line);
    HostSlots host;
    words >> host.name;
    const std::string where = Fmt("%s line %d", source.c_str(), number);
    for (std::string word; words >> word;) {
      int slots = 0;
      size_t used = 0;
      try {
        if (word.rfind("slots=", 0) == 0) slots = std::stoi(word.substr(6), &used);
      } catch (...) {
      }
      if (word.rfind("slots=", 0) != 0 || used == 0 || used != word.size() - 6 || slots < 1) {
        return InvalidArgument(where + ": '" + word +
                               "' is not slots=K with K >= 1 (write one host per line: NAME slots=K)");
      }
      host.slots = slots;
    }
    if (!seen.insert(host.name).second) {
      return InvalidArgument(where + ": host '" + host.name + "' is listed twice (keep one line per host)");
    }
    hosts.push_back(host);
  }
  if (hosts.empty()) {
    return InvalidArgument(source + " lists no host (write one per line: NAME slots=K)");
  }
  return hosts;
}

Result<std::vector<HostSlots>> LoadHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read the hostfile " + path + " (check --hostfile)");
  std::stringstream text;
  text << in.rdbuf();
  return ParseHostfile(text.str(), path);
}

std::string HostListArg(const std::vector<HostSlots>& hosts) {
  std::string arg;
  for (const HostSlots& h : hosts) arg += (arg.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  return arg;
}

int TotalSlots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const HostSlots& h : hosts) n += h.slots;
  return n;
}

}  // namespace scaletrain
