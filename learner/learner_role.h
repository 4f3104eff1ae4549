// The learner worker role: commands the controller sends to a training rank.
#pragma once

#include "core/worker_runtime.h"

namespace tandem {

// Knows "torch_info" (the libtorch this worker runs: version, intra-op threads), which
// proves the learner's libtorch loads in a worker process; training commands arrive
// with the learner issue.
CommandHandler learner_command_handler();

}  // namespace tandem
