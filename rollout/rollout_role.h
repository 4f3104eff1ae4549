// The rollout worker role: the commands the controller sends to a generation worker
// (rollout_init, rollout_generate, rollout_load_weights), dispatched by a table. Their
// bodies and replies are declared in rollout/rollout_commands.capnp, one struct each;
// the controller's side is controller/workers/rollout_client.h.
#pragma once

#include "core/worker_runtime.h"

namespace tandem {

CommandHandler rollout_command_handler();

}  // namespace tandem
