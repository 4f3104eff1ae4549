#include "controller/plot_metrics.h"

#include "core/error.h"
#include "core/files.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

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

// One chart of the metrics under `prefix` ("time/"), each a series.
void add_prefix_chart(const MetricsTable& table, const std::string& file, const std::string& title,
                      const std::string& y_label, const std::string& prefix, std::vector<MetricsChart>& charts,
                      std::vector<std::string>& skipped) {
  MetricsChart out{file, {}};
  out.chart.title = title;
  out.chart.y_label = y_label;
  out.chart.x = table.steps;
  for (const std::string& key : table.keys) {
    if (key.rfind(prefix, 0) != 0 || !has_finite(table.columns.at(key))) continue;
    PlotSeries series;
    series.name = key;
    series.y = table.columns.at(key);
    out.chart.series.push_back(std::move(series));
  }
  if (out.chart.series.empty()) {
    skipped.push_back(fmt::format("{}: no finite {}* metrics in metrics.jsonl", file, prefix));
  } else {
    charts.push_back(std::move(out));
  }
}

// One chart of a single metric.
void add_single_chart(const MetricsTable& table, const std::string& file, const std::string& title,
                      const std::string& key, std::vector<MetricsChart>& charts, std::vector<std::string>& skipped) {
  const std::string reason = missing_reason(table, key);
  if (!reason.empty()) {
    skipped.push_back(file + ": " + reason);
    return;
  }
  MetricsChart out{file, {}};
  out.chart.title = title;
  out.chart.y_label = key;
  out.chart.x = table.steps;
  PlotSeries series;
  series.name = key;
  series.y = table.columns.at(key);
  out.chart.series.push_back(std::move(series));
  charts.push_back(std::move(out));
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
    MetricsChart reward{"reward.svg", {}};
    reward.chart.title = "Reward";
    reward.chart.y_label = "reward";
    reward.chart.x = table.steps;
    PlotSeries mean;
    mean.name = "reward/mean";
    mean.y = table.columns.at("reward/mean");
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
  add_single_chart(table, "kl.svg", "KL divergence to the reference", "actor/kl", charts, skipped);
  add_single_chart(table, "entropy.svg", "Policy entropy", "actor/entropy", charts, skipped);
  add_single_chart(table, "response_length.svg", "Response length (tokens)", "response/length_mean", charts, skipped);
  add_prefix_chart(table, "timings.svg", "Step timings", "seconds", "time/", charts, skipped);
  add_prefix_chart(table, "throughput.svg", "Throughput", "tokens / s", "perf/", charts, skipped);
  for (MetricsChart& c : charts) {
    // Durations, rates and lengths read best against 0; reward, KL and entropy by their range.
    c.chart.y_include_zero = c.file == "timings.svg" || c.file == "throughput.svg" || c.file == "response_length.svg";
  }
  return charts;
}

}  // namespace tandem
