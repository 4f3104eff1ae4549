// Advantage estimators (`algorithm.advantage`): grpo, dr_grpo, rloo, reinforce_pp, gae, and
// verl's outcome estimators grpo_passk, opo, gpg, reinforce_plus_plus_baseline, remax,
// grpo_vectorized, rloo_vectorized (same names as verl's, so configs carry over;
// reinforce_plus_plus is an alias of reinforce_pp).
//
// Layout: B samples (responses) padded to T tokens. Samples are ordered by prompt:
// samples [g*group_size, (g+1)*group_size) answer the same prompt (B % group_size == 0).
// Estimators run once per step on the whole batch, without autograd; statistics are
// computed in float64 and the results returned in the dtype of `rewards`.
//
// Rewards: `rewards` [B] is the sequence-level reward of each sample. `token_rewards`
// [B, T] (optional) holds per-token rewards, in practice the KL penalty -coef * kl_t when
// `kl.in: reward` (see kl.h). Token-level estimators (reinforce_pp, gae) add them token by
// token, with the sequence reward at the last valid token. Sequence-level estimators
// (grpo, dr_grpo, rloo) fold their sum over the valid tokens into the sequence reward:
//   r_i = rewards[i] + sum_t mask[i,t] * token_rewards[i,t].
//
// Guarantees: 0 at masked positions; all-masked rows get 0s; a group whose rewards are all
// equal gets exactly 0, never NaN (every group-relative estimator but
// reinforce_plus_plus_baseline, whose batch whitening moves those 0s with the batch's mean).
//
// Groups of one sample (group_size 1): the estimators comparing the samples of a prompt
// (grpo, dr_grpo, rloo, grpo_passk, opo, gpg, reinforce_plus_plus_baseline and the
// vectorised ones) refuse them. verl falls back to mean 0 and std 1 there, which trains on
// the raw reward without any baseline: that is reinforce_pp (or remax) by name.
#pragma once

#include "core/config.h"

#include <tandem/objectives.h>

#include <ATen/core/Tensor.h>

namespace tandem {

AdvantageParams advantage_params(const AlgorithmConfig& config);

// GRPO: A_i = (r_i - mean_group(r)) / (std_group(r) + eps), std with Bessel's correction
// (n - 1), as torch.std; without normalize_std just r_i - mean_group(r). Broadcast over
// the sample's valid tokens. Needs group_size >= 2.
AdvantageResult grpo_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// Dr.GRPO: A_i = r_i - mean_group(r) (no std normalisation, whatever normalize_std says).
AdvantageResult dr_grpo_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// RLOO: A_i = r_i - mean of the other members of its group. Needs group_size >= 2.
AdvantageResult rloo_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// REINFORCE++ (Hu 2025; OpenRLHF's `reinforce_plus_plus`), no critic and no group baseline:
//   per-token reward     r_t = token_rewards[t] (+ rewards[i] at the sample's last valid token)
//   return-to-go         G_t = r_t + gamma * G_{t'}, t' the next valid token (0 after the last)
//   advantage            A_t = (G_t - mean(G)) / (std(G) + eps), mean and population std over
//                        every valid token of the batch (global batch normalisation).
// Masked positions inside a row are skipped (the return carries over them).
AdvantageResult reinforce_pp_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// verl's vectorised GRPO (grpo_vectorized): as grpo, but the group's variance is floored
// before the square root, as verl's group_mean_std: std = sqrt(max(var, eps)) with Bessel's
// correction, A_i = (r_i - mean) / (std + eps) (or r_i - mean without normalize_std). Equal
// rewards still give exactly 0. rloo_vectorized is rloo (the same numbers for group_size >= 2).
AdvantageResult grpo_vectorized_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// Pass@k GRPO (Chen et al. 2025, "Pass@k Training", arXiv 2503.19595; verl's grpo_passk):
// only the best sample of each group gets an advantage, the margin over the runner-up,
//   A_best = (r_(1) - r_(2)) / (std_group(r) + eps)     (without normalize_std: r_(1) - r_(2))
// every other sample 0. Ties for the best give 0 (the margin is 0); the best is the first
// of them in the group.
AdvantageResult grpo_passk_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// OPO (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline", arXiv 2505.23585): the
// baseline is the length-weighted group mean,
//   b = sum_j |y_j| r_j / sum_j |y_j|,   A_i = r_i - b,
// |y_j| the sample's valid tokens. A group whose samples have no valid token at all gets 0.
AdvantageResult opo_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// GPG (Chu et al. 2025, "GPG: A Simple and Strong RL Baseline", arXiv 2504.02546):
//   A_i = alpha * (r_i - mean_group(r)),  alpha = B / max(1, #{i : r_i != 0})
// over the whole batch (verl's f_norm is 1). Pair it with policy_loss: gpg.
AdvantageResult gpg_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// REINFORCE++ with a group baseline (Hu 2025, arXiv 2501.03262; verl's
// reinforce_plus_plus_baseline): A_i = r_i - mean_group(r) broadcast over the sample's
// valid tokens, then whitened over every valid token of the batch (masked_whiten below).
AdvantageResult reinforce_pp_baseline_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// ReMax (Li et al. 2024, arXiv 2310.10505): the baseline is the reward of the greedy answer
// to the same prompt (`baselines`, which the training loop gets by generating it):
//   A_t = G_t - b_i,   G_t = sum over valid t' >= t of the token-level rewards (undiscounted)
// No whitening (verl's). group_size may be 1.
AdvantageResult remax_advantages(const AdvantageInputs& in, const AdvantageParams& params);

// GAE (Schulman et al. 2016) with a critic; rewards as for reinforce_pp.
//   delta_t = r_t + gamma * V_{t'} - V_t       (V after the last valid token is 0: terminal)
//   A_t     = delta_t + gamma * lam * A_{t'}
//   returns = A + V (before whitening)          → the value targets
//   then, if whiten_advantages, A is whitened over the batch's valid tokens.
AdvantageResult gae_advantages(const AdvantageInputs& in, const AdvantageParams& params);

}  // namespace tandem
