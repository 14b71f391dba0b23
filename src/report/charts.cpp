#include "report/charts.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/strings.h"
#include "core/svg.h"

namespace scaletrain::report {

namespace {

constexpr double kWidth = 720, kHeight = 300;
constexpr double kLeft = 70, kRight = 170, kTop = 46, kBottom = 46;

// The plot area of a chart: a frame, a title and the axis labels.
struct Frame {
  double x0 = kLeft, y0 = kHeight - kBottom;  // bottom-left corner
  double w = kWidth - kLeft - kRight, h = kHeight - kTop - kBottom;
};

Frame DrawFrame(Svg& svg, const std::string& title, const std::string& x_label, const std::string& y_label) {
  Frame f;
  svg.Text(kLeft, 18, title, 14);
  svg.Rect(f.x0, f.y0 - f.h, f.w, f.h, "none", "#999");
  svg.Text(f.x0 + f.w / 2, kHeight - 8, x_label, 12, "middle", "#222", "axis-x");
  svg.Text(14, f.y0 - f.h - 8, y_label, 11, "start", "#555", "axis-y");
  return f;
}

void Legend(Svg& svg, const Frame& f, size_t i, const std::string& name, const std::string& color) {
  const double x = f.x0 + f.w + 12, y = f.y0 - f.h + 8 + 18 * static_cast<double>(i);
  svg.Rect(x, y - 9, 12, 10, color);
  svg.Text(x + 17, y, name, 11);
}

// The y range of values, with a little room; a flat range is widened.
std::pair<double, double> Range(double lo, double hi, bool from_zero) {
  if (from_zero) lo = std::min(0.0, lo);
  if (!(hi > lo)) {
    const double d = std::max(std::abs(hi) * 0.1, 1e-12);
    return {lo - d, hi + d};
  }
  return {lo, hi + (hi - lo) * 0.05};
}

// A chart without data says so, where its plot would be.
std::string NoDataYet(Svg& svg, const Frame& f) {
  svg.Text(f.x0 + f.w / 2, f.y0 - f.h / 2, "no data yet", 13, "middle", "#777");
  return svg.Finish();
}

// Horizontal grid lines at the y axis' ticks, labelled on the left; y maps a
// value to its height in the frame.
template <typename ToY>
void YGrid(Svg& svg, const Frame& f, double lo, double hi, ToY y) {
  for (double t : NiceTicks(lo, hi, 5)) {
    svg.Line(f.x0, y(t), f.x0 + f.w, y(t), "#eee");
    svg.Text(f.x0 - 6, y(t) + 4, TickLabel(t), 11, "end", "#222", "tick-y");
  }
}

// The spans of a line chart's axes over its finite points: x as far as they
// reach (a single x widened by 1 each way), y with Range's room. xlo stays
// infinite when no point is finite.
struct Axes {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
};

Axes AxesOf(const std::vector<Series>& series) {
  Axes a;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      a.xlo = std::min(a.xlo, x), a.xhi = std::max(a.xhi, x);
      a.ylo = std::min(a.ylo, y), a.yhi = std::max(a.yhi, y);
    }
  }
  if (!std::isfinite(a.xlo)) return a;
  if (!(a.xhi > a.xlo)) a.xlo -= 1, a.xhi += 1;
  std::tie(a.ylo, a.yhi) = Range(a.ylo, a.yhi, false);
  return a;
}

// One series as a line (markers where asked, or for a lone point) and its
// legend entry, the `shown`-th; a series without a finite point is skipped.
template <typename ToX, typename ToY>
void DrawSeries(Svg& svg, const Frame& f, const Series& s, ToX to_x, ToY to_y, size_t* shown) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& [x, y] : s.points) {
    if (std::isfinite(x) && std::isfinite(y)) pts.emplace_back(to_x(x), to_y(y));
  }
  if (pts.empty()) return;
  svg.Polyline(pts, s.color, 1.8, s.dashed ? "6,4" : "");
  if (s.markers || pts.size() == 1) {
    for (const auto& [x, y] : pts) svg.Circle(x, y, 3, s.color);
  }
  Legend(svg, f, (*shown)++, s.name, s.color);
}

}  // namespace

std::string LineChart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series) {
  Svg svg(kWidth, kHeight);
  const Frame f = DrawFrame(svg, title, x_label, y_label);
  const Axes a = AxesOf(series);
  if (!std::isfinite(a.xlo)) return NoDataYet(svg, f);
  auto X = [&](double x) { return f.x0 + (x - a.xlo) / (a.xhi - a.xlo) * f.w; };
  auto Y = [&](double y) { return f.y0 - (y - a.ylo) / (a.yhi - a.ylo) * f.h; };
  YGrid(svg, f, a.ylo, a.yhi, Y);
  for (double t : NiceTicks(a.xlo, a.xhi, 8))
    svg.Text(X(t), f.y0 + 16, TickLabel(t), 11, "middle", "#222", "tick-x");
  size_t shown = 0;
  for (const Series& s : series) DrawSeries(svg, f, s, X, Y, &shown);
  return svg.Finish();
}

std::string StackedBars(const std::string& title, const std::string& x_label, const std::string& y_label,
                        const std::vector<std::string>& bar_labels, const std::vector<Stack>& stacks) {
  Svg svg(kWidth, kHeight);
  const Frame f = DrawFrame(svg, title, x_label, y_label);
  const size_t n = bar_labels.size();
  if (n == 0 || stacks.empty()) return NoDataYet(svg, f);
  double top = 0;
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (const Stack& s : stacks) sum += i < s.values.size() ? std::max(0.0, s.values[i]) : 0.0;
    top = std::max(top, sum);
  }
  top = Range(0, top, true).second;
  auto Y = [&](double v) { return f.y0 - v / top * f.h; };
  YGrid(svg, f, 0, top, Y);
  const double slot = f.w / static_cast<double>(n), gap = n > 40 ? 0 : slot * 0.2;
  const size_t label_every = std::max<size_t>(1, n / 10);
  for (size_t i = 0; i < n; ++i) {
    double base = 0;
    const double x = f.x0 + slot * static_cast<double>(i) + gap / 2;
    for (const Stack& s : stacks) {
      const double v = i < s.values.size() ? std::max(0.0, s.values[i]) : 0.0;
      svg.Rect(x, Y(base + v), slot - gap, Y(base) - Y(base + v), s.color, "none",
               bar_labels[i] + ": " + s.name + " " + Fmt("%.4g", v));
      base += v;
    }
    if (i % label_every == 0)
      svg.Text(x + (slot - gap) / 2, f.y0 + 16, bar_labels[i], 11, "middle", "#222", "tick-x");
  }
  for (size_t k = 0; k < stacks.size(); ++k) Legend(svg, f, k, stacks[k].name, stacks[k].color);
  return svg.Finish();
}

namespace {

// The heat map's fixed scale: a cell's ratio to its reference, in bins that
// mean the same on every run (a noisy window on a clean run stays white,
// under the straggler detector's default 20%; a straggler is dark whatever
// the other ranks do).
constexpr double kHeatBounds[] = {1.2, 1.5, 2.0, 3.0};
constexpr const char* kHeatColors[] = {"#ffffff", "#fdd49e", "#fc8d59", "#d7301f", "#7f0000"};
constexpr const char* kHeatLabels[] = {"< 1.2x", "1.2-1.5x", "1.5-2x", "2-3x", ">= 3x"};

int HeatBin(double ratio) {
  int bin = 0;
  for (double b : kHeatBounds) bin += ratio >= b ? 1 : 0;
  return bin;
}

// The bins' key beside the plot, and what they are relative to (its value
// where every row has the same reference).
void HeatLegend(Svg& svg, const Frame& f, const std::vector<double>& reference,
                const std::string& name, const std::string& unit) {
  const double sx = f.x0 + f.w + 12;
  double y = f.y0 - f.h + 10;
  const bool one =
      std::all_of(reference.begin(), reference.end(), [&](double r) { return r == reference[0]; });
  std::vector<std::string> key = WrapWords("times " + name, 26);
  if (one) key.push_back(Fmt("(%.3g %s)", reference[0], unit.c_str()));
  for (const std::string& line : key) svg.Text(sx, y, line, 11), y += 14;
  for (int i = 0; i < 5; ++i, y += 16) {
    svg.Rect(sx, y - 4, 14, 12, kHeatColors[i], "#999");
    svg.Text(sx + 20, y + 6, kHeatLabels[i], 11);
  }
}

}  // namespace

std::string Heatmap(const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<std::string>& row_labels,
                    const std::vector<std::string>& col_labels,
                    const std::vector<std::vector<double>>& values, const std::string& unit,
                    const std::vector<double>& row_reference, const std::string& reference_name) {
  Svg svg(kWidth, kHeight);
  const Frame f = DrawFrame(svg, title, x_label, y_label);
  if (row_labels.empty() || col_labels.empty() || row_reference.size() != row_labels.size())
    return NoDataYet(svg, f);
  const double cw = f.w / static_cast<double>(col_labels.size());
  const double ch = f.h / static_cast<double>(row_labels.size());
  const bool values_fit = cw >= 34 && ch >= 14;
  const size_t col_every = std::max<size_t>(1, col_labels.size() / 10);
  const size_t row_every = std::max<size_t>(1, row_labels.size() / 16);
  for (size_t r = 0; r < row_labels.size(); ++r) {
    const double y = f.y0 - f.h + ch * static_cast<double>(r), ref = row_reference[r];
    for (size_t c = 0; c < col_labels.size() && c < values[r].size(); ++c) {
      const double v = values[r][c], x = f.x0 + cw * static_cast<double>(c);
      const int bin = ref > 0 ? HeatBin(v / ref) : 0;
      svg.Rect(x, y, cw, ch, kHeatColors[bin], "#eee",
               row_labels[r] + ", " + col_labels[c] + ": " +
                   Fmt("%.4g %s, %.2fx %s", v, unit.c_str(), ref > 0 ? v / ref : 0.0,
                       reference_name.c_str()));
      if (values_fit) {
        svg.Text(x + cw / 2, y + ch / 2 + 4, Fmt("%.3g", v), 10, "middle",
                 bin >= 3 ? "#fff" : "#222");
      }
    }
    if (r % row_every == 0)
      svg.Text(f.x0 - 6, y + ch / 2 + 4, row_labels[r], 11, "end", "#222", "tick-y");
  }
  for (size_t c = 0; c < col_labels.size(); c += col_every) {
    svg.Text(f.x0 + cw * (static_cast<double>(c) + 0.5), f.y0 + 16, col_labels[c], 11, "middle",
             "#222", "tick-x");
  }
  HeatLegend(svg, f, row_reference, reference_name, unit);
  return svg.Finish();
}

}  // namespace scaletrain::report
