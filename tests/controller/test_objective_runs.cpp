// The RLHF toolbox end to end on real worker processes (issue 30): every advantage
// estimator and policy loss trains; the KL penalty in the reward with the adaptive
// coefficient follows Ziegler et al.'s update step by step and survives a resume; DAPO's
// dynamic sampling keeps only groups whose samples differ; the overlong punishment is the
// formula's on every logged sample. The objectives' numbers are checked against float64
// references in tests/learner/test_objectives*.cpp; this checks the training loop's wiring.
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace tandem;
using namespace tandem::testing;

namespace {

const char* kRun = R"(experiment: {name: t, seed: 5, steps: 3, checkpoint_every: 0}
model: {path: "builtin:tiny"}
data: {train: "builtin:addition1", batch_size: 4}
algorithm: {advantage: grpo, group_size: 4}
rollout: {workers: 1, max_new_tokens: 3, kv_cache_mb: 8}
learner: {workers: 1, micro_batch_size: 16, optimizer: {lr: 1.0e-3}}
reward:
  - {name: math_answer, weight: 1.0}
logging: {console: plain, samples_per_step: 1000}
)";

struct Run {
  std::string dir;
  std::string output;
  std::vector<nlohmann::json> metrics;
  std::vector<nlohmann::json> samples;
};

Run run(const TempDir& dir, const std::string& name, const std::vector<std::string>& sets, int expected_exit = 0,
        const std::string& config = kRun) {
  const std::string config_path = dir.path() + "/" + name + ".yaml";
  write_file_atomic(config_path, config);
  Run r;
  r.dir = dir.path() + "/" + name;
  std::vector<std::string> args = {"run", config_path, "--run-dir", r.dir};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  const std::string out = dir.path() + "/" + name + ".out";
  const ExitStatus status = run_tandem(args, out, 240);
  r.output = read_text(out);
  INFO(name << ": " << r.output);
  REQUIRE(status.exit_code == expected_exit);
  r.metrics = read_json_lines(r.dir + "/metrics.jsonl");
  r.samples = read_json_lines(r.dir + "/samples.jsonl");
  return r;
}

double number(const nlohmann::json& row, const std::string& key) {
  INFO("metric " << key << " in " << row.dump());
  REQUIRE(row.contains(key));
  const double v = row.at(key).get<double>();
  REQUIRE(std::isfinite(v));
  return v;
}

}  // namespace

TEST_CASE("every advantage estimator and policy loss by verl's names trains end to end") {
  TempDir dir;
  struct Pair {
    const char* advantage;
    const char* loss;
    const char* loss_agg;
  };
  // Each estimator once and each loss once, some with verl's aggregation spellings.
  const Pair pairs[] = {{"grpo_passk", "sapo", "token-mean"},
                        {"opo", "geo_mean", "token_mean"},
                        {"gpg", "gpg", "seq-mean-token-sum"},
                        {"reinforce_plus_plus_baseline", "clip_cov", "seq-mean-token-mean"},
                        {"grpo_vectorized", "kl_cov", "seq-mean-token-sum-norm"},
                        {"rloo_vectorized", "cispo", "token-mean"},
                        {"reinforce_plus_plus", "vanilla", "token-mean"},
                        {"remax", "ppo_clip", "token-mean"}};
  for (const Pair& p : pairs) {
    INFO(p.advantage << " + " << p.loss);
    const Run r = run(dir, std::string(p.advantage) + "-" + p.loss,
                      {std::string("algorithm.advantage=") + p.advantage, std::string("algorithm.policy_loss=") + p.loss,
                       std::string("algorithm.loss_agg=") + p.loss_agg, "algorithm.kl.estimator=low_var_kl",
                       // clip_cov and kl_cov single out a token in 50, so that some are
                       "algorithm.policy_loss_options.clip_cov_ratio=0.02",
                       "algorithm.policy_loss_options.kl_cov_ratio=0.02",
                       "algorithm.policy_loss_options.clip_cov_lb=-1e9"});
    REQUIRE(r.metrics.size() == 3);
    for (const auto& row : r.metrics) {
      number(row, "actor/pg_loss");
      number(row, "actor/loss");
      CHECK(number(row, "actor/grad_norm") >= 0);
    }
  }
}

TEST_CASE("KL in the reward: the adaptive coefficient follows Ziegler's update and a resumed run continues it") {
  TempDir dir;
  // A target far below the measured KL from step 2 on: the coefficient first falls (step 1
  // measures ~0: the policy is the reference), then rises by the clipped 20% per horizon.
  const double target = 1e-4, horizon = 40, samples = 16;
  const std::vector<std::string> sets = {"algorithm.kl.in=reward", "algorithm.kl.coef=0.2",
                                         "algorithm.kl.adaptive=true", "algorithm.kl.target=1e-4",
                                         "algorithm.kl.horizon=40", "learner.optimizer.lr=0.02",
                                         "experiment.steps=4", "experiment.checkpoint_every=2"};
  const Run whole = run(dir, "whole", sets);
  REQUIRE(whole.metrics.size() == 4);
  double coef = 0.2;
  for (const auto& row : whole.metrics) {
    INFO("step " << row.at("step"));
    // The coefficient the step used, then Ziegler's update from the KL it measured.
    // float64 both sides from the same logged float64 KL (JSON keeps 17 digits): a few ulp
    // per step, 4 steps, ≈ 1e-15 relative; 1e-12 leaves room.
    CHECK(number(row, "actor/reward_kl_penalty_coeff") == doctest::Approx(coef).epsilon(1e-12));
    const double kl = number(row, "actor/reward_kl_penalty");
    CHECK(kl >= 0);  // k3 per token is >= 0
    const double error = std::clamp(kl / target - 1, -0.2, 0.2);
    coef *= 1 + error * samples / horizon;
  }
  CHECK(whole.metrics.back().at("actor/reward_kl_penalty").get<double>() > 0);

  // Stopped after the step 2 checkpoint and resumed: steps 3 and 4 are the same numbers.
  std::vector<std::string> half_sets = sets;
  half_sets[6] = "experiment.steps=2";
  const Run half = run(dir, "half", half_sets);
  const std::string out = dir.path() + "/resume.out";
  REQUIRE(run_tandem({"resume", half.dir, "--set", "experiment.steps=4"}, out, 240).exit_code == 0);
  const std::vector<nlohmann::json> resumed = read_json_lines(half.dir + "/metrics.jsonl");
  REQUIRE(resumed.size() == 4);
  for (size_t i = 2; i < 4; ++i) {
    INFO("step " << i + 1);
    CHECK(resumed[i].at("actor/reward_kl_penalty_coeff") == whole.metrics[i].at("actor/reward_kl_penalty_coeff"));
    CHECK(resumed[i].at("actor/reward_kl_penalty") == whole.metrics[i].at("actor/reward_kl_penalty"));
  }
}

TEST_CASE("dynamic sampling trains only on groups whose rewards differ; the overlong penalty is DAPO's formula") {
  TempDir dir;
  // A reward that some random 3-token answers get and others not: a digit anywhere.
  const std::vector<std::string> sets = {"reward=[{name: format, pattern: '(?s).*[0-9].*', weight: 1.0}]",
                                         "algorithm.filter_groups.metric=reward",
                                         "algorithm.filter_groups.max_batches=6",
                                         "algorithm.overlong.buffer_len=2",
                                         "algorithm.overlong.penalty_factor=0.5",
                                         "experiment.steps=4"};
  const Run r = run(dir, "dapo", sets);
  REQUIRE(r.metrics.size() == 4);
  size_t logged = 0;
  for (const auto& row : r.metrics) {
    const int64_t step = row.at("step").get<int64_t>();
    INFO("step " << step);
    const double rounds = number(row, "data/generation_rounds");
    CHECK(rounds >= 1);
    CHECK(rounds <= 6);
    const double count = number(row, "response/count");
    CHECK(std::fmod(count, 4.0) == 0);
    CHECK(count <= 16);
    // The step's samples, in group order: each kept group's rewards differ (unless no
    // group did, when the first round trains as it is, all rounds spent).
    std::vector<nlohmann::json> step_samples;
    for (const auto& s : r.samples) {
      if (s.at("step").get<int64_t>() == step) step_samples.push_back(s);
    }
    REQUIRE(static_cast<double>(step_samples.size()) == count);
    logged += step_samples.size();
    bool all_informative = true;
    for (size_t g = 0; g < step_samples.size(); g += 4) {
      bool differ = false;
      for (size_t i = g + 1; i < g + 4; ++i) differ = differ || step_samples[i].at("reward") != step_samples[g].at("reward");
      all_informative = all_informative && differ;
    }
    if (!all_informative) CHECK(rounds == 6);
    // reward = format score + min(0, -(length - (3 - 2)) / 2 * 0.5) on every sample.
    double penalty_sum = 0;
    for (const auto& s : step_samples) {
      const double length = s.at("response_tokens").get<double>();
      const double penalty = std::min(0.0, -(length - 1) / 2 * 0.5);
      penalty_sum += penalty;
      // float64 sums of two terms, one rounding each side: ≈ 2e-16 relative.
      CHECK(s.at("reward").get<double>() ==
            doctest::Approx(s.at("rewards").at("format").get<double>() + penalty).epsilon(1e-12));
    }
    // float64 means of at most 16 terms in another order: ≤ 16 ulp ≈ 4e-15 relative.
    CHECK(number(row, "reward/overlong_penalty") == doctest::Approx(penalty_sum / count).epsilon(1e-12));
  }
  CHECK(logged > 0);
}

TEST_CASE("rollout correction: an fp32 learner's weights stay within the probe's bound; a bf16 learner's mismatch is masked") {
  TempDir dir;
  // The probe checks every sample's rollout log-probs against the fp32 learner's within
  // weight_sync.probe_tolerance (1e-3) before the correction, so every token's log-ratio d
  // has |d| <= 1e-3: the mean weight lies in [e^-1e-3, e^1e-3], no weight reaches 2, and
  // the mean k1 mismatch is at most 1e-3.
  const Run fp32 = run(dir, "fp32", {"algorithm.rollout_is.level=token", "weight_sync.probe_every=1"});
  for (const auto& row : fp32.metrics) {
    INFO("step " << row.at("step"));
    const double mean = number(row, "rollout_is/weight_mean");
    CHECK(mean >= std::exp(-1e-3));
    CHECK(mean <= std::exp(1e-3));
    CHECK(number(row, "rollout_is/clipped_share") == 0);
    CHECK(std::abs(number(row, "rollout_is/mismatch_kl")) <= 1e-3);
    CHECK(number(row, "sync/probe_logprob_max_diff") <= 1e-3);
  }
  // A bf16 learner against the fp32 engine: sequence weights differ from 1 by more than
  // 1e-4 (bf16 keeps 8 significant bits), so a window that narrow masks sequences.
  const Run bf16 = run(dir, "bf16", {"algorithm.rollout_is.level=sequence", "algorithm.rollout_is.mode=mask",
                                     "algorithm.rollout_is.threshold=1.0001", "learner.precision=bf16"});
  double masked = 0;
  for (const auto& row : bf16.metrics) {
    masked += number(row, "rollout_is/masked_share");
    CHECK(number(row, "rollout_is/mismatch_k3") >= 0);
    CHECK(number(row, "rollout_is/weight_mean") <= 1.0001);
  }
  CHECK(masked > 0);
}
