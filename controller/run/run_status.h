// RUN_DIR/status.json: what the controller says about its run, rewritten atomically at
// each change (start, every step, a worker restarted, the end). `tandem status` reads it;
// `tandem stop` leaves RUN_DIR/stop_request, which the controller honours after its step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct RunWorkerStatus {
  std::string name;      // role-rank
  std::string state;     // starting | ready | failed | stopped
  int pid = 0;           // 0: not known here (a Slurm step, an external worker)
  std::string hostname;
  std::string address;
  int64_t restarts = 0;
  std::string log_path;
};

struct RunStatus {
  std::string state;  // starting | running | finished | failed | stopped | interrupted
  int pid = 0;        // the controller's
  std::string hostname;
  double started_unix = 0;
  double updated_unix = 0;
  int64_t step = 0;     // the last step finished
  int64_t steps = 0;    // experiment.steps
  double step_seconds = 0;  // the mean of the steps run since (re)starting; 0 before one ends
  std::vector<RunWorkerStatus> workers;
  std::string last_error;
  std::string last_error_log;  // the log file that says more
};

// Seconds since the Unix epoch, as status.json's times are.
double unix_now();

std::string run_status_path(const std::string& run_dir);
std::string stop_request_path(const std::string& run_dir);

void write_run_status(const std::string& run_dir, const RunStatus& status);
// nullopt when there is no status.json; Error naming the file when it is unreadable.
std::optional<RunStatus> read_run_status(const std::string& run_dir);

// What a run is, as `tandem status` says it and exits with it:
//   running (or starting) with its controller alive (or on another host)  exit 0
//   finished                                                              exit 0
//   failed, with its error                                                exit 1
//   controller gone: status.json says running but its pid is not alive    exit 1
//   interrupted (a signal) or stopped (tandem stop): tandem resume goes on exit 3
struct RunCondition {
  std::string text;
  int exit_code = 0;
  bool live = false;  // the controller is (or may be) running it: workers and an ETA mean something
};
RunCondition run_condition(const RunStatus& status, bool alive, const std::string& this_hostname);

// What `tandem status` prints, for the run's `condition` (run_condition above).
std::string describe_run_status(const RunStatus& status, const RunCondition& condition, const std::string& run_dir,
                                double now_unix);

}  // namespace tandem
