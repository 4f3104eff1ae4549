#include "learner/trainer.h"

#include "learner/head_logprobs.h"
#include "learner/learner_device.h"
#include "learner/proximal_weights.h"
#include "learner/trainer_impl.h"
#include "core/trace.h"

#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <cmath>

namespace tandem {

namespace {

Strategy strategy_from_name(const std::string& name) {
  if (name == "ddp") return Strategy::ddp;
  if (name == "zero2") return Strategy::zero2;
  if (name == "fsdp") return Strategy::fsdp;
  throw Error(fmt::format("learner.sharding: unknown strategy \"{}\" (ddp, zero2, fsdp)", name));
}

// FSDP units over the parameters in global order: embeddings, each layer, final norm + head.
std::vector<size_t> fsdp_unit_sizes(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                    int64_t layers) {
  std::vector<size_t> sizes(static_cast<size_t>(layers) + 2, 0);
  for (const auto& [name, p] : parameters) {
    if (name == "model.embed_tokens.weight") {
      ++sizes.front();
    } else if (name.rfind("model.layers.", 0) == 0) {
      ++sizes[std::stoul(name.substr(13)) + 1];
    } else {
      ++sizes.back();
    }
  }
  return sizes;
}

// learner.precision: the dtype of the forward and backward products.
at::ScalarType compute_dtype(const std::string& precision) {
  if (precision == "fp32") return at::kFloat;
  if (precision == "bf16") return at::kBFloat16;
  throw Error(fmt::format("learner.precision: \"{}\" (allowed: fp32, bf16)", precision));
}

// learner.device for this rank, resolved once: the CPU needs no probe (and initialises no
// CUDA runtime); cuda and auto ask what this process has (an Error names what is missing).
at::Device training_device(const TrainerOptions& o) {
  if (o.learner.device == "cpu") return at::Device(at::kCPU);
  const LearnerDevice d = resolve_learner_device(o.learner.device, o.local_rank, learner_cuda_support());
  return d.type == "cuda" ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index)) : at::Device(at::kCPU);
}

}  // namespace

Trainer::Impl::Impl(const ModelConfig& config, const ModelWeights& weights, const TrainerOptions& o, Collectives& c)
    : options(o),
      collectives(c),
      strategy(strategy_from_name(o.learner.sharding)),
      device(training_device(o)),
      model(config, weights, at::kFloat, compute_dtype(o.learner.precision), device),
      objective(actor_objective_params(o.algorithm, o.algorithm.kl.coef)) {
  if (o.algorithm.advantage == "gae") {
    const at::TensorOptions f32 = at::TensorOptions(at::kFloat).device(device);
    value_weight = at::zeros({1, config.hidden_size}, f32).set_requires_grad(true);
    value_bias = at::zeros({1}, f32).set_requires_grad(true);
  }
  const auto parameters = trained_parameters();
  if (strategy == Strategy::fsdp) {
    // The value head sorts into the last unit, with the final norm and LM head it shares an input with.
    fsdp = std::make_unique<FsdpParameters>(parameters, fsdp_unit_sizes(parameters, config.num_hidden_layers), c);
  } else {
    flat = std::make_unique<FlatParameters>(parameters, c.world_size());
  }
  const OptimizerConfig& opt = o.learner.optimizer;
  adam = std::make_unique<AdamW>(local_values().numel(),
                                 AdamWOptions{opt.beta1, opt.beta2, opt.eps, opt.weight_decay}, device);
  if (objective.kl_coef > 0) {
    reference = std::make_unique<PolicyModel>(config, weights, at::kFloat, model.compute_dtype(), device);
  }
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::Impl::trained_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> parameters = model.named_parameters();
  for (auto& p : value_head_parameters()) parameters.push_back(std::move(p));
  return parameters;
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::Impl::value_head_parameters() const {
  if (!critic()) return {};
  return {{"value_head.weight", value_weight}, {"value_head.bias", value_bias}};
}

at::Tensor Trainer::Impl::local_values() {
  if (strategy == Strategy::fsdp) return fsdp->local_values();
  return strategy == Strategy::zero2 ? flat->value_shard(collectives.rank()) : flat->values();
}

at::Tensor Trainer::Impl::local_grads() {
  if (strategy == Strategy::fsdp) return fsdp->local_grads();
  return strategy == Strategy::zero2 ? flat->grad_shard(collectives.rank()) : flat->grads();
}

std::vector<OwnedRange> Trainer::Impl::owned_ranges() const {
  if (strategy == Strategy::fsdp) return fsdp->owned_ranges();
  if (strategy == Strategy::ddp) return {{0, 0, flat->numel()}};
  const int64_t shard = flat->shard_numel(), begin = std::min(flat->numel(), collectives.rank() * shard);
  const int64_t end = std::min(flat->numel(), begin + shard);
  if (end <= begin) return {};
  return {{begin, 0, end - begin}};
}

ModelWeights Trainer::Impl::full_weights(std::vector<WeightTensor>* value_head) {
  if (strategy == Strategy::fsdp) {
    for (size_t u = 0; u < fsdp->units(); ++u) fsdp->gather(u);
  }
  ModelWeights weights = model.to_weights();
  if (value_head) {
    value_head->clear();
    for (const auto& [name, t] : value_head_parameters()) {
      at::Tensor c = t.detach().to(at::kCPU).contiguous();
      value_head->push_back({name, c.sizes().vec(), std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel())});
    }
  }
  if (strategy == Strategy::fsdp) {
    for (size_t u = 0; u < fsdp->units(); ++u) fsdp->release(u);
  }
  return weights;
}

std::pair<at::Tensor, at::Tensor> Trainer::Impl::response_logprobs(const PolicyModel& policy, const at::Tensor& normed,
                                                                   const MicroBatch& batch, double temperature) const {
  const int64_t rows = normed.size(0), length = normed.size(1), responses = batch.mask.size(1);
  // Response token t of row b sits at position p = response_position[b, t] and is
  // predicted by the hidden state at p - 1. Cells past a row's response are left out.
  const at::Tensor row_start = (at::arange(rows, batch.mask.options().dtype(at::kLong)) * length).unsqueeze(1);
  const at::Tensor cells = batch.mask.flatten().nonzero().squeeze(1);
  const at::Tensor position = (row_start + batch.response_position).flatten().index_select(0, cells);
  const at::Tensor hidden = normed.reshape({rows * length, normed.size(2)}).index_select(0, position - 1);
  const at::Tensor targets = batch.layout.input_ids.flatten().index_select(0, position);
  HeadLogProbs head = head_logprobs(hidden, policy.head_weight(), targets, temperature, {}, policy.compute_dtype());
  const at::Tensor zeros = at::zeros({rows * responses}, head.logprobs.options());
  return {zeros.index_copy(0, cells, head.logprobs).view({rows, responses}),
          zeros.index_copy(0, cells, head.entropy).view({rows, responses})};
}

ActorObjectiveInputs Trainer::Impl::objective_inputs(const at::Tensor& normed, const MicroBatch& batch) const {
  auto [logprobs, entropy] = response_logprobs(model, normed, batch, options.temperature);
  ActorObjectiveInputs in{logprobs, batch.old_logprobs, batch.advantages, batch.mask, batch.ref_logprobs, entropy,
                          batch.is_weights};
  if (reference && !in.ref_logprobs.defined()) {
    c10::InferenceMode guard;
    const at::Tensor reference_normed = reference->final_norm(reference->trunk(batch.layout));
    in.ref_logprobs = response_logprobs(*reference, reference_normed, batch, options.temperature).first;
  }
  return in;
}

at::Tensor Trainer::Impl::response_state_values(const at::Tensor& normed, const MicroBatch& batch) const {
  at::Tensor v = at::linear(normed, value_weight, value_bias).squeeze(-1);  // [B, L]: V after reading position p
  at::Tensor before = at::cat({at::zeros({v.size(0), 1}, v.options()), v.narrow(1, 0, v.size(1) - 1)}, 1);
  return response_values(before, batch);
}

ObjectiveResult Trainer::Impl::supervised_objective(const at::Tensor& normed, const MicroBatch& batch,
                                                    const AggregationScale& scale) const {
  const at::Tensor logprobs = response_logprobs(model, normed, batch, 1.0).first;
  ObjectiveResult result;
  result.loss = -(logprobs * batch.mask).sum() / std::max(1.0, scale.tokens);
  result.metrics.loss = result.loss.item<double>();
  result.metrics.tokens = batch.mask.sum().item<double>();
  return result;
}

ObjectiveResult Trainer::Impl::objective_from_trunk(const at::Tensor& trunk, const MicroBatch& batch,
                                                    const AggregationScale& scale) {
  const at::Tensor normed = model.final_norm(trunk);
  if (supervised) return supervised_objective(normed, batch, scale);
  ActorObjectiveInputs in = objective_inputs(normed, batch);
  ProximalWeights proximal;
  if (batch.stale.defined()) {
    TANDEM_CHECK(options.learner.epochs == 1 && options.learner.mini_batches == 1,
                 "stale samples get their proximal log-probs in the training forward only when the update is one "
                 "optimizer step (learner.epochs {}, learner.mini_batches {}): send is_weights instead",
                 options.learner.epochs, options.learner.mini_batches);
    proximal = use_forward_as_proximal(in, batch.stale, options.algorithm.async.is_cap);
  }
  ObjectiveResult result = actor_objective(in, objective, scale);
  result.metrics.is_weight_sum = proximal.weight_sum;
  result.metrics.is_clipped = proximal.clipped;
  result.metrics.is_tokens = proximal.tokens;
  if (!critic()) return result;
  TANDEM_CHECK(batch.returns.defined(),
               "advantage gae: every training sample needs old_values and returns (from Trainer::values and the "
               "gae estimator)");
  const AlgorithmConfig& a = options.algorithm;
  ObjectiveResult value = critic_objective(response_state_values(normed, batch), batch.old_values, batch.returns,
                                           batch.mask, a.value.clip, objective.aggregation, scale);
  result.loss = result.loss + a.value.coef * value.loss;
  result.metrics.loss += a.value.coef * value.metrics.value_loss;
  result.metrics.value_loss = value.metrics.value_loss;
  result.metrics.explained_variance = value.metrics.explained_variance;
  return result;
}

AggregationScale Trainer::Impl::global_scale(const std::vector<TrainingSample>& share) {
  double tokens = 0, sequences = 0;
  for (const TrainingSample& s : share) {
    tokens += static_cast<double>(s.response.size());
    sequences += s.response.empty() ? 0 : 1;
  }
  at::Tensor counts = device_doubles({tokens, sequences, static_cast<double>(share.size())});
  collectives.all_reduce_sum(counts);
  const std::vector<double> total = host_doubles(counts);
  AggregationScale scale;
  scale.tokens = total[0];
  scale.sequences = total[1];
  scale.rows = total[2];
  scale.max_response_length = static_cast<double>(options.max_response_length);
  return scale;
}

ObjectiveMetrics Trainer::Impl::micro_batch(const MicroBatch& batch, const AggregationScale& scale) {
  trace::Span span("micro_batch", "train");
  span.set_count(batch.layout.input_ids.numel());  // tokens, padding included
  if (strategy == Strategy::fsdp) return fsdp_micro_batch(batch, scale);
  ObjectiveResult result = objective_from_trunk(model.trunk(batch.layout), batch, scale);
  result.loss.backward();  // accumulates into the flat gradient buffer
  return result.metrics;
}

int64_t Trainer::Impl::micro_batches_to_run(int64_t local_count) {
  if (strategy != Strategy::fsdp) return local_count;
  // FSDP gathers and reduce-scatters inside every micro-batch: all ranks must run as many.
  at::Tensor count = device_doubles({static_cast<double>(local_count)});
  collectives.all_reduce_max(count);
  return static_cast<int64_t>(host_doubles(count)[0]);
}

MicroBatch Trainer::Impl::idle_micro_batch() const {
  TrainingSample nothing;
  nothing.prompt = {0};  // one token, no response: every loss term is masked out
  return micro_batch_of({nothing}, 0, 1);
}

MicroBatch Trainer::Impl::micro_batch_of(const std::vector<TrainingSample>& samples, size_t begin, size_t end) const {
  return make_micro_batch(samples, begin, end, device);
}

at::Tensor Trainer::Impl::device_doubles(const std::vector<double>& values) const {
  return at::tensor(values, at::TensorOptions(at::kDouble).device(device));
}

std::vector<double> Trainer::Impl::host_doubles(const at::Tensor& values) {
  const at::Tensor host = values.to(at::kCPU, at::kDouble).contiguous();
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

void Trainer::Impl::zero_gradients() {
  if (flat) flat->zero_grads();
  if (fsdp) fsdp->local_grads().zero_();
}

double Trainer::Impl::synchronise_and_step(AdamW& optimizer, double learning_rate) {
  trace::Span span("optimizer_step", "train");
  at::Tensor grads = local_grads();
  switch (strategy) {
    case Strategy::ddp: collectives.all_reduce_sum(flat->grads()); break;
    case Strategy::zero2: collectives.reduce_scatter_sum(flat->grads(), grads); break;
    case Strategy::fsdp: break;  // reduce-scattered layer by layer during backward
  }
  at::Tensor norm_sq = grads.to(at::kDouble).pow(2).sum().reshape({1});
  if (strategy != Strategy::ddp) collectives.all_reduce_sum(norm_sq);  // each rank holds shards
  const double norm = std::sqrt(host_doubles(norm_sq)[0]);
  const OptimizerConfig& opt = options.learner.optimizer;
  if (opt.grad_clip > 0 && norm > opt.grad_clip) grads.mul_(opt.grad_clip / (norm + 1e-6));
  at::Tensor params = local_values();
  {
    c10::NoGradGuard no_grad;
    if (opt.name == "adamw") {
      optimizer.step(params, grads, learning_rate);
    } else {  // sgd
      if (opt.weight_decay != 0) params.mul_(1.0 - learning_rate * opt.weight_decay);
      params.add_(grads, -learning_rate);
    }
    if (strategy == Strategy::zero2) collectives.all_gather(params.clone(), flat->values());
  }
  return norm;
}

void Trainer::Impl::adopt_policy_as_reference() {
  if (!reference) return;  // no KL in the loss
  const ModelWeights weights = full_weights();
  reference = std::make_unique<PolicyModel>(model.config(), weights, at::kFloat, model.compute_dtype(), device);
  reference_from_warmup = true;
}

Trainer::Trainer(const ModelConfig& config, const ModelWeights& weights, const TrainerOptions& options,
                 Collectives& collectives)
    : impl_(std::make_unique<Impl>(config, weights, options, collectives)) {}

Trainer::~Trainer() = default;

int64_t Trainer::optimizer_steps() const { return impl_->steps; }

ModelWeights Trainer::weights() const { return impl_->full_weights(); }

void Trainer::with_weight_tensors(
    const std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>& use) const {
  Impl& m = *impl_;
  if (m.strategy == Strategy::fsdp) {
    for (size_t u = 0; u < m.fsdp->units(); ++u) m.fsdp->gather(u);
  }
  // Released again however `use` ends: a failed publish must not leave every unit gathered.
  struct Release {
    Impl& m;
    ~Release() {
      if (m.strategy == Strategy::fsdp) {
        for (size_t u = 0; u < m.fsdp->units(); ++u) m.fsdp->release(u);
      }
    }
  } release{m};
  use(m.model.weight_tensors());
}

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
  m.collectives.all_reduce_sum(sums);
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
      for (int64_t i = 0; i < m.micro_batches_to_run(count); ++i) {
        const size_t begin = static_cast<size_t>(i) * micro;
        if (begin < share.size()) {
          accumulate(total, m.micro_batch(m.micro_batch_of(share, begin, std::min(share.size(), begin + micro)), scale));
        } else {
          m.micro_batch(m.idle_micro_batch(), scale);  // keeps the per-layer collectives in step
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
  m.collectives.all_reduce_sum(sums);
  m.collectives.all_reduce_max(extremes);
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

std::vector<std::pair<std::string, double>> UpdateMetrics::entries() const {
  std::vector<std::pair<std::string, double>> e = metric_entries(objective, with_critic);
  e.emplace_back("actor/grad_norm", grad_norm);
  e.emplace_back("actor/lr", lr);
  return e;
}

}  // namespace tandem
