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
// clipped branch wins, the loss is a constant in the parameters: no gradient.
//
// Log-ratio bounds, applied before exp() (the same as verl's, so a run compares):
//   ppo_clip: log rho_t clamped to [-20, 20]
//   gspo:     the per-token log-ratio (below; its value is the sequence's mean log-ratio)
//             clamped to [-20, 10]
// Where a bound is active rho is a constant: the loss is bounded (at most e^20 |A| per
// token for ppo_clip, e^10 |A| ~ 2.2e4 |A| for gspo) and passes no gradient (at::clamp),
// even on the unclipped branch (A < 0 without dual clip), which otherwise lets a runaway
// token's e^20 |A| through. gspo's upper bound is lower because the sequence ratio
// multiplies every token of the sequence; its lower bound, e^-20 ~ 2e-9, only matches
// ppo_clip's (the ratio is ~0 there either way). `clipped` flags the clip and dual-clip
// decisions only, not these bounds.
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
// each token uses s_i,t = exp(sg[log s_i] + logprobs_t - sg[logprobs_t]), whose value is
// s_i and whose gradient is s_i * grad logprobs_t, clipped as above. With per-sequence
// advantages and seq_mean_token_mean aggregation this is exactly the paper's sequence
// objective. The bound applies to the exponent, so a sequence whose mean log-ratio passes
// 10 (one runaway token can do it) has s_i,t = e^10 and no gradient at any of its tokens.
// A row with no valid token has s_i = 1 (and no loss).
PolicyLossResult gspo_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

}  // namespace tandem
