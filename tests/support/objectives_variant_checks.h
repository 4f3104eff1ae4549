// Test-only helpers of tests/learner/test_objective_variants_*.cpp: the new estimators and
// losses by name, the policy-loss check against a float64 reference, all-masked batches.
#pragma once

#include "learner/advantages.h"
#include "learner/objective_registry.h"
#include "learner/policy_loss.h"
#include "tests/support/objectives_checks.h"
#include "tests/support/objectives_reference.h"
#include "tests/support/objectives_reference_variants.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::testing {

// The estimators that compare the samples of a prompt, so need group_size >= 2.
inline const std::vector<std::string> kGroupEstimators = {"grpo_vectorized", "rloo_vectorized", "grpo_passk", "opo", "gpg",
                                                   "reinforce_plus_plus_baseline"};
inline const std::vector<std::string> kNewLosses = {"sapo", "cispo", "geo_mean", "gpg", "clip_cov", "kl_cov"};

inline AdvantageResult estimate(const std::string& name, const AdvantageInputs& in, const AdvantageParams& params) {
  return find_advantage_estimator(name)(in, params);
}

inline PolicyLossResult policy_loss(const std::string& name, const PolicyLossInputs& in, const PolicyLossParams& params) {
  return find_policy_loss(name)(in, params);
}

// ReMax's greedy-answer rewards, drawn as float32 values like the batch's.
inline Row random_baselines(Random& rng, int64_t rows) {
  Row b;
  for (int64_t i = 0; i < rows; ++i) b.push_back(as_float(rng.normal()));
  return b;
}

inline int64_t groups_of(const Batch& x) { return x.rows() / x.group_size; }

inline void check_token(double got, double want, Tolerance tol, const char* what, int64_t b, size_t t) {
  if (!tandem::testing::close(got, want, tol))
    FAIL(what << " [" << b << "][" << t << "]: got " << got << ", reference " << want);
}

// A policy loss's per-token results against its reference: the loss everywhere (0 at
// masked positions), the ratio where the loss defines one, and d loss_t / d logprobs_t by
// autograd (loss.sum(): each token's loss depends on its own logprob only). Masked tokens:
// ratio 1, not clipped, no gradient (their inputs are NaN, so a leak shows). Valid tokens:
// flags and gradients unless a decision is within rounding of a bound; exactly 0 gradient
// where a log-ratio bound makes rho a constant. Tolerances: kFloat (objectives_checks.h).
inline void check_policy(const Batch& x, const PolicyLossResult& got, const at::Tensor& logprobs, const RefPolicy& want,
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
inline Batch all_masked_batch(Random& rng, int64_t groups, int64_t group_size, int64_t T) {
  Batch x = random_batch(rng, groups, group_size, T);
  for (auto& row : x.valid) std::fill(row.begin(), row.end(), false);
  for (Matrix* m : {&x.logprobs, &x.old_logprobs, &x.ref_logprobs, &x.advantages, &x.token_rewards, &x.values,
                    &x.old_values, &x.entropy})
    for (Row& row : *m) std::fill(row.begin(), row.end(), kNaN);
  return x;
}

// n choose k, in double (only compared with small thresholds).
inline double binomial(int64_t n, int64_t k) {
  if (k < 0 || k > n) return 0;
  double c = 1;
  for (int64_t i = 1; i <= k; ++i) c = c * static_cast<double>(n - k + i) / static_cast<double>(i);
  return c;
}

}  // namespace tandem::testing
