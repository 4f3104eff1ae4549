// How a run's control plane and workers are set up: the address the controller binds,
// whether CURVE guards it, and which launcher starts the workers (launcher.kind).
#pragma once

#include "controller/launch/launcher.h"
#include "controller/workers/worker_pool.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace tandem {

struct Config;

struct LaunchPlan {
  PoolOptions pool;
  std::unique_ptr<Launcher> launcher;
  std::string description;  // one line for the log: kind, address, authentication
};

// `socket_dir`: where ipc sockets go (local kind). Keys go to RUN_DIR/keys when CURVE is
// on. Throws UsageError when the kind cannot run here (slurm outside an allocation).
LaunchPlan plan_launch(const Config& config, const std::string& run_dir, const std::string& socket_dir,
                       const std::vector<WorkerId>& workers);

// This host's logical cores (1 when the system cannot tell).
int64_t host_cores();

// Intra-op threads of each learner rank: learner.threads, or 0: this host's cores shared
// out between the ranks (one each at least).
int64_t learner_threads_per_rank(const Config& config);

// The worker roles that have their cores to themselves while they compute: the learner's
// (and colocated workers') on a synchronous run this host's launcher starts, when its
// ranks' threads fit the host's cores. Empty otherwise.
std::set<std::string> roles_computing_alone(const Config& config);

// Whether launcher.auth asks for CURVE on a control plane bound at `bind_address`.
bool curve_wanted(const std::string& auth, const std::string& bind_address);

}  // namespace tandem
