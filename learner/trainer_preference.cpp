// The reward model's passes (Trainer::preference_step, reward_scores): the policy's trunk
// with the value head's tensors as a scalar score head read at each sequence's last token,
// trained on preference pairs with the Bradley-Terry loss (learner/preference_loss.h).
#include "learner/preference_loss.h"
#include "learner/trainer.h"
#include "learner/trainer_impl.h"

#include <algorithm>

namespace tandem {

at::Tensor Trainer::Impl::last_token_scores(const at::Tensor& normed, const MicroBatch& batch) const {
  // One sequence per row, right-padded: its last token sits at (tokens in the row) - 1.
  const at::Tensor last = batch.layout.segment_ids.gt(0).sum(1).sub(1).clamp_min(0);  // [B]
  const at::Tensor rows = at::arange(normed.size(0), last.options());
  const at::Tensor hidden = head_reads(normed).index({rows, last}).to(at::kFloat);  // [B, H]
  return at::linear(hidden, value_weight, value_bias).squeeze(-1);   // [B]
}

ObjectiveResult Trainer::Impl::preference_objective(const at::Tensor& normed, const MicroBatch& batch) const {
  const at::Tensor scores = last_token_scores(normed, batch);
  ObjectiveResult result;
  if (scores.size(0) % 2 != 0) {  // fsdp's idle micro-batch (one empty row): no pair, but the graph
    result.loss = scores.sum() * 0.0;
    return result;
  }
  const at::Tensor pairs = scores.view({-1, 2});  // [P, 2]: chosen, rejected
  const PreferenceLoss loss = preference_loss(pairs.select(1, 0), pairs.select(1, 1), preference_pairs);
  result.loss = loss.loss;
  result.metrics.loss = loss.loss.detach().item<double>();
  result.metrics.tokens = static_cast<double>(pairs.size(0));  // pairs, for combining
  result.metrics.pairs_correct = loss.accuracy_sum;
  result.metrics.margin_sum = loss.margin_sum;
  return result;
}

PreferenceMetrics Trainer::preference_step(const std::vector<TrainingSample>& share) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.options.reward_model, "preference_step: this trainer is not a reward model (TrainerOptions::reward_model)");
  TANDEM_CHECK(share.size() % 2 == 0, "preference_step: {} samples are not whole pairs (chosen, rejected)", share.size());
  at::Tensor total = m.device_doubles({static_cast<double>(share.size() / 2)});
  m.data().all_reduce_sum(total);
  const double pairs = Impl::host_doubles(total)[0];
  TANDEM_CHECK(pairs > 0, "preference_step: no pair on any rank");
  const size_t micro = 2 * static_cast<size_t>(m.options.learner.micro_batch_size);  // samples: whole pairs
  const AggregationScale unused_scale;
  double loss = 0, correct = 0, margin = 0;
  m.preference_pairs = pairs;
  try {
    m.zero_gradients();
    const int64_t count = static_cast<int64_t>((share.size() + micro - 1) / micro);
    for (int64_t i = 0; i < m.micro_batches_to_run(count); ++i) {
      const size_t begin = static_cast<size_t>(i) * micro;
      const bool idle = begin >= share.size();
      const ObjectiveMetrics part = m.micro_batch(
          idle ? m.idle_micro_batch() : m.micro_batch_of(share, begin, std::min(share.size(), begin + micro)),
          unused_scale);
      loss += part.loss;
      correct += part.pairs_correct;
      margin += part.margin_sum;
    }
  } catch (...) {
    m.preference_pairs = 0;
    throw;
  }
  m.preference_pairs = 0;
  const OptimizerConfig& opt = m.options.learner.optimizer;
  PreferenceMetrics out;
  out.lr = scheduled_learning_rate(opt.lr, opt.schedule, opt.warmup_steps, m.steps, m.options.total_optimizer_steps);
  out.grad_norm = m.synchronise_and_step(*m.adam, out.lr);
  ++m.steps;
  at::Tensor sums = m.device_doubles({loss, correct, margin});
  m.data().all_reduce_sum(sums);
  const std::vector<double> summed = Impl::host_doubles(sums);
  out.loss = summed[0];  // shares of the mean: they add up
  out.accuracy = summed[1] / pairs;
  out.margin = summed[2] / pairs;
  out.pairs = pairs;
  return out;
}

std::vector<float> Trainer::reward_scores(const std::vector<TrainingSample>& samples) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.options.reward_model, "reward_scores: this trainer is not a reward model (TrainerOptions::reward_model)");
  // Read per response token (the pass fsdp knows how to run), each row's score repeated.
  const std::vector<std::vector<float>> per_token =
      m.per_response_token(samples, [&m](const at::Tensor& trunk, const MicroBatch& batch) {
        const at::Tensor scores = m.last_token_scores(m.model.final_norm(trunk), batch);
        return scores.unsqueeze(1).expand({scores.size(0), batch.mask.size(1)});
      });
  std::vector<float> out;
  for (size_t i = 0; i < samples.size(); ++i) {
    TANDEM_CHECK(!per_token[i].empty(), "reward_scores: sample {} has no response token to end on", i);
    out.push_back(per_token[i].back());
  }
  return out;
}

}  // namespace tandem
