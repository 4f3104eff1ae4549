// Reward-model workers (reward: [{model: DIR, workers: N, device: cpu | cuda | auto}]): N
// `tandem worker --role reward_model` processes, started by the run's launcher kind (local
// or slurm) on a control channel of their own, each holding DIR on `device` and scoring
// prefill-only passes (rollout/sequence_scorer.h). The controller encodes each sample
// (RewardModelSamples: the same tokens the in-process scorer reads), splits a batch over
// the workers in contiguous parts, and shapes their raw scores as the in-process scorer
// does (normalize, missing_eos_penalty).
//
// WorkerPool is single-threaded, so one thread of the scorer owns the pool: it launches
// and loads the workers (start() returns at once; the first score() waits for them), runs
// each score() call's commands, and between calls keeps the workers' heartbeats going. A
// worker that dies, hangs or fails a command is restarted, loaded again and sent its part
// again, once per call; a second failure fails the call, and with it the run, naming the
// worker and its log.
#pragma once

#include "core/config.h"
#include "rewards/scoring.h"

#include <memory>

namespace tandem {

// The scorer of config.reward[index] (a model entry with workers >= 1); its workers are
// ranks first_rank.. of role reward_model (model entries number their workers in turn).
// Checks DIR as make_model_reward_scorer does, and refuses a launcher kind that cannot
// start them; starts nothing before start().
std::unique_ptr<RewardScorer> make_reward_model_workers(const Config& config, size_t index, int64_t first_rank);

}  // namespace tandem
