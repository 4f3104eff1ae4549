// Trainer's state (learner/trainer_impl.h): the sharding strategy and where the parameters
// live (flat buffer or FSDP units), the objective of one micro-batch from the last layer's
// output, and the optimizer step with its collectives. Its passes over samples (train,
// supervised_step, values, response_logprobs) are in trainer_passes.cpp, the FSDP
// micro-batch in trainer_fsdp.cpp, checkpoints in trainer_checkpoint.cpp.
#include "learner/trainer.h"

#include "actor/aten_parallel.h"
#include "actor/fused_layer_ops.h"
#include "actor/lora.h"
#include "learner/head_logprobs.h"
#include "learner/learner_device.h"
#include "learner/proximal_weights.h"
#include "learner/trainer_impl.h"
#include "core/trace.h"

#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/accumulate.h>

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <mutex>

namespace tandem {

namespace {

// Σ x² in float64 over float32 CPU gradients, without the float64 copy and its square that
// t.to(kDouble).pow(2) makes (2 x 384 MB for 48M parameters; aten::pow was 7% of a Qwen3-
// shape step). Fixed chunks, summed in order: the same result at any thread count.
double square_sum(const at::Tensor& t) {
  if (!t.device().is_cpu() || t.scalar_type() != at::kFloat || !t.is_contiguous()) {
    return t.to(at::kDouble).pow(2).sum().item<double>();
  }
  const int64_t n = t.numel(), chunk = 1 << 16, chunks = (n + chunk - 1) / chunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  const float* x = t.data_ptr<float>();
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t from = c * chunk;
      partial[static_cast<size_t>(c)] = float64_dot(x + from, x + from, std::min(n, from + chunk) - from);
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

// libtorch's CPU tensors come from malloc, and a training step frees and allocates the same
// few hundred activation buffers each micro-batch. By default glibc gives large freed blocks
// back to the kernel (munmap, or trimming the heap's top), so the next step's first write
// to each page faults and zeroes it: ~12k page faults a step on the small preset (perf stat),
// gone with these settings. Blocks up to 32 MB (glibc's largest mmap threshold) come from
// the heap and stay there for reuse; the process keeps its peak, as a caching allocator would.
void keep_freed_memory_for_reuse() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  });
}

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

// SplitMix64's finaliser over the three numbers: well-spread seeds from small counters.
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// learner.tensor_parallel T: the group of the T ranks that split one model (rank g is
// tensor-parallel rank g % T of replica g / T), and the group of the ranks holding the
// same shards in every replica. Every rank makes its tensor group first, then its data
// group: each group's members all meet it before their second.
std::unique_ptr<Collectives> tensor_group_of(Collectives& world, int64_t t) {
  if (t <= 1) return nullptr;
  TANDEM_CHECK(world.world_size() % t == 0, "learner.tensor_parallel {} does not divide the {} learner ranks", t,
               world.world_size());
  const int replica = world.rank() / static_cast<int>(t);
  std::vector<int> ranks;
  for (int i = 0; i < t; ++i) ranks.push_back(replica * static_cast<int>(t) + i);
  return world.subgroup(fmt::format("tensor-{}", replica), ranks);
}

std::unique_ptr<Collectives> data_group_of(Collectives& world, int64_t t) {
  if (t <= 1) return nullptr;
  const int slot = world.rank() % static_cast<int>(t);
  std::vector<int> ranks;
  for (int r = slot; r < world.world_size(); r += static_cast<int>(t)) ranks.push_back(r);
  return world.subgroup(fmt::format("data-{}", slot), ranks);
}

}  // namespace

Trainer::Impl::Impl(const ModelConfig& config, const ModelWeights& weights, const TrainerOptions& o, Collectives& c)
    : options(o),
      collectives(c),
      tensor_group(tensor_group_of(c, o.learner.tensor_parallel)),
      data_group(data_group_of(c, o.learner.tensor_parallel)),
      tensor_ops(tensor_group ? std::make_shared<GroupTensorParallelOps>(*tensor_group, o.learner.sequence_parallel)
                              : nullptr),
      strategy(strategy_from_name(o.learner.sharding)),
      device(training_device(o)),
      model(config, weights, at::kFloat, compute_dtype(o.learner.precision), device, tensor_ops),
      objective(actor_objective_params(o.algorithm, o.algorithm.kl.coef)) {
  if (device.is_cpu()) keep_freed_memory_for_reuse();
  if (o.learner.lora.enabled()) {
    const LoraConfig& l = o.learner.lora;
    TANDEM_CHECK(l.dropout == 0 || strategy != Strategy::fsdp,
                 "learner.lora.dropout {} with learner.sharding fsdp: fsdp recomputes each layer for its backward, "
                 "with other dropout masks (use ddp or zero2, or dropout 0)",
                 l.dropout);
    model.add_adapters({l.rank, l.alpha, lora_modules(l.target_modules), l.dropout, o.seed, l.base_dtype == "bf16"});
  }

  // The critic's value head, or the reward model's score head: the same [1, hidden] + [1]
  // (the reward model's bias never moves: the Bradley-Terry loss sees score differences).
  if (o.algorithm.advantage == "gae" || o.reward_model) {
    const at::TensorOptions f32 = at::TensorOptions(at::kFloat).device(device);
    value_weight = at::zeros({1, config.hidden_size}, f32).set_requires_grad(true);
    value_bias = at::zeros({1}, f32).set_requires_grad(true);
  }
  const auto parameters = trained_parameters();
  trained_shards = model.has_adapters() ? model.adapter_shards() : model.shards();
  for (const auto& [name, p] : value_head_parameters()) {
    ParameterShard replicated;  // read from the whole final-normed states on every rank: the same gradient everywhere
    replicated.name = name;
    replicated.canonical_shape = replicated.local_shape = p.sizes().vec();
    replicated.length = p.size(0);
    trained_shards.push_back(std::move(replicated));
  }
  int64_t offset = 0;
  for (const auto& [name, p] : parameters) {
    flat_offsets.push_back(offset);
    offset += p.numel();
  }
  if (strategy == Strategy::fsdp) {
    // The value head sorts into the last unit, with the final norm and LM head it shares an input with.
    const std::vector<size_t> sizes = fsdp_unit_sizes(parameters, config.num_hidden_layers);
    size_t first = 0;
    for (size_t size : sizes) {
      unit_first_parameter.push_back(first);
      first += size;
    }
    unit_first_parameter.push_back(first);
    fsdp = std::make_unique<FsdpParameters>(parameters, sizes, data());
  } else {
    flat = std::make_unique<FlatParameters>(parameters, data().world_size());
  }
  const OptimizerConfig& opt = o.learner.optimizer;
  adam = std::make_unique<AdamW>(local_values().numel(),
                                 AdamWOptions{opt.beta1, opt.beta2, opt.eps, opt.weight_decay}, device);
  if (o.algorithm.kl.coef > 0 && !model.has_adapters()) {  // in the loss, or in the reward (reference_logprobs)
    reference = std::make_unique<PolicyModel>(config, weights, at::kFloat, model.compute_dtype(), device, tensor_ops);
  }
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::Impl::trained_parameters() const {
  // With LoRA only the adapters train: the base model is frozen.
  std::vector<std::pair<std::string, at::Tensor>> parameters =
      model.has_adapters() ? model.adapter_parameters() : model.named_parameters();
  for (auto& p : value_head_parameters()) parameters.push_back(std::move(p));
  return parameters;
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::Impl::value_head_parameters() const {
  if (!critic()) return {};
  return {{"value_head.weight", value_weight}, {"value_head.bias", value_bias}};
}

at::Tensor Trainer::Impl::local_values() {
  if (strategy == Strategy::fsdp) return fsdp->local_values();
  return strategy == Strategy::zero2 ? flat->value_shard(data().rank()) : flat->values();
}

at::Tensor Trainer::Impl::local_grads() {
  if (strategy == Strategy::fsdp) return fsdp->local_grads();
  return strategy == Strategy::zero2 ? flat->grad_shard(data().rank()) : flat->grads();
}

std::vector<OwnedRange> Trainer::Impl::local_ranges() const {
  if (strategy == Strategy::fsdp) return fsdp->owned_ranges();
  if (strategy == Strategy::ddp) return {{0, 0, flat->numel()}};
  const int64_t shard = flat->shard_numel(), begin = std::min(flat->numel(), data().rank() * shard);
  const int64_t end = std::min(flat->numel(), begin + shard);
  if (end <= begin) return {};
  return {{begin, 0, end - begin}};
}

std::vector<OwnedRange> Trainer::Impl::owned_ranges() const {
  return tensor_ops ? canonical_ranges(local_ranges()) : local_ranges();
}

std::vector<OwnedRange> Trainer::Impl::canonical_ranges(const std::vector<OwnedRange>& local) const {
  std::vector<OwnedRange> out;
  // One contiguous piece of a parameter: flat elements [at, at + n) of this rank's layout
  // are canonical flat elements [canonical, canonical + n); each overlap with a local
  // range keeps that range's offset into the rank's state.
  auto piece = [&](int64_t at, int64_t canonical, int64_t n) {
    for (const OwnedRange& r : local) {
      const int64_t from = std::max(at, r.global_offset), to = std::min(at + n, r.global_offset + r.numel);
      if (from < to) out.push_back({canonical + (from - at), r.local_offset + (from - r.global_offset), to - from});
    }
  };
  int64_t canonical = 0;  // where this parameter starts in the canonical flat layout
  for (size_t i = 0; i < trained_shards.size(); ++i) {
    const ParameterShard& s = trained_shards[i];
    const int64_t at = flat_offsets[i];
    if (s.dim < 0) {
      piece(at, canonical, c10::multiply_integers(s.canonical_shape));
    } else if (s.dim == 0) {  // whole rows: one piece (padding rows after it map nowhere)
      const int64_t row = c10::multiply_integers(s.canonical_shape) / s.canonical_shape[0];
      piece(at, canonical + s.begin * row, s.length * row);
    } else {  // a block of columns: one piece per row
      const int64_t rows = s.canonical_shape[0], columns = s.canonical_shape[1];
      for (int64_t r = 0; r < rows; ++r) piece(at + r * s.length, canonical + r * columns + s.begin, s.length);
    }
    canonical += c10::multiply_integers(s.canonical_shape);
  }
  return out;
}

at::Tensor Trainer::Impl::head_reads(const at::Tensor& normed) const {
  if (!tensor_ops) return normed;
  return tensor_ops->scale_gradient(model.head_input(normed), 1.0 / tensor_ops->spec().size);
}

void Trainer::Impl::sum_partial_gradients(size_t first, size_t end) {
  const std::vector<ParameterShard>& shards = trained_shards;
  const std::vector<std::pair<std::string, at::Tensor>> parameters = trained_parameters();
  // Each partial gradient goes to its place in a canonical-sized block, so that ranks
  // sharing a replicated KV head add into the same rows and nobody else's.
  std::vector<size_t> partial;
  int64_t total = 0;
  for (size_t i = first; i < end; ++i) {
    if (!shards[i].partial_gradient) continue;
    partial.push_back(i);
    total += c10::multiply_integers(shards[i].canonical_shape);
  }
  if (partial.empty()) return;
  auto place = [&](const at::Tensor& block, size_t i) {
    const ParameterShard& s = shards[i];
    const at::Tensor canonical = block.view(s.canonical_shape);
    return s.dim < 0 ? canonical : canonical.narrow(s.dim, s.begin, s.length);
  };
  auto grad_of = [&](size_t i) {
    at::Tensor g = parameters[i].second.grad();
    TANDEM_CHECK(g.defined(), "tensor parallelism: {} has no gradient to sum", parameters[i].first);
    return g;
  };
  at::Tensor buffer = at::zeros({total}, parameters[partial.front()].second.options().requires_grad(false));
  int64_t offset = 0;
  for (size_t i : partial) {
    const int64_t n = c10::multiply_integers(shards[i].canonical_shape);
    place(buffer.narrow(0, offset, n), i).copy_(grad_of(i));
    offset += n;
  }
  buffer = tensor_ops->all_reduce(buffer, "gradients");
  offset = 0;
  for (size_t i : partial) {
    const int64_t n = c10::multiply_integers(shards[i].canonical_shape);
    grad_of(i).copy_(place(buffer.narrow(0, offset, n), i));
    offset += n;
  }
}

double Trainer::Impl::gradient_square_sum(const at::Tensor& grads, const std::vector<OwnedRange>& ranges) const {
  double total = square_sum(grads);
  const int64_t t = model.tensor_parallel()->spec().size;
  for (size_t i = 0; i < trained_shards.size(); ++i) {
    // Copies of this parameter's elements over the group: every rank's for a replicated one,
    // the ranks sharing a KV head for a replicated head's rows.
    const ParameterShard& s = trained_shards[i];
    const double copies = s.dim < 0 ? static_cast<double>(t)
                          : s.partial_gradient ? static_cast<double>(t) * s.length / s.canonical_shape[0]
                                               : 1.0;
    if (copies == 1.0) continue;
    const int64_t begin = flat_offsets[i], end = begin + c10::multiply_integers(s.local_shape);
    for (const OwnedRange& r : ranges) {
      const int64_t from = std::max(begin, r.global_offset), to = std::min(end, r.global_offset + r.numel);
      if (from >= to) continue;
      const at::Tensor part = grads.narrow(0, r.local_offset + (from - r.global_offset), to - from);
      total -= part.to(at::kDouble).pow(2).sum().item<double>() * (1.0 - 1.0 / copies);
    }
  }
  return total;
}

ModelWeights Trainer::Impl::full_weights(std::vector<WeightTensor>* value_head, std::vector<WeightTensor>* adapters) {
  if (strategy == Strategy::fsdp) {
    for (size_t u = 0; u < fsdp->units(); ++u) fsdp->gather(u);
  }
  ModelWeights weights = model.to_weights();
  if (adapters) {
    adapters->clear();
    for (const auto& [name, t] : model.adapter_tensors()) {
      const at::Tensor c = t.to(at::kCPU).contiguous();
      adapters->push_back({name, c.sizes().vec(), std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel())});
    }
  }
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
  // The layout's length: normed holds 1/T of it under sequence parallelism.
  const int64_t rows = normed.size(0), length = batch.layout.input_ids.size(1), responses = batch.mask.size(1);
  // Response token t of row b sits at position p = response_position[b, t] and is
  // predicted by the hidden state at p - 1. Cells past a row's response are left out.
  const at::Tensor row_start = (at::arange(rows, batch.mask.options().dtype(at::kLong)) * length).unsqueeze(1);
  const at::Tensor cells = batch.mask.flatten().nonzero().squeeze(1);
  const at::Tensor position = (row_start + batch.response_position).flatten().index_select(0, cells);
  const at::Tensor whole = policy.head_input(normed);  // all positions, on every tensor-parallel rank
  const at::Tensor hidden = whole.reshape({rows * length, normed.size(2)}).index_select(0, position - 1);
  const at::Tensor targets = batch.layout.input_ids.flatten().index_select(0, position);
  HeadTiles tiles;
  tiles.kept_logits_bytes = options.learner.head_logits_memory_mb << 20;
  const at::Tensor head_weight = policy.head_weight();
  HeadLogProbs head = head_logprobs(hidden, head_weight, targets, temperature, tiles, policy.compute_dtype(),
                                    tensor_ops.get(), policy.vocab_offset(), policy.kept_cast_weight(head_weight),
                                    policy.head_gradient_buffer());
  const at::Tensor zeros = at::zeros({rows * responses}, head.logprobs.options());
  return {zeros.index_copy(0, cells, head.logprobs).view({rows, responses}),
          zeros.index_copy(0, cells, head.entropy).view({rows, responses})};
}

ActorObjectiveInputs Trainer::Impl::objective_inputs(const at::Tensor& normed, const MicroBatch& batch) {
  auto [logprobs, entropy] = response_logprobs(model, normed, batch, options.temperature);
  ActorObjectiveInputs in{logprobs, batch.old_logprobs, batch.advantages, batch.mask, batch.ref_logprobs, entropy,
                          batch.is_weights};
  if (has_reference() && !in.ref_logprobs.defined()) in.ref_logprobs = reference_response_logprobs(batch);
  return in;
}

at::Tensor Trainer::Impl::reference_response_logprobs(const MicroBatch& batch) {
  c10::InferenceMode guard;
  if (reference) {
    const at::Tensor normed = reference->final_norm(reference->trunk(batch.layout));
    return response_logprobs(*reference, normed, batch, options.temperature).first;
  }
  // The base model: the policy with its adapters off, back on however this ends.
  struct AdaptersOff {
    PolicyModel& model;
    ~AdaptersOff() { model.set_adapters_enabled(true); }
  } off{model};
  model.set_adapters_enabled(false);
  const at::Tensor normed = model.final_norm(model.trunk(batch.layout));
  return response_logprobs(model, normed, batch, options.temperature).first;
}

at::Tensor Trainer::Impl::response_state_values(const at::Tensor& normed, const MicroBatch& batch) const {
  at::Tensor v = at::linear(head_reads(normed), value_weight, value_bias).squeeze(-1);  // [B, L]: V after reading position p
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
  if (preference_pairs > 0) return preference_objective(normed, batch);
  ActorObjectiveInputs in = objective_inputs(normed, batch);
  ProximalWeights proximal;
  if (batch.stale.defined()) {
    TANDEM_CHECK(options.learner.epochs == 1 && options.learner.mini_batches == 1,
                 "stale samples get their proximal log-probs in the training forward only when the update is one "
                 "optimizer step (learner.epochs {}, learner.mini_batches {}): send is_weights instead",
                 options.learner.epochs, options.learner.mini_batches);
    proximal = use_forward_as_proximal(in, batch.stale, options.algorithm.async.is_cap);
  }
  // clip_cov draws its tokens: a seed per optimizer step, rank and micro-batch, so a step
  // redone after a recovery draws the same ones.
  ActorObjectiveParams params = objective;
  params.clip.seed = mix_seed(static_cast<uint64_t>(steps), static_cast<uint64_t>(data().rank()),
                              static_cast<uint64_t>(micro_index));
  ObjectiveResult result = actor_objective(in, params, scale);
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
  data().all_reduce_sum(counts);
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
  data().all_reduce_max(count);
  return static_cast<int64_t>(host_doubles(count)[0]);
}

MicroBatch Trainer::Impl::idle_micro_batch() const {
  TrainingSample nothing;
  nothing.prompt = {0};  // one token, no response: every loss term is masked out
  return micro_batch_of({nothing}, 0, 1);
}

MicroBatch Trainer::Impl::micro_batch_of(const std::vector<TrainingSample>& samples, size_t begin, size_t end) const {
  MicroBatch batch = make_micro_batch(samples, begin, end, device);
  // Sequence parallelism splits the positions over the tensor-parallel ranks.
  if (tensor_ops && tensor_ops->spec().sequence_parallel) batch.layout = pad_length_to(batch.layout, tensor_ops->spec().size);
  return batch;
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
  // fsdp summed each unit's after its backward (trainer_fsdp.cpp).
  if (tensor_ops && strategy != Strategy::fsdp) sum_partial_gradients(0, trained_shards.size());
  switch (strategy) {
    case Strategy::ddp: data().all_reduce_sum(flat->grads()); break;
    case Strategy::zero2: data().reduce_scatter_sum(flat->grads(), grads); break;
    case Strategy::fsdp: break;  // reduce-scattered layer by layer during backward
  }
  at::Tensor norm_sq;
  if (tensor_ops) {  // each tensor-parallel rank holds part of the parameters
    norm_sq = device_doubles({gradient_square_sum(grads, local_ranges())});
    norm_sq = tensor_ops->all_reduce(norm_sq, "gradients");
  } else {
    norm_sq = device_doubles({square_sum(grads)});
  }
  if (strategy != Strategy::ddp) data().all_reduce_sum(norm_sq);  // each rank holds shards
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
    if (strategy == Strategy::zero2) data().all_gather(params.clone(), flat->values());
  }
  return norm;
}

void Trainer::Impl::adopt_policy_as_reference() {
  if (!has_reference()) return;  // no KL in the loss
  const ModelWeights weights = full_weights();
  reference =
      std::make_unique<PolicyModel>(model.config(), weights, at::kFloat, model.compute_dtype(), device, tensor_ops);
  reference_from_warmup = true;
}

Trainer::Trainer(const ModelConfig& config, const ModelWeights& weights, const TrainerOptions& options,
                 Collectives& collectives)
    : impl_(std::make_unique<Impl>(config, weights, options, collectives)) {}

Trainer::~Trainer() = default;

int64_t Trainer::optimizer_steps() const { return impl_->steps; }

CollectiveTally Trainer::tensor_parallel_collectives() const {
  return impl_->tensor_ops ? impl_->tensor_ops->tally() : CollectiveTally{};
}

ModelWeights Trainer::weights() const { return impl_->full_weights(); }

void Trainer::with_weight_tensors(
    const std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>& use) const {
  with_gathered_units([&] { use(impl_->model.weight_tensors()); });
}

void Trainer::with_local_weight_tensors(
    const std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>& use) const {
  with_gathered_units([&] { use(impl_->model.weight_tensors(/*gather_tensor_parallel=*/false)); });
}

void Trainer::with_sync_tensors(
    const std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>& use) const {
  if (!impl_->model.has_adapters()) return with_weight_tensors(use);
  with_gathered_units([&] { use(impl_->model.adapter_tensors()); });
}

int Trainer::tensor_parallel() const { return impl_->tensor_ops ? impl_->tensor_ops->spec().size : 1; }

int Trainer::tensor_rank() const { return impl_->tensor_ops ? impl_->tensor_ops->spec().rank : 0; }

int Trainer::replica() const { return impl_->data().rank(); }

void Trainer::with_gathered_units(const std::function<void()>& use) const {
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
  use();
}

std::vector<std::pair<std::string, double>> UpdateMetrics::entries() const {
  std::vector<std::pair<std::string, double>> e = metric_entries(objective, with_critic);
  e.emplace_back("actor/grad_norm", grad_norm);
  e.emplace_back("actor/lr", lr);
  for (const auto& [key, count] : tensor_parallel.counts) {
    std::string name = "tensor_parallel/" + key;
    std::replace(name.begin(), name.end(), ' ', '_');
    e.emplace_back(name + "_calls", static_cast<double>(count.calls));
    e.emplace_back(name + "_mb", static_cast<double>(count.bytes) / (1 << 20));
  }
  return e;
}

}  // namespace tandem
