// SIGINT/SIGTERM for the controller: the first one sets a flag that the controller's
// event loop turns into an orderly shutdown of its workers; a second one ends the
// process at once (its children follow through PR_SET_PDEATHSIG).
#pragma once

namespace tandem {

void install_interrupt_handlers();
// The signal number received (SIGINT or SIGTERM), or 0.
int pending_interrupt();

}  // namespace tandem
