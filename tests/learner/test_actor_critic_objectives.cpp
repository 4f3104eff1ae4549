// The learner's loss aggregation, KL estimators (their bounds and the adaptive KL
// controller) and the actor and critic objectives built from them, against float64
// references written from the definitions with plain loops (no at:: ops), on fresh random
// ragged batches (all-masked rows, NaN in every padded slot so that leaks show). Advantage
// estimators, policy losses and the registry are in test_objectives.cpp (the same
// executable, test_objectives).
#include "learner/kl.h"
#include "learner/loss_aggregation.h"
#include "learner/objective.h"
#include "learner/policy_loss.h"
#include "learner/value_loss.h"
#include "tests/support/objectives_checks.h"
#include "tests/support/objectives_reference.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("loss aggregation: every mode matches the reference; micro-batches with the global scale add up") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    Batch x = random_batch(rng, rng.integer(2, 5), rng.integer(1, 4), rng.integer(2, 16));
    const double max_length = static_cast<double>(x.valid[0].size() + rng.integer(0, 8));
    at::Tensor loss = tensor(x.advantages);  // any per-token values, NaN in the padding
    at::Tensor mask = mask_tensor(x, trial % 2 ? at::kBool : at::kFloat);
    // Micro-batches: up to 3 contiguous row ranges of random sizes.
    std::vector<int64_t> cuts = {0, rng.integer(0, x.rows()), rng.integer(0, x.rows()), x.rows()};
    std::sort(cuts.begin(), cuts.end());
    const AggregationScale scale = aggregation_scale(mask, max_length);
    AggregationScale combined{0, 0, 0, max_length};
    for (LossAggregation mode : kModes) {
      INFO(loss_aggregation_name(mode));
      const double want = ref_aggregate(x, x.advantages, mode, max_length);
      check_scalar(aggregate_loss(loss, mask, mode, max_length).item<double>(), want, kFloat, "full batch");
      double sum = 0;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        at::Tensor part_mask = mask.slice(0, cuts[i], cuts[i + 1]);
        sum += aggregate_loss(loss.slice(0, cuts[i], cuts[i + 1]), part_mask, mode, scale).item<double>();
        if (mode == LossAggregation::token_mean) combined = combine(combined, aggregation_scale(part_mask, max_length));
      }
      check_scalar(sum, want, kFloat, "sum of micro-batches");
    }
    CHECK(combined.tokens == scale.tokens);
    CHECK(combined.sequences == scale.sequences);
    CHECK(combined.rows == scale.rows);
  }
  CHECK_THROWS_WITH_AS(aggregate_loss(at::ones({2, 3}), at::ones({2, 3}), LossAggregation::seq_mean_token_sum_norm),
                       doctest::Contains("max_response_length > 0"), Error);
}

TEST_CASE("KL estimators k1, k2, k3 match the reference; k3 >= 0; the reward form is -coef * kl, detached") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 10; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 16));
    if (trial == 0) {  // far from the reference too: log-ratios up to +-8
      for (int64_t b = 0; b < x.rows(); ++b)
        for (size_t t = 0; t < x.valid[b].size(); ++t)
          if (x.valid[b][t]) x.ref_logprobs[b][t] = as_float(x.logprobs[b][t] + rng.uniform(-8, 8));
    }
    for (const std::string& name : kl_estimator_names()) {
      INFO(name);
      const KlEstimator estimator = kl_estimator_from_name(name);
      at::Tensor logprobs = tensor(x.logprobs).requires_grad_(true);
      at::Tensor kl = kl_per_token(logprobs, tensor(x.ref_logprobs), mask_tensor(x), estimator);
      const Matrix want = ref_kl(x, estimator);
      check_matrix(kl, want, kFloat, name);
      if (estimator == KlEstimator::k3) CHECK(kl.min().item<double>() >= 0.0);
      const double coef = rng.uniform(0.01, 0.5);
      at::Tensor penalty = kl_token_rewards(logprobs, tensor(x.ref_logprobs), mask_tensor(x), estimator, coef);
      CHECK_FALSE(penalty.requires_grad());
      Matrix scaled = want;
      for (auto& row : scaled)
        for (double& v : row) v *= -coef;
      check_matrix(penalty, scaled, kFloat, "kl_token_rewards");
    }
  }
  CHECK_THROWS_WITH_AS(kl_estimator_from_name("k4"), doctest::Contains("did you mean k1?"), Error);
}

TEST_CASE("KL bounds at edge gaps: k3 at most 10 with no gradient where bounded, as verl; k1 and k2 unbounded") {
  // Gaps ref_logprob - logprob of 0, +-3.5, +-25, +-100 (the unbounded k3 gives 28.6 at
  // +3.5, 7e10 at +25 and inf in float32 at +100), beside random gaps in [-30, 30].
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  const Row edges = {0.0, 3.5, -3.5, 25.0, -25.0, 100.0, -100.0};
  const int64_t T = static_cast<int64_t>(edges.size()) + 1;
  Batch x;
  x.valid.assign(3, std::vector<bool>(T, true));
  x.logprobs = x.ref_logprobs = Matrix(3, Row(T));
  for (int64_t b = 0; b < 3; ++b) {
    Row gaps = edges;
    if (b > 0)
      for (double& g : gaps) g = rng.uniform(-30, 30);
    std::shuffle(gaps.begin(), gaps.end(), std::mt19937_64(rng.integer(0, 1 << 30)));
    gaps.insert(gaps.begin() + rng.integer(0, T - 1), kNaN);  // one masked slot per row
    for (int64_t t = 0; t < T; ++t) {
      const double g = gaps[t], u = rng.uniform(0.05, 3.0);
      x.valid[b][t] = !std::isnan(g);
      // Both log-probs <= 0: the less likely side is -u - |gap|.
      x.logprobs[b][t] = x.valid[b][t] ? as_float(g > 0 ? -u - g : -u) : kNaN;
      x.ref_logprobs[b][t] = x.valid[b][t] ? as_float(g > 0 ? -u : -u + g) : kNaN;
    }
  }
  int64_t bounded_tokens = 0;
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    // float64 inputs hold the same values; only ulp-level differences of exp() remain:
    // in float64 a few ulps (2^-53 ~ 1.1e-16) per term over 3 x 8 terms is < 1e-14 relative,
    // inside 1e-12.
    const Tolerance tol = dtype == at::kFloat ? kFloat : Tolerance{1e-12, 1e-12};
    for (const std::string& name : kl_estimator_names()) {
      INFO(name << (dtype == at::kFloat ? " float32" : " float64"));
      const KlEstimator estimator = kl_estimator_from_name(name);
      at::Tensor logprobs = tensor(x.logprobs, dtype).requires_grad_(true);
      at::Tensor ref_logprobs = tensor(x.ref_logprobs, dtype);
      at::Tensor kl = kl_per_token(logprobs, ref_logprobs, mask_tensor(x), estimator);
      kl.sum().backward();
      const Matrix got = to_matrix(kl), grad = to_matrix(logprobs.grad());
      const double coef = rng.uniform(0.01, 0.5);
      const Matrix penalty = to_matrix(kl_token_rewards(logprobs, ref_logprobs, mask_tensor(x), estimator, coef));
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t t = 0; t < T; ++t) {
          if (!x.valid[b][t]) {
            CHECK(got[b][t] == 0.0);
            CHECK(grad[b][t] == 0.0);
            continue;
          }
          const double d = x.logprobs[b][t] - x.ref_logprobs[b][t];
          INFO("log-ratio " << d);
          const RefKlToken want = ref_kl_token(d, estimator);
          check_scalar(got[b][t], want.value, tol, "kl");
          check_scalar(penalty[b][t], -coef * want.value, tol, "kl_token_rewards");
          if (estimator == KlEstimator::k3) CHECK(got[b][t] <= 10.0);
          if (want.near_bound) continue;  // float32 and float64 may decide differently
          if (want.bounded) {
            CHECK(got[b][t] == 10.0);
            CHECK(grad[b][t] == 0.0);  // exactly, not NaN: no gradient where a bound is active
            ++bounded_tokens;
          } else {
            check_scalar(grad[b][t], want.grad, tol, "d kl / d logprobs");
          }
        }
    }
  }
  CHECK(bounded_tokens >= 2 * 5);  // k3 at gaps +3.5, +-25, +-100, in each dtype
}

TEST_CASE("actor objective: pg loss (times importance weights) + kl_coef * kl - entropy_coef * entropy, and its metrics") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 12; ++trial) {
    Batch x = random_batch(rng, rng.integer(2, 4), rng.integer(1, 4), rng.integer(2, 12));
    ActorObjectiveParams params;
    params.policy_loss = trial % 2 ? "gspo" : "ppo_clip";
    params.clip = {0.2, 0.28, trial % 3 == 0 ? 2.0 : 0.0};
    params.aggregation = kModes[trial % kModes.size()];
    params.kl_estimator = static_cast<KlEstimator>(trial % 3);
    params.kl_coef = rng.uniform(0.0, 0.3);
    params.entropy_coef = rng.uniform(0.0, 0.1);
    const double max_length = static_cast<double>(x.valid[0].size());
    INFO(params.policy_loss << " " << loss_aggregation_name(params.aggregation));
    at::Tensor logprobs;
    PolicyLossInputs p = policy_inputs(x, logprobs);
    ActorObjectiveInputs in{p.logprobs, p.old_logprobs, p.advantages, p.mask, tensor(x.ref_logprobs), tensor(x.entropy)};
    // Half of the trials weight each token's policy loss (async RL's truncated importance weights).
    Matrix is_weights(x.rows(), Row(x.valid[0].size(), 1.0));
    if (trial % 4 >= 2) {
      for (Row& row : is_weights)
        for (double& w : row) w = rng.uniform(0.1, 2.0);
      in.is_weights = tensor(is_weights);
    }
    const AggregationScale scale = aggregation_scale(in.mask, max_length);
    ObjectiveResult got = actor_objective(in, params, scale);

    RefPolicy policy = ref_policy(x, params.clip, params.policy_loss == "gspo");
    const Matrix kl = ref_kl(x, params.kl_estimator);
    Matrix weighted_loss = policy.loss;
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < weighted_loss[b].size(); ++t) weighted_loss[b][t] *= is_weights[b][t];
    const double pg = ref_aggregate(x, weighted_loss, params.aggregation, max_length);
    const double total = pg + params.kl_coef * ref_aggregate(x, kl, params.aggregation, max_length) -
                         params.entropy_coef * ref_aggregate(x, x.entropy, params.aggregation, max_length);
    check_scalar(got.loss.item<double>(), total, kFloat, "loss");
    check_scalar(got.metrics.loss, total, kFloat, "metrics.loss");
    check_scalar(got.metrics.pg_loss, pg, kFloat, "pg_loss");
    check_scalar(got.metrics.kl, ref_masked_mean(x, kl), kFloat, "kl");
    check_scalar(got.metrics.entropy, ref_masked_mean(x, x.entropy), kFloat, "entropy");
    Matrix half_square(x.rows(), Row(x.valid[0].size(), 0.0)), flags = half_square;
    double ratio_min = 1e300, ratio_max = -1e300, near = 0;
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < x.valid[b].size(); ++t) {
        if (!x.valid[b][t]) continue;
        const double d = x.logprobs[b][t] - x.old_logprobs[b][t];
        half_square[b][t] = 0.5 * d * d;
        flags[b][t] = policy.clipped[b][t] ? 1 : 0;
        near += policy.near_bound[b][t] ? 1 : 0;
        ratio_min = std::min(ratio_min, policy.ratio[b][t]);
        ratio_max = std::max(ratio_max, policy.ratio[b][t]);
      }
    check_scalar(got.metrics.approx_kl, ref_masked_mean(x, half_square), kFloat, "approx_kl");
    // A batch without a valid token reports the neutral ratio 1.
    const bool any_valid = ratio_max >= ratio_min;
    check_scalar(got.metrics.ratio_mean, any_valid ? ref_masked_mean(x, policy.ratio) : 1.0, kFloat, "ratio_mean");
    check_scalar(got.metrics.ratio_min, any_valid ? ratio_min : 1.0, kFloat, "ratio_min");
    check_scalar(got.metrics.ratio_max, any_valid ? ratio_max : 1.0, kFloat, "ratio_max");
    // Tokens within rounding of a clip bound may be flagged either way. The rest is exact
    // but for one rounding: a sum of 0/1 flags is an integer (exact in float32 below 2^24),
    // divided once (<= u = 2^-24 ~ 6e-8 relative): 1e-6.
    const double tokens = got.metrics.tokens;
    check_scalar(got.metrics.clipfrac, ref_masked_mean(x, flags), {near / std::max(tokens, 1.0) + 1e-6, 0},
                 "clipfrac");

    // Micro-batches with the mini-batch's scale: losses, gradients and metrics add up.
    got.loss.backward();
    at::Tensor full_grad = logprobs.grad().clone();
    logprobs.grad().zero_();
    ObjectiveMetrics merged;
    double sum = 0;
    const int64_t cut = rng.integer(0, x.rows());
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, cut}, {cut, x.rows()}}) {
      auto rows = [&](const at::Tensor& t) { return t.slice(0, begin, end); };
      ActorObjectiveInputs part{rows(in.logprobs), rows(in.old_logprobs), rows(in.advantages),
                                rows(in.mask),     rows(in.ref_logprobs), rows(in.entropy)};
      if (in.is_weights.defined()) part.is_weights = rows(in.is_weights);
      ObjectiveResult r = actor_objective(part, params, scale);
      r.loss.backward();
      sum += r.loss.item<double>();
      accumulate(merged, r.metrics);
    }
    check_scalar(sum, total, kFloat, "sum of micro-batch losses");
    check_matrix(logprobs.grad(), to_matrix(full_grad), kFloat, "accumulated gradient");
    check_scalar(merged.pg_loss, got.metrics.pg_loss, kFloat, "merged pg_loss");
    check_scalar(merged.kl, got.metrics.kl, kFloat, "merged kl");
    check_scalar(merged.ratio_max, got.metrics.ratio_max, kFloat, "merged ratio_max");
    CHECK(merged.tokens == got.metrics.tokens);
  }
}

TEST_CASE("critic objective: clipped value loss (0.5 * squared error) and explained variance") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 12; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 12));
    const double clip_range = trial % 3 == 0 ? 0.0 : rng.uniform(0.05, 0.5);
    Matrix returns = x.advantages;  // any targets with NaN padding
    Matrix want(x.rows(), Row(x.valid[0].size(), 0.0));
    double sum_r = 0, sum_e = 0, n = 0;
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < want[b].size(); ++t) {
        if (!x.valid[b][t]) continue;
        const double v = x.values[b][t], old = x.old_values[b][t], r = returns[b][t];
        const double v_clipped = old + std::min(std::max(v - old, -clip_range), clip_range);
        const double plain = (v - r) * (v - r);
        want[b][t] = 0.5 * (clip_range > 0 ? std::max(plain, (v_clipped - r) * (v_clipped - r)) : plain);
        sum_r += r, sum_e += r - v, n += 1;
      }
    double var_r = 0, var_e = 0;
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < want[b].size(); ++t)
        if (x.valid[b][t]) {
          const double r = returns[b][t], e = r - x.values[b][t];
          var_r += (r - sum_r / n) * (r - sum_r / n);
          var_e += (e - sum_e / n) * (e - sum_e / n);
        }
    at::Tensor values = tensor(x.values).requires_grad_(true);
    at::Tensor mask = mask_tensor(x);
    check_matrix(clipped_value_loss(values, tensor(x.old_values), tensor(returns), mask, clip_range), want, kFloat,
                 "value loss");
    const LossAggregation mode = kModes[trial % kModes.size()];
    ObjectiveResult got = critic_objective(values, tensor(x.old_values), tensor(returns), mask, clip_range, mode,
                                           aggregation_scale(mask, 16));
    check_scalar(got.metrics.value_loss, ref_aggregate(x, want, mode, 16), kFloat, "aggregated value loss");
    // The learner computes it in float64 (learner/value_loss.cpp) from the float32 values
    // this reference reads too: float64 rounding over <= 16 x 12 terms (< 2e-14) only.
    check_scalar(got.metrics.explained_variance, var_r > 0 ? 1 - var_e / var_r : 0.0, {1e-5, 1e-5}, "explained var");
    got.loss.backward();
    for (const Row& row : to_matrix(values.grad()))
      for (double g : row) CHECK(std::isfinite(g));
  }
}

TEST_CASE("adaptive KL controller follows Ziegler et al.'s clipped proportional update") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  KlController fixed(0.05, false, 0.01);
  fixed.update(1.0, 512);
  CHECK(fixed.coef() == 0.05);
  const double target = rng.uniform(0.005, 0.1), horizon = 10000;
  KlController controller(0.1, true, target, horizon);
  double want = 0.1;
  for (int step = 0; step < 50; ++step) {
    const double measured = target * rng.uniform(0.0, 2.5);  // inside and outside the +-20% clip
    const int64_t n = rng.integer(1, 1024);
    want *= 1 + std::min(std::max(measured / target - 1, -0.2), 0.2) * n / horizon;
    controller.update(measured, n);
    // Both sides are the same float64 product over <= 50 steps: <= 50 x 2^-53 ~ 6e-15 apart.
    check_scalar(controller.coef(), want, {0, 1e-12}, "coef");
  }
  KlController rising(0.1, true, 0.01, 100);
  rising.update(10.0, 100);  // error clipped to +0.2
  check_scalar(rising.coef(), 0.12, {0, 1e-12}, "clipped increase");
  CHECK_THROWS_AS(rising.update(std::nan(""), 1), Error);
}

