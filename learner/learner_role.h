// The learner worker role: commands the controller sends to a training rank.
//
//   torch_info      the libtorch this worker runs (version, intra-op threads)
//   learner_init    {"model", "config" (resolved YAML), "rank", "world_size", "rendezvous",
//                    "total_optimizer_steps", "threads" (intra-op threads; 0: libtorch's
//                    default), "local_rank" (the rank's GPU under learner.device cuda;
//                    default: rank)}: loads the policy, joins the process group (NCCL under
//                    learner.device cuda, else Gloo)
//   learner_train   header + 2 frames (learner/sample_codec.h): one update over this rank's
//                   shares of the mini-batches; replies the update's metrics as JSON
//   learner_save    {"dir"}: a checkpoint (all ranks together)
//   learner_load    {"dir"}: load one (any worker count wrote it)
//   learner_values  header + 2 frames, one mini-batch: the critic's per-token values of
//                   those samples (advantage: gae), one float32 frame back
//   learner_publish {"version", "local": true and/or "transport": WeightSyncOptions
//                   (weight_sync/options_json.h)}: the policy for rollout workers, in memory
//                   for the colocated slot (weight_sync/local.h) and/or through the transport;
//                   all ranks call (fsdp gathers), rank 0 sends
//   learner_nccl_id {}: {"nccl_unique_id": hex}, a new NCCL weight-sync group's id; this
//                   process stays its bootstrap root, so send it to the rank that publishes
//   learner_export  {"dir", "tokenizer_from"}: the policy as a Hugging Face directory
#pragma once

#include "core/config.h"
#include "core/worker_runtime.h"

#include <functional>

namespace tandem {

// `prepare` runs on learner_init with the run's config before the trainer is built: the
// worker loads the config's plugins there (their objectives run in this process).
CommandHandler learner_command_handler(std::function<void(const Config&)> prepare = {});

}  // namespace tandem
