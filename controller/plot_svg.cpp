#include "controller/plot_svg.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem {

namespace {

// The canvas, in SVG user units (pixels). The legend sits in the right margin so that
// it never covers data.
constexpr double kWidth = 760, kHeight = 420;
constexpr double kLeft = 84, kTop = 52, kRight = kWidth - 196, kBottom = kHeight - 62;
// The frame's distance outside the data area.
constexpr double kFramePad = 6;

const char* const kPalette[] = {"#2563eb", "#dc2626", "#16a34a", "#9333ea", "#b45309", "#0891b2", "#4b5563"};

const char* color_of(size_t series) { return kPalette[series % (sizeof(kPalette) / sizeof(kPalette[0]))]; }

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // An empty or zero-width range becomes [v - pad, v + pad] so that a scale exists.
  void widen_if_flat(double pad) {
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (hi > lo) return;
    lo -= pad;
    hi += pad;
  }
};

// Maps data to pixels in the plot area.
struct Scale {
  Range x, y;
  double px(double v) const { return kLeft + (v - x.lo) / (x.hi - x.lo) * (kRight - kLeft); }
  double py(double v) const { return kBottom - (v - y.lo) / (y.hi - y.lo) * (kBottom - kTop); }
  std::string point(double xv, double yv) const { return fmt::format("{:.2f} {:.2f}", px(xv), py(yv)); }
};

bool finite_at(const std::vector<double>& v, size_t i) { return i < v.size() && std::isfinite(v[i]); }

// One series' line: "M" at the start of each run of finite points, "L" within a run.
std::string series_path(const Scale& s, const std::vector<double>& x, const std::vector<double>& y) {
  std::string d;
  bool pen_down = false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!finite_at(y, i)) {
      pen_down = false;
      continue;
    }
    if (!d.empty()) d += ' ';
    d += pen_down ? "L " : "M ";
    d += s.point(x[i], y[i]);
    pen_down = true;
  }
  return d;
}

// The band: one closed polygon per run of points where y and both edges are finite.
std::string band_path(const Scale& s, const std::vector<double>& x, const PlotSeries& series) {
  std::string d;
  auto usable = [&](size_t i) {
    return finite_at(series.y, i) && finite_at(series.band_low, i) && finite_at(series.band_high, i);
  };
  size_t i = 0;
  while (i < x.size()) {
    if (!usable(i)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < x.size() && usable(end)) ++end;
    if (!d.empty()) d += ' ';
    for (size_t k = i; k < end; ++k) d += (k == i ? "M " : " L ") + s.point(x[k], series.band_high[k]);
    for (size_t k = end; k-- > i;) d += " L " + s.point(x[k], series.band_low[k]);
    d += " Z";
    i = end;
  }
  return d;
}

}  // namespace

std::vector<double> plot_ticks(double lo, double hi, int target, double min_spacing) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(hi > lo) || target < 1) return {};
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normalized = raw / magnitude;
  double spacing = (normalized < 1.5 ? 1 : normalized < 3.5 ? 2 : normalized < 7.5 ? 5 : 10) * magnitude;
  spacing = std::max(spacing, min_spacing);
  std::vector<double> ticks;
  // k * spacing rather than a running sum, so that 0.1 steps do not drift to 0.30000000000000004.
  const double first = std::ceil(lo / spacing - 1e-9);
  for (double k = first; k * spacing <= hi + spacing * 1e-9 && ticks.size() < 64; k += 1) ticks.push_back(k * spacing);
  return ticks;
}

std::string plot_tick_label(double value, double spacing) {
  const double magnitude = std::abs(value);
  if (magnitude >= 1e6 || (magnitude > 0 && magnitude < 1e-4)) return fmt::format("{:g}", value);
  const int decimals = spacing > 0 ? std::max(0, static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9))) : 3;
  std::string text = fmt::format("{:.{}f}", value, std::min(decimals, 8));
  if (text.find_first_not_of("-0.") == std::string::npos) text = decimals > 0 ? fmt::format("{:.{}f}", 0.0, decimals) : "0";
  return text;
}

std::string plot_chart_svg(const PlotChart& chart) {
  for (const PlotSeries& series : chart.series) {
    TANDEM_CHECK(series.y.size() == chart.x.size(), "plot {}: series {} has {} values for {} x values", chart.title,
                 series.name, series.y.size(), chart.x.size());
    TANDEM_CHECK(series.band_low.empty() || (series.band_low.size() == chart.x.size() &&
                                             series.band_high.size() == chart.x.size()),
                 "plot {}: series {} band has the wrong length", chart.title, series.name);
  }
  Scale s;
  for (double x : chart.x) s.x.add(x);
  for (const PlotSeries& series : chart.series) {
    for (size_t i = 0; i < chart.x.size(); ++i) {
      if (!std::isfinite(chart.x[i])) continue;
      s.y.add(series.y[i]);
      if (!series.band_low.empty() && finite_at(series.y, i)) {
        s.y.add(series.band_low[i]);
        s.y.add(series.band_high[i]);
      }
    }
  }
  if (chart.y_include_zero) s.y.add(0.0);
  s.x.widen_if_flat(1.0);
  s.y.widen_if_flat(s.y.lo <= s.y.hi && s.y.lo != 0 ? std::abs(s.y.lo) * 0.1 : 1.0);

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, kHeight);
  out += fmt::format("<title>{}</title>\n", xml_escape(chart.title));
  out += fmt::format("<rect class=\"background\" x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n", kWidth,
                     kHeight);
  out += fmt::format("<text class=\"title\" x=\"{:.1f}\" y=\"26\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
                     (kLeft + kRight) / 2, xml_escape(chart.title));

  // Grid and tick labels.
  const std::vector<double> x_ticks = plot_ticks(s.x.lo, s.x.hi, 8, chart.x_whole_numbers ? 1.0 : 0.0);
  const std::vector<double> y_ticks = plot_ticks(s.y.lo, s.y.hi, 6);
  const double x_spacing = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1.0;
  const double y_spacing = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : (s.y.hi - s.y.lo);
  out += "<g class=\"grid\" stroke=\"#e5e7eb\" stroke-width=\"1\">\n";
  for (double t : x_ticks) {
    out += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\"/>\n", s.px(t), kTop - kFramePad,
                       kBottom + kFramePad);
  }
  for (double t : y_ticks) {
    out += fmt::format("<line x1=\"{1}\" y1=\"{0:.2f}\" x2=\"{2}\" y2=\"{0:.2f}\"/>\n", s.py(t), kLeft - kFramePad,
                       kRight + kFramePad);
  }
  out += "</g>\n<g class=\"x-ticks\" text-anchor=\"middle\" fill=\"#374151\">\n";
  for (double t : x_ticks) {
    out += fmt::format("<text x=\"{:.2f}\" y=\"{}\">{}</text>\n", s.px(t), kBottom + kFramePad + 16,
                       plot_tick_label(t, x_spacing));
  }
  out += "</g>\n<g class=\"y-ticks\" text-anchor=\"end\" fill=\"#374151\">\n";
  for (double t : y_ticks) {
    out += fmt::format("<text x=\"{}\" y=\"{:.2f}\">{}</text>\n", kLeft - kFramePad - 5, s.py(t) + 4,
                       plot_tick_label(t, y_spacing));
  }
  out += "</g>\n";
  out += fmt::format("<text class=\"x-label\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     (kLeft + kRight) / 2, kHeight - 14, xml_escape(chart.x_label));
  out += fmt::format("<text class=\"y-label\" x=\"16\" y=\"{0:.1f}\" text-anchor=\"middle\" "
                     "transform=\"rotate(-90 16 {0:.1f})\">{1}</text>\n",
                     (kTop + kBottom) / 2, xml_escape(chart.y_label));

  // Bands under lines, lines under markers.
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const PlotSeries& series = chart.series[k];
    if (series.band_low.empty()) continue;
    const std::string d = band_path(s, chart.x, series);
    if (d.empty()) continue;
    out += fmt::format("<path class=\"band\" data-series=\"{}\" d=\"{}\" fill=\"{}\" fill-opacity=\"0.18\" stroke=\"none\"/>\n",
                       xml_escape(series.name), d, color_of(k));
  }
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const PlotSeries& series = chart.series[k];
    const std::string d = series_path(s, chart.x, series.y);
    if (!d.empty()) {
      out += fmt::format("<path class=\"series\" data-series=\"{}\" d=\"{}\" fill=\"none\" stroke=\"{}\" "
                         "stroke-width=\"1.6\" stroke-linejoin=\"round\"/>\n",
                         xml_escape(series.name), d, color_of(k));
    }
    for (size_t i = 0; i < chart.x.size(); ++i) {
      if (!finite_at(series.y, i) || (i > 0 && finite_at(series.y, i - 1)) || finite_at(series.y, i + 1)) continue;
      out += fmt::format("<circle class=\"marker\" cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"2.5\" fill=\"{}\"/>\n",
                         s.px(chart.x[i]), s.py(series.y[i]), color_of(k));
    }
  }
  out += fmt::format("<rect class=\"plot-area\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                     "stroke=\"none\"/>\n",
                     kLeft, kTop, kRight - kLeft, kBottom - kTop);
  out += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                     "stroke=\"#6b7280\"/>\n",
                     kLeft - kFramePad, kTop - kFramePad, kRight - kLeft + 2 * kFramePad, kBottom - kTop + 2 * kFramePad);

  // Legend: one row per series, and one per band.
  out += "<g class=\"legend\">\n";
  double row_y = kTop + 8;
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const PlotSeries& series = chart.series[k];
    out += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>\n",
                       kRight + 22, row_y, kRight + 46, color_of(k));
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{}</text>\n", kRight + 52, row_y + 4, xml_escape(series.name));
    row_y += 20;
    if (!series.band_low.empty()) {
      out += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"24\" height=\"10\" fill=\"{}\" fill-opacity=\"0.18\"/>\n",
                         kRight + 22, row_y - 5, color_of(k));
      out += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{}</text>\n", kRight + 52, row_y + 4,
                         xml_escape(series.band_name.empty() ? series.name + " band" : series.band_name));
      row_y += 20;
    }
  }
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace tandem
