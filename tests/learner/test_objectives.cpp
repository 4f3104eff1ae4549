// The learner's RL objectives against float64 references written from the definitions
// with plain loops (no at:: ops): every advantage estimator and policy loss, on fresh
// random ragged batches (all-masked rows, equal-reward groups, NaN in every padded slot so
// that leaks show), plus their known properties, input checks and the objective registry.
// Loss aggregation, KL and the composed actor and critic objectives are in
// test_actor_critic_objectives.cpp (the same executable, test_objectives).
#include "learner/advantages.h"
#include "learner/objective.h"
#include "learner/objective_registry.h"
#include "learner/policy_loss.h"
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

TEST_CASE("group advantages (grpo, dr_grpo, rloo) match the float64 reference") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t group_size = rng.integer(2, 6);
    Batch x = random_batch(rng, rng.integer(2, 5), group_size, rng.integer(3, 12));
    const bool with_token_rewards = trial % 2 == 1;  // kl.in: reward folds into the sequence reward
    AdvantageInputs in = advantage_inputs(x, with_token_rewards);
    AdvantageParams params;
    const Row r = ref_sequence_rewards(x, with_token_rewards);
    struct Case {
      const char* name;
      GroupBaseline kind;
      bool normalize_std;
    };
    for (const Case& c : {Case{"grpo", GroupBaseline::mean_over_std, true}, Case{"grpo", GroupBaseline::mean, false},
                          Case{"dr_grpo", GroupBaseline::mean, true},
                          Case{"rloo", GroupBaseline::leave_one_out, true}}) {
      INFO(c.name << " normalize_std " << c.normalize_std << " token rewards " << with_token_rewards);
      params.normalize_std = c.normalize_std;
      AdvantageResult got = find_advantage_estimator(c.name)(in, params);
      CHECK_FALSE(got.returns.defined());
      const Row want = ref_group_advantages(r, group_size, c.kind, params.eps);
      check_matrix(got.advantages, ref_broadcast(x, want), kExact, c.name);
      // Zero mean over each group's sequences (read at any valid token; groups holding an
      // all-masked row have no token to read it from).
      Matrix a = to_matrix(got.advantages);
      for (int64_t g = 0; g < x.rows() / group_size; ++g) {
        double sum = 0;
        bool complete = true;
        for (int64_t b = g * group_size; b < (g + 1) * group_size; ++b) {
          auto first = std::find(x.valid[b].begin(), x.valid[b].end(), true);
          if (first == x.valid[b].end()) complete = false;
          else sum += a[b][first - x.valid[b].begin()];
        }
        // Each advantage is float64 rounded once to float32 (<= u |a|, u = 2^-24, |a| <= 2 for
        // groups of <= 4), summed here in float64: |mean| <= 2u ~ 1.2e-7, far inside 1e-5.
        if (complete) check_scalar(sum / group_size, 0.0, {1e-5, 0}, "group mean of advantages");
      }
    }
  }
}

TEST_CASE("equal-reward groups and all-masked rows give exact zeros, never NaN") {
  // 0.1 is not representable: the float64 mean of its copies need not equal it.
  Batch x;
  x.group_size = 4;
  x.valid = {{true, true, false}, {false, false, false}, {true, false, false}, {true, true, true},
             {true, true, true},  {false, false, false}, {true, true, false},  {false, true, true}};
  x.rewards = {0.1, 0.1, 0.1, 0.1, 0.3, 1.0, 0.7, 0.3};
  AdvantageInputs in;
  in.rewards = tensor(x.rewards);
  in.mask = mask_tensor(x);
  in.group_size = 4;
  for (const char* name : {"grpo", "dr_grpo", "rloo"}) {
    Matrix a = to_matrix(find_advantage_estimator(name)(in, AdvantageParams{}).advantages);
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t b = 0; b < 4; ++b) CHECK(a[b][t] == 0.0);
      CHECK(a[5][t] == 0.0);
    }
    for (const Row& row : a)
      for (double v : row) CHECK(std::isfinite(v));
  }
  // One valid value over the whole batch, or none: whitening gives 0, not 0/0.
  in.rewards = tensor(Row(8, 0.1));
  for (const char* name : {"reinforce_pp", "gae"}) {
    in.values = tensor(Matrix(8, Row(3, 0.0)));
    in.mask = tensor(Matrix(8, Row(3, 0.0)));
    for (const Row& row : to_matrix(find_advantage_estimator(name)(in, AdvantageParams{}).advantages))
      for (double v : row) CHECK(v == 0.0);
  }
}

TEST_CASE("reinforce_pp: discounted return-to-go of the token rewards, whitened over the batch") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 14));
    const bool with_token_rewards = trial % 2 == 0;
    AdvantageParams params;
    params.gamma = trial % 3 == 0 ? 1.0 : rng.uniform(0.5, 1.0);
    INFO("gamma " << params.gamma << " token rewards " << with_token_rewards);
    AdvantageResult got = reinforce_pp_advantages(advantage_inputs(x, with_token_rewards), params);
    // Whitening divides by std + eps with std ~ 1: an extra ulp-level relative error.
    // Computed in float64 (learner/advantages.cpp) and rounded once to float32: <= u |x|
    // (u = 2^-24 ~ 6e-8); 1e-5 leaves room for the whitening's division by a std near eps.
    check_matrix(got.advantages, ref_reinforce_pp(x, with_token_rewards, params.gamma, params.eps), {1e-5, 1e-5},
                 "reinforce_pp");
  }
}

TEST_CASE("gae: advantages and returns match the float64 reference, with and without whitening") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 3), rng.integer(2, 14));
    const bool with_token_rewards = trial % 2 == 0;
    AdvantageParams params;
    params.gamma = rng.uniform(0.8, 1.0);
    params.lam = rng.uniform(0.5, 1.0);
    params.whiten_advantages = trial % 4 < 2;
    INFO("gamma " << params.gamma << " lam " << params.lam << " whiten " << params.whiten_advantages);
    AdvantageResult got = gae_advantages(advantage_inputs(x, with_token_rewards), params);
    RefGae want = ref_gae(x, with_token_rewards, params.gamma, params.lam, params.whiten_advantages, params.eps);
    // The recurrence runs in float64 over <= 14 steps (error ~ 14 x 2^-53, nil here) and
    // the result is rounded once to float32 (<= u |x|, u = 2^-24): 1e-5 covers it.
    check_matrix(got.advantages, want.advantages, {1e-5, 1e-5}, "gae advantages");
    check_matrix(got.returns, want.returns, {1e-5, 1e-5}, "gae returns");
  }
}

TEST_CASE("ppo_clip and gspo: loss, ratio, clip flags and gradients match the reference") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  for (int trial = 0; trial < 24; ++trial) {
    Batch x = random_batch(rng, rng.integer(1, 4), rng.integer(1, 4), rng.integer(2, 16));
    PolicyLossParams params;
    params.clip_low = rng.uniform(0.05, 0.3);
    params.clip_high = rng.uniform(0.05, 0.4);
    params.dual_c = trial % 2 == 0 ? 0.0 : rng.uniform(1.05, 3.0);
    for (const bool gspo : {false, true}) {
      INFO((gspo ? "gspo" : "ppo_clip") << " low " << params.clip_low << " high " << params.clip_high << " dual_c "
                                        << params.dual_c);
      at::Tensor logprobs;
      PolicyLossResult got = find_policy_loss(gspo ? "gspo" : "ppo_clip")(policy_inputs(x, logprobs), params);
      RefPolicy want = ref_policy(x, params, gspo);
      check_matrix(got.loss, want.loss, kFloat, "loss");
      check_matrix(got.ratio, want.ratio, kFloat, "ratio");
      got.loss.sum().backward();
      Matrix grad = to_matrix(logprobs.grad());
      Matrix clipped = to_matrix(got.clipped);
      Matrix loss = to_matrix(got.loss);
      for (int64_t b = 0; b < x.rows(); ++b)
        for (size_t t = 0; t < x.valid[b].size(); ++t) {
          if (!x.valid[b][t]) {
            CHECK(grad[b][t] == 0.0);  // NaN padding never reaches the gradient
            continue;
          }
          // Dual clip: a negative advantage costs at most dual_c * |A|, up to the float32
          // rounding of the product (u) and of dual_c itself (u): 2·u relative (u = 2^-24), any CPU.
          if (params.dual_c > 0 && x.advantages[b][t] < 0)
            CHECK(loss[b][t] <= params.dual_c * -x.advantages[b][t] * (1 + 2 * 0x1p-24));
          if (want.near_bound[b][t]) continue;  // float32 and float64 may decide differently
          CHECK((clipped[b][t] != 0) == want.clipped[b][t]);
          if (want.clipped[b][t] || want.bounded[b][t]) CHECK(grad[b][t] == 0.0);  // constant: no gradient
          check_scalar(grad[b][t], want.grad[b][t], kFloat, "d loss / d logprobs");
        }
    }
  }
}

TEST_CASE("ratio 1: the clipped loss equals the unclipped loss and nothing is clipped") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  Batch x = random_batch(rng, 3, 4, 10);
  x.old_logprobs = x.logprobs;
  for (const char* name : {"ppo_clip", "gspo"}) {
    PolicyLossParams params{0.2, 0.28, 3.0};
    at::Tensor logprobs;
    PolicyLossResult got = find_policy_loss(name)(policy_inputs(x, logprobs), params);
    Matrix unclipped(x.rows(), Row(x.valid[0].size(), 0.0));
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < x.valid[b].size(); ++t)
        if (x.valid[b][t]) unclipped[b][t] = -x.advantages[b][t];
    check_matrix(got.loss, unclipped, kExact, name);
    CHECK(got.clipped.sum().item<int64_t>() == 0);
  }
}

TEST_CASE("runaway tokens: gspo bounds its per-token log-ratio at 10 and ppo_clip at 20, no gradient there") {
  // One runaway token per row: up (old policy gave it ~0), down, or up but not enough to
  // move the sequence's mean past 10; rows beside them are ordinary. The old gspo clamped
  // only the detached mean, at 20, and let e^20 |A| of gradient through where A < 0.
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Random rng(seed);
  enum Role { runaway_up, runaway_down, runaway_token_only, ordinary };
  int64_t gspo_bounded_negative = 0, ppo_bounded = 0, ppo_between = 0;  // coverage, summed over trials
  for (int trial = 0; trial < 16; ++trial) {
    Batch x = random_batch(rng, rng.integer(2, 3), 4, rng.integer(3, 12));
    for (int64_t b = 0; b < x.rows(); ++b) {
      std::vector<size_t> tokens;
      for (size_t t = 0; t < x.valid[b].size(); ++t)
        if (x.valid[b][t]) tokens.push_back(t);
      if (tokens.empty()) continue;
      const size_t t0 = tokens[rng.integer(0, static_cast<int64_t>(tokens.size()) - 1)];
      const double n = static_cast<double>(tokens.size());
      switch (static_cast<Role>(b % 4)) {
        case runaway_up:  // sequence mean > 10; A < 0 takes the unclipped branch
          x.old_logprobs[b][t0] = as_float(x.logprobs[b][t0] - n * rng.uniform(11, 40));
          x.advantages[b][t0] = -std::abs(x.advantages[b][t0]);
          break;
        case runaway_down:  // sequence mean < -20: the policy now gives the token ~0
          x.logprobs[b][t0] = as_float(x.old_logprobs[b][t0] - n * rng.uniform(21, 40));
          break;
        case runaway_token_only:  // the token's log-ratio is past 10, the mean is not once n >= 2
          x.old_logprobs[b][t0] = as_float(x.logprobs[b][t0] - rng.uniform(12, 18));
          break;
        case ordinary:
          break;
      }
    }
    PolicyLossParams params;
    params.clip_low = rng.uniform(0.05, 0.3);
    params.clip_high = rng.uniform(0.05, 0.4);
    params.dual_c = trial % 2 == 0 ? 0.0 : rng.uniform(1.05, 3.0);
    for (const bool gspo : {false, true}) {
      INFO((gspo ? "gspo" : "ppo_clip") << " dual_c " << params.dual_c);
      at::Tensor logprobs;
      PolicyLossResult got = find_policy_loss(gspo ? "gspo" : "ppo_clip")(policy_inputs(x, logprobs), params);
      const RefPolicy want = ref_policy(x, params, gspo);
      check_matrix(got.loss, want.loss, kFloat, "loss");
      check_matrix(got.ratio, want.ratio, kFloat, "ratio");
      got.loss.sum().backward();
      const Matrix grad = to_matrix(logprobs.grad());
      const Matrix ratio = to_matrix(got.ratio);
      // The bound's exp() in float32 is within a few ulps (<= 4u ~ 2.4e-7 relative, u =
      // 2^-24) of the float64 value: 1e-6 above it.
      const double max_ratio = std::exp(gspo ? 10.0 : 20.0) * (1 + 1e-6);
      for (int64_t b = 0; b < x.rows(); ++b)
        for (size_t t = 0; t < x.valid[b].size(); ++t) {
          if (!x.valid[b][t]) {
            CHECK(grad[b][t] == 0.0);
            continue;
          }
          CHECK(ratio[b][t] <= max_ratio);
          if (want.near_bound[b][t]) continue;
          if (want.bounded[b][t]) {
            CHECK(grad[b][t] == 0.0);  // exactly: a bound is active
            if (gspo && x.advantages[b][t] < 0 && params.dual_c == 0) ++gspo_bounded_negative;
            if (!gspo) ++ppo_bounded;
          } else {
            check_scalar(grad[b][t], want.grad[b][t], kFloat, "d loss / d logprobs");
            if (!gspo && std::log(want.ratio[b][t]) > 10) ++ppo_between;  // ppo_clip is not bounded at 10
          }
        }
    }
  }
  CHECK(gspo_bounded_negative > 0);
  CHECK(ppo_bounded > 0);
  CHECK(ppo_between > 0);
}

TEST_CASE("input checks: group layout, group sizes, shapes") {
  AdvantageInputs in;
  in.rewards = at::ones({6});
  in.mask = at::ones({6, 4});
  in.group_size = 4;
  CHECK_THROWS_WITH_AS(grpo_advantages(in, {}), doctest::Contains("not a whole number of groups of group_size 4"),
                       Error);
  in.group_size = 1;
  CHECK_THROWS_WITH_AS(rloo_advantages(in, {}), doctest::Contains("needs group_size >= 2, got 1"), Error);
  CHECK_THROWS_WITH_AS(gae_advantages(in, {}), doctest::Contains("values"), Error);
  in.rewards = at::ones({5});
  CHECK_THROWS_WITH_AS(reinforce_pp_advantages(in, {}), doctest::Contains("rewards must be a [B] tensor"), Error);
  PolicyLossInputs p{at::zeros({2, 3}), at::zeros({2, 4}), at::zeros({2, 3}), at::ones({2, 3})};
  CHECK_THROWS_WITH_AS(ppo_clip_loss(p, {}), doctest::Contains("old_logprobs has shape [2, 4]"), Error);
  p.old_logprobs = at::zeros({2, 3});
  CHECK_THROWS_WITH_AS(ppo_clip_loss(p, {0.2, 0.2, 0.5}), doctest::Contains("dual clip needs a constant > 1"), Error);
  CHECK_THROWS_WITH_AS(loss_aggregation_from_name("token_men"), doctest::Contains("did you mean token_mean?"), Error);
}

TEST_CASE("registry: built-ins by name, unknown names with a did-you-mean, plugins added by name") {
  // verl's registry names (and its aliases of ours) after our own.
  CHECK(advantage_estimator_names() ==
        std::vector<std::string>{"grpo", "dr_grpo", "rloo", "reinforce_pp", "gae", "grpo_vectorized", "rloo_vectorized",
                                 "grpo_passk", "opo", "gpg", "reinforce_plus_plus_baseline", "remax",
                                 "reinforce_plus_plus"});
  CHECK(policy_loss_names() ==
        std::vector<std::string>{"ppo_clip", "gspo", "sapo", "cispo", "geo_mean", "gpg", "clip_cov", "kl_cov", "vanilla"});
  CHECK_THROWS_WITH_AS(find_advantage_estimator("grpoo"),
                       doctest::Contains("unknown advantage estimator (algorithm.advantage) \"grpoo\" (did you mean "
                                         "grpo?); known: grpo, dr_grpo, rloo, reinforce_pp, gae, grpo_vectorized"),
                       Error);
  CHECK_THROWS_WITH_AS(find_policy_loss("ppo"), doctest::Contains("did you mean"), Error);
  CHECK_THROWS_WITH_AS(find_policy_loss("something_else"),
                       "unknown policy loss (algorithm.policy_loss) \"something_else\"; known: ppo_clip, gspo, sapo, "
                       "cispo, geo_mean, gpg, clip_cov, kl_cov or vanilla",
                       Error);

  // A plugin's estimator: the sequence reward times 2, on every valid token.
  register_advantage_estimator("test_double_reward", [](const AdvantageInputs& in, const AdvantageParams&) {
    at::Tensor per_token = (2 * in.rewards).unsqueeze(1).expand(in.mask.sizes());
    return AdvantageResult{at::where(in.mask.ne(0), per_token, at::zeros({}, per_token.options())), at::Tensor()};
  });
  register_policy_loss("test_vanilla_pg", [](const PolicyLossInputs& in, const PolicyLossParams&) {
    at::Tensor valid = in.mask.ne(0);
    at::Tensor loss = at::where(valid, -in.advantages * in.logprobs, at::zeros({}, in.logprobs.options()));
    return PolicyLossResult{loss, at::ones_like(loss), at::zeros_like(valid)};
  });
  CHECK_THROWS_WITH_AS(register_advantage_estimator("grpo", grpo_advantages),
                       doctest::Contains("already registered"), Error);
  CHECK_THROWS_AS(register_policy_loss("empty", PolicyLossFn()), Error);
  CHECK(advantage_estimator_names().back() == "test_double_reward");
  CHECK_THROWS_WITH_AS(find_advantage_estimator("test_double_rewards"),
                       doctest::Contains("did you mean test_double_reward?"), Error);

  AdvantageInputs in;
  in.rewards = at::tensor({0.5, -1.5}, at::kFloat);
  in.mask = at::tensor({1, 0, 1, 1}, at::kFloat).view({2, 2});
  Matrix a = to_matrix(find_advantage_estimator("test_double_reward")(in, AdvantageParams{}).advantages);
  CHECK(a == Matrix{{1.0, 0.0}, {-3.0, -3.0}});

  // The custom loss through the actor objective, by name.
  ActorObjectiveParams params;
  params.policy_loss = "test_vanilla_pg";
  at::Tensor logprobs = at::tensor({-1.0, -2.0, -0.5, -4.0}, at::kFloat).view({2, 2});
  ActorObjectiveInputs objective_in{logprobs, logprobs, at::tensor({1.0, 2.0, -1.0, 3.0}, at::kFloat).view({2, 2}),
                                    in.mask, at::Tensor(), at::Tensor()};
  ObjectiveResult r = actor_objective(objective_in, params, aggregation_scale(in.mask));
  check_scalar(r.metrics.pg_loss, (1.0 * 1.0 + -1.0 * 0.5 + 3.0 * 4.0) / 3.0, kFloat, "custom pg loss");
}
