// Public plugin API: the inputs and outputs of advantage estimators and policy losses.
//
// A plugin registers functions of these types by name (tandem/plugin.h); the config picks
// them with algorithm.advantage and algorithm.policy_loss. The built-ins and the exact
// meaning of every field are documented in tandem's learner/advantages.h and
// learner/policy_loss.h. Tensors are ATen's (link the libtorch tandem was built with;
// the loader checks the version).
//
// Conventions: B samples padded to T response tokens; `mask` is 1 for the tokens that
// count. Samples are ordered by prompt: samples [g*group_size, (g+1)*group_size) answer
// the same prompt.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

namespace tandem {

// Advantage estimators run once per step on the whole batch, without autograd.
struct AdvantageInputs {
  at::Tensor rewards;        // [B] float: sequence-level reward of each sample
  at::Tensor mask;           // [B, T]: 1 for response tokens that count
  at::Tensor token_rewards;  // [B, T] float, optional (undefined: none): per-token rewards
  at::Tensor values;         // [B, T] float: critic values V(s_t), gae only
  int64_t group_size = 1;    // consecutive samples sharing a prompt
  at::Tensor baselines;      // [B] float: remax only: the reward of the greedy answer to the sample's prompt
};

struct AdvantageParams {
  bool normalize_std = true;     // grpo: divide by the group's std (+ eps)
  double gamma = 1.0;            // reinforce_pp, gae: discount per token
  double lam = 1.0;              // gae: lambda
  bool whiten_advantages = true; // gae: whiten advantages over the batch's valid tokens (after returns)
  double eps = 1e-6;             // added to every std before dividing
};

struct AdvantageResult {
  at::Tensor advantages;  // [B, T]: per-token advantages, 0 at masked positions
  at::Tensor returns;     // [B, T]: value targets (gae only; undefined otherwise)
};

// Policy losses run per micro-batch with autograd: the result's `loss` must be
// differentiable in `logprobs`, 0 at masked positions; tandem aggregates it
// (algorithm.loss_agg) and adds the KL and entropy terms.
struct PolicyLossInputs {
  at::Tensor logprobs;      // [B, T] float: current policy log-probs of the sampled tokens (requires grad)
  at::Tensor old_logprobs;  // [B, T] float: log-probs under the policy that sampled them
  at::Tensor advantages;    // [B, T] float: per-token advantages (advantages.h)
  at::Tensor mask;          // [B, T]: 1 for response tokens that count
};

struct PolicyLossParams {
  double clip_low = 0.2;   // ratio >= 1 - clip_low (geo_mean: log-ratio >= -clip_low)
  double clip_high = 0.28; // ratio <= 1 + clip_high (geo_mean: log-ratio <= clip_high)
  double dual_c = 0.0;     // 0: off; else > 1
  double tau_pos = 1.0;    // sapo: gate temperature for tokens with A > 0
  double tau_neg = 1.05;   // sapo: gate temperature for tokens with A <= 0
  double cov_ratio = 2e-4; // clip_cov, kl_cov: share of the valid tokens singled out by covariance
  double clip_cov_lb = 1.0;  // clip_cov: covariance window (lb, ub) of the candidates
  double clip_cov_ub = 5.0;
  double kl_cov_coef = 1.0;  // kl_cov: weight of |log ratio| on the singled-out tokens
  uint64_t seed = 0;         // clip_cov: draws which candidates lose their gradient (same seed, same draw)
};

struct PolicyLossResult {
  at::Tensor loss;     // [B, T]: per-token loss, 0 at masked positions, differentiable
  at::Tensor ratio;    // [B, T] detached: the ratio that was clipped (ppo_clip: per token;
                       //   gspo: the sequence's, repeated over its tokens); 1 at masked positions
  at::Tensor clipped;  // [B, T] bool: a clip (ratio or dual) or a selection was active at the token;
                       //   ppo_clip, gspo, clip_cov: it has no gradient there; cispo and kl_cov
                       //   keep one (see policy_loss.h); false at masked positions
  // Losses defined on whole sequences (geo_mean, sapo) aggregate as the mean over sequences
  // of each sequence's token mean, whatever algorithm.loss_agg says; false: loss_agg applies.
  bool sequence_mean = false;
};

using AdvantageEstimatorFn = std::function<AdvantageResult(const AdvantageInputs&, const AdvantageParams&)>;
using PolicyLossFn = std::function<PolicyLossResult(const PolicyLossInputs&, const PolicyLossParams&)>;

}  // namespace tandem
