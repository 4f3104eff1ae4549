// Every config knob, declared once: key, default (in core/config.h), check, meaning and unit.
//
// A visitor walks these declarations: the loader (config_load.cpp) reads and validates,
// the writer (config_write.cpp) prints the resolved config. A visitor provides
//   field(key, value&, check, help)   for scalars,
//   section(key, Struct&, help)       for nested sections (calls describe() again),
//   list(key, std::vector<Struct>&, help).
// Private to core/: include only from the config implementation files.
#pragma once

#include "core/config.h"
#include "core/config_checks.h"

namespace tandem {

using namespace config_check;

template <class V> void describe(V& v, ExperimentConfig& c) {
  v.field("name", c.name, required_text(), "run name; the run directory defaults to runs/<name>-<time>");
  v.field("seed", c.seed, any_integer(), "seed for every random choice (data order, sampling, init)");
  v.field("steps", c.steps, at_least(1), "number of RL steps (one prompt batch each)");
  v.field("checkpoint_every", c.checkpoint_every, at_least(0), "checkpoint period in steps; 0: never");
  v.field("keep_checkpoints", c.keep_checkpoints, at_least(1), "how many of the newest checkpoints to keep");
  v.field("eval_every", c.eval_every, at_least(0),
          "evaluate on data.val every N steps (val/* metrics, val_samples.jsonl); 0: never during training");
  v.field("eval_before_train", c.eval_before_train, "evaluate on data.val once before the first step (a step-0 row)");
}

template <class V> void describe(V& v, ModelSourceConfig& c) {
  v.field("path", c.path, required_text(),
          "Hugging Face model directory or .gguf / llama2.c .bin file (relative to the config file's directory), or builtin:tiny | builtin:small | builtin:tiny-tools");
  v.field("dtype", c.dtype, one_of({"float32", "bfloat16", "float16"}),
          "dtype of the exported policy (RUN_DIR/policy: config.json torch_dtype and model.safetensors); "
          "training, checkpoints and the CPU rollout stay float32 (rollout.dtype sets the CUDA rollout's)");
}

template <class V> void describe(V& v, DataConfig& c) {
  v.field("train", c.train, required_text(),
          "training prompts: a .jsonl file (relative to the config file's directory) or builtin:addition | "
          "builtin:addition1");
  v.field("val", c.val, text(),
          "validation prompts, as train (relative to the config file's directory); empty: no evaluation");
  v.field("prompt_key", c.prompt_key, required_text(), "JSONL field holding the prompt");
  v.field("batch_size", c.batch_size, at_least(1), "prompts per step");
  v.field("shuffle", c.shuffle, "shuffle the prompt order each epoch (seeded)");
  v.field("max_prompt_length", c.max_prompt_length, at_least(0),
          "longest prompt in tokens; 0: the model's max_position_embeddings minus rollout.max_new_tokens "
          "(checked when the dataset is loaded, before the run starts)");
  v.field("on_long_prompt", c.on_long_prompt, one_of({"error", "skip"}),
          "a prompt over max_prompt_length: error stops before the run starts naming file:line; skip leaves "
          "it out (counted and reported)");
  v.field("answer_key", c.answer_key, required_text(),
          "field holding the reference answer, a dotted path into nested objects (reward_model.ground_truth); "
          "rewards read it as the row's `answer` (python rewards: ground_truth)");
  v.field("chat_template", c.chat_template, text(),
          "renders message-list prompts ([{role, content}]): auto (the model's tokenizer_config.json "
          "chat_template, or chat_template.jinja), none (message lists are an error), or a Jinja file path "
          "(relative to the config file's directory)");
  v.field("add_generation_prompt", c.add_generation_prompt,
          "end rendered prompts with the assistant turn's header (the template's add_generation_prompt)");
  v.field("prompt_as_user_message", c.prompt_as_user_message,
          "a string prompt becomes [{role: user, content: prompt}] and is rendered with the chat template");
  v.field("system_prompt", c.system_prompt, text(),
          "with prompt_as_user_message: a system message put before the user's (empty: none)");
}

template <class V> void describe(V& v, SftConfig& c) {
  v.field("steps", c.steps, at_least(0), "supervised warm-up steps before RL; 0: none");
  v.field("batch_size", c.batch_size, at_least(1), "prompts (with their gold responses) per warm-up step");
  v.field("lr", c.lr, positive(), "warm-up learning rate (constant)");
  v.field("response_key", c.response_key, required_text(),
          "dataset field holding the gold response (builtin tasks: answer)");
}

template <class V> void describe(V& v, ClipConfig& c) {
  v.field("low", c.low, between(0.0, 1.0), "PPO ratio clip below 1 (ratio >= 1 - low)");
  v.field("high", c.high, non_negative(), "PPO ratio clip above 1 (ratio <= 1 + high; DAPO clip-higher)");
  v.field("dual_c", c.dual_c, non_negative(), "dual-clip constant for negative advantages (> 1); 0: off");
}

template <class V> void describe(V& v, KlConfig& c) {
  v.field("coef", c.coef, non_negative(), "KL coefficient against the reference policy; 0: no reference");
  v.field("estimator", c.estimator, one_of({"k1", "k2", "k3", "low_var_kl", "kl", "mse"}),
          "KL estimator (verl's low_var_kl, kl, mse are k3, k1, k2)");
  v.field("in", c.in, one_of({"loss", "reward"}), "apply the KL penalty in the loss or in the reward");
  v.field("adaptive", c.adaptive, "adapt the coefficient toward `target`");
  v.field("target", c.target, positive(), "KL target per token for the adaptive coefficient");
  v.field("horizon", c.horizon, positive(),
          "adaptive: samples over which the coefficient moves by at most 20% (Ziegler et al. 2019)");
}

template <class V> void describe(V& v, OverlongConfig& c) {
  v.field("buffer_len", c.buffer_len, at_least(0),
          "DAPO's soft overlong punishment: the last buffer_len tokens before the length limit cost reward "
          "linearly; 0: off");
  v.field("penalty_factor", c.penalty_factor, non_negative(), "the reward lost at the length limit");
}

template <class V> void describe(V& v, FilterGroupsConfig& c) {
  v.field("metric", c.metric, one_of({"", "reward", "acc"}),
          "DAPO's dynamic sampling: drop groups whose samples all have the same reward (or accuracy: reward >= "
          "eval.correct_threshold) and generate more prompts until the batch is full; empty: off");
  v.field("max_batches", c.max_batches, at_least(1),
          "generation rounds per step at most; then the step trains on the groups it has");
}

template <class V> void describe(V& v, RolloutIsConfig& c) {
  v.field("level", c.level, one_of({"", "token", "sequence"}),
          "rollout correction: importance weights pi_learner / pi_rollout per token or per sequence (the product "
          "over its tokens); empty: off");
  v.field("mode", c.mode, one_of({"truncate", "mask"}),
          "truncate: min(w, threshold); mask: weight 0 outside [1/threshold, threshold]");
  v.field("threshold", c.threshold, above_up_to(1.0, 1e30), "the upper bound of the importance weights (> 1)");
}

template <class V> void describe(V& v, PolicyLossOptions& c) {
  v.field("tau_pos", c.tau_pos, positive(), "sapo: gate temperature for tokens with a positive advantage");
  v.field("tau_neg", c.tau_neg, positive(), "sapo: gate temperature for the others");
  v.field("clip_cov_ratio", c.clip_cov_ratio, above_up_to(0.0, 1.0),
          "clip_cov: share of the valid tokens whose gradient is cut");
  v.field("clip_cov_lb", c.clip_cov_lb, any_number(), "clip_cov: lower bound of the candidates' covariance");
  v.field("clip_cov_ub", c.clip_cov_ub, any_number(), "clip_cov: upper bound of the candidates' covariance");
  v.field("kl_cov_ratio", c.kl_cov_ratio, above_up_to(0.0, 1.0),
          "kl_cov: share of the valid tokens given the |log ratio| penalty");
  v.field("ppo_kl_coef", c.ppo_kl_coef, non_negative(), "kl_cov: weight of that penalty");
}

template <class V> void describe(V& v, AsyncConfig& c) {
  v.field("max_staleness", c.max_staleness, at_least(0),
          "versions a sample's weights may lag the learner's: the next step's rollout runs during this step's "
          "training; 0: synchronous");
  v.field("is_cap", c.is_cap, positive(),
          "truncation of the importance weight between the learner's old log-probs and the rollout's");
  v.field("partial_rollouts", c.partial_rollouts,
          "a rollout still generating when the learners finish continues on their new weights (each token "
          "records its version); not bit-reproducible, since timing decides where the weights change");
}

template <class V> void describe(V& v, ValueConfig& c) {
  v.field("coef", c.coef, non_negative(), "weight of the clipped value loss in the learner's loss");
  v.field("clip", c.clip, non_negative(), "value clip range around the rollout-time values; 0: off");
}

template <class V> void describe(V& v, AlgorithmConfig& c) {
  v.field("advantage", c.advantage, required_text(),
          "advantage estimator: grpo, dr_grpo, rloo, gae, reinforce_pp, grpo_passk, opo, gpg, "
          "reinforce_plus_plus_baseline, remax, grpo_vectorized, rloo_vectorized, or one algorithm.plugin "
          "registers");
  v.field("group_size", c.group_size, at_least(1), "samples per prompt");
  v.field("normalize_std", c.normalize_std, "GRPO: divide by the group's reward std");
  v.field("gamma", c.gamma, between(0.0, 1.0), "GAE discount");
  v.field("lam", c.lam, between(0.0, 1.0), "GAE lambda");
  v.field("policy_loss", c.policy_loss, required_text(),
          "policy objective: ppo_clip, gspo, sapo, cispo, geo_mean, gpg, clip_cov, kl_cov, or one "
          "algorithm.plugin registers");
  v.field("loss_agg", c.loss_agg,
          one_of({"token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm", "token-mean",
                  "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"}),
          "how per-token losses are averaged");
  v.section("clip", c.clip, "ratio clipping");
  v.section("policy_loss_options", c.policy_loss_options, "knobs of sapo, clip_cov and kl_cov (verl's names)");
  v.section("kl", c.kl, "KL penalty to the reference policy");
  v.section("overlong", c.overlong, "DAPO's soft overlong punishment");
  v.section("filter_groups", c.filter_groups, "DAPO's dynamic sampling");
  v.section("rollout_is", c.rollout_is, "rollout correction: importance weights for the engine's numerical mismatch");
  v.field("entropy_coef", c.entropy_coef, non_negative(), "entropy bonus coefficient");
  v.section("value", c.value, "the critic (advantage: gae): a value head on the policy's trunk");
  v.section("async", c.async, "asynchronous RL: rollout overlapped with training");
  v.field("plugin", c.plugin, text(),
          "shared library (include/tandem/plugin.h, relative to the config file's directory) registering more "
          "advantage estimators and policy losses");
}

template <class V> void describe(V& v, RewardModelConfig& c) {
  v.field("train", c.train, text(),
          "tandem train-rm: JSONL preference pairs {prompt, chosen, rejected} (prompt a string or chat messages, "
          "each answer a string or one assistant message)");
  v.field("val", c.val, text(), "validation pairs in the same form; empty: val_fraction of train is held out");
  v.field("val_fraction", c.val_fraction, above_up_to(0.0, 0.5), "share of train held out when val is empty");
  v.field("batch_size", c.batch_size, at_least(1), "pairs per optimizer step");
  v.field("max_length", c.max_length, at_least(2), "tokens of prompt and answer; longer pairs are left out");
}

template <class V> void describe(V& v, MultiTurnConfig& c) {
  v.field("max_turns", c.max_turns, at_least(1), "model turns per trajectory (a call past the last ends it: max_turns)");
  v.field("max_total_tokens", c.max_total_tokens, at_least(1),
          "tokens after the prompt, the model's and the tool messages' together; each turn's max_new_tokens "
          "shrinks to what is left");
  v.field("max_tool_output_tokens", c.max_tool_output_tokens, at_least(1),
          "a tool message's content is cut to this many tokens");
  v.field("tool_parser", c.tool_parser, required_text(),
          "how tool calls are read off the sampled tokens: hermes (<tool_call>{json}</tool_call>, Qwen2.5/Qwen3) "
          "or a plugin's parser");
  v.field("tool_concurrency", c.tool_concurrency, at_least(1), "tool calls running at once per rollout worker");
  v.field("kv_pin_mb", c.kv_pin_mb, at_least(0),
          "KV cache kept for samples waiting on a tool, per worker (evicted longest-waiting first, then "
          "recomputed); 0: no cap but the cache");
}

template <class V> void describe(V& v, ToolConfig& c) {
  v.field("python", c.python, text(),
          "a Python file (relative to the config file's directory) whose `function` is the tool; it gets the "
          "call's arguments by keyword and returns the text the model reads");
  v.field("function", c.function, text(), "python: the function");
  v.field("builtin", c.builtin, text(), "python: runs the model's code ({\"code\": ...}) in a fresh sandbox per call");
  v.field("http", c.http, text(), "a URL: each call is POSTed as {\"name\", \"arguments\"}, answered by {\"output\": TEXT}");
  v.field("plugin", c.plugin, text(),
          "a C++ plugin library (relative to the config file's directory) that registered the tool `name`");
  v.field("name", c.name, text(), "the name the model calls; default: the function's name, or python (builtin)");
  v.field("schema", c.schema, mapping(),
          "the parameters' JSON schema; {}: from the function's signature and docstring (python tools)");
  v.field("description", c.description, text(), "http and builtin tools: what the tool does, shown to the model");
  v.field("timeout_s", c.timeout_s, positive(), "one call's deadline; past it the trajectory ends (tool_timeout)");
  v.field("memory_mb", c.memory_mb, at_least(16), "builtin python: address-space limit of the sandboxed process, MiB");
  v.field("workers", c.workers, at_least(0),
          "python: tool processes per rollout worker; 0: rollout.multi_turn.tool_concurrency, at most 4");
}

template <class V> void describe(V& v, EnvironmentConfig& c) {
  v.field("python", c.python, text(),
          "a Python file (relative to the config file's directory) with the environment class; empty: none");
  v.field("class", c.class_name, text(),
          "the class: __init__(self, row, **kwargs), reset(self) -> the first user message(s), "
          "step(self, action) -> (observation, reward, done, info)");
  v.field("plugin", c.plugin, text(),
          "or a C++ plugin library (relative to the config file's directory) that registered the environment `name`");
  v.field("name", c.name, text(), "plugin: the environment's registered name");
  v.field("kwargs", c.kwargs, mapping(), "more keyword arguments for __init__ (plugin: the factory's kwargs_json)");
  v.field("timeout_s", c.timeout_s, positive(), "one reset() or step()'s deadline; past it the trajectory ends (tool_timeout)");
  v.field("workers", c.workers, at_least(0),
          "environment processes per rollout worker; 0: rollout.multi_turn.tool_concurrency, at most 4");
}

template <class V> void describe(V& v, RolloutConfig& c) {
  v.field("workers", c.workers, at_least(1), "rollout worker processes");
  v.field("device", c.device, one_of({"cpu", "cuda", "auto"}), "where generation runs");
  v.field("max_new_tokens", c.max_new_tokens, at_least(1), "response length limit in tokens");
  v.field("temperature", c.temperature, positive(), "sampling temperature");
  v.field("top_p", c.top_p, above_up_to(0.0, 1.0), "nucleus sampling mass; 1: off");
  v.field("top_k", c.top_k, at_least(0), "sample among the k most likely tokens; 0: off");
  v.field("kv_cache_mb", c.kv_cache_mb, at_least(1), "KV-cache memory budget per worker, MiB");
  v.field("kv_block_size", c.kv_block_size, at_least(1), "token slots per KV-cache block");
  v.field("max_batch_tokens", c.max_batch_tokens, at_least(1), "tokens per engine step (prefill chunks + decodes)");
  v.field("max_running", c.max_running, at_least(1), "samples decoding at once per worker");
  v.field("threads", c.threads, at_least(0),
          "CPU backend threads per worker; 0: this host's cores / rollout.workers in a run (all cores in "
          "tandem generate)");
  v.field("score_while_generating", c.score_while_generating,
          "rollout workers stream samples as they finish and the rewards score them while the rest generate "
          "(time/reward_hidden_s, perf/reward_hidden_share); false: all scoring after generation");
  v.field("dtype", c.dtype, one_of({"bf16", "fp32"}),
          "CUDA backend storage of weights, activations and KV cache (fp32: for conformance checks)");
  v.field("cpu_weights", c.cpu_weights, one_of({"fp32", "bf16"}),
          "CPU backend: the weights its matrix products read; bf16 rounds its weight matrices (projections, "
          "embedding, LM head) to bfloat16 (half the bytes per token at decode, up to 2x faster at small batches; "
          "activations, the KV cache and the sampled log-probs stay float32; the learner's float32 log-probs then "
          "differ by bf16 rounding: algorithm.rollout_is corrects for it, weight_sync.probe_tolerance must allow it)");
  v.field("gpu_memory_fraction", c.gpu_memory_fraction, strictly_between(0.0, 1.0),
          "CUDA backend: fraction of the GPU memory free after weights and workspace given to the KV cache "
          "(kv_cache_mb applies to the CPU backend only)");
  v.field("prefix_sharing", c.prefix_sharing,
          "the samples of a prompt prefill it once and share its KV blocks, copy-on-write (same tokens and "
          "log-probs; rollout/prefill_tokens_saved); false: each sample prefills its prompt");
  v.field("tensor_parallel", c.tensor_parallel, at_least(1),
          "ranks each worker's engine is split over, as the learner splits a model (heads, MLP columns, vocabulary; "
          "each rank's KV cache holds its KV heads); the CPU backend runs them on the worker's threads");
  v.section("multi_turn", c.multi_turn, "multi-turn rollouts (on when `tools` lists any or an `environment` is set)");
}

template <class V> void describe(V& v, OptimizerConfig& c) {
  v.field("name", c.name, one_of({"adamw", "sgd"}), "optimizer");
  v.field("lr", c.lr, positive(), "peak learning rate");
  v.field("weight_decay", c.weight_decay, non_negative(), "decoupled weight decay");
  v.field("beta1", c.beta1, between(0.0, 0.999999), "Adam beta1");
  v.field("beta2", c.beta2, between(0.0, 0.999999), "Adam beta2");
  v.field("eps", c.eps, positive(), "Adam epsilon");
  v.field("grad_clip", c.grad_clip, non_negative(), "global gradient-norm clip; 0: off");
  v.field("schedule", c.schedule, one_of({"constant", "cosine"}), "learning-rate schedule after warm-up");
  v.field("warmup_steps", c.warmup_steps, at_least(0), "linear warm-up, in optimizer steps");
}

template <class V> void describe(V& v, LoraConfig& c) {
  v.field("rank", c.rank, at_least(0),
          "rank r of low-rank adapters on the base model's projections (LoRA); 0: off, every weight trains");
  v.field("alpha", c.alpha, positive(), "the adapters' output is scaled by alpha / rank");
  v.field("target_modules", c.target_modules, text_list(),
          "all-linear (q/k/v/o and gate/up/down of every layer), or a list of those module names");
  v.field("dropout", c.dropout, between(0.0, 0.9), "dropout on each adapter's input while training");
  v.field("base_dtype", c.base_dtype, one_of({"fp32", "bf16"}),
          "storage of the frozen base model's layer projections: bf16 halves their memory (rounded once at "
          "start; the rollout engines round their base the same way, and the exported policy is that base plus "
          "the adapters)");
}

template <class V> void describe(V& v, LearnerConfig& c) {
  v.field("workers", c.workers, at_least(1), "learner worker processes (data-parallel ranks)");
  v.field("device", c.device, one_of({"cpu", "cuda", "auto"}),
          "where training runs: cuda puts each learner worker on its own GPU (needs a CUDA libtorch, -Dtorch_dir, "
          "and NCCL for several workers); auto picks cuda when both a GPU per worker and a CUDA libtorch are here");
  v.field("sharding", c.sharding, one_of({"ddp", "zero2", "fsdp"}), "data-parallel strategy");
  v.field("tensor_parallel", c.tensor_parallel, at_least(1),
          "ranks each model is split over (Megatron-style: attention heads, MLP columns and vocabulary); workers "
          "must be a multiple, and sharding then applies over the workers / tensor_parallel data-parallel ranks");
  v.field("sequence_parallel", c.sequence_parallel,
          "with tensor_parallel > 1: norms and residual adds run on 1/tensor_parallel of the positions (all-gather "
          "and reduce-scatter in place of the all-reduces), so their activations shrink by that factor");
  v.field("precision", c.precision, one_of({"fp32", "bf16"}),
          "compute dtype of the forward and backward: bf16 casts each float32 master weight where it is used "
          "(norms, softmax, logits, optimizer state stay float32)");
  v.field("epochs", c.epochs, at_least(1), "passes over each step's samples");
  v.field("mini_batches", c.mini_batches, at_least(1), "optimizer steps per epoch");
  v.field("micro_batch_size", c.micro_batch_size, at_least(1), "samples per forward/backward on one rank");
  v.field("threads", c.threads, at_least(0), "intra-op CPU threads per rank; 0: this host's cores / workers");
  v.field("head_logits_memory_mb", c.head_logits_memory_mb, at_least(0),
          "CPU: a micro-batch's float32 LM-head logits (response tokens x vocabulary x 4 bytes) up to this size are "
          "kept from forward for backward, which then skips recomputing them (a quarter of the head's products); "
          "larger ones, and 0, recompute them tile by tile");
  v.field("snapshot", c.snapshot, one_of({"memory", "off"}),
          "memory: each rank copies its state (weights, optimizer, step) to snapshot_dir after every step, so a "
          "learner's death is recovered from the step before it, not from the last checkpoint");
  v.field("snapshot_dir", c.snapshot_dir, required_text(),
          "absolute path of a memory-backed directory (tmpfs) on every learner host for the snapshots");
  v.section("optimizer", c.optimizer, "optimizer and schedule");
  v.section("lora", c.lora, "low-rank adapters: the base model frozen, adapters trained (docs/lora.md)");
}

template <class V> void describe(V& v, RewardConfig& c) {
  v.field("name", c.name, text(),
          "reward function name (built-in, or registered by the plugin); python rewards: the metric name "
          "(default: the file's stem)");
  v.field("plugin", c.plugin, text(),
          "shared library that registers the reward (relative to the config file's directory); empty: built-in");
  v.field("python", c.python, text(),
          "a Python file (relative to the config file's directory) whose `function` scores samples with verl's "
          "signature compute_score(data_source, solution_str, ground_truth, extra_info=None), called by keyword "
          "as verl calls it");
  v.field("function", c.function, required_text(), "python: the function to call");
  v.field("batched", c.batched, "python: call the function once per batch, with lists (data_sources=, "
                                "solution_strs=, ground_truths=, extra_infos=), returning a list");
  v.field("reward_kwargs", c.reward_kwargs, mapping(),
          "python: more keyword arguments for every call (verl's custom_reward_function.reward_kwargs)");
  v.field("needs_ground_truth", c.needs_ground_truth,
          "python, http: every row must hold data.answer_key's field (the ground_truth); false for a reward "
          "that reads none");
  v.field("model", c.model, text(),
          "a reward model directory (a *ForSequenceClassification export of tandem train-rm): each sample's "
          "score, read at its last token");
  v.field("http", c.http, text(),
          "a URL (http:// or https://) scoring samples: JSON batches are POSTed there ({\"samples\": [...]}, "
          "answered by {\"scores\": [...]}; docs/rewards.md)");
  v.field("timeout_s", c.timeout_s, positive(),
          "python: seconds one call may take; a call over it kills and replaces its worker. http: seconds one "
          "request may take. on_error decides the sample's score");
  v.field("workers", c.workers, at_least(0),
          "processes (python), threads (C++) or concurrent requests (http) scoring samples in parallel; 0: this "
          "host's cores (at most 8). model: reward-model worker processes, launched like rollout workers, each "
          "scoring its share of a batch with a prefill-only pass on `device`; 0: the controller scores, on CPU");
  v.field("device", c.device, one_of({"cpu", "cuda", "auto"}),
          "model, workers >= 1: the reward-model workers' backend (auto: cuda when a GPU is usable)");
  v.field("memory_mb", c.memory_mb, at_least(0),
          "python: the memory each worker process may map (RLIMIT_DATA: heap and anonymous maps, reserved or "
          "touched; past it an allocation fails with MemoryError, the sample's error); 0: no limit");
  v.field("max_processes", c.max_processes, at_least(0),
          "python: processes each worker's process group may hold at once (the worker and what it forks); past it "
          "the group is killed and the sample fails; 0: no limit");
  v.field("retries", c.retries, at_least(0),
          "http: attempts after the first when the server cannot be reached, times out, or answers 429 or 5xx "
          "(backoff 0.5 s, doubling)");
  v.field("batch_size", c.batch_size, at_least(0),
          "http: samples per request (0: the step's samples split evenly over `workers` requests); model: samples "
          "per forward (0: 32)");
  v.field("normalize", c.normalize,
          "model: score as (score - mean) / std with the mean and std of the model's scores over its validation "
          "answers, from its config.json (tandem train-rm records them)");
  v.field("missing_eos_penalty", c.missing_eos_penalty, non_negative(),
          "model: subtracted from the score (after normalize) of a sample that does not end with the end of "
          "sequence, which a reward model never saw in training (TRL's missing_eos_penalty); 0: none");
  v.field("weight", c.weight, any_number(), "weight in the summed reward");
  v.field("on_error", c.on_error, one_of({"fail", "fallback"}),
          "a throw or non-finite score: fail stops the run; fallback scores fallback_score (counted)");
  v.field("fallback_score", c.fallback_score, any_number(), "score used when on_error: fallback");
  v.field("pattern", c.pattern, text(), "format reward: the regex a whole response must match");
  v.field("max_length", c.max_length, at_least(0), "length_penalty: response tokens allowed before the penalty");
}

template <class V> void describe(V& v, PythonConfig& c) {
  v.field("path", c.path, text_list(),
          "directories put on the embedded interpreter's sys.path (after the reward file's own directory) before a Python reward is imported "
          "(relative to the config file's directory), e.g. a virtualenv's lib/python3.X/site-packages");
}

template <class V> void describe(V& v, WeightSyncConfig& c) {
  v.field("method", c.method, one_of({"auto", "shm", "collective", "cuda_ipc", "nccl"}),
          "learner -> rollout weight transport");
  v.field("bucket_mb", c.bucket_mb, at_least(1), "transfer bucket size, MiB");
  v.field("probe_every", c.probe_every, at_least(0),
          "every N syncs compare the rollout engine's log-probs of a probe batch with the learner's; 0: off");
  v.field("probe_tolerance", c.probe_tolerance, positive(), "largest log-prob difference the probe accepts");
  v.field("timeout_s", c.timeout_s, positive(),
          "longest wait for a peer during a sync, s: a peer that died is noticed at once and restarted; "
          "one that hangs fails the sync (and the run) at this limit");
}

template <class V> void describe(V& v, SlurmConfig& c) {
  v.field("partition", c.partition, text(), "sbatch --partition; empty: the cluster's default");
  v.field("account", c.account, text(), "sbatch --account; empty: the user's default");
  v.field("time", c.time, text(), "sbatch --time, the job's wall-clock limit (\"04:00:00\"); empty: the partition's");
  v.field("nodes", c.nodes, at_least(1), "sbatch --nodes");
  v.field("gpus_per_node", c.gpus_per_node, at_least(0), "sbatch --gpus-per-node; 0: no GPUs asked for");
  v.field("cpus_per_task", c.cpus_per_task, at_least(0), "CPUs of each worker's job step; 0: Slurm's default");
  v.field("extra_args", c.extra_args, text(), "more sbatch options, whitespace-separated");
  v.field("requeue", c.requeue, "sbatch --requeue: a requeued job resumes from its newest whole checkpoint");
}

template <class V> void describe(V& v, KubernetesConfig& c) {
  v.field("namespace", c.namespace_name, required_text(), "namespace of the rendered objects");
  v.field("run_dir_claim", c.run_dir_claim, text(),
          "PersistentVolumeClaim (ReadWriteMany) mounted as the run directory in every pod; empty: host_path");
  v.field("host_path", c.host_path, text(), "hostPath directory for the run directory when run_dir_claim is empty");
  v.field("gpu_resource", c.gpu_resource, required_text(), "extended resource name of a GPU");
  v.field("service_account", c.service_account, text(), "service account of the pods; empty: the default");
}

template <class V> void describe(V& v, LauncherConfig& c) {
  v.field("kind", c.kind, one_of({"local", "slurm", "kubernetes", "external"}),
          "how worker processes are started: local children, Slurm job steps, Kubernetes pods, or by you "
          "(external: `tandem worker` command lines in RUN_DIR/workers.txt)");
  v.field("auth", c.auth, one_of({"auto", "curve", "none"}),
          "control-plane authentication: curve (ZeroMQ CURVE, keys under RUN_DIR/keys), none, or auto (curve "
          "for every tcp control plane, loopback included; none for the private ipc default)");
  v.field("host", c.host, text(),
          "address the controller binds and workers dial off loopback; empty: the launcher's choice (slurm: the "
          "first node's NodeAddr, kubernetes: every interface)");
  v.field("port", c.port, integer_between(0, 65535), "control-plane TCP port off loopback; 0: any free port");
  v.section("slurm", c.slurm, "sbatch options of `tandem submit`");
  v.section("kubernetes", c.kubernetes, "what `tandem k8s render` writes");
  v.field("register_timeout_s", c.register_timeout_s, positive(), "seconds for all workers to register");
  v.field("heartbeat_interval_s", c.heartbeat_interval_s, positive(), "seconds between heartbeats");
  v.field("heartbeat_timeout_s", c.heartbeat_timeout_s, positive(),
          "seconds without a heartbeat after which a worker counts as hung");
  v.field("command_timeout_s", c.command_timeout_s, positive(), "seconds a worker may take for one command");
  v.field("shutdown_grace_s", c.shutdown_grace_s, non_negative(),
          "seconds workers get to exit after a shutdown before they are killed");
  v.field("max_message_mb", c.max_message_mb, at_least(1), "largest control message accepted, MiB");
  v.field("max_restarts", c.max_restarts, at_least(0), "worker restarts a run survives before it stops");
  v.field("transport", c.transport, one_of({"ipc", "tcp"}), "control-plane transport on one host");
  v.field("hang_stacks_timeout_s", c.hang_stacks_timeout_s, non_negative(),
          "seconds a hung worker gets to write every thread's stack into its log before it is killed; 0: none");
}

template <class V> void describe(V& v, PrometheusConfig& c) {
  v.field("port", c.port, integer_between(-1, 65535),
          "port of the controller's /metrics; -1: off, 0: any free port (written to RUN_DIR/prometheus_port)");
  v.field("bind", c.bind, required_text(), "address /metrics listens on");
}

template <class V> void describe(V& v, StragglerConfig& c) {
  v.field("factor", c.factor, positive(),
          "a worker whose command takes this many times its peers' median is slow (perf/stragglers)");
  v.field("steps", c.steps, at_least(1), "steps in a row a worker must be slow to be reported as a straggler");
  v.field("min_share", c.min_share, between(0, 1),
          "a slow worker's seconds over the median must also be at least this share of the step (the busiest "
          "worker's command time): slower but cheap commands are not stragglers");
}

template <class V> void describe(V& v, EvalConfig& c) {
  v.field("n", c.n, at_least(1), "responses per validation prompt (val/pass@n)");
  v.field("temperature", c.temperature, non_negative(), "sampling temperature of the evaluation; 0: greedy");
  v.field("correct_threshold", c.correct_threshold, any_number(),
          "a response whose summed reward is at least this counts as correct (val/accuracy, val/pass@n)");
}

template <class V> void describe(V& v, LoggingConfig& c) {
  v.field("console", c.console, one_of({"progress", "plain", "quiet"}),
          "progress: a live line; plain: one line per step; quiet: errors only");
  v.field("jsonl", c.jsonl, "write metrics.jsonl");
  v.field("level", c.level, one_of({"debug", "info", "warn", "error"}), "log file level");
  v.field("samples_per_step", c.samples_per_step, at_least(0),
          "completions appended to RUN_DIR/samples.jsonl each step (prompt, response, reward and its parts, "
          "weight version); 0: none");
  v.field("tensorboard", c.tensorboard, "write every metric as a TensorBoard scalar (RUN_DIR/tensorboard/)");
  v.section("prometheus", c.prometheus, "the controller's Prometheus /metrics endpoint");
  v.field("trace_every", c.trace_every, at_least(0),
          "write a Chrome trace of every N-th step to RUN_DIR/traces/step_<N>.json; 0: none");
  v.field("dashboard", c.dashboard, "serve the live dashboard during the run (RUN_DIR/dashboard_url)");
  v.field("dashboard_port", c.dashboard_port, integer_between(0, 65535),
          "the dashboard's port on 127.0.0.1; 0: any free port");
  v.section("straggler", c.straggler, "reporting workers slower than their peers");
}

template <class V> void describe(V& v, Config& c) {
  v.section("experiment", c.experiment, "run identity and length");
  v.section("model", c.model, "the policy");
  v.section("data", c.data, "training prompts");
  v.section("sft", c.sft, "supervised warm-up before RL");
  v.section("algorithm", c.algorithm, "RL objective");
  v.section("reward_model", c.reward_model, "tandem train-rm: a reward model trained on preference pairs");
  v.section("rollout", c.rollout, "generation workers");
  v.section("learner", c.learner, "training workers");
  v.list("reward", c.reward, "reward functions, summed with their weights");
  v.list("tools", c.tools, "tools the policy may call: multi-turn rollouts (docs/agents.md)");
  v.section("environment", c.environment, "an environment replying to each turn: multi-turn rollouts (docs/agents.md)");
  v.section("python", c.python, "the embedded Python interpreter of python rewards");
  v.section("eval", c.eval, "evaluation on data.val (experiment.eval_every, eval_before_train)");
  v.section("weight_sync", c.weight_sync, "weight transfer learner -> rollout");
  v.field("placement", c.placement, one_of({"colocated", "disaggregated"}),
          "colocated: rollout and learner share worker slots; disaggregated: separate processes");
  v.section("launcher", c.launcher, "worker processes and the control plane");
  v.section("logging", c.logging, "console, log files and metrics");
}

}  // namespace tandem
