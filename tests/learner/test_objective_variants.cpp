// verl's advantage estimators (grpo_vectorized, rloo_vectorized, grpo_passk, opo, gpg,
// reinforce_plus_plus_baseline, remax) and policy losses (sapo, cispo, geo_mean, gpg,
// clip_cov, kl_cov), called by their registry names, against float64 references written
// from the definitions with plain loops (tests/support/objectives_reference_variants.h),
// on fresh random ragged batches (all-masked rows, equal-reward groups, NaN in every padded
// slot so that leaks show); plus hand-computed cases, verl's aliases (vanilla,
// reinforce_plus_plus), the group-size and baseline refusals, extreme log-ratios and
// all-masked batches. The original estimators and losses are in test_objectives.cpp (the
// same executable, test_objectives).
#include "learner/advantages.h"
#include "learner/loss_aggregation.h"
#include "learner/objective_registry.h"
#include "learner/policy_loss.h"
#include "tests/support/objectives_checks.h"
#include "tests/support/objectives_reference.h"
#include "tests/support/objectives_reference_variants.h"

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

namespace {

// The estimators that compare the samples of a prompt, so need group_size >= 2.
const std::vector<std::string> kGroupEstimators = {"grpo_vectorized", "rloo_vectorized", "grpo_passk", "opo", "gpg",
                                                   "reinforce_plus_plus_baseline"};
const std::vector<std::string> kNewLosses = {"sapo", "cispo", "geo_mean", "gpg", "clip_cov", "kl_cov"};

AdvantageResult estimate(const std::string& name, const AdvantageInputs& in, const AdvantageParams& params) {
  return find_advantage_estimator(name)(in, params);
}

PolicyLossResult policy_loss(const std::string& name, const PolicyLossInputs& in, const PolicyLossParams& params) {
  return find_policy_loss(name)(in, params);
}

// ReMax's greedy-answer rewards, drawn as float32 values like the batch's.
Row random_baselines(Random& rng, int64_t rows) {
  Row b;
  for (int64_t i = 0; i < rows; ++i) b.push_back(as_float(rng.normal()));
  return b;
}

int64_t groups_of(const Batch& x) { return x.rows() / x.group_size; }

void check_token(double got, double want, Tolerance tol, const char* what, int64_t b, size_t t) {
  if (!tandem::testing::close(got, want, tol))
    FAIL(what << " [" << b << "][" << t << "]: got " << got << ", reference " << want);
}

// A policy loss's per-token results against its reference: the loss everywhere (0 at
// masked positions), the ratio where the loss defines one, and d loss_t / d logprobs_t by
// autograd (loss.sum(): each token's loss depends on its own logprob only). Masked tokens:
// ratio 1, not clipped, no gradient (their inputs are NaN, so a leak shows). Valid tokens:
// flags and gradients unless a decision is within rounding of a bound; exactly 0 gradient
// where a log-ratio bound makes rho a constant. Tolerances: kFloat (objectives_checks.h).
void check_policy(const Batch& x, const PolicyLossResult& got, const at::Tensor& logprobs, const RefPolicy& want,
                  bool check_ratio) {
  check_matrix(got.loss, want.loss, kFloat, "loss");
  if (check_ratio) check_matrix(got.ratio, want.ratio, kFloat, "ratio");
  got.loss.sum().backward();
  const Matrix grad = to_matrix(logprobs.grad()), clipped = to_matrix(got.clipped), ratio = to_matrix(got.ratio);
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < x.valid[b].size(); ++t) {
      if (!x.valid[b][t]) {
        CHECK(grad[b][t] == 0.0);
        CHECK(clipped[b][t] == 0.0);
        CHECK(ratio[b][t] == 1.0);
        continue;
      }
      if (want.near_bound[b][t]) continue;  // float32 and float64 may decide differently
      CHECK((clipped[b][t] != 0) == want.clipped[b][t]);
      if (want.bounded[b][t]) CHECK(grad[b][t] == 0.0);  // exactly: rho is a constant
      check_token(grad[b][t], want.grad[b][t], kFloat, "d loss / d logprobs", b, t);
    }
}

// Every row masked and every [B, T] input NaN: nothing may be read.
Batch all_masked_batch(Random& rng, int64_t groups, int64_t group_size, int64_t T) {
  Batch x = random_batch(rng, groups, group_size, T);
  for (auto& row : x.valid) std::fill(row.begin(), row.end(), false);
  for (Matrix* m : {&x.logprobs, &x.old_logprobs, &x.ref_logprobs, &x.advantages, &x.token_rewards, &x.values,
                    &x.old_values, &x.entropy})
    for (Row& row : *m) std::fill(row.begin(), row.end(), kNaN);
  return x;
}

// n choose k, in double (only compared with small thresholds).
double binomial(int64_t n, int64_t k) {
  if (k < 0 || k > n) return 0;
  double c = 1;
  for (int64_t i = 1; i <= k; ++i) c = c * static_cast<double>(n - k + i) / static_cast<double>(i);
  return c;
}

}  // namespace

// ---------------------------------------------------------------- advantage estimators

TEST_CASE("grpo_vectorized (variance floored at eps) and rloo_vectorized (= rloo) match the float64 reference") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  int64_t floored_groups = 0;  // coverage: groups where the floor decided the scale
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t group_size = rng.integer(2, 6);
    Batch x = random_batch(rng, rng.integer(2, 5), group_size, rng.integer(3, 12));
    // One group of nearly equal rewards (spread 1e-4, variance ~1e-8 < eps), where the
    // floor decides the scale; picked among the unequal groups so that the equal-reward
    // group stays. It matters without token rewards only: their sums swamp the spread.
    std::vector<int64_t> unequal;
    for (int64_t g = 0; g < groups_of(x); ++g)
      if (!ref_group_all_equal(x.rewards, g * group_size, group_size)) unequal.push_back(g);
    if (!unequal.empty()) {
      const int64_t g = unequal[rng.integer(0, static_cast<int64_t>(unequal.size()) - 1)];
      const double centre = rng.uniform(-1, 1);
      for (int64_t i = 0; i < group_size; ++i) x.rewards[g * group_size + i] = as_float(centre + rng.normal(1e-4));
    }
    const bool with_token_rewards = trial % 2 == 1;
    const AdvantageInputs in = advantage_inputs(x, with_token_rewards);
    const Row r = ref_sequence_rewards(x, with_token_rewards);
    for (const bool normalize_std : {true, false}) {
      INFO("normalize_std " << normalize_std << " token rewards " << with_token_rewards);
      AdvantageParams params;
      params.normalize_std = normalize_std;
      AdvantageResult got = estimate("grpo_vectorized", in, params);
      CHECK_FALSE(got.returns.defined());
      // float64 statistics rounded once to float32 (advantages.h): kExact.
      check_matrix(got.advantages, ref_broadcast(x, ref_grpo_vectorized(r, group_size, normalize_std, params.eps)),
                   kExact, "grpo_vectorized");
      const at::Tensor rloo_vectorized = estimate("rloo_vectorized", in, params).advantages;
      CHECK(to_matrix(rloo_vectorized) == to_matrix(estimate("rloo", in, params).advantages));  // the same function
      check_matrix(rloo_vectorized,
                   ref_broadcast(x, ref_group_advantages(r, group_size, GroupBaseline::leave_one_out, params.eps)),
                   kExact, "rloo_vectorized");
    }
    for (int64_t g = 0; g < groups_of(x); ++g)
      if (!ref_group_all_equal(r, g * group_size, group_size) &&
          ref_group_variance(r, g * group_size, group_size) < AdvantageParams{}.eps)
        ++floored_groups;
  }
  CHECK(floored_groups > 0);
}

TEST_CASE("grpo_vectorized by hand: a group of variance 2^-22 < eps divides by sqrt(eps) + eps") {
  // Rewards 0.5, 0.5, 0.5, 0.5 + d with d = 2^-10 (all exact in float32): mean 0.5 + d/4,
  // Bessel variance (3 (d/4)^2 + (3d/4)^2) / 3 = d^2 / 4 = 2^-22 ~ 2.4e-7 < 1e-6, so the
  // std is floored at sqrt(1e-6) = 1e-3 (grpo would divide by 2^-11 ~ 4.9e-4 instead).
  const double d = 0x1p-10, eps = AdvantageParams{}.eps;
  AdvantageInputs in;
  in.rewards = tensor(Row{0.5, 0.5, 0.5, 0.5 + d});
  in.mask = at::ones({4, 1}, at::kFloat);
  in.group_size = 4;
  const double low = -0.25 * d, high = 0.75 * d;
  check_matrix(estimate("grpo_vectorized", in, {}).advantages,
               Matrix{{low / (1e-3 + eps)}, {low / (1e-3 + eps)}, {low / (1e-3 + eps)}, {high / (1e-3 + eps)}}, kExact,
               "floored std");
  AdvantageParams plain;
  plain.normalize_std = false;
  check_matrix(estimate("grpo_vectorized", in, plain).advantages, Matrix{{low}, {low}, {low}, {high}}, kExact,
               "without normalize_std");
  // The floor is what tells it from grpo here: 0.73 against grpo's 1.50 for the top sample.
  CHECK(to_matrix(estimate("grpo", in, {}).advantages)[3][0] > 1.4);
}

TEST_CASE("grpo_passk: only each group's best sample gets its margin over the runner-up") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  int64_t tied_best = 0, positive_margin = 0;  // coverage over all trials
  for (int trial = 0; trial < 20; ++trial) {
    const bool with_token_rewards = trial % 2 == 1;
    const int64_t group_size = rng.integer(with_token_rewards ? 2 : 3, 6);
    Batch x = random_batch(rng, rng.integer(2, 5), group_size, rng.integer(3, 12));
    if (!with_token_rewards) {
      // A tie for the best in one group every time (two 1s, the rest 0), beside whatever
      // ties the binary groups hold; token rewards would break it.
      const int64_t g = rng.integer(0, groups_of(x) - 1);
      const int64_t first = rng.integer(0, group_size - 1);
      const int64_t second = (first + rng.integer(1, group_size - 1)) % group_size;
      for (int64_t i = 0; i < group_size; ++i) x.rewards[g * group_size + i] = i == first || i == second ? 1.0 : 0.0;
    }
    const AdvantageInputs in = advantage_inputs(x, with_token_rewards);
    const Row r = ref_sequence_rewards(x, with_token_rewards);
    for (const bool normalize_std : {true, false}) {
      INFO("normalize_std " << normalize_std << " token rewards " << with_token_rewards);
      AdvantageParams params;
      params.normalize_std = normalize_std;
      AdvantageResult got = estimate("grpo_passk", in, params);
      CHECK_FALSE(got.returns.defined());
      const Row want = ref_grpo_passk(r, group_size, normalize_std, params.eps);
      check_matrix(got.advantages, ref_broadcast(x, want), kExact, "grpo_passk");
      // At most one sample per group is nonzero, and never negative (a margin).
      const Matrix a = to_matrix(got.advantages);
      for (int64_t g = 0; g < groups_of(x); ++g) {
        int64_t nonzero = 0;
        for (int64_t b = g * group_size; b < (g + 1) * group_size; ++b) {
          const bool any = std::any_of(a[b].begin(), a[b].end(), [](double v) { return v != 0; });
          nonzero += any ? 1 : 0;
          for (double v : a[b]) CHECK(v >= 0.0);
        }
        CHECK(nonzero <= 1);
      }
    }
    for (int64_t g = 0; g < groups_of(x); ++g) {
      const size_t start = g * group_size;
      const double best = *std::max_element(r.begin() + start, r.begin() + start + group_size);
      const auto at_best = std::count(r.begin() + start, r.begin() + start + group_size, best);
      if (at_best > 1 && !ref_group_all_equal(r, start, group_size)) ++tied_best;
      if (at_best == 1) ++positive_margin;
    }
  }
  CHECK(tied_best > 0);
  CHECK(positive_margin > 0);
}

TEST_CASE("opo: the length-weighted group mean is the baseline") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t group_size = rng.integer(2, 6);
    Batch x = random_batch(rng, rng.integer(2, 5), group_size, rng.integer(3, 12));
    const bool with_token_rewards = trial % 2 == 1;
    INFO("token rewards " << with_token_rewards);
    AdvantageResult got = estimate("opo", advantage_inputs(x, with_token_rewards), {});
    CHECK_FALSE(got.returns.defined());
    check_matrix(got.advantages, ref_broadcast(x, ref_opo(x, ref_sequence_rewards(x, with_token_rewards))), kExact,
                 "opo");
  }
}

TEST_CASE("gpg: the group baseline scaled by B / (samples with a nonzero reward in the batch)") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t group_size = rng.integer(2, 6);
    Batch x = random_batch(rng, rng.integer(2, 5), group_size, rng.integer(3, 12));
    const bool with_token_rewards = trial % 2 == 1;  // alpha counts the folded rewards
    INFO("token rewards " << with_token_rewards);
    AdvantageResult got = estimate("gpg", advantage_inputs(x, with_token_rewards), {});
    CHECK_FALSE(got.returns.defined());
    // |A| up to alpha (<= B = 30) times a reward spread: still one float32 rounding of a
    // float64 value, relative, so kExact.
    check_matrix(got.advantages, ref_broadcast(x, ref_gpg(ref_sequence_rewards(x, with_token_rewards), group_size)),
                 kExact, "gpg");
  }
}

TEST_CASE("reinforce_plus_plus_baseline: r - group mean on the valid tokens, whitened over the batch") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t group_size = rng.integer(2, 5);
    Batch x = random_batch(rng, rng.integer(2, 5), group_size, rng.integer(2, 14));
    const bool with_token_rewards = trial % 2 == 0;
    INFO("token rewards " << with_token_rewards);
    AdvantageParams params;
    AdvantageResult got = estimate("reinforce_plus_plus_baseline", advantage_inputs(x, with_token_rewards), params);
    CHECK_FALSE(got.returns.defined());
    // As reinforce_pp's test: float64, rounded once to float32 (<= u |x|, u = 2^-24);
    // 1e-5 leaves room for the whitening's division by a std near eps.
    check_matrix(got.advantages, ref_reinforce_pp_baseline(x, ref_sequence_rewards(x, with_token_rewards), params.eps),
                 {1e-5, 1e-5}, "reinforce_plus_plus_baseline");
  }
}

TEST_CASE("remax: undiscounted return-to-go minus the greedy answer's reward; group_size 1 allowed") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 14));
    const bool with_token_rewards = trial % 2 == 0;
    const Row baselines = random_baselines(rng, x.rows());
    AdvantageInputs in = advantage_inputs(x, with_token_rewards);
    in.baselines = tensor(baselines);
    AdvantageParams params;
    params.gamma = rng.uniform(0.5, 1.0);  // reinforce_pp's discount; remax has none
    params.whiten_advantages = trial % 4 < 2;  // gae's; remax does not whiten
    INFO("group_size " << x.group_size << " token rewards " << with_token_rewards << " gamma " << params.gamma);
    AdvantageResult got = estimate("remax", in, params);
    CHECK_FALSE(got.returns.defined());
    // Sums of <= 14 float64 terms (error ~ 14 x 2^-53, nil) rounded once to float32: kExact.
    check_matrix(got.advantages, ref_remax(x, with_token_rewards, baselines), kExact, "remax");
  }
}

TEST_CASE("hand-computed: grpo_passk's tie, opo's length weights, gpg's alpha, remax's returns") {
  // Three groups of three, T = 4; group 2 has no valid token at all. Rewards and token
  // rewards are exact in float32; token rewards are NaN where masked.
  Batch x;
  x.group_size = 3;
  x.valid = {{true, true, false, false},   {true, true, true, true},    {false, false, false, false},
             {true, false, false, false},  {true, true, true, false},   {false, true, true, false},
             {false, false, false, false}, {false, false, false, false}, {false, false, false, false}};
  x.rewards = {1.0, 0.5, 0.0, 2.0, 2.0, 0.0, 1.0, 0.0, 0.5};
  x.token_rewards = Matrix(9, Row(4));
  for (size_t b = 0; b < 9; ++b)
    for (size_t t = 0; t < 4; ++t) x.token_rewards[b][t] = x.valid[b][t] ? 0.25 : kNaN;
  const Row baselines = {0.5, 0.25, 1.0, 1.0, 0.0, -1.0, 0.0, 0.0, 0.0};
  AdvantageInputs in;
  in.rewards = tensor(x.rewards);
  in.mask = mask_tensor(x, at::kFloat);
  in.group_size = 3;
  const double eps = AdvantageParams{}.eps;
  const Row r = x.rewards;
  // Each expectation also anchors its reference (given as float64 tensors).
  auto expect = [&](const std::string& what, const at::Tensor& got, const Matrix& reference, const Matrix& want) {
    INFO(what);
    check_matrix(got, want, kExact, what);
    check_matrix(tensor(reference, at::kDouble), want, kExact, what + " reference");
  };

  // grpo_passk: group 0 {1, 0.5, 0}: row 0 wins by 0.5, group std 0.5; group 1 {2, 2, 0}:
  // a tie for the best, so 0; group 2 has nowhere to put its margin.
  AdvantageParams raw;
  raw.normalize_std = false;
  const double passk = 0.5 / (0.5 + eps);
  expect("grpo_passk", estimate("grpo_passk", in, {}).advantages, ref_broadcast(x, ref_grpo_passk(r, 3, true, eps)),
         {{passk, passk, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
          {0, 0, 0, 0}, {0, 0, 0, 0}});
  expect("grpo_passk without normalize_std", estimate("grpo_passk", in, raw).advantages,
         ref_broadcast(x, ref_grpo_passk(r, 3, false, eps)),
         {{0.5, 0.5, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
          {0, 0, 0, 0}, {0, 0, 0, 0}});

  // opo: group 0 lengths 2, 4, 0: b = (2·1 + 4·0.5) / 6 = 2/3; group 1 lengths 1, 3, 2:
  // b = (2 + 6 + 0) / 6 = 4/3; group 2: no tokens, 0.
  expect("opo", estimate("opo", in, {}).advantages, ref_broadcast(x, ref_opo(x, r)),
         {{1.0 / 3, 1.0 / 3, 0, 0},
          {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
          {0, 0, 0, 0},
          {2.0 / 3, 0, 0, 0},
          {2.0 / 3, 2.0 / 3, 2.0 / 3, 0},
          {0, -4.0 / 3, -4.0 / 3, 0},
          {0, 0, 0, 0},
          {0, 0, 0, 0},
          {0, 0, 0, 0}});

  // gpg: 6 of 9 rewards nonzero, alpha = 9/6 = 1.5; group means 0.5 and 4/3.
  expect("gpg", estimate("gpg", in, {}).advantages, ref_broadcast(x, ref_gpg(r, 3)),
         {{0.75, 0.75, 0, 0},
          {0, 0, 0, 0},
          {0, 0, 0, 0},
          {1, 0, 0, 0},
          {1, 1, 1, 0},
          {0, -2, -2, 0},
          {0, 0, 0, 0},
          {0, 0, 0, 0},
          {0, 0, 0, 0}});

  // remax with token rewards 0.25: row 1 (reward 0.5, baseline 0.25) has returns 1.5,
  // 1.25, 1, 0.75; row 5 (reward 0, baseline -1) skips its masked first token.
  in.token_rewards = tensor(x.token_rewards);
  in.baselines = tensor(baselines);
  expect("remax", estimate("remax", in, {}).advantages, ref_remax(x, true, baselines),
         {{1.0, 0.75, 0, 0},
          {1.25, 1.0, 0.75, 0.5},
          {0, 0, 0, 0},
          {1.25, 0, 0, 0},
          {2.75, 2.5, 2.25, 0},
          {0, 1.5, 1.25, 0},
          {0, 0, 0, 0},
          {0, 0, 0, 0},
          {0, 0, 0, 0}});
}

TEST_CASE("aliases: vanilla is ppo_clip and reinforce_plus_plus is reinforce_pp, bit for bit") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 6; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 16));
    PolicyLossParams params;
    params.clip_low = rng.uniform(0.05, 0.3);
    params.clip_high = rng.uniform(0.05, 0.4);
    params.dual_c = trial % 2 == 0 ? 0.0 : rng.uniform(1.05, 3.0);
    at::Tensor ppo_logprobs, vanilla_logprobs;
    PolicyLossResult ppo = policy_loss("ppo_clip", policy_inputs(x, ppo_logprobs), params);
    PolicyLossResult vanilla = policy_loss("vanilla", policy_inputs(x, vanilla_logprobs), params);
    CHECK(to_matrix(vanilla.loss) == to_matrix(ppo.loss));
    CHECK(to_matrix(vanilla.ratio) == to_matrix(ppo.ratio));
    CHECK(to_matrix(vanilla.clipped) == to_matrix(ppo.clipped));
    CHECK(vanilla.sequence_mean == ppo.sequence_mean);
    ppo.loss.sum().backward();
    vanilla.loss.sum().backward();
    CHECK(to_matrix(vanilla_logprobs.grad()) == to_matrix(ppo_logprobs.grad()));

    AdvantageParams advantage;
    advantage.gamma = rng.uniform(0.5, 1.0);
    const AdvantageInputs in = advantage_inputs(x, trial % 2 == 0);
    CHECK(to_matrix(estimate("reinforce_plus_plus", in, advantage).advantages) ==
          to_matrix(estimate("reinforce_pp", in, advantage).advantages));
  }
}

TEST_CASE("input checks: the group estimators refuse group_size 1; remax takes it but needs baselines") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  const Batch x = random_batch(rng, 4, 1, 6);
  AdvantageInputs in = advantage_inputs(x, false);
  REQUIRE(in.group_size == 1);
  for (const std::string& name : kGroupEstimators) {
    INFO(name);
    CHECK_THROWS_WITH_AS(estimate(name, in, {}), doctest::Contains("group_size"), Error);
  }
  CHECK_THROWS_WITH_AS(estimate("remax", in, {}), doctest::Contains("baselines"), Error);
  in.baselines = tensor(random_baselines(rng, x.rows()));
  CHECK_NOTHROW(estimate("remax", in, {}));
}

// ---------------------------------------------------------------- policy losses

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
