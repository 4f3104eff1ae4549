// The scalar losses a learner differentiates, composed from the pieces in this folder,
// and the metrics of the update:
//   actor:  aggregate(policy loss) + kl_coef * aggregate(kl) - entropy_coef * aggregate(entropy)
//   critic: aggregate(clipped value loss)                      (advantage: gae)
// Every aggregate uses the same mode and AggregationScale, so with the mini-batch's scale
// the micro-batch losses (and their gradients) add up to the mini-batch's.
#pragma once

#include "core/config.h"
#include "learner/kl.h"
#include "learner/loss_aggregation.h"
#include "learner/objective_metrics.h"
#include "learner/policy_loss.h"

#include <ATen/core/Tensor.h>

#include <string>

namespace tandem {

struct ActorObjectiveInputs {
  at::Tensor logprobs;      // [B, T] float: current policy (requires grad)
  at::Tensor old_logprobs;  // [B, T] float: the policy that sampled the tokens
  at::Tensor advantages;    // [B, T] float
  at::Tensor mask;          // [B, T]: 1 for response tokens that count
  at::Tensor ref_logprobs;  // [B, T] float, optional: the reference policy; needed when kl_coef > 0,
                            //   measured (metrics.kl) whenever given
  at::Tensor entropy;       // [B, T] float, optional: per-token policy entropy (differentiable);
                            //   needed when entropy_coef > 0, measured whenever given
  at::Tensor is_weights = {};  // [B, T] float, optional: truncated importance weights of off-policy
                            //   tokens (algorithm.async); each token's policy loss is multiplied by its own
};

struct ActorObjectiveParams {
  std::string policy_loss = "ppo_clip";  // a name in objective_registry.h
  PolicyLossParams clip;
  LossAggregation aggregation = LossAggregation::token_mean;
  KlEstimator kl_estimator = KlEstimator::k3;
  double kl_coef = 0;       // KL in the loss; 0 when kl.in is reward (the penalty is in the advantages)
  double entropy_coef = 0;  // entropy bonus
};

// From the config; `kl_coef` is the controller's current coefficient (KlController), used
// only when kl.in is loss.
ActorObjectiveParams actor_objective_params(const AlgorithmConfig& config, double kl_coef);

struct ObjectiveResult {
  at::Tensor loss;  // scalar: differentiate this
  ObjectiveMetrics metrics;
};

ObjectiveResult actor_objective(const ActorObjectiveInputs& in, const ActorObjectiveParams& params,
                                const AggregationScale& scale);

// The critic's share: metrics.value_loss, metrics.explained_variance and metrics.loss.
//   values [B, T] (differentiable), old_values [B, T], returns [B, T], mask [B, T]
ObjectiveResult critic_objective(const at::Tensor& values, const at::Tensor& old_values, const at::Tensor& returns,
                                 const at::Tensor& mask, double clip_range, LossAggregation aggregation,
                                 const AggregationScale& scale);

}  // namespace tandem
