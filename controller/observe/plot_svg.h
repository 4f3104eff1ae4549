// Line charts as plain SVG text (what `tandem plot` draws): numeric x, one or more series,
// an optional shaded band per series, axes with tick labels, a title and a legend.
//
// Non-finite values (NaN, inf) are gaps: a series is one <path> whose "M" starts each run
// of finite points, so the path has exactly one coordinate pair per finite point. A point
// with no finite neighbour also gets a <circle> marker (a lone "M" draws nothing).
//
// The axes span the data exactly: the largest finite value of any series or band sits on
// the top edge of the plot area (<rect class="plot-area">), the smallest on the bottom edge
// (or 0, with y_include_zero), the first x on the left, the last on the right; so values
// map to pixels from that rectangle alone. The visible frame is drawn a few pixels outside
// it, so that a line along an edge stays visible. A single x or a constant y is widened
// around its value so the range is not empty.
//
// The legend sits right of the plot area, one row per series and one per band. Its column
// is as wide as its widest entry by plot_text_width, and the canvas grows to hold it: wider
// for long names, taller for many rows, so that no legend text runs past the canvas edge
// (an SVG viewer clips there). An entry wider than a cap wraps onto further lines instead,
// after a '/', '_', '-' or space where one fits, so that a long name does not make the
// chart huge. The plot area keeps its size and place whatever the legend holds.
#pragma once

#include <string>
#include <vector>

namespace tandem {

struct PlotSeries {
  std::string name;             // legend text
  std::vector<double> y;        // one per x; non-finite: a gap
  std::vector<double> band_low;   // empty, or one per x: a shaded band from band_low to band_high
  std::vector<double> band_high;  //   (drawn where both and y are finite)
  std::string band_name;        // legend text of the band, e.g. "±1 std"
};

struct PlotChart {
  std::string title;
  std::string x_label = "step";
  bool x_whole_numbers = true;  // x ticks only at whole numbers (steps)
  bool y_include_zero = false;  // the y range reaches 0 (durations, lengths)
  std::string y_label;
  std::vector<double> x;  // ascending
  std::vector<PlotSeries> series;
};

// The SVG document of the chart. Every series must have as many values as x has.
std::string plot_chart_svg(const PlotChart& chart);

// Tick positions for an axis over [lo, hi]: 1, 2 or 5 times a power of ten apart, about
// `target` of them, all inside [lo, hi]. `min_spacing` > 0 keeps them at least that far apart
// (steps are whole numbers: 1).
std::vector<double> plot_ticks(double lo, double hi, int target, double min_spacing = 0);

// An upper bound on the width in pixels of `text` (UTF-8) drawn at `font_size` in the fonts a
// viewer picks for "sans-serif": every ASCII character counts the larger of its advance in
// DejaVu Sans (the Linux default) and in Arial (whose widths Liberation Sans and Helvetica
// share); any other character a full em. The renderer sizes the legend and title with it.
double plot_text_width(const std::string& text, double font_size);

// The text of a tick value, with as many decimals as the spacing needs ("0.25", "1200", "1e+06").
std::string plot_tick_label(double value, double spacing);

}  // namespace tandem
