#include "learner/trainer.h"

#include "actor/policy_torch.h"
#include "core/error.h"
#include "learner/adamw.h"
#include "learner/collectives.h"
#include "learner/flat_parameters.h"
#include "learner/objective.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>

namespace tandem {

struct Trainer::Impl {
  Impl(const ModelConfig& config, const ModelWeights& weights, const TrainerOptions& o, Collectives& c)
      : options(o),
        collectives(c),
        model(config, weights, at::kFloat),
        flat(model.named_parameters(), c.world_size()),
        zero2(o.learner.sharding == "zero2"),
        adam(zero2 ? flat.shard_numel() : flat.values().numel(),
             {o.learner.optimizer.beta1, o.learner.optimizer.beta2, o.learner.optimizer.eps,
              o.learner.optimizer.weight_decay}),
        objective(actor_objective_params(o.algorithm, o.algorithm.kl.coef)) {
    const std::string& sharding = o.learner.sharding;
    if (sharding != "ddp" && sharding != "zero2") {
      throw Error(fmt::format("learner.sharding: \"{}\" is not implemented yet (ddp and zero2 are)", sharding));
    }
    if (o.learner.device != "cpu") {
      throw Error(fmt::format("learner.device: \"{}\" training is not implemented yet (cpu is)", o.learner.device));
    }
    if (objective.kl_coef > 0) reference = std::make_unique<PolicyModel>(config, weights, at::kFloat);
  }

  // Log-probs and entropies of the micro-batch's response tokens under the policy.
  std::pair<at::Tensor, at::Tensor> policy_logprobs(const PolicyModel& policy, const MicroBatch& batch) {
    TokenLogProbs lp = token_logprobs(policy.forward(batch.layout), batch.layout, options.temperature);
    return {response_values(lp.logprobs, batch), response_values(lp.entropy, batch)};
  }

  AggregationScale global_scale(const std::vector<TrainingSample>& share) {
    double tokens = 0, sequences = 0;
    for (const TrainingSample& s : share) {
      tokens += static_cast<double>(s.response.size());
      sequences += s.response.empty() ? 0 : 1;
    }
    at::Tensor counts = at::tensor({tokens, sequences, static_cast<double>(share.size())}, at::kDouble);
    collectives.all_reduce_sum(counts);
    AggregationScale scale;
    scale.tokens = counts[0].item<double>();
    scale.sequences = counts[1].item<double>();
    scale.rows = counts[2].item<double>();
    scale.max_response_length = static_cast<double>(options.max_response_length);
    return scale;
  }

  // Gradients summed over ranks, clipped by their global norm, then one optimizer step.
  double synchronise_and_step() {
    const int rank = collectives.rank();
    at::Tensor grads = zero2 ? flat.grad_shard(rank) : flat.grads();
    if (zero2) {
      collectives.reduce_scatter_sum(flat.grads(), grads);
    } else {
      collectives.all_reduce_sum(flat.grads());
    }
    at::Tensor norm_sq = grads.to(at::kDouble).pow(2).sum().reshape({1});
    if (zero2) collectives.all_reduce_sum(norm_sq);  // each rank holds one shard
    const double norm = std::sqrt(norm_sq.item<double>());
    const OptimizerConfig& opt = options.learner.optimizer;
    if (opt.grad_clip > 0 && norm > opt.grad_clip) grads.mul_(opt.grad_clip / (norm + 1e-6));
    lr = scheduled_learning_rate(opt.lr, opt.schedule, opt.warmup_steps, steps, options.total_optimizer_steps);
    at::Tensor params = zero2 ? flat.value_shard(rank) : flat.values();
    {
      at::NoGradGuard no_grad;
      if (opt.name == "adamw") {
        adam.step(params, grads, lr);
      } else {  // sgd
        if (opt.weight_decay != 0) params.mul_(1.0 - lr * opt.weight_decay);
        params.add_(grads, -lr);
      }
      if (zero2) collectives.all_gather(params.clone(), flat.values());
    }
    ++steps;
    return norm;
  }

  TrainerOptions options;
  Collectives& collectives;
  PolicyModel model;
  std::unique_ptr<PolicyModel> reference;  // frozen initial policy, when the KL is in the loss
  FlatParameters flat;
  bool zero2;
  AdamW adam;
  ActorObjectiveParams objective;
  int64_t steps = 0;
  double lr = 0;
};

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
