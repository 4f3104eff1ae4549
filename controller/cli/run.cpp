// `tandem run`: validates everything that can be validated before anything starts
// (exit 2, no run directory), then creates the run directory, starts the workers and
// drives the training loop (controller/loop/training_loop.h).
#include "controller/run/checkpoints.h"
#include "controller/cli/cli.h"
#include "controller/launch/k8s_render.h"
#include "controller/launch/launch_plan.h"
#include "controller/run/metrics_writer.h"
#include "controller/run/progress.h"
#include "controller/run/run_dir.h"
#include "controller/run/run_lock.h"
#include "controller/run/run_status.h"
#include "controller/loop/training_loop.h"
#include "controller/workers/worker_pool.h"
#include "core/config.h"
#include "core/config_error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/signals.h"
#include "kernels/device_probe.h"
#include "learner/learner_device.h"
#include "weight_sync/nccl_info.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace tandem {

namespace {

// Only the local launcher runs the workers on this machine: the device checks of other
// kinds happen on the workers' own nodes (each worker refuses a device it lacks).
bool workers_run_here(const Config& c) { return c.launcher.kind == "local"; }

// The GPU transports need what they use to be here: CUDA, and for nccl a GPU per group
// rank (two ranks of one communicator cannot share a GPU).
void check_weight_sync_runnable(const LoadedConfig& loaded) {
  const Config& c = loaded.config;
  const std::string& method = c.weight_sync.method;
  if (method != "cuda_ipc" && method != "nccl") return;
  const int64_t receivers = c.rollout.workers - (c.placement == "colocated" ? 1 : 0);  // slot 0 takes them in memory
  if (receivers == 0) return;  // no transport is used
  if (method == "nccl" && nccl_version().rfind("built without", 0) == 0) {
    throw UsageError(fmt::format("{}: weight_sync.method: nccl, but tandem was built without NCCL; use collective",
                                 loaded.origin_of("weight_sync.method")));
  }
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) {
    throw UsageError(fmt::format("{}: weight_sync.method: {} needs a usable GPU: {}", loaded.origin_of("weight_sync.method"),
                                 method, probe.detail));
  }
  const int64_t ranks = receivers + 1;  // learner rank 0 sends
  if (method == "nccl" && probe.device_count < ranks) {
    throw UsageError(fmt::format(
        "{}: weight_sync.method: nccl puts each of its {} ranks (learner rank 0 and the rollout workers it sends to) "
        "on its own GPU, and this machine has {}; use cuda_ipc to share one GPU",
        loaded.origin_of("weight_sync.method"), ranks, probe.device_count));
  }
}

// A split CUDA engine (rollout.tensor_parallel > 1) runs its ranks on GPUs 0..T-1 over NCCL.
void check_split_rollout_runnable(const LoadedConfig& loaded) {
  const Config& c = loaded.config;
  if (c.rollout.tensor_parallel <= 1) return;
  const std::string where = loaded.origin_of("rollout.tensor_parallel");
  if (nccl_version().rfind("built without", 0) == 0) {
    throw UsageError(fmt::format("{}: rollout.tensor_parallel {} on cuda splits each engine over GPUs with NCCL, but "
                                 "tandem was built without NCCL",
                                 where, c.rollout.tensor_parallel));
  }
  const CudaProbe probe = probe_cuda();
  if (probe.device_count < c.rollout.tensor_parallel) {
    throw UsageError(fmt::format("{}: rollout.tensor_parallel {} puts each engine's ranks on GPUs 0..{}, and this "
                                 "machine has {}",
                                 where, c.rollout.tensor_parallel, c.rollout.tensor_parallel - 1, probe.device_count));
  }
}

}  // namespace

RunInputs check_runnable(const LoadedConfig& loaded) {
  if (loaded.config.launcher.kind == "kubernetes") {
    const std::vector<std::string> problems = k8s_config_problems(loaded, training_workers(loaded.config));
    if (!problems.empty()) throw ConfigError(problems);
  }
  if (workers_run_here(loaded.config)) {
    check_weight_sync_runnable(loaded);
    try {
      if (resolve_device(loaded.config.rollout.device, "rollout.device") == "cuda") {
        check_split_rollout_runnable(loaded);
      }
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{}: {}", loaded.origin_of("rollout.device"), e.what()));
    }
  }
  for (size_t i = 0; i < loaded.config.reward.size(); ++i) {
    const RewardConfig& r = loaded.config.reward[i];
    if (r.model.empty() || r.workers == 0 || loaded.config.launcher.kind != "local") continue;
    const std::string key = fmt::format("reward.{}.device", i);
    try {
      resolve_device(r.device, key);  // the local launcher runs them on this machine
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{}: {}", loaded.origin_of(key), e.what()));
    }
  }
  // learner.device: cuda is checked against this machine by run and resume only
  // (learner_device_problem): validate accepts a config meant for a GPU machine.
  return load_run_inputs(loaded);
}

std::string learner_device_problem(const LoadedConfig& loaded) {
  const LearnerConfig& learner = loaded.config.learner;
  if (learner.device != "cuda" || !workers_run_here(loaded.config)) return "";
  // The local launcher puts every learner rank on this machine: rank r on GPU r.
  try {
    resolve_learner_device("cuda", static_cast<int>(learner.workers) - 1, learner_cuda_support());
  } catch (const Error& e) {
    return fmt::format("{}: {}", loaded.origin_of("learner.device"), e.what());
  }
  return "";
}

namespace {

// launcher.kind: slurm outside an allocation fails before anything is created.
void check_launcher_runnable(const LoadedConfig& loaded) {
  if (loaded.config.launcher.kind == "slurm" && !std::getenv("SLURM_JOB_ID")) {
    throw UsageError(fmt::format("{}: launcher.kind: slurm runs inside a Slurm allocation (SLURM_JOB_ID is not set): "
                                 "submit it with `tandem submit CONFIG`, or run `tandem run` inside sbatch or salloc",
                                 loaded.origin_of("launcher.kind")));
  }
}

void check_learner_device_runnable(const LoadedConfig& loaded) {
  const std::string problem = learner_device_problem(loaded);
  if (!problem.empty()) throw UsageError(problem);
}

// The learner's device as the log says it: auto with what it picked and why.
std::string describe_learner_device(const Config& c) {
  if (c.learner.device != "auto" || !workers_run_here(c)) return c.learner.device;
  const LearnerDevice picked =
      resolve_learner_device("auto", static_cast<int>(c.learner.workers) - 1, learner_cuda_support());
  return fmt::format("{} (auto: {})", picked.type, picked.reason);
}

}  // namespace

namespace {

// A checkpoint's data position indexes the rows the run kept; a --set (or an edited
// dataset) that keeps other rows would continue at another prompt: refused before start.
void check_same_rows(const std::optional<CheckpointRef>& newest, const RunInputs& inputs) {
  if (!newest) return;
  const std::string path = newest->dir + "/controller_state.json";
  const nlohmann::json state = nlohmann::json::parse(read_file(path).value_or("{}"), nullptr, false);
  if (!state.is_object() || !state.contains("data_rows")) return;  // written before data_rows was kept
  const size_t rows = state.at("data_rows").get<size_t>();
  const bool pairs = inputs.preference_train.has_value();
  const size_t now = pairs ? inputs.preference_train->pairs.size() : inputs.data.rows.size();
  if (rows != now) {
    throw UsageError(fmt::format("tandem resume: {} was saved over {} {}, and the config now keeps {} of {}: its data "
                                 "position would point at others (was {} or the file changed?)",
                                 newest->dir, rows, pairs ? "training pairs" : "dataset rows", now,
                                 pairs ? inputs.preference_train->source : inputs.data.source,
                                 pairs ? "reward_model.train, val, val_fraction, max_length"
                                       : "data.train, data.max_prompt_length, rollout.max_new_tokens"));
  }
}

// A train-rm run directory says so (RUN_DIR/reward_model_run): resume continues it as one.
const char* kRewardModelMarker = "/reward_model_run";

// The run's end in RUN_DIR/status.json (the loop wrote the rest as it went).
void mark_run_status(const std::string& run_dir, const std::string& state, const std::string& error) {
  try {
    RunStatus status = read_run_status(run_dir).value_or(RunStatus{});
    status.state = state;
    status.pid = ::getpid();
    status.updated_unix = unix_now();
    // The pool was shut down before this: no worker of the run is left running.
    for (RunWorkerStatus& worker : status.workers) {
      if (worker.state == "ready" || worker.state == "starting") worker.state = "stopped";
    }
    if (!error.empty()) {
      status.last_error = error;
      status.last_error_log = run_dir + "/logs/controller-0.log";
    }
    write_run_status(run_dir, status);
  } catch (const std::exception& e) {
    log::warn("cannot record the run's end in {}: {}", run_status_path(run_dir), e.what());
  }
}

// Starts the workers and drives the loop in an existing run directory.
int run_in(const Config& c, RunInputs inputs, const std::string& run_dir, bool resume) {
  const std::string rollout_device =
      workers_run_here(c) ? resolve_device(c.rollout.device, "rollout.device") : c.rollout.device;
  const std::string learner_device = describe_learner_device(c);
  log::Options log_options;
  log_options.tag = "controller-0";
  log_options.file_path = run_dir + "/logs/controller-0.log";
  log_options.file_level = log::parse_level(c.logging.level);
  log_options.console_level = c.logging.console == "quiet" ? log::Level::error : log::Level::warn;
  log::init(log_options);
  log::info("{} {} in {} (rollout on {}, learner on {})", resume ? "resuming run" : "run", c.experiment.name, run_dir,
            rollout_device, learner_device);
  std::fprintf(stderr, "tandem: %s %s -> %s\n", resume ? "resume" : "run", c.experiment.name.c_str(), run_dir.c_str());
  install_interrupt_handlers(/*stop_on_sigterm=*/c.launcher.kind == "slurm");

  TempDir sockets("tandem-");
  const std::vector<WorkerId> workers =
      inputs.preference_train ? reward_model_workers(c) : training_workers(c);
  LaunchPlan plan = plan_launch(c, run_dir, sockets.path(), workers);
  log::info("{}", plan.description);
  WorkerPool pool(std::move(plan.pool), std::move(plan.launcher));
  try {
    pool.start(workers);
    run_training(pool, c, std::move(inputs), run_dir, resume);
    pool.shutdown("run complete");
  } catch (const StopRequested& e) {
    log::info("{}", e.what());
    std::fprintf(stderr, "\ntandem: %s (continue with: tandem resume %s)\n", e.what(), run_dir.c_str());
    pool.shutdown(e.what());
    mark_run_status(run_dir, "stopped", "");
    return e.signal() != 0 ? 128 + e.signal() : 0;  // `tandem stop` asked for exactly this
  } catch (const Interrupted& e) {
    log::info("{}: stopping the workers", e.what());  // the file only: the console line follows
    std::fprintf(stderr, "\ntandem: %s; stopping the workers (continue with: tandem resume %s)\n", e.what(),
                 run_dir.c_str());
    pool.shutdown(e.what());
    mark_run_status(run_dir, "interrupted", "");
    return 128 + e.signal();
  } catch (const std::exception& e) {
    log::error("{}", e.what());  // "error: ..." on the console, once, and in the controller's log
    pool.shutdown("run failed");
    mark_run_status(run_dir, "failed", e.what());
    return 1;
  }
  log::info("run complete");
  std::fprintf(stderr, "tandem: done; metrics in %s/metrics.jsonl, logs in %s/logs\n", run_dir.c_str(),
               run_dir.c_str());
  return 0;
}

// What train-rm refuses before anything starts, besides what loading its inputs checks.
void check_reward_model_config(const LoadedConfig& loaded) {
  const Config& c = loaded.config;
  if (c.sft.steps > 0) {
    throw UsageError(fmt::format("{}: sft.steps: tandem train-rm trains a reward model, not a policy: warm a policy up "
                                 "in a run of its own",
                                 loaded.origin_of("sft.steps")));
  }
  if (c.reward_model.batch_size < c.learner.workers) {
    throw UsageError(fmt::format("{}: reward_model.batch_size {} gives some of the {} learner ranks no pair; use at "
                                 "least one pair per rank",
                                 loaded.origin_of("reward_model.batch_size"), c.reward_model.batch_size,
                                 c.learner.workers));
  }
}

}  // namespace

namespace {

// A new run directory for `command` (run, train-rm), held by this controller until the run
// ends, then the run. A second controller racing into the same directory finds it taken,
// or (when the first already ended) finds its config.yaml. `marker`, when not empty, is a
// file the directory keeps to say what it holds (resume reads it).
int run_in_new_dir(const Config& c, RunInputs inputs, const std::string& requested_dir, const char* command,
                   const char* marker) {
  std::string run_dir = requested_dir.empty() ? default_run_dir(c.experiment.name) : requested_dir;
  check_run_dir_free(run_dir);
  create_run_dir(run_dir);
  const RunDirLock lock = RunDirLock::acquire(run_dir, command);
  if (std::filesystem::exists(run_dir + "/config.yaml")) check_run_dir_free(run_dir);
  if (marker != nullptr) write_file_atomic(run_dir + marker, fmt::format("tandem {}: what this run trains\n", command));
  write_file_atomic(run_dir + "/config.yaml", config_to_yaml(c));
  return run_in(c, std::move(inputs), run_dir, false);
}

}  // namespace

int cli_run(const RunArgs& args) {
  // Everything that can be wrong with the request is found before anything is created.
  LoadedConfig loaded = load_config_file(args.config_path, args.overrides);
  RunInputs inputs = check_runnable(loaded);
  check_learner_device_runnable(loaded);
  check_launcher_runnable(loaded);
  return run_in_new_dir(loaded.config, std::move(inputs), args.run_dir, "run", nullptr);
}

int cli_train_rm(const RunArgs& args) {
  LoadedConfig loaded = load_config_file(args.config_path, args.overrides);
  check_reward_model_config(loaded);
  RunInputs inputs = load_reward_model_inputs(loaded);
  check_learner_device_runnable(loaded);
  check_launcher_runnable(loaded);
  return run_in_new_dir(loaded.config, std::move(inputs), args.run_dir, "train-rm", kRewardModelMarker);
}

int cli_resume(const ResumeArgs& args) {
  const std::string config_path = args.run_dir + "/config.yaml";
  if (!std::filesystem::is_regular_file(config_path)) {
    throw UsageError(fmt::format("tandem resume: {} is not a run directory (no config.yaml in it)", args.run_dir));
  }
  // Before anything is read or changed: a live controller's directory is its own.
  const RunDirLock lock = RunDirLock::acquire(args.run_dir, "resume");
  LoadedConfig loaded = load_config_file(config_path, args.overrides);
  const int64_t steps = loaded.config.experiment.steps;
  const std::optional<int64_t> finished = finished_steps(args.run_dir);
  const bool reward_model = std::filesystem::exists(args.run_dir + kRewardModelMarker);
  if (finished && *finished >= steps) {
    std::fprintf(stderr,
                 "tandem: %s is finished (%lld steps; the %s is in %s/%s); to train longer: tandem resume "
                 "%s --set experiment.steps=N with N > %lld\n",
                 args.run_dir.c_str(), static_cast<long long>(*finished), reward_model ? "reward model" : "policy",
                 args.run_dir.c_str(), reward_model ? "reward_model" : "policy", args.run_dir.c_str(),
                 static_cast<long long>(*finished));
    return 0;
  }
  if (reward_model) check_reward_model_config(loaded);
  RunInputs inputs = reward_model ? load_reward_model_inputs(loaded) : check_runnable(loaded);
  check_learner_device_runnable(loaded);
  check_launcher_runnable(loaded);
  // Looked up once, after every config check (it reads each checkpoint file against its
  // manifest, and sets a damaged newest one aside).
  const std::optional<CheckpointRef> newest = newest_whole_checkpoint(args.run_dir);
  if (finished && (!newest || newest->step < *finished)) {
    throw UsageError(fmt::format(
        "tandem resume: {} finished at step {} and has no checkpoint of that step to continue from (it ran with "
        "experiment.checkpoint_every: 0, or the checkpoint was removed)",
        args.run_dir, *finished));
  }
  check_same_rows(newest, inputs);
  // The changed config is the run's from now on (a later plain resume continues it).
  if (!args.overrides.empty()) write_file_atomic(config_path, config_to_yaml(loaded.config));
  return run_in(loaded.config, std::move(inputs), args.run_dir, true);
}

}  // namespace tandem
