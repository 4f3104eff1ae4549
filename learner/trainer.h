// One learner rank's training: the policy, its flat parameters, the optimizer, and the
// data-parallel strategy that keeps every rank's policy identical.
//
// An update is `epochs` passes over the step's mini-batches, one optimizer step per
// mini-batch. A mini-batch is split over ranks (each rank gets its share, any size, even
// none) and each share into micro-batches of `micro_batch_size` samples. Loss
// denominators are counted over the whole mini-batch across ranks, so the summed
// gradients equal those of one process training on the whole mini-batch.
//
// Strategies (learner.sharding):
//   ddp    gradients all-reduced; every rank keeps full parameters and optimizer state
//   zero2  gradients reduce-scattered; each rank keeps and steps the optimizer state of its
//          shard only (1/N of AdamW's moments), then parameters are all-gathered
//   fsdp   parameters, gradients and optimizer state all sharded at rest; each layer is
//          gathered for its forward and again for its backward (recomputed from the
//          saved layer input), its gradients reduce-scattered, then freed
//          (learner/trainer_fsdp.cpp). The reference policy for the KL stays whole.
//
// Device (learner.device, learner/learner_device.h): parameters, gradients, the flat
// buffers and optimizer state live on the rank's device, micro-batches are made there,
// metrics come back to the host. The same lines run on the CPU and on a GPU: the device
// is a value chosen once at construction, not a branch.
//
// PPO's critic (algorithm.advantage: gae) is a value head on the policy's trunk, trained
// in the same backward pass with weight algorithm.value.coef; it joins the flat
// parameters, so every strategy shards it and checkpoints carry it.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "core/config.h"
#include "core/safetensors.h"
#include "learner/objective_metrics.h"
#include "learner/tensor_parallel_ops.h"
#include "learner/train_batch.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class Collectives;

struct TrainerOptions {
  LearnerConfig learner;
  AlgorithmConfig algorithm;
  double temperature = 1.0;           // rollout.temperature: log-probs are of softmax(logits / T)
  int64_t max_response_length = 0;    // rollout.max_new_tokens (Dr.GRPO's normaliser)
  int64_t total_optimizer_steps = 1;  // for the cosine schedule
  // This rank's index among the learner ranks on its machine: with learner.device cuda it
  // trains on GPU `local_rank` (learner/learner_device.h).
  int local_rank = 0;
  // tandem train-rm: the policy's trunk with a scalar head on the final-normed last token
  // (the value head's tensors, read once per sequence), trained by preference_step.
  bool reward_model = false;
  // learner.lora: its adapters' initialisation and dropout draw from this seed
  // (experiment.seed), and exports name `base_model` (model.path) as the adapters' base.
  uint64_t seed = 0;
  std::string base_model;
};

// One reward-model update (Trainer::preference_step), over every rank's pairs.
struct PreferenceMetrics {
  double loss = 0;      // mean over pairs of -log sigmoid(s_chosen - s_rejected)
  double accuracy = 0;  // share of pairs with s_chosen > s_rejected
  double margin = 0;    // mean s_chosen - s_rejected
  double pairs = 0;
  double grad_norm = 0;
  double lr = 0;
};

struct UpdateMetrics {
  ObjectiveMetrics objective;  // combined over micro-batches, ranks and optimizer steps
  double grad_norm = 0;        // mean over optimizer steps of the global norm before clipping
  double lr = 0;               // learning rate of the last optimizer step
  int64_t optimizer_steps = 0;
  int64_t tokens = 0;          // response tokens trained on, all ranks, all epochs
  bool with_critic = false;    // entries() include critic/value_loss and critic/explained_variance
  // learner.tensor_parallel > 1: this update's collectives of the split model, per rank
  // (CollectiveTally's "<phase> <kind>"), as entries tensor_parallel/<phase>_<kind>_{calls,mb}.
  CollectiveTally tensor_parallel;
  std::vector<std::pair<std::string, double>> entries() const;  // actor/pg_loss, actor/grad_norm, ...
};

class Trainer {
 public:
  // `collectives` outlives the trainer; every rank constructs its trainer from the same weights.
  Trainer(const ModelConfig& config, const ModelWeights& weights, const TrainerOptions& options,
          Collectives& collectives);
  ~Trainer();

  // mini_batches[m]: this rank's share of mini-batch m (every rank passes the same count).
  UpdateMetrics train(const std::vector<std::vector<TrainingSample>>& mini_batches);

  // One supervised warm-up step (learner.optimizer's kind, its own moments, constant
  // `lr`): token-mean cross-entropy of `share`'s responses given their prompts, over the
  // whole batch across ranks (every rank calls, any share size). Does not count as an
  // optimizer step of the RL schedule. Metrics: objective.loss and tokens.
  UpdateMetrics supervised_step(const std::vector<TrainingSample>& share, double lr);

  // The current policy, float32 (identical on every rank). Under fsdp this gathers every
  // unit: all ranks must call it together.
  ModelWeights weights() const;
  // Calls `use` with the policy's weights as tensors on the training device (every FSDP
  // unit gathered for the call): weight sync sends them from there, a GPU learner's
  // straight from device memory. Every rank must call it (fsdp gathers).
  void with_weight_tensors(
      const std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>& use) const;
  // The same with this rank's tensor-parallel shards (the layout's local shapes), nothing
  // gathered over the tensor-parallel group: the resharding weight sync sends them
  // (weight_sync/reshard.h). Every rank must call it (fsdp gathers its data-parallel units).
  void with_local_weight_tensors(
      const std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>& use) const;
  // What a weight sync sends (with `use`, as with_weight_tensors): with LoRA only the
  // adapters (canonical, gathered over tensor parallelism), which the engine applies over
  // the base it already holds; else the whole policy. Every rank must call it.
  void with_sync_tensors(
      const std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>& use) const;
  // This rank's place: tensor-parallel rank within its replica (of tensor_parallel()), and its replica.
  int tensor_parallel() const;
  int tensor_rank() const;
  int replica() const;
  // The critic's V(s_t) for every response token of `samples` (this rank's share), as
  // TrainingSample::old_values wants them; the gae estimator's `values`. Needs
  // algorithm.advantage: gae. Collective under fsdp (every rank calls, any share size).
  std::vector<std::vector<float>> values(const std::vector<TrainingSample>& samples);
  // log p(token) at rollout.temperature of every response token of `samples` under the
  // current policy: what the rollout engine reported when it sampled them, if its weights
  // are this policy's (the weight-sync probe). Collective under fsdp, like values().
  // `float32`: computed in float32 whatever learner.precision, as the rollout engine does
  // (the probe); otherwise in the training precision (the proximal policy of async RL).
  std::vector<std::vector<float>> response_logprobs(const std::vector<TrainingSample>& samples, bool float32 = false);
  // The reference policy's log-probs of every response token of `samples`, in the training
  // precision, as the KL in the loss would take them (algorithm.kl.in: reward). Needs
  // algorithm.kl.coef > 0. Not collective: the reference is whole on every rank.
  std::vector<std::vector<float>> reference_logprobs(const std::vector<TrainingSample>& samples);
  int64_t optimizer_steps() const;
  // learner.tensor_parallel > 1: the collectives the split model ran since the last
  // train() began (learner/tensor_parallel_ops.h); empty without tensor parallelism.
  CollectiveTally tensor_parallel_collectives() const;

  // Reward model (TrainerOptions::reward_model; learner/preference_loss.h). `share`: this
  // rank's pairs, samples 2i (chosen) and 2i + 1 (rejected) answering the same prompt, each
  // scored at its last token. One optimizer step (learner.optimizer, its schedule) with
  // the Bradley-Terry loss averaged over every rank's pairs; micro-batches hold
  // learner.micro_batch_size pairs. Collective (every rank calls, any even share size).
  PreferenceMetrics preference_step(const std::vector<TrainingSample>& share);
  // The reward model's score of each of `samples` (prompt + response, read at the last
  // token), without gradients. Collective under fsdp.
  std::vector<float> reward_scores(const std::vector<TrainingSample>& samples);

  // Every rank calls these together. The checkpoint directory holds the policy
  // (model.safetensors, config.json), trainer_state.json, and the optimizer moments as
  // optimizer-<i>.safetensors files, each covering a global [offset, offset + n) range of
  // the flat parameters: it loads into any worker count and either strategy. Written
  // into DIR.tmp and renamed by rank 0 after all ranks finished: DIR is whole or absent.
  // With `tokenizer_dir`, its tokenizer files are copied in too, so that the checkpoint is
  // a model directory `tandem generate --model` loads.
  void save_checkpoint(const std::string& dir, const std::string& tokenizer_dir = "");
  void load_checkpoint(const std::string& dir);
  // learner.snapshot (trainer_snapshot.cpp): this rank's own state (its parameter values
  // or shard, optimizer moments, step counters) after run step `step`, into
  // SLOT/rank-<r>.snapshot (rewritten in place: a slot's file keeps its memory from one
  // step to the next), and the warmed-up reference policy into REFERENCE_DIR once. No
  // collectives: each rank writes to its own host's memory. load_snapshot reads step
  // `step` back into a rank of the same group; it throws, changing nothing, when the file
  // is missing, holds another step or does not fit. `source_rank`: the rank whose file
  // holds this rank's state: itself, or under ddp (every rank holds the same state) the
  // first rank on this host, so that a host writes one copy; a rank whose source is
  // another rank writes nothing.
  void save_snapshot(const std::string& slot, const std::string& reference_dir, int64_t step, int source_rank);
  void load_snapshot(const std::string& slot, const std::string& reference_dir, int64_t step, int source_rank);
  // The policy as a Hugging Face directory (config.json, model.safetensors in `dtype`,
  // and the tokenizer files copied from `tokenizer_dir`), written by rank 0, staged and
  // renamed like a checkpoint; an existing DIR is replaced. All ranks call it (fsdp gathers).
  // `config_extra`: a JSON object whose keys config.json gets too ("": none).
  void export_policy(const std::string& dir, const std::string& tokenizer_dir, DType dtype = DType::f32,
                     const std::string& config_extra = "");

 private:
  // Runs `use` with every FSDP unit gathered (released however it ends).
  void with_gathered_units(const std::function<void()>& use) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
