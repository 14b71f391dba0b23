// Small statistics shared by the telemetry, the report and the benchmarks.
#pragma once

#include <vector>

namespace scaletrain {

// The median (the mean of the two middle values for an even count); 0 for none.
double Median(std::vector<double> v);

}  // namespace scaletrain
