#include "core/jsonl.h"

#include <fstream>

namespace scaletrain {

void ForEachStepRecord(const std::string& path,
                       const std::function<void(const std::string& line, const nlohmann::json& record)>& fn) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) fn(line, j);
  }
}

}  // namespace scaletrain
