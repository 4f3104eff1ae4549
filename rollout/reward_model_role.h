// The reward-model worker role: scores sequences with a sequence classifier (a reward
// model directory) on the CPU or CUDA backend, prefill only (rollout/sequence_scorer.h).
// Commands reward_model_init and reward_model_score, bodies in
// rollout/rollout_commands.capnp; the controller's side is
// controller/run/reward_model_workers.h.
#pragma once

#include "core/worker_runtime.h"

#include <string>
#include <vector>

namespace tandem {

CommandHandler reward_model_command_handler();

// The names of the commands reward_model_command_handler serves.
std::vector<std::string> reward_model_command_names();

}  // namespace tandem
