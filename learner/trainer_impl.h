// Private to learner/: the state behind Trainer, shared by trainer.cpp (training) and
// trainer_checkpoint.cpp (save and load).
#pragma once

#include "actor/policy_torch.h"
#include "core/error.h"
#include "learner/adamw.h"
#include "learner/collectives.h"
#include "learner/flat_parameters.h"
#include "learner/objective.h"
#include "learner/trainer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <utility>

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

}  // namespace tandem
