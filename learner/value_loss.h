// The critic's loss for PPO with GAE (advantage: gae), per token, and its explained variance.
#pragma once

#include <ATen/core/Tensor.h>

namespace tandem {

// Clipped value loss (as in OpenAI baselines' PPO2), with the 0.5 factor of a squared error
// so its gradient is (V - R):
//   V_clipped = old_values + clamp(values - old_values, -clip_range, clip_range)
//   loss_t    = 0.5 * max((values - returns)^2, (V_clipped - returns)^2)
// clip_range <= 0 turns clipping off (loss_t = 0.5 * (values - returns)^2).
//   values      [B, T] float: the critic now (differentiable)
//   old_values  [B, T] float: the critic when the rollout was scored
//   returns     [B, T] float: the targets (AdvantageResult::returns)
//   mask        [B, T]
// → [B, T], 0 at masked positions; aggregate with loss_aggregation.h.
at::Tensor clipped_value_loss(const at::Tensor& values, const at::Tensor& old_values, const at::Tensor& returns,
                              const at::Tensor& mask, double clip_range);

// 1 - Var(returns - values) / Var(returns) over valid tokens, in float64: 1 is a perfect
// critic, 0 no better than a constant, negative worse. 0 when Var(returns) is 0 (undefined;
// reported as "no information" rather than NaN).
double explained_variance(const at::Tensor& values, const at::Tensor& returns, const at::Tensor& mask);

}  // namespace tandem
