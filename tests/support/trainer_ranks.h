// Test-only: running tests/support/trainer_scenario.h's scenarios on one process or on ranks as
// threads, and comparing the weights they end with.
#pragma once

#include "learner/collectives.h"
#include "tests/support/trainer_scenario.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace tandem::testing {

inline double max_weight_diff(const ModelWeights& a, const ModelWeights& b) {
  double worst = 0;
  for (const WeightTensor& t : a.tensors()) {
    const std::vector<float>& u = t.data;
    const std::vector<float>& v = b.get(t.name).data;
    for (size_t i = 0; i < u.size(); ++i) {
      const double d = std::abs(static_cast<double>(u[i]) - v[i]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  }
  return worst;
}

// How far two float32 trainings of scenario `s` may end apart when they add the same
// gradient terms in another order (other micro-batches, ranks or shards), from the
// arithmetic rather than from what one CPU measured:
//  - a gradient entry is a sum of terms; a sum of N float32 terms in any order is within
//    N·u·Σ|terms| of the exact one (u = 2^-24, the unit roundoff), so two orders differ
//    by at most δg = 2·N·u·Σ|terms|, N the token positions of the mini-batch;
//  - Σ|terms| over the samples is at most Σ_s ‖g_s‖, each sample's own gradient norm as
//    it enters the mini-batch's loss (token_mean: weighted by its share of the response
//    tokens), measured here at the starting weights by `gradient_norm` (the weights move
//    by about lr per step, which changes these norms by a few percent: the bound has a
//    factor 2 for it). Within a sample, its tokens' terms are taken not to cancel beyond
//    that: a model of the sum, not a proof;
//  - with clipping the optimizer sees c·g, c = min(1, grad_clip / ‖g‖), ‖g‖ the
//    mini-batch's norm (measured the same way);
//  - AdamW's step m̂/(√v̂ + ε) changes by at most 1/ε per unit change of a gradient through
//    m̂ and as much through v̂: 2·δg/ε, times lr, each optimizer step;
//  - each step also rounds the new weights to float32: one ulp of the largest weight
//    (2^-23·max|w|) per step where the two runs' exact values straddle a rounding point.
// Weight differences also change later gradients, by lr-sized amounts times the curvature:
// second order, left out. `gradient_norm(samples)`: the pre-clip gradient norm of one
// optimizer step on exactly these samples from the scenario's weights (default: the RL
// objective, Trainer::train). `path_terms`: terms of every other sum on a gradient's path
// that two trainings may reorder too (tensor parallelism splits the forward's and
// backward's products: forward_path_length), added to N.
using GradientNorm = std::function<double(const std::vector<TrainingSample>&)>;

inline double reorder_tolerance(const TrainerScenario& s, GradientNorm gradient_norm = {}, double path_terms = 0) {
  if (!gradient_norm) {
    gradient_norm = [&s](const std::vector<TrainingSample>& samples) {
      auto collectives = Collectives::create({});
      Trainer trainer(s.config, s.weights, s.options, *collectives);
      return trainer.train({samples}).grad_norm;
    };
  }
  REQUIRE(s.options.algorithm.loss_agg == "token_mean");  // the sample weights below
  constexpr double unit_roundoff = 1.0 / (1 << 24);
  const auto& optimizer = s.options.learner.optimizer;
  double step_bound = 0;  // the largest step's lr·2·δg/ε
  for (const std::vector<TrainingSample>& batch : s.mini_batches) {
    double positions = 0, response_tokens = 0;
    for (const TrainingSample& t : batch) {
      positions += static_cast<double>(t.prompt.size() + t.response.size());
      response_tokens += static_cast<double>(t.response.size());
    }
    double terms = 0;  // Σ_s ‖g_s‖, each weighted as in the mini-batch's loss
    for (const TrainingSample& t : batch) {
      terms += gradient_norm({t}) * static_cast<double>(t.response.size()) / response_tokens;
    }
    const double norm = gradient_norm(batch);
    const double clip = optimizer.grad_clip > 0 && norm > 0 ? std::min(1.0, optimizer.grad_clip / norm) : 1.0;
    const double gradient_error = 2 * (positions + path_terms) * unit_roundoff * clip * 2 * terms;
    step_bound = std::max(step_bound, optimizer.lr * 2 * gradient_error / optimizer.eps);
  }
  double largest_weight = 0;
  for (const WeightTensor& t : s.weights.tensors()) {
    for (float w : t.data) largest_weight = std::max(largest_weight, std::abs(static_cast<double>(w)));
  }
  const double steps = static_cast<double>(s.mini_batches.size());
  return steps * (step_bound + 2 * unit_roundoff * largest_weight);
}

inline ModelWeights train_single(const TrainerScenario& s, UpdateMetrics* metrics = nullptr) {
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  UpdateMetrics m = trainer.train(s.mini_batches);
  if (metrics) *metrics = m;
  return trainer.weights();
}

// Ranks as threads running `body(trainer, collectives)` from the scenario's weights.
inline void with_thread_ranks(const TrainerScenario& s, int world, const std::string& sharding,
                       const std::function<void(Trainer&, Collectives&)>& body) {
  static int store = 0;  // one rendezvous name per call
  const std::string rendezvous = "memory://checkpoint-" + std::to_string(store++);
  TrainerOptions options = s.options;
  options.learner.sharding = sharding;
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto collectives = Collectives::create({rendezvous, rank, world, 60.0});
        Trainer trainer(s.config, s.weights, options, *collectives);
        body(trainer, *collectives);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) REQUIRE_MESSAGE(errors[rank].empty(), "rank ", rank, ": ", errors[rank]);
}

// Ranks as threads over an in-memory rendezvous; returns every rank's final weights.
inline std::vector<ModelWeights> train_threads(const TrainerScenario& s, int world, UpdateMetrics* rank0_metrics) {
  std::vector<ModelWeights> out(world);
  with_thread_ranks(s, world, s.options.learner.sharding, [&](Trainer& trainer, Collectives& c) {
    UpdateMetrics m = trainer.train(rank_shares(s.mini_batches, c.rank(), world));
    if (c.rank() == 0 && rank0_metrics) *rank0_metrics = m;
    out[c.rank()] = trainer.weights();
  });
  return out;
}

}  // namespace tandem::testing
