// PPO's critic (advantage: gae): the value head's loss against an independent
// computation, what state each value reads, that it learns its targets, and that the
// critic trains, shards and checkpoints like the policy.
#include "core/error.h"
#include "core/files.h"
#include "core/safetensors.h"
#include "tests/support/forward_tolerance.h"
#include "learner/sample_codec.h"
#include "tests/support/trainer_ranks.h"

#include <doctest/doctest.h>

#include <filesystem>

using namespace tandem;
using namespace tandem::testing;

namespace {

double max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    for (size_t k = 0; k < a[i].size(); ++k) {
      const double d = std::abs(static_cast<double>(a[i][k]) - b[i][k]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  }
  return worst;
}

// Every sample of the scenario, in order: the probe set whose values are compared.
std::vector<TrainingSample> all_samples(const TrainerScenario& s) {
  std::vector<TrainingSample> out;
  for (const auto& batch : s.mini_batches) out.insert(out.end(), batch.begin(), batch.end());
  return out;
}

// The value head a checkpoint holds: its weight row, then its bias.
std::vector<float> checkpoint_value_head(const std::string& dir) {
  auto file = SafetensorsFile::open(dir + "/value_head.safetensors");
  std::vector<float> head = tensor_to_float(file->get("value_head.weight"));
  head.push_back(tensor_to_float(file->get("value_head.bias")).at(0));
  return head;
}

double max_head_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return max_diff(std::vector<std::vector<float>>{a}, std::vector<std::vector<float>>{b});
}

int64_t longest_sample(const std::vector<TrainingSample>& samples) {
  size_t longest = 0;
  for (const TrainingSample& t : samples) longest = std::max(longest, t.prompt.size() + t.response.size());
  return static_cast<int64_t>(longest);
}

// How far two float32 forwards of the checkpoint in `dir` may give values apart: a value is
// v·h + b, h the final RMS norm's output, so forward_tolerance.h's model of a logit holds
// with the value head's row v for the output head's (derived, so Intel and AMD alike).
double value_agreement(const ModelConfig& config, const std::string& dir, int64_t max_tokens) {
  const ModelWeights weights = load_model_weights(dir, config);
  std::vector<float> head = checkpoint_value_head(dir);
  head.pop_back();
  double head_norm = 0;
  for (float v : head) head_norm += static_cast<double>(v) * v;
  const double h_norm = std::sqrt(static_cast<double>(config.hidden_size)) * max_abs(weights.get("model.norm.weight"));
  return 2 * forward_path_length(config, max_tokens) * kUnitRoundoff * std::sqrt(head_norm) * h_norm;
}

// The values a one-process trainer computes from the checkpoint in `dir`.
std::vector<std::vector<float>> checkpoint_values(const TrainerScenario& s, const std::string& dir,
                                                  const std::vector<TrainingSample>& probes) {
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  trainer.load_checkpoint(dir);
  return trainer.values(probes);
}

}  // namespace

TEST_CASE("the first value loss is half the mean squared return (the head starts at 0)") {
  TrainerScenario s = critic_scenario(4, "ddp");
  s.mini_batches.resize(1);
  for (TrainingSample& t : s.mini_batches[0]) std::fill(t.old_values.begin(), t.old_values.end(), 0.0f);
  double sum = 0, tokens = 0;
  for (const TrainingSample& t : s.mini_batches[0]) {
    for (float r : t.returns) sum += 0.5 * static_cast<double>(r) * r;
    tokens += static_cast<double>(t.returns.size());
  }
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  for (const auto& v : trainer.values(s.mini_batches[0])) {
    for (float x : v) CHECK(x == 0.0f);
  }
  UpdateMetrics m = trainer.train(s.mini_batches);
  // A float32 mean of `tokens` non-negative terms, each a rounded square: within
  // (tokens + 2)·u relative (u = 2^-24).
  CHECK(m.objective.value_loss == doctest::Approx(sum / tokens).epsilon((tokens + 2) * kUnitRoundoff));
  bool reported = false;
  for (const auto& [name, value] : m.entries()) reported = reported || name == "critic/value_loss";
  CHECK(reported);
}

TEST_CASE("a value is read in the state before its token: it depends on earlier tokens only") {
  TrainerScenario s = critic_scenario(5, "ddp");
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  trainer.train(s.mini_batches);  // a non-zero value head
  TrainingSample a = s.mini_batches[0][0];
  a.response = {3, 9, 27, 5, 11};
  TrainingSample b = a;
  b.response[2] = 14;  // differs from token 2 on
  const auto v = trainer.values({a, b});
  REQUIRE(v[0].size() == 5);
  for (size_t t = 0; t <= 2; ++t) CHECK(v[0][t] == doctest::Approx(v[1][t]).epsilon(1e-6));
  CHECK(std::abs(v[0][3] - v[1][3]) > 1e-6);
  // Token 0's value reads the prompt's last position: the same whatever the response.
  TrainingSample c = a;
  c.response = {60};
  CHECK(trainer.values({c})[0][0] == doctest::Approx(v[0][0]).epsilon(1e-6));
}

TEST_CASE("the value head learns its targets") {
  TrainerScenario s = critic_scenario(6, "ddp");
  s.options.learner.optimizer.lr = 1e-2;
  s.options.algorithm.value.clip = 0;  // regress straight onto the returns
  s.mini_batches.resize(1);
  for (size_t i = 0; i < s.mini_batches[0].size(); ++i) {
    TrainingSample& t = s.mini_batches[0][i];
    std::fill(t.advantages.begin(), t.advantages.end(), 0.0f);  // no policy gradient
    std::fill(t.returns.begin(), t.returns.end(), i % 2 ? 0.9f : 0.2f);
  }
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  const double first = trainer.train(s.mini_batches).objective.value_loss;
  double last = first;
  for (int step = 0; step < 40; ++step) {
    for (TrainingSample& t : s.mini_batches[0]) t.old_values = trainer.values({t})[0];
    last = trainer.train(s.mini_batches).objective.value_loss;
  }
  CHECK(first > 0.1);
  CHECK(last < 0.1 * first);
}

TEST_CASE("a critic trains the same on 2 ranks (ddp, zero2, fsdp) as on one, values included") {
  TrainerScenario s = critic_scenario(12, "ddp");
  const std::vector<TrainingSample> probes = all_samples(s);
  TempDir dir;
  const std::string single_checkpoint = dir.path() + "/single";
  UpdateMetrics single_metrics;
  ModelWeights single;
  {
    auto collectives = Collectives::create({});
    Trainer trainer(s.config, s.weights, s.options, *collectives);
    single_metrics = trainer.train(s.mini_batches);
    single = trainer.weights();
    trainer.save_checkpoint(single_checkpoint);
  }
  CHECK(single_metrics.objective.value_loss > 0);
  CHECK(std::isfinite(single_metrics.objective.explained_variance));
  // Two ranks add the gradients in another order: the bound from float32 epsilon x the
  // accumulation and AdamW's epsilon (reorder_tolerance), so it holds on Intel and AMD
  // alike. The value head is in the same optimizer and the same global gradient norm.
  const double reorder = reorder_tolerance(s);
  for (const char* sharding : {"ddp", "zero2", "fsdp"}) {
    INFO(std::string(sharding));
    const std::string rank_checkpoint = dir.path() + "/" + sharding;
    std::vector<ModelWeights> weights(2);
    std::vector<std::vector<std::vector<float>>> values(2);
    std::vector<UpdateMetrics> metrics(2);
    with_thread_ranks(s, 2, sharding, [&](Trainer& t, Collectives& c) {
      metrics[c.rank()] = t.train(rank_shares(s.mini_batches, c.rank(), 2));
      weights[c.rank()] = t.weights();
      t.save_checkpoint(rank_checkpoint);
      // Shares of different sizes (fsdp gathers as often on both ranks).
      values[c.rank()] = t.values(c.rank() == 0 ? probes : std::vector<TrainingSample>(probes.begin(), probes.begin() + 3));
    });
    CHECK(max_weight_diff(weights[0], single) <= reorder);
    CHECK(max_head_diff(checkpoint_value_head(rank_checkpoint), checkpoint_value_head(single_checkpoint)) <= reorder);
    // The ranks' values are their critic's: what one process computes from their checkpoint.
    CHECK(max_diff(values[0], checkpoint_values(s, rank_checkpoint, probes)) <=
          value_agreement(s.config, rank_checkpoint, longest_sample(probes)));
    // Means over ~100 float32 terms in another order: within 2·N·u ≈ 1.2e-5 relative.
    CHECK(metrics[0].objective.value_loss == doctest::Approx(single_metrics.objective.value_loss).epsilon(1e-4));
  }
}

TEST_CASE("checkpoints carry the critic across worker counts and strategies") {
  TrainerScenario s = critic_scenario(13, "zero2");
  const std::vector<TrainingSample> probes = all_samples(s);
  TempDir dir;
  const std::string uninterrupted = dir.path() + "/uninterrupted", resumed_end = dir.path() + "/resumed";
  {
    auto collectives = Collectives::create({});
    Trainer trainer(s.config, s.weights, s.options, *collectives);
    trainer.train(s.mini_batches);
    trainer.save_checkpoint(uninterrupted);
  }
  const std::vector<std::vector<TrainingSample>> first_two(s.mini_batches.begin(), s.mini_batches.begin() + 2);
  const std::vector<std::vector<TrainingSample>> last = {s.mini_batches[2]};
  const std::string checkpoint = dir.path() + "/step_2";
  with_thread_ranks(s, 2, "fsdp", [&](Trainer& t, Collectives& c) {
    t.train(rank_shares(first_two, c.rank(), 2));
    t.save_checkpoint(checkpoint);
  });
  std::vector<std::vector<std::vector<float>>> resumed(3);
  with_thread_ranks(s, 3, "zero2", [&](Trainer& t, Collectives& c) {
    t.load_checkpoint(checkpoint);
    t.train(rank_shares(last, c.rank(), 3));
    resumed[c.rank()] = t.values(probes);
    t.save_checkpoint(resumed_end);
  });
  // The same gradient terms in another order (2 ranks, then 3): reorder_tolerance's bound
  // on every weight, the value head's included; the values are the resumed critic's.
  const double reorder = reorder_tolerance(s);
  CHECK(max_weight_diff(load_model_weights(resumed_end, s.config), load_model_weights(uninterrupted, s.config)) <= reorder);
  CHECK(max_head_diff(checkpoint_value_head(resumed_end), checkpoint_value_head(uninterrupted)) <= reorder);
  CHECK(max_diff(resumed[2], checkpoint_values(s, resumed_end, probes)) <=
        value_agreement(s.config, resumed_end, longest_sample(probes)));

  // Loaded under fsdp too, whose value head is released between uses (its size comes
  // from the model, not from the empty leaf).
  std::vector<std::vector<std::vector<float>>> fsdp_loaded(2);
  with_thread_ranks(s, 2, "fsdp", [&](Trainer& t, Collectives& c) {
    t.load_checkpoint(checkpoint);
    fsdp_loaded[c.rank()] = t.values(probes);
  });
  CHECK(max_diff(fsdp_loaded[0], checkpoint_values(s, checkpoint, probes)) <=
        value_agreement(s.config, checkpoint, longest_sample(probes)));

  // A checkpoint without a critic cannot start one silently from zero.
  TrainerScenario grpo = trainer_scenario(13, "ddp");
  auto collectives = Collectives::create({});
  Trainer policy_only(grpo.config, grpo.weights, grpo.options, *collectives);
  policy_only.save_checkpoint(dir.path() + "/grpo");
  Trainer with_critic(s.config, s.weights, s.options, *collectives);
  CHECK_THROWS_WITH_AS(with_critic.load_checkpoint(dir.path() + "/grpo"), doctest::Contains("has no critic"),
                       tandem::Error);
}

TEST_CASE("values and returns travel in the training-batch codec; gae without them is named") {
  TrainerScenario s = critic_scenario(14, "ddp");
  EncodedBatch encoded = encode_training_batch(s.mini_batches);
  const auto decoded = decode_training_batch(encoded.body, encoded.attachments);
  REQUIRE(decoded.size() == s.mini_batches.size());
  for (size_t m = 0; m < decoded.size(); ++m) {
    for (size_t i = 0; i < decoded[m].size(); ++i) {
      CHECK(decoded[m][i].old_values == s.mini_batches[m][i].old_values);
      CHECK(decoded[m][i].returns == s.mini_batches[m][i].returns);
    }
  }
  for (auto& batch : s.mini_batches) {
    for (TrainingSample& t : batch) {
      t.old_values.clear();
      t.returns.clear();
    }
  }
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  CHECK_THROWS_WITH_AS(trainer.train(s.mini_batches), doctest::Contains("advantage gae: every training sample needs"),
                       tandem::Error);
}
