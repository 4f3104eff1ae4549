// What a new user meets first: every check that can run before training runs in
// `tandem validate` and in `tandem run` before a run directory exists (exit 2, naming
// file:line:col or the dataset's file:line); long prompts; paths relative to the config
// file; finished runs that resume as finished, extend, and replace their policy;
// checkpoints that are models; the metrics and samples a researcher reads.
#include "core/files.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// A small run over a JSONL dataset, one section per line; a case changes one section.
struct SmallConfig {
  std::string experiment = "{name: first-use, seed: 2, steps: 3, checkpoint_every: 2, keep_checkpoints: 2}";
  std::string model = "{path: \"builtin:tiny\"}";
  std::string data = "{train: data/ok.jsonl, batch_size: 4}";
  std::string algorithm = "{group_size: 2}";
  std::string rollout = "{workers: 1, max_new_tokens: 3, kv_cache_mb: 8}";
  std::string learner = "{workers: 1, micro_batch_size: 8}";
  std::string extra;  // more lines
  std::string text() const {
    return fmt::format("experiment: {}\nmodel: {}\ndata: {}\nalgorithm: {}\nrollout: {}\nlearner: {}\n"
                       "logging: {{console: plain}}\n{}",
                       experiment, model, data, algorithm, rollout, learner, extra);
  }
};

SmallConfig with(std::string SmallConfig::*section, const std::string& value) {
  SmallConfig c;
  c.*section = value;
  return c;
}

const char* kRows = "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n{\"prompt\": \"4+4=\", \"answer\": \"8\"}\n";

struct RefusedCase {
  std::string name;
  std::string config;     // the config file's text
  std::string expected;   // the start of the message (after the directory prefix is substituted)
};

}  // namespace

TEST_CASE("validate and run refuse, before anything starts, what run cannot do (exit 2, where it is wrong)") {
  TempDir dir;
  const std::string d = dir.path();
  write_text(d + "/data/ok.jsonl", kRows);
  write_text(d + "/data/malformed.jsonl", "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n{\"prompt\": \"1+\n");
  write_text(d + "/data/no_answer.jsonl", "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n\n{\"prompt\": \"2+2=\"}\n");
  write_text(d + "/data/long.jsonl", "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n{\"prompt\": \"12345+67890=\", \"answer\": \"1\"}\n");
  write_text(d + "/data/empty_prompt.jsonl", "{\"prompt\": \"\", \"answer\": \"3\"}\n");
  // verl's layout: the ground truth under reward_model, not at `answer`.
  write_text(d + "/data/verl.jsonl",
             "{\"data_source\": \"openai/gsm8k\", \"prompt\": \"1+2=\", \"reward_model\": {\"style\": \"rule\", "
             "\"ground_truth\": \"3\"}, \"extra_info\": {\"index\": 0}}\n");
  write_text(d + "/verl_reward.py",
             "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
             "    return float(solution_str.strip() == ground_truth)\n");
  fs::create_directories(d + "/not_a_model");
  write_text(d + "/data/deep.jsonl", std::string(kRows).substr(0, std::string(kRows).find('\n') + 1) +
                                         "{\"prompt\": " + std::string(100000, '[') + std::string(100000, ']') + "}\n");
  REQUIRE(::mkfifo((d + "/data/fifo.jsonl").c_str(), 0600) == 0);  // a reader would wait forever for a writer
  const std::vector<RefusedCase> cases = {
      {"adaptive kl in the loss", with(&SmallConfig::algorithm, "{group_size: 2, kl: {adaptive: true}}").text(),
       "algorithm.kl.adaptive: the adaptive coefficient adapts the KL penalty in the reward"},
      {"overlong buffer past the limit",
       with(&SmallConfig::algorithm, "{group_size: 2, overlong: {buffer_len: 9999}}").text(),
       "algorithm.overlong.buffer_len: the overlong buffer (9999 tokens) must be shorter than the length limit"},
      {"async colocated", with(&SmallConfig::algorithm, "{group_size: 2, async: {max_staleness: 1}}").text(),
       "c.yaml:4:36: algorithm.async.max_staleness: asynchronous rollout needs placement: disaggregated"},
      {"partial rollouts, synchronous",
       with(&SmallConfig::algorithm, "{group_size: 2, async: {partial_rollouts: true}}").text(),
       "algorithm.async.partial_rollouts: partial rollouts continue an asynchronous rollout on newer weights"},
      {"async over a group transport",
       [] {
         SmallConfig c = with(&SmallConfig::algorithm, "{group_size: 2, async: {max_staleness: 1}}");
         c.extra = "placement: disaggregated\nweight_sync: {method: collective}\n";
         return c.text();
       }(),
       "algorithm.async.max_staleness: asynchronous rollout with collective is not implemented yet"},
      {"missing dataset", with(&SmallConfig::data, "{train: data/missing.jsonl}").text(),
       "c.yaml:3:8: data.train: cannot read " + d + "/data/missing.jsonl: No such file or directory"},
      {"malformed line", with(&SmallConfig::data, "{train: data/malformed.jsonl}").text(),
       d + "/data/malformed.jsonl:2:"},  // file:line:column; the library's own "line 1" is not shown
      {"no answer for math_answer", with(&SmallConfig::data, "{train: data/no_answer.jsonl}").text(),
       d + "/data/no_answer.jsonl:3: no \"answer\" field (the answer reward.0 (math_answer) compares)"},
      {"no sft response", with(&SmallConfig::extra, "sft: {steps: 2, response_key: solution}\n").text(),
       d + "/data/ok.jsonl:1: no \"solution\" field (sft.response_key, the warm-up's gold response)"},
      {"model that does not load", with(&SmallConfig::model, "{path: not_a_model}").text(),
       "c.yaml:2:9: model.path: model directory \"" + d + "/not_a_model\" has no config.json"},
      {"unknown preset", with(&SmallConfig::model, "{path: \"builtin:huge\"}").text(),
       "c.yaml:2:9: model.path: unknown model preset \"huge\""},
      {"unknown task", with(&SmallConfig::data, "{train: \"builtin:addition7\"}").text(),
       "c.yaml:3:8: data.train: unknown built-in task \"builtin:addition7\" (did you mean builtin:addition?)"},
      {"max_new_tokens past the positions", with(&SmallConfig::rollout, "{workers: 1, max_new_tokens: 4096}").text(),
       "c.yaml:5:23: rollout.max_new_tokens: 4096 leaves no room for a prompt in the model's 2048 positions"},
      {"long prompt", with(&SmallConfig::data, "{train: data/long.jsonl, max_prompt_length: 6}").text(),
       d + "/data/long.jsonl:2: the prompt is 12 tokens, over the limit of 6 (data.max_prompt_length)"},
      {"empty prompt", with(&SmallConfig::data, "{train: data/empty_prompt.jsonl}").text(),
       d + "/data/empty_prompt.jsonl:1: the prompt (field \"prompt\") is empty"},
      {"verl rows, default answer_key, a python reward",
       [] {
         SmallConfig c = with(&SmallConfig::data, "{train: data/verl.jsonl, batch_size: 4}");
         c.extra = "reward: [{python: verl_reward.py, workers: 1}]\n";
         return c.text();
       }(),
       d + "/data/verl.jsonl:1: no \"answer\" field (the ground_truth reward.0 (verl_reward) is given; set "
           "reward.0.needs_ground_truth: false if it reads none); the row has verl's layout: set data.answer_key: "
           "reward_model.ground_truth"},
      {"prompt_key a builtin task lacks", with(&SmallConfig::data, "{train: \"builtin:addition\", prompt_key: nope}").text(),
       "c.yaml:3:35: data.prompt_key: \"nope\": builtin:addition rows have the fields prompt and answer (and trace) only"},
      {"unknown reward", with(&SmallConfig::extra, "reward: [{name: math}]\n").text(),
       "c.yaml:8:11: reward.0.name: unknown reward function"},
      {"empty config", "# nothing yet\n", d + "/c.yaml: the config file is empty"},
      // Hostile or careless input (issue 29): each refused with where it is wrong.
      {"a name that leaves runs/", with(&SmallConfig::experiment, "{name: ../../escape, steps: 3}").text(),
       "c.yaml:1:14: experiment.name: the run directory defaults to runs/<name>-<time>, so the name is one file "
       "name: \"../../escape\" has a /"},
      {"a row nested 100000 deep", with(&SmallConfig::data, "{train: data/deep.jsonl}").text(),
       d + "/data/deep.jsonl:2: the row nests arrays and objects more than 64 deep"},
      {"a FIFO as the dataset", with(&SmallConfig::data, "{train: data/fifo.jsonl}").text(),
       "data.train: cannot read " + d + "/data/fifo.jsonl: it is a FIFO (named pipe), not a regular file"},
      {"a device as the dataset", with(&SmallConfig::data, "{train: /dev/zero}").text(),
       "data.train: cannot read /dev/zero: it is a character device, not a regular file"},
      {"a second YAML document", SmallConfig().text() + "---\nexperiment: {name: other}\n",
       "c.yaml:9:1: a second YAML document (after ---)"},
      {"a NUL in a key", SmallConfig().text() + "\"a\\0b\": 1\n", "c.yaml:8:1: a\\x00b: unknown key"},
  };
  for (const RefusedCase& refused : cases) {
    INFO(refused.name);
    write_text(d + "/c.yaml", refused.config);
    const std::string out = d + "/out.txt";
    fs::remove(out);
    CHECK(run_tandem({"validate", d + "/c.yaml"}, out).exit_code == 2);
    const std::string validate_text = read_text(out);
    CHECK_MESSAGE(validate_text.find(refused.expected) != std::string::npos, validate_text);
    fs::remove(out);
    CHECK(run_tandem({"run", d + "/c.yaml", "--run-dir", d + "/run"}, out).exit_code == 2);
    CHECK_MESSAGE(read_text(out).find(refused.expected) != std::string::npos, read_text(out));
    CHECK_FALSE(fs::exists(d + "/run"));
    // One message, said once.
    CHECK(read_text(out).find(refused.expected, read_text(out).find(refused.expected) + 1) == std::string::npos);
  }
  const std::string out = d + "/out.txt";
  // learner.device: cuda is a valid config: validate accepts it (with a note where it cannot
  // train); run refuses it before it starts on a machine without a GPU or a CUDA libtorch.
  write_text(d + "/c.yaml", with(&SmallConfig::learner, "{workers: 1, micro_batch_size: 8, device: cuda}").text());
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml"}, out).exit_code == 0);
  const std::string cuda_refused = "c.yaml:6:44: learner.device: cuda cannot train here: ";
  if (read_text(out).find("validate: note: `tandem run` on this machine refuses it: ") == std::string::npos) {
    MESSAGE("skipped: this machine has a GPU and a CUDA libtorch, so learner.device: cuda trains here");
  } else {
    CHECK_MESSAGE(read_text(out).find(cuda_refused) != std::string::npos, read_text(out));
    fs::remove(out);
    CHECK(run_tandem({"run", d + "/c.yaml", "--run-dir", d + "/run"}, out).exit_code == 2);
    const std::string text = read_text(out);
    CHECK_MESSAGE(text.find(cuda_refused) != std::string::npos, text);
    CHECK(text.find("Train on the CPU with learner.device: cpu") != std::string::npos);
    CHECK_FALSE(fs::exists(d + "/run"));
  }
  // launcher.kind: slurm is a valid config; run refuses it outside a Slurm allocation.
  write_text(d + "/c.yaml", with(&SmallConfig::extra, "launcher: {kind: slurm}\n").text());
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml"}, out).exit_code == 0);
  fs::remove(out);
  CHECK(run_tandem({"run", d + "/c.yaml", "--run-dir", d + "/run"}, out).exit_code == 2);
  CHECK_MESSAGE(read_text(out).find("c.yaml:8:12: launcher.kind: slurm runs inside a Slurm allocation (SLURM_JOB_ID is "
                                    "not set): submit it with `tandem submit CONFIG`") != std::string::npos,
                read_text(out));
  CHECK_FALSE(fs::exists(d + "/run"));
  // A data.prompt_key the rows lack, given on the command line.
  write_text(d + "/c.yaml", SmallConfig().text());
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml", "--set", "data.prompt_key=question"}, out).exit_code == 2);
  CHECK(read_text(out).find(d + "/data/ok.jsonl:1: no \"question\" field (data.prompt_key)") != std::string::npos);
  // reward[0] and reward.0 are the same key on the command line; messages say reward.0.
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml", "--set", "reward[0].name=nope"}, out).exit_code == 2);
  CHECK(read_text(out).find("--set reward[0].name=nope: reward.0.name: unknown reward function") != std::string::npos);
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml", "--set", "reward[0].weight=2"}, out).exit_code == 0);
  CHECK(read_text(out).find("weight: 2") != std::string::npos);
  // Names from verl's configs: its registry names are ours too (configs carry over); the
  // few that differ are translated, not only spell-checked.
  for (const std::string set :
       {"algorithm.advantage=reinforce_plus_plus", "algorithm.advantage=grpo_passk", "algorithm.advantage=opo",
        "algorithm.advantage=reinforce_plus_plus_baseline", "algorithm.policy_loss=vanilla",
        "algorithm.policy_loss=geo_mean", "algorithm.kl.estimator=low_var_kl", "algorithm.loss_agg=seq-mean-token-mean",
        "algorithm.policy_loss_options.clip_cov_ratio=0.01"}) {
    INFO(set);
    CHECK(run_tandem({"validate", d + "/c.yaml", "--set", set}, out).exit_code == 0);
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> verl_names = {
      {{"algorithm.advantage=ppo"}, "PPO is advantage: gae with policy_loss: ppo_clip here"},
      {{"algorithm.grpo_passk=1"}, "algorithm.grpo_passk"},
      {{"algorithm.advantage=opo", "algorithm.group_size=1"}, "advantage opo compares samples of one prompt"},
      {{"algorithm.kl.adaptive=true"}, "the adaptive coefficient adapts the KL penalty in the reward"},
      {{"algorithm.kl.adaptive=true", "algorithm.kl.in=reward", "algorithm.kl.coef=0"}, "needs kl.coef > 0"},
  };
  for (const auto& [sets, hint] : verl_names) {
    std::vector<std::string> args = {"validate", d + "/c.yaml"};
    for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
    INFO(sets[0]);
    fs::remove(out);
    CHECK(run_tandem(args, out).exit_code == 2);
    CHECK(read_text(out).find(hint) != std::string::npos);
  }
  // A path inside a whole value given with --set is the command line's: relative to the
  // current directory, and the error names the --set.
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml", "--set", "reward=[{name: x, plugin: libnot_here.so}]"}, out).exit_code ==
        2);
  CHECK(read_text(out).find("--set reward=[{name: x, plugin: libnot_here.so}]: reward.0.plugin: ") != std::string::npos);
  CHECK(read_text(out).find((fs::current_path() / "libnot_here.so").string()) != std::string::npos);
  // Inputs that are not regular files, or command-line values no option means.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused_lines = {
      {{"validate", "/dev/zero"}, "/dev/zero: cannot read the config file: it is a character device, not a regular file"},
      {{"validate", d + "/data/fifo.jsonl"}, "it is a FIFO (named pipe), not a regular file"},
      {{"validate", d}, d + ": cannot read the config file: it is a directory, not a regular file"},
      {{"validate", d + "/c.yaml", "--set", "reward[0.weight=2"},
       "--set reward[0.weight=2: key \"reward[0.weight\": a list index is written [N]"},
      {{"validate", d + "/c.yaml", "--set", "reward[0]weight=2"}, "expected . or [ after [0]"},
      {{"run", d + "/c.yaml", "--run-dir", ""}, "--run-dir: must not be empty"},
      {{"generate", "--model", "builtin:tiny", "--prompt", "1+1=", "--temperature", "nan"},
       "--temperature: must be a finite number, not nan"},
      {{"generate", "--model", "builtin:tiny", "--prompt", "1+1=", "--top-p", "nan"},
       "--top-p: must be a finite number, not nan"},
  };
  for (const auto& [line, expected] : refused_lines) {
    INFO(line.back());
    fs::remove(out);
    CHECK(run_tandem(line, out).exit_code == 2);
    CHECK_MESSAGE(read_text(out).find(expected) != std::string::npos, read_text(out));
  }
  // Issue 29: sizes that cannot fit are refused with the estimate, by validate and run.
  const std::vector<std::pair<std::string, std::string>> too_big = {
      {"algorithm.group_size=2147483648", "most of it the controller: a step's samples (data.batch_size x "
                                          "algorithm.group_size)"},
      {"data.batch_size=1000000000", "most of it the controller: a step's samples"},
      {"rollout.kv_cache_mb=10000000", "most of it the rollout workers: KV cache (rollout.kv_cache_mb)"},
  };
  for (const auto& [set, expected] : too_big) {
    INFO(set);
    for (const char* command : {"validate", "run"}) {
      fs::remove(out);
      std::vector<std::string> line = {command, d + "/c.yaml", "--set", set};
      if (std::string(command) == "run") line.insert(line.end(), {"--run-dir", d + "/run"});
      CHECK(run_tandem(line, out).exit_code == 2);
      CHECK_MESSAGE(read_text(out).find(expected) != std::string::npos, read_text(out));
    }
  }
  // A model whose config.json says a billion layers: refused before its weights are read.
  REQUIRE(run_tandem({"init-model", "--preset", "tiny", "--out", d + "/huge"}, out).exit_code == 0);
  {
    nlohmann::json model = nlohmann::json::parse(read_text(d + "/huge/config.json"));
    model["num_hidden_layers"] = 1000000000;
    write_text(d + "/huge/config.json", model.dump());
  }
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml", "--set", "model.path=" + d + "/huge"}, out).exit_code == 2);
  CHECK_MESSAGE(read_text(out).find("a model of 4.93e+13 parameters") != std::string::npos, read_text(out));
  // A config that fits says what it will hold.
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml"}, out).exit_code == 0);
  CHECK(read_text(out).find("validate: memory: a model of ") != std::string::npos);
  CHECK_FALSE(fs::exists(d + "/run"));
  // --help shows the defaults.
  fs::remove(out);
  CHECK(run_tandem({"generate", "--help"}, out).exit_code == 0);
  CHECK(read_text(out).find("--max-new-tokens INT:POSITIVE=64") != std::string::npos);
}

TEST_CASE("prompts over the limit are skipped and counted with data.on_long_prompt: skip") {
  TempDir dir;
  const std::string d = dir.path();
  write_text(d + "/data/long.jsonl",
             std::string(kRows) + "{\"prompt\": \"12345+67890=\", \"answer\": \"1\"}\n{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n");
  write_text(d + "/c.yaml",
             with(&SmallConfig::data, "{train: data/long.jsonl, batch_size: 4, max_prompt_length: 6, on_long_prompt: skip}")
                 .text());
  const std::string out = d + "/out.txt";
  CHECK(run_tandem({"validate", d + "/c.yaml"}, out).exit_code == 0);
  CHECK(read_text(out).find("3 rows from " + d + "/data/long.jsonl, prompts up to 4 tokens (limit 6), 1 rows skipped") !=
        std::string::npos);
  REQUIRE(run_tandem({"run", d + "/c.yaml", "--run-dir", d + "/run"}, out, 180).exit_code == 0);
  CHECK(read_text(out).find("1 of the 4 rows of " + d + "/data/long.jsonl are over the prompt limit and skipped") !=
        std::string::npos);
  for (const nlohmann::json& row : read_json_lines(d + "/run/metrics.jsonl")) {
    CHECK(row.at("data/skipped_long_prompts").get<double>() == 1);
    CHECK(row.at("prompt/length_mean").get<double>() == 4);  // the 12-token prompt never ran
  }
}

TEST_CASE("paths are relative to the config file and stored absolute; a finished run resumes as finished, extends, "
          "and replaces its policy; checkpoints are models") {
  TempDir dir;
  const std::string d = dir.path();
  write_text(d + "/project/data/rows.jsonl", kRows);
  SmallConfig config;
  config.model = "{path: \"builtin:tiny\", dtype: bfloat16}";
  config.data = "{train: ../data/rows.jsonl, batch_size: 4}";
  write_text(d + "/project/configs/c.yaml", config.text());
  const std::string out = d + "/out.txt";
  const std::string run = d + "/run";
  // The test's working directory is not the config's: the dataset is found all the same.
  REQUIRE(run_tandem({"run", d + "/project/configs/c.yaml", "--run-dir", run}, out, 180).exit_code == 0);
  CHECK(read_text(run + "/config.yaml").find("train: \"" + d + "/project/data/rows.jsonl\"") != std::string::npos);
  CHECK(read_json_lines(run + "/finished.json").at(0).at("steps") == 3);
  // The last step is checkpointed (every 2 would miss it), and a checkpoint is a model.
  REQUIRE(fs::exists(run + "/checkpoints/step_3/tokenizer.json"));
  CHECK(run_tandem({"generate", "--model", run + "/checkpoints/step_3", "--prompt", "1+2=", "--max-new-tokens", "2"},
                   out).exit_code == 0);
  // model.dtype: bfloat16 is the exported policy's dtype.
  CHECK(read_text(run + "/policy/config.json").find("\"torch_dtype\": \"bfloat16\"") != std::string::npos);
  CHECK(read_text(run + "/policy/model.safetensors").find("\"dtype\":\"BF16\"") != std::string::npos);
  struct stat first_policy {};
  REQUIRE(::stat((run + "/policy/model.safetensors").c_str(), &first_policy) == 0);

  // Moving the project does not matter any more: config.yaml holds absolute paths.
  fs::remove(out);
  CHECK(run_tandem({"resume", run}, out).exit_code == 0);
  CHECK(read_text(out).find(run + " is finished (3 steps;") != std::string::npos);
  CHECK(read_json_lines(run + "/metrics.jsonl").size() == 3);

  fs::remove(out);
  REQUIRE(run_tandem({"resume", run, "--set", "experiment.steps=5"}, out, 180).exit_code == 0);
  const std::vector<nlohmann::json> metrics = read_json_lines(run + "/metrics.jsonl");
  REQUIRE(metrics.size() == 5);
  CHECK(metrics.back().at("step") == 5);
  CHECK(read_json_lines(run + "/finished.json").at(0).at("steps") == 5);
  CHECK(read_text(run + "/config.yaml").find("steps: 5") != std::string::npos);
  struct stat second_policy {};  // a new export replaced the old one (the weights may not move: rewards are 0 here)
  REQUIRE(::stat((run + "/policy/model.safetensors").c_str(), &second_policy) == 0);
  CHECK(second_policy.st_ino != first_policy.st_ino);
  CHECK(fs::exists(run + "/checkpoints/step_5/model.safetensors"));
  CHECK_FALSE(fs::exists(run + "/policy.tmp"));
  CHECK_FALSE(fs::exists(run + "/policy.old"));
  // The progress line's ETA is about the steps run since resuming: one ETA, no disagreeing second.
  CHECK(read_text(out).find("eta") == std::string::npos);
  fs::remove(out);
  CHECK(run_tandem({"resume", run}, out).exit_code == 0);
  CHECK(read_text(out).find("is finished (5 steps;") != std::string::npos);
  // Extending over other rows would continue at other prompts: refused before anything starts.
  write_text(d + "/three.jsonl", std::string(kRows) + "{\"prompt\": \"2+2=\", \"answer\": \"4\"}\n");
  fs::remove(out);
  CHECK(run_tandem({"resume", run, "--set", "experiment.steps=7", "--set", "data.train=" + d + "/three.jsonl"}, out)
            .exit_code == 2);
  CHECK(read_text(out).find("was saved over 2 dataset rows, and the config now keeps 3") != std::string::npos);
  CHECK(read_text(run + "/config.yaml").find("steps: 5") != std::string::npos);  // unchanged

  // What a researcher reads: reward parts, lengths, clipping, advantages; sample completions.
  for (const nlohmann::json& row : metrics) {
    for (const char* key : {"reward/math_answer", "reward/math_answer/found", "response/clip_ratio",
                            "response/length_max", "response/length_min", "prompt/length_mean",
                            "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min",
                            "actor/ratio_max", "actor/ratio_min"}) {
      INFO(key);
      REQUIRE(row.contains(key));
      CHECK(std::isfinite(row.at(key).get<double>()));
    }
    CHECK(row.at("reward/math_answer").get<double>() == doctest::Approx(row.at("reward/mean").get<double>()));
    CHECK(row.at("response/length_min").get<double>() <= row.at("response/length_mean").get<double>());
    CHECK(row.at("response/length_mean").get<double>() <= row.at("response/length_max").get<double>());
  }
  const std::vector<nlohmann::json> samples = read_json_lines(run + "/samples.jsonl");
  REQUIRE(samples.size() == 5 * 4);  // logging.samples_per_step: 4
  for (const nlohmann::json& s : samples) {
    CHECK((s.at("prompt") == "1+2=" || s.at("prompt") == "4+4="));
    CHECK(s.at("response").is_string());
    CHECK(s.at("reward_parts").contains("math_answer/found"));
    CHECK(s.at("weight_version").get<int64_t>() == s.at("step").get<int64_t>() - 1);
  }
}

TEST_CASE("evaluation on data.val: before training, every eval_every steps and at the end, val/* metrics and "
          "val_samples.jsonl") {
  TempDir dir;
  const std::string d = dir.path();
  write_text(d + "/data/ok.jsonl", kRows);
  write_text(d + "/data/val.jsonl",
             "{\"prompt\": \"2+2=\", \"answer\": \"4\", \"data_source\": \"easy\"}\n"
             "{\"prompt\": \"3+5=\", \"answer\": \"8\", \"data_source\": \"hard\"}\n"
             "{\"prompt\": \"1+1=\", \"answer\": \"2\", \"data_source\": \"easy\"}\n");
  SmallConfig config;
  config.data = "{train: data/ok.jsonl, val: data/val.jsonl, batch_size: 4}";
  config.extra = "eval: {n: 2, temperature: 0}\n";
  config.experiment = "{name: eval, seed: 2, steps: 3, checkpoint_every: 0, eval_every: 2}";
  write_text(d + "/c.yaml", config.text());
  const std::string out = d + "/out.txt";
  REQUIRE(run_tandem({"run", d + "/c.yaml", "--run-dir", d + "/run"}, out, 180).exit_code == 0);
  const std::vector<nlohmann::json> metrics = read_json_lines(d + "/run/metrics.jsonl");
  REQUIRE(metrics.size() == 4);  // step 0 (before training), 1, 2, 3
  const std::vector<nlohmann::json> samples = read_json_lines(d + "/run/val_samples.jsonl");
  // Steps 0 (before training), 2 (eval_every) and 3 (the last, as verl does), 3 prompts, n 2.
  REQUIRE(samples.size() == 3 * 3 * 2);
  for (const nlohmann::json& s : samples) {
    CHECK(s.contains("ground_truth"));  // the row's answer, to read a wrong score against
    CHECK((s.at("data_source") == "easy" || s.at("data_source") == "hard"));
  }
  // The console says each evaluation's result.
  CHECK(read_text(out).find("tandem: validation at step 2: reward ") != std::string::npos);
  for (const nlohmann::json& row : metrics) {
    const int64_t step = row.at("step").get<int64_t>();
    INFO("step " << step);
    const bool evaluated = step == 0 || step == 2 || step == 3;
    CHECK(row.contains("val/accuracy") == evaluated);
    if (!evaluated) continue;
    for (const char* key : {"val/reward/mean", "val/math_answer", "val/math_answer/found", "val/pass@2",
                            "val/response/length_mean", "val/source/easy/accuracy", "val/source/hard/reward_mean"}) {
      CHECK(row.contains(key));
    }
    // The metrics are what val_samples.jsonl holds for that step.
    double correct = 0, total = 0, count = 0, easy_correct = 0, easy_count = 0;
    std::map<std::string, std::vector<nlohmann::json>> by_prompt;
    for (const nlohmann::json& s : samples) {
      if (s.at("step") != step) continue;
      if (s.at("data_source") == "easy") {
        easy_count += 1;
        easy_correct += s.at("reward").get<double>() >= 1.0 ? 1 : 0;
      }
      count += 1;
      total += s.at("reward").get<double>();
      correct += s.at("reward").get<double>() >= 1.0 ? 1 : 0;
      by_prompt[s.at("prompt").get<std::string>()].push_back(s);
    }
    REQUIRE(count == 6);
    CHECK(row.at("val/reward/mean").get<double>() == doctest::Approx(total / count));
    CHECK(row.at("val/accuracy").get<double>() == doctest::Approx(correct / count));
    REQUIRE(easy_count == 4);  // 2 prompts, n 2
    // A ratio of two small counts, computed in double on both sides: one rounding, far
    // inside Approx's default 1e-5 (scaled by the value) on any CPU.
    CHECK(row.at("val/source/easy/accuracy").get<double>() == doctest::Approx(easy_correct / easy_count));
    double solved = 0;
    for (const auto& [prompt, responses] : by_prompt) {
      REQUIRE(responses.size() == 2);
      CHECK(responses[0].at("response") == responses[1].at("response"));  // temperature 0: greedy
      solved += responses[0].at("reward").get<double>() >= 1.0 || responses[1].at("reward").get<double>() >= 1.0;
    }
    CHECK(row.at("val/pass@2").get<double>() == doctest::Approx(solved / 3));
  }
  // Evaluation needs validation prompts.
  fs::remove(out);
  CHECK(run_tandem({"validate", d + "/c.yaml", "--set", "data.val=\"\""}, out).exit_code == 2);
  CHECK(read_text(out).find("experiment.eval_every: evaluation needs validation prompts: set data.val") !=
        std::string::npos);
}
