// metrics.jsonl read back as columns, and the charts `tandem plot` draws from them.
#pragma once

#include "controller/plot_svg.h"

#include <map>
#include <string>
#include <vector>

namespace tandem {

// Every metric as a column over the steps, in ascending step order.
struct MetricsTable {
  std::vector<double> steps;
  std::vector<std::string> keys;                        // in the order first seen, "step" excluded
  std::map<std::string, std::vector<double>> columns;   // key -> one value per step; NaN where the
                                                        //   row lacks it or holds null / a non-number
};

// Reads metrics.jsonl (metrics_writer.h). Each non-blank line must be a JSON object with a
// numeric "step"; anything else is an Error naming path:line. A row for a step seen before
// replaces it (a resumed run appends the steps it redoes). An unterminated last line that
// does not parse is a row still being written: it is skipped, and `warnings` says so.
MetricsTable read_metrics_jsonl(const std::string& path, std::vector<std::string>* warnings = nullptr);

// One chart `tandem plot` draws: which metrics it needs and the file it goes to.
struct MetricsChart {
  std::string file;     // "reward.svg"
  PlotChart chart;
};

// The charts the table has data for, and for every other one a line saying why it was
// skipped ("kl.svg: no finite actor/kl values").
//   reward.svg           reward/mean with a ±reward/std band
//   kl.svg               actor/kl
//   entropy.svg          actor/entropy
//   response_length.svg  response/length_mean
//   timings.svg          every time/* metric
//   throughput.svg       every perf/* metric
std::vector<MetricsChart> metrics_charts(const MetricsTable& table, std::vector<std::string>& skipped);

}  // namespace tandem
