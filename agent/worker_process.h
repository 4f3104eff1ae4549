// A child process spoken to in JSON lines over its stdin and stdout: the Python tool
// workers (agent/python_tool.h) and environment workers (agent/python_environment.h).
// Its first line says it is ready ({"ready": true, ...}) or why not ({"error": TEXT}).
#pragma once

#include "core/process.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

class WorkerProcess {
 public:
  using Clock = std::chrono::steady_clock;

  WorkerProcess() = default;
  ~WorkerProcess() { stop(); }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Starts `argv` (stderr appended to `log_path`, or ours when empty) and reads its ready
  // line within `startup_s`. Returns that line; an Error starting with `what` when the
  // worker says why not, dies, or stays silent.
  nlohmann::ordered_json start(const std::vector<std::string>& argv, const std::string& log_path, double startup_s,
                               const std::string& what);
  // One request line (a newline is added). False when the worker is gone.
  bool send(const nlohmann::json& message);
  // The next whole line before `deadline`; nullopt at the deadline. Throws ToolUnavailable
  // naming `what` when the worker's output closed (it died).
  std::optional<std::string> read_line(Clock::time_point deadline, const std::string& what);
  // Ends the worker: end of input, a short wait, then SIGKILL.
  void stop();
  // Kills it at once (a call past its deadline).
  void kill();
  bool running() const { return to_child_ >= 0; }

 private:
  void close_pipes();

  ChildProcess process_;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string received_;  // bytes read, not yet a whole line
};

// `seconds` from now.
WorkerProcess::Clock::time_point deadline_in(double seconds);

}  // namespace tandem
