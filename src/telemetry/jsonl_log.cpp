#include "telemetry/jsonl_log.h"

#include "core/file_io.h"
#include "core/jsonl.h"

namespace scaletrain {

Result<JsonlLog> JsonlLog::Open(const std::string& path, std::optional<int64_t> resume_step) {
  JsonlLog log;
  log.path_ = path;
  if (resume_step) {
    std::string kept;
    ForEachStepRecord(path, [&](const std::string& line, const nlohmann::json& j) {
      if (j["step"].get<int64_t>() <= *resume_step) kept += line + "\n";
    });
    ST_RETURN_IF_ERROR(WriteFileAtomically(path, kept));
  }
  log.out_.open(path, resume_step ? std::ios::app : std::ios::trunc);
  if (!log.out_) return IoError("cannot write " + path + " (disk full? permissions?)");
  return log;
}

Status JsonlLog::Append(const std::string& lines) {
  out_ << lines << std::flush;
  if (!out_) return IoError("cannot append to " + path_ + " (disk full?)");
  return Status::Ok();
}

}  // namespace scaletrain
