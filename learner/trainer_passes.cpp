// Trainer's passes over a share of samples (learner/trainer.h): the RL update (train:
// epochs of mini-batches, one optimizer step each) and the supervised warm-up step, then
// the ranks' reports combined; and the no-grad reads of every response token (values,
// response_logprobs). Every pass cuts the share into micro-batches, and under FSDP every
// rank runs as many (idle ones where its share ran out) to keep the per-layer collectives
// in step.
#include "learner/trainer.h"

#include "learner/adamw.h"
#include "learner/objective_metrics.h"
#include "learner/trainer_impl.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace tandem {

UpdateMetrics Trainer::supervised_step(const std::vector<TrainingSample>& share, double lr) {
  Impl& m = *impl_;
  if (!m.supervised_adam) {
    const OptimizerConfig& opt = m.options.learner.optimizer;
    m.supervised_adam = std::make_unique<AdamW>(m.local_values().numel(),
                                                AdamWOptions{opt.beta1, opt.beta2, opt.eps, opt.weight_decay}, m.device);
  }
  const size_t micro = static_cast<size_t>(m.options.learner.micro_batch_size);
  const AggregationScale scale = m.global_scale(share);
  m.supervised = true;
  double loss = 0, tokens = 0;
  try {
    m.zero_gradients();
    const KeepCastWeights keep_casts(&m.model, m.strategy != Strategy::fsdp);  // until the optimizer step
    const int64_t count = static_cast<int64_t>((share.size() + micro - 1) / micro);
    for (int64_t i = 0; i < m.micro_batches_to_run(count); ++i) {
      const size_t begin = static_cast<size_t>(i) * micro;
      const bool idle = begin >= share.size();
      const ObjectiveMetrics metrics = m.micro_batch(
          idle ? m.idle_micro_batch() : m.micro_batch_of(share, begin, std::min(share.size(), begin + micro)), scale);
      if (idle) continue;
      loss += metrics.loss;
      tokens += metrics.tokens;
    }
  } catch (...) {
    m.supervised = false;
    throw;
  }
  m.supervised = false;
  UpdateMetrics out;
  out.grad_norm = m.synchronise_and_step(*m.supervised_adam, lr);
  at::Tensor sums = m.device_doubles({loss, tokens});
  m.data().all_reduce_sum(sums);
  const std::vector<double> summed = Impl::host_doubles(sums);
  out.objective.loss = summed[0];
  out.objective.tokens = summed[1];
  out.tokens = static_cast<int64_t>(out.objective.tokens);
  out.optimizer_steps = 1;
  out.lr = lr;
  return out;
}

UpdateMetrics Trainer::train(const std::vector<std::vector<TrainingSample>>& mini_batches) {
  Impl& m = *impl_;
  if (m.supervised_adam) {  // the warm-up is over
    m.supervised_adam.reset();
    m.adopt_policy_as_reference();
  }
  const size_t micro = static_cast<size_t>(m.options.learner.micro_batch_size);
  if (m.tensor_ops) m.tensor_ops->tally() = {};  // tensor_parallel_collectives(): this update's
  ObjectiveMetrics total;
  total.ratio_min = INFINITY;
  total.ratio_max = -INFINITY;
  double grad_norm_sum = 0;
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < m.options.learner.epochs; ++epoch) {
    for (const std::vector<TrainingSample>& share : mini_batches) {
      const AggregationScale scale = m.global_scale(share);
      m.zero_gradients();
      const int64_t count = static_cast<int64_t>((share.size() + micro - 1) / micro);
      {
        const KeepCastWeights keep_casts(&m.model, m.strategy != Strategy::fsdp);  // until the optimizer step
        for (int64_t i = 0; i < m.micro_batches_to_run(count); ++i) {
          m.micro_index = i;
          const size_t begin = static_cast<size_t>(i) * micro;
          if (begin < share.size()) {
            accumulate(total, m.micro_batch(m.micro_batch_of(share, begin, std::min(share.size(), begin + micro)), scale));
          } else {
            m.micro_batch(m.idle_micro_batch(), scale);  // keeps the per-layer collectives in step
          }
        }
      }
      const OptimizerConfig& opt = m.options.learner.optimizer;
      m.lr = scheduled_learning_rate(opt.lr, opt.schedule, opt.warmup_steps, m.steps, m.options.total_optimizer_steps);
      grad_norm_sum += m.synchronise_and_step(*m.adam, m.lr);
      ++m.steps;
      ++steps;
    }
  }

  // Combine the ranks' reports: shares and token-weighted sums add; extremes take the max.
  const double t = total.tokens;
  at::Tensor sums = m.device_doubles({total.loss, total.pg_loss, total.value_loss, total.kl * t, total.entropy * t,
                                      total.clipfrac * t, total.approx_kl * t, total.ratio_mean * t, t,
                                      total.explained_variance * t, total.is_weight_sum, total.is_clipped,
                                      total.is_tokens});
  at::Tensor extremes = m.device_doubles({total.ratio_max, -total.ratio_min});
  m.data().all_reduce_sum(sums);  // tensor-parallel ranks report the same numbers: counted once
  m.data().all_reduce_max(extremes);
  const std::vector<double> summed = Impl::host_doubles(sums), largest = Impl::host_doubles(extremes);
  auto s = [&](int i) { return summed[static_cast<size_t>(i)]; };
  const double tokens = s(8), per_token = tokens > 0 ? 1.0 / tokens : 0.0;
  const double per_step = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  UpdateMetrics out;
  out.optimizer_steps = steps;
  out.objective.loss = s(0) * per_step;
  out.objective.pg_loss = s(1) * per_step;
  out.objective.value_loss = s(2) * per_step;
  out.objective.kl = s(3) * per_token;
  out.objective.entropy = s(4) * per_token;
  out.objective.clipfrac = s(5) * per_token;
  out.objective.approx_kl = s(6) * per_token;
  out.objective.ratio_mean = tokens > 0 ? s(7) * per_token : 1.0;
  out.objective.ratio_max = tokens > 0 ? largest[0] : 1.0;
  out.objective.ratio_min = tokens > 0 ? -largest[1] : 1.0;
  out.objective.explained_variance = s(9) * per_token;
  out.objective.tokens = tokens;
  // Summed over epochs too: exact only for one (the only case stale samples are sent in).
  out.objective.is_weight_sum = s(10);
  out.objective.is_clipped = s(11);
  out.objective.is_tokens = s(12);
  out.with_critic = m.critic();
  out.tokens = static_cast<int64_t>(tokens);
  out.grad_norm = grad_norm_sum * per_step;
  out.lr = m.lr;
  if (m.tensor_ops) out.tensor_parallel = m.tensor_ops->tally();
  return out;
}

std::vector<std::vector<float>> Trainer::Impl::per_response_token(
    const std::vector<TrainingSample>& samples,
    const std::function<at::Tensor(const at::Tensor& trunk, const MicroBatch& batch)>& read) {
  // Only tokens matter here: the per-token fields a micro-batch wants are zero-filled.
  std::vector<TrainingSample> probes;
  for (const TrainingSample& s : samples) {
    TrainingSample p;
    p.prompt = s.prompt;
    p.response = s.response;
    p.old_logprobs.assign(s.response.size(), 0.0f);
    p.advantages.assign(s.response.size(), 0.0f);
    probes.push_back(std::move(p));
  }
  std::vector<std::vector<float>> out;
  const size_t micro = static_cast<size_t>(options.learner.micro_batch_size);
  const int64_t count = static_cast<int64_t>((probes.size() + micro - 1) / micro);
  c10::NoGradGuard no_grad;
  const KeepCastWeights keep_casts(&model, strategy != Strategy::fsdp);
  for (int64_t i = 0; i < micro_batches_to_run(count); ++i) {
    const size_t begin = static_cast<size_t>(i) * micro;
    const MicroBatch batch = begin < probes.size()
                                 ? micro_batch_of(probes, begin, std::min(probes.size(), begin + micro))
                                 : idle_micro_batch();  // fsdp: every rank gathers as often
    at::Tensor values;  // [rows, T]
    if (strategy == Strategy::fsdp) {
      const size_t head_unit = fsdp->units() - 1;
      fsdp->gather(0);
      fsdp->gather(head_unit);
      at::Tensor trunk = fsdp_trunk(batch.layout, model.layer_context(batch.layout, at::kFloat), nullptr);
      values = read(trunk, batch).to(at::kCPU).contiguous();
      fsdp->release(0);
      fsdp->release(head_unit);
    } else {
      values = read(model.trunk(batch.layout), batch).to(at::kCPU).contiguous();
    }
    if (begin >= probes.size()) continue;
    for (int64_t r = 0; r < values.size(0); ++r) {
      const size_t n = probes[begin + static_cast<size_t>(r)].response.size();
      const float* row = values[r].data_ptr<float>();
      out.emplace_back(row, row + n);
    }
  }
  return out;
}

std::vector<std::vector<float>> Trainer::values(const std::vector<TrainingSample>& samples) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.critic(), "Trainer::values: no critic (it exists with algorithm.advantage: gae)");
  return m.per_response_token(samples, [&m](const at::Tensor& trunk, const MicroBatch& batch) {
    return m.response_state_values(m.model.final_norm(trunk), batch);
  });
}

std::vector<std::vector<float>> Trainer::response_logprobs(const std::vector<TrainingSample>& samples, bool float32) {
  Impl& m = *impl_;
  // The training precision comes back however this returns.
  struct RestorePrecision {
    PolicyModel& model;
    const at::ScalarType precision;
    ~RestorePrecision() { model.set_compute_dtype(precision); }
  } restore{m.model, m.model.compute_dtype()};
  if (float32) m.model.set_compute_dtype(at::kFloat);
  return m.per_response_token(samples, [&m](const at::Tensor& trunk, const MicroBatch& batch) {
    return m.response_logprobs(m.model, m.model.final_norm(trunk), batch, m.options.temperature).first;
  });
}

std::vector<std::vector<float>> Trainer::reference_logprobs(const std::vector<TrainingSample>& samples) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.has_reference(),
               "reference log-probs: this learner holds no reference policy (algorithm.kl.coef is 0)");
  // The reference is whole on every rank (fsdp shards only the policy): no collective,
  // except tensor parallelism's inside its forward (split like the policy).
  std::vector<std::vector<float>> out;
  const size_t micro = static_cast<size_t>(m.options.learner.micro_batch_size);
  c10::InferenceMode guard;
  // The reference is whole and frozen, the policy (LoRA's base) unchanged in this pass.
  const KeepCastWeights keep_casts(m.reference ? m.reference.get() : &m.model,
                                   m.reference || m.strategy != Strategy::fsdp);
  for (size_t begin = 0; begin < samples.size(); begin += micro) {
    std::vector<TrainingSample> probes;
    for (size_t i = begin; i < std::min(samples.size(), begin + micro); ++i) {
      TrainingSample p;
      p.prompt = samples[i].prompt;
      p.response = samples[i].response;
      p.old_logprobs.assign(p.response.size(), 0.0f);
      p.advantages.assign(p.response.size(), 0.0f);
      probes.push_back(std::move(p));
    }
    const MicroBatch batch = m.micro_batch_of(probes, 0, probes.size());
    const at::Tensor logprobs = m.reference_response_logprobs(batch).to(at::kCPU, at::kFloat).contiguous();
    for (size_t i = 0; i < probes.size(); ++i) {
      const float* row = logprobs.data_ptr<float>() + static_cast<int64_t>(i) * logprobs.size(1);
      out.emplace_back(row, row + probes[i].response.size());
    }
  }
  return out;
}

}  // namespace tandem
