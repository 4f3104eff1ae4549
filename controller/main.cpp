// `tandem`: one binary for every role. Parses the command line and dispatches.
#include "controller/cli.h"
#include "core/error.h"

#include <CLI/CLI.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  using namespace tandem;
  CLI::App app{"tandem: reinforcement learning for language-model policies"};
  app.require_subcommand(1);

  RunArgs run;
  auto* run_cmd = app.add_subcommand("run", "run an experiment from a YAML config");
  run_cmd->add_option("config", run.config_path, "experiment config (YAML)")->required();
  run_cmd->add_option("--set", run.overrides, "override a config key: key.path=value (repeatable)");
  run_cmd->add_option("--run-dir", run.run_dir, "run directory (default: runs/<experiment.name>-<time>)");

  ValidateArgs validate;
  auto* validate_cmd = app.add_subcommand("validate", "check a config and print it fully resolved");
  validate_cmd->add_option("config", validate.config_path, "experiment config (YAML)")->required();
  validate_cmd->add_option("--set", validate.overrides, "override a config key: key.path=value (repeatable)");
  validate_cmd->add_flag("--explain", validate.explain, "annotate every key with its meaning and unit");

  WorkerArgs worker;
  auto* worker_cmd = app.add_subcommand("worker", "internal: a worker process, started by a launcher");
  worker_cmd->add_option("--role", worker.role, "rollout | learner")->required();
  worker_cmd->add_option("--rank", worker.rank, "rank within the role")->required()->check(CLI::NonNegativeNumber);
  worker_cmd->add_option("--controller", worker.controller, "controller address (tcp:// or ipc://)")->required();
  worker_cmd->add_option("--heartbeat-interval", worker.heartbeat_interval_s, "seconds")->check(CLI::PositiveNumber);
  worker_cmd->add_option("--controller-timeout", worker.controller_timeout_s, "seconds")->check(CLI::PositiveNumber);
  worker_cmd->add_option("--max-message-bytes", worker.max_message_bytes, "bytes")->check(CLI::PositiveNumber);
  worker_cmd->add_option("--log-file", worker.log_file, "log file (default: stderr)");
  worker_cmd->add_option("--log-level", worker.log_level, "debug | info | warn | error");

  app.add_subcommand("version", "print the build: versions, CUDA, NCCL, devices");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;  // the command line is wrong: nothing started
  }

  try {
    if (run_cmd->parsed()) return cli_run(run);
    if (validate_cmd->parsed()) return cli_validate(validate);
    if (worker_cmd->parsed()) return cli_worker(worker);
    return cli_version();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
