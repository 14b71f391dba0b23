#include "core/svg.h"

#include <algorithm>
#include <cmath>

#include "core/strings.h"

namespace scaletrain {

std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::vector<double> NiceTicks(double lo, double hi, int count) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, count);
  const double exp10 = std::floor(std::log10(raw));
  double m = 1;
  for (double c : {1.0, 2.0, 5.0, 10.0}) {
    m = c;
    if (c * std::pow(10.0, exp10) >= raw) break;
  }
  // Tick k is k x m x 10^exp10, computed as an integer over a power of ten
  // so that 0.6 prints as 0.6, not 0.6000000000000001.
  const double scale = std::pow(10.0, std::abs(exp10));
  auto value = [&](double k) { return exp10 < 0 ? k * m / scale : k * m * scale; };
  const double step = value(1);
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); value(k) <= hi + step * 1e-9; k += 1) ticks.push_back(value(k) + 0.0);
  return ticks;
}

std::string TickLabel(double v) {
  const double a = std::abs(v);
  if (a >= 1e9) return Fmt("%gG", v / 1e9);
  if (a >= 1e6) return Fmt("%gM", v / 1e6);
  if (a >= 1e4) return Fmt("%gk", v / 1e3);
  return Fmt("%g", v);
}

Svg::Svg(double width, double height) : width_(width), height_(height) {}

void Svg::Rect(double x, double y, double w, double h, const std::string& fill,
               const std::string& stroke, const std::string& title) {
  body_ += Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"%s\"", x, y,
               std::max(0.0, w), std::max(0.0, h), fill.c_str(), stroke.c_str());
  body_ += title.empty() ? "/>\n" : "><title>" + XmlEscape(title) + "</title></rect>\n";
}

void Svg::Line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
               const std::string& dash) {
  body_ += Fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%g\"", x1, y1,
               x2, y2, stroke.c_str(), width);
  if (!dash.empty()) body_ += " stroke-dasharray=\"" + dash + "\"";
  body_ += "/>\n";
}

void Svg::Polyline(const std::vector<std::pair<double, double>>& points, const std::string& stroke,
                   double width, const std::string& dash) {
  body_ += "<polyline fill=\"none\" stroke=\"" + stroke + "\" stroke-width=\"" + Fmt("%g", width) + "\"";
  if (!dash.empty()) body_ += " stroke-dasharray=\"" + dash + "\"";
  body_ += " points=\"";
  for (const auto& [x, y] : points) body_ += Fmt("%.1f,%.1f ", x, y);
  body_ += "\"/>\n";
}

void Svg::Circle(double cx, double cy, double r, const std::string& fill) {
  body_ += Fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" fill=\"%s\"/>\n", cx, cy, r, fill.c_str());
}

void Svg::Text(double x, double y, const std::string& text, double size, const std::string& anchor,
               const std::string& fill, const std::string& css_class) {
  body_ += Fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" text-anchor=\"%s\" fill=\"%s\"", x, y,
               size, anchor.c_str(), fill.c_str());
  body_ += css_class.empty() ? ">" : " class=\"" + css_class + "\">";
  body_ += XmlEscape(text) + "</text>\n";
}

std::string Svg::Finish() const {
  return Fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
             width_, height_, width_, height_) +
         body_ + "</svg>\n";
}

}  // namespace scaletrain
