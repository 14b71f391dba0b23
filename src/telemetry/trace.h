// Chrome Trace Event Format (the JSON Perfetto and chrome://tracing open):
// complete events ("ph": "X") with microsecond start and duration, one
// process per rank, one thread (track) per kind of work, so that compute and
// the communication overlapping it sit on parallel rows.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace scaletrain {

enum class TraceTrack { kCompute = 1, kComm = 2, kOptimizer = 3 };

class ChromeTrace {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit ChromeTrace(int64_t rank);

  void Complete(std::string name, const char* category, TraceTrack track, TimePoint start,
                TimePoint end, nlohmann::json args = nullptr);
  size_t size() const { return events_.size(); }
  // Writes {"traceEvents": [...], "displayTimeUnit": "ms"} under a temporary
  // name, then renames it into place.
  Status Write(const std::string& path) const;

 private:
  int64_t rank_;
  TimePoint origin_;
  std::vector<nlohmann::json> events_;
};

}  // namespace scaletrain
