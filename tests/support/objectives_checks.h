// Shared by the learner's objective tests (tests/learner/test_objectives.cpp,
// tests/learner/test_actor_critic_objectives.cpp): the tolerance check of STYLE.md (NaN
// never passes), conversions between at::Tensor and the float64 references' matrices
// (tests/support/objectives_reference.h), and the inputs of a random batch.
#pragma once

#include "learner/advantages.h"
#include "learner/loss_aggregation.h"
#include "learner/policy_loss.h"
#include "tests/support/objectives_reference.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tandem::testing {

// Tolerances, as atol + rtol * |ref|, from float32's unit roundoff u = 2^-24 ~ 6.0e-8
// (the same on every x86 CPU: IEEE arithmetic; only summation order may differ):
// - kExact: outputs computed in float64 and rounded once to float32 (advantages): the
//   error is at most u |x| ~ 6e-8 |x|; 1e-6 is 16 u, room for the float32 inputs'
//   own conversion.
// - kFloat: losses computed in float32 from float32 inputs (the references read the same
//   float32-rounded values): per token a few ulps of exp()/log() (<= 4u ~ 2.4e-7
//   relative); aggregates sum at most 20 rows x 16 tokens = 320 terms, each |x| = O(1)
//   here (advantages N(0, 1), ratios within e^+-1), so even the sequential worst case
//   n u = 1.9e-5 of the summed magnitudes is within rtol 2e-5, and at::sum's blocked
//   summation (error ~ log2(320) u ~ 5.4e-7 of the magnitudes) is within atol 1e-5
//   where terms cancel to near 0.
struct Tolerance {
  double atol, rtol;
};
inline constexpr Tolerance kExact{1e-6, 1e-6};
inline constexpr Tolerance kFloat{1e-5, 2e-5};

// |got - want| <= atol + rtol |want|, written so that NaN fails.
inline bool close(double got, double want, Tolerance tol) { return std::abs(got - want) <= tol.atol + tol.rtol * std::abs(want); }

inline void check_scalar(double got, double want, Tolerance tol, const std::string& what) {
  if (!close(got, want, tol)) FAIL(what << ": got " << got << ", reference " << want);
}

inline Matrix to_matrix(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU, at::kDouble).contiguous();
  REQUIRE(c.dim() == 2);
  Matrix m(c.size(0), Row(c.size(1)));
  const double* p = c.data_ptr<double>();
  for (auto& row : m)
    for (double& x : row) x = *p++;
  return m;
}

inline at::Tensor tensor(const Matrix& m, at::ScalarType dtype = at::kFloat) {
  at::Tensor t = at::empty({static_cast<int64_t>(m.size()), static_cast<int64_t>(m[0].size())}, at::kDouble);
  double* p = t.data_ptr<double>();
  for (const auto& row : m)
    for (double x : row) *p++ = x;
  return t.to(dtype);
}

inline at::Tensor tensor(const Row& r) { return at::tensor(r, at::kDouble).to(at::kFloat); }

inline void check_matrix(const at::Tensor& got_tensor, const Matrix& want, Tolerance tol, const std::string& what) {
  Matrix got = to_matrix(got_tensor);
  REQUIRE(got.size() == want.size());
  for (size_t b = 0; b < want.size(); ++b)
    for (size_t t = 0; t < want[b].size(); ++t)
      if (!close(got[b][t], want[b][t], tol))
        FAIL(what << " [" << b << "][" << t << "]: got " << got[b][t] << ", reference " << want[b][t]);
}

inline at::Tensor mask_tensor(const Batch& x, at::ScalarType dtype = at::kBool) {
  Matrix m(x.valid.size(), Row(x.valid[0].size()));
  for (size_t b = 0; b < m.size(); ++b)
    for (size_t t = 0; t < m[b].size(); ++t) m[b][t] = x.valid[b][t] ? 1 : 0;
  return tensor(m, dtype);
}

inline uint64_t fresh_seed() { return std::random_device{}(); }

inline const std::vector<LossAggregation> kModes = {LossAggregation::token_mean, LossAggregation::seq_mean_token_sum,
                                             LossAggregation::seq_mean_token_mean,
                                             LossAggregation::seq_mean_token_sum_norm};

inline AdvantageInputs advantage_inputs(const Batch& x, bool with_token_rewards) {
  AdvantageInputs in;
  in.rewards = tensor(x.rewards);
  in.mask = mask_tensor(x, at::kFloat);
  if (with_token_rewards) in.token_rewards = tensor(x.token_rewards);
  in.values = tensor(x.values);
  in.group_size = x.group_size;
  return in;
}

inline PolicyLossInputs policy_inputs(const Batch& x, at::Tensor& logprobs_leaf) {
  logprobs_leaf = tensor(x.logprobs).requires_grad_(true);
  return {logprobs_leaf, tensor(x.old_logprobs), tensor(x.advantages), mask_tensor(x)};
}
}  // namespace tandem::testing
