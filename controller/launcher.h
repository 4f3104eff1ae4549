// Launchers start worker processes and report how they end. The local launcher forks
// children on this host; Slurm and Kubernetes launchers (later) start the same
// `tandem worker` command line elsewhere.
#pragma once

#include "core/process.h"
#include "core/protocol.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

struct LaunchRequest {
  WorkerId id;
  std::string controller_address;
  std::string log_path;             // the worker's log file (its stdout/stderr too)
  double heartbeat_interval_s = 0.5;
  double controller_timeout_s = 10.0;
  size_t max_message_bytes = 64u << 20;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts one worker; returns its pid (0 when not known on this host).
  virtual int launch(const LaunchRequest& request) = 0;
  // Workers that ended since the last call, with how they ended.
  virtual std::vector<std::pair<WorkerId, ExitStatus>> reap() = 0;
  virtual void send_signal(const WorkerId& id, int signal) = 0;
  // Waits up to grace_s for every worker to exit, then kills and reaps the rest.
  virtual void stop_all(double grace_s) = 0;
};

// `tandem_binary`: the executable that hosts every role (normally /proc/self/exe).
std::unique_ptr<Launcher> make_local_launcher(const std::string& tandem_binary);

// The path of the running executable.
std::string current_executable();

}  // namespace tandem
