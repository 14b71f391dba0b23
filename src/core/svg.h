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
  // anchor: "start", "middle" or "end".
  void Text(double x, double y, const std::string& text, double size = 12,
            const std::string& anchor = "start", const std::string& fill = "#222");

  double width() const { return width_; }
  double height() const { return height_; }
  // The document: <svg ...> with a white background, the shapes, </svg>.
  std::string Finish() const;

 private:
  double width_, height_;
  std::string body_;
};

}  // namespace scaletrain
