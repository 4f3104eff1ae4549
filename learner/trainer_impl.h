// Private to learner/: the state behind Trainer, shared by trainer.cpp (state, objective,
// optimizer step), trainer_passes.cpp (train, supervised step, values, log-probs),
// trainer_fsdp.cpp (the layer-by-layer micro-batch) and trainer_checkpoint.cpp.
#pragma once

#include "actor/policy_torch.h"
#include "core/error.h"
#include "learner/adamw.h"
#include "learner/checkpoint_ranges.h"
#include "learner/collectives.h"
#include "learner/flat_parameters.h"
#include "learner/fsdp_parameters.h"
#include "learner/objective.h"
#include "learner/tensor_parallel_ops.h"
#include "learner/trainer.h"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <utility>

namespace tandem {

enum class Strategy { ddp, zero2, fsdp };

// trainer_checkpoint.cpp: fills `target` (float32, contiguous, on any device) through host memory: `fill` writes
// the host floats. On the CPU the host tensor is `target` itself.
void fill_through_host(at::Tensor target, const std::function<void(float*)>& fill);

struct Trainer::Impl {
  Impl(const ModelConfig& config, const ModelWeights& weights, const TrainerOptions& o, Collectives& c);

  // Log-probs and entropies [B, T] of the micro-batch's response tokens under `policy`, from
  // its final-normed hidden states [B, L, H]. Only the response tokens' rows reach the head,
  // and their logits are never whole (learner/head_logprobs.h).
  std::pair<at::Tensor, at::Tensor> response_logprobs(const PolicyModel& policy, const at::Tensor& normed,
                                                      const MicroBatch& batch, double temperature) const;
  AggregationScale global_scale(const std::vector<TrainingSample>& share);
  // Forward and backward of one micro-batch; gradients land where the strategy keeps them.
  ObjectiveMetrics micro_batch(const MicroBatch& batch, const AggregationScale& scale);
  ObjectiveMetrics fsdp_micro_batch(const MicroBatch& batch, const AggregationScale& scale);  // trainer_fsdp.cpp
  ActorObjectiveInputs objective_inputs(const at::Tensor& normed, const MicroBatch& batch);
  // The micro-batch's loss from the last layer's output: the actor objective, plus the
  // weighted critic objective when there is a value head.
  ObjectiveResult objective_from_trunk(const at::Tensor& trunk, const MicroBatch& batch,
                                       const AggregationScale& scale);
  // V(s_t) [B, T] of each response token t: the value head read at the position before t
  // (the state the token was sampled in), like the log-prob of t is read there.
  at::Tensor response_state_values(const at::Tensor& normed, const MicroBatch& batch) const;
  // No-grad forward through every layer, one gathered unit at a time (fsdp; the caller
  // holds the embeddings). `inputs`, when given, receives each layer's input.
  at::Tensor fsdp_trunk(const TokenLayout& layout, const PolicyModel::LayerContext& context,
                        std::vector<at::Tensor>* inputs);  // trainer_fsdp.cpp
  bool critic() const { return value_weight.defined(); }
  // `read(trunk, batch)` [rows, T] for every response token of `samples`, without
  // gradients, one micro-batch at a time (fsdp: gathered, every rank as often).
  std::vector<std::vector<float>> per_response_token(
      const std::vector<TrainingSample>& samples,
      const std::function<at::Tensor(const at::Tensor& trunk, const MicroBatch& batch)>& read);
  // The model's parameters, then the value head's: the global flat layout.
  std::vector<std::pair<std::string, at::Tensor>> trained_parameters() const;
  std::vector<std::pair<std::string, at::Tensor>> value_head_parameters() const;  // none without a critic
  void zero_gradients();
  // How many micro-batches this rank runs in a mini-batch: its own count, or under fsdp
  // the largest over ranks (the extra ones are idle_micro_batch()).
  int64_t micro_batches_to_run(int64_t local_count);
  MicroBatch idle_micro_batch() const;
  // Samples [begin, end) of `samples` as a micro-batch on the training device.
  MicroBatch micro_batch_of(const std::vector<TrainingSample>& samples, size_t begin, size_t end) const;
  // Host values as a float64 tensor on the training device (the collectives reduce there),
  // and a reduced one read back.
  at::Tensor device_doubles(const std::vector<double>& values) const;
  static std::vector<double> host_doubles(const at::Tensor& values);
  // Gradients summed over ranks, clipped by their global norm, then one step of
  // `optimizer` (sgd when learner.optimizer.name says so) at `learning_rate`.
  double synchronise_and_step(AdamW& optimizer, double learning_rate);
  // The supervised warm-up's loss: token-mean cross-entropy of the response tokens
  // (temperature 1), its denominator counted over the whole batch across ranks.
  ObjectiveResult supervised_objective(const at::Tensor& normed, const MicroBatch& batch,
                                       const AggregationScale& scale) const;

  // This rank's parameter values and gradients that the optimizer steps: ddp the whole
  // flat buffer, zero2 one shard of it, fsdp one shard of every unit.
  at::Tensor local_values();
  at::Tensor local_grads();
  // The parameter values this rank holds: its shard under fsdp; under ddp and zero2 the
  // whole flat buffer (zero2 steps a shard of it, then gathers the rest from its peers).
  at::Tensor held_values();  // trainer_snapshot.cpp
  // In the canonical (unsplit) flat layout: under tensor parallelism each local range maps
  // to the canonical elements of this rank's shards (canonical_ranges).
  std::vector<OwnedRange> owned_ranges() const;
  // The ranges of the rank's own flat layout (its shards' parameters back to back) that its
  // state covers: ddp all of it, zero2 one shard, fsdp one shard of each unit.
  std::vector<OwnedRange> local_ranges() const;
  // `local` (ranges of the rank's flat layout) as ranges of the canonical flat layout, with
  // the same local offsets; padding rows map nowhere.
  std::vector<OwnedRange> canonical_ranges(const std::vector<OwnedRange>& local) const;
  // Tensor parallelism: the partial gradients (ParameterShard::partial_gradient) among
  // parameters [first, end) summed over the tensor group, in one all-reduce, where their
  // .grad are now (ddp, zero2: the whole flat buffer before the step; fsdp: a gathered
  // unit after its backward).
  void sum_partial_gradients(size_t first, size_t end);
  // Σ g² over `grads` (laid out by `ranges` of the rank's flat layout), each replicated
  // parameter's counted 1/copies, so that summing over the tensor group counts it once.
  double gradient_square_sum(const at::Tensor& grads, const std::vector<OwnedRange>& ranges) const;
  // How each trained parameter (trained_parameters' order) is split: the model's shards,
  // then the value head's (replicated), and where each starts in the rank's flat layout.
  std::vector<ParameterShard> trained_shards;
  std::vector<int64_t> flat_offsets;
  std::vector<size_t> unit_first_parameter;  // fsdp: unit u holds parameters [first[u], first[u + 1])
  // What the value or score head reads: the final-normed states of every position, whole on
  // every tensor-parallel rank; the gradient each rank sends back is 1/T of its own, so the
  // region's sum counts the head's (identical on every rank) once.
  at::Tensor head_reads(const at::Tensor& normed) const;
  // The policy (and into `value_head`, when given and there is a critic, the value head's
  // tensors). Collective under fsdp.
  // And into `adapters`, when given, LoRA's adapters (canonical; none without LoRA).
  ModelWeights full_weights(std::vector<WeightTensor>* value_head = nullptr, std::vector<WeightTensor>* adapters = nullptr);

  TrainerOptions options;
  Collectives& collectives;  // every learner rank
  // Tensor parallelism (learner.tensor_parallel T > 1): rank g is tensor-parallel rank g % T
  // of data-parallel replica g / T. `tensor_group` holds the T ranks of this rank's replica
  // (null for T = 1); `data_group` the ranks holding the same shards in the other replicas
  // (for T = 1 the collectives themselves). Samples, gradient sync, metrics and the
  // data-parallel strategy go over data(); the model's own collectives over the tensor group.
  std::unique_ptr<Collectives> tensor_group, data_group;
  std::shared_ptr<GroupTensorParallelOps> tensor_ops;  // null for T = 1
  Collectives& data() const { return data_group ? *data_group : collectives; }
  Strategy strategy;
  at::Device device;  // where parameters, gradients, optimizer state and micro-batches live
  PolicyModel model;
  std::unique_ptr<PolicyModel> reference;  // frozen initial policy, when the KL is in the loss
  // LoRA with the KL: the reference is the model itself with its adapters off (no copy),
  // until a warm-up makes the warmed-up (merged) policy the reference.
  bool base_is_reference() const { return !reference && model.has_adapters() && options.algorithm.kl.coef > 0; }
  bool has_reference() const { return reference || base_is_reference(); }
  // The reference policy's log-probs [B, T] of the micro-batch's response tokens, without gradients.
  at::Tensor reference_response_logprobs(const MicroBatch& batch);
  // The critic (advantage: gae): a linear value head [1, hidden] + [1] on the final-normed
  // last hidden state, sharing the policy's trunk (its loss trains the trunk too).
  // Zero-initialised: values start at 0 and the first updates leave the trunk to the actor.
  at::Tensor value_weight, value_bias;
  std::unique_ptr<FlatParameters> flat;    // ddp, zero2
  std::unique_ptr<FsdpParameters> fsdp;    // fsdp
  std::unique_ptr<AdamW> adam;
  // The warm-up's own optimizer: its moments never reach RL (freed by the first train()).
  std::unique_ptr<AdamW> supervised_adam;
  bool supervised = false;  // objective_from_trunk computes supervised_objective
  // Reward model (trainer_preference.cpp): objective_from_trunk computes preference_objective
  // over this many pairs of the whole step (all ranks) while > 0.
  double preference_pairs = 0;
  ObjectiveResult preference_objective(const at::Tensor& normed, const MicroBatch& batch) const;
  // The head's score [B] of each row's last token (the reward model's reading).
  at::Tensor last_token_scores(const at::Tensor& normed, const MicroBatch& batch) const;
  // After a warm-up the reference policy is the warmed-up one (as RLHF's reference is the
  // SFT model), not the initial weights: checkpoints then carry it (reference/).
  bool reference_from_warmup = false;
  bool reference_snapshot_gathered = false;  // tensor parallelism: save_snapshot gathered the reference once
  void adopt_policy_as_reference();  // collective under fsdp
  // The warmed-up reference policy saved in model directory `dir` (trainer_checkpoint.cpp).
  std::unique_ptr<PolicyModel> reference_from(const std::string& dir) const;
  ActorObjectiveParams objective;
  int64_t steps = 0;
  int64_t micro_index = 0;  // the micro-batch of the optimizer step running now (clip_cov's draw)
  double lr = 0;
};

}  // namespace tandem
