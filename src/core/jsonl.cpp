#include "core/jsonl.h"

#include <fstream>
#include <utility>

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

std::string PhaseInWords(const std::string& key) {
  static const std::pair<const char*, const char*> kWords[] = {
      {"data_s", "loading data"},
      {"forward_s", "the forward pass"},
      {"backward_s", "the backward pass"},
      {"optimizer_s", "the optimizer step"},
      {"tp_comm_s", "tensor- and context-parallel communication"},
      {"pp_comm_s", "pipeline communication"},
      {"dp_comm_s", "the data-parallel gradient exchange"},
      {"checkpoint_s", "checkpointing"},
      {"wait_s", "waiting at the step's end"},
      {"step_s", "the whole step"},
  };
  for (const auto& [k, words] : kWords) {
    if (key == k) return words;
  }
  return key;
}

}  // namespace scaletrain
