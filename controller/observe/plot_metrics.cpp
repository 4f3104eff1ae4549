#include "controller/observe/plot_metrics.h"

#include "core/error.h"
#include "core/files.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <set>
#include <utility>

namespace tandem {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is the useful part.
std::string parse_error_text(const std::string& what) {
  const size_t close = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? what.substr(close + 2) : what;
}

bool has_finite(const std::vector<double>& values) {
  return std::any_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}

const std::vector<double>* column(const MetricsTable& table, const std::string& key) {
  auto it = table.columns.find(key);
  return it == table.columns.end() ? nullptr : &it->second;
}

// Why a key cannot be plotted, or "" when it can.
std::string missing_reason(const MetricsTable& table, const std::string& key) {
  const std::vector<double>* values = column(table, key);
  if (!values) return "no " + key + " in metrics.jsonl";
  if (!has_finite(*values)) return "no finite " + key + " values";
  return "";
}

// What a chart is, before its series.
struct ChartSpec {
  ChartSpec(std::string file_, std::string title_, std::string y_label_, bool y_include_zero_ = false,
            std::string section_ = "")
      : file(std::move(file_)), title(std::move(title_)), y_label(std::move(y_label_)),
        y_include_zero(y_include_zero_), section(std::move(section_)) {}
  std::string file;
  std::string title;
  std::string y_label;
  bool y_include_zero;  // durations, rates, lengths and shares read best against 0;
                        //   reward, KL and entropy by their range
  std::string section;  // MetricsChart::section
};

MetricsChart new_chart(const MetricsTable& table, const ChartSpec& spec) {
  MetricsChart out{spec.file, spec.section, {}};
  out.chart.title = spec.title;
  out.chart.y_label = spec.y_label;
  out.chart.y_include_zero = spec.y_include_zero;
  out.chart.x = table.steps;
  return out;
}

PlotSeries series_of(const MetricsTable& table, const std::string& key) {
  PlotSeries series;
  series.name = key;
  series.y = table.columns.at(key);
  return series;
}

// One chart with a series for each of `keys` that has a finite value; `what` names them
// in the line saying why the chart is skipped when none has.
void add_keys_chart(const MetricsTable& table, const ChartSpec& spec, const std::vector<std::string>& keys,
                    const std::string& what, std::vector<MetricsChart>& charts, std::vector<std::string>& skipped) {
  MetricsChart out = new_chart(table, spec);
  for (const std::string& key : keys) {
    if (missing_reason(table, key).empty()) out.chart.series.push_back(series_of(table, key));
  }
  if (out.chart.series.empty()) {
    skipped.push_back(fmt::format("{}: no finite {} metrics in metrics.jsonl", spec.file, what));
  } else {
    charts.push_back(std::move(out));
  }
}

// One chart of a single metric.
void add_single_chart(const MetricsTable& table, const ChartSpec& spec, const std::string& key,
                      std::vector<MetricsChart>& charts, std::vector<std::string>& skipped) {
  const std::string reason = missing_reason(table, key);
  if (!reason.empty()) {
    skipped.push_back(spec.file + ": " + reason);
    return;
  }
  MetricsChart out = new_chart(table, spec);
  out.chart.series.push_back(series_of(table, key));
  charts.push_back(std::move(out));
}

// `mean_key` with a band from `min_key` to `max_key`; without the mean, the extremes as
// lines. Whatever is missing is named in `skipped`.
void add_range_chart(const MetricsTable& table, const ChartSpec& spec, const std::string& mean_key,
                     const std::string& min_key, const std::string& max_key, std::vector<MetricsChart>& charts,
                     std::vector<std::string>& skipped) {
  const std::string mean_reason = missing_reason(table, mean_key);
  const std::string min_reason = missing_reason(table, min_key);
  const std::string max_reason = missing_reason(table, max_key);
  if (!mean_reason.empty() && !min_reason.empty() && !max_reason.empty()) {
    skipped.push_back(fmt::format("{}: {}; {}; {}", spec.file, mean_reason, min_reason, max_reason));
    return;
  }
  MetricsChart out = new_chart(table, spec);
  if (mean_reason.empty()) {
    PlotSeries mean = series_of(table, mean_key);
    if (min_reason.empty() && max_reason.empty()) {
      mean.band_low = table.columns.at(min_key);
      mean.band_high = table.columns.at(max_key);
      mean.band_name = "min to max";
    } else {
      skipped.push_back(fmt::format("{} band ({} to {}): {}", spec.file, min_key, max_key,
                                    min_reason.empty() ? max_reason : min_reason));
    }
    out.chart.series.push_back(std::move(mean));
  } else {
    skipped.push_back(fmt::format("{} line ({}): {}", spec.file, mean_key, mean_reason));
    for (const std::string* key : {&max_key, &min_key}) {
      if (missing_reason(table, *key).empty()) out.chart.series.push_back(series_of(table, *key));
    }
  }
  charts.push_back(std::move(out));
}

// The per-step counts of samples whose reward failed: drawn on their own chart, never on
// the reward axis (a count of 40 would flatten a reward curve in [0, 1]).
bool is_reward_counter_key(const std::string& key) { return key == "reward/fallbacks" || key == "reward/timeouts"; }

// reward/<name>: one reward's weighted mean. reward/mean and reward/std describe the
// total; the counters are not rewards.
bool is_reward_name_key(const std::string& key) {
  if (key.rfind("reward/", 0) != 0 || is_reward_counter_key(key)) return false;
  const std::string name = key.substr(7);
  return !name.empty() && name.find('/') == std::string::npos && name != "mean" && name != "std";
}

// reward/<name>/<part>: a named sub-score of one reward. Sets `name` and `part`.
bool is_reward_part_key(const std::string& key, std::string& name, std::string& part) {
  if (key.rfind("reward/", 0) != 0) return false;
  const size_t slash = key.find('/', 7);
  if (slash == std::string::npos || slash == 7 || slash + 1 == key.size()) return false;
  if (key.find('/', slash + 1) != std::string::npos) return false;
  name = key.substr(7, slash - 7);
  part = key.substr(slash + 1);
  return true;
}

// `text` with every character (UTF-8, not byte) outside [A-Za-z0-9_-] written as '_': a
// file name every system accepts and a URL needs no escaping for.
std::string file_stem(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte & 0xC0) == 0x80) continue;  // the rest of a character already written as '_'
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    out += keep ? c : '_';
  }
  return out;
}

// One chart per reward/<name>/<part>, in the order the keys first appear.
void add_reward_part_charts(const MetricsTable& table, std::vector<MetricsChart>& charts,
                            std::vector<std::string>& skipped) {
  std::set<std::string> taken;
  for (const std::string& key : table.keys) {
    std::string name, part;
    if (!is_reward_part_key(key, name, part)) continue;
    const std::string stem = file_stem("reward_" + name + "_" + part);
    std::string file = stem + ".svg";
    for (int k = 2; taken.count(file); ++k) file = fmt::format("{}-{}.svg", stem, k);
    taken.insert(file);
    add_single_chart(table, {file, fmt::format("Reward {}: {}", name, part), "score", false, "Reward parts"}, key,
                     charts, skipped);
  }
  if (taken.empty()) skipped.push_back("reward_<name>_<part>.svg: no reward/<name>/<part> metrics in metrics.jsonl");
}

}  // namespace

MetricsTable read_metrics_jsonl(const std::string& path, std::vector<std::string>* warnings) {
  const std::optional<std::string> text = read_file(path);
  if (!text) throw Error(fmt::format("cannot read {}", path));

  std::vector<std::map<std::string, double>> rows;
  std::map<double, size_t> row_of_step;
  std::vector<std::string> keys;
  size_t line_number = 0;
  for (size_t begin = 0; begin < text->size();) {
    size_t end = text->find('\n', begin);
    const bool terminated = end != std::string::npos;
    if (!terminated) end = text->size();
    const std::string line = text->substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;

    nlohmann::ordered_json object;  // keys in the writer's order: the legend follows it
    try {
      object = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      if (!terminated) {
        if (warnings) warnings->push_back(fmt::format("{}:{}: skipped the unfinished last line", path, line_number));
        break;
      }
      throw Error(fmt::format("{}:{}: not valid JSON: {}", path, line_number, parse_error_text(e.what())));
    }
    if (!object.is_object()) {
      throw Error(fmt::format("{}:{}: expected a JSON object (one step's metrics), got {}", path, line_number,
                              object.type_name()));
    }
    auto step = object.find("step");
    if (step == object.end() || !step->is_number() || !std::isfinite(step->get<double>())) {
      throw Error(fmt::format("{}:{}: the row has no numeric \"step\"", path, line_number));
    }
    std::map<std::string, double> row;
    for (const auto& [key, value] : object.items()) {
      if (key == "step") continue;
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      row[key] = value.is_number() ? value.get<double>() : kNaN;  // null: a NaN or inf the writer could not spell
    }
    auto [at, fresh] = row_of_step.emplace(step->get<double>(), rows.size());
    if (fresh) {
      rows.push_back(std::move(row));
    } else {
      rows[at->second] = std::move(row);
    }
  }

  MetricsTable table;
  table.keys = keys;
  for (const std::string& key : keys) table.columns[key].reserve(rows.size());
  for (const auto& [step, index] : row_of_step) {  // std::map: ascending steps
    table.steps.push_back(step);
    for (const std::string& key : keys) {
      auto value = rows[index].find(key);
      table.columns[key].push_back(value == rows[index].end() ? kNaN : value->second);
    }
  }
  return table;
}

std::vector<MetricsChart> metrics_charts(const MetricsTable& table, std::vector<std::string>& skipped) {
  std::vector<MetricsChart> charts;

  const std::string reward_reason = missing_reason(table, "reward/mean");
  if (!reward_reason.empty()) {
    skipped.push_back("reward.svg: " + reward_reason);
  } else {
    MetricsChart reward = new_chart(table, {"reward.svg", "Reward", "reward"});
    PlotSeries mean = series_of(table, "reward/mean");
    if (const std::vector<double>* std_dev = column(table, "reward/std"); std_dev && has_finite(*std_dev)) {
      for (size_t i = 0; i < mean.y.size(); ++i) {
        mean.band_low.push_back(mean.y[i] - (*std_dev)[i]);
        mean.band_high.push_back(mean.y[i] + (*std_dev)[i]);
      }
      mean.band_name = "±1 reward/std";
    } else {
      skipped.push_back("reward.svg band (±reward/std): " + missing_reason(table, "reward/std"));
    }
    reward.chart.series.push_back(std::move(mean));
    charts.push_back(std::move(reward));
  }
  std::vector<std::string> reward_names;
  std::copy_if(table.keys.begin(), table.keys.end(), std::back_inserter(reward_names), is_reward_name_key);
  add_keys_chart(table, {"rewards.svg", "Rewards (each one's weighted mean)", "reward"}, reward_names,
                 "reward/<name>", charts, skipped);
  std::vector<std::string> counter_keys;
  std::copy_if(table.keys.begin(), table.keys.end(), std::back_inserter(counter_keys), is_reward_counter_key);
  add_keys_chart(table, {"failures.svg", "Reward failures (samples per step)", "samples", true}, counter_keys,
                 "reward/fallbacks, reward/timeouts", charts, skipped);
  add_single_chart(table, {"kl.svg", "KL divergence to the reference", "actor/kl"}, "actor/kl", charts, skipped);
  add_single_chart(table, {"entropy.svg", "Policy entropy", "actor/entropy"}, "actor/entropy", charts, skipped);
  add_range_chart(table, {"ratio.svg", "Importance ratio (new / old policy)", "ratio"}, "actor/ratio_mean",
                  "actor/ratio_min", "actor/ratio_max", charts, skipped);
  add_range_chart(table, {"advantages.svg", "Advantages", "advantage"}, "critic/advantages/mean",
                  "critic/advantages/min", "critic/advantages/max", charts, skipped);
  add_range_chart(table, {"response_length.svg", "Response length (tokens)", "tokens", true}, "response/length_mean",
                  "response/length_min", "response/length_max", charts, skipped);
  add_single_chart(table, {"clip_ratio.svg", "Responses cut at max_new_tokens (share)", "response/clip_ratio", true},
                   "response/clip_ratio", charts, skipped);
  add_single_chart(table, {"prompt_length.svg", "Prompt length (tokens)", "prompt/length_mean", true},
                   "prompt/length_mean", charts, skipped);
  auto under = [&](const std::string& prefix) {
    std::vector<std::string> keys;
    for (const std::string& key : table.keys) {
      if (key.rfind(prefix, 0) == 0) keys.push_back(key);
    }
    return keys;
  };
  std::vector<std::string> val_keys;  // scores of the evaluation on data.val (not its lengths)
  for (const std::string& key : under("val/")) {
    if (key.rfind("val/response/", 0) != 0) val_keys.push_back(key);
  }
  add_keys_chart(table, {"validation.svg", "Validation (data.val)", "score"}, val_keys, "val/*", charts, skipped);
  add_keys_chart(table, {"timings.svg", "Step timings", "seconds", true}, under("time/"), "time/*", charts, skipped);
  add_keys_chart(table, {"throughput.svg", "Throughput", "tokens / s", true}, under("perf/"), "perf/*", charts,
                 skipped);
  add_reward_part_charts(table, charts, skipped);
  return charts;
}

}  // namespace tandem
