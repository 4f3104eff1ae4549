// `tandem profile RUN_DIR --step N`: what a step's Chrome trace (controller/observe/step_trace.h)
// says about where its time went.
//
// The controller's phases (category "phase": rollout, reward, train, sync, ...) follow one
// another; in each, the controller waits for commands its workers run in parallel. The
// critical path of a phase is the command that finished last (the others waited for
// it), with its biggest inner spans; what is left of the phase is the controller's own
// work. A worker's idle share is the part of the step in which it ran no command.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct ProfileSpan {
  std::string name;
  double seconds = 0;
};

struct PhaseProfile {
  std::string name;
  double begin_s = 0;                  // from the step's start
  double seconds = 0;
  std::string critical_process;        // the worker whose command ended last; empty: the controller's own work
  std::string critical_command;
  double critical_seconds = 0;
  std::vector<ProfileSpan> critical_parts;  // that command's inner spans by total time, largest first
};

struct WorkerProfile {
  std::string name;
  double busy_seconds = 0;  // in commands
  double idle_share = 0;    // of the step
};

struct StepProfile {
  int64_t step = 0;
  double seconds = 0;
  std::vector<PhaseProfile> phases;
  std::vector<WorkerProfile> workers;
};

// Throws Error naming what is missing when `trace` is not a step trace of tandem's.
StepProfile profile_step_trace(const nlohmann::json& trace);
std::string describe_step_profile(const StepProfile& profile);

}  // namespace tandem
