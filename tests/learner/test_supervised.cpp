// The supervised warm-up step (Trainer::supervised_step): its loss against a float64
// cross-entropy computed independently, its update against the gradient that loss
// implies (sgd, finite differences), that it learns, that ranks agree with one process,
// and that it leaves the RL optimizer and the reference policy as RLHF expects.
#include "tests/support/trainer_ranks.h"

#include <doctest/doctest.h>

#include <cmath>

using namespace tandem;
using namespace tandem::testing;

namespace {

// Token-mean cross-entropy (temperature 1) of every response token given what precedes it.
double reference_cross_entropy(const TrainerScenario& s, const ModelWeights& w, const std::vector<TrainingSample>& b) {
  double sum = 0, tokens = 0;
  for (const TrainingSample& t : b) {
    std::vector<int32_t> sequence = t.prompt;
    sequence.insert(sequence.end(), t.response.begin(), t.response.end());
    const Matrix logits = reference_logits(s.config, w, sequence);
    for (size_t k = 0; k < t.response.size(); ++k) {
      const std::vector<double> lp = reference_log_softmax(logits[t.prompt.size() + k - 1], 1.0);
      sum -= lp[static_cast<size_t>(t.response[k])];
      tokens += 1;
    }
  }
  return sum / tokens;
}

TrainerScenario supervised_scenario(uint64_t seed) {
  TrainerScenario s = trainer_scenario(seed, "ddp", 3);
  s.options.algorithm.kl.coef = 0.0;
  s.options.learner.optimizer.eps = 1e-8;  // Adam's usual epsilon: the warm-up must learn in 30 steps
  return s;
}

}  // namespace

TEST_CASE("the supervised loss is the token-mean cross-entropy of a float64 reference") {
  for (uint64_t seed : {11, 12}) {
    const TrainerScenario s = supervised_scenario(seed);
    auto collectives = Collectives::create({});
    Trainer trainer(s.config, s.weights, s.options, *collectives);
    const double expected = reference_cross_entropy(s, s.weights, s.mini_batches[0]);
    const UpdateMetrics m = trainer.supervised_step(s.mini_batches[0], 1e-3);
    REQUIRE(std::isfinite(m.objective.loss));
    CHECK(m.objective.loss == doctest::Approx(expected).epsilon(1e-5));
    int64_t tokens = 0;
    for (const TrainingSample& t : s.mini_batches[0]) tokens += static_cast<int64_t>(t.response.size());
    CHECK(m.tokens == tokens);
    CHECK(trainer.optimizer_steps() == 0);  // not an RL optimizer step
  }
}

TEST_CASE("an sgd supervised step moves each weight by -lr times the loss gradient (finite differences)") {
  TrainerScenario s = supervised_scenario(21);
  s.options.learner.optimizer.name = "sgd";
  s.options.learner.optimizer.weight_decay = 0.0;
  s.options.learner.optimizer.grad_clip = 0.0;
  const double lr = 1e-2;
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  trainer.supervised_step(s.mini_batches[0], lr);
  const ModelWeights after = trainer.weights();
  // A few coordinates of the final norm and the first layer's q projection.
  for (const std::string name : {"model.norm.weight", "model.layers.0.self_attn.q_proj.weight"}) {
    for (size_t index : {size_t{0}, size_t{5}}) {
      const double h = 1e-4;
      ModelWeights plus = s.weights, minus = s.weights;
      const_cast<WeightTensor&>(plus.get(name)).data[index] += static_cast<float>(h);
      const_cast<WeightTensor&>(minus.get(name)).data[index] -= static_cast<float>(h);
      const double gradient = (reference_cross_entropy(s, plus, s.mini_batches[0]) -
                               reference_cross_entropy(s, minus, s.mini_batches[0])) /
                              (2 * h);
      const double moved = static_cast<double>(after.get(name).data[index]) - s.weights.get(name).data[index];
      INFO(name, "[", index, "]: gradient ", gradient, ", moved ", moved);
      CHECK(std::abs(moved + lr * gradient) <= 2e-5 + 0.02 * std::abs(lr * gradient));
    }
  }
}

TEST_CASE("supervised steps learn their targets, and 2 ranks equal 1") {
  const TrainerScenario learning = supervised_scenario(31);
  auto collectives = Collectives::create({});
  Trainer single(learning.config, learning.weights, learning.options, *collectives);
  const double first = single.supervised_step(learning.mini_batches[0], 3e-3).objective.loss;
  double last = first;
  for (int step = 0; step < 30; ++step) {
    last = single.supervised_step(learning.mini_batches[0], 3e-3).objective.loss;
  }
  CHECK(last < 0.5 * first);

  // Ranks against one process: the scenario's Adam epsilon (0.1), so that the bound on
  // another summation order comes from the arithmetic: float32 epsilon x the accumulation (reorder_tolerance in trainer_ranks.h), so it holds on Intel and AMD alike.
  TrainerScenario s = supervised_scenario(31);
  s.options.learner.optimizer.eps = trainer_scenario(31, "ddp").options.learner.optimizer.eps;
  for (const std::string sharding : {"ddp", "zero2", "fsdp"}) {
    std::vector<ModelWeights> ranks(2);
    with_thread_ranks(s, 2, sharding, [&](Trainer& trainer, Collectives& c) {
      for (int step = 0; step < 3; ++step) {
        trainer.supervised_step(rank_shares({s.mini_batches[step]}, c.rank(), 2)[0], 3e-3);
      }
      ranks[static_cast<size_t>(c.rank())] = trainer.weights();
    });
    Trainer one(s.config, s.weights, s.options, *collectives);
    for (int step = 0; step < 3; ++step) one.supervised_step(s.mini_batches[step], 3e-3);
    INFO(sharding);
    REQUIRE(s.options.learner.optimizer.lr == 3e-3);  // the bound's lr is the steps' lr
    const double tolerance = reorder_tolerance(s, [&](const std::vector<TrainingSample>& samples) {
      Trainer probe(s.config, s.weights, s.options, *collectives);
      return probe.supervised_step(samples, 3e-3).grad_norm;
    });
    CHECK(max_weight_diff(ranks[0], one.weights()) <= tolerance);
    CHECK(max_weight_diff(ranks[1], ranks[0]) == 0.0);  // every rank holds the same policy
  }
}

TEST_CASE("after a warm-up the KL is measured against the warmed-up policy, not the initial one") {
  TrainerScenario s = trainer_scenario(41, "ddp", 3);  // kl.coef 0.05
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  for (int step = 0; step < 5; ++step) trainer.supervised_step(s.mini_batches[0], 3e-3);
  // The first RL epoch's first micro-batch sees the reference equal to the policy: KL 0
  // there; a trainer that kept the initial weights as reference reports a clear KL.
  TrainerScenario one = s;
  one.mini_batches.resize(1);
  one.options.learner.micro_batch_size = 64;
  const UpdateMetrics m = trainer.train(one.mini_batches);
  INFO("kl ", m.objective.kl);
  CHECK(std::abs(m.objective.kl) < 1e-6);
  CHECK(trainer.optimizer_steps() == 1);
}
