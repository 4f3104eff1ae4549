#include "learner/policy_loss.h"

#include "core/error.h"
#include "learner/masked_ops.h"
#include "learner/policy_loss_parts.h"

#include <ATen/ATen.h>

namespace tandem {

namespace policy_loss_parts {

at::Tensor check_inputs(const PolicyLossInputs& in, const PolicyLossParams& params, const char* loss_name) {
  TANDEM_CHECK(in.mask.defined(), "{}: the mask is missing", loss_name);
  at::Tensor valid = mask_to_bool(in.mask);
  check_token_tensor(in.logprobs, in.mask, "logprobs");
  check_token_tensor(in.old_logprobs, in.mask, "old_logprobs");
  check_token_tensor(in.advantages, in.mask, "advantages");
  TANDEM_CHECK(params.clip_low >= 0 && params.clip_low < 1, "{}: clip low must be in [0, 1), got {}", loss_name,
               params.clip_low);
  TANDEM_CHECK(params.clip_high >= 0, "{}: clip high must be >= 0, got {}", loss_name, params.clip_high);
  TANDEM_CHECK(params.dual_c == 0 || params.dual_c > 1, "{}: dual clip needs a constant > 1 (or 0 for off), got {}",
               loss_name, params.dual_c);
  return valid;
}

PolicyLossResult clipped_surrogate(const at::Tensor& ratio, const at::Tensor& advantages, const at::Tensor& valid,
                                   const PolicyLossParams& params) {
  at::Tensor a = zero_invalid(advantages.to(ratio.scalar_type()), valid).detach();
  at::Tensor unclipped = -a * ratio;
  at::Tensor clipped_ratio_loss = -a * ratio.clamp(1.0 - params.clip_low, 1.0 + params.clip_high);
  // Strictly greater: the clipped branch only wins where ratio lies outside the range, and
  // there clamp() passes no gradient.
  at::Tensor ratio_clipped = clipped_ratio_loss.gt(unclipped);
  at::Tensor loss = at::where(ratio_clipped, clipped_ratio_loss, unclipped);
  at::Tensor clipped = ratio_clipped;
  if (params.dual_c > 0) {
    at::Tensor bound = -params.dual_c * a;  // dual_c * |A| where A < 0; a constant
    at::Tensor dual_clipped = a.lt(0) & loss.gt(bound);
    loss = at::where(dual_clipped, bound, loss);
    clipped = clipped | dual_clipped;
  }
  return {zero_invalid(loss, valid), at::where(valid, ratio.detach(), at::ones({}, ratio.options())), clipped & valid};
}

at::Tensor bounded_log_ratio(const PolicyLossInputs& in, const at::Tensor& valid) {
  const at::Tensor log_ratio = zero_invalid(in.logprobs - in.old_logprobs.to(in.logprobs.scalar_type()), valid);
  return log_ratio.clamp(-kMaxLogRatio, kMaxLogRatio);
}

}  // namespace policy_loss_parts

using namespace policy_loss_parts;

PolicyLossParams policy_loss_params(const AlgorithmConfig& config) {
  PolicyLossParams params;
  params.clip_low = config.clip.low;
  params.clip_high = config.clip.high;
  params.dual_c = config.clip.dual_c;
  const PolicyLossOptions& o = config.policy_loss_options;
  params.tau_pos = o.tau_pos;
  params.tau_neg = o.tau_neg;
  // One share in the loss's parameters; verl names it per loss.
  params.cov_ratio = config.policy_loss == "kl_cov" ? o.kl_cov_ratio : o.clip_cov_ratio;
  params.clip_cov_lb = o.clip_cov_lb;
  params.clip_cov_ub = o.clip_cov_ub;
  params.kl_cov_coef = o.ppo_kl_coef;
  return params;
}

PolicyLossResult ppo_clip_loss(const PolicyLossInputs& in, const PolicyLossParams& params) {
  at::Tensor valid = check_inputs(in, params, "ppo_clip");
  at::Tensor ratio = bounded_log_ratio(in, valid).exp();
  return clipped_surrogate(ratio, in.advantages, valid, params);
}

PolicyLossResult gspo_loss(const PolicyLossInputs& in, const PolicyLossParams& params) {
  at::Tensor valid = check_inputs(in, params, "gspo");
  at::Tensor logprobs = zero_invalid(in.logprobs, valid);  // [B, T]
  at::Tensor log_ratio = logprobs - zero_invalid(in.old_logprobs.to(logprobs.scalar_type()), valid);
  at::Tensor lengths = valid.sum(1, /*keepdim=*/true).clamp_min(1).to(logprobs.scalar_type());  // [B, 1]
  at::Tensor sequence_log_ratio = log_ratio.sum(1, /*keepdim=*/true).detach() / lengths;  // [B, 1]
  // Value log s_i at every token (the bracket is exactly 0), gradient grad logprobs_t.
  // Clamped as a whole, so that where the bound is active no gradient passes (clamping
  // the detached part alone bounds the value and lets s_i * grad logprobs_t through).
  at::Tensor token_log_ratio = sequence_log_ratio + (logprobs - logprobs.detach());  // [B, T]
  at::Tensor ratio = token_log_ratio.clamp(-kMaxLogRatio, kGspoMaxLogRatio).exp();
  return clipped_surrogate(ratio, in.advantages, valid, params);
}

}  // namespace tandem
