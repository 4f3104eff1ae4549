// metrics.jsonl read back as columns, and the charts `tandem plot` draws from them.
#pragma once

#include "controller/observe/plot_svg.h"

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
  std::string section;  // a heading in index.html above this chart and the ones after it ("" none)
  PlotChart chart;
};

// The charts the table has data for, in this order, and for every other one a line saying
// why it was skipped ("kl.svg: no finite actor/kl values"). "A band from min to max" is
// shaded where both exist; without the mean, min and max are drawn as lines.
//   reward.svg           reward/mean with a ±reward/std band
//   rewards.svg          every reward/<name>: each reward's weighted mean. <name> has no '/'
//                        and is none of mean, std, fallbacks (those are about the total)
//   kl.svg               actor/kl
//   entropy.svg          actor/entropy
//   ratio.svg            actor/ratio_mean, a band from actor/ratio_min to actor/ratio_max
//   advantages.svg       critic/advantages/mean, a band from critic/advantages/min to max
//   response_length.svg  response/length_mean, a band from response/length_min to length_max
//   clip_ratio.svg       response/clip_ratio: the share of responses cut at max_new_tokens
//   prompt_length.svg    prompt/length_mean
//   validation.svg       every val/* score (val/reward/mean, val/<reward>, val/accuracy,
//                        val/pass@n): the evaluation on data.val, on the steps it ran
//   timings.svg          every time/* metric
//   throughput.svg       every perf/* metric
//   reward_<name>_<part>.svg  one per reward/<name>/<part> (a named sub-score of a reward),
//                        under the index heading "Reward parts". The file name keeps
//                        [A-Za-z0-9_-] and writes '_' for any other character; a name
//                        another chart has taken gets "-2", "-3", ... before ".svg".
std::vector<MetricsChart> metrics_charts(const MetricsTable& table, std::vector<std::string>& skipped);

}  // namespace tandem
