// Launchers start worker processes and report how they end. Every kind starts the same
// `tandem worker` command line (worker_argv): the local launcher as children on this
// host, the Slurm launcher as `srun` job steps on the allocation's nodes
// (launcher_slurm.cpp), and the external one not at all: the workers are started by
// someone else (Kubernetes, a supervisor, a person) from RUN_DIR/workers.txt.
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
  std::string keys_path;  // the worker's CURVE key file; empty: no CURVE
  // Nothing else busy shares the worker's cores while it computes (missing_math_environment
  // in core/math_environment.h): its OpenMP threads may spin briefly between regions.
  bool computes_alone = false;
};

// `tandem worker ...` for a request (no key material: the key file's path goes in the
// environment, worker_environment).
std::vector<std::string> worker_argv(const std::string& tandem_binary, const LaunchRequest& request);
std::vector<std::string> worker_environment(const LaunchRequest& request);

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

// Starts nothing: appends each worker's command line (with its key file as --keys) to
// `commands_path` for whoever starts the workers, and waits for them to register.
// reap() never reports an exit (a dead worker shows as missed heartbeats).
std::unique_ptr<Launcher> make_external_launcher(const std::string& tandem_binary, const std::string& commands_path);

}  // namespace tandem
