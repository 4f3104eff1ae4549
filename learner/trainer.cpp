#include "learner/trainer.h"

#include "learner/trainer_impl.h"

#include <c10/core/InferenceMode.h>

namespace tandem {

Trainer::Trainer(const ModelConfig& config, const ModelWeights& weights, const TrainerOptions& options,
                 Collectives& collectives)
    : impl_(std::make_unique<Impl>(config, weights, options, collectives)) {}

Trainer::~Trainer() = default;

int64_t Trainer::optimizer_steps() const { return impl_->steps; }

ModelWeights Trainer::weights() const { return impl_->model.to_weights(); }

UpdateMetrics Trainer::train(const std::vector<std::vector<TrainingSample>>& mini_batches) {
  Impl& m = *impl_;
  const int64_t micro = m.options.learner.micro_batch_size;
  ObjectiveMetrics total;
  total.ratio_min = INFINITY;
  total.ratio_max = -INFINITY;
  double grad_norm_sum = 0;
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < m.options.learner.epochs; ++epoch) {
    for (const std::vector<TrainingSample>& share : mini_batches) {
      const AggregationScale scale = m.global_scale(share);
      m.flat.zero_grads();
      for (size_t begin = 0; begin < share.size(); begin += static_cast<size_t>(micro)) {
        MicroBatch batch = make_micro_batch(share, begin, std::min(share.size(), begin + static_cast<size_t>(micro)));
        auto [logprobs, entropy] = m.policy_logprobs(m.model, batch);
        ActorObjectiveInputs in{logprobs, batch.old_logprobs, batch.advantages, batch.mask, batch.ref_logprobs, entropy};
        if (m.reference && !in.ref_logprobs.defined()) {
          c10::InferenceMode guard;
          in.ref_logprobs = m.policy_logprobs(*m.reference, batch).first;
        }
        ObjectiveResult result = actor_objective(in, m.objective, scale);
        result.loss.backward();
        accumulate(total, result.metrics);
      }
      grad_norm_sum += m.synchronise_and_step();
      ++steps;
    }
  }

  // Combine the ranks' reports: shares and token-weighted sums add; extremes take the max.
  const double t = total.tokens;
  at::Tensor sums = at::tensor({total.loss, total.pg_loss, total.value_loss, total.kl * t, total.entropy * t,
                                total.clipfrac * t, total.approx_kl * t, total.ratio_mean * t, t},
                               at::kDouble);
  at::Tensor extremes = at::tensor({total.ratio_max, -total.ratio_min}, at::kDouble);
  m.collectives.all_reduce_sum(sums);
  m.collectives.all_reduce_max(extremes);
  auto s = [&](int i) { return sums[i].item<double>(); };
  const double tokens = s(8), per_token = tokens > 0 ? 1.0 / tokens : 0.0;
  UpdateMetrics out;
  out.optimizer_steps = steps;
  const double per_step = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  out.objective.loss = s(0) * per_step;
  out.objective.pg_loss = s(1) * per_step;
  out.objective.value_loss = s(2) * per_step;
  out.objective.kl = s(3) * per_token;
  out.objective.entropy = s(4) * per_token;
  out.objective.clipfrac = s(5) * per_token;
  out.objective.approx_kl = s(6) * per_token;
  out.objective.ratio_mean = tokens > 0 ? s(7) * per_token : 1.0;
  out.objective.ratio_max = tokens > 0 ? extremes[0].item<double>() : 1.0;
  out.objective.ratio_min = tokens > 0 ? -extremes[1].item<double>() : 1.0;
  out.objective.tokens = tokens;
  out.tokens = static_cast<int64_t>(tokens);
  out.grad_norm = grad_norm_sum * per_step;
  out.lr = m.lr;
  return out;
}

std::vector<std::pair<std::string, double>> UpdateMetrics::entries() const {
  std::vector<std::pair<std::string, double>> e = metric_entries(objective, /*with_critic=*/false);
  e.emplace_back("actor/grad_norm", grad_norm);
  e.emplace_back("actor/lr", lr);
  return e;
}

}  // namespace tandem
