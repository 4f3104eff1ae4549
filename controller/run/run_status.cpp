#include "controller/run/run_status.h"

#include "core/error.h"
#include "core/files.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>

namespace tandem {
namespace {

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string run_status_path(const std::string& run_dir) { return run_dir + "/status.json"; }
std::string stop_request_path(const std::string& run_dir) { return run_dir + "/stop_request"; }

void write_run_status(const std::string& run_dir, const RunStatus& s) {
  nlohmann::json workers = nlohmann::json::array();
  for (const RunWorkerStatus& w : s.workers) {
    workers.push_back({{"name", w.name}, {"state", w.state}, {"pid", w.pid}, {"hostname", w.hostname},
                       {"address", w.address}, {"restarts", w.restarts}, {"log", w.log_path}});
  }
  const nlohmann::json json = {{"state", s.state},           {"pid", s.pid},
                               {"hostname", s.hostname},     {"started_unix", s.started_unix},
                               {"updated_unix", s.updated_unix}, {"step", s.step},
                               {"steps", s.steps},           {"step_seconds", s.step_seconds},
                               {"workers", workers},         {"last_error", s.last_error},
                               {"last_error_log", s.last_error_log}};
  write_file_atomic(run_status_path(run_dir), json.dump(2) + "\n");
}

std::optional<RunStatus> read_run_status(const std::string& run_dir) {
  const std::string path = run_status_path(run_dir);
  const std::optional<std::string> text = read_file(path);
  if (!text) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(*text);
    RunStatus s;
    s.state = j.at("state").get<std::string>();
    s.pid = j.at("pid").get<int>();
    s.hostname = j.at("hostname").get<std::string>();
    s.started_unix = j.at("started_unix").get<double>();
    s.updated_unix = j.at("updated_unix").get<double>();
    s.step = j.at("step").get<int64_t>();
    s.steps = j.at("steps").get<int64_t>();
    s.step_seconds = j.at("step_seconds").get<double>();
    s.last_error = j.at("last_error").get<std::string>();
    s.last_error_log = j.at("last_error_log").get<std::string>();
    for (const nlohmann::json& w : j.at("workers")) {
      s.workers.push_back({w.at("name").get<std::string>(), w.at("state").get<std::string>(), w.at("pid").get<int>(),
                           w.at("hostname").get<std::string>(), w.at("address").get<std::string>(),
                           w.at("restarts").get<int64_t>(), w.at("log").get<std::string>()});
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{} is not a tandem run status: {}", path, e.what()));
  }
}

RunCondition run_condition(const RunStatus& s, bool alive, const std::string& this_hostname) {
  const bool active = s.state == "starting" || s.state == "running";
  if (active && s.hostname == this_hostname && !alive) {
    return {fmt::format("controller gone: the controller (pid {}) ended without saying how; its log may say why "
                        "(tandem resume continues from the newest checkpoint)",
                        s.pid),
            1, false};
  }
  if (active && s.hostname != this_hostname) {
    return {fmt::format("{} on {} (pid {}; not checked from here)", s.state, s.hostname, s.pid), 0, true};
  }
  if (active) return {fmt::format("{} (pid {})", s.state, s.pid), 0, true};
  if (s.state == "finished") return {"finished", 0, false};
  if (s.state == "failed") {
    return {s.last_error.empty() ? std::string("failed") : fmt::format("failed: {}", s.last_error), 1, false};
  }
  if (s.state == "interrupted" || s.state == "stopped") {
    return {fmt::format("{} (tandem resume continues it)", s.state), 3, false};
  }
  return {s.state.empty() ? std::string("unknown") : s.state, 1, false};
}

std::string describe_run_status(const RunStatus& s, const RunCondition& condition, const std::string& run_dir,
                                double now_unix) {
  const bool active = condition.live;
  std::string out =
      fmt::format("run:      {}\nstate:    {}\nstep:     {} / {}\n", run_dir, condition.text, s.step, s.steps);
  if (active && s.step_seconds > 0 && s.step < s.steps) {
    out += fmt::format("eta:      {} ({} per step)\n", duration_text(s.step_seconds * static_cast<double>(s.steps - s.step)),
                       duration_text(s.step_seconds));
  }
  out += fmt::format("updated:  {} ago\n", duration_text(now_unix - s.updated_unix));
  out += "workers:\n";
  for (const RunWorkerStatus& w : s.workers) {
    // A worker does not outlive its run's controller: "ready" from a dead run is stale.
    const bool stale = !active && (w.state == "ready" || w.state == "starting");
    out += fmt::format("  {:<14} {:<9} pid {:<8} {:<24} restarts {}\n", w.name, stale ? "exited" : w.state, w.pid == 0 ? std::string("-") : std::to_string(w.pid),
                       w.hostname.empty() ? "-" : w.hostname + " " + w.address, w.restarts);
  }
  if (!s.last_error.empty()) {
    if (s.state != "failed") out += fmt::format("last error: {}\n", s.last_error);  // failed: on the state line
    if (!s.last_error_log.empty()) out += fmt::format("  its log: {}\n", s.last_error_log);
  }
  return out;
}

}  // namespace tandem
