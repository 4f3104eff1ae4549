// The learner's RL objectives against float64 references written from the definitions
// with plain loops (no at:: ops): every advantage estimator, policy loss, aggregation mode
// and KL estimator, on fresh random ragged batches (all-masked rows, equal-reward groups,
// NaN in every padded slot so that leaks show), plus their known properties and the
// objective registry.
#include "learner/advantages.h"
#include "learner/kl.h"
#include "learner/loss_aggregation.h"
#include "learner/objective.h"
#include "learner/objective_registry.h"
#include "learner/policy_loss.h"
#include "learner/value_loss.h"
#include "objectives_reference.h"

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

namespace {

// Tolerances, as atol + rtol * |ref|:
// - kExact: outputs computed in float64 and rounded once to float32 (advantages).
// - kFloat: losses computed in float32 from float32 inputs: a few ulps of exp() and of the
//   sums over up to T tokens.
struct Tolerance {
  double atol, rtol;
};
constexpr Tolerance kExact{1e-6, 1e-6};
constexpr Tolerance kFloat{1e-5, 2e-5};

// |got - want| <= atol + rtol |want|, written so that NaN fails.
bool close(double got, double want, Tolerance tol) { return std::abs(got - want) <= tol.atol + tol.rtol * std::abs(want); }

void check_scalar(double got, double want, Tolerance tol, const std::string& what) {
  if (!close(got, want, tol)) FAIL(what << ": got " << got << ", reference " << want);
}

Matrix to_matrix(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU, at::kDouble).contiguous();
  REQUIRE(c.dim() == 2);
  Matrix m(c.size(0), Row(c.size(1)));
  const double* p = c.data_ptr<double>();
  for (auto& row : m)
    for (double& x : row) x = *p++;
  return m;
}

at::Tensor tensor(const Matrix& m, at::ScalarType dtype = at::kFloat) {
  at::Tensor t = at::empty({static_cast<int64_t>(m.size()), static_cast<int64_t>(m[0].size())}, at::kDouble);
  double* p = t.data_ptr<double>();
  for (const auto& row : m)
    for (double x : row) *p++ = x;
  return t.to(dtype);
}

at::Tensor tensor(const Row& r) { return at::tensor(r, at::kDouble).to(at::kFloat); }

void check_matrix(const at::Tensor& got_tensor, const Matrix& want, Tolerance tol, const std::string& what) {
  Matrix got = to_matrix(got_tensor);
  REQUIRE(got.size() == want.size());
  for (size_t b = 0; b < want.size(); ++b)
    for (size_t t = 0; t < want[b].size(); ++t)
      if (!close(got[b][t], want[b][t], tol))
        FAIL(what << " [" << b << "][" << t << "]: got " << got[b][t] << ", reference " << want[b][t]);
}

at::Tensor mask_tensor(const Batch& x, at::ScalarType dtype = at::kBool) {
  Matrix m(x.valid.size(), Row(x.valid[0].size()));
  for (size_t b = 0; b < m.size(); ++b)
    for (size_t t = 0; t < m[b].size(); ++t) m[b][t] = x.valid[b][t] ? 1 : 0;
  return tensor(m, dtype);
}

uint64_t fresh_seed() { return std::random_device{}(); }

const std::vector<LossAggregation> kModes = {LossAggregation::token_mean, LossAggregation::seq_mean_token_sum,
                                             LossAggregation::seq_mean_token_mean,
                                             LossAggregation::seq_mean_token_sum_norm};

AdvantageInputs advantage_inputs(const Batch& x, bool with_token_rewards) {
  AdvantageInputs in;
  in.rewards = tensor(x.rewards);
  in.mask = mask_tensor(x, at::kFloat);
  if (with_token_rewards) in.token_rewards = tensor(x.token_rewards);
  in.values = tensor(x.values);
  in.group_size = x.group_size;
  return in;
}

PolicyLossInputs policy_inputs(const Batch& x, at::Tensor& logprobs_leaf) {
  logprobs_leaf = tensor(x.logprobs).requires_grad_(true);
  return {logprobs_leaf, tensor(x.old_logprobs), tensor(x.advantages), mask_tensor(x)};
}

}  // namespace

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
    // float64 inputs hold the same values; only ulp-level differences of exp() remain.
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
    // Tokens within rounding of a clip bound may be flagged either way.
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
    check_scalar(controller.coef(), want, {0, 1e-12}, "coef");
  }
  KlController rising(0.1, true, 0.01, 100);
  rising.update(10.0, 100);  // error clipped to +0.2
  check_scalar(rising.coef(), 0.12, {0, 1e-12}, "clipped increase");
  CHECK_THROWS_AS(rising.update(std::nan(""), 1), Error);
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
  CHECK(advantage_estimator_names() ==
        std::vector<std::string>{"grpo", "dr_grpo", "rloo", "reinforce_pp", "gae"});
  CHECK(policy_loss_names() == std::vector<std::string>{"ppo_clip", "gspo"});
  CHECK_THROWS_WITH_AS(find_advantage_estimator("grpoo"),
                       "unknown advantage estimator (algorithm.advantage) \"grpoo\" (did you mean grpo?); "
                       "known: grpo, dr_grpo, rloo, reinforce_pp or gae",
                       Error);
  CHECK_THROWS_WITH_AS(find_policy_loss("ppo"), doctest::Contains("did you mean gspo?"), Error);
  CHECK_THROWS_WITH_AS(find_policy_loss("something_else"),
                       "unknown policy loss (algorithm.policy_loss) \"something_else\"; known: ppo_clip or gspo", Error);

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
