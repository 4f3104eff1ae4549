#include "learner/objective.h"

#include "core/error.h"
#include "learner/masked_ops.h"
#include "learner/objective_registry.h"
#include "learner/value_loss.h"

#include <ATen/ATen.h>

#include <limits>
#include <vector>

namespace tandem {

namespace {

// min() / max() of x, `empty` for an empty tensor (a micro-batch may hold no rows).
at::Tensor extreme(const at::Tensor& x, double empty, bool largest) {
  at::Tensor all = at::cat({x.flatten(), at::full({1}, empty, x.options())});
  return largest ? all.max() : all.min();
}

}  // namespace

ActorObjectiveParams actor_objective_params(const AlgorithmConfig& config, double kl_coef) {
  ActorObjectiveParams params;
  params.policy_loss = config.policy_loss;
  params.clip = policy_loss_params(config);
  params.aggregation = loss_aggregation_from_name(config.loss_agg);
  params.kl_estimator = kl_estimator_from_name(config.kl.estimator);
  params.kl_coef = kl_placement_from_name(config.kl.in) == KlPlacement::loss ? kl_coef : 0.0;
  params.entropy_coef = config.entropy_coef;
  return params;
}

ObjectiveResult actor_objective(const ActorObjectiveInputs& in, const ActorObjectiveParams& params,
                                const AggregationScale& scale) {
  TANDEM_CHECK(params.kl_coef == 0 || in.ref_logprobs.defined(),
               "a KL penalty in the loss (coef {}) needs the reference log-probs", params.kl_coef);
  TANDEM_CHECK(params.entropy_coef == 0 || in.entropy.defined(),
               "an entropy bonus (coef {}) needs the per-token entropy", params.entropy_coef);
  PolicyLossResult policy = find_policy_loss(params.policy_loss)({in.logprobs, in.old_logprobs, in.advantages, in.mask},
                                                                  params.clip);
  at::Tensor valid = mask_to_bool(in.mask);
  at::Tensor per_token = policy.loss;
  if (in.is_weights.defined()) {
    check_token_tensor(in.is_weights, in.mask, "is_weights");
    per_token = per_token * in.is_weights.to(per_token.scalar_type());
  }
  // Losses defined on whole sequences (geo_mean, sapo) average sequences, as their papers.
  const LossAggregation pg_aggregation =
      policy.sequence_mean ? LossAggregation::seq_mean_token_mean : params.aggregation;
  at::Tensor pg_loss = aggregate_loss(per_token, in.mask, pg_aggregation, scale);
  at::Tensor loss = pg_loss;

  // Metric scalars are gathered into one tensor: one device → host copy per call.
  at::Tensor zero = at::zeros({}, in.logprobs.options().dtype(at::kFloat));
  at::Tensor kl_mean = zero, entropy_mean = zero;
  if (in.ref_logprobs.defined()) {
    at::Tensor kl = kl_per_token(in.logprobs, in.ref_logprobs, in.mask, params.kl_estimator);
    if (params.kl_coef != 0) loss = loss + params.kl_coef * aggregate_loss(kl, in.mask, params.aggregation, scale);
    kl_mean = masked_mean(kl.detach(), valid);
  }
  if (in.entropy.defined()) {
    check_token_tensor(in.entropy, in.mask, "entropy");
    if (params.entropy_coef != 0) {
      loss = loss - params.entropy_coef * aggregate_loss(in.entropy, in.mask, params.aggregation, scale);
    }
    entropy_mean = masked_mean(in.entropy.detach(), valid);
  }
  at::Tensor log_ratio = zero_invalid((in.logprobs - in.old_logprobs.to(in.logprobs.scalar_type())).detach(), valid);
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor ratio = policy.ratio.to(at::kFloat);
  std::vector<at::Tensor> scalars = {
      loss.detach().to(at::kFloat),
      pg_loss.detach().to(at::kFloat),
      kl_mean.to(at::kFloat),
      entropy_mean.to(at::kFloat),
      masked_mean(policy.clipped.to(at::kFloat), valid),
      masked_mean(0.5 * log_ratio.pow(2), valid).to(at::kFloat),
      masked_mean(ratio, valid),
      extreme(at::where(valid, ratio, at::full({}, inf, ratio.options())), inf, /*largest=*/false),
      extreme(at::where(valid, ratio, at::full({}, -inf, ratio.options())), -inf, /*largest=*/true),
      valid.sum().to(at::kFloat),
  };
  at::Tensor host = at::stack(scalars).to(at::kCPU, at::kDouble);
  const double* v = host.data_ptr<double>();
  ObjectiveMetrics m;
  m.loss = v[0];
  m.pg_loss = v[1];
  m.kl = v[2];
  m.entropy = v[3];
  m.clipfrac = v[4];
  m.approx_kl = v[5];
  m.tokens = v[9];
  if (m.tokens > 0) {
    m.ratio_mean = v[6];
    m.ratio_min = v[7];
    m.ratio_max = v[8];
  }
  return {loss, m};
}

ObjectiveResult critic_objective(const at::Tensor& values, const at::Tensor& old_values, const at::Tensor& returns,
                                 const at::Tensor& mask, double clip_range, LossAggregation aggregation,
                                 const AggregationScale& scale) {
  at::Tensor loss =
      aggregate_loss(clipped_value_loss(values, old_values, returns, mask, clip_range), mask, aggregation, scale);
  ObjectiveMetrics m;
  m.value_loss = loss.detach().to(at::kCPU, at::kDouble).item<double>();
  m.loss = m.value_loss;
  m.explained_variance = explained_variance(values, returns, mask);
  m.tokens = static_cast<double>(mask_to_bool(mask).sum().item<int64_t>());
  return {loss, m};
}

}  // namespace tandem
