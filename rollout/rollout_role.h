// The rollout worker role: the commands the controller sends to a generation worker
// (rollout_init, rollout_generate, rollout_load_weights), dispatched by a table. Their
// bodies and replies are declared in rollout/rollout_commands.capnp, one struct each;
// the controller's side is controller/workers/rollout_client.h.
#pragma once

#include "core/worker_runtime.h"

#include "core/config.h"

#include <functional>
#include <string>
#include <vector>

namespace tandem {

// `prepare` runs at rollout_init with the run's config, before anything is built (the
// worker loads the config's plugins there: their tools and environments).
CommandHandler rollout_command_handler(std::function<void(const Config&)> prepare = {});

// The names of the commands rollout_command_handler serves (its table's keys): a colocated
// worker routes by them.
std::vector<std::string> rollout_command_names();

}  // namespace tandem
