// Small statistics shared by the telemetry, the report and the benchmarks.
#pragma once

#include <vector>

namespace scaletrain {

// The median (the mean of the two middle values for an even count); 0 for none.
double Median(std::vector<double> v);
// The q-quantile (0 <= q <= 1), linear between the two nearest values (so
// Quantile(v, 0.5) is the median); 0 for none.
double Quantile(std::vector<double> v, double q);

}  // namespace scaletrain
