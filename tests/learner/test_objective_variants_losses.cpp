// verl's policy losses (sapo, cispo, geo_mean, gpg, clip_cov, kl_cov), called by their
// registry names, against float64 references written from the definitions with plain
// loops (tests/support/objectives_reference_variants.h), on fresh random ragged batches;
// plus extreme log-ratios and all-masked batches for every new estimator and loss. The
// estimators are in test_objective_variants_advantages.cpp (the same executable,
// test_objectives).
#include "learner/loss_aggregation.h"
#include "tests/support/objectives_variant_checks.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("sapo, cispo and gpg: loss, ratio, clip flags and gradients match the reference") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  int64_t cispo_clipped = 0;  // coverage
  for (int trial = 0; trial < 24; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 16));
    PolicyLossParams params;
    params.clip_low = rng.uniform(0.05, 0.3);
    params.clip_high = rng.uniform(0.05, 0.4);
    params.tau_pos = rng.uniform(0.5, 2.0);
    params.tau_neg = rng.uniform(0.5, 2.0);
    struct Case {
      const char* name;
      RefPolicy want;
      bool has_ratio, sequence_mean;
    };
    // sapo's gradient -A 4 s (1 - s) rho: float32's sigmoid leaves 1 - s an absolute
    // error ~u (u = 2^-24), relatively large where s ~ 1, but the gradient's absolute
    // error stays <= 4 u rho |A| ~ 4 x 6e-8 x 3.3 x 4 ~ 3e-6 here (|log rho| <~ 1.2,
    // |A| <~ 4), inside kFloat's atol 1e-5.
    for (const Case& c : {Case{"sapo", ref_sapo(x, params), true, true},
                          Case{"cispo", ref_cispo(x, params), true, false},
                          Case{"gpg", ref_gpg_loss(x), false, false}}) {
      INFO(c.name << " low " << params.clip_low << " high " << params.clip_high << " tau_pos " << params.tau_pos
                  << " tau_neg " << params.tau_neg);
      at::Tensor logprobs;
      PolicyLossResult got = policy_loss(c.name, policy_inputs(x, logprobs), params);
      CHECK(got.sequence_mean == c.sequence_mean);
      check_policy(x, got, logprobs, c.want, c.has_ratio);
      if (std::string(c.name) == "cispo")
        for (const auto& row : c.want.clipped) cispo_clipped += std::count(row.begin(), row.end(), true);
    }
  }
  CHECK(cispo_clipped > 0);
}

TEST_CASE("geo_mean: per-sequence geometric-mean loss; its gradient through seq_mean_token_mean") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  int64_t cut = 0, uncut = 0;  // coverage: tokens on either side of the dangerous-side cut
  for (int trial = 0; trial < 20; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 16));
    PolicyLossParams params;
    params.clip_low = rng.uniform(0.05, 0.4);
    params.clip_high = rng.uniform(0.05, 0.4);
    INFO("low " << params.clip_low << " high " << params.clip_high);
    at::Tensor logprobs;
    PolicyLossResult got = policy_loss("geo_mean", policy_inputs(x, logprobs), params);
    CHECK(got.sequence_mean);
    const RefPolicy want = ref_geo_mean(x, params);
    check_matrix(got.loss, want.loss, kFloat, "loss");
    at::Tensor total = aggregate_loss(got.loss, mask_tensor(x), LossAggregation::seq_mean_token_mean);
    check_scalar(total.item<double>(), ref_aggregate(x, want.loss, LossAggregation::seq_mean_token_mean, 0), kFloat,
                 "aggregate");
    total.backward();
    double sequences = 0;  // rows with a token: the aggregate's denominator
    for (const auto& row : x.valid) sequences += std::any_of(row.begin(), row.end(), [](bool v) { return v; }) ? 1 : 0;
    const Matrix grad = to_matrix(logprobs.grad()), clipped = to_matrix(got.clipped), ratio = to_matrix(got.ratio);
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < x.valid[b].size(); ++t) {
        if (!x.valid[b][t]) {
          CHECK(grad[b][t] == 0.0);
          CHECK(clipped[b][t] == 0.0);
          CHECK(ratio[b][t] == 1.0);
          continue;
        }
        if (want.near_bound[b][t]) continue;
        CHECK((clipped[b][t] != 0) == want.clipped[b][t]);
        // The row's dL/d logprobs_t over the rows averaged; 0 exactly where l_t is cut.
        if (want.grad[b][t] == 0.0) {
          CHECK(grad[b][t] == 0.0);
          ++cut;
        } else {
          check_token(grad[b][t], want.grad[b][t] / sequences, kFloat, "d aggregate / d logprobs", b, t);
          ++uncut;
        }
      }
  }
  CHECK(cut > 0);
  CHECK(uncut > 0);
}

TEST_CASE("clip_cov: ppo_clip, except a seeded draw of the covariance window's unclipped tokens, which lose loss and "
          "gradient") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  int64_t chosen_total = 0, draws_compared = 0;  // coverage over all trials
  for (int trial = 0; trial < 20; ++trial) {
    Batch x = random_batch(rng, rng.integer(2, 4), rng.integer(2, 4), rng.integer(4, 16));
    PolicyLossParams params;
    params.clip_low = rng.uniform(0.05, 0.3);
    params.clip_high = rng.uniform(0.05, 0.4);
    params.dual_c = trial % 2 == 0 ? 0.0 : rng.uniform(1.05, 3.0);  // clip_cov has no dual clip: ignored
    // Mostly the window of positive covariances (many candidates, more than k: a real
    // draw); every third trial a narrow window (covariances here are O(1)), so that both
    // bounds decide, and often fewer candidates than k.
    const bool narrow = trial % 3 == 2;
    params.cov_ratio = narrow ? rng.uniform(0.05, 0.6) : rng.uniform(0.05, 0.25);
    params.clip_cov_lb = narrow ? rng.uniform(-0.3, 0.0) : 0.0;
    params.clip_cov_ub = narrow ? rng.uniform(0.1, 0.5) : 1e9;
    params.seed = static_cast<uint64_t>(rng.integer(0, int64_t{1} << 40));
    INFO("low " << params.clip_low << " high " << params.clip_high << " dual_c " << params.dual_c << " cov_ratio "
                << params.cov_ratio << " window (" << params.clip_cov_lb << ", " << params.clip_cov_ub << ") seed "
                << params.seed);
    PolicyLossParams no_dual = params;
    no_dual.dual_c = 0;
    const RefPolicy ppo = ref_policy(x, no_dual, false);
    const RefClipCovCandidates candidates = ref_clip_cov_candidates(x, params, ppo);

    at::Tensor logprobs;
    PolicyLossResult got = policy_loss("clip_cov", policy_inputs(x, logprobs), params);
    CHECK_FALSE(got.sequence_mean);
    check_matrix(got.ratio, ppo.ratio, kFloat, "ratio");
    got.loss.sum().backward();
    const Matrix loss = to_matrix(got.loss), grad = to_matrix(logprobs.grad()), clipped = to_matrix(got.clipped);
    int64_t chosen = 0, sure = 0, maybe = 0;  // drawn; certain candidates; candidates within rounding
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < x.valid[b].size(); ++t) {
        if (!x.valid[b][t]) {
          CHECK(loss[b][t] == 0.0);
          CHECK(grad[b][t] == 0.0);
          CHECK(clipped[b][t] == 0.0);
          continue;
        }
        if (candidates.uncertain[b][t]) ++maybe;
        else if (candidates.candidate[b][t]) ++sure;
        // A drawn token's loss is exactly 0; any other's is -A rho or -A clip(rho), never 0
        // for the nonzero float32 advantages drawn here.
        if (loss[b][t] == 0.0) {
          ++chosen;
          CHECK(grad[b][t] == 0.0);
          CHECK(clipped[b][t] != 0);  // policy_loss.h: `clipped` flags clip or selection
          CHECK((candidates.candidate[b][t] || candidates.uncertain[b][t]));
          continue;
        }
        check_token(loss[b][t], ppo.loss[b][t], kFloat, "loss of an undrawn token", b, t);
        if (ppo.near_bound[b][t]) continue;
        CHECK((clipped[b][t] != 0) == ppo.clipped[b][t]);
        if (ppo.clipped[b][t]) CHECK(grad[b][t] == 0.0);
        check_token(grad[b][t], ppo.grad[b][t], kFloat, "d loss / d logprobs", b, t);
      }
    // min(k, candidates) drawn, the candidates counted up to rounding.
    const int64_t k = ref_cov_count(x, params.cov_ratio);
    INFO("k " << k << " candidates " << sure << " (+" << maybe << " within rounding) drawn " << chosen);
    CHECK(chosen >= std::min(k, sure));
    CHECK(chosen <= std::min(k, sure + maybe));
    chosen_total += chosen;

    // The same seed draws the same tokens.
    at::Tensor again;
    CHECK(to_matrix(policy_loss("clip_cov", policy_inputs(x, again), params).loss) == loss);
    // Other seeds draw other tokens when there are many ways to pick: with C(candidates, k)
    // >= C(certain candidates, k) >= 20 equally likely draws, 8 more seeds all drawing this
    // one has chance <= 20^-8 ~ 4e-11. (About half the trials qualify: the chance that none
    // of 20 does is ~0.45^20 ~ 1e-7, by simulation of the reference.)
    if (binomial(sure, k) >= 20) {
      bool differs = false;
      for (uint64_t s = 1; s <= 8 && !differs; ++s) {
        PolicyLossParams other = params;
        other.seed = params.seed + s;
        at::Tensor other_logprobs;
        differs = to_matrix(policy_loss("clip_cov", policy_inputs(x, other_logprobs), other).loss) != loss;
      }
      CHECK(differs);
      ++draws_compared;
    }
  }
  CHECK(chosen_total > 0);
  CHECK(draws_compared > 0);
}

TEST_CASE("kl_cov: the cov_ratio share of tokens with the largest covariance pays kl_cov_coef |log ratio|") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  int64_t chosen_total = 0;
  for (int trial = 0; trial < 16; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 16));
    PolicyLossParams params;
    params.cov_ratio = rng.uniform(0.02, 0.5);
    params.kl_cov_coef = rng.uniform(0.1, 2.0);
    INFO("cov_ratio " << params.cov_ratio << " kl_cov_coef " << params.kl_cov_coef);
    at::Tensor logprobs;
    PolicyLossResult got = policy_loss("kl_cov", policy_inputs(x, logprobs), params);
    CHECK_FALSE(got.sequence_mean);
    // The singled-out tokens are the flagged ones: k of them, and none has a smaller cov
    // than an unflagged token beyond rounding (where the float64 top k is separated by
    // more than kRefCovarianceMargin, that makes them exactly the top k).
    const Matrix clipped = to_matrix(got.clipped), cov = ref_covariance(x);
    Flags chosen(x.rows(), std::vector<bool>(x.valid[0].size(), false));
    int64_t count = 0;
    double lowest_chosen = std::numeric_limits<double>::infinity(), highest_other = -lowest_chosen;
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < x.valid[b].size(); ++t) {
        if (!x.valid[b][t]) continue;  // check_policy: never flagged
        if (clipped[b][t] != 0) {
          chosen[b][t] = true;
          ++count;
          lowest_chosen = std::min(lowest_chosen, cov[b][t]);
        } else {
          highest_other = std::max(highest_other, cov[b][t]);
        }
      }
    CHECK(count == ref_cov_count(x, params.cov_ratio));
    CHECK(lowest_chosen >= highest_other - kRefCovarianceMargin);
    check_policy(x, got, logprobs, ref_kl_cov(x, params, chosen), true);
    chosen_total += count;
  }
  CHECK(chosen_total > 0);
}

TEST_CASE("extreme log-ratios (x = +-40): sapo, cispo, kl_cov and geo_mean stay finite; sapo's gate passes no "
          "gradient there") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  int64_t extremes = 0;
  auto all_finite = [](const Matrix& m) {
    for (const Row& row : m)
      for (double v : row)
        if (!std::isfinite(v)) return false;
    return true;
  };
  for (int trial = 0; trial < 8; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 3), rng.integer(2, 4), rng.integer(2, 12));
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < x.valid[b].size(); ++t)
        if (x.valid[b][t] && rng.chance(0.3)) {
          x.old_logprobs[b][t] = as_float(x.logprobs[b][t] + (rng.chance(0.5) ? 40.0 : -40.0));
          ++extremes;
        }
    PolicyLossParams params;
    params.clip_low = rng.uniform(0.05, 0.3);
    params.clip_high = rng.uniform(0.05, 0.4);
    params.tau_pos = rng.uniform(0.5, 2.0);
    params.tau_neg = rng.uniform(0.5, 2.0);
    params.cov_ratio = 0.3;
    params.kl_cov_coef = rng.uniform(0.1, 2.0);
    {
      INFO("sapo");  // the reference bounds log rho at +-20: loss -(4/tau) A or ~-(4/tau) s(-tau) A, gradient 0
      at::Tensor logprobs;
      PolicyLossResult got = policy_loss("sapo", policy_inputs(x, logprobs), params);
      check_policy(x, got, logprobs, ref_sapo(x, params), true);
    }
    {
      INFO("cispo");  // c is a clip bound there: loss -c A logprobs, gradient -c A
      at::Tensor logprobs;
      PolicyLossResult got = policy_loss("cispo", policy_inputs(x, logprobs), params);
      check_policy(x, got, logprobs, ref_cispo(x, params), true);
    }
    {
      // Whether the |log ratio| term reads x or x bounded at +-20 is left open: finite, and
      // the tokens without it are -A rho with rho bounded.
      INFO("kl_cov");
      at::Tensor logprobs;
      PolicyLossResult got = policy_loss("kl_cov", policy_inputs(x, logprobs), params);
      got.loss.sum().backward();
      const Matrix loss = to_matrix(got.loss), clipped = to_matrix(got.clipped);
      CHECK(all_finite(loss));
      CHECK(all_finite(to_matrix(got.ratio)));
      CHECK(all_finite(to_matrix(logprobs.grad())));
      const RefPolicy base = ref_kl_cov(x, params, Flags(x.rows(), std::vector<bool>(x.valid[0].size(), false)));
      for (int64_t b = 0; b < x.rows(); ++b)
        for (size_t t = 0; t < x.valid[b].size(); ++t)
          if (x.valid[b][t] && clipped[b][t] == 0)
            check_token(loss[b][t], base.loss[b][t], kFloat, "kl_cov loss", b, t);
    }
    {
      INFO("geo_mean");
      at::Tensor logprobs;
      PolicyLossResult got = policy_loss("geo_mean", policy_inputs(x, logprobs), params);
      at::Tensor total = aggregate_loss(got.loss, mask_tensor(x), LossAggregation::seq_mean_token_mean);
      total.backward();
      CHECK(all_finite(to_matrix(got.loss)));
      CHECK(std::isfinite(total.item<double>()));
      CHECK(all_finite(to_matrix(logprobs.grad())));
    }
  }
  CHECK(extremes > 0);

  // geo_mean bounds x at +-20 before exp (policy_loss.h): one token with x = 100 and A = -1
  // is on the safe side (l = x, uncut), so unbounded it would give exp(100) = inf in
  // float32; bounded, L = e^20 and no gradient.
  Batch y;
  y.group_size = 1;
  y.valid = {{true}};
  y.logprobs = {{-0.5}};
  y.old_logprobs = {{-100.5}};
  y.advantages = {{-1.0}};
  at::Tensor logprobs;
  PolicyLossResult got = policy_loss("geo_mean", policy_inputs(y, logprobs), PolicyLossParams{});
  at::Tensor total = aggregate_loss(got.loss, mask_tensor(y), LossAggregation::seq_mean_token_mean);
  total.backward();
  check_scalar(total.item<double>(), std::exp(20.0), kFloat, "geo_mean at x = 100");
  CHECK(logprobs.grad()[0][0].item<double>() == 0.0);
}

TEST_CASE("all-masked batches: every new estimator and loss gives zeros, never NaN") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  const Batch x = all_masked_batch(rng, 3, 4, 6);
  auto all_zero = [](const Matrix& m) {
    for (const Row& row : m)
      for (double v : row)
        if (v != 0.0) return false;  // NaN too
    return true;
  };
  for (const bool with_token_rewards : {false, true}) {
    AdvantageInputs in = advantage_inputs(x, with_token_rewards);
    in.baselines = tensor(random_baselines(rng, x.rows()));
    std::vector<std::string> names = kGroupEstimators;
    names.push_back("remax");
    names.push_back("reinforce_plus_plus");
    for (const std::string& name : names) {
      INFO(name << " token rewards " << with_token_rewards);
      CHECK(all_zero(to_matrix(estimate(name, in, {}).advantages)));
    }
  }
  PolicyLossParams params;
  params.cov_ratio = 0.3;  // k = max(1, 0) = 1 with no token to single out
  params.clip_cov_lb = -1e9;
  params.clip_cov_ub = 1e9;
  std::vector<std::string> losses = kNewLosses;
  losses.push_back("vanilla");
  for (const std::string& name : losses) {
    INFO(name);
    at::Tensor logprobs;
    PolicyLossResult got = policy_loss(name, policy_inputs(x, logprobs), params);
    CHECK(all_zero(to_matrix(got.loss)));
    CHECK(all_zero(to_matrix(got.clipped)));
    const Matrix ratio = to_matrix(got.ratio);
    for (const Row& row : ratio)
      for (double v : row) CHECK(v == 1.0);
    at::Tensor total = aggregate_loss(got.loss, mask_tensor(x), got.sequence_mean ? LossAggregation::seq_mean_token_mean
                                                                                  : LossAggregation::token_mean);
    CHECK(total.item<double>() == 0.0);
    total.backward();
    CHECK(all_zero(to_matrix(logprobs.grad())));
  }
}
