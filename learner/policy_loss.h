// Policy losses (`algorithm.policy_loss`), per token, before aggregation: ppo_clip (alias
// verl's vanilla), gspo, and verl's sapo, cispo, geo_mean, gpg, clip_cov, kl_cov.
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

// SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv 2511.20347): a smooth
// gate instead of the hard clip,
//   loss_t = -f(rho_t) A_t,   f(rho) = (4 / tau) sigmoid(tau (rho - 1)),
// tau = tau_pos where A_t > 0, else tau_neg; log rho clamped to [-20, 20] as ppo_clip. The
// gate's slope at rho = 1 is 1 (the plain surrogate's) and fades away from it. Aggregated
// as the mean over sequences of each sequence's token mean (sequence_mean), as verl's.
// `clipped` is all false; `ratio` is rho.
PolicyLossResult sapo_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

// CISPO (MiniMax 2025, "MiniMax-M1", arXiv 2506.13585): the clipped ratio as a constant
// weight on the REINFORCE term, so every token keeps a gradient:
//   loss_t = -sg[clip(rho_t, 1 - low, 1 + high)] A_t logprobs_t
// `clipped` flags tokens whose ratio was cut (they still have a gradient).
PolicyLossResult cispo_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

// GMPO (Zhao et al. 2025, "Geometric-Mean Policy Optimization", arXiv 2507.20673; verl's
// geo_mean): the sequence ratio is the geometric mean of token ratios clipped in log space
// on the side the advantage's sign makes dangerous,
//   l_t = sgn(A_t) min(sgn(A_t) x_t, sgn(A_t) clamp(x_t, -low, high)),
// x_t = log rho_t clamped to [-20, 20] first as ppo_clip's (verl leaves it unbounded, and
// exp of a sequence mean past 88 is inf in float32)
//   L_i = -mean_t(A_t) exp(mean_t l_t)     (means over the sequence's valid tokens)
// The value L_i sits at every valid token of the sequence and the loss aggregates as the
// mean over sequences (sequence_mean), so a batch's loss is the mean of the L_i over its
// sequences with tokens (verl divides by all rows, empty ones included). `clipped`: x_t
// was outside [-low, high] (on either side, verl's pg_clipfrac + pg_clipfrac_lower).
PolicyLossResult geo_mean_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

// GPG (Chu et al. 2025): plain policy gradient, no ratio, no clip: loss_t = -A_t logprobs_t.
PolicyLossResult gpg_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

// Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv
// 2505.22617): ppo_clip without dual clip, except that a few tokens with a large covariance
//   cov_t = (A_t - mean(A)) (logprobs_t - mean(logprobs))     (means over the valid tokens)
// lose their gradient: among the valid tokens not already clipped with lb < cov_t < ub,
// max(1, floor(cov_ratio * valid tokens)) are drawn at random (by `seed`) and their loss
// is multiplied by a constant 0 (verl's). `clipped` flags clip or selection.
PolicyLossResult clip_cov_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

// KL-Cov (Cui et al. 2025): the unclipped surrogate -A_t rho_t (log rho clamped to
// [-20, 20], in the penalty too), plus kl_cov_coef |log rho_t| on the max(1, floor(cov_ratio * valid tokens))
// valid tokens with the largest cov_t (above; ties, which need equal products of
// float64 differences, go either way). `clipped` flags those.
PolicyLossResult kl_cov_loss(const PolicyLossInputs& in, const PolicyLossParams& params);

}  // namespace tandem
