// verl's advantage estimators (grpo_vectorized, rloo_vectorized, grpo_passk, opo, gpg,
// reinforce_plus_plus_baseline, remax), called by their registry names, against float64
// references written from the definitions with plain loops
// (tests/support/objectives_reference_variants.h), on fresh random ragged batches
// (all-masked rows, equal-reward groups, NaN in every padded slot so that leaks show);
// plus hand-computed cases, verl's aliases (vanilla, reinforce_plus_plus) and the
// group-size and baseline refusals. The policy losses are in
// test_objective_variants_losses.cpp, the original estimators and losses in
// test_objectives.cpp (all in the executable test_objectives).
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
    // As reinforce_pp's test: computed in float64 from float32 inputs and rounded once to
    // float32, so within u |a| (u = 2^-24) of the float64 reference; whitened values are
    // O(few) (|a| <= sqrt(valid tokens) < 20 here), so u |a| < 1.2e-6, under the 1e-5.
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
