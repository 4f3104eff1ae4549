// `tandem plot RUN_DIR [--out DIR]`: draws a run's metrics.jsonl as SVG charts
// (controller/observe/plot_metrics.h says which) plus an index.html that shows them all.
// Works on a finished run or a live one (a half-written last line is skipped).
#include "controller/cli/cli.h"
#include "controller/observe/plot_metrics.h"
#include "controller/observe/plot_svg.h"
#include "core/error.h"
#include "core/files.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

namespace tandem {

namespace {

namespace fs = std::filesystem;

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string index_html(const std::string& run_dir, const std::vector<MetricsChart>& charts,
                       const std::vector<std::string>& skipped) {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>tandem run {0}</title>\n"
      "<style>body {{ font-family: sans-serif; margin: 1.5em; }} img {{ margin: 0.5em; border: 1px solid #ddd; }}</style>\n"
      "</head>\n<body>\n<h1>{0}</h1>\n",
      html_escape(run_dir));
  std::string section;
  for (const MetricsChart& c : charts) {
    if (c.section != section) {
      section = c.section;
      if (!section.empty()) out += fmt::format("<h2>{}</h2>\n", html_escape(section));
    }
    out += fmt::format("<img src=\"{}\" alt=\"{}\">\n", html_escape(c.file), html_escape(c.chart.title));
  }
  if (!skipped.empty()) {
    out += "<h2>Not drawn</h2>\n<ul>\n";
    for (const std::string& line : skipped) out += "<li>" + html_escape(line) + "</li>\n";
    out += "</ul>\n";
  }
  return out + "</body>\n</html>\n";
}

}  // namespace

int cli_plot(const PlotArgs& args) {
  std::error_code ec;
  if (!fs::is_directory(args.run_dir, ec)) {
    throw UsageError(fmt::format("tandem plot: {} is not a run directory ({})", args.run_dir,
                                 fs::exists(args.run_dir, ec) ? "not a directory" : "it does not exist"));
  }
  const std::string metrics_path = (fs::path(args.run_dir) / "metrics.jsonl").string();
  if (!fs::is_regular_file(metrics_path, ec)) {
    throw UsageError(fmt::format("tandem plot: {} does not exist (has the run finished a step? was logging.jsonl off?)",
                                 metrics_path));
  }

  std::vector<std::string> warnings;
  const MetricsTable table = read_metrics_jsonl(metrics_path, &warnings);  // malformed line: Error, exit 1
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (table.steps.empty()) throw UsageError(fmt::format("tandem plot: {} has no steps yet", metrics_path));

  std::vector<std::string> skipped;
  const std::vector<MetricsChart> charts = metrics_charts(table, skipped);

  const fs::path out_dir = args.out.empty() ? fs::path(args.run_dir) / "plots" : fs::path(args.out);
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(fmt::format("cannot create {}: {}", out_dir.string(), ec.message()));
  for (const MetricsChart& c : charts) {
    const std::string path = (out_dir / c.file).string();
    write_file_atomic(path, plot_chart_svg(c.chart));
    std::printf("wrote %s\n", path.c_str());
  }
  const std::string index_path = (out_dir / "index.html").string();
  write_file_atomic(index_path, index_html(args.run_dir, charts, skipped));
  std::printf("wrote %s\n", index_path.c_str());
  for (const std::string& line : skipped) std::printf("skipped %s\n", line.c_str());
  std::printf("%zu steps, %zu charts\n", table.steps.size(), charts.size());
  return 0;
}

}  // namespace tandem
