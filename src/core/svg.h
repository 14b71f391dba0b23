// A small SVG writer: the one drawing code behind the planner's sweep plot
// (plan/report.cpp) and `scaletrain report`'s charts (report/charts.h).
// Shapes are appended in drawing order; Finish() closes the document. Text
// is escaped for XML. Coordinates are pixels, y growing downwards.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace scaletrain {

// Text with &, <, >, " and ' replaced by their XML entities.
std::string XmlEscape(const std::string& text);

// Round tick values covering [lo, hi], about `count` of them (1, 2 or 5
// times a power of ten apart), ascending.
std::vector<double> NiceTicks(double lo, double hi, int count);

// A tick label: short, without trailing zeros ("0.25", "1.5k", "3M").
std::string TickLabel(double v);

// One colour per meaning in every plot, the report's and the planner's: a
// part of the step is the same colour wherever it is drawn.
namespace palette {
inline constexpr const char* kCompute = "#1f77b4";    // blue
inline constexpr const char* kTpComm = "#ff7f0e";     // orange (with context-parallel traffic)
inline constexpr const char* kPpComm = "#9467bd";     // purple (the report: with the bubble)
inline constexpr const char* kBubble = "#c5b0d5";     // light purple
inline constexpr const char* kDpComm = "#d62728";     // red
inline constexpr const char* kWaiting = "#e7ba52";    // amber: waiting for a slower rank
inline constexpr const char* kOptimizer = "#2ca02c";  // green
inline constexpr const char* kOther = "#8c8c8c";      // grey: data loading and the rest
// Lines and memory: colours no part of the step uses.
inline constexpr const char* kLoss = "#17324d";     // near-black blue
inline constexpr const char* kValLoss = "#e6550d";  // dark orange, with markers
inline constexpr const char* kThroughput = "#17324d";
inline constexpr const char* kMfu = "#6b6ecf";
inline constexpr const char* kIdeal = "#999999";  // dashed: perfect scaling
inline constexpr const char* kBad = "#d62728";    // a point where scaling broke down
inline constexpr const char* kParams = "#17becf";
inline constexpr const char* kGrads = "#bcbd22";
inline constexpr const char* kOptimizerState = "#2ca02c";  // the optimizer's
inline constexpr const char* kActivations = "#e377c2";
}  // namespace palette

class Svg {
 public:
  Svg(double width, double height);

  void Rect(double x, double y, double w, double h, const std::string& fill,
            const std::string& stroke = "none", const std::string& title = "");
  void Line(double x1, double y1, double x2, double y2, const std::string& stroke,
            double width = 1, const std::string& dash = "");
  void Polyline(const std::vector<std::pair<double, double>>& points, const std::string& stroke,
                double width = 2, const std::string& dash = "");
  void Circle(double cx, double cy, double r, const std::string& fill);
  // anchor: "start", "middle" or "end". css_class marks what the text is
  // (axis-x, axis-y: an axis' title; tick-x, tick-y: a tick's value), for
  // the page's style and its tests.
  void Text(double x, double y, const std::string& text, double size = 12,
            const std::string& anchor = "start", const std::string& fill = "#222",
            const std::string& css_class = "");

  double width() const { return width_; }
  double height() const { return height_; }
  // The document: <svg ...> with a white background, the shapes, </svg>.
  std::string Finish() const;

 private:
  double width_, height_;
  std::string body_;
};

}  // namespace scaletrain
