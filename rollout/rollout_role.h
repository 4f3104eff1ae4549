// The rollout worker role: commands the controller sends to a generation worker.
#pragma once

#include "core/worker_runtime.h"

namespace tandem {

// Handles the rollout role's own commands (the generation engine arrives with the
// model issue); the built-in ping/describe are answered by the worker runtime.
CommandHandler rollout_command_handler();

}  // namespace tandem
