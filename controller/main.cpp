// `tandem`: one binary for every role. Parses the command line and dispatches.
#include "controller/cli/cli.h"
#include "core/error.h"
#include "core/math_environment.h"
#include "rewards/python/worker.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string_view>

int main(int argc, char** argv) {
  using namespace tandem;
  if (argc > 1 && std::string_view(argv[1]) == "worker") reexec_with_math_environment(argv);
  CLI::App app{"tandem: reinforcement learning for language-model policies"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows each option's default

  RunArgs run;
  auto* run_cmd = app.add_subcommand("run", "run an experiment from a YAML config");
  run_cmd->add_option("config", run.config_path, "experiment config (YAML)")->required();
  run_cmd->add_option("--set", run.overrides, "override a config key: key.path=value (repeatable)");
  run_cmd->add_option("--run-dir", run.run_dir, "run directory (default: runs/<experiment.name>-<time>)");

  StatusArgs status;
  auto* status_cmd = app.add_subcommand("status", "is a run going, at which step, its workers, its last error");
  status_cmd->add_option("run_dir", status.run_dir, "the run directory")->required();
  DashboardArgs dashboard;
  auto* dashboard_cmd = app.add_subcommand("dashboard", "serve a live page of a run: progress, curves, workers, samples, errors");
  dashboard_cmd->add_option("run_dir", dashboard.run_dir, "the run directory")->required();
  dashboard_cmd->add_option("--port", dashboard.port, "TCP port; 0: any free port (printed, and written to RUN_DIR/dashboard_url)");
  dashboard_cmd->add_option("--bind", dashboard.bind, "address to listen on (the default serves this machine only)");
  ProfileArgs profile;
  auto* profile_cmd =
      app.add_subcommand("profile", "where a traced step's time went: its critical path and each worker's idle share");
  profile_cmd->add_option("run_dir", profile.run_dir, "the run directory")->required();
  profile_cmd->add_option("--step", profile.step, "the step (its trace RUN_DIR/traces/step_<N>.json); default: the newest");
  StopArgs stop;
  auto* stop_cmd = app.add_subcommand("stop", "ask a running run to checkpoint after its current step and stop");
  stop_cmd->add_option("run_dir", stop.run_dir, "the run directory")->required();

  SubmitArgs submit;
  auto* submit_cmd = app.add_subcommand("submit", "submit a launcher.kind: slurm config as a Slurm batch job (sbatch)");
  submit_cmd->add_option("config", submit.config_path, "experiment config (YAML)")->required();
  submit_cmd->add_option("--set", submit.overrides, "override a config key: key.path=value (repeatable)");
  submit_cmd->add_option("--run-dir", submit.run_dir, "run directory on a file system every node sees "
                                                      "(default: runs/<experiment.name>-<time>)");
  submit_cmd->add_flag("--dry-run", submit.dry_run, "print the sbatch script instead of submitting it");

  ResumeArgs resume;
  auto* resume_cmd = app.add_subcommand(
      "resume", "continue an interrupted run from its last good checkpoint, or extend a finished one");
  resume_cmd->add_option("run_dir", resume.run_dir, "the run directory")->required();
  resume_cmd->add_option("--set", resume.overrides,
                         "change a key of the run's config.yaml, e.g. experiment.steps=400 (repeatable)");

  PlotArgs plot;
  auto* plot_cmd = app.add_subcommand("plot", "draw a run's metrics (reward, KL, entropy, length, timings) as SVG");
  plot_cmd->add_option("run_dir", plot.run_dir, "the run directory")->required();
  plot_cmd->add_option("--out", plot.out, "output directory (default: RUN_DIR/plots)");

  ValidateArgs validate;
  auto* validate_cmd = app.add_subcommand("validate", "check a config and print it fully resolved");
  validate_cmd->add_option("config", validate.config_path, "experiment config (YAML)")->required();
  validate_cmd->add_option("--set", validate.overrides, "override a config key: key.path=value (repeatable)");
  validate_cmd->add_flag("--explain", validate.explain, "annotate every key with its meaning and unit");

  WorkerArgs worker;
  auto* worker_cmd = app.add_subcommand("worker", "internal: a worker process, started by a launcher");
  worker_cmd->add_option("--role", worker.role, "rollout | learner | colocated")->required();
  worker_cmd->add_option("--rank", worker.rank, "rank within the role")->required()->check(CLI::NonNegativeNumber);
  worker_cmd->add_option("--controller", worker.controller, "controller address (tcp:// or ipc://)")->required();
  worker_cmd->add_option("--heartbeat-interval", worker.heartbeat_interval_s, "seconds")->check(CLI::PositiveNumber);
  worker_cmd->add_option("--controller-timeout", worker.controller_timeout_s, "seconds")->check(CLI::PositiveNumber);
  worker_cmd->add_option("--max-message-bytes", worker.max_message_bytes, "bytes")->check(CLI::PositiveNumber);
  worker_cmd->add_option("--log-file", worker.log_file, "log file (default: stderr)");
  worker_cmd->add_option("--log-level", worker.log_level, "debug | info | warn | error");
  worker_cmd->add_option("--keys", worker.keys_path,
                         "CURVE key file of this worker (RUN_DIR/keys/ROLE-RANK.key; default: $TANDEM_WORKER_KEYS)");
  worker_cmd->add_option("--keys-wait", worker.keys_wait_s, "seconds to wait for the key file to appear")
      ->check(CLI::NonNegativeNumber);

  python::RewardWorkerOptions reward_worker;
  auto* reward_worker_cmd =
      app.add_subcommand("reward-worker", "internal: runs a Python reward for the controller (stdin/stdout)");
  reward_worker_cmd->add_option("--file", reward_worker.file, "the .py file")->required();
  reward_worker_cmd->add_option("--function", reward_worker.function, "the function to call");
  reward_worker_cmd->add_flag("--batched", reward_worker.batched, "call with lists");
  reward_worker_cmd->add_option("--kwargs", reward_worker.kwargs_json, "more keyword arguments, a JSON object");
  reward_worker_cmd->add_option("--path", reward_worker.search_path, "a directory for sys.path (repeatable)");

  TokenizeArgs tokenize;
  auto* tokenize_cmd = app.add_subcommand("tokenize", "print the token ids of a text as a JSON array (or decode ids)");
  tokenize_cmd->add_option("--tokenizer", tokenize.tokenizer_dir, "model directory with tokenizer.json, or builtin:<preset>")->required();
  auto* text_opt = tokenize_cmd->add_option("--text", tokenize.text, "the text (or, with --decode, a JSON array of ids)");
  auto* file_opt = tokenize_cmd->add_option("--file", tokenize.file, "read the text from this file");
  text_opt->excludes(file_opt);
  tokenize_cmd->add_flag("--decode", tokenize.decode, "input is a JSON array of ids: print the text");

  InitModelArgs init_model;
  auto* init_model_cmd = app.add_subcommand("init-model", "write a random-weight model directory in Hugging Face format");
  auto* preset_opt =
      init_model_cmd->add_option("--preset", init_model.preset, "tiny | small")->check(CLI::IsMember({"tiny", "small"}));
  auto* config_opt = init_model_cmd->add_option(
      "--config", init_model.config_json, "a Hugging Face config.json giving the shape (instead of --preset)");
  preset_opt->excludes(config_opt);
  init_model_cmd->add_option("--tokenizer", init_model.tokenizer_dir,
                             "with --config: a model directory whose tokenizer files are copied (default: byte-level)");
  init_model_cmd->add_option("--out", init_model.out_dir, "output directory (must not exist or be empty)")->required();
  init_model_cmd->add_option("--seed", init_model.seed, "weight initialisation seed");
  init_model_cmd->add_option("--dtype", init_model.dtype, "float32 | bfloat16 | float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));

  GenerateArgs generate;
  auto* generate_cmd = app.add_subcommand("generate", "sample completions from a model on CPU or GPU");
  generate_cmd->add_option("--model", generate.model, "model directory, builtin:<preset>, .gguf or llama2.c .bin")->required();
  auto* prompt_opt = generate_cmd->add_option("--prompt", generate.prompts, "prompt text (repeatable)");
  auto* prompt_ids_opt =
      generate_cmd->add_option("--prompt-ids", generate.prompt_ids, "prompt as token ids 1,2,3 (repeatable)");
  prompt_opt->excludes(prompt_ids_opt);
  generate_cmd->add_option("--n", generate.n, "samples per prompt")->check(CLI::PositiveNumber);
  generate_cmd->add_option("--max-new-tokens", generate.max_new_tokens, "tokens per completion")->check(CLI::PositiveNumber);
  generate_cmd->add_option("--temperature", generate.temperature, "0: greedy")->check(CLI::NonNegativeNumber);
  generate_cmd->add_option("--top-k", generate.top_k, "0: off")->check(CLI::NonNegativeNumber);
  generate_cmd->add_option("--top-p", generate.top_p, "nucleus mass in (0, 1]")->check(CLI::Range(0.0, 1.0));
  generate_cmd->add_option("--seed", generate.seed, "sampling seed");
  generate_cmd->add_option("--stop", generate.stop, "stop string (repeatable)");
  generate_cmd->add_option("--kv-cache-mb", generate.kv_cache_mb, "KV-cache budget, MiB")->check(CLI::PositiveNumber);
  generate_cmd->add_option("--threads", generate.threads, "CPU threads; 0: all cores")->check(CLI::NonNegativeNumber);
  generate_cmd->add_option("--device", generate.device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  generate_cmd->add_option("--dtype", generate.dtype, "cuda: bf16 | fp32")->check(CLI::IsMember({"bf16", "fp32"}));
  generate_cmd->add_flag("--json", generate.json,
                         "JSON Lines: one JSON object per line, per completion (text, ids, log-probs, finish reason)");

  LogprobsArgs logprobs;
  auto* logprobs_cmd = app.add_subcommand("logprobs", "each next token's log-prob under a model, and its top-k alternatives");
  logprobs_cmd->add_option("--model", logprobs.model, "model directory, builtin:<preset>, .gguf or llama2.c .bin")->required();
  auto* lp_text = logprobs_cmd->add_option("--text", logprobs.text, "the text (encoded with the model's tokenizer)");
  auto* lp_ids = logprobs_cmd->add_option("--ids", logprobs.ids, "token ids: 1,2,3");
  lp_text->excludes(lp_ids);
  logprobs_cmd->add_option("--top-k", logprobs.top_k, "alternatives shown per position")->check(CLI::PositiveNumber);
  logprobs_cmd->add_flag("--json", logprobs.json,
                         "JSON Lines: one JSON object per line, per token (position, token, text, logprob, top)");

  ConvertArgs convert;
  auto* convert_cmd = app.add_subcommand("convert", "convert a model between formats: llama2.c .bin, .gguf, Hugging Face directory");
  convert_cmd->add_option("in", convert.in, "llama2.c .bin, .gguf, model directory or builtin:<preset>")->required();
  convert_cmd->add_option("out", convert.out, "the model directory (hf; must not exist or be empty) or file (gguf) to write")->required();
  convert_cmd->add_option("--to", convert.to, "hf | gguf")->check(CLI::IsMember({"hf", "gguf"}));
  convert_cmd->add_option("--dtype", convert.dtype, "f32 | f16 | bf16 (float32 | float16 | bfloat16) | q8_0 (gguf)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "float32", "bfloat16", "float16", "q8_0"}));

  ExportArgs export_args;
  auto* export_cmd = app.add_subcommand("export", "write a run's policy (or any model directory) as a GGUF file or a Hugging Face directory");
  export_cmd->add_option("dir", export_args.dir, "a run directory (its policy/) or a model directory (e.g. a checkpoint)")->required();
  export_cmd->add_option("--format", export_args.format, "gguf | hf")->required()->check(CLI::IsMember({"gguf", "hf"}));
  export_cmd->add_option("--dtype", export_args.dtype, "f32 | f16 | bf16 | q8_0 (gguf)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "float32", "bfloat16", "float16", "q8_0"}));
  export_cmd->add_option("--out", export_args.out, "the file (gguf) or directory (hf) to write; must not exist")->required();

  app.add_subcommand("version", "print the build: versions, CUDA, NCCL, devices");
  auto* plugin_flags_cmd = app.add_subcommand(
      "plugin-flags", "print the compiler flags of a plugin: g++ my_reward.cpp $(tandem plugin-flags) -o libmy_reward.so");

  K8sRenderArgs k8s_render;
  K8sPodArgs k8s_pod;
  auto* k8s_cmd = app.add_subcommand("k8s", "run on Kubernetes: render the objects of a run, or be one of its pods");
  k8s_cmd->require_subcommand(1);
  auto* k8s_render_cmd = k8s_cmd->add_subcommand(
      "render", "write the ConfigMap, headless Service and Indexed Job that run a config (docs/kubernetes.md)");
  k8s_render_cmd->add_option("config", k8s_render.config_path, "experiment config (YAML), launcher.kind: kubernetes")
      ->required();
  k8s_render_cmd->add_option("--image", k8s_render.image, "container image holding tandem")->required();
  k8s_render_cmd->add_option("--out", k8s_render.out,
                             "directory for one file per object and a kustomization.yaml (default: one YAML on stdout)");
  k8s_render_cmd->add_option("--set", k8s_render.overrides, "override a config key: key.path=value (repeatable)");
  k8s_render_cmd->add_option("--run-dir", k8s_render.run_dir,
                             "the run directory, relative to the shared volume (default: the Job's name)");
  auto* k8s_pod_cmd =
      k8s_cmd->add_subcommand("pod", "internal: a pod of the rendered Job (JOB_COMPLETION_INDEX 0: controller, i: worker i)");
  k8s_pod_cmd->add_option("config", k8s_pod.config_path, "the run's config (the ConfigMap's)")->required();
  k8s_pod_cmd->add_option("--run-dir", k8s_pod.run_dir, "the run directory on the shared volume")->required();
  k8s_pod_cmd->add_flag("--dry-run", k8s_pod.dry_run, "print what this pod would run, and run nothing");

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
    if (submit_cmd->parsed()) return cli_submit(submit);
    if (status_cmd->parsed()) return cli_status(status);
    if (stop_cmd->parsed()) return cli_stop(stop);
    if (profile_cmd->parsed()) return cli_profile(profile);
    if (dashboard_cmd->parsed()) return cli_dashboard(dashboard);
    if (resume_cmd->parsed()) return cli_resume(resume);
    if (plot_cmd->parsed()) return cli_plot(plot);
    if (validate_cmd->parsed()) return cli_validate(validate);
    if (worker_cmd->parsed()) return cli_worker(worker);
    if (reward_worker_cmd->parsed()) return python::run_reward_worker(reward_worker);
    if (tokenize_cmd->parsed()) return cli_tokenize(tokenize);
    if (init_model_cmd->parsed()) return cli_init_model(init_model);
    if (generate_cmd->parsed()) return cli_generate(generate);
    if (plugin_flags_cmd->parsed()) return cli_plugin_flags();
    if (convert_cmd->parsed()) return cli_convert(convert);
    if (export_cmd->parsed()) return cli_export(export_args);
    if (k8s_render_cmd->parsed()) return cli_k8s_render(k8s_render);
    if (k8s_pod_cmd->parsed()) return cli_k8s_pod(k8s_pod);
    if (logprobs_cmd->parsed()) {
      if (logprobs.text.empty() && logprobs.ids.empty()) throw UsageError("logprobs: give --text or --ids");
      return cli_logprobs(logprobs);
    }
    return cli_version();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
