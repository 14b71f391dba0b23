// Where a job stuck, from the ranks' flight records (comm/flight_recorder.h):
// the collective the watchdog fired in, and which members of its group never
// entered it. The anchor is PyTorch's NCCL flight recorder analysis.
#pragma once

#include <string>
#include <vector>

#include "report/run_data.h"

namespace scaletrain::report {

struct HangDiagnosis {
  bool hang = false;        // a rank's watchdog fired or a rank died of a fatal signal
  std::string summary;      // one line: the collective and the rank(s) that held it up
  std::vector<std::string> details;  // one line per member of the stuck group
  std::vector<int64_t> culprits;     // ranks that never entered it (or left no record)
};

// Empty summary when the run has no flight records.
HangDiagnosis DiagnoseHang(const std::vector<FlightFile>& files);

}  // namespace scaletrain::report
