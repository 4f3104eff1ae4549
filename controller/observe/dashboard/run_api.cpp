#include "controller/observe/dashboard/run_api.h"
#include "controller/run/run_lock.h"

#include "controller/observe/dashboard/jsonl_files.h"
#include "controller/observe/dashboard/log_errors.h"
#include "controller/run/run_status.h"
#include "core/files.h"
#include "core/net_address.h"
#include "core/process.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>

namespace tandem::dashboard {
namespace {

using nlohmann::json;

constexpr size_t kMaxStringChars = 2000;        // a sample's text longer than this is shortened
constexpr size_t kSamplesTailBytes = 4u << 20;  // samples.jsonl: how much of its end is read
constexpr size_t kLogTailBytes = 512u << 10;    // each log: how much of its end is scanned
constexpr size_t kPhaseRowsKept = 1000;         // worker_phases.jsonl rows held in memory

// Log lines and samples may hold bytes that are not UTF-8: they are replaced, not thrown on.
std::string to_text(const json& document) { return document.dump(-1, ' ', false, json::error_handler_t::replace); }

// Parses one JSONL line; nullopt for a line that is not a JSON object (a torn write that
// a crash left in the middle of the file).
std::optional<json> parse_row(const std::string& line) {
  json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!row.is_object()) return std::nullopt;
  return row;
}

double step_of(const json& row, double fallback) {
  const auto it = row.find("step");
  return it != row.end() && it->is_number() ? it->get<double>() : fallback;
}

// The numeric values of one metrics row, nested objects flattened with '/'.
void numeric_values(const json& object, const std::string& prefix, std::map<std::string, double>& out) {
  for (const auto& [key, value] : object.items()) {
    const std::string name = prefix + key;
    if (value.is_number()) {
      out[name] = value.get<double>();
    } else if (value.is_object()) {
      numeric_values(value, name + "/", out);
    }
  }
}

// metrics.jsonl as columns: one x (the step) and one value per metric, NaN where a row
// lacks a key. Columns take 8 bytes per step and metric, however long the JSON was.
struct MetricColumns {
  std::vector<double> steps;
  std::map<std::string, std::vector<double>> values;

  void append(const json& row) {
    const double step = step_of(row, steps.empty() ? 1.0 : steps.back() + 1.0);
    std::map<std::string, double> numbers;
    numeric_values(row, "", numbers);
    numbers.erase("step");
    const size_t index = steps.size();
    steps.push_back(step);
    for (const auto& [key, value] : numbers) {
      std::vector<double>& column = values[key];
      column.resize(index, std::numeric_limits<double>::quiet_NaN());  // a key new at this step
      column.push_back(value);
    }
    for (auto& [key, column] : values) column.resize(steps.size(), std::numeric_limits<double>::quiet_NaN());
  }
};

json shortened_strings(json value) {
  if (value.is_string()) {
    std::string& s = value.get_ref<std::string&>();
    if (s.size() > kMaxStringChars) {
      // Cut at a UTF-8 character boundary, not inside one.
      size_t cut = kMaxStringChars;
      while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
      s = s.substr(0, cut) + "...";
    }
  } else if (value.is_structured()) {
    for (auto& item : value) item = shortened_strings(std::move(item));
  }
  return value;
}

}  // namespace

struct RunApi::Followed {
  explicit Followed(const std::string& run_dir)
      : metrics_file(run_dir + "/metrics.jsonl"), phases_file(run_dir + "/worker_phases.jsonl") {}

  // Brings `columns` up to what metrics.jsonl holds now.
  void update_metrics() {
    JsonlFollower::NewLines batch;
    do {
      batch = metrics_file.read_new_lines();
      if (batch.restarted) {
        columns = MetricColumns{};
        ++metrics_epoch;
      }
      for (const std::string& line : batch.lines) {
        if (auto row = parse_row(line)) columns.append(*row);
      }
    } while (batch.more);
  }

  void update_phases() {
    JsonlFollower::NewLines batch;
    do {
      batch = phases_file.read_new_lines();
      phases_present = batch.present;
      if (batch.restarted) {
        phase_rows.clear();
        ++phases_epoch;
      }
      for (const std::string& line : batch.lines) {
        if (auto row = parse_row(line)) phase_rows.push_back(std::move(*row));
        if (phase_rows.size() > kPhaseRowsKept) phase_rows.pop_front();
      }
    } while (batch.more);
  }

  JsonlFollower metrics_file;
  MetricColumns columns;
  int64_t metrics_epoch = 1;

  JsonlFollower phases_file;
  std::deque<json> phase_rows;
  bool phases_present = false;
  int64_t phases_epoch = 1;
};

RunApi::RunApi(std::string run_dir) : run_dir_(std::move(run_dir)), followed_(std::make_unique<Followed>(run_dir_)) {}

RunApi::~RunApi() = default;

std::string RunApi::status() {
  json out = json::object();
  const std::optional<std::string> text = read_file(run_status_path(run_dir_));
  json status = text ? json::parse(*text, nullptr, /*allow_exceptions=*/false) : json();
  if (status.is_object()) out = status;
  out["status_present"] = status.is_object();
  if (const std::optional<RunLockHolder> lock = run_lock_holder(run_dir_)) {
    out["controller_alive"] = lock->held;  // the run directory's lock answers from any host
  } else if (status.is_object() && status.value("pid", 0) > 0 && status.value("hostname", "") == this_hostname()) {
    out["controller_alive"] = process_alive(status.value("pid", 0));
  } else {
    out["controller_alive"] = nullptr;  // not checkable from this host
  }
  out["finished"] = std::filesystem::exists(run_dir_ + "/finished.json");
  out["run_dir"] = std::filesystem::absolute(run_dir_).lexically_normal().string();
  out["now"] = unix_now();
  return to_text(out);
}

std::string RunApi::metrics(double after_step, size_t max_points) {
  std::lock_guard<std::mutex> lock(mutex_);
  followed_->update_metrics();
  const MetricColumns& columns = followed_->columns;
  size_t first = 0;
  while (first < columns.steps.size() && !(columns.steps[first] > after_step)) ++first;
  const size_t rows = columns.steps.size() - first;
  // Evenly thinned to at most max_points rows; the newest row is always among them so
  // that the page's next `after` is the real last step.
  const size_t stride = max_points > 0 && rows > max_points ? (rows + max_points - 1) / max_points : 1;
  std::vector<size_t> picked;
  for (size_t i = first; i < columns.steps.size(); i += stride) picked.push_back(i);
  if (rows > 0 && picked.back() != columns.steps.size() - 1) picked.push_back(columns.steps.size() - 1);

  json steps = json::array();
  for (size_t i : picked) steps.push_back(columns.steps[i]);
  json series = json::object();
  for (const auto& [key, column] : columns.values) {
    json values = json::array();
    for (size_t i : picked) values.push_back(column[i]);  // NaN is written as null
    series[key] = std::move(values);
  }
  json out = {{"epoch", followed_->metrics_epoch},
              {"steps", std::move(steps)},
              {"series", std::move(series)},
              {"total_rows", columns.steps.size()}};
  out["last_step"] = columns.steps.empty() ? json(nullptr) : json(columns.steps.back());
  return to_text(out);
}

std::string RunApi::samples(size_t count) {
  json rows = json::array();
  const std::string path = run_dir_ + "/samples.jsonl";
  const std::vector<std::string> lines = read_tail_lines(path, count, kSamplesTailBytes);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (auto row = parse_row(*it)) rows.push_back(shortened_strings(std::move(*row)));
  }
  return to_text({{"present", std::filesystem::exists(path)}, {"rows", std::move(rows)}});
}

std::string RunApi::phases(double after_step, size_t limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  followed_->update_phases();
  json rows = json::array();
  const std::deque<json>& kept = followed_->phase_rows;
  size_t first = kept.size();
  while (first > 0 && kept.size() - first < limit && step_of(kept[first - 1], 0) > after_step) --first;
  for (size_t i = first; i < kept.size(); ++i) rows.push_back(kept[i]);
  return to_text({{"present", followed_->phases_present}, {"epoch", followed_->phases_epoch}, {"rows", std::move(rows)}});
}

std::string RunApi::errors(size_t count) {
  json lines = json::array();
  for (const LogErrorLine& line : read_log_errors(run_dir_ + "/logs", count, kLogTailBytes)) {
    lines.push_back({{"time", line.time}, {"level", line.level}, {"log", line.log}, {"text", line.text}});
  }
  return to_text({{"lines", std::move(lines)}});
}

}  // namespace tandem::dashboard
