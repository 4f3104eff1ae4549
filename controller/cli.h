// The `tandem` subcommands. Each returns the process exit code:
// 0 done; 2 the config or command line is wrong (nothing started); 1 the run failed;
// 128+N interrupted by signal N.
#pragma once

#include <string>
#include <vector>

namespace tandem {

struct RunArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string run_dir;  // empty: runs/<experiment.name>-<time>
};

struct ValidateArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  bool explain = false;
};

struct WorkerArgs {
  std::string role;
  int rank = 0;
  std::string controller;
  double heartbeat_interval_s = 0.5;
  double controller_timeout_s = 10.0;
  size_t max_message_bytes = 64u << 20;
  std::string log_file;
  std::string log_level = "info";
};

int cli_run(const RunArgs& args);
int cli_validate(const ValidateArgs& args);
int cli_worker(const WorkerArgs& args);
int cli_version();

}  // namespace tandem
