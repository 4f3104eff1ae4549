// SIGINT/SIGTERM for the controller: the first one sets a flag that the controller's
// event loop turns into an orderly shutdown of its workers; a second one ends the
// process at once (its children follow through PR_SET_PDEATHSIG).
//
// With `stop_on_sigterm` (Slurm's way to end a job: `scancel --batch --signal=TERM`, or
// sbatch --signal=B:TERM@N before the time limit), the first SIGTERM instead asks the run
// to stop after its current step, with a checkpoint; a SIGINT or a second SIGTERM then
// interrupts as above.
#pragma once

#include "core/error.h"

namespace tandem {

// The controller received SIGINT or SIGTERM. Whoever notices first throws it (the worker
// pool's event loop, a Python reward call waited on by the scoring thread), so that the
// run ends as interrupted (exit 128 + N, resumable) whichever thread that was.
class Interrupted : public Error {
 public:
  explicit Interrupted(int signal);
  int signal() const { return signal_; }

 private:
  int signal_;
};

void install_interrupt_handlers(bool stop_on_sigterm = false);
// The signal number received (SIGINT or SIGTERM), or 0.
int pending_interrupt();
// The signal that asked for a stop after the current step (SIGTERM), or 0.
int pending_stop_request();

}  // namespace tandem
