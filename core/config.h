// The experiment config: plain structs, one per YAML section.
//
// Every knob's default lives here; its name, unit, help text and validation are
// declared once in core/config_schema.h, which the loader, the writer (`tandem
// validate`) and the docs all use. Cross-field rules live in core/config_rules.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem {

struct ExperimentConfig {
  std::string name = "quickstart";
  int64_t seed = 1;
  int64_t steps = 200;
  int64_t checkpoint_every = 50;
  int64_t keep_checkpoints = 2;
  int64_t eval_every = 0;          // evaluate on data.val every N steps; 0: only eval_before_train
  bool eval_before_train = true;   // evaluate once before the first step (with data.val)
};

// The `model:` section (where the policy comes from); the architecture itself is
// actor/model_config.h's ModelConfig, read from the model directory.
struct ModelSourceConfig {
  std::string path = "builtin:tiny";
  std::string dtype = "float32";
};

struct DataConfig {
  std::string train = "builtin:addition";
  std::string val;  // validation prompts (same formats as train); empty: no evaluation
  std::string prompt_key = "prompt";
  int64_t batch_size = 32;  // prompts per step
  bool shuffle = true;
  int64_t max_prompt_length = 0;      // tokens; 0: what the model's positions leave after max_new_tokens
  std::string on_long_prompt = "error";  // error | skip: a prompt over the limit stops the run, or is left out
  std::string answer_key = "answer";     // dotted path to the reference answer; rewards read it as row `answer`
  std::string chat_template = "auto";    // auto | none | PATH: renders message-list prompts
  bool add_generation_prompt = true;     // end the rendered prompt with the assistant turn's header
  bool prompt_as_user_message = false;   // a string prompt becomes [{role: user, content: prompt}], rendered
  std::string system_prompt;             // with prompt_as_user_message: a system message before it
};

// The supervised warm-up stage before RL: token-mean cross-entropy on gold responses
// (a dataset field) so that a fresh policy solves some prompts before RL starts.
struct SftConfig {
  int64_t steps = 0;  // 0: no warm-up
  int64_t batch_size = 64;
  double lr = 3.0e-3;
  std::string response_key = "answer";
};

struct ClipConfig {
  double low = 0.2;
  double high = 0.28;
  double dual_c = 0.0;  // 0: dual clip off
};

struct KlConfig {
  double coef = 0.001;
  std::string estimator = "k3";
  std::string in = "loss";
  bool adaptive = false;
  double target = 0.01;
  double horizon = 10000;  // adaptive: samples over which the coefficient moves by up to 20%
};

// DAPO's soft overlong punishment (Yu et al. 2025): a response within `buffer_len` tokens of
// the length limit loses up to `penalty_factor` of reward, linearly. Off while buffer_len is 0.
struct OverlongConfig {
  int64_t buffer_len = 0;
  double penalty_factor = 1.0;
};

// DAPO's dynamic sampling: groups whose samples all score the same teach nothing (their
// group-relative advantages are 0) and are dropped; more prompts are generated until the
// batch is full. Off while `metric` is empty.
struct FilterGroupsConfig {
  std::string metric;       // "reward" (the sample's reward) or "acc" (reward >= eval.correct_threshold)
  int64_t max_batches = 4;  // generation rounds per step at most (the first included)
};

// Rollout correction (verl's rollout_is): importance weights between the learner's and the
// rollout engine's log-probs of the same tokens, for a synchronous run whose engine differs
// numerically from the learner (bf16, other kernels). Off while `level` is empty.
struct RolloutIsConfig {
  std::string level;            // "token" or "sequence"
  std::string mode = "truncate";  // "truncate": min(w, threshold); "mask": 0 outside [1/threshold, threshold]
  double threshold = 2.0;
};

// The knobs of verl's extra policy losses (algorithm.policy_loss), under verl's names.
struct PolicyLossOptions {
  double tau_pos = 1.0;          // sapo: gate temperature where A > 0
  double tau_neg = 1.05;         // sapo: where A <= 0
  double clip_cov_ratio = 2e-4;  // clip_cov: share of the valid tokens whose gradient is cut
  double clip_cov_lb = 1.0;      // clip_cov: covariance window of the candidates
  double clip_cov_ub = 5.0;
  double kl_cov_ratio = 2e-4;    // kl_cov: share of the valid tokens given the |log ratio| penalty
  double ppo_kl_coef = 1.0;      // kl_cov: that penalty's weight
};

// Asynchronous RL: rollout of the next step runs while the learners train this one.
struct AsyncConfig {
  int64_t max_staleness = 0;  // how many versions a sample's weights may lag the learner's; 0: synchronous
  double is_cap = 2.0;        // truncation of the importance weight pi_learner / pi_rollout
  // A rollout still generating when the learners finish takes their new weights part-way
  // and goes on with them; each token records its weights. Timing decides where, so runs
  // are not bit-reproducible with it on.
  bool partial_rollouts = false;
};

// The critic of PPO with GAE: a value head on the policy's last hidden state (shared trunk).
struct ValueConfig {
  double coef = 0.5;  // weight of the value loss in the learner's loss
  double clip = 0.2;  // value clip range around the rollout-time values; 0: off
};

struct AlgorithmConfig {
  std::string advantage = "grpo";
  int64_t group_size = 8;
  bool normalize_std = true;
  double gamma = 1.0;
  double lam = 1.0;
  std::string policy_loss = "ppo_clip";
  std::string loss_agg = "token_mean";
  ClipConfig clip;
  PolicyLossOptions policy_loss_options;
  KlConfig kl;
  OverlongConfig overlong;
  FilterGroupsConfig filter_groups;
  RolloutIsConfig rollout_is;
  double entropy_coef = 0.0;
  ValueConfig value;  // advantage: gae only
  std::string plugin;  // shared library registering more advantage estimators / policy losses
  AsyncConfig async;
};

// `tandem train-rm`: a Bradley-Terry reward model trained on preference pairs
// (controller/data/preference_pairs.h), from model.path with a scalar head; learner.*,
// experiment.* (steps, checkpoints, eval_every) and logging.* as for a run. Off while
// `train` is empty.
struct RewardModelConfig {
  std::string train;          // JSONL rows {prompt, chosen, rejected}
  std::string val;            // the same for validation; empty: val_fraction of train held out
  double val_fraction = 0.1;
  int64_t batch_size = 32;    // pairs per optimizer step
  int64_t max_length = 1024;  // tokens of prompt and answer; longer pairs are left out
};

// Multi-turn rollouts (on when the config lists tools): budgets and the tool machinery.
struct MultiTurnConfig {
  int64_t max_turns = 4;                // model turns per trajectory
  int64_t max_total_tokens = 2048;      // tokens after the prompt: the model's and the rendered messages
  int64_t max_tool_output_tokens = 256;  // each tool message's content, cut to this many tokens
  std::string tool_parser = "hermes";   // how calls are read off the sampled tokens
  int64_t tool_concurrency = 16;        // tool calls running at once per rollout worker
  int64_t kv_pin_mb = 0;                // KV cache kept for samples waiting on a tool, per worker; 0: no cap but the cache
};

struct RolloutConfig {
  int64_t workers = 2;
  std::string device = "cpu";
  int64_t max_new_tokens = 16;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // 0: off
  int64_t kv_cache_mb = 256;
  int64_t kv_block_size = 16;
  int64_t max_batch_tokens = 2048;
  int64_t max_running = 256;
  int64_t threads = 0;  // 0: all cores
  bool score_while_generating = true;  // stream finished samples to the rewards during generation
  std::string dtype = "bf16";        // cuda: weights, activations and KV cache ("bf16" | "fp32")
  std::string cpu_weights = "fp32";  // cpu: the weights the products read ("fp32" | "bf16")
  double gpu_memory_fraction = 0.85;  // cuda: share of the GPU memory free after weights and workspace for the KV cache
  bool prefix_sharing = true;  // the samples of a prompt prefill it once and share its KV blocks
  // Ranks each worker's engine is split over (actor/tensor_parallel_layout.h, the learner's
  // layout); the CPU backend runs them on the worker's threads, each with its KV heads.
  int64_t tensor_parallel = 1;
  MultiTurnConfig multi_turn;
};

// An environment that replies to the policy's turns (multi-turn rollouts): a Python class
// with __init__(self, row, **kwargs), reset(self) and step(self, action), one instance per
// trajectory (docs/agents.md), or a C++ plugin's. Off while `python` and `plugin` are empty.
struct EnvironmentConfig {
  std::string python;      // the .py file
  std::string class_name;  // key `class`: the class in it
  std::string plugin;      // or a C++ plugin library (include/tandem/agent.h) ...
  std::string name;        // ... and the environment it registered
  std::string kwargs = "{}";  // JSON object: more keyword arguments of __init__
  double timeout_s = 10.0;    // one reset() or step()'s deadline
  int64_t workers = 0;        // environment processes per rollout worker; 0: tool_concurrency, at most 4
};

// A tool the policy may call in multi-turn rollouts: exactly one of python, builtin, http.
struct ToolConfig {
  std::string python;    // a .py file whose `function` is the tool
  std::string function;  // python: the function's name (also the tool's name)
  std::string builtin;   // "python": the model's code, run in a fresh sandbox per call
  std::string http;      // a URL: each call POSTed there as {"name", "arguments"}
  std::string plugin;    // a C++ plugin library whose tool `name` is it (include/tandem/agent.h)
  std::string name;      // the name the model calls; default: the function's, "python", or required for http
  std::string schema = "{}";  // JSON object: the tool's parameters schema; {}: from the function's signature and docstring
  std::string description;    // http, builtin: what the tool does, for the chat template's tool list
  double timeout_s = 10.0;    // one call's deadline
  int64_t memory_mb = 512;    // builtin python: address-space limit of the sandboxed process
  int64_t workers = 0;        // python: processes per rollout worker; 0: tool_concurrency, at most 4
};

struct OptimizerConfig {
  std::string name = "adamw";
  double lr = 1.0e-4;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1.0e-8;
  double grad_clip = 1.0;  // 0: off
  std::string schedule = "constant";
  int64_t warmup_steps = 0;
};

// learner.lora: low-rank adapters (actor/lora.h). rank 0: off, every weight trains.
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 16.0;  // the adapters' output is scaled by alpha / rank
  // all-linear (every projection of every layer: q/k/v/o, gate/up/down), or module names
  // among q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.
  std::vector<std::string> target_modules = {"all-linear"};
  double dropout = 0.0;  // on an adapter's input, in training only
  // Storage of the frozen base's layer projections: fp32, or bf16 (half the memory; the
  // rollout engines round their base alike, so both compute with the same weights).
  std::string base_dtype = "fp32";
  bool enabled() const { return rank > 0; }
};

struct LearnerConfig {
  int64_t workers = 1;
  std::string device = "cpu";
  std::string sharding = "ddp";
  // Ranks each model is split over (actor/tensor_parallel.h); workers = tensor_parallel x
  // the data-parallel size, sharding over the data-parallel ranks.
  int64_t tensor_parallel = 1;
  bool sequence_parallel = true;   // with tensor_parallel > 1: norms and residuals hold 1/T of the positions
  std::string precision = "fp32";  // fp32 | bf16: the compute dtype; parameters and optimizer state stay float32
  int64_t epochs = 1;
  int64_t mini_batches = 1;
  int64_t micro_batch_size = 8;  // samples per forward/backward
  int64_t threads = 0;           // intra-op threads per rank; 0: this host's cores / workers
  // CPU: a micro-batch's float32 LM-head logits up to this size are kept from forward for
  // backward instead of recomputed (learner/head_logprobs.h); 0: always recompute.
  int64_t head_logits_memory_mb = 512;
  // memory | off: after every step each rank copies its state to host shared memory, so a
  // learner's death costs at most the step in progress (no replay from a checkpoint).
  std::string snapshot = "memory";
  std::string snapshot_dir = "/dev/shm";  // where the snapshots live on each learner's host (a tmpfs)
  OptimizerConfig optimizer;
  LoraConfig lora;
  int64_t data_parallel() const { return workers / std::max<int64_t>(1, tensor_parallel); }
};

struct RewardConfig {
  std::string name;    // required, except for python rewards (default: the file's stem)
  std::string plugin;  // empty: built-in reward
  std::string python;  // a .py file: the reward is its `function` (verl's compute_score signature)
  std::string function = "compute_score";
  bool batched = false;     // python: called once per batch with lists
  std::string reward_kwargs = "{}";  // python: more keyword arguments, a JSON object (verl's reward_kwargs)
  bool needs_ground_truth = true;    // python, http: every row must hold data.answer_key
  std::string http;         // a URL: samples are POSTed there in JSON batches
  std::string model;        // a reward model directory (tandem train-rm's export): its score of each sample
  // model, workers >= 1: where its worker processes run it, cpu | cuda | auto (cuda when
  // a GPU is usable). With workers 0 it scores in the controller, on the CPU.
  std::string device = "cpu";
  double timeout_s = 30.0;  // python: longest a call may take; http: longest one request may take
  // Processes (python), threads (C++) or concurrent requests (http), 0: this host's cores;
  // model: reward-model worker processes (launched like rollout workers), 0: none, the
  // controller scores.
  int64_t workers = 0;
  int64_t memory_mb = 8192;    // python: RLIMIT_DATA of each worker process; 0: no limit
  int64_t max_processes = 64;  // python: processes in a worker's process group; 0: no limit
  int64_t retries = 3;      // http: attempts after the first on a connection error, timeout, 429 or 5xx
  int64_t batch_size = 0;   // http: samples per request (0: the step's split over `workers`); model: per forward (0: 32)
  double weight = 1.0;
  std::string on_error = "fail";  // fail | fallback: a throw or non-finite score becomes fallback_score
  double fallback_score = 0.0;
  std::string pattern;         // format: the regex a response must match
  int64_t max_length = 0;      // length_penalty: tokens allowed before the penalty starts
  // model: scores become (score - mean) / std, the mean and standard deviation of the
  // model's scores over its validation answers that config.json records (`mean`, `std`:
  // tandem train-rm writes them, as OpenRLHF's normalize_reward does).
  bool normalize = false;
  // model: subtracted from the score of a sample that does not end with the end of
  // sequence (cut at max_new_tokens): the model never saw such an answer in training, so
  // its score means nothing (TRL's missing_eos_penalty). 0: none.
  double missing_eos_penalty = 0.0;
};

// The reward a config without a `reward:` list gets.
inline RewardConfig default_reward() {
  RewardConfig r;
  r.name = "math_answer";
  return r;
}

// The embedded CPython that runs Python rewards.
struct PythonConfig {
  std::vector<std::string> path;  // directories on sys.path after the reward file's own (a virtualenv's site-packages)
};

struct WeightSyncConfig {
  std::string method = "auto";
  int64_t bucket_mb = 256;
  int64_t probe_every = 0;        // check rollout log-probs against the learner's every N syncs; 0: off
  double probe_tolerance = 1e-3;  // largest log-prob difference the probe accepts
  double timeout_s = 120;         // longest wait for a peer of a sync; a hung peer fails the sync at this limit
};

// launcher.kind: slurm. The sbatch options `tandem submit` writes; inside an allocation
// `tandem run` takes nodes and GPUs from Slurm's environment instead.
struct SlurmConfig {
  std::string partition;        // empty: the cluster's default
  std::string account;          // empty: the user's default
  std::string time;             // wall-clock limit in Slurm's syntax ("04:00:00"); empty: the partition's
  int64_t nodes = 1;
  int64_t gpus_per_node = 0;
  int64_t cpus_per_task = 0;    // 0: Slurm's default
  std::string extra_args;       // more sbatch options, whitespace-separated ("--qos=high --exclusive")
  bool requeue = true;          // sbatch --requeue: a requeued job resumes from its newest checkpoint
};

// launcher.kind: kubernetes. What `tandem k8s render` writes into the manifests.
struct KubernetesConfig {
  std::string namespace_name = "default";  // key: namespace
  std::string run_dir_claim;               // PersistentVolumeClaim holding the run directory; empty: host_path
  std::string host_path;                   // hostPath for the run directory when run_dir_claim is empty
  std::string gpu_resource = "nvidia.com/gpu";
  std::string service_account;             // empty: the namespace's default
};

struct LauncherConfig {
  std::string kind = "local";
  // Control-plane authentication: curve (ZeroMQ CURVE, a key pair per run and per worker),
  // none, or auto (curve whenever the control plane leaves loopback).
  std::string auth = "auto";
  std::string host;   // address the controller binds and workers dial off loopback; empty: the launcher's choice
  int64_t port = 0;   // control-plane TCP port off loopback; 0: any free port (kinds that start workers)
  SlurmConfig slurm;
  KubernetesConfig kubernetes;
  double register_timeout_s = 60.0;
  double heartbeat_interval_s = 0.5;
  double heartbeat_timeout_s = 10.0;
  double command_timeout_s = 600.0;
  double shutdown_grace_s = 5.0;
  int64_t max_message_mb = 64;
  std::string transport = "ipc";  // how workers reach the controller on one host
  int64_t max_restarts = 3;       // worker restarts a run survives before it stops
  // A hung worker (missed heartbeats, command past its timeout) writes every thread's
  // stack into its log before it is killed; seconds the controller waits for them.
  double hang_stacks_timeout_s = 5.0;
};

// Evaluation on data.val: responses drawn with these settings, scored by the config's rewards.
struct EvalConfig {
  int64_t n = 1;                   // responses per validation prompt (pass@n)
  double temperature = 0.0;        // 0: greedy
  double correct_threshold = 1.0;  // a response whose summed reward reaches this counts as correct
};

// logging.prometheus: the controller serves /metrics.
struct PrometheusConfig {
  int64_t port = -1;               // -1: off; 0: any free port (written to RUN_DIR/prometheus_port)
  std::string bind = "127.0.0.1";  // address /metrics listens on
};

// logging.straggler: a worker whose command takes `factor` times the median of its peers'
// (same command, same step) for `steps` steps in a row is reported.
struct StragglerConfig {
  double factor = 1.5;
  int64_t steps = 3;
  double min_share = 0.05;  // the time over the median must be at least this share of the step
};

struct LoggingConfig {
  std::string console = "progress";
  bool jsonl = true;
  std::string level = "info";  // log file level
  int64_t samples_per_step = 4;  // completions appended to samples.jsonl each step; 0: none
  bool tensorboard = false;      // RUN_DIR/tensorboard/events.out.tfevents.*
  PrometheusConfig prometheus;
  int64_t trace_every = 0;       // RUN_DIR/traces/step_<N>.json every N steps; 0: none
  bool dashboard = false;        // serve `tandem dashboard` during the run
  int64_t dashboard_port = 0;    // its port on 127.0.0.1; 0: any free port (RUN_DIR/dashboard_url)
  StragglerConfig straggler;
};

struct Config {
  ExperimentConfig experiment;
  ModelSourceConfig model;
  DataConfig data;
  SftConfig sft;
  AlgorithmConfig algorithm;
  RewardModelConfig reward_model;
  RolloutConfig rollout;
  LearnerConfig learner;
  std::vector<ToolConfig> tools;  // non-empty: multi-turn rollouts with these tools
  EnvironmentConfig environment;  // python set: multi-turn rollouts with this environment
  std::vector<RewardConfig> reward = {default_reward()};
  PythonConfig python;
  EvalConfig eval;
  WeightSyncConfig weight_sync;
  std::string placement = "colocated";
  LauncherConfig launcher;
  LoggingConfig logging;

  bool has_environment() const { return !environment.python.empty() || !environment.plugin.empty(); }
  // Rollouts run as multi-turn trajectories: the config lists tools or an environment.
  bool multi_turn() const { return !tools.empty() || has_environment(); }
};

// A loaded config plus where each key came from, for messages about it later.
struct LoadedConfig {
  Config config;
  std::string source;                          // file path, or "<text>"
  std::map<std::string, std::string> origins;  // key path -> "file:line:col" or "--set k=v"
  // Where a key path was set, or the source file when it was left at its default.
  std::string origin_of(const std::string& key_path) const;
};

// Loads YAML from a file (or text), applies `--set key.path=value` overrides, validates
// every field and the cross-field rules. Throws ConfigError (core/config_error.h) with
// every problem found, each naming file:line:col (or the --set), key path, found, allowed.
LoadedConfig load_config_file(const std::string& path, const std::vector<std::string>& overrides = {});
LoadedConfig load_config_text(const std::string& yaml_text, const std::string& source_name,
                              const std::vector<std::string>& overrides = {});

// The fully resolved config as YAML (defaults included). With `explain`, each key
// carries a comment with its meaning and unit. load_config_text(to_yaml(c)) == c.
std::string config_to_yaml(const Config& config, bool explain = false);

}  // namespace tandem
