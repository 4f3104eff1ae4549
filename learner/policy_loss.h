// Policy losses (`algorithm.policy_loss`): ppo_clip and gspo, per token, before aggregation.
//
// Sign convention: these are losses (to minimise), the negated surrogate objectives.
// Every tensor is [B, T] with the learner's mask (see masked_ops.h). The returned loss is
// 0 at masked positions and differentiable in `logprobs`; aggregate it with
// loss_aggregation.h.
//
// Clipping, shared by both losses, for a ratio rho and advantage A at a token:
//   loss = max(-A * rho, -A * clip(rho, 1 - low, 1 + high))      PPO; asymmetric bounds as
//                                                                  DAPO's clip-higher
//   dual clip (Ye et al. 2020), when dual_c > 0 and A < 0:
//   loss = min(loss, dual_c * |A|)                                 i.e. the objective is
//                                                                  max(min(rho A, clip(rho) A), dual_c A)
// so a negative-advantage token with a huge ratio costs at most dual_c * |A|. Where a
// clipped branch wins, the loss is a constant in the parameters: no gradient. Log-ratios
// are clamped to [-20, 20] before exp() so a broken log-prob cannot produce inf (e^20 is
// far outside any sensible clip range, and the clamp, like the clip, stops the gradient).
#pragma once

#include "core/config.h"

#include <tandem/objectives.h>

#include <ATen/core/Tensor.h>

namespace tandem {

PolicyLossParams policy_loss_params(const AlgorithmConfig& config);

// PPO clip (Schulman et al. 2017) with rho_t = exp(logprobs_t - old_logprobs_t).
PolicyLossResult ppo_clip_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

// GSPO (Zheng et al. 2025), token-level form ("GSPO-token"): with the sequence ratio
//   s_i = exp(mean over the sequence's valid tokens of (logprobs - old_logprobs)),
// each token uses s_i,t = sg[s_i] * exp(logprobs_t - sg[logprobs_t]), whose value is s_i
// and whose gradient is s_i * grad logprobs_t, clipped as above. With per-sequence
// advantages and seq_mean_token_mean aggregation this is exactly the paper's sequence
// objective. A row with no valid token has s_i = 1 (and no loss).
PolicyLossResult gspo_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

}  // namespace tandem
