// The learner worker role: the commands the controller sends to a training rank
// (torch_info, learner_init, learner_train, learner_sft, learner_values,
// learner_logprobs, learner_probe_logprobs, learner_ref_logprobs, learner_publish, learner_free_port,
// learner_nccl_id, learner_save, learner_load, learner_export), dispatched by a table.
// Their bodies and replies are declared in learner/learner_commands.capnp, one struct
// each (samples as a TrainingBatch plus two frames, learner/sample_codec.h); the
// controller's side is controller/workers/learner_client.h.
#pragma once

#include "core/config.h"
#include "core/worker_runtime.h"

#include <functional>
#include <string>
#include <vector>

namespace tandem {

// `prepare` runs on learner_init with the run's config before the trainer is built: the
// worker loads the config's plugins there (their objectives run in this process).
CommandHandler learner_command_handler(std::function<void(const Config&)> prepare = {});

// The names of the commands learner_command_handler serves (its table's keys): a colocated
// worker routes by them.
std::vector<std::string> learner_command_names();

}  // namespace tandem
