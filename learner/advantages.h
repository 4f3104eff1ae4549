// Advantage estimators (`algorithm.advantage`): grpo, dr_grpo, rloo, reinforce_pp, gae.
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
// Guarantees: 0 at masked positions; all-masked rows get 0s; a group (grpo, dr_grpo,
// rloo) whose rewards are all equal gets exactly 0, never NaN.
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

// GAE (Schulman et al. 2016) with a critic; rewards as for reinforce_pp.
//   delta_t = r_t + gamma * V_{t'} - V_t       (V after the last valid token is 0: terminal)
//   A_t     = delta_t + gamma * lam * A_{t'}
//   returns = A + V (before whitening)          → the value targets
//   then, if whiten_advantages, A is whitened over the batch's valid tokens.
AdvantageResult gae_advantages(const AdvantageInputs& in, const AdvantageParams& params);

}  // namespace tandem
