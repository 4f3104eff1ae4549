#include "core/foreign_names.h"

#include <fmt/format.h>

#include <vector>

namespace tandem {

namespace {

struct ForeignName {
  const char* key;    // the tandem key the name is used for
  const char* value;  // the other framework's name
  const char* ours;   // what to write here
};

const std::vector<ForeignName>& foreign_names() {
  static const std::vector<ForeignName> table = {
      {"algorithm.advantage", "ppo", "PPO is advantage: gae with policy_loss: ppo_clip here"},
      {"algorithm.policy_loss", "ppo", "the PPO loss is ppo_clip here"},
  };
  return table;
}

struct ForeignKey {
  const char* key;   // verl's key, the last part of its path
  const char* ours;  // what to write here
};

const std::vector<ForeignKey>& foreign_keys() {
  static const std::vector<ForeignKey> table = {
      {"train_files", "verl's data.train_files is data.train here (one .jsonl file; convert parquet first)"},
      {"val_files", "verl's data.val_files is data.val here"},
      {"train_batch_size", "verl's data.train_batch_size is data.batch_size here (prompts per step)"},
      {"val_batch_size", "validation takes every row of data.val at once here; there is no val batch size"},
      {"max_response_length", "verl's data.max_response_length is rollout.max_new_tokens here"},
      {"n", "verl's rollout.n is algorithm.group_size here (samples per prompt)"},
      {"actor_rollout_ref", "verl's actor_rollout_ref is split into model, rollout, learner and algorithm here"},
      {"actor", "verl's actor settings are under learner and algorithm here"},
      {"ref", "the reference policy is the starting weights here; its KL is algorithm.kl"},
      {"adv_estimator", "verl's algorithm.adv_estimator is algorithm.advantage here"},
      {"use_kl_in_reward", "verl's use_kl_in_reward is algorithm.kl.in: reward here"},
      {"kl_ctrl", "verl's algorithm.kl_ctrl is algorithm.kl here (kl_coef is coef, type: adaptive is adaptive: true, "
                  "target_kl is target, horizon is horizon)"},
      {"clip_ratio_c", "verl's clip_ratio_c is algorithm.clip.dual_c here (0, off, by default; verl's is 3)"},
      {"tau_pos", "verl's actor.tau_pos is algorithm.policy_loss_options.tau_pos here"},
      {"tau_neg", "verl's actor.tau_neg is algorithm.policy_loss_options.tau_neg here"},
      {"use_kl_loss", "verl's use_kl_loss: true is algorithm.kl.in: loss here with algorithm.kl.coef > 0 (the "
                      "default); kl.coef: 0 turns it off"},
      {"kl_loss_coef", "verl's kl_loss_coef is algorithm.kl.coef here"},
      {"kl_loss_type", "verl's kl_loss_type is algorithm.kl.estimator here (low_var_kl is k3)"},
      {"clip_ratio", "verl's clip_ratio is algorithm.clip.low and algorithm.clip.high here"},
      {"clip_ratio_low", "verl's clip_ratio_low is algorithm.clip.low here"},
      {"clip_ratio_high", "verl's clip_ratio_high is algorithm.clip.high here"},
      {"clip_ratio_c", "verl's clip_ratio_c is algorithm.clip.dual_c here"},
      {"entropy_coeff", "verl's entropy_coeff is algorithm.entropy_coef here"},
      {"loss_agg_mode", "verl's loss_agg_mode is algorithm.loss_agg here"},
      {"ppo_mini_batch_size", "verl's ppo_mini_batch_size is learner.mini_batches here, a count: data.batch_size / "
                              "ppo_mini_batch_size optimizer steps per epoch"},
      {"ppo_micro_batch_size_per_gpu", "verl's ppo_micro_batch_size_per_gpu is learner.micro_batch_size here "
                                       "(samples per forward/backward on one rank)"},
      {"ppo_micro_batch_size", "verl's ppo_micro_batch_size is learner.micro_batch_size here (per rank)"},
      {"ppo_epochs", "verl's ppo_epochs is learner.epochs here"},
      {"optim", "verl's actor.optim is learner.optimizer here"},
      {"custom_reward_function", "verl's custom_reward_function is a reward entry here: reward: [{python: FILE, "
                                 "function: NAME, reward_kwargs: {...}}]"},
      {"reward_model", "reward models are not available yet; rewards are functions here (reward: [...])"},
      {"trainer", "verl's trainer settings are under experiment, launcher and logging here"},
      {"total_training_steps", "verl's trainer.total_training_steps is experiment.steps here"},
      {"total_epochs", "epochs are experiment.steps here: steps = epochs x rows / data.batch_size"},
      {"save_freq", "verl's trainer.save_freq is experiment.checkpoint_every here"},
      {"test_freq", "verl's trainer.test_freq is experiment.eval_every here"},
      {"val_before_train", "verl's trainer.val_before_train is experiment.eval_before_train here"},
      {"project_name", "the run's name is experiment.name here"},
      {"experiment_name", "the run's name is experiment.name here"},
      {"n_gpus_per_node", "verl's trainer.n_gpus_per_node is launcher.slurm.gpus_per_node here (Slurm)"},
      {"nnodes", "verl's trainer.nnodes is launcher.slurm.nodes here (Slurm)"},
      {"logger", "metrics go to metrics.jsonl here; logging.tensorboard and logging.prometheus add outlets"},
      {"gpu_memory_utilization", "verl's gpu_memory_utilization is rollout.gpu_memory_fraction here"},
      {"tensor_model_parallel_size", "verl's tensor_model_parallel_size is learner.tensor_parallel here (the "
                                     "learner) and rollout.tensor_parallel (each rollout worker's engine)"},
      {"ulysses_sequence_parallel_size", "verl's Ulysses sequence parallelism has no counterpart; "
                                         "learner.sequence_parallel (Megatron's, on by default with "
                                         "learner.tensor_parallel > 1) splits the norms' positions"},
      {"log_prob_micro_batch_size_per_gpu", "log-probs use learner.micro_batch_size here"},
      {"lora_rank", "verl's lora_rank is learner.lora.rank here"},
      {"lora_alpha", "verl's lora_alpha is learner.lora.alpha here"},
  };
  return table;
}

}  // namespace

std::string foreign_key_hint(const std::string& key_path) {
  const size_t dot = key_path.rfind('.');
  const std::string last = dot == std::string::npos ? key_path : key_path.substr(dot + 1);
  for (const ForeignKey& f : foreign_keys()) {
    if (last == f.key) return f.ours;
  }
  return "";
}

std::string foreign_name_hint(const std::string& key_path, const std::string& value) {
  for (const ForeignName& f : foreign_names()) {
    if (key_path == f.key && value == f.value) return fmt::format(" ({})", f.ours);
  }
  return "";
}

}  // namespace tandem
