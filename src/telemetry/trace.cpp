#include "telemetry/trace.h"

#include <cstdio>
#include <fstream>

namespace scaletrain {

ChromeTrace::ChromeTrace(int64_t rank) : rank_(rank), origin_(std::chrono::steady_clock::now()) {
  for (auto [track, name] : {std::pair{TraceTrack::kCompute, "compute"},
                             std::pair{TraceTrack::kComm, "communication"},
                             std::pair{TraceTrack::kOptimizer, "optimizer"}}) {
    events_.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_},
                       {"tid", static_cast<int>(track)}, {"args", {{"name", name}}}});
  }
  events_.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank_}, {"tid", 0},
                     {"args", {{"name", "rank " + std::to_string(rank_)}}}});
}

void ChromeTrace::Complete(std::string name, const char* category, TraceTrack track, TimePoint start,
                           TimePoint end, nlohmann::json args) {
  using us = std::chrono::duration<double, std::micro>;
  nlohmann::json e = {{"ph", "X"},
                      {"name", std::move(name)},
                      {"cat", category},
                      {"pid", rank_},
                      {"tid", static_cast<int>(track)},
                      {"ts", us(start - origin_).count()},
                      {"dur", us(end - start).count()}};
  if (!args.is_null()) e["args"] = std::move(args);
  events_.push_back(std::move(e));
}

Status ChromeTrace::Write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    for (size_t i = 0; i < events_.size(); ++i) out << (i ? ",\n" : "") << events_[i].dump();
    out << "\n]}\n";
    if (!out) return IoError("cannot write trace file '" + tmp + "' (directory missing or disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("cannot rename '" + tmp + "' to '" + path + "'");
  }
  return Status::Ok();
}

}  // namespace scaletrain
