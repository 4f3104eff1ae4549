// Test-only: running tests/trainer_scenario.h's scenarios on one process or on ranks as
// threads, and comparing the weights they end with.
#pragma once

#include "learner/collectives.h"
#include "trainer_scenario.h"

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
