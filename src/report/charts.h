// The charts of `scaletrain report`, each a complete SVG document drawn with
// core/svg.h: lines against a step axis, stacked bars, a heat map.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace scaletrain::report {

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
  bool dashed = false;
  bool markers = false;  // a dot at each point (for sparse series)
};

// Lines with axes, ticks and a legend. Empty series are left out; with no
// points at all the chart says so.
std::string LineChart(const std::string& title, const std::string& x_label, const std::string& y_label,
                      const std::vector<Series>& series);

struct Stack {
  std::string name, color;
  std::vector<double> values;  // one per bar
};

// One bar per label, the stacks piled up in order, bottom first; a legend.
// Many bars are drawn thin with every k-th label.
std::string StackedBars(const std::string& title, const std::string& x_label, const std::string& y_label,
                        const std::vector<std::string>& bar_labels, const std::vector<Stack>& stacks);

// values[row][col]: a cell per row (e.g. a rank) and column (e.g. a window),
// coloured by its ratio to its row's reference (e.g. a healthy window of its
// pipeline stage) in fixed bins: below 1.2x white, then 1.2, 1.5, 2 and 3x,
// so that a colour means the same slowness on every run; the value is
// printed in each cell where it fits, and is each cell's tooltip.
// `reference_name` says what the reference is, for the key.
std::string Heatmap(const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<std::string>& row_labels,
                    const std::vector<std::string>& col_labels,
                    const std::vector<std::vector<double>>& values, const std::string& unit,
                    const std::vector<double>& row_reference, const std::string& reference_name);

}  // namespace scaletrain::report
