// The `tandem` subcommands. Each returns the process exit code:
// 0 done; 2 the config or command line is wrong (nothing started); 1 the run failed;
// 128+N interrupted by signal N.
#pragma once

#include "controller/run/run_inputs.h"
#include "core/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct RunArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string run_dir;  // empty: runs/<experiment.name>-<time>
};

struct StatusArgs {
  std::string run_dir;
};
int cli_status(const StatusArgs& args);

// `tandem dashboard RUN_DIR`: a live page of the run (controller/observe/dashboard_server.h).
struct DashboardArgs {
  std::string run_dir;
  int port = 0;                   // 0: any free port
  std::string bind = "127.0.0.1";  // reach it from elsewhere with ssh -L (docs/dashboard.md)
};
int cli_dashboard(const DashboardArgs& args);

struct ProfileArgs {
  std::string run_dir;
  int64_t step = -1;  // -1: the newest traced step
};
int cli_profile(const ProfileArgs& args);

struct StopArgs {
  std::string run_dir;
};
int cli_stop(const StopArgs& args);

struct SubmitArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string run_dir;  // empty: runs/<experiment.name>-<time>, made absolute
  bool dry_run = false;
};
int cli_submit(const SubmitArgs& args);

struct ResumeArgs {
  std::string run_dir;
  std::vector<std::string> overrides;  // --set: e.g. experiment.steps=N extends a run
};

struct PlotArgs {
  std::string run_dir;
  std::string out;  // empty: RUN_DIR/plots/
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
  // CURVE key file (core/curve_auth.h); empty: $TANDEM_WORKER_KEYS, and without that none.
  std::string keys_path;
  double keys_wait_s = 120.0;  // how long to wait for the key file to appear
};

struct TokenizeArgs {
  std::string tokenizer_dir;  // a model directory holding tokenizer.json
  std::string text;           // --text
  std::string file;           // --file (instead of --text)
  bool decode = false;        // input is a JSON array of ids; print the text
};

struct InitModelArgs {
  std::string preset;  // tiny | small (or config_json instead)
  std::string config_json;    // a Hugging Face config.json giving the shape (e.g. Qwen3-0.6B's)
  std::string tokenizer_dir;  // with config_json: the tokenizer files to copy (default: byte-level)
  std::string out_dir;
  int64_t seed = 1;
  std::string dtype = "float32";
};

struct LogprobsArgs {
  std::string model;  // a model directory, builtin:<preset> or a llama2.c .bin
  std::string text;   // --text (encoded with the model's tokenizer)
  std::string ids;    // --ids 1,2,3 (instead of --text)
  int64_t top_k = 5;
  bool json = false;
};

struct ConvertArgs {
  std::string in;   // a llama2.c .bin, a .gguf, a model directory or builtin:<preset>
  std::string out;  // the model directory (hf) or file (gguf) to write
  std::string to = "hf";  // hf | gguf
  std::string dtype = "float32";  // f32 | f16 | bf16 (float32 | float16 | bfloat16) | q8_0 (gguf)
};

struct ExportArgs {
  std::string dir;     // a run directory (its policy/) or a model directory
  std::string format;  // gguf | hf
  std::string dtype = "f32";
  std::string out;
};

struct GenerateArgs {
  std::string model;  // a model directory, builtin:<preset> or a llama2.c .bin
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;  // --prompt-ids 1,2,3 (repeatable): prompts as token ids
  int n = 1;
  int max_new_tokens = 64;
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
  int64_t seed = 1;
  std::vector<std::string> stop;
  bool json = false;  // one JSON line per completion with ids and log-probs
  int64_t kv_cache_mb = 256;
  int threads = 0;
  std::string device = "cpu";  // cpu | cuda
  std::string dtype = "bf16";  // cuda: bf16 | fp32
};

int cli_run(const RunArgs& args);
// `tandem train-rm CONFIG`: a reward model on reward_model.train's preference pairs
// (controller/loop/reward_model_steps.cpp), in a run directory like a run's; resumed by
// `tandem resume`, exported to RUN_DIR/reward_model as a sequence classifier.
int cli_train_rm(const RunArgs& args);
int cli_resume(const ResumeArgs& args);
int cli_plot(const PlotArgs& args);
int cli_tokenize(const TokenizeArgs& args);
int cli_init_model(const InitModelArgs& args);
int cli_generate(const GenerateArgs& args);
int cli_convert(const ConvertArgs& args);
int cli_export(const ExportArgs& args);
int cli_logprobs(const LogprobsArgs& args);
int cli_validate(const ValidateArgs& args);
// Everything `run` and `resume` check before they create or touch a run directory, and
// `validate` checks too: GPU transports and devices, then the model, dataset and rewards
// (run_inputs.h). Any problem is a UsageError (exit 2).
RunInputs check_runnable(const LoadedConfig& loaded);
// Why learner.device: cuda cannot train on this machine ("" when it can, or the config
// asks for cpu or auto). `run` and `resume` refuse such a config (UsageError) before they
// start; `validate` accepts it with a note: the config may be meant for a GPU machine.
std::string learner_device_problem(const LoadedConfig& loaded);
int cli_worker(const WorkerArgs& args);
// Prints the compiler flags that build a plugin library against this tandem.
int cli_plugin_flags();
int cli_version();

// `tandem k8s render CONFIG --image IMAGE [--out DIR] [--set k=v]... [--run-dir PATH]`:
// the Kubernetes objects of a run (controller/launch/k8s_render.h).
struct K8sRenderArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string image;
  std::string out;      // empty: one multi-document YAML on stdout
  std::string run_dir;  // relative to the shared volume; empty: the Job's name
};
int cli_k8s_render(const K8sRenderArgs& args);

// `tandem k8s pod CONFIG --run-dir RUN`: the entrypoint of each pod of the rendered Job
// (controller/launch/k8s_discovery.h): pod 0 runs (or resumes) the controller, pod i worker i.
struct K8sPodArgs {
  std::string config_path;
  std::string run_dir;
  bool dry_run = false;  // print what this pod would run, run nothing
};
int cli_k8s_pod(const K8sPodArgs& args);

}  // namespace tandem
