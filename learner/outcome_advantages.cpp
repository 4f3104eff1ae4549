// verl's outcome advantage estimators beyond grpo/rloo (advantages.h): grpo_vectorized,
// grpo_passk, opo, gpg, reinforce_plus_plus_baseline and remax. Statistics in float64.
#include "learner/advantages.h"

#include "core/error.h"
#include "learner/advantage_parts.h"
#include "learner/masked_ops.h"

#include <ATen/ATen.h>

namespace tandem {

using namespace advantage_parts;

AdvantageResult grpo_vectorized_advantages(const AdvantageInputs& in, const AdvantageParams& params) {
  Batch batch = check_inputs(in, "grpo_vectorized", /*needs_group=*/true, /*needs_values=*/false);
  Groups g = make_groups(sequence_rewards(in, batch), in.group_size);
  at::Tensor centred = g.rewards - g.rewards.mean(1, true);
  if (params.normalize_std) centred = centred / (group_variance(g.rewards).clamp_min(params.eps).sqrt() + params.eps);
  return {broadcast_over_tokens(finish_groups(centred, g), batch, result_dtype(in)), at::Tensor()};
}

AdvantageResult grpo_passk_advantages(const AdvantageInputs& in, const AdvantageParams& params) {
  Batch batch = check_inputs(in, "grpo_passk", /*needs_group=*/true, /*needs_values=*/false);
  Groups g = make_groups(sequence_rewards(in, batch), in.group_size);
  // The first of the group's maxima, and the largest of the rest (the runner-up; equal to
  // the best when the maximum is shared, so the margin is 0 then).
  const at::Tensor best = g.rewards.argmax(1, /*keepdim=*/true);  // [G, 1]: argmax takes the first maximum
  const at::Tensor is_best = at::arange(in.group_size, best.options()).unsqueeze(0).eq(best);  // [G, n]
  const at::Tensor top = g.rewards.gather(1, best);
  const at::Tensor runner_up = g.rewards.masked_fill(is_best, -INFINITY).amax(1, /*keepdim=*/true);
  at::Tensor margin = top - runner_up;
  if (params.normalize_std) margin = margin / (group_variance(g.rewards).sqrt() + params.eps);
  const at::Tensor advantages = at::where(is_best, margin.expand_as(g.rewards), at::zeros_like(g.rewards));
  return {broadcast_over_tokens(finish_groups(advantages, g), batch, result_dtype(in)), at::Tensor()};
}

AdvantageResult opo_advantages(const AdvantageInputs& in, const AdvantageParams&) {
  Batch batch = check_inputs(in, "opo", /*needs_group=*/true, /*needs_values=*/false);
  Groups g = make_groups(sequence_rewards(in, batch), in.group_size);
  const at::Tensor lengths = batch.valid.sum(1).to(at::kDouble).view({-1, in.group_size});  // [G, n]
  const at::Tensor total = lengths.sum(1, true);
  // A group without a valid token has no token to carry an advantage: any baseline does.
  const at::Tensor baseline = at::where(total.gt(0), (lengths * g.rewards).sum(1, true) / total.clamp_min(1),
                                        g.rewards.mean(1, true));
  return {broadcast_over_tokens(finish_groups(g.rewards - baseline, g), batch, result_dtype(in)), at::Tensor()};
}

AdvantageResult gpg_advantages(const AdvantageInputs& in, const AdvantageParams&) {
  Batch batch = check_inputs(in, "gpg", /*needs_group=*/true, /*needs_values=*/false);
  const at::Tensor r = sequence_rewards(in, batch);
  Groups g = make_groups(r, in.group_size);
  // GPG's correction for the samples that carry no signal: B over the non-zero rewards.
  const double nonzero = std::max(1.0, r.ne(0).sum().item<double>());
  const double alpha = static_cast<double>(batch.size) / nonzero;
  const at::Tensor advantages = alpha * (g.rewards - g.rewards.mean(1, true));
  return {broadcast_over_tokens(finish_groups(advantages, g), batch, result_dtype(in)), at::Tensor()};
}

AdvantageResult reinforce_pp_baseline_advantages(const AdvantageInputs& in, const AdvantageParams& params) {
  Batch batch = check_inputs(in, "reinforce_plus_plus_baseline", /*needs_group=*/true, /*needs_values=*/false);
  Groups g = make_groups(sequence_rewards(in, batch), in.group_size);
  const at::Tensor per_token = broadcast_over_tokens(finish_groups(g.rewards - g.rewards.mean(1, true), g), batch,
                                                     at::kDouble);
  return {masked_whiten(per_token, batch.valid, params.eps).to(result_dtype(in)), at::Tensor()};
}

AdvantageResult remax_advantages(const AdvantageInputs& in, const AdvantageParams&) {
  Batch batch = check_inputs(in, "remax", /*needs_group=*/false, /*needs_values=*/false);
  TANDEM_CHECK(in.baselines.defined() && in.baselines.dim() == 1 && in.baselines.size(0) == batch.size,
               "remax: baselines must be a [B] tensor with B = {} (the greedy answers' rewards)", batch.size);
  // Undiscounted return-to-go over the valid tokens: a reversed cumulative sum.
  const at::Tensor rewards = token_level_rewards(in, batch).to(batch.valid.device());
  const at::Tensor returns = rewards.flip({1}).cumsum(1).flip({1});
  const at::Tensor baselines = in.baselines.to(batch.valid.device(), at::kDouble).unsqueeze(1);
  const at::Tensor advantages = zero_invalid(returns - baselines, batch.valid);
  return {advantages.to(result_dtype(in)), at::Tensor()};
}

}  // namespace tandem
