// Rollout correction (algorithm.rollout_is; verl's rollout_is, after Yao et al. 2025, "Your
// Efficient RL Framework Secretly Brings You Off-Policy RL Training"): the rollout engine's
// log-probs of a token can differ from the learner's on the same weights (bf16, other
// kernels), so the samples are slightly off-policy. Decoupled PPO corrects it: the PPO
// ratio is taken against the learner's own log-probs (the proximal policy), and each
// token's loss is weighted by w = pi_learner / pi_rollout,
//   token level:     w_t = exp(l_t - r_t)
//   sequence level:  w_t = exp(sum over the sequence's valid tokens of (l - r)), the same at
//                    every token (log-sum clamped to [-20, 20] before exp)
// then truncated, min(w, threshold), or masked, 0 outside [1/threshold, threshold] (the
// whole sequence at sequence level).
#include "controller/loop/training_loop_impl.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace tandem::training {

MetricRow TrainingLoop::correct_rollout_mismatch(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch,
                                                 int64_t step) {
  const RolloutIsConfig& is = c_.algorithm.rollout_is;
  const std::vector<std::vector<float>> learner = per_token_from_learners("learner_logprobs", batch);
  const bool truncate = is.mode == "truncate";
  double weight_sum = 0, tokens = 0, cut = 0, mismatch_k1 = 0, mismatch_k3 = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    TrainingSample& sample = batch[i];
    const std::vector<float>& loss_mask = samples[i].loss_mask;
    auto valid = [&](size_t t) { return loss_mask.empty() || loss_mask[t] != 0; };
    const size_t n = sample.response.size();
    double log_sum = 0;
    for (size_t t = 0; t < n; ++t) {
      const double d = static_cast<double>(learner[i][t]) - sample.old_logprobs[t];
      TANDEM_CHECK(!std::isnan(d), "step {}: sample {} token {}: a log-prob is NaN (learner {}, rollout {})", step, i, t,
                   learner[i][t], sample.old_logprobs[t]);
      if (!valid(t)) continue;
      log_sum += d;
      // KL(rollout || learner) per token, on tokens the rollout drew: k1 = -d, k3 = e^d - 1 - d.
      mismatch_k1 += -d;
      mismatch_k3 += std::expm1(std::clamp(d, -20.0, 20.0)) - std::clamp(d, -20.0, 20.0);
    }
    const double sequence_weight = std::exp(std::clamp(log_sum, -20.0, 20.0));
    sample.is_weights.assign(n, 1.0f);
    for (size_t t = 0; t < n; ++t) {
      if (!valid(t)) continue;
      const double w = is.level == "sequence"
                           ? sequence_weight
                           : std::exp(std::clamp(static_cast<double>(learner[i][t]) - sample.old_logprobs[t], -20.0, 20.0));
      const bool outside = truncate ? w > is.threshold : (w > is.threshold || w < 1.0 / is.threshold);
      const double kept = !outside ? w : truncate ? is.threshold : 0.0;
      sample.is_weights[t] = static_cast<float>(kept);
      weight_sum += kept;
      cut += outside ? 1 : 0;
      tokens += 1;
    }
    sample.old_logprobs = learner[i];  // the PPO ratio against the learner's own (proximal) log-probs
  }
  const double per_token = tokens > 0 ? 1.0 / tokens : 0.0;
  return {{"rollout_is/weight_mean", tokens > 0 ? weight_sum * per_token : 1.0},
          {truncate ? "rollout_is/clipped_share" : "rollout_is/masked_share", cut * per_token},
          {"rollout_is/mismatch_kl", mismatch_k1 * per_token},
          {"rollout_is/mismatch_k3", mismatch_k3 * per_token}};
}

}  // namespace tandem::training
