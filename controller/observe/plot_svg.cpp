#include "controller/observe/plot_svg.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem {

namespace {

// The canvas, in SVG user units (pixels): at least kMinWidth x kMinHeight, more when the
// legend or the title needs it. The plot area is fixed; the legend sits right of it so
// that it never covers data.
constexpr double kMinWidth = 760, kMinHeight = 420;
constexpr double kLeft = 84, kTop = 52, kRight = 564, kBottom = 358;
// The frame's distance outside the data area.
constexpr double kFramePad = 6;
// Space kept between any text and the canvas edge.
constexpr double kEdgeMargin = 12;
constexpr double kFontSize = 12, kTitleFontSize = 16;
// How far below its baseline a line of 12-px text reaches (DejaVu Sans descends 0.24 em).
constexpr double kDescent = 4;

// Legend: a 24-px swatch, then the text; rows 20 px apart, the lines of a wrapped entry
// 15 px apart. An entry wider than kLegendTextMax wraps: a 40-character name fits on one
// line, and a longer one does not stretch the chart past about 1100 px.
constexpr double kLegendSwatchX = kRight + 22, kLegendTextX = kRight + 52;
constexpr double kLegendTextMax = 300;
constexpr double kLegendRowStep = 20, kLegendLineStep = 15;

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

// Per mille of an em: for each printable ASCII character (from ' '), the larger of its
// advance in DejaVu Sans and in Arial.
constexpr int kSansAdvance[95] = {
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337,  //  !"#$%&'()*+,-./
    636, 636, 636, 636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 556,  // 0-9 :;<=>?
    1015, 684, 686, 722, 770, 667, 611, 778, 752, 295, 500, 667, 557, 863, 748, 787, // @A-O
    667, 787, 722, 667, 611, 732, 684, 989, 685, 667, 685, 390, 337, 390, 838, 556,  // P-Z [\]^_
    500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,  // `a-o
    635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838,       // p-z {|}~
};

// The text split into its UTF-8 characters (a stray continuation byte stays with the one before).
std::vector<std::string> utf8_characters(const std::string& text) {
  std::vector<std::string> out;
  for (char c : text) {
    const bool continuation = (static_cast<unsigned char>(c) & 0xC0) == 0x80;
    if (continuation && !out.empty()) {
      out.back() += c;
    } else {
      out.emplace_back(1, c);
    }
  }
  return out;
}

// `text` as lines no wider than `max_width`: broken after a '/', '_', '-' or space where a
// piece fits, inside a piece (between characters) where none does. Never drops a character.
std::vector<std::string> wrap_text(const std::string& text, double font_size, double max_width) {
  std::vector<std::string> pieces(1);
  for (char c : text) {
    pieces.back() += c;
    if (c == '/' || c == '_' || c == '-' || c == ' ') pieces.emplace_back();
  }
  std::vector<std::string> lines;
  std::string line;
  auto fits = [&](const std::string& candidate) { return plot_text_width(candidate, font_size) <= max_width; };
  for (const std::string& piece : pieces) {
    if (fits(line + piece)) {
      line += piece;
      continue;
    }
    if (!line.empty()) lines.push_back(std::move(line));
    line.clear();
    for (const std::string& character : utf8_characters(piece)) {
      if (!line.empty() && !fits(line + character)) lines.push_back(std::move(line)), line.clear();
      line += character;
    }
  }
  if (!line.empty() || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

// One legend entry: a series' line or its band, and its text as drawn.
struct LegendEntry {
  size_t series;
  bool band;
  std::vector<std::string> lines;
  double y = 0;  // the swatch's centre; the first line's baseline is 4 px below it
};

struct Legend {
  std::vector<LegendEntry> entries;
  double text_width = 0;  // the widest line, by plot_text_width
  double bottom = 0;      // the lowest pixel of the last line
};

Legend layout_legend(const PlotChart& chart) {
  Legend legend;
  double row_y = kTop + 8;
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const PlotSeries& series = chart.series[k];
    for (bool band : {false, true}) {
      if (band && series.band_low.empty()) continue;
      const std::string text = !band                      ? series.name
                               : !series.band_name.empty() ? series.band_name
                                                           : series.name + " band";
      LegendEntry entry{k, band, wrap_text(text, kFontSize, kLegendTextMax), row_y};
      for (const std::string& line : entry.lines) {
        legend.text_width = std::max(legend.text_width, plot_text_width(line, kFontSize));
      }
      const double last_line_y = row_y + kLegendLineStep * static_cast<double>(entry.lines.size() - 1);
      legend.bottom = last_line_y + 4 + kDescent;
      row_y = last_line_y + kLegendRowStep;
      legend.entries.push_back(std::move(entry));
    }
  }
  return legend;
}

}  // namespace

double plot_text_width(const std::string& text, double font_size) {
  double per_mille = 0;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 32 && byte < 127) {
      per_mille += kSansAdvance[byte - 32];
    } else if ((byte & 0xC0) != 0x80) {  // a control character or the first byte of a non-ASCII one
      per_mille += 1000;
    }
  }
  return per_mille / 1000 * font_size;
}

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

  // The legend's rows, then the canvas that holds them and the title.
  const Legend legend = layout_legend(chart);
  const double title_width = plot_text_width(chart.title, kTitleFontSize);
  // Centred over the plot area where it fits there, else from the left margin.
  const bool title_centred = title_width / 2 <= (kLeft + kRight) / 2 - kEdgeMargin;
  const double width = std::max({kMinWidth, kLegendTextX + legend.text_width + kEdgeMargin,
                                 title_centred ? 0.0 : kEdgeMargin + title_width + kEdgeMargin});
  const double height = std::max(kMinHeight, legend.bottom + kEdgeMargin);

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"{2}\">\n",
      std::ceil(width), std::ceil(height), kFontSize);
  out += fmt::format("<title>{}</title>\n", xml_escape(chart.title));
  out += fmt::format("<rect class=\"background\" x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n",
                     std::ceil(width), std::ceil(height));
  if (title_centred) {
    out += fmt::format("<text class=\"title\" x=\"{:.1f}\" y=\"26\" text-anchor=\"middle\" font-size=\"{}\">{}</text>\n",
                       (kLeft + kRight) / 2, kTitleFontSize, xml_escape(chart.title));
  } else {
    out += fmt::format("<text class=\"title\" x=\"{}\" y=\"26\" font-size=\"{}\">{}</text>\n", kEdgeMargin,
                       kTitleFontSize, xml_escape(chart.title));
  }

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
                     (kLeft + kRight) / 2, kBottom + 48, xml_escape(chart.x_label));
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

  // Legend: one row per series, and one per band; a wrapped entry's lines are <tspan>s.
  out += "<g class=\"legend\">\n";
  for (const LegendEntry& entry : legend.entries) {
    if (entry.band) {
      out += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"24\" height=\"10\" fill=\"{}\" fill-opacity=\"0.18\"/>\n",
                         kLegendSwatchX, entry.y - 5, color_of(entry.series));
    } else {
      out += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>\n",
                         kLegendSwatchX, entry.y, kLegendSwatchX + 24, color_of(entry.series));
    }
    if (entry.lines.size() == 1) {
      out += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{}</text>\n", kLegendTextX, entry.y + 4, xml_escape(entry.lines[0]));
      continue;
    }
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\">", kLegendTextX, entry.y + 4);
    for (size_t i = 0; i < entry.lines.size(); ++i) {
      out += fmt::format("<tspan x=\"{}\" y=\"{:.1f}\">{}</tspan>", kLegendTextX,
                         entry.y + 4 + kLegendLineStep * static_cast<double>(i), xml_escape(entry.lines[i]));
    }
    out += "</text>\n";
  }
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace tandem
