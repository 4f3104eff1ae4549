// Test-only: one deterministic training scenario (model, samples, options) that in-process
// ranks, separate rank processes (tests/trainer_rank.cpp) and the single-process baseline
// all build the same way, and how a global mini-batch is dealt to ranks.
#pragma once

#include "actor/model_weights.h"
#include "learner/trainer.h"
#include "reference_model.h"

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
  // derived from the arithmetic (reorder_tolerance below).
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
// How far two float32 trainings of scenario `s` may end apart when they add the same
// gradient terms in another order (other micro-batches, ranks or shards), from the
// arithmetic rather than from what one CPU measured:
//  - a gradient entry is a sum over the N token positions of a mini-batch; a sum of N
//    float32 terms in any order is within N·u·Σ|terms| of the exact one (u = 2^-24, the
//    unit roundoff), so two orders differ by at most δg = 2·N·u·Σ|terms|;
//  - Σ|terms| is bounded by the samples of the mini-batch times the size of the gradient
//    the optimizer sees (each sample's part at most the whole's size, when they cancel);
//    with clipping on, that size is at most grad_clip (the clipped norm), else the
//    largest step's norm (≤ `grad_norm_mean` × steps);
//  - AdamW's step m̂/(√v̂ + ε) changes by at most 1/ε per unit change of a gradient through
//    m̂ and as much through v̂: 2·δg/ε, times lr, each optimizer step;
//  - each step also rounds the new weights to float32: one ulp of the largest weight
//    (2^-23·max|w|) per step where the two runs' exact values straddle a rounding point.
// Weight differences also change the next gradients, by lr-sized amounts times the
// curvature: second order, left out.
inline double reorder_tolerance(const TrainerScenario& s, double grad_norm_mean) {
  constexpr double unit_roundoff = 1.0 / (1 << 24);
  double tokens = 0, samples = 0;
  for (const std::vector<TrainingSample>& batch : s.mini_batches) {
    double n = 0;
    for (const TrainingSample& t : batch) n += static_cast<double>(t.prompt.size() + t.response.size());
    tokens = std::max(tokens, n);
    samples = std::max(samples, static_cast<double>(batch.size()));
  }
  double largest_weight = 0;
  for (const WeightTensor& t : s.weights.tensors()) {
    for (float w : t.data) largest_weight = std::max(largest_weight, std::abs(static_cast<double>(w)));
  }
  const double steps = static_cast<double>(s.mini_batches.size());
  const auto& optimizer = s.options.learner.optimizer;
  const double largest_norm = grad_norm_mean * steps;
  const double size = optimizer.grad_clip > 0 ? std::min(optimizer.grad_clip, largest_norm) : largest_norm;
  const double gradient_error = 2 * tokens * unit_roundoff * samples * size;
  return steps * (optimizer.lr * 2 * gradient_error / optimizer.eps + 2 * unit_roundoff * largest_weight);
}

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
