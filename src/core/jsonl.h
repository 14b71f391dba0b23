// The run directory's JSON-lines files of step records (metrics.jsonl,
// ranks.jsonl): read by the trainer when it resumes and by the report.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace scaletrain {

// Calls fn(line, record) for each line of the file at `path` that is a JSON
// object with an integer "step", in file order. Other lines (one cut short
// by a crash, or by a writer still at work) are skipped; a missing file has
// none.
void ForEachStepRecord(const std::string& path,
                       const std::function<void(const std::string& line, const nlohmann::json& record)>& fn);

// A phase key of these files in words, for people: "forward_s" -> "the
// forward pass", "dp_comm_s" -> "the data-parallel gradient exchange"; an
// unknown key comes back as it is.
std::string PhaseInWords(const std::string& key);

}  // namespace scaletrain
