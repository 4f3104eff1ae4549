// What the advantage estimator gets besides the samples' rewards: the KL penalty of
// algorithm.kl.in: reward (per token, with the adaptive coefficient) and remax's greedy
// baselines.
#include "controller/loop/training_loop_impl.h"

#include "core/log.h"
#include "learner/kl.h"

#include <ATen/ATen.h>

namespace tandem::training {

MetricRow TrainingLoop::kl_in_reward(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch,
                                     ExtraAdvantageInputs& extra) {
  std::vector<std::vector<float>> reference = per_token_from_learners("learner_ref_logprobs", batch);
  const int64_t count = static_cast<int64_t>(batch.size());
  int64_t longest = 1;
  for (const TrainingSample& s : batch) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.response.size()));
  std::vector<float> logprobs(static_cast<size_t>(count * longest), 0.0f), ref(logprobs.size(), 0.0f),
      mask(logprobs.size(), 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    for (size_t t = 0; t < batch[i].response.size(); ++t) {
      logprobs[i * longest + t] = batch[i].old_logprobs[t];
      ref[i * longest + t] = reference[i][t];
      mask[i * longest + t] = samples[i].loss_mask.empty() ? 1.0f : samples[i].loss_mask[t];
    }
  }
  auto matrix = [&](const std::vector<float>& v) { return at::tensor(v, at::kFloat).view({count, longest}); };
  // The penalty on the policy's log-probs when it sampled (the rollout's, which the probe
  // holds equal to the learners' of the same weights), as verl's apply_kl_penalty.
  const KlEstimator estimator = kl_estimator_from_name(c_.algorithm.kl.estimator);
  const at::Tensor m = matrix(mask);
  const at::Tensor kl = kl_per_token(matrix(logprobs), matrix(ref), m, estimator).to(at::kDouble);
  const double coef = kl_controller_.coef();
  // Ziegler's measured KL: each sequence's mean over its tokens, averaged over sequences.
  const at::Tensor tokens = m.sum(1).to(at::kDouble);
  const at::Tensor per_sequence = kl.sum(1) / tokens.clamp_min(1);
  const at::Tensor has_tokens = tokens.gt(0);
  const double sequences = has_tokens.sum().item<double>();
  const double measured = sequences > 0 ? per_sequence.masked_select(has_tokens).sum().item<double>() / sequences : 0.0;
  const at::Tensor penalty = (-coef * kl).to(at::kFloat).contiguous();
  extra.token_rewards.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const float* row = penalty.data_ptr<float>() + i * longest;
    extra.token_rewards[i].assign(row, row + batch[i].response.size());
    batch[i].ref_logprobs = std::move(reference[i]);
  }
  measured_kl_ = measured;
  return {{"actor/reward_kl_penalty", measured}, {"actor/reward_kl_penalty_coeff", coef}};
}

std::vector<double> TrainingLoop::remax_baselines(int64_t step, const StepRollout& rollout) {
  // Greedy, one answer per prompt, on the weights that drew the samples.
  std::vector<Sample> greedy = generate(step, rollout.rows, rollout.prompts, EvalSampling{1, 0.0});
  scoring_.score(greedy, rollout.rows, data_);
  std::vector<double> baselines;
  // Shaped as the samples' rewards are (score_round), so the baseline compares like with like.
  for (const Sample& s : rollout.samples) {
    const Sample& g = greedy.at(s.prompt_slot);
    baselines.push_back(g.reward + overlong_penalty(c_, g));
  }
  return baselines;
}

}  // namespace tandem::training
