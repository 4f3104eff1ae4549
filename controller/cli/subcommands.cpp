// Each subcommand's options (CLI11) and the cli_* function that runs it (controller/cli/cli.h).
#include "controller/cli/subcommands.h"

#include "controller/cli/cli.h"
#include "core/error.h"
#include "agent/python_environment_worker.h"
#include "agent/python_tool_worker.h"
#include "rewards/python/worker.h"

#include <cmath>
#include <memory>

namespace tandem {

namespace {

using Runner = std::function<int()>;

// `key.path=value` overrides, as run, submit, validate and k8s render take them.
void add_overrides(CLI::App& c, std::vector<std::string>& overrides) {
  c.add_option("--set", overrides, "override a config key: key.path=value (repeatable)");
}

Runner define_run(CLI::App& c) {
  auto a = std::make_shared<RunArgs>();
  c.add_option("config", a->config_path, "experiment config (YAML)")->required();
  add_overrides(c, a->overrides);
  c.add_option("--run-dir", a->run_dir, "run directory (default: runs/<experiment.name>-<time>)");
  return [a] { return cli_run(*a); };
}

Runner define_train_rm(CLI::App& c) {
  auto a = std::make_shared<RunArgs>();
  c.add_option("config", a->config_path, "config with reward_model.train (YAML)")->required();
  add_overrides(c, a->overrides);
  c.add_option("--run-dir", a->run_dir, "run directory (default: runs/<experiment.name>-<time>)");
  return [a] { return cli_train_rm(*a); };
}

Runner define_status(CLI::App& c) {
  auto a = std::make_shared<StatusArgs>();
  c.add_option("run_dir", a->run_dir, "the run directory")->required();
  return [a] { return cli_status(*a); };
}

Runner define_dashboard(CLI::App& c) {
  auto a = std::make_shared<DashboardArgs>();
  c.add_option("run_dir", a->run_dir, "the run directory")->required();
  c.add_option("--port", a->port, "TCP port; 0: any free port (printed, and written to RUN_DIR/dashboard_url)");
  c.add_option("--bind", a->bind, "address to listen on (the default serves this machine only)");
  return [a] { return cli_dashboard(*a); };
}

Runner define_profile(CLI::App& c) {
  auto a = std::make_shared<ProfileArgs>();
  c.add_option("run_dir", a->run_dir, "the run directory")->required();
  c.add_option("--step", a->step, "the step (its trace RUN_DIR/traces/step_<N>.json); default: the newest");
  return [a] { return cli_profile(*a); };
}

Runner define_stop(CLI::App& c) {
  auto a = std::make_shared<StopArgs>();
  c.add_option("run_dir", a->run_dir, "the run directory")->required();
  return [a] { return cli_stop(*a); };
}

Runner define_submit(CLI::App& c) {
  auto a = std::make_shared<SubmitArgs>();
  c.add_option("config", a->config_path, "experiment config (YAML)")->required();
  add_overrides(c, a->overrides);
  c.add_option("--run-dir", a->run_dir, "run directory on a file system every node sees "
                                        "(default: runs/<experiment.name>-<time>)");
  c.add_flag("--dry-run", a->dry_run, "print the sbatch script instead of submitting it");
  return [a] { return cli_submit(*a); };
}

Runner define_resume(CLI::App& c) {
  auto a = std::make_shared<ResumeArgs>();
  c.add_option("run_dir", a->run_dir, "the run directory")->required();
  c.add_option("--set", a->overrides, "change a key of the run's config.yaml, e.g. experiment.steps=400 (repeatable)");
  return [a] { return cli_resume(*a); };
}

Runner define_plot(CLI::App& c) {
  auto a = std::make_shared<PlotArgs>();
  c.add_option("run_dir", a->run_dir, "the run directory")->required();
  c.add_option("--out", a->out, "output directory (default: RUN_DIR/plots)");
  return [a] { return cli_plot(*a); };
}

Runner define_validate(CLI::App& c) {
  auto a = std::make_shared<ValidateArgs>();
  c.add_option("config", a->config_path, "experiment config (YAML)")->required();
  add_overrides(c, a->overrides);
  c.add_flag("--explain", a->explain, "annotate every key with its meaning and unit");
  return [a] { return cli_validate(*a); };
}

Runner define_worker(CLI::App& c) {
  auto a = std::make_shared<WorkerArgs>();
  c.add_option("--role", a->role, "rollout | learner | colocated | reward_model")->required();
  c.add_option("--rank", a->rank, "rank within the role")->required()->check(CLI::NonNegativeNumber);
  c.add_option("--controller", a->controller, "controller address (tcp:// or ipc://)")->required();
  c.add_option("--heartbeat-interval", a->heartbeat_interval_s, "seconds")->check(CLI::PositiveNumber);
  c.add_option("--controller-timeout", a->controller_timeout_s, "seconds")->check(CLI::PositiveNumber);
  c.add_option("--max-message-bytes", a->max_message_bytes, "bytes")->check(CLI::PositiveNumber);
  c.add_option("--log-file", a->log_file, "log file (default: stderr)");
  c.add_option("--log-level", a->log_level, "debug | info | warn | error");
  c.add_option("--keys", a->keys_path,
               "CURVE key file of this worker (RUN_DIR/keys/ROLE-RANK.key; default: $TANDEM_WORKER_KEYS)");
  c.add_option("--keys-wait", a->keys_wait_s, "seconds to wait for the key file to appear")
      ->check(CLI::NonNegativeNumber);
  return [a] { return cli_worker(*a); };
}

Runner define_reward_worker(CLI::App& c) {
  auto a = std::make_shared<python::RewardWorkerOptions>();
  c.add_option("--file", a->file, "the .py file")->required();
  c.add_option("--function", a->function, "the function to call");
  c.add_flag("--batched", a->batched, "call with lists");
  c.add_option("--kwargs", a->kwargs_json, "more keyword arguments, a JSON object");
  c.add_option("--path", a->search_path, "a directory for sys.path (repeatable)");
  return [a] { return python::run_reward_worker(*a); };
}

Runner define_tool_worker(CLI::App& c) {
  auto a = std::make_shared<python::ToolWorkerOptions>();
  c.add_option("--file", a->file, "the .py file")->required();
  c.add_option("--function", a->function, "the tool's function")->required();
  c.add_option("--name", a->name, "the name the model calls (default: the function's)");
  c.add_option("--path", a->search_path, "a directory for sys.path (repeatable)");
  return [a] { return python::run_tool_worker(*a); };
}

Runner define_env_worker(CLI::App& c) {
  auto a = std::make_shared<python::EnvironmentWorkerOptions>();
  c.add_option("--file", a->file, "the .py file")->required();
  c.add_option("--class", a->class_name, "the environment's class")->required();
  c.add_option("--kwargs", a->kwargs_json, "more keyword arguments for __init__, a JSON object");
  c.add_option("--path", a->search_path, "a directory for sys.path (repeatable)");
  return [a] { return python::run_environment_worker(*a); };
}

Runner define_tokenize(CLI::App& c) {
  auto a = std::make_shared<TokenizeArgs>();
  c.add_option("--tokenizer", a->tokenizer_dir, "model directory with tokenizer.json, or builtin:<preset>")->required();
  auto* text = c.add_option("--text", a->text, "the text (or, with --decode, a JSON array of ids)");
  auto* file = c.add_option("--file", a->file, "read the text from this file");
  text->excludes(file);
  c.add_flag("--decode", a->decode, "input is a JSON array of ids: print the text");
  return [a] { return cli_tokenize(*a); };
}

Runner define_init_model(CLI::App& c) {
  auto a = std::make_shared<InitModelArgs>();
  auto* preset = c.add_option("--preset", a->preset, "tiny | small | tiny-tools")
                     ->check(CLI::IsMember({"tiny", "small", "tiny-tools"}));
  auto* config =
      c.add_option("--config", a->config_json, "a Hugging Face config.json giving the shape (instead of --preset)");
  preset->excludes(config);
  c.add_option("--tokenizer", a->tokenizer_dir,
               "with --config: a model directory whose tokenizer files are copied (default: byte-level)");
  c.add_option("--out", a->out_dir, "output directory (must not exist or be empty)")->required();
  c.add_option("--seed", a->seed, "weight initialisation seed");
  c.add_option("--dtype", a->dtype, "float32 | bfloat16 | float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  return [a] { return cli_init_model(*a); };
}

Runner define_generate(CLI::App& c) {
  auto a = std::make_shared<GenerateArgs>();
  c.add_option("--model", a->model, "model directory, builtin:<preset>, .gguf or llama2.c .bin")->required();
  auto* prompt = c.add_option("--prompt", a->prompts, "prompt text (repeatable)");
  auto* prompt_ids = c.add_option("--prompt-ids", a->prompt_ids, "prompt as token ids 1,2,3 (repeatable)");
  prompt->excludes(prompt_ids);
  c.add_option("--n", a->n, "samples per prompt")->check(CLI::PositiveNumber);
  c.add_option("--max-new-tokens", a->max_new_tokens, "tokens per completion")->check(CLI::PositiveNumber);
  c.add_option("--temperature", a->temperature, "0: greedy")->check(CLI::NonNegativeNumber);
  c.add_option("--top-k", a->top_k, "0: off")->check(CLI::NonNegativeNumber);
  c.add_option("--top-p", a->top_p, "nucleus mass in (0, 1]")->check(CLI::Range(0.0, 1.0));
  c.add_option("--seed", a->seed, "sampling seed");
  c.add_option("--stop", a->stop, "stop string (repeatable)");
  c.add_option("--kv-cache-mb", a->kv_cache_mb, "KV-cache budget, MiB")->check(CLI::PositiveNumber);
  c.add_option("--threads", a->threads, "CPU threads; 0: all cores")->check(CLI::NonNegativeNumber);
  c.add_option("--device", a->device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  c.add_option("--dtype", a->dtype, "cuda: bf16 | fp32")->check(CLI::IsMember({"bf16", "fp32"}));
  c.add_flag("--json", a->json, "JSON Lines: one JSON object per line, per completion (text, ids, log-probs, finish reason)");
  return [a] { return cli_generate(*a); };
}

Runner define_logprobs(CLI::App& c) {
  auto a = std::make_shared<LogprobsArgs>();
  c.add_option("--model", a->model, "model directory, builtin:<preset>, .gguf or llama2.c .bin")->required();
  auto* text = c.add_option("--text", a->text, "the text (encoded with the model's tokenizer)");
  auto* ids = c.add_option("--ids", a->ids, "token ids: 1,2,3");
  text->excludes(ids);
  c.add_option("--top-k", a->top_k, "alternatives shown per position")->check(CLI::PositiveNumber);
  c.add_flag("--json", a->json, "JSON Lines: one JSON object per line, per token (position, token, text, logprob, top)");
  return [a] {
    if (a->text.empty() && a->ids.empty()) throw UsageError("logprobs: give --text or --ids");
    return cli_logprobs(*a);
  };
}

Runner define_convert(CLI::App& c) {
  auto a = std::make_shared<ConvertArgs>();
  c.add_option("in", a->in, "llama2.c .bin, .gguf, model directory or builtin:<preset>")->required();
  c.add_option("out", a->out, "the model directory (hf; must not exist or be empty) or file (gguf) to write")->required();
  c.add_option("--to", a->to, "hf | gguf")->check(CLI::IsMember({"hf", "gguf"}));
  c.add_option("--dtype", a->dtype, "f32 | f16 | bf16 (float32 | float16 | bfloat16) | q8_0 (gguf)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "float32", "bfloat16", "float16", "q8_0"}));
  return [a] { return cli_convert(*a); };
}

Runner define_export(CLI::App& c) {
  auto a = std::make_shared<ExportArgs>();
  c.add_option("dir", a->dir, "a run directory (its policy/) or a model directory (e.g. a checkpoint)")->required();
  c.add_option("--format", a->format, "gguf | hf")->required()->check(CLI::IsMember({"gguf", "hf"}));
  c.add_option("--dtype", a->dtype, "f32 | f16 | bf16 | q8_0 (gguf)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "float32", "bfloat16", "float16", "q8_0"}));
  c.add_option("--out", a->out, "the file (gguf) or directory (hf) to write; must not exist")->required();
  return [a] { return cli_export(*a); };
}

Runner define_version(CLI::App&) {
  return [] { return cli_version(); };
}

Runner define_plugin_flags(CLI::App&) {
  return [] { return cli_plugin_flags(); };
}

// Two of its own: `k8s render` and `k8s pod`.
Runner define_k8s(CLI::App& c) {
  c.require_subcommand(1);
  auto render = std::make_shared<K8sRenderArgs>();
  auto* render_cmd = c.add_subcommand(
      "render", "write the ConfigMap, headless Service and Indexed Job that run a config (docs/kubernetes.md)");
  render_cmd->add_option("config", render->config_path, "experiment config (YAML), launcher.kind: kubernetes")
      ->required();
  render_cmd->add_option("--image", render->image, "container image holding tandem")->required();
  render_cmd->add_option("--out", render->out,
                         "directory for one file per object and a kustomization.yaml (default: one YAML on stdout)");
  add_overrides(*render_cmd, render->overrides);
  render_cmd->add_option("--run-dir", render->run_dir,
                         "the run directory, relative to the shared volume (default: the Job's name)");
  auto pod = std::make_shared<K8sPodArgs>();
  auto* pod_cmd =
      c.add_subcommand("pod", "internal: a pod of the rendered Job (JOB_COMPLETION_INDEX 0: controller, i: worker i)");
  pod_cmd->add_option("config", pod->config_path, "the run's config (the ConfigMap's)")->required();
  pod_cmd->add_option("--run-dir", pod->run_dir, "the run directory on the shared volume")->required();
  pod_cmd->add_flag("--dry-run", pod->dry_run, "print what this pod would run, and run nothing");
  return [render, pod, render_cmd] { return render_cmd->parsed() ? cli_k8s_render(*render) : cli_k8s_pod(*pod); };
}

}  // namespace

void refuse_meaningless_values(CLI::App& command) {
  static const CLI::Validator finite(
      [](std::string& text) -> std::string {
        double value = 0;
        if (CLI::detail::lexical_cast(text, value) && !std::isfinite(value)) return "must be a finite number, not " + text;
        return {};
      },
      "FINITE");
  static const CLI::Validator not_empty(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : std::string(); }, "NONEMPTY");
  for (CLI::Option* option : command.get_options()) {
    if (option->get_type_size() == 0) continue;  // a flag
    // The type name, then the descriptions of the checks it has: "FLOAT:NONNEGATIVE".
    const std::string type = option->get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    if (base == "FLOAT") option->check(finite);
    const std::string name = option->get_name(/*positional=*/false, /*all_options=*/false);
    if (base == "TEXT" && name != "--prompt" && name != "--text" && name != "--stop") option->check(not_empty);
  }
  for (CLI::App* sub : command.get_subcommands({})) refuse_meaningless_values(*sub);
}

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> table = {
      {"run", "run an experiment from a YAML config", define_run},
      {"train-rm", "train a reward model on preference pairs (reward_model.train); export it for reward: model",
       define_train_rm},
      {"status", "is a run going, at which step, its workers, its last error", define_status},
      {"dashboard", "serve a live page of a run: progress, curves, workers, samples, errors", define_dashboard},
      {"profile", "where a traced step's time went: its critical path and each worker's idle share", define_profile},
      {"stop", "ask a running run to checkpoint after its current step and stop", define_stop},
      {"submit", "submit a launcher.kind: slurm config as a Slurm batch job (sbatch)", define_submit},
      {"resume", "continue an interrupted run from its last good checkpoint, or extend a finished one", define_resume},
      {"plot", "draw a run's metrics (reward, KL, entropy, length, timings) as SVG", define_plot},
      {"validate", "check a config and print it fully resolved", define_validate},
      {"worker", "internal: a worker process, started by a launcher", define_worker},
      {"reward-worker", "internal: runs a Python reward for the controller (stdin/stdout)", define_reward_worker},
      {"tool-worker", "internal: runs a Python tool for a rollout worker (stdin/stdout)", define_tool_worker},
      {"env-worker", "internal: hosts a Python environment's instances for a rollout worker (stdin/stdout)",
       define_env_worker},
      {"tokenize", "print the token ids of a text as a JSON array (or decode ids)", define_tokenize},
      {"init-model", "write a random-weight model directory in Hugging Face format", define_init_model},
      {"generate", "sample completions from a model on CPU or GPU", define_generate},
      {"logprobs", "each next token's log-prob under a model, and its top-k alternatives", define_logprobs},
      {"convert", "convert a model between formats: llama2.c .bin, .gguf, Hugging Face directory", define_convert},
      {"export", "write a run's policy (or any model directory) as a GGUF file or a Hugging Face directory",
       define_export},
      {"version", "print the build: versions, CUDA, NCCL, devices", define_version},
      {"plugin-flags", "print the compiler flags of a plugin: g++ my_reward.cpp $(tandem plugin-flags) -o libmy_reward.so",
       define_plugin_flags},
      {"k8s", "run on Kubernetes: render the objects of a run, or be one of its pods", define_k8s},
  };
  return table;
}

}  // namespace tandem
