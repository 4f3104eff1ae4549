// `tandem status RUN_DIR` (what RUN_DIR/status.json says, and whether its controller runs)
// and `tandem stop RUN_DIR` (asks the controller to checkpoint after its step and stop).
#include "controller/cli/cli.h"
#include "controller/run/run_lock.h"
#include "controller/run/run_status.h"
#include "core/error.h"
#include "core/files.h"
#include "core/net_address.h"
#include "core/process.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

namespace tandem {
namespace {

RunStatus require_status(const std::string& run_dir, const char* command) {
  if (!std::filesystem::is_regular_file(run_dir + "/config.yaml")) {
    throw UsageError(fmt::format("tandem {}: {} is not a run directory (no config.yaml in it)", command, run_dir));
  }
  std::optional<RunStatus> status = read_run_status(run_dir);
  if (!status) {
    throw UsageError(fmt::format("tandem {}: {} has no status.json: its controller has not started its workers yet, "
                                 "or it was made by a tandem without `tandem status`",
                                 command, run_dir));
  }
  return *status;
}

bool controller_alive_here(const RunStatus& status) {
  return status.hostname == this_hostname() && status.pid > 0 && process_alive(status.pid);
}

// Whether the run's controller lives, and the host that answer holds for: the run
// directory's lock answers from any host that sees the directory; runs made before the
// lock existed fall back to the pid, checkable on the controller's host only.
struct Liveness {
  bool alive = false;
  std::string checked_from;
};
Liveness controller_liveness(const std::string& run_dir, const RunStatus& status) {
  if (const std::optional<RunLockHolder> lock = run_lock_holder(run_dir)) return {lock->held, status.hostname};
  return {controller_alive_here(status), this_hostname()};
}

}  // namespace

int cli_status(const StatusArgs& args) {
  const RunStatus status = require_status(args.run_dir, "status");
  const Liveness liveness = controller_liveness(args.run_dir, status);
  const RunCondition condition = run_condition(status, liveness.alive, liveness.checked_from);
  std::fputs(describe_run_status(status, condition, args.run_dir, unix_now()).c_str(), stdout);
  return condition.exit_code;
}

int cli_stop(const StopArgs& args) {
  const RunStatus status = require_status(args.run_dir, "stop");
  if (status.state != "starting" && status.state != "running") {
    throw UsageError(fmt::format("tandem stop: the run in {} is not running (it is {})", args.run_dir, status.state));
  }
  const Liveness liveness = controller_liveness(args.run_dir, status);
  if (liveness.checked_from == status.hostname && !liveness.alive) {
    throw UsageError(fmt::format("tandem stop: the run in {} is not running (its controller, pid {}, is gone)",
                                 args.run_dir, status.pid));
  }
  // A file, not a signal: it works from any host that sees the run directory.
  write_file_atomic(stop_request_path(args.run_dir), "stop\n");
  std::fprintf(stderr, "tandem: asked the run in %s to stop after its current step (step %lld of %lld), with a "
               "checkpoint\n", args.run_dir.c_str(), static_cast<long long>(status.step + 1),
               static_cast<long long>(status.steps));
  return 0;
}

}  // namespace tandem
