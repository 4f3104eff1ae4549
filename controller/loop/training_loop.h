// The synchronous on-policy RL loop (DESIGN.md, "One training step") over real rollout
// and learner worker processes:
//   prompts → rollout workers (group_size samples each) → rewards → advantages →
//   learner ranks (one update) → weight sync → metrics, and a checkpoint every N steps.
//
// Placement: `disaggregated` runs rollout and learner ranks as separate processes and
// syncs weights through POSIX shared memory (weight_sync/shm.h); `colocated` runs one
// process per slot hosting rollout rank i and learner rank i, and the slot that holds
// learner rank 0 hands its weights to its own engine in memory (weight_sync/local.h);
// other rollout ranks read shared memory.
#pragma once

#include "controller/run/run_inputs.h"
#include "controller/workers/worker_pool.h"
#include "core/config.h"

#include <string>
#include <vector>

namespace tandem {

// The worker processes a config asks for (ids the pool launches).
std::vector<WorkerId> training_workers(const Config& config);
// tandem train-rm's: the learner ranks alone.
std::vector<WorkerId> reward_model_workers(const Config& config);

// Runs experiment.steps steps; writes metrics.jsonl, checkpoints/ and policy/ in run_dir.
// Starts with the supervised warm-up (sft.steps) unless `resume`, which continues after
// the newest whole checkpoint in run_dir (or from the start when there is none).
// Recovery: a rollout worker that dies is restarted with the current weights and its
// unfinished requests redone; a learner that dies restarts every learner from the newest
// whole checkpoint; both count against launcher.max_restarts.
// `inputs`: the model, tokenizer, dataset and rewards, loaded and checked (run_inputs.h).
void run_training(WorkerPool& pool, const Config& config, RunInputs inputs, const std::string& run_dir,
                  bool resume = false);

}  // namespace tandem
