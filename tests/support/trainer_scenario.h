// Test-only: one deterministic training scenario (model, samples, options) that in-process
// ranks, separate rank processes (tests/learner/trainer_rank.cpp) and the single-process baseline
// all build the same way, and how a global mini-batch is dealt to ranks.
#pragma once

#include "actor/model_weights.h"
#include "learner/trainer.h"
#include "tests/support/reference_model.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace tandem::testing {

struct TrainerScenario {
  ModelConfig config;
  ModelWeights weights;
  TrainerOptions options;
  std::vector<std::vector<TrainingSample>> mini_batches;  // global mini-batches
};

inline TrainerScenario trainer_scenario(uint64_t seed, const std::string& sharding, int64_t micro_batch_size = 2) {
  TrainerScenario s;
  s.config = test_models()[3].config;  // qwen3: q/k norm, MQA
  s.weights = random_model_weights(s.config, seed, 0.15, true);
  s.options.learner.sharding = sharding;
  s.options.learner.micro_batch_size = micro_batch_size;
  s.options.learner.optimizer.lr = 3e-3;
  s.options.learner.optimizer.weight_decay = 0.01;
  s.options.learner.optimizer.grad_clip = 0.5;  // small enough to clip: the norm must be global
  // Adam's epsilon well above float32 rounding of the gradients: with the default 1e-8 a
  // rounding difference on a near-zero gradient entry moves its weight by up to lr, and
  // two summation orders (ranks, micro-batches) could not be compared with a bound
  // derived from the arithmetic (reorder_tolerance in trainer_ranks.h).
  s.options.learner.optimizer.eps = 0.1;
  s.options.algorithm.kl.coef = 0.05;           // a reference model in the loss
  s.options.algorithm.entropy_coef = 0.01;
  s.options.algorithm.loss_agg = "token_mean";
  s.options.temperature = 0.9;
  s.options.max_response_length = 9;
  s.options.total_optimizer_steps = 3;
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(s.config.vocab_size) - 1);
  std::normal_distribution<float> normal;
  for (int m = 0; m < 3; ++m) {  // 3 optimizer steps
    std::vector<TrainingSample> batch;
    for (int i = 0; i < 7; ++i) {  // 7 samples: shares of unequal size on 2 ranks
      TrainingSample t;
      for (int k = 0, n = 2 + static_cast<int>(rng() % 5); k < n; ++k) t.prompt.push_back(token(rng));
      for (int k = 0, n = 1 + static_cast<int>(rng() % 9); k < n; ++k) {
        t.response.push_back(token(rng));
        t.old_logprobs.push_back(-4.5f + 0.3f * normal(rng));
        t.advantages.push_back(normal(rng));
      }
      batch.push_back(std::move(t));
    }
    s.mini_batches.push_back(std::move(batch));
  }
  return s;
}

// The same scenario for PPO with a critic (advantage: gae): every sample also carries the
// rollout-time values and the returns the value head regresses on.
inline TrainerScenario critic_scenario(uint64_t seed, const std::string& sharding) {
  TrainerScenario s = trainer_scenario(seed, sharding);
  s.options.algorithm.advantage = "gae";
  s.options.algorithm.value = {0.5, 0.2};
  std::mt19937_64 rng(seed + 2);
  std::normal_distribution<float> normal;
  for (auto& batch : s.mini_batches) {
    for (TrainingSample& t : batch) {
      for (size_t k = 0; k < t.response.size(); ++k) {
        t.old_values.push_back(0.3f * normal(rng));
        t.returns.push_back(1.0f + normal(rng));  // far enough from the values for the clip to act
      }
    }
  }
  return s;
}

// Rank r's share of each mini-batch: a contiguous slice, sizes differing by at most one.
inline std::vector<std::vector<TrainingSample>> rank_shares(const std::vector<std::vector<TrainingSample>>& global,
                                                             int rank, int world) {
  std::vector<std::vector<TrainingSample>> shares;
  for (const auto& batch : global) {
    const size_t begin = batch.size() * rank / world, end = batch.size() * (rank + 1) / world;
    shares.emplace_back(batch.begin() + begin, batch.begin() + end);
  }
  return shares;
}

}  // namespace tandem::testing
