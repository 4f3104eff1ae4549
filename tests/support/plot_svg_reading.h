// Test-only: reading the SVG charts `tandem plot` writes back (elements, paths, the plot
// area, legend lines) and running it, for tests/controller/test_plot*.cpp.
#pragma once

#include "core/files.h"
#include "core/process.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <utility>

namespace tandem::testing {

namespace fs = std::filesystem;

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct PlotRun {
  ExitStatus status;
  std::string output;
};

inline PlotRun run_plot(const TempDir& dir, const std::vector<std::string>& args) {
  const std::string out = dir.path() + "/plot-output.txt";
  fs::remove(out);
  std::vector<std::string> argv = {"plot"};
  argv.insert(argv.end(), args.begin(), args.end());
  PlotRun run{run_tandem(argv, out), ""};
  run.output = read_text(out);
  return run;
}

// Every element is closed in the order it was opened (or closes itself), every attribute
// value is quoted: enough to know an XML parser and a browser will read the file.
inline void check_well_formed(const std::string& svg, const std::string& what) {
  INFO(what);
  std::vector<std::string> open;
  size_t at = 0;
  while ((at = svg.find('<', at)) != std::string::npos) {
    const size_t end = svg.find('>', at);
    REQUIRE_MESSAGE(end != std::string::npos, "unterminated tag at ", at);
    const std::string tag = svg.substr(at + 1, end - at - 1);
    at = end + 1;
    REQUIRE_MESSAGE(std::count(tag.begin(), tag.end(), '"') % 2 == 0, "unbalanced quotes in <", tag, ">");
    if (tag.empty() || tag[0] == '!' || tag[0] == '?') continue;
    if (tag[0] == '/') {
      REQUIRE_MESSAGE(!open.empty(), "</", tag.substr(1), "> closes nothing");
      CHECK_MESSAGE(open.back() == tag.substr(1), "<", open.back(), "> closed by </", tag.substr(1), ">");
      open.pop_back();
      continue;
    }
    if (tag.back() == '/') continue;
    open.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
  }
  CHECK_MESSAGE(open.empty(), open.size(), " elements never closed");
  CHECK(svg.rfind("<svg", 0) == 0);
  for (const char* bad : {"\"nan", " nan", "-nan", "\"inf", " inf", "-inf"}) {
    CHECK_MESSAGE(svg.find(bad) == std::string::npos, "a coordinate reads ", bad);
  }
}

// The opening tags of <tag ...> elements whose text contains `marker`.
inline std::vector<std::string> elements(const std::string& svg, const std::string& tag, const std::string& marker) {
  std::vector<std::string> found;
  size_t at = 0;
  while ((at = svg.find("<" + tag + " ", at)) != std::string::npos) {
    const size_t end = svg.find('>', at);
    const std::string element = svg.substr(at, end - at + 1);
    if (element.find(marker) != std::string::npos) found.push_back(element);
    at = end;
  }
  return found;
}

inline std::string attribute(const std::string& element, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = element.find(key);
  REQUIRE_MESSAGE(at != std::string::npos, element, " has no ", name);
  const size_t begin = at + key.size();
  return element.substr(begin, element.find('"', begin) - begin);
}

struct PathPoint {
  char command;  // 'M' starts a run of points, 'L' continues it
  double x, y;
};

inline std::vector<PathPoint> path_points(const std::string& d) {
  std::vector<PathPoint> points;
  std::istringstream in(d);
  std::string command;
  while (in >> command) {
    if (command == "Z") continue;
    REQUIRE_MESSAGE((command == "M" || command == "L"), "unexpected path command ", command);
    PathPoint p{command[0], 0, 0};
    REQUIRE(static_cast<bool>(in >> p.x >> p.y));
    points.push_back(p);
  }
  return points;
}

// The plot area's rectangle: where the data range is drawn.
struct Area {
  double left, top, right, bottom;
};

inline Area plot_area(const std::string& svg) {
  const auto rects = elements(svg, "rect", "class=\"plot-area\"");
  REQUIRE(rects.size() == 1);
  const double x = std::stod(attribute(rects[0], "x")), y = std::stod(attribute(rects[0], "y"));
  return {x, y, x + std::stod(attribute(rects[0], "width")), y + std::stod(attribute(rects[0], "height"))};
}

inline std::string series_d(const std::string& svg, const std::string& name) {
  const auto paths = elements(svg, "path", "class=\"series\" data-series=\"" + name + "\"");
  REQUIRE_MESSAGE(paths.size() == 1, "series ", name);
  return attribute(paths[0], "d");
}

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.17g}", v) : "null"; }

// How wide `text` (UTF-8) can be at `font_size` px in the fonts a viewer picks for
// "sans-serif": per ASCII character the larger of its advance in DejaVu Sans and in Arial
// (per mille of an em, from the fonts' hmtx tables), a full em for any other character.
// Written out here rather than taken from the renderer, so that a renderer that
// under-estimates its text fails.
inline double text_width_bound(const std::string& text, double font_size) {
  static const int advance[95] = {
      318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337,
      636, 636, 636, 636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 556,
      1015, 684, 686, 722, 770, 667, 611, 778, 752, 295, 500, 667, 557, 863, 748, 787,
      667, 787, 722, 667, 611, 732, 684, 989, 685, 667, 685, 390, 337, 390, 838, 556,
      500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,
      635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838,
  };
  double per_mille = 0;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 32 && byte < 127) per_mille += advance[byte - 32];
    else if ((byte & 0xC0) != 0x80) per_mille += 1000;
  }
  return per_mille / 1000 * font_size;
}

inline std::string xml_unescape(std::string text) {
  for (const auto& [entity, c] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}}) {
    for (size_t at = 0; (at = text.find(entity, at)) != std::string::npos; at += c.size()) text.replace(at, entity.size(), c);
  }
  return text;
}

// One line of legend text where it is drawn (its baseline at y).
struct TextLine {
  double x, y;
  std::string text;
};

// The legend's entries, each as its lines: a <text> alone, or the <tspan>s of a wrapped one.
inline std::vector<std::vector<TextLine>> legend_entries(const std::string& svg) {
  const size_t begin = svg.find("<g class=\"legend\">");
  REQUIRE(begin != std::string::npos);
  const std::string legend = svg.substr(begin, svg.find("</g>", begin) - begin);
  std::vector<std::vector<TextLine>> entries;
  for (size_t at = 0; (at = legend.find("<text ", at)) != std::string::npos;) {
    const size_t open_end = legend.find('>', at);
    const size_t close = legend.find("</text>", open_end);
    const std::string tag = legend.substr(at, open_end - at + 1);
    const std::string content = legend.substr(open_end + 1, close - open_end - 1);
    at = close;
    std::vector<TextLine> lines;
    if (content.find("<tspan") == std::string::npos) {
      lines.push_back({std::stod(attribute(tag, "x")), std::stod(attribute(tag, "y")), xml_unescape(content)});
    } else {
      for (size_t t = 0; (t = content.find("<tspan ", t)) != std::string::npos;) {
        const size_t t_end = content.find('>', t);
        const size_t t_close = content.find("</tspan>", t_end);
        const std::string t_tag = content.substr(t, t_end - t + 1);
        lines.push_back({std::stod(attribute(t_tag, "x")), std::stod(attribute(t_tag, "y")),
                         xml_unescape(content.substr(t_end + 1, t_close - t_end - 1))});
        t = t_close;
      }
    }
    entries.push_back(std::move(lines));
  }
  return entries;
}

// Every legend line lies inside the canvas (by the widest the fonts can draw it), right of
// the plot's frame, below the one before it; every entry reads a series' or a band's whole
// name; the title fits too. `names` are the legend texts expected, in order.
inline void check_legend_fits(const std::string& svg, const std::vector<std::string>& names, const std::string& what) {
  INFO(what);
  const auto svgs = elements(svg, "svg", "");
  REQUIRE(svgs.size() == 1);
  const double width = std::stod(attribute(svgs[0], "width")), height = std::stod(attribute(svgs[0], "height"));
  CHECK(attribute(svgs[0], "viewBox") == fmt::format("0 0 {} {}", attribute(svgs[0], "width"), attribute(svgs[0], "height")));
  const auto frames = elements(svg, "rect", "class=\"frame\"");
  REQUIRE(frames.size() == 1);
  const double frame_right = std::stod(attribute(frames[0], "x")) + std::stod(attribute(frames[0], "width"));
  const double font_size = std::stod(attribute(svgs[0], "font-size"));

  const std::vector<std::vector<TextLine>> entries = legend_entries(svg);
  REQUIRE(entries.size() == names.size());
  double previous_y = -INFINITY;
  for (size_t e = 0; e < entries.size(); ++e) {
    std::string joined;
    for (const TextLine& line : entries[e]) {
      INFO("legend line \"", line.text, "\" at x ", line.x, " y ", line.y, " in a ", width, " x ", height, " canvas");
      CHECK(line.x > frame_right);
      CHECK(line.x + text_width_bound(line.text, font_size) <= width);
      CHECK(line.y - font_size >= 0);                      // ascenders stay below the top edge
      CHECK(line.y + 0.25 * font_size <= height);          // descenders (0.24 em) above the bottom
      CHECK(line.y - previous_y >= font_size);             // no line overlaps the one above
      previous_y = line.y;
      joined += line.text;
    }
    CHECK(joined == names[e]);  // wrapped or not, nothing is dropped
  }
  const auto titles = elements(svg, "text", "class=\"title\"");
  REQUIRE(titles.size() == 1);
  const size_t title_at = svg.find(titles[0]) + titles[0].size();
  const std::string title = xml_unescape(svg.substr(title_at, svg.find("</text>", title_at) - title_at));
  const double title_width = text_width_bound(title, std::stod(attribute(titles[0], "font-size")));
  const double title_x = std::stod(attribute(titles[0], "x"));
  const bool centred = titles[0].find("text-anchor=\"middle\"") != std::string::npos;
  INFO("title \"", title, "\" at x ", title_x);
  CHECK((centred ? title_x - title_width / 2 : title_x) >= 0);
  CHECK((centred ? title_x + title_width / 2 : title_x + title_width) <= width);
}

// The jsonl rows of `columns` (key -> one value per step, from step 1).
inline std::string jsonl_of(const std::vector<std::pair<std::string, std::vector<double>>>& columns, int steps) {
  std::string out;
  for (int i = 0; i < steps; ++i) {
    out += fmt::format("{{\"step\":{}", i + 1);
    for (const auto& [key, values] : columns) out += fmt::format(",\"{}\":{}", key, json_number(values[i]));
    out += "}\n";
  }
  return out;
}

// The band's points' highest and lowest pixel rows.
inline std::pair<double, double> band_extent(const std::string& svg) {
  const auto bands = elements(svg, "path", "class=\"band\"");
  REQUIRE(bands.size() == 1);
  double top = INFINITY, bottom = -INFINITY;
  for (const PathPoint& p : path_points(attribute(bands[0], "d"))) top = std::min(top, p.y), bottom = std::max(bottom, p.y);
  return {top, bottom};
}


}  // namespace tandem::testing
