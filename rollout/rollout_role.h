// The rollout worker role: commands the controller sends to a generation worker.
//
//   rollout_init          {"model", "config" (resolved YAML)}: loads the policy into a
//                         RolloutEngine with the config's rollout settings
//   rollout_generate      {"requests": [{"id", "prompt_length", "n", "seed"}]} + one frame
//                         of int32 prompt tokens back to back. Replies {"samples": [[id,
//                         index, length, finish, version], ...], "stats": this command's
//                         {"decode_tokens", "prefill_tokens", "prefill_tokens_saved",
//                         "preemptions"}} + two frames: int32 tokens and float32
//                         log-probs of every sample back to back
//   rollout_load_weights  {"transport": WeightSyncOptions (weight_sync/options_json.h)}
//                         or {"local": true} (the colocated learner's handover), and
//                         "rewind" (the version may go back): checks and loads new
//                         weights; replies {"version"}
#pragma once

#include "core/worker_runtime.h"

namespace tandem {

CommandHandler rollout_command_handler();

}  // namespace tandem
