// KL penalty to the reference policy (`algorithm.kl`): per-token estimators, where the
// penalty applies, and the adaptive coefficient.
//
// With the log-ratio x_t = logprobs[t] - ref_logprobs[t] of a token sampled from the
// policy, the per-token estimators of KL(policy || reference) (Schulman, "Approximating
// KL divergence", 2020) are
//   k1 = x             unbiased, can be negative per token
//   k2 = x^2 / 2       biased, low variance, >= 0
//   k3 = exp(-x) - 1 + x   unbiased, >= 0
//
// Bounds (the same as verl's low_var_kl, so a run compares):
//   k3 = min(exp(-c) - 1 + c, 10)  with c = clamp(x, -20, 20)
// k3 passes 10 where the policy gives the token less than e^-2.611 (1/13.6) of the
// reference's probability (x < -2.611) or more than e^11 times it (x > 11.0). Unbounded,
// one such token outweighs a batch: a gap of 3.5 costs 28.6, one of 25 about 7e10. Where
// the bound of 10 is active the penalty is that constant and passes no gradient
// (at::clamp), so a token that far from the reference is no longer pulled back through
// the KL term. The clamp of x to [-20, 20] changes no value (k3 is capped from |x| = 11
// on); it keeps exp() finite, so the capped branch's gradient is 0 and not 0 * inf = NaN
// (e^100 is inf in float32).
// k1 and k2 are not clamped (nor are verl's): they have no exp(), so value and gradient
// (1 and x) are finite for every finite x, and a clamp would only drop the pull toward
// the reference at the tokens that drifted furthest, and bias k1.
// The bounds hold wherever kl_per_token is used: the loss, kl_token_rewards, and the
// measured KL (metrics.kl, the adaptive controller's input).
//
// `kl.in: loss`: loss += coef * aggregate(kl_per_token(logprobs, ...)) with the current
// logprobs, differentiable (see actor_objective.h).
// `kl.in: reward`: kl_token_rewards() gives -coef * kl_t from the rollout's logprobs, no
// gradient; it goes into AdvantageInputs::token_rewards, where token-level estimators
// (reinforce_pp, gae) subtract it token by token and sequence-level ones (grpo, dr_grpo,
// rloo) subtract its sum over the response from the sequence reward (advantages.h).
#pragma once

#include "core/config.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace tandem {

enum class KlEstimator { k1, k2, k3 };

// "k3" → KlEstimator::k3; unknown names are an Error listing the names (did-you-mean).
KlEstimator kl_estimator_from_name(const std::string& name);
std::string kl_estimator_name(KlEstimator estimator);
std::vector<std::string> kl_estimator_names();

enum class KlPlacement { loss, reward };
KlPlacement kl_placement_from_name(const std::string& name);

// logprobs [B, T], ref_logprobs [B, T], mask [B, T] → [B, T] per-token estimate, 0 at
// masked positions; differentiable in logprobs (ref_logprobs is used as given), with no
// gradient where a bound above is active.
at::Tensor kl_per_token(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, const at::Tensor& mask,
                        KlEstimator estimator);

// [B, T] token rewards -coef * kl_t (kl_per_token, bounds included), 0 at masked
// positions, detached: the `kl.in: reward` penalty.
at::Tensor kl_token_rewards(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, const at::Tensor& mask,
                            KlEstimator estimator, double coef);

// The KL coefficient: fixed, or adaptive as in Ziegler et al. 2019 ("Fine-Tuning Language
// Models from Human Preferences"), a proportional controller toward a target KL:
//   error = clip(measured_kl / target - 1, -0.2, 0.2)
//   coef *= 1 + error * n_steps / horizon
// `measured_kl` is the KL per token measured on the step's rollouts (the same estimator
// and units as `kl.target`); `n_steps` the samples it was measured on (Ziegler's batch
// size), so the horizon is in samples.
class KlController {
 public:
  KlController(double initial_coef, bool adaptive, double target, double horizon = 10000);
  explicit KlController(const KlConfig& config, double horizon = 10000);

  double coef() const { return coef_; }
  bool adaptive() const { return adaptive_; }
  // For a resumed run: the coefficient saved in its checkpoint.
  void set_coef(double coef);
  // A no-op for a fixed coefficient.
  void update(double measured_kl, int64_t n_steps);

 private:
  double coef_;
  bool adaptive_;
  double target_;
  double horizon_;
};

}  // namespace tandem
