// learner.snapshot: how a run's snapshot directory in learner.snapshot_dir is named,
// "tandem-learner-HOST-PID" after the controller's host and pid, so that the controller
// and the learners on its host can tell a run's snapshots and whether their run is gone.
#pragma once

#include <cctype>
#include <string>

namespace tandem {

// "tandem-learner-HOST-" for the controller host `host` (characters outside [A-Za-z0-9.-] as "_").
inline std::string learner_snapshot_prefix(std::string host) {
  for (char& ch : host) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.') ch = '_';
  }
  return "tandem-learner-" + host + "-";
}

}  // namespace tandem
