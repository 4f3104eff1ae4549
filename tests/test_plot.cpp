// `tandem plot RUN_DIR`: the SVG charts it draws from metrics.jsonl map the data to the
// plot area exactly, gaps stay gaps, and bad input ends in the documented exit codes.
#include "core/files.h"
#include "core/process.h"
#include "run_tandem.h"

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

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct PlotRun {
  ExitStatus status;
  std::string output;
};

PlotRun run_plot(const TempDir& dir, const std::vector<std::string>& args) {
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
void check_well_formed(const std::string& svg, const std::string& what) {
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
std::vector<std::string> elements(const std::string& svg, const std::string& tag, const std::string& marker) {
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

std::string attribute(const std::string& element, const std::string& name) {
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

std::vector<PathPoint> path_points(const std::string& d) {
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

Area plot_area(const std::string& svg) {
  const auto rects = elements(svg, "rect", "class=\"plot-area\"");
  REQUIRE(rects.size() == 1);
  const double x = std::stod(attribute(rects[0], "x")), y = std::stod(attribute(rects[0], "y"));
  return {x, y, x + std::stod(attribute(rects[0], "width")), y + std::stod(attribute(rects[0], "height"))};
}

std::string series_d(const std::string& svg, const std::string& name) {
  const auto paths = elements(svg, "path", "class=\"series\" data-series=\"" + name + "\"");
  REQUIRE_MESSAGE(paths.size() == 1, "series ", name);
  return attribute(paths[0], "d");
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.17g}", v) : "null"; }

// How wide `text` (UTF-8) can be at `font_size` px in the fonts a viewer picks for
// "sans-serif": per ASCII character the larger of its advance in DejaVu Sans and in Arial
// (per mille of an em, from the fonts' hmtx tables), a full em for any other character.
// Written out here rather than taken from the renderer, so that a renderer that
// under-estimates its text fails.
double text_width_bound(const std::string& text, double font_size) {
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

std::string xml_unescape(std::string text) {
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
std::vector<std::vector<TextLine>> legend_entries(const std::string& svg) {
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
void check_legend_fits(const std::string& svg, const std::vector<std::string>& names, const std::string& what) {
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
std::string jsonl_of(const std::vector<std::pair<std::string, std::vector<double>>>& columns, int steps) {
  std::string out;
  for (int i = 0; i < steps; ++i) {
    out += fmt::format("{{\"step\":{}", i + 1);
    for (const auto& [key, values] : columns) out += fmt::format(",\"{}\":{}", key, json_number(values[i]));
    out += "}\n";
  }
  return out;
}

// The band's points' highest and lowest pixel rows.
std::pair<double, double> band_extent(const std::string& svg) {
  const auto bands = elements(svg, "path", "class=\"band\"");
  REQUIRE(bands.size() == 1);
  double top = INFINITY, bottom = -INFINITY;
  for (const PathPoint& p : path_points(attribute(bands[0], "d"))) top = std::min(top, p.y), bottom = std::max(bottom, p.y);
  return {top, bottom};
}

}  // namespace

TEST_CASE("plot draws every group; points map to the plot area; gaps split the line") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);
  const unsigned seed = std::random_device()();
  INFO("seed ", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-2.0, 3.0);

  const int steps = 12;
  std::vector<double> mean(steps), std_dev(steps), kl(steps), length(steps);
  std::string jsonl;
  for (int i = 0; i < steps; ++i) {
    mean[i] = uniform(rng);
    std_dev[i] = 0.05 + std::abs(uniform(rng)) / 4;
    kl[i] = (i == 4 || i == 6) ? kNaN : 0.001 * (1 + std::abs(uniform(rng)));  // steps 5, 7: gaps, step 6 alone
    length[i] = 10 + 5 * std::abs(uniform(rng));
    jsonl += fmt::format(
        "{{\"step\":{},\"weight_version\":{},\"reward/mean\":{},\"reward/std\":{},\"response/length_mean\":{},"
        "\"actor/kl\":{},\"time/rollout_s\":0.5,\"time/reward_s\":0.01,\"time/train_s\":{},\"time/sync_s\":0.02,"
        "\"time/step_s\":1.5,\"perf/rollout_tokens_per_s\":{}}}\n",
        i + 1, i + 1, json_number(mean[i]), json_number(std_dev[i]), json_number(length[i]), json_number(kl[i]),
        0.9 + i * 0.01, 1000 + 10 * i);
  }
  write_text(run + "/metrics.jsonl", jsonl);

  const PlotRun result = run_plot(dir, {run});
  INFO(result.output);
  REQUIRE(result.status.success());
  for (const char* file : {"reward.svg", "kl.svg", "response_length.svg", "timings.svg", "throughput.svg", "index.html"}) {
    CHECK(fs::exists(run + "/plots/" + file));
    CHECK(result.output.find("wrote " + run + "/plots/" + file) != std::string::npos);
  }
  // No actor/entropy in the rows: that chart is skipped and the output says so.
  CHECK_FALSE(fs::exists(run + "/plots/entropy.svg"));
  CHECK(result.output.find("skipped entropy.svg: no actor/entropy in metrics.jsonl") != std::string::npos);
  const std::string index = read_text(run + "/plots/index.html");
  CHECK(index.find("<img src=\"reward.svg\"") != std::string::npos);
  CHECK(index.find("entropy.svg: no actor/entropy") != std::string::npos);

  SUBCASE("reward: the mean maps linearly, the ±std band spans the plot area exactly") {
    const std::string svg = read_text(run + "/plots/reward.svg");
    check_well_formed(svg, "reward.svg");
    const Area area = plot_area(svg);
    double lo = mean[0] - std_dev[0], hi = mean[0] + std_dev[0];
    for (int i = 0; i < steps; ++i) lo = std::min(lo, mean[i] - std_dev[i]), hi = std::max(hi, mean[i] + std_dev[i]);
    const std::vector<PathPoint> points = path_points(series_d(svg, "reward/mean"));
    REQUIRE(points.size() == static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) {
      INFO("step ", i + 1);
      CHECK(points[i].command == (i == 0 ? 'M' : 'L'));
      const double x = area.left + (area.right - area.left) * i / (steps - 1);
      const double y = area.bottom - (area.bottom - area.top) * (mean[i] - lo) / (hi - lo);
      CHECK(std::abs(points[i].x - x) < 0.01);  // coordinates are written with 2 decimals
      CHECK(std::abs(points[i].y - y) < 0.01);
    }
    const auto bands = elements(svg, "path", "class=\"band\"");
    REQUIRE(bands.size() == 1);
    const std::vector<PathPoint> band = path_points(attribute(bands[0], "d"));
    CHECK(band.size() == static_cast<size_t>(2 * steps));
    double band_top = band[0].y, band_bottom = band[0].y;
    for (const PathPoint& p : band) band_top = std::min(band_top, p.y), band_bottom = std::max(band_bottom, p.y);
    CHECK(std::abs(band_top - area.top) < 0.01);       // max(mean + std) at the top edge
    CHECK(std::abs(band_bottom - area.bottom) < 0.01); // min(mean - std) at the bottom edge
    CHECK(svg.find(">reward/mean</text>") != std::string::npos);  // legend
    CHECK(svg.find(">Reward</text>") != std::string::npos);       // title
    CHECK(elements(svg, "text", "").size() >= 8);                  // tick labels at least
  }

  SUBCASE("kl: one path point per finite value, a new run after each gap, a marker on the lone point") {
    const std::string svg = read_text(run + "/plots/kl.svg");
    check_well_formed(svg, "kl.svg");
    const Area area = plot_area(svg);
    const std::vector<PathPoint> points = path_points(series_d(svg, "actor/kl"));
    CHECK(points.size() == static_cast<size_t>(steps - 2));
    CHECK(std::count_if(points.begin(), points.end(), [](const PathPoint& p) { return p.command == 'M'; }) == 3);
    CHECK(elements(svg, "circle", "class=\"marker\"").size() == 1);
    double lo = INFINITY, hi = -INFINITY;
    for (double v : kl) {
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    size_t k = 0;
    for (int i = 0; i < steps; ++i) {
      if (!std::isfinite(kl[i])) continue;
      INFO("step ", i + 1);
      CHECK(std::abs(points[k].x - (area.left + (area.right - area.left) * i / (steps - 1))) < 0.01);
      CHECK(std::abs(points[k].y - (area.bottom - (area.bottom - area.top) * (kl[i] - lo) / (hi - lo))) < 0.01);
      ++k;
    }
  }

  SUBCASE("timings: every time/* series with a legend entry") {
    const std::string svg = read_text(run + "/plots/timings.svg");
    check_well_formed(svg, "timings.svg");
    for (const char* key : {"time/rollout_s", "time/reward_s", "time/train_s", "time/sync_s", "time/step_s"}) {
      INFO(key);
      CHECK(path_points(series_d(svg, key)).size() == static_cast<size_t>(steps));
      CHECK(svg.find(std::string(">") + key + "</text>") != std::string::npos);
    }
    const Area area = plot_area(svg);
    // time/step_s (1.5) is the largest: on the top edge. Durations are drawn from 0: 0 is
    // the bottom edge, so time/reward_s (0.01) sits 0.01 / 1.5 of the height above it.
    for (const PathPoint& p : path_points(series_d(svg, "time/step_s"))) CHECK(std::abs(p.y - area.top) < 0.01);
    for (const PathPoint& p : path_points(series_d(svg, "time/reward_s"))) {
      CHECK(std::abs(p.y - (area.bottom - (area.bottom - area.top) * 0.01 / 1.5)) < 0.01);
    }
  }
}

TEST_CASE("plot: one step, --out, a resumed run's repeated steps, unusable values") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);

  SUBCASE("a run of one step draws a marked point in the middle") {
    write_text(run + "/metrics.jsonl", "{\"step\":1,\"reward/mean\":0.25,\"reward/std\":0,\"actor/kl\":null}\n");
    const PlotRun result = run_plot(dir, {run, "--out", dir.path() + "/elsewhere"});
    INFO(result.output);
    REQUIRE(result.status.success());
    CHECK_FALSE(fs::exists(run + "/plots"));
    const std::string svg = read_text(dir.path() + "/elsewhere/reward.svg");
    check_well_formed(svg, "reward.svg");
    const Area area = plot_area(svg);
    const std::vector<PathPoint> points = path_points(series_d(svg, "reward/mean"));
    REQUIRE(points.size() == 1);
    CHECK(std::abs(points[0].x - (area.left + area.right) / 2) < 0.01);
    CHECK(std::abs(points[0].y - (area.top + area.bottom) / 2) < 0.01);
    CHECK(elements(svg, "circle", "class=\"marker\"").size() == 1);
    CHECK(result.output.find("skipped kl.svg: no finite actor/kl values") != std::string::npos);
    CHECK(result.output.find("skipped timings.svg") != std::string::npos);
  }

  SUBCASE("a step written twice (a resumed run) is drawn once, with the later value") {
    write_text(run + "/metrics.jsonl",
               "{\"step\":1,\"reward/mean\":0}\n{\"step\":2,\"reward/mean\":5}\n{\"step\":3,\"reward/mean\":5}\n"
               "{\"step\":2,\"reward/mean\":1}\n{\"step\":3,\"reward/mean\":2}\n{\"step\":4,\"reward/mean\":\"NaN\"}\n"
               "{\"step\":5,\"reward/mean\":3}\n");
    const PlotRun result = run_plot(dir, {run});
    INFO(result.output);
    REQUIRE(result.status.success());
    const std::string svg = read_text(run + "/plots/reward.svg");
    const Area area = plot_area(svg);
    const std::vector<PathPoint> points = path_points(series_d(svg, "reward/mean"));
    REQUIRE(points.size() == 4);  // steps 1, 2, 3 and 5; step 4 is a gap
    CHECK(std::abs(points[3].y - area.top) < 0.01);     // 3 is the largest value: the 5s were replaced
    CHECK(std::abs(points[0].y - area.bottom) < 0.01);  // 0 the smallest
    CHECK(points[3].command == 'M');
    CHECK(result.output.find("reward.svg band (±reward/std): no reward/std in metrics.jsonl") != std::string::npos);
  }

  SUBCASE("a half-written last line (a live run) is skipped with a warning") {
    write_text(run + "/metrics.jsonl", "{\"step\":1,\"reward/mean\":0.5}\n{\"step\":2,\"reward/mea");
    const PlotRun result = run_plot(dir, {run});
    INFO(result.output);
    CHECK(result.status.success());
    CHECK(result.output.find("metrics.jsonl:2: skipped the unfinished last line") != std::string::npos);
  }
}

TEST_CASE("plot errors: a malformed line is exit 1 naming file:line; no run or no metrics is exit 2") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);
  const std::string metrics = run + "/metrics.jsonl";

  write_text(metrics, "{\"step\":1,\"reward/mean\":0.5}\n\n{\"step\":2,\"reward/mean\":0.5,}\n{\"step\":3}\n");
  PlotRun result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 1);
  CHECK_MESSAGE(result.output.find(metrics + ":3: not valid JSON") != std::string::npos, result.output);

  write_text(metrics, "{\"step\":1,\"reward/mean\":0.5}\n[1, 2]\n");
  result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 1);
  CHECK_MESSAGE(result.output.find(metrics + ":2: expected a JSON object") != std::string::npos, result.output);

  write_text(metrics, "{\"reward/mean\":0.5}\n");
  result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 1);
  CHECK_MESSAGE(result.output.find(metrics + ":1: the row has no numeric \"step\"") != std::string::npos, result.output);

  write_text(metrics, "");
  result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 2);
  CHECK_MESSAGE(result.output.find("has no steps yet") != std::string::npos, result.output);

  fs::remove(metrics);
  result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 2);
  CHECK_MESSAGE(result.output.find(metrics + " does not exist") != std::string::npos, result.output);

  result = run_plot(dir, {dir.path() + "/no-such-run"});
  CHECK(result.status.exit_code == 2);
  CHECK_MESSAGE(result.output.find("no-such-run is not a run directory (it does not exist)") != std::string::npos,
                result.output);
  CHECK_FALSE(fs::exists(dir.path() + "/no-such-run"));

  result = run_plot(dir, {});
  CHECK(result.status.exit_code == 2);  // the command line itself is wrong
}

TEST_CASE("plot legends fit the canvas: long names, wrapped names, many series") {
  // Before the fix the legend had a fixed 144-px column at the right edge: the text of
  // perf/rollout_tokens_per_s (151 px in DejaVu Sans) was cut by the canvas edge, and
  // rows past the 18th fell below the bottom.
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);
  const unsigned seed = std::random_device()();
  INFO("seed ", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(0.1, 2.0);
  const int steps = 5;
  auto values = [&] {
    std::vector<double> v(steps);
    for (double& x : v) x = uniform(rng);
    return v;
  };
  const std::string long_reward = "reward/a_reward_whose_name_is_long_enough_that_its_legend_entry_has_to_wrap";
  const std::string unbroken_reward = "reward/" + std::string(60, 'W');  // no break point: wraps inside the word
  std::vector<std::pair<std::string, std::vector<double>>> columns = {
      {"reward/mean", values()},          {"reward/std", values()},
      {"reward/format", values()},        {long_reward, values()},
      {unbroken_reward, values()},        {"reward/format/length", values()},
      {"perf/rollout_tokens_per_s", values()}, {"perf/train_tokens_per_s", values()},
  };
  std::vector<std::string> timing_names;
  for (int k = 0; k < 26; ++k) timing_names.push_back(fmt::format("time/phase_{:02}_s", k));
  for (const std::string& key : timing_names) columns.emplace_back(key, values());
  write_text(run + "/metrics.jsonl", jsonl_of(columns, steps));

  const PlotRun result = run_plot(dir, {run});
  INFO(result.output);
  REQUIRE(result.status.success());
  const std::string plots = run + "/plots/";

  const std::string throughput = read_text(plots + "throughput.svg");
  check_well_formed(throughput, "throughput.svg");
  check_legend_fits(throughput, {"perf/rollout_tokens_per_s", "perf/train_tokens_per_s"}, "throughput.svg");
  CHECK(throughput.find(">perf/rollout_tokens_per_s</text>") != std::string::npos);  // short enough for one line

  const std::string rewards = read_text(plots + "rewards.svg");
  check_well_formed(rewards, "rewards.svg");
  check_legend_fits(rewards, {"reward/format", long_reward, unbroken_reward}, "rewards.svg");
  const auto entries = legend_entries(rewards);
  CHECK(entries[1].size() >= 2);  // the long name wraps rather than widening the chart without bound
  CHECK(entries[2].size() >= 2);
  CHECK(entries[1][0].text.back() == '_');  // broken after a '_', not inside a word

  const std::string timings = read_text(plots + "timings.svg");
  check_well_formed(timings, "timings.svg");
  check_legend_fits(timings, timing_names, "timings.svg");  // 26 rows: the canvas grows taller

  const std::string reward = read_text(plots + "reward.svg");
  check_legend_fits(reward, {"reward/mean", "±1 reward/std"}, "reward.svg");
  CHECK(reward.find("width=\"760\" height=\"420\"") != std::string::npos);  // short legends keep the usual size

  const std::string part = read_text(plots + "reward_format_length.svg");
  check_legend_fits(part, {"reward/format/length"}, "reward_format_length.svg");
}

TEST_CASE("plot draws what a researcher reads each step: rewards and their parts, ratio, advantages, lengths") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);
  const unsigned seed = std::random_device()();
  INFO("seed ", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(0.05, 1.0);
  const int steps = 9;
  auto values = [&](double scale, double offset) {
    std::vector<double> v(steps);
    for (double& x : v) x = offset + scale * uniform(rng);
    return v;
  };
  std::vector<double> length_mean = values(40, 60), length_min(steps), length_max(steps);
  std::vector<double> adv_mean = values(0.2, -0.1), adv_min(steps), adv_max(steps);
  std::vector<double> ratio_mean = values(0.02, 0.99), ratio_min(steps), ratio_max(steps);
  for (int i = 0; i < steps; ++i) {
    length_min[i] = length_mean[i] - 50 * uniform(rng);
    length_max[i] = length_mean[i] + 50 * uniform(rng);
    adv_min[i] = adv_mean[i] - 2 * uniform(rng);
    adv_max[i] = adv_mean[i] + 2 * uniform(rng);
    ratio_min[i] = ratio_mean[i] - 0.3 * uniform(rng);
    ratio_max[i] = ratio_mean[i] + 0.3 * uniform(rng);
  }
  const std::vector<double> clip = values(0.5, 0.1);
  // file name -> the reward part it draws: characters outside [A-Za-z0-9_-] become '_'
  // (one per character, not per byte), and names that meet get -2.
  const std::vector<std::pair<std::string, std::string>> parts = {
      {"reward_math_correct.svg", "reward/math/correct"},
      {"reward_math_format.svg", "reward/math/format"},
      {"reward_length-v2_too_long.svg", "reward/length-v2/too.long"},
      {"reward_a_b_c.svg", "reward/a_b/c"},
      {"reward_a_b_c-2.svg", "reward/a/b_c"},
      {"reward_gr__e_x.svg", "reward/größe/x"},
  };
  std::vector<std::pair<std::string, std::vector<double>>> columns = {
      {"reward/mean", values(1, 0)},  {"reward/std", values(0.2, 0)},   {"reward/fallbacks", values(0, 0)},
      {"reward/math", values(1, 0)},  {"reward/length-v2", values(0.5, -0.5)},
      {"response/length_mean", length_mean}, {"response/length_max", length_max}, {"response/length_min", length_min},
      {"response/clip_ratio", clip},  {"prompt/length_mean", values(30, 20)},
      {"critic/advantages/mean", adv_mean}, {"critic/advantages/max", adv_max}, {"critic/advantages/min", adv_min},
      {"actor/ratio_mean", ratio_mean}, {"actor/ratio_max", ratio_max}, {"actor/ratio_min", ratio_min},
      {"reward/x/y/z", values(1, 0)},  // three levels: neither a reward nor a part
  };
  for (const auto& [file, key] : parts) columns.emplace_back(key, values(1, 0));
  write_text(run + "/metrics.jsonl", jsonl_of(columns, steps));

  const PlotRun result = run_plot(dir, {run});
  INFO(result.output);
  REQUIRE(result.status.success());
  const std::string plots = run + "/plots/";
  for (const char* file : {"reward.svg", "rewards.svg", "ratio.svg", "advantages.svg", "response_length.svg",
                           "clip_ratio.svg", "prompt_length.svg"}) {
    CHECK_MESSAGE(fs::exists(plots + file), file);
    CHECK(result.output.find(std::string("skipped ") + file) == std::string::npos);
  }
  CHECK(result.output.find("skipped reward_<name>_<part>.svg") == std::string::npos);
  CHECK(result.output.find(" band (") == std::string::npos);  // every band had its edges

  SUBCASE("rewards: each reward/<name>, not the total's mean, std, fallbacks, nor the parts") {
    const std::string svg = read_text(plots + "rewards.svg");
    check_well_formed(svg, "rewards.svg");
    CHECK(elements(svg, "path", "class=\"series\"").size() == 2);
    CHECK(path_points(series_d(svg, "reward/math")).size() == static_cast<size_t>(steps));
    CHECK(path_points(series_d(svg, "reward/length-v2")).size() == static_cast<size_t>(steps));
  }

  SUBCASE("one chart per reward part, its file name sanitised") {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(plots)) files.push_back(entry.path().filename().string());
    for (const std::string& file : files) {
      INFO(file);
      CHECK(file.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.") ==
            std::string::npos);
    }
    CHECK(std::count_if(files.begin(), files.end(), [](const std::string& f) { return f.rfind("reward_", 0) == 0; }) ==
          static_cast<long>(parts.size()));  // reward/x/y/z has none
    const std::string index = read_text(plots + "index.html");
    const size_t heading = index.find("<h2>Reward parts</h2>");
    CHECK(heading != std::string::npos);
    CHECK(heading < index.find("<img src=\"reward_math_correct.svg\""));
    for (const auto& [file, key] : parts) {
      INFO(file, " for ", key);
      REQUIRE(fs::exists(plots + file));
      const std::string svg = read_text(plots + file);
      check_well_formed(svg, file);
      CHECK(path_points(series_d(svg, key)).size() == static_cast<size_t>(steps));
      CHECK(elements(svg, "path", "class=\"series\"").size() == 1);
      CHECK(index.find("<img src=\"" + file + "\"") != std::string::npos);
    }
  }

  SUBCASE("response length: the mean with a band from length_min to length_max, drawn from 0") {
    const std::string svg = read_text(plots + "response_length.svg");
    check_well_formed(svg, "response_length.svg");
    const Area area = plot_area(svg);
    const double hi = *std::max_element(length_max.begin(), length_max.end());
    const std::vector<PathPoint> mean = path_points(series_d(svg, "response/length_mean"));
    REQUIRE(mean.size() == static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) {
      CHECK(std::abs(mean[i].y - (area.bottom - (area.bottom - area.top) * length_mean[i] / hi)) < 0.01);
    }
    const auto [band_top, band_bottom] = band_extent(svg);
    const double lo = *std::min_element(length_min.begin(), length_min.end());
    CHECK(std::abs(band_top - area.top) < 0.01);
    CHECK(std::abs(band_bottom - (area.bottom - (area.bottom - area.top) * lo / hi)) < 0.01);
    CHECK(svg.find(">min to max</text>") != std::string::npos);
  }

  SUBCASE("advantages and ratio: the mean with a band spanning min to max") {
    for (const auto& [file, mean_key] : {std::pair<std::string, std::string>{"advantages.svg", "critic/advantages/mean"},
                                         std::pair<std::string, std::string>{"ratio.svg", "actor/ratio_mean"}}) {
      INFO(file);
      const std::string svg = read_text(plots + file);
      check_well_formed(svg, file);
      CHECK(path_points(series_d(svg, mean_key)).size() == static_cast<size_t>(steps));
      const Area area = plot_area(svg);
      const auto [band_top, band_bottom] = band_extent(svg);
      CHECK(std::abs(band_top - area.top) < 0.01);        // the largest max on the top edge
      CHECK(std::abs(band_bottom - area.bottom) < 0.01);  // the smallest min on the bottom one
    }
  }

  SUBCASE("clip ratio and prompt length: one series each, drawn from 0") {
    const std::string svg = read_text(plots + "clip_ratio.svg");
    check_well_formed(svg, "clip_ratio.svg");
    const Area area = plot_area(svg);
    const double hi = *std::max_element(clip.begin(), clip.end());
    const std::vector<PathPoint> points = path_points(series_d(svg, "response/clip_ratio"));
    REQUIRE(points.size() == static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) CHECK(std::abs(points[i].y - (area.bottom - (area.bottom - area.top) * clip[i] / hi)) < 0.01);
    const std::string prompt = read_text(plots + "prompt_length.svg");
    check_well_formed(prompt, "prompt_length.svg");
    CHECK(path_points(series_d(prompt, "prompt/length_mean")).size() == static_cast<size_t>(steps));
  }
}

TEST_CASE("plot: the new charts are skipped and named without their metrics; a range chart draws what it has") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);

  SUBCASE("none of them") {
    write_text(run + "/metrics.jsonl",
               "{\"step\":1,\"reward/mean\":0.5,\"reward/std\":0.1,\"reward/fallbacks\":0}\n"
               "{\"step\":2,\"reward/mean\":0.7,\"reward/std\":0.1,\"reward/fallbacks\":0}\n");
    const PlotRun result = run_plot(dir, {run});
    INFO(result.output);
    REQUIRE(result.status.success());
    for (const char* line : {
             "skipped rewards.svg: no finite reward/<name> metrics in metrics.jsonl",
             "skipped ratio.svg: no actor/ratio_mean in metrics.jsonl; no actor/ratio_min in metrics.jsonl; "
             "no actor/ratio_max in metrics.jsonl",
             "skipped advantages.svg: no critic/advantages/mean in metrics.jsonl",
             "skipped response_length.svg: no response/length_mean in metrics.jsonl",
             "skipped clip_ratio.svg: no response/clip_ratio in metrics.jsonl",
             "skipped prompt_length.svg: no prompt/length_mean in metrics.jsonl",
             "skipped reward_<name>_<part>.svg: no reward/<name>/<part> metrics in metrics.jsonl",
         }) {
      CHECK_MESSAGE(result.output.find(line) != std::string::npos, line);
    }
    for (const char* file : {"rewards.svg", "ratio.svg", "advantages.svg", "clip_ratio.svg", "prompt_length.svg"}) {
      CHECK_FALSE(fs::exists(run + "/plots/" + file));
    }
    CHECK(read_text(run + "/plots/index.html").find("<h2>Reward parts</h2>") == std::string::npos);
  }

  SUBCASE("a mean without its band, extremes without their mean, a part with no finite value") {
    write_text(run + "/metrics.jsonl",
               "{\"step\":1,\"response/length_mean\":10,\"actor/ratio_min\":0.9,\"actor/ratio_max\":1.2,"
               "\"reward/math/correct\":null}\n"
               "{\"step\":2,\"response/length_mean\":12,\"actor/ratio_min\":0.8,\"actor/ratio_max\":1.1,"
               "\"reward/math/correct\":null}\n");
    const PlotRun result = run_plot(dir, {run});
    INFO(result.output);
    REQUIRE(result.status.success());
    CHECK(result.output.find("skipped response_length.svg band (response/length_min to response/length_max): "
                             "no response/length_min in metrics.jsonl") != std::string::npos);
    const std::string length = read_text(run + "/plots/response_length.svg");
    CHECK(path_points(series_d(length, "response/length_mean")).size() == 2);
    CHECK(elements(length, "path", "class=\"band\"").empty());

    CHECK(result.output.find("skipped ratio.svg line (actor/ratio_mean): no actor/ratio_mean in metrics.jsonl") !=
          std::string::npos);
    const std::string ratio = read_text(run + "/plots/ratio.svg");
    CHECK(path_points(series_d(ratio, "actor/ratio_max")).size() == 2);
    CHECK(path_points(series_d(ratio, "actor/ratio_min")).size() == 2);

    CHECK(result.output.find("skipped reward_math_correct.svg: no finite reward/math/correct values") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(run + "/plots/reward_math_correct.svg"));
  }
}
