// An append-only JSON-lines file of step records in the run directory, the
// one writer behind metrics.jsonl (metrics.h) and ranks.jsonl (rank_records.h).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "core/status.h"

namespace scaletrain {

class JsonlLog {
 public:
  // With `resume_step`, continues a resumed run's file, dropping the records
  // of later steps (the run does them again) and lines that are not records;
  // otherwise starts it afresh.
  static Result<JsonlLog> Open(const std::string& path, std::optional<int64_t> resume_step);
  // `lines`: one or more lines, each ending in a newline; flushed.
  Status Append(const std::string& lines);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace scaletrain
