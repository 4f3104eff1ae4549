#include "core/config_rules.h"

#include "core/foreign_names.h"
#include "core/text.h"

#include <fmt/format.h>

#include <algorithm>

namespace tandem {
namespace {

// What keeps `name` from being one file name (empty when nothing does).
std::string path_component_problem(const std::string& name) {
  if (name == "." || name == "..") return "\"" + name + "\" names a directory, not a run";
  if (name.find('/') != std::string::npos) return "\"" + name + "\" has a /";
  for (const char ch : name) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return "it has a control character";
  }
  if (name.size() > 200) return fmt::format("{} bytes long (at most 200)", name.size());
  return {};
}

}  // namespace

void check_config_rules(const LoadedConfig& loaded, std::vector<std::string>& problems) {
  const Config& c = loaded.config;
  // A rule involves several keys; the message points at the first of them a --set changed
  // (what the user just touched), else the first set in the file, else the first one, and
  // names every key involved with where its value came from.
  auto problem_at = [&](const std::vector<std::string>& keys, const std::string& what) {
    auto set_by = [&](const std::string& k) {
      auto it = loaded.origins.find(k);
      return it == loaded.origins.end() ? std::string() : it->second;
    };
    std::string key;
    for (const auto& k : keys) {
      if (key.empty() && set_by(k).rfind("--set", 0) == 0) key = k;
    }
    for (const auto& k : keys) {
      if (key.empty() && !set_by(k).empty()) key = k;
    }
    if (key.empty()) key = keys[0];
    std::string involved;
    for (const auto& k : keys) {
      const std::string origin = set_by(k);
      involved += fmt::format("{}{} from {}", involved.empty() ? "" : "; ", k,
                              origin.empty() ? std::string("the default") : origin);
    }
    problems.push_back(fmt::format("{}: {}: {}{}", loaded.origin_of(key), key, what,
                                   keys.size() > 1 ? " (" + involved + ")" : std::string()));
  };
  auto problem = [&](const std::string& key_path, const std::string& what) { problem_at({key_path}, what); };

  // Every learner host resolves the snapshot directory alike: no working directory in it.
  if (c.learner.snapshot == "memory" && c.learner.snapshot_dir.front() != '/') {
    problem("learner.snapshot_dir", fmt::format("\"{}\" is not an absolute path", c.learner.snapshot_dir));
  }

  // Prompts are split over rollout workers whole, so that a prompt's group stays together.
  if (c.data.batch_size % c.rollout.workers != 0) {
    problem_at({"data.batch_size", "rollout.workers"},
            fmt::format("{} prompts cannot be split evenly over rollout.workers = {} ({} % {} = {})",
                        c.data.batch_size, c.rollout.workers, c.data.batch_size, c.rollout.workers,
                        c.data.batch_size % c.rollout.workers));
  }

  // Each optimizer step takes one mini-batch, split evenly over learner ranks, then into
  // micro-batches for gradient accumulation.
  // Tensor parallelism: each model spans tensor_parallel ranks, which see the same samples;
  // the data-parallel ranks (workers / tensor_parallel) split them.
  const int64_t tp = c.learner.tensor_parallel;
  if (c.learner.workers % tp != 0) {
    problem_at({"learner.workers", "learner.tensor_parallel"},
               fmt::format("learner.workers {} is not a multiple of learner.tensor_parallel {}: each model spans {} "
                           "ranks",
                           c.learner.workers, tp, tp));
  }
  // LoRA's targets: all-linear, or projection names (a typo would otherwise train nothing).
  if (c.learner.lora.enabled()) {
    const std::vector<std::string> projections = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"};
    if (c.learner.lora.dropout > 0 && c.learner.sharding == "fsdp") {
      // fsdp recomputes each layer for its backward: the recomputation would draw other
      // dropout masks than the forward whose loss it differentiates.
      problem_at({"learner.lora.dropout", "learner.sharding"},
                 "learner.lora.dropout > 0 with learner.sharding fsdp is not supported (fsdp recomputes each layer "
                 "for its backward, with other dropout masks): use ddp or zero2, or dropout 0");
    }
    const auto& targets = c.learner.lora.target_modules;
    if (targets.empty()) problem("learner.lora.target_modules", "names no module: all-linear, or projection names");
    for (const std::string& name : targets) {
      if (name == "all-linear" && targets.size() == 1) continue;
      if (std::find(projections.begin(), projections.end(), name) != projections.end()) continue;
      const std::string guess = closest_match(name, projections);
      problem("learner.lora.target_modules",
              fmt::format("\"{}\" is not a projection of the model{} (all-linear alone, or among q_proj, k_proj, "
                          "v_proj, o_proj, gate_proj, up_proj, down_proj)",
                          name, guess.empty() ? "" : fmt::format(" (did you mean {}?)", guess)));
    }
  }
  const int64_t data_ranks = std::max<int64_t>(1, c.learner.data_parallel());
  const int64_t samples = c.data.batch_size * c.algorithm.group_size;
  const int64_t shards = data_ranks * c.learner.mini_batches;
  const std::string ranks_named = tp > 1 ? fmt::format("learner.workers {} / learner.tensor_parallel {} = {} "
                                                       "data-parallel ranks",
                                                       c.learner.workers, tp, data_ranks)
                                         : fmt::format("learner.workers {}", c.learner.workers);
  if (samples % shards != 0) {
    problem_at({"learner.mini_batches", "learner.workers", "data.batch_size", "algorithm.group_size"},
            fmt::format("{} samples per step (data.batch_size {} x algorithm.group_size {}) cannot be split "
                        "into learner.mini_batches {} x {} = {} equal parts",
                        samples, c.data.batch_size, c.algorithm.group_size, c.learner.mini_batches,
                        ranks_named, shards));
  } else {
    const int64_t per_rank = samples / shards;
    if (per_rank % c.learner.micro_batch_size != 0) {
      problem_at({"learner.micro_batch_size", "learner.mini_batches", "learner.workers", "data.batch_size",
                  "algorithm.group_size"},
              fmt::format("{} samples per rank and mini-batch ({} samples / {} mini-batches / {}) are "
                          "not a multiple of learner.micro_batch_size {}",
                          per_rank, samples, c.learner.mini_batches, ranks_named,
                          c.learner.micro_batch_size));
    }
  }

  // Built-in objectives are known here; a plugin's names only once it is loaded (run start).
  auto known_or_plugin = [&](const std::string& key, const std::string& name, const std::vector<std::string>& built_in) {
    if (!c.algorithm.plugin.empty()) return;
    for (const auto& b : built_in) {
      if (b == name) return;
    }
    const std::string guess = closest_match(name, built_in);
    std::string hint = foreign_name_hint(key, name);
    if (hint.empty() && !guess.empty()) hint = fmt::format(" (did you mean {}?)", guess);
    problem(key, fmt::format("unknown name \"{}\"{}; built-in: {} (another name needs algorithm.plugin, a library "
                             "that registers it)",
                             name, hint, join_choices(built_in)));
  };
  // The names learner/objective_registry.cpp registers (core does not link the learner).
  known_or_plugin("algorithm.advantage", c.algorithm.advantage,
                  {"grpo", "dr_grpo", "rloo", "gae", "reinforce_pp", "grpo_passk", "opo", "gpg",
                   "reinforce_plus_plus_baseline", "remax", "grpo_vectorized", "rloo_vectorized",
                   "reinforce_plus_plus"});
  known_or_plugin("algorithm.policy_loss", c.algorithm.policy_loss,
                  {"ppo_clip", "gspo", "sapo", "cispo", "geo_mean", "gpg", "clip_cov", "kl_cov", "vanilla"});

  const std::string& advantage = c.algorithm.advantage;
  const std::vector<std::string> group_baselines = {"grpo",         "dr_grpo",         "rloo", "grpo_passk", "opo",
                                                    "gpg",          "grpo_vectorized", "rloo_vectorized",
                                                    "reinforce_plus_plus_baseline"};
  if (std::find(group_baselines.begin(), group_baselines.end(), advantage) != group_baselines.end() &&
      c.algorithm.group_size < 2) {
    problem_at({"algorithm.group_size", "algorithm.advantage"},
            fmt::format("advantage {} compares samples of one prompt and needs group_size >= 2, got {} (with one "
                        "sample a prompt has no baseline: reinforce_pp or remax train on single samples)",
                        advantage, c.algorithm.group_size));
  }
  if (advantage == "remax" && c.has_environment()) {
    problem_at({"algorithm.advantage", !c.environment.python.empty() ? "environment.python" : "environment.plugin"},
               "remax's baseline is a greedy answer to the dataset's prompt; an environment makes its prompts in "
               "reset(), so there is none to answer greedily (use grpo or rloo)");
  }
  if (advantage == "remax" && c.algorithm.async.max_staleness > 0) {
    problem_at({"algorithm.advantage", "algorithm.async.max_staleness"},
               "remax generates its greedy baseline on the weights that drew the samples; asynchronous rollout has "
               "moved the rollout workers on by then (use grpo or rloo with async)");
  }
  if (c.algorithm.clip.dual_c != 0.0 && c.algorithm.clip.dual_c <= 1.0) {
    problem("algorithm.clip.dual_c",
            fmt::format("dual clip needs a constant > 1 (or 0 for off), got {}", c.algorithm.clip.dual_c));
  }
  if (c.launcher.heartbeat_timeout_s <= c.launcher.heartbeat_interval_s) {
    problem("launcher.heartbeat_timeout_s",
            fmt::format("must exceed launcher.heartbeat_interval_s ({} <= {})", c.launcher.heartbeat_timeout_s,
                        c.launcher.heartbeat_interval_s));
  }
  if (c.reward.empty() && !c.has_environment()) {
    problem("reward", "at least one reward function is needed (or an environment whose step() gives rewards)");
  }
  for (size_t i = 0; i < c.reward.size(); ++i) {
    const RewardConfig& r = c.reward[i];
    const std::string key = "reward." + std::to_string(i);
    const int sources = !r.python.empty() + !r.plugin.empty() + !r.http.empty() + !r.model.empty();
    if (sources > 1) {
      problem_at({key + ".python", key + ".plugin", key + ".http", key + ".model"},
                 "a reward is one of: a Python file (python), a plugin's (plugin), a server (http), a reward model "
                 "(model)");
    } else if (r.python.empty() && r.http.empty() && r.model.empty() && r.name.empty()) {
      // Where the entry is: the first of its keys the user wrote.
      std::string where = loaded.source;
      auto in_entry = loaded.origins.lower_bound(key + ".");
      if (in_entry != loaded.origins.end() && in_entry->first.rfind(key + ".", 0) == 0) where = in_entry->second;
      problems.push_back(fmt::format("{}: {}.name: missing (required; or give python: FILE.py or http: URL)", where, key));
    }
    if (!r.http.empty() && r.http.rfind("http://", 0) != 0 && r.http.rfind("https://", 0) != 0) {
      problem(key + ".http", fmt::format("\"{}\" is not an http:// or https:// URL", r.http));
    }
    // Settings only another kind of reward reads, changed from their defaults: a sign
    // that the entry is not the kind its author meant.
    const RewardConfig defaults;
    auto only = [&](bool changed, const char* setting, const char* kind) {
      if (changed) {
        problem(key + "." + setting, fmt::format("only {} rewards read {} (this entry is {})", kind, setting, r.name));
      }
    };
    if (r.python.empty()) {
      only(r.function != defaults.function, "function", "python");
      only(r.batched, "batched", "python");
      only(r.reward_kwargs != defaults.reward_kwargs, "reward_kwargs", "python");
    }
    if (r.python.empty() && r.http.empty()) {  // (a model reward reads neither)
      only(r.timeout_s != defaults.timeout_s, "timeout_s", "python and http");
      only(r.needs_ground_truth != defaults.needs_ground_truth, "needs_ground_truth", "python and http");
    }
    if (r.http.empty()) only(r.retries != defaults.retries, "retries", "http");
    if (r.http.empty() && r.model.empty()) only(r.batch_size != defaults.batch_size, "batch_size", "http and model");
    if (!r.model.empty() && r.workers == 0 && r.device != defaults.device) {
      problem(key + ".device", fmt::format("\"{}\" needs workers >= 1: with workers 0 the controller scores, on its "
                                           "CPU",
                                           r.device));
    }
    if (r.model.empty()) {
      only(r.device != defaults.device, "device", "model");
      only(r.normalize, "normalize", "model");
      only(r.missing_eos_penalty != defaults.missing_eos_penalty, "missing_eos_penalty", "model");
    }
  }
  for (size_t i = 0; i < c.tools.size(); ++i) {
    const ToolConfig& t = c.tools[i];
    const std::string key = "tools." + std::to_string(i);
    const int kinds = !t.python.empty() + !t.builtin.empty() + !t.http.empty() + !t.plugin.empty();
    if (kinds != 1) {
      problem_at({key + ".python", key + ".builtin", key + ".http", key + ".plugin"},
                 "a tool is one of: a Python function (python: FILE.py, function: NAME), builtin: python, http: URL, "
                 "a C++ plugin's (plugin: LIB.so, name: NAME)");
      continue;
    }
    if (!t.plugin.empty() && t.name.empty()) problem(key + ".name", "missing (the tool the plugin " + t.plugin + " registered)");
    if (!t.python.empty() && t.function.empty()) problem(key + ".function", "missing (the function in " + t.python + ")");
    if (t.python.empty() && !t.function.empty()) problem(key + ".function", "only python tools read function");
    if (!t.builtin.empty() && t.builtin != "python") {
      problem(key + ".builtin", fmt::format("\"{}\" is not a built-in tool (the built-in tools: python)", t.builtin));
    }
    if (!t.http.empty() && t.http.rfind("http://", 0) != 0 && t.http.rfind("https://", 0) != 0) {
      problem(key + ".http", fmt::format("\"{}\" is not an http:// or https:// URL", t.http));
    }
    if (!t.http.empty() && t.name.empty()) problem(key + ".name", "missing (required for http tools: the name the model calls)");
  }
  for (size_t i = 0; i < c.tools.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      auto name_of = [](const ToolConfig& t) { return !t.name.empty() ? t.name : !t.function.empty() ? t.function : t.builtin; };
      if (!name_of(c.tools[i]).empty() && name_of(c.tools[i]) == name_of(c.tools[j])) {
        problem("tools." + std::to_string(i) + ".name",
                fmt::format("\"{}\" is also tools.{}'s name: the model could not tell them apart", name_of(c.tools[i]), j));
      }
    }
  }
  if (!c.environment.python.empty() && !c.environment.plugin.empty()) {
    problem_at({"environment.python", "environment.plugin"}, "an environment is a Python class or a C++ plugin's, not both");
  }
  if (!c.environment.plugin.empty() && c.environment.name.empty()) {
    problem("environment.name", "missing (the environment the plugin " + c.environment.plugin + " registered)");
  }
  if (!c.environment.python.empty() && c.environment.class_name.empty()) {
    problem("environment.class", "missing (the class in " + c.environment.python + ")");
  }
  if (c.has_environment() && c.sft.steps > 0) {
    problem_at({"sft.steps", !c.environment.python.empty() ? "environment.python" : "environment.plugin"},
               "the supervised warm-up trains on prompts the dataset gives, and with an environment reset() makes "
               "them; warm the model up in a run of its own (tandem run with sft.steps and no environment)");
  }
  if (c.environment.python.empty() && !c.environment.class_name.empty()) {
    problem("environment.python", "missing (the file holding class " + c.environment.class_name + ")");
  }
  if (c.algorithm.async.max_staleness > 0 && c.placement != "disaggregated") {
    problem_at({"algorithm.async.max_staleness", "placement"},
               "asynchronous rollout needs placement: disaggregated (colocated worker slots run rollout and "
               "training one after the other)");
  }
  if (c.algorithm.async.partial_rollouts && c.algorithm.async.max_staleness == 0) {
    problem_at({"algorithm.async.partial_rollouts", "algorithm.async.max_staleness"},
               "partial rollouts continue an asynchronous rollout on newer weights: set max_staleness >= 1");
  }
  const std::string& sync_method = c.weight_sync.method;
  if (c.algorithm.async.max_staleness > 0 && sync_method != "auto" && sync_method != "shm" &&
      sync_method != "cuda_ipc") {
    problem_at({"algorithm.async.max_staleness", "weight_sync.method"},
               fmt::format("asynchronous rollout with {} is not implemented yet (allowed: auto, shm, cuda_ipc: a rollout "
                           "worker restarted while the learners train reloads the last published weights from the "
                           "mailbox; {} would need the busy learners to send them)",
                           sync_method, sync_method));
  }
  // (train-rm evaluates on its validation pairs: reward_model.val or the held-out share.)
  if (c.data.val.empty() && c.reward_model.train.empty() && c.experiment.eval_every > 0) {
    problem("experiment.eval_every", "evaluation needs validation prompts: set data.val");
  }

  // Declared values whose implementation has not landed: refused here, so that `tandem
  // validate` never accepts what `tandem run` cannot do.
  if ((c.launcher.kind == "external" || c.launcher.kind == "kubernetes") && c.launcher.port == 0) {
    problem("launcher.port", fmt::format("launcher.kind {} needs a fixed port: its workers are started elsewhere "
                                         "and must know where to dial",
                                         c.launcher.kind));
  }
  const int64_t length_limit = c.multi_turn() ? c.rollout.multi_turn.max_total_tokens : c.rollout.max_new_tokens;
  if (c.algorithm.overlong.buffer_len >= length_limit) {
    problem_at({"algorithm.overlong.buffer_len",
                c.multi_turn() ? "rollout.multi_turn.max_total_tokens" : "rollout.max_new_tokens"},
               fmt::format("the overlong buffer ({} tokens) must be shorter than the length limit ({} tokens): the "
                           "penalty starts buffer_len tokens before it",
                           c.algorithm.overlong.buffer_len, length_limit));
  }
  if (!c.algorithm.filter_groups.metric.empty() && c.algorithm.group_size < 2) {
    problem_at({"algorithm.filter_groups.metric", "algorithm.group_size"},
               "dynamic sampling drops groups whose samples all score the same; with group_size 1 every group does");
  }
  if (!c.algorithm.filter_groups.metric.empty() && c.algorithm.async.max_staleness > 0) {
    problem_at({"algorithm.filter_groups.metric", "algorithm.async.max_staleness"},
               "dynamic sampling generates more prompts until the batch is full, which asynchronous rollout (one "
               "batch prefetched during training) does not do yet; use one or the other");
  }
  if (!c.algorithm.rollout_is.level.empty() && c.algorithm.async.max_staleness > 0) {
    problem_at({"algorithm.rollout_is.level", "algorithm.async.max_staleness"},
               "asynchronous RL corrects its samples with importance weights already (algorithm.async.is_cap), "
               "against the learners' own log-probs; rollout_is is for synchronous runs");
  }
  if (c.algorithm.kl.adaptive && c.algorithm.kl.in != "reward") {
    problem_at({"algorithm.kl.adaptive", "algorithm.kl.in"},
               "the adaptive coefficient adapts the KL penalty in the reward (as verl's kl_ctrl); set kl.in: reward, "
               "or keep kl.coef fixed in the loss");
  }
  // Ziegler's update multiplies by 1 + error * samples / horizon with error >= -0.2: a
  // horizon of a fifth of a step's samples or less would make the coefficient 0 or negative.
  const double step_samples = static_cast<double>(c.data.batch_size * c.algorithm.group_size);
  if (c.algorithm.kl.adaptive && c.algorithm.kl.horizon <= 0.2 * step_samples) {
    problem_at({"algorithm.kl.horizon", "data.batch_size", "algorithm.group_size"},
               fmt::format("the adaptive coefficient shrinks by up to 20% x samples / horizon per step: with {} samples "
                           "a step the horizon must exceed {} (it is in samples, as Ziegler et al.'s)",
                           step_samples, 0.2 * step_samples));
  }
  if (c.algorithm.policy_loss == "clip_cov" &&
      c.algorithm.policy_loss_options.clip_cov_lb >= c.algorithm.policy_loss_options.clip_cov_ub) {
    problem_at({"algorithm.policy_loss_options.clip_cov_lb", "algorithm.policy_loss_options.clip_cov_ub"},
               fmt::format("clip_cov's covariance window needs lb < ub, got {} and {}",
                           c.algorithm.policy_loss_options.clip_cov_lb, c.algorithm.policy_loss_options.clip_cov_ub));
  }
  if (c.algorithm.kl.adaptive && c.algorithm.kl.coef <= 0) {
    problem_at({"algorithm.kl.adaptive", "algorithm.kl.coef"},
               "the adaptive coefficient multiplies kl.coef step by step, so it needs kl.coef > 0 to start from");
  }
  if (c.experiment.keep_checkpoints < 1) problem("experiment.keep_checkpoints", "must keep at least one");
  if (std::string why = path_component_problem(c.experiment.name); !why.empty()) {
    problem("experiment.name", "the run directory defaults to runs/<name>-<time>, so the name is one file name: " + why);
  }
}

}  // namespace tandem
