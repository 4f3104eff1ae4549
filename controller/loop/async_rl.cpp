// Asynchronous RL (algorithm.async): which steps prefetch the next step's rollout, and the
// truncated importance weights that correct the loss for samples of older weights.
#include "controller/loop/training_loop_impl.h"

#include "core/error.h"
#include "core/log.h"

#include <algorithm>
#include <cmath>

namespace tandem::training {

bool TrainingLoop::prefetches_after(int64_t step) const {
  if (c_.algorithm.async.max_staleness <= 0 || step >= c_.experiment.steps) return false;
  // A checkpoint holds nothing in flight: the step after one generates on the weights it
  // saved, so a resumed run repeats exactly what the uninterrupted one did.
  return !(c_.experiment.checkpoint_every > 0 && step % c_.experiment.checkpoint_every == 0);
}

MetricRow TrainingLoop::correct_for_staleness(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch,
                                              int64_t step) {
  // Training step `step` starts from the learners' version step - 1.
  const int64_t learner_version = step - 1;
  double staleness_sum = 0, tokens_seen = 0, partial = 0;
  bool any_stale = false;
  for (const Sample& s : samples) {
    const int64_t oldest = learner_version - s.version;
    TANDEM_CHECK(oldest >= 0 && oldest <= c_.algorithm.async.max_staleness,
                 "step {}: a sample of weight version {} is {} versions behind the learners' {} "
                 "(algorithm.async.max_staleness {})",
                 step, s.version, oldest, learner_version, c_.algorithm.async.max_staleness);
    for (int64_t version : s.token_versions) {
      staleness_sum += static_cast<double>(learner_version - version);
      any_stale = any_stale || version < learner_version;
    }
    tokens_seen += static_cast<double>(s.token_versions.size());
    // A partial rollout: continued on newer weights part-way.
    partial += !s.token_versions.empty() && s.token_versions.back() != s.token_versions.front() ? 1 : 0;
  }
  MetricRow row = {{"async/staleness_mean", tokens_seen > 0 ? staleness_sum / tokens_seen : 0.0},
                   {"async/partial_share", samples.empty() ? 0.0 : partial / static_cast<double>(samples.size())}};
  auto metrics = [&](double is_weight_mean, double is_clipped_share) {
    row.insert(row.end(), {{"async/is_weight_mean", is_weight_mean}, {"async/is_clipped_share", is_clipped_share}});
    return row;
  };
  if (!any_stale) return metrics(1.0, 0.0);
  if (c_.learner.epochs == 1 && c_.learner.mini_batches == 1) {
    // One optimizer step: the training forward runs the proximal weights, so the learners
    // take its log-probs and weight the tokens there (learner/proximal_weights.h) and
    // report async/is_weight_mean and async/is_clipped_share with the update.
    for (TrainingSample& sample : batch) sample.stale = true;
    return row;
  }

  // Decoupled PPO: the ratio is taken against the learners' own (proximal) log-probs, and
  // each token's loss is weighted by min(pi_proximal / pi_rollout, is_cap), which corrects
  // for the rollout's older policy without letting a rare token's weight explode.
  const std::vector<std::vector<float>> proximal = per_token_from_learners("learner_logprobs", batch);
  const double cap = c_.algorithm.async.is_cap;
  double weight_sum = 0, tokens = 0, clipped = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    TrainingSample& sample = batch[i];
    sample.is_weights.resize(sample.response.size());
    for (size_t t = 0; t < sample.response.size(); ++t) {
      const double weight = std::exp(static_cast<double>(proximal[i][t]) - sample.old_logprobs[t]);
      TANDEM_CHECK(!std::isnan(weight), "step {}: sample {} token {}: the importance weight is NaN", step, i, t);
      clipped += weight > cap ? 1 : 0;
      sample.is_weights[t] = static_cast<float>(std::min(weight, cap));
      sample.old_logprobs[t] = proximal[i][t];
      weight_sum += sample.is_weights[t];
      tokens += 1;
    }
  }
  return metrics(tokens > 0 ? weight_sum / tokens : 1.0, tokens > 0 ? clipped / tokens : 0.0);
}

}  // namespace tandem::training
